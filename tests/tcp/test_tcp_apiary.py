"""The TCP engine under Apiary (examples/tcp_apiary.py) on Verilator, driven by scripted peers:
each connection's rings are segments the receive tile allocated through the memory manager and
sent to the transmit tile and the application with CAP_SEND; a slot's next connection frees the
previous pair; an application that breaks the rules is quarantined while the engine and the
other application go on.
"""

import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_script
from apiary.os.uapi import FaultKind, IpcDir
from apiary.sim import open_sim
from beehive.apps.kernel_ctl import fault_request, ipc_request, parse_reply
from harness.bench.tcp import _close_all
from harness.bench.tcp_peer import DESIGN_IP, DESIGN_MAC, PEER_IP, PEER_MAC, Peer, run_peers

pytestmark = pytest.mark.slow        # Verilator models of whole designs

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
tcp_apiary = load_script(EXAMPLES / "tcp_apiary.py")

TEST = dict(flows=4, ring=4096, rto=20_000, linger=30_000, syn_retries=2, max_retries=3)
W64 = pytest.param(64, marks=pytest.mark.xdist_group("tcp_apiary64"), id="64")


def counters(sim):
    return {k: v for k, v in sim.counters().items() if v}


@pytest.mark.parametrize("width", [W64])
def test_connections_get_fresh_segments_and_give_them_back(width):
    # (At 512 bits the same path is tested with the Reed-Solomon encoders, test_rs_apiary.py.)
    spare = 2
    with open_sim(tcp_apiary.design(width=width, apps=2, **TEST), "verilator") as sim:
        sim.run(300)
        # Out of reset the receive tile allocates its spare pairs: nothing is sent yet.
        c = counters(sim)
        assert c["mm_allocs"] == 2 * spare and "mm_derives" not in c
        # The engine hands out never-used slots first: the first four connections take the four
        # slots, the fifth and sixth the first two again.
        connections = TEST["flows"] + 2
        for k in range(connections):
            p = Peer(sim, sport=41000 + k)
            p.connect()
            data = bytes(range(256)) * 4 + bytes([k]) * 77
            assert p.exchange(data, cycles=3000) == data
            _close_all(sim, [p])
            c = counters(sim)
            # Each connection took a pair (and one more was allocated behind it); its send ring
            # went to tcp_tx, both rings to the application.
            assert c["mm_allocs"] == 2 * (spare + k + 1)
            assert c["mm_derives"] == 3 * (k + 1)
            assert c["tcp_rx_opened"] == k + 1 and c["tcp_rx_closed"] == k + 1
        # Two slots were reused: each of the last two connections freed the pair before it in
        # its slot (and the manager revoked the copies tcp_tx and the application held).
        assert c["mm_frees"] == 2 * 2
        assert c["app_bytes"] == connections * (1024 + 77)
        for tile in ("tcp_rx", "tcp_tx", "app"):
            assert f"{tile}_monitor_faults" not in c, c
        # The application asked the engine for each connection's peer, and was answered.
        assert sim.counters()["app_peer_timeouts"] == 0
        assert "tcp_rx_alloc_failed" not in c and "tcp_rx_grant_failed" not in c


def udp_request(sim, payload, sport=5555):
    sim.send(Ether(src=PEER_MAC, dst=DESIGN_MAC) / IP(src=PEER_IP, dst=DESIGN_IP)
             / UDP(sport=sport, dport=tcp_apiary.CTL_PORT) / payload)
    replies = []
    for _ in range(20):
        sim.run(500)
        frames = [Ether(f.data) for f in sim.received()]
        replies += [f for f in frames if UDP in f and f[UDP].dport == sport]
        if replies:
            return parse_reply(bytes(replies[0][UDP].payload))
    raise AssertionError("no reply from the control service")


@pytest.mark.parametrize("width", [W64])
def test_a_faulting_application_is_quarantined_and_the_other_keeps_going(width):
    with open_sim(tcp_apiary.design(width=width, apps=2, **TEST), "verilator") as sim:
        sim.run(300)
        a = Peer(sim, sport=42000, dport=7)
        b = Peer(sim, sport=42001, dport=8)
        for p in (a, b):
            p.connect()
            assert p.exchange(b"before", cycles=3000) == b"before"
        # Take away app's capability to send to tcp_tx: its next send request is a violation.
        app = sim.design.tiles["app"].at
        tx = sim.design.tiles["tcp_tx"].at
        reply = udp_request(sim, ipc_request(*app, IpcDir.OUT, *tx, grant=False))
        assert reply["status"] == 0, reply
        a.send_data(b"after")
        b.send_data(b"after")
        run_peers(sim, [a, b], 10_000)
        assert bytes(a.stream) == b"before"
        assert bytes(b.stream) == b"beforeafter"
        c = counters(sim)
        assert c["app_monitor_faults"] == 1 and "app1_monitor_faults" not in c
        entry = udp_request(sim, fault_request(0))
        assert (entry["x"], entry["y"], entry["kind"]) == (*app, FaultKind.NO_IPC_CAP)
        # The engine and the other application keep going: a new connection to app1 works.
        p = Peer(sim, sport=42002, dport=8)
        p.connect()
        assert p.exchange(b"still here", cycles=3000) == b"still here"
