"""Reed-Solomon over TCP under Apiary (examples/rs_apiary.py) on Verilator at 64 bits (at 512
bits: the TCP engine in tests/tcp/test_tcp_engine.py, the kernel in tests/os/test_apiary_fault.py,
the encoder tile alone in tests/apps/test_tcp_rs.py):
scripted clients on several connections get every request's parity right, bit for bit (the
Python model, itself checked against reedsolo); the scheduler gives the connections to the
encoders in turn; an encoder that stores out of bounds is quarantined while the other
connection's encoder keeps answering (the thesis's Fig. 3.3, in miniature).
"""

import pathlib

import pytest

from apiary.load import load_script
from apiary.os.uapi import FaultKind
from apiary.sim import open_sim
from harness.bench.rs import closed_loop, rs_service
from beehive.apps.kernel_ctl import fault_request
from harness.bench.tcp import _connect_all, _peers
from test_tcp_apiary import udp_request

pytestmark = pytest.mark.slow        # Verilator models of whole designs

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
rs_apiary = load_script(EXAMPLES / "rs_apiary.py")
SHARD = 128                           # 1 KiB requests: a multiple of the word at 64 and 512 bits


def sim_of(width, **params):
    return open_sim(rs_apiary.design(width=width, encoders=2, shard_bytes=SHARD, **params),
                    "verilator")


@pytest.mark.xdist_group("rs64")
def test_three_connections_over_two_encoders_get_their_parity():
    width = 64
    with sim_of(width) as sim:
        peers = _peers(sim, sim.design, 3, port=rs_apiary.RS_PORT)
        _connect_all(sim, peers)
        res = closed_loop(sim, peers, 3, rs_service(SHARD), seed=width)
        assert res["requests"] == 9            # closed_loop checked every reply's bytes
        c = {k: v for k, v in sim.counters().items() if v}
        # The scheduler gave connections 1 and 3 to the first encoder, 2 to the second.
        assert c["sched_flows"] == 3
        assert (c["app_flows"], c["app1_flows"]) == (2, 1)
        assert (c["app_requests"], c["app1_requests"]) == (6, 3)
        # Each connection's rings were allocated through the memory manager and sent on.
        assert c["mm_derives"] == 5 * 3
        assert not any(k.endswith("_faults") for k in c), c
        # Each encoder asked the engine for its connections' peers; the scheduler forwarded
        # every answer (none timed out).
        counters = sim.counters()
        assert counters["app_peer_timeouts"] == counters["app1_peer_timeouts"] == 0


@pytest.mark.xdist_group("rs64")
def test_an_encoder_out_of_bounds_is_quarantined_and_the_other_goes_on():
    after = 3                                  # the first encoder's 4th store is out of bounds
    with sim_of(64, fault=(0, after)) as sim:
        peers = _peers(sim, sim.design, 2, port=rs_apiary.RS_PORT)
        _connect_all(sim, peers)
        res = closed_loop(sim, peers, 0, rs_service(SHARD), until=sim.cycle + 60_000)
        # Which connection the faulty encoder serves is the scheduler's turn order, which the
        # handshakes' timing decides: its replies stop at the bad store; the other's go on.
        done = sorted(len(res["done_at"][p.sport]) for p in peers)
        assert done[0] == after and done[1] > 3 * after, done
        c = {k: v for k, v in sim.counters().items() if v}
        assert c["app_monitor_faults"] == 1 and "app1_monitor_faults" not in c
        assert c["errors_faults"] == 1
        # The fault log, read over UDP, names the encoder, the kind and the ring's size.
        entry = udp_request(sim, fault_request(0))
        assert (entry["x"], entry["y"]) == sim.design.tiles["app"].at
        assert entry["kind"] == FaultKind.OUT_OF_BOUNDS and entry["size"] == 2 * SHARD
