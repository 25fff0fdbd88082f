"""How a sweep's wall clock scales with Dask workers: measured at a few worker counts on this
machine, and projected to many from the measured per-job times.

    python -m harness.sweep.scaling benchmarks/scaling.py --workers 1,2 --project 100

Each run uses a fresh, empty result cache, so every job executes; the wall clock is from the
call to :func:`~harness.sweep.run.run_sweep` to its return, so it includes starting the embedded
cluster and its workers' first imports. The projection is a model, stated with its terms:

- ``start``: the cluster's start-up, measured (the wall clock of one worker minus the jobs'
  own seconds, which ran one after another there);
- the jobs, placed longest first on ``W`` workers (LPT scheduling, which Dask's queue
  approximates when every job is submitted at once), each taking the seconds measured for it
  with one worker;
- for a sweep larger than the one measured, its jobs repeated until there are ``jobs`` of them.

It leaves out what one machine cannot measure: the network (results are a few hundred bytes;
inputs are the design's path), a shared file system's latency, and each worker machine's own
Verilator build of a model (one per distinct design, minutes, where a single machine shares its
cache).
"""

import argparse
import heapq
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TextIO

from .run import Outcome, Progress, run_sweep
from .spec import Sweep


__all__ = ["Measured", "measure", "makespan", "project", "report", "main"]


@dataclass
class Measured:
    """One run of the sweep with ``workers`` workers."""
    workers: int
    wall: float
    job_seconds: list[float]
    failed: int

    @property
    def busy(self) -> float:
        """The jobs' own seconds, summed."""
        return sum(self.job_seconds)


def measure(sweep: Sweep, workers: int, stream: TextIO | None = None) -> Measured:
    """Run ``sweep`` on an embedded cluster of ``workers`` with an empty cache; what it took."""
    progress = Progress(len(sweep.tasks()), stream, live=False)     # (before the clock starts)
    with tempfile.TemporaryDirectory(prefix="apiary-scaling-") as cache:
        start = time.monotonic()
        outcomes: list[Outcome] = run_sweep(sweep, workers=workers, cache_dir=cache,
                                            progress=progress)
        wall = time.monotonic() - start
    return Measured(workers, wall, [o.seconds for o in outcomes], sum(not o.ok for o in outcomes))


def makespan(job_seconds: list[float], workers: int) -> float:
    """The time ``workers`` take for jobs of ``job_seconds``, placed longest first, each on the
    worker that is free first (LPT)."""
    free = [0.0] * max(1, workers)
    for seconds in sorted(job_seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def project(serial: Measured, workers: int, jobs: int | None = None) -> float:
    """Projected wall clock of ``jobs`` jobs (default: the sweep's own) on ``workers`` workers,
    from ``serial`` (a run with one worker): its start-up plus the LPT makespan of its job times,
    repeated to ``jobs``."""
    times = serial.job_seconds
    jobs = jobs or len(times)
    repeated = (times * math.ceil(jobs / len(times)))[:jobs]
    return max(0.0, serial.wall - serial.busy) + makespan(repeated, workers)


def report(name: str, runs: list[Measured], project_to: int, project_jobs: int) -> str:
    """The measurement and the projection as Markdown."""
    serial = next(r for r in runs if r.workers == 1)
    n = len(serial.job_seconds)
    start = max(0.0, serial.wall - serial.busy)
    times = sorted(serial.job_seconds)
    lines = [
        f"Sweep {name!r}: {n} jobs; with one worker each job took {times[0]:.1f} to "
        f"{times[-1]:.1f} s (mean {serial.busy / n:.1f} s), and the cluster's start-up and "
        f"scheduling {start:.1f} s.",
        "",
        "| workers | wall clock (s) | speed-up over 1 worker | jobs' own seconds, summed | "
        "projected by the model (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(f"| {run.workers} | {run.wall:.1f} | {serial.wall / run.wall:.2f} | "
                     f"{run.busy:.1f} | {project(serial, run.workers):.1f} |")
    lines += [
        "",
        f"Projected for {project_jobs} jobs like these (the {n} repeated):",
        "",
        "| workers | projected wall clock (s) | speed-up over 1 worker |",
        "|---:|---:|---:|",
    ]
    one = project(serial, 1, project_jobs)
    for w in sorted({1, *[r.workers for r in runs], project_to}):
        t = project(serial, w, project_jobs)
        lines.append(f"| {w} | {t:.1f} | {one / t:.1f} |")
    if any(r.failed for r in runs):
        lines += ["", "Some jobs failed: " + ", ".join(
            f"{r.failed} with {r.workers} workers" for r in runs if r.failed) + "."]
    return "\n".join(lines) + "\n"


def _counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected worker counts such as 1,2, not {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    from .cli import load_sweep
    parser = argparse.ArgumentParser(prog="python -m harness.sweep.scaling",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", metavar="FILE", help="a sweep file (`sweep = Sweep(...)`)")
    parser.add_argument("--workers", type=_counts, default=[1, 2], metavar="N,N",
                        help="worker counts to measure (1 is always among them; default 1,2)")
    parser.add_argument("--project", type=int, default=100, metavar="W",
                        help="workers to project to (default 100)")
    parser.add_argument("--project-jobs", type=int, default=1000, metavar="N",
                        help="jobs in the projected sweep (default 1000)")
    args = parser.parse_args(argv)
    sweep = load_sweep(args.file)
    runs = []
    for workers in sorted({1, *args.workers}):
        print(f"{len(sweep.tasks())} jobs on {workers} worker(s)...", file=sys.stderr, flush=True)
        runs.append(measure(sweep, workers))
    sys.stdout.write(report(sweep.name, runs, args.project, args.project_jobs))
    return 1 if any(r.failed for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
