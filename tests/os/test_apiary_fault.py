"""examples/apiary_fault.py end to end: two untrusted memory applications behind monitors,
reached over UDP; one is made to fault mid-run. Its requests stop being answered from the fault
on while the other keeps its rate (the thesis's Fig. 3.3, tabulated per window of requests),
the fault log read over UDP names the tile, the kind and the address, and a release over UDP
brings the faulty tile back with a fresh segment. Plus the design-level checks of trust:
grants, a missing kernel. (Amaranth's simulator takes over ten minutes for this 15-tile design;
the monitor, manager and error manager are tested on it tile by tile.)"""

import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.design import Design, DesignError
from apiary.load import load_design
from apiary.os.uapi import FaultKind
from apiary.sim import open_sim
from apiary.tiles.forward import ForwardTile
from beehive.apps.kernel_ctl import fault_request, parse_reply, release_request
from beehive.apps.mem_server import OP_READ, OP_WRITE, mem_request, parse_mem_reply


ROOT = pathlib.Path(__file__).resolve().parents[2]
PORTS = {"app_a": 7001, "app_b": 7002}
CTL = 7100
SEGMENT = 4096
MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"


def udp(payload, dport, sport=40000):
    return bytes(Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4)
                 / UDP(sport=sport, dport=dport) / bytes(payload))


def fault_design(width):
    return load_design(str(ROOT / "examples" / "apiary_fault.py"), width=width, segment=SEGMENT)


def replies(sim):
    """``[(source port, parsed reply)]`` of every UDP frame the design sent since last asked."""
    out = []
    for frame in sim.received(clear=True):
        pkt = Ether(frame.data)
        if UDP in pkt:
            payload = bytes(pkt[UDP].payload)
            port = pkt[UDP].sport
            out.append((port, parse_reply(payload) if port == CTL
                        else parse_mem_reply(payload)))
    return out


def run_windows(sim, windows, fault_at=None):
    """Each window: one write and one read to each application (its own data at its own
    offset); in window ``fault_at`` app_a first gets a write that runs past its segment.
    Returns the replies per window, ``{app: count}``, and every read's data."""
    table, data = [], {}
    for k in range(windows):
        if k == fault_at:
            sim.send(udp(mem_request(OP_WRITE, SEGMENT - 4, b"past the end"),
                         dport=PORTS["app_a"]))
        for app, port in PORTS.items():
            payload = f"{app} window {k}".encode()
            sim.send(udp(mem_request(OP_WRITE, 64 * k, payload), dport=port))
            sim.run(until_idle=True)
            sim.send(udp(mem_request(OP_READ, 64 * k, len(payload)), dport=port))
            sim.run(until_idle=True)
        got = replies(sim)
        table.append({app: sum(1 for p, _ in got if p == port) for app, port in PORTS.items()})
        for port, reply in got:
            if reply["op"] == OP_READ:
                data.setdefault(port, []).append(reply["data"])
    return table, data


def check_isolation(sim, windows=6, fault_at=3):
    table, data = run_windows(sim, windows, fault_at)
    # Fig. 3.3's shape: app_a answers both requests per window until the fault, then nothing;
    # app_b never misses one.
    assert [row["app_a"] for row in table] == [2] * fault_at + [0] * (windows - fault_at)
    assert [row["app_b"] for row in table] == [2] * windows
    assert data[PORTS["app_b"]] == [f"app_b window {k}".encode() for k in range(windows)]
    assert data[PORTS["app_a"]] == [f"app_a window {k}".encode() for k in range(fault_at)]
    counters = sim.counters()
    assert counters["app_a_monitor_quarantined"] == 1
    assert counters["app_b_monitor_quarantined"] == 0
    assert counters["app_a_monitor_faults"] == 1 and counters["app_b_monitor_faults"] == 0
    assert counters["errors_faults"] == 1
    assert counters["mm_allocs"] == 2

    sim.send(udp(fault_request(0), dport=CTL))
    sim.run(until_idle=True)
    (port, entry), = replies(sim)
    assert (entry["status"], entry["total"], entry["x"], entry["y"]) == (0, 1, 3, 0)
    assert entry["kind"] == FaultKind.OUT_OF_BOUNDS
    assert (entry["addr"], entry["size"], entry["msg_type"]) == (SEGMENT - 4, 12, 20)
    sim.send(udp(fault_request(1), dport=CTL))
    sim.run(until_idle=True)
    assert replies(sim)[0][1]["status"] == 4              # NO_ENTRY

    # Release: the monitor resets app_a, frees its segment, lifts the quarantine; app_a
    # allocates again and serves.
    sim.send(udp(release_request(3, 0), dport=CTL))
    sim.run(until_idle=True)
    sim.run(400)
    assert replies(sim)[0][1]["status"] == 0
    table, data = run_windows(sim, 1)
    assert table == [{"app_a": 2, "app_b": 2}]
    counters = sim.counters()
    assert counters["app_a_monitor_quarantined"] == 0
    assert counters["mm_allocs"] == 3 and counters["mm_frees"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 512])
def test_a_faulting_tile_is_isolated_and_released_verilator(width):
    with open_sim(fault_design(width), "verilator", idle_cycles=300) as sim:
        sim.run(300)
        check_isolation(sim)


def test_untrusted_tiles_need_a_kernel_and_grants():
    d = Design("trust", cols=3, rows=1, width=64)
    d.add("a", ForwardTile, at=(0, 0), trusted=False)
    d.add("b", ForwardTile, at=(1, 0))
    d.route("a", "b")
    with pytest.raises(DesignError) as e:
        d.check()
    text = str(e.value)
    assert "no IPC capability for 'b'" in text and "d.allow('a', 'b')" in text
    assert "need an Apiary kernel" in text

    d = fault_design(64)
    d.grants = [g for g in d.grants if g.src != "app_b"]
    with pytest.raises(DesignError, match=r"route app_b → udp_tx .* untrusted tile 'app_b'"):
        d.check()


def test_monitors_get_the_designs_capabilities():
    d = fault_design(64)
    out, into = d.ipc_caps("app_a")
    assert out == [(2, 1, 8)]                     # udp_tx, LOCAL0
    assert into == [(2, 0, 8)]                    # from udp_rx
    assert d.untrusted() == ["app_a", "app_b"]
