"""The figures of docs/performance.md's "Enzian's methods" section:
``PYTHONPATH=. python tests/sim/enzian_bench.py``.

* what checking taps cost a pysim run (UDP echo, 64 bits, every tile's output tapped);
* the UDP echo's golden trace, hop by hop, at 64 and 512 bits;
* the cluster's lockstep cost on Verilator (two UDP echo boards, links of 1 to 1000 cycles);
* the VR group with witnesses on two Verilator boards, one link lossy.
"""

import importlib.util
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))

from apiary.sim import open_sim                      # noqa: E402
from apiary.sim.cluster import Cluster               # noqa: E402
from apiary.sim.trace import NocTrace                # noqa: E402
from beehive.vr.kv import reference_results, workload   # noqa: E402

import test_cluster as tc                            # noqa: E402
import test_noc_trace as tt                          # noqa: E402

spec = importlib.util.spec_from_file_location("udp_echo", ROOT / "examples/udp_echo.py")
udp_echo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(udp_echo)


def tap_cost(repeat=5, frames=20, cycles=3000):
    out = {}
    for tapped in (False, True):
        times = []
        for _ in range(repeat):
            with open_sim(udp_echo.design(width=64), "pysim") as sim:
                trace = NocTrace(sim) if tapped else None
                sim.send_many([tt.REQUEST] * frames)
                sim.run(1)
                start = time.process_time()         # CPU time: the machine is shared
                sim.run(cycles)
                times.append(time.process_time() - start)
                count = len(trace.messages()) if trace else 0
        out[tapped] = (cycles / statistics.median(times), count)
    return out


def golden_hops(width):
    with open_sim(udp_echo.design(width=width), "pysim") as sim:
        trace = NocTrace(sim)
        sim.send(tt.REQUEST)
        sim.run(150)
        sent, reply = sim.sent()[0], sim.received()[0]
    messages = trace.messages()
    hops = [(m.tile, m.cycle_first - sent.cycle_last) for m in messages]
    return hops, reply.cycle_first - sent.cycle_last


def lockstep_cost(latencies=(1, 10, 100, 1000), cycles=200_000):
    """Cycles per second of two idle echo boards joined by one link, and (latency ``None``)
    of one board alone, for the cost of the lockstep itself."""
    mac, ip = tc.board_address(0)
    with open_sim(udp_echo.design(width=64, mac=mac, ipv4=ip), "verilator") as sim:
        start = time.perf_counter()
        sim.run(cycles)
        rows = [(None, cycles / (time.perf_counter() - start))]
    for latency in latencies:
        cluster = Cluster()
        for i in range(2):
            mac, ip = tc.board_address(i)
            cluster.add_board(f"b{i}", open_sim(udp_echo.design(width=64, mac=mac, ipv4=ip),
                                                "verilator"))
        cluster.link("b0", "b1", latency=latency)
        start = time.perf_counter()
        cluster.run(cycles)
        rows.append((latency, cycles / (time.perf_counter() - start)))
    return rows


def vr_lossy(ops=40):
    cluster, groups, links, _ = tc.vr_cluster("verilator", loss=0.15)
    workloads = [list(workload(21, ops, keys=8)), list(workload(22, ops, keys=8))]
    start = time.perf_counter()
    assert tc.interleaved(groups, workloads) == [reference_results(w) for w in workloads]
    seconds = time.perf_counter() - start
    cycles = [sorted(e.cycles for e in link.exchanges if e.cycles is not None)
              for link in links]
    counts = cluster.links[2].counts.values()
    lost = (sum(c.lost for c in counts), sum(c.frames for c in counts))
    return groups, cycles, lost, cluster.cycle, seconds


if __name__ == "__main__":
    for tapped, (rate, count) in tap_cost().items():
        print(f"pysim udp_echo 64: {'tapped' if tapped else 'plain '} {rate:.0f} cycles/s, "
              f"{count} messages checked")
    for width in (64, 512):
        hops, total = golden_hops(width)
        print(f"golden trace {width}: {hops}; reply's first word {total} cycles after the "
              f"request's last")
    for latency, rate in lockstep_cost():
        what = "one board alone" if latency is None else f"2 boards, link latency {latency}"
        print(f"verilator udp_echo 64, {what}: {rate:.0f} cycles/s")
    groups, cycles, lost, total, seconds = vr_lossy()
    for i, (g, c) in enumerate(zip(groups, cycles)):
        print(f"VR board w{i}: {g.stats}, round trips min {c[0]} median "
              f"{statistics.median(c)} max {c[-1]} cycles")
    print(f"lossy link: {lost[0]} of {lost[1]} frames lost; {total} cycles in {seconds:.1f} s")
