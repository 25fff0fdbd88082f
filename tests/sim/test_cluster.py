"""Several boards in one simulation: link latency lands on exactly the cycles it should,
seeded loss is reproducible, and the VR group completes its workloads with its witnesses on
separate boards reached through a switch (with loss: on the replica's votes)."""

import importlib.util
import itertools
import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.sim import SimError, open_sim
from apiary.sim.cluster import Cluster
from apiary.sim.trace import NocTrace
from beehive.model import echo_reply
from beehive.vr.group import Group, run_workload
from beehive.vr.kv import reference_results, workload
from beehive.vr.links import SimWitness

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("udp_echo", ROOT / "examples/udp_echo.py")
udp_echo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(udp_echo)

HOST_MAC, HOST_IP = "02:00:00:00:00:01", "10.0.0.1"


def board_address(i):
    return f"02:00:00:00:01:{i:02x}", f"10.0.1.{i + 2}"


def request(i, n=0):
    mac, ip = board_address(i)
    return (Ether(src=HOST_MAC, dst=mac) / IP(src=HOST_IP, dst=ip)
            / UDP(sport=4000 + n, dport=7) / f"to board {i}, #{n}".encode())


def echo_cluster(latencies, *, loss=0.0, seed=0, boards=2):
    """``boards`` UDP echo boards (64 bits, pysim) and a host, all on a switch; the host's
    link has latency ``latencies[0]``, board *i*'s ``latencies[i + 1]`` (and ``loss``)."""
    cluster = Cluster()
    for i in range(boards):
        mac, ip = board_address(i)
        cluster.add_board(f"b{i}", open_sim(udp_echo.design(width=64, mac=mac, ipv4=ip),
                                            "pysim", idle_cycles=100))
    host = cluster.add_host("host")
    cluster.add_switch("sw")
    cluster.link("host", "sw", latency=latencies[0])
    for i in range(boards):
        cluster.link(f"b{i}", "sw", latency=latencies[i + 1], loss=loss, seed=seed)
    return cluster, host


def test_link_latency_lands_on_the_exact_cycles():
    """A reply comes back exactly twice the path's latencies after what one board alone
    takes, from the request's first word in to the reply's last word out."""
    mac, ip = board_address(0)
    with open_sim(udp_echo.design(width=64, mac=mac, ipv4=ip), "pysim") as sim:
        sim.send(request(0))
        sim.run(150)
        alone = sim.received()[0].cycle_last - sim.sent()[0].cycle_first
    cluster, host = echo_cluster([20, 30, 55])
    host.send(request(0))
    host.send(request(1))
    cluster.run()
    got = {f.data: f.cycle_last for f in host.received()}
    # Board 1 first takes the flooded request for board 0 (its words, then drops it).
    behind = {0: 0, 1: -(-len(request(0)) // 8)}
    for i, path in ((0, 20 + 30), (1, 20 + 55)):
        mac, ip = board_address(i)
        reply = echo_reply(request(i), mac=mac, ipv4=ip)[0]
        assert got[reply] == 2 * path + alone + behind[i], i
    # The switch learned the host from its first frame: each reply went to the host only,
    # while the host's frames were flooded to both boards (each board dropped the other's).
    sw_to = {link.b: link.counts[(link.b, link.a)].frames for link in cluster.links}
    assert sw_to == {"sw:0": 2, "sw:1": 2, "sw:2": 2}
    counters = [cluster.boards[f"b{i}"].counters() for i in range(2)]
    assert [c["eth_rx_not_for_us"] for c in counters] == [1, 1]


def test_seeded_loss_is_reproducible_and_counted():
    def run(seed):
        cluster, host = echo_cluster([10, 10], loss=0.4, seed=seed, boards=1)
        for n in range(8):
            host.send(request(0, n))
            cluster.run(80)
        cluster.run()
        counts = cluster.links[1].counts
        return [f.data for f in host.received()], counts
    replies, counts = run(3)
    again, _ = run(3)
    other, _ = run(4)
    to_board, from_board = counts[("sw:1", "b0:eth")], counts[("b0:eth", "sw:1")]
    assert replies == again != other
    assert to_board.frames == 8 and 0 < to_board.lost < 8
    assert from_board.frames == to_board.delivered
    assert len(replies) == from_board.delivered


def vr_cluster(backend, loss=0.0, idle_cycles=150):
    """Two VR witness boards (examples/vr_witness.py, each with its own addresses) and the
    leader's host on a switch; every board's NoC traffic checked on pysim."""
    cluster = Cluster()
    traces = []
    for i in range(2):
        mac, ip = board_address(i)
        sim = open_sim(load_design(str(ROOT / "examples/vr_witness.py"), width=64, mac=mac,
                                   ipv4=ip), backend, idle_cycles=idle_cycles)
        if backend == "pysim":
            traces.append(NocTrace(sim))
        cluster.add_board(f"w{i}", sim)
    leader = cluster.add_host("leader")
    cluster.add_switch("sw")
    cluster.link("leader", "sw", latency=25)
    cluster.link("w0", "sw", latency=40)
    cluster.link("w1", "sw", latency=60, loss=loss, seed=11)
    links = [SimWitness(leader, 9000, mac=board_address(i)[0], ipv4=board_address(i)[1])
             for i in range(2)]
    return cluster, [Group(link) for link in links], links, traces


def interleaved(groups, workloads):
    """Run the groups' workloads one op of each in turn; the results of each."""
    results = [[] for _ in groups]
    done = object()
    runs = (run_workload(g, ops) for g, ops in zip(groups, workloads))
    for step in itertools.zip_longest(*runs, fillvalue=done):
        for r, out in zip(results, step):
            if out is not done:
                r.append(out)
    return results


def test_vr_witnesses_on_two_boards_serve_their_groups():
    cluster, groups, links, traces = vr_cluster("pysim")
    workloads = [list(workload(5, 1, keys=2)), list(workload(6, 1, keys=2))]
    assert interleaved(groups, workloads) == [reference_results(w) for w in workloads]
    assert [g.stats["witness_acks"] for g in groups] == [1, 1]
    # Each PREPARE crossed two links each way: the round trip is at least twice their sum.
    for link, path in zip(links, (25 + 40, 25 + 60)):
        cycles = [e.cycles for e in link.exchanges if e.cycles is not None]
        assert len(cycles) == 1 and min(cycles) > 2 * path
    # Both boards ran the whole time, in step, and the checkers saw every message pass.
    assert {sim.cycle for sim in cluster.boards.values()} == {cluster.cycle}
    # PREPARE: 3 messages up the stack, 3 down; COMMIT: 3 up.
    assert [len(t.messages()) for t in traces] == [9, 9]
    assert [b.counters()["vr0_prepares"] for b in cluster.boards.values()] == [1, 1]


@pytest.mark.slow
def test_vr_groups_complete_over_a_lossy_link_verilator():
    """With 15 % of the frames on the second witness's link lost, its group still completes
    every op (on the replica's votes when the witness's answer is lost); the first is
    untouched."""
    cluster, groups, links, _ = vr_cluster("verilator", loss=0.15)
    workloads = [list(workload(21, 40, keys=8)), list(workload(22, 40, keys=8))]
    assert interleaved(groups, workloads) == [reference_results(w) for w in workloads]
    lossy = cluster.links[2]
    lost = sum(c.lost for c in lossy.counts.values())
    assert lost > 0
    assert groups[0].stats["witness_acks"] == 40 and groups[0].stats["witness_misses"] == 0
    assert groups[1].stats["witness_misses"] > 0
    assert groups[1].stats["witness_acks"] + groups[1].stats["witness_misses"] >= 40


def test_bad_clusters_are_one_readable_error():
    cluster = Cluster()
    host = cluster.add_host("h")
    with pytest.raises(SimError, match="host 'h' has no link to send on"):
        host.send(b"\0" * 60)
    with pytest.raises(SimError, match="latency is a whole number of cycles, at least 1"):
        cluster.link("h", "h", latency=0)
    with pytest.raises(SimError, match="no cluster end 'nope'; members are h"):
        cluster.link("h", "nope", latency=5)
    with pytest.raises(SimError, match="already has a member called 'h'"):
        cluster.add_switch("h")
    cluster.add_host("g")
    cluster.link("h", "g", latency=5)
    with pytest.raises(SimError, match="h is already linked to g"):
        cluster.link("h", "g", latency=5)
    with pytest.raises(SimError, match="loss is a probability"):
        cluster.add_host("k")
        cluster.link("k", "g", latency=5, loss=1.5)


@pytest.mark.slow
def test_the_docs_snippet_runs(monkeypatch):
    import re
    monkeypatch.chdir(ROOT)
    text = (ROOT / "docs" / "enzian.md").read_text()
    snippet = [s for s in re.findall(r"```python\n(.*?)```", text, re.S) if "Cluster()" in s]
    assert len(snippet) == 1
    exec(compile(snippet[0], "docs/enzian.md", "exec"), {})
