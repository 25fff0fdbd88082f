"""The VR witness benchmark: ``python -m harness.vr_bench [--shards 1,2,3,4] [--ops N]``.

For each shard count it simulates ``examples/vr_witness.py`` (Verilator by default, 512-bit data
plane, 250 MHz: the Beehive paper's setting) and measures, cycle-accurately:

1. **The group, closed loop.** One :class:`~beehive.vr.group.Group` per shard (leader and
   replica in this process, the witness the simulated tile) runs ``ops`` operations of the
   seeded 90/10 workload, shards in turn, one request outstanding; every result is checked
   against a dict. Each PREPARE's round trip at the witness is its frame's first word into the
   design to its reply's last word out (the cycles the FPGA adds to an op).
2. **All shards at once.** One PREPARE to every shard's witness in the same burst (one
   closed-loop client per shard, as the paper's), ``ops`` rounds: a round lasts from the first
   frame's first word in to the last reply's last word out, so ``shards / round`` is the
   witnesses' closed-loop rate.

Simulated time only covers the FPGA: the leader, the replica, the clients, the network and the
kernels between them take no time here, while the paper's figures (printed beside, Table 4.3)
are measured at the clients and are dominated by them. The comparison says how much of an op's
time the witness takes, not which system is faster.
"""

import argparse
import pathlib
import statistics
import sys
import warnings
from typing import Any

from apiary.cli import add_clock_argument
from apiary.load import load_design
from apiary.sim import default_clock_mhz, open_sim
from apiary.terminal import markdown_table
from beehive.apps.vr_witness import VrMessage, VrType, request_digest
from beehive.vr.group import Group, run_workload
from beehive.vr.kv import reference_results, workload
from beehive.vr.links import SimWitness, udp_replies


__all__ = ["measure", "render", "main", "BEEHIVE_TABLE_4_3"]

#: The Beehive paper's Table IV (thesis Table 4.3), FPGA witness: kops/s and median µs at the
#: clients, per shard count.
BEEHIVE_TABLE_4_3 = {1: (35, 99), 2: (54, 130), 3: (66, 102), 4: (83, 118)}
BASE_PORT = 9000
DESIGN = pathlib.Path(__file__).resolve().parents[1] / "examples" / "vr_witness.py"
#: The design scripts the benchmark builds (part of a sweep job's source stamp).
SCRIPTS = (DESIGN,)


def _percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def measure(shards: int, ops: int, *, width: int = 512, backend: str = "verilator",
            seed: int = 1) -> dict[str, Any]:
    """Both measurements for ``shards`` shards, ``ops`` operations each (see the module
    docstring): ``{"shards", "ops", "round_trip": [cycles], "rounds": [cycles]}``.

    Raises
    ------
    AssertionError
        If a result differs from the dict's, or a witness does not acknowledge a PREPARE.
    """
    design = load_design(str(DESIGN), width=width, shards=shards)
    with open_sim(design, backend, idle_cycles=150) as sim:
        links = [SimWitness(sim, BASE_PORT + s) for s in range(shards)]
        groups = [Group(link, shard=s) for s, link in enumerate(links)]
        loads = [list(workload(seed + s, ops)) for s in range(shards)]
        runs = [run_workload(g, w) for g, w in zip(groups, loads)]
        results: list[list[bytes | None]] = [[] for _ in range(shards)]
        for _ in range(ops):                                    # shards in turn
            for s, run in enumerate(runs):
                results[s].append(next(run))
        for s, run in enumerate(runs):
            results[s] += list(run)                             # the final heartbeat
            assert results[s] == reference_results(loads[s]), f"shard {s}: wrong results"
        round_trip = [e.cycles for link in links for e in link.exchanges if e.cycles is not None]

        rounds = []
        for k in range(ops):
            frames = []
            for s, group in enumerate(groups):
                body = loads[s][k].encode()
                prepare = VrMessage(VrType.PREPARE, shard=s, view=group.view,
                                    op=group.op + 1 + k, commit=group.commit, client=1000,
                                    request=k + 1, digest=request_digest(body))
                frames.append(links[s].frame(prepare.pack()))
            sim.send_many(frames)
            sim.run()
            sent = sim.sent(clear=True)
            got = [(VrMessage.unpack(payload), cycle)
                   for port, payload, cycle in udp_replies(sim) if port >= BASE_PORT]
            assert sorted(m.shard for m, _ in got) == list(range(shards)) and all(
                m.type is VrType.PREPARE_OK for m, _ in got), f"round {k}: {got}"
            rounds.append(max(c for _, c in got) - sent[0].cycle_first)
    return {"shards": shards, "ops": ops, "round_trip": round_trip, "rounds": rounds}


def render(rows: list[dict[str, Any]], clock_mhz: float, width: int) -> str:
    head = ["shards", "witness round trip, cycles (median / p99)",
            f"µs at {clock_mhz:g} MHz (median)",
            "all shards at once: cycles per round (median)", "kops/s (simulated)",
            "Beehive Table 4.3: kops/s, median µs (at the clients)"]
    body = []
    for r in rows:
        rt = r["round_trip"]
        per_round = statistics.median(r["rounds"])
        kops = r["shards"] / per_round * clock_mhz * 1e3
        paper = BEEHIVE_TABLE_4_3.get(r["shards"])
        body.append([str(r["shards"]), f"{statistics.median(rt):g} / {_percentile(rt, 0.99)}",
                     f"{statistics.median(rt) / clock_mhz:.3f}", f"{per_round:g}",
                     f"{kops:,.0f}", f"{paper[0]}, {paper[1]}" if paper else "-"])
    return (f"VR witness, examples/vr_witness.py, {width}-bit data plane, {clock_mhz:g} MHz, "
            f"{rows[0]['ops']} ops per shard (seeded 90/10 workload; every result checked)\n\n"
            + markdown_table(head, body))


def main(argv: list[str] | None = None) -> int:
    from amaranth.hdl import UnusedElaboratable
    # A cached Verilator model leaves the design's Amaranth objects unelaborated.
    warnings.filterwarnings("ignore", category=UnusedElaboratable)
    parser = argparse.ArgumentParser(prog="python -m harness.vr_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="1,2,3,4", metavar="N,N,...",
                        help="shard counts to measure (default 1,2,3,4; at most 8)")
    parser.add_argument("--ops", type=int, default=200, metavar="N",
                        help="operations per shard (default 200)")
    parser.add_argument("--width", type=int, default=512, help="data-plane width (default 512)")
    parser.add_argument("--backend", choices=("verilator", "pysim"), default="verilator")
    parser.add_argument("--seed", type=int, default=1)
    add_clock_argument(parser, "clock that cycles convert to time at")
    args = parser.parse_args(argv)
    try:
        shard_counts = [int(s) for s in args.shards.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--shards takes comma-separated counts, not {args.shards!r}")
    if args.ops < 1 or not shard_counts or not all(1 <= s <= 8 for s in shard_counts):
        parser.error("--ops must be at least 1 and every shard count from 1 to 8")
    clock_mhz = args.clock_mhz or default_clock_mhz(args.width)
    rows = [measure(s, args.ops, width=args.width, backend=args.backend, seed=args.seed)
            for s in shard_counts]
    print(render(rows, clock_mhz, args.width))
    return 0


if __name__ == "__main__":
    sys.exit(main())
