"""Contexts in a whole design (examples/tcp_contexts.py, 64 bits, Verilator): eight TCP
connections at once over two echo copies that keep no connection between turns; every byte
comes back in order on its own connection, both copies serve, connections move between them
(their state travelling in context blocks through the context memory), and all eight close.
Trusted, and under Apiary (every tile of the engine, the scheduler and the copies behind a
monitor; the blocks in a kernel segment, each connection's rings sent to both copies). The
scheduler alone, with scripted workers, is tested in test_contexts.py; the echo copy's turns
here."""

import pathlib

import pytest

from apiary.load import load_script
from apiary.sim import open_sim
from harness.bench.tcp import _close_all
from harness.bench.tcp_peer import Peer, run_peers

pytestmark = pytest.mark.slow

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
tcp_contexts = load_script(EXAMPLES / "tcp_contexts.py")

TEST = dict(flows=8, ring=4096, rto=20_000, linger=30_000, syn_retries=2, max_retries=3)


@pytest.mark.parametrize("apiary", [False, True], ids=["trusted", "apiary"])
def test_eight_connections_over_two_copies_echo_every_byte(apiary):
    design = tcp_contexts.design(width=64, chunk=512, apiary=apiary, **TEST)
    with open_sim(design, "verilator") as sim:
        sim.run(300)
        peers = [Peer(sim, sport=43000 + k) for k in range(8)]
        for p in peers:
            p.connect()
        sent = {}
        for k, p in enumerate(peers):
            data = bytes((k * 41 + i * 7) % 251 for i in range(600 + 300 * k))
            sent[p.sport] = data
            for i in range(0, len(data), p.mss):
                p.send_data(data[i:i + p.mss])
        for _ in range(40):
            run_peers(sim, peers, 2000)
            if all(len(p.stream) >= len(sent[p.sport]) for p in peers):
                break
        for p in peers:
            assert bytes(p.stream) == sent[p.sport], p.sport
        _close_all(sim, peers)
        c = sim.counters()
        total = sum(map(len, sent.values()))
        assert c["app_bytes"] + c["app1_bytes"] == total
        assert c["app_bytes"] > 0 and c["app1_bytes"] > 0
        assert c["app_turns"] + c["app1_turns"] == c["sched_resumes"] == c["sched_yields"]
        assert c["sched_migrations"] > 0
        assert c["app_closed"] + c["app1_closed"] == 8
        assert c["sched_overflow"] == c["sched_bad_yield"] == c["sched_mem_errors"] == 0
        assert c["tcp_rx_closed"] == 8
        if apiary:
            for tile in ("tcp_rx", "tcp_tx", "sched", "app", "app1"):
                assert f"{tile}_monitor_faults" not in c or c[f"{tile}_monitor_faults"] == 0
            assert c["sched_alloc_failed"] == c["sched_grant_failed"] == 0
            # Each connection's two rings went to both copies.
            assert c["mm_derives"] >= 8 * (1 + 2 * 2)
