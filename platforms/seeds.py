"""Place and route with several nextpnr seeds at once, as jobs of a sweep (Dask), keeping the best.

Placement is where an ECP5 build's Fmax is decided, and it moves a few per cent from one seed to
the next (the Versa's LiteDRAM `sys` clock: 70.8, 76.9, 81.2, 80.8 MHz at seeds 1-4, target 75).
:func:`place_and_route_seeds` runs the same nextpnr command line once per seed, each in a folder
of its own (``seed-<k>/`` of the build's folder), as :class:`PlaceAndRoute` jobs of one
:class:`~harness.sweep.Sweep` (an embedded ``LocalCluster`` with a worker per core, as
``apiary sweep`` starts), then copies the winner's outputs where the single-seed flow leaves
them, so packing and the report go on as before.

The winner is the seed whose worst clock is closest to, or furthest above, its target (the
least ``Fmax / target`` over the constrained clocks, highest wins; a tie goes to the lower
seed): every clock met if any seed meets them all.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.sweep import Job, Sweep, run_sweep

from .flow import BuildFailed, find_tool, run_step
from .report import nextpnr_clocks


__all__ = ["PlaceAndRoute", "place_and_route_seeds", "worst_ratio", "OUTPUT_OPTIONS"]

#: nextpnr's options that name a file it writes: in a seed's run they point into its folder.
OUTPUT_OPTIONS = ("--textcfg", "--asc", "--report", "--write", "--log", "-l")


def worst_ratio(clocks: dict[str, dict[str, Any]]) -> float:
    """The least ``Fmax / target`` over the constrained clocks of a report (1.0 or more: every
    clock met; infinite when none is constrained)."""
    ratios = [c["fmax_mhz"] / c["target_mhz"] for c in clocks.values() if c["target_mhz"]]
    return min(ratios, default=float("inf"))


@dataclass(frozen=True)
class PlaceAndRoute(Job):
    """One nextpnr run: ``argv`` (the tool first, without ``--seed``) with ``--seed seed``, in
    ``cwd``, its output files (:data:`OUTPUT_OPTIONS`) and its log in ``cwd/seed-<seed>/``.
    ``netlist`` is the digest of the inputs (part of the cache key: the same netlist, options and
    seed give the same placement). Columns: ``clocks`` (as :func:`~.report.nextpnr_clocks`),
    ``status`` (nextpnr's exit status) and ``folder``."""

    kind: ClassVar[str] = "pnr"
    sources: ClassVar[tuple[str, ...]] = ("platforms.seeds", "platforms.report")
    needs_design: ClassVar[bool] = False
    argv: tuple[str, ...] = ()
    cwd: str = "."
    seed: int = 1
    netlist: str = ""

    def check(self) -> None:
        if not self.argv or "--report" not in self.argv:
            raise ValueError("pnr needs a nextpnr command line with --report")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"pnr seed must be a non-negative integer, not {self.seed!r}")

    def label(self) -> str | None:
        return f"seed {self.seed}"

    def folder(self) -> str:
        return os.path.join(self.cwd, f"seed-{self.seed}")

    def command(self) -> list[str]:
        """``argv`` with the seed, and every output file moved into :meth:`folder`."""
        argv, out = list(self.argv), []
        for i, arg in enumerate(argv):
            if i and argv[i - 1] in OUTPUT_OPTIONS:
                arg = os.path.join(f"seed-{self.seed}", os.path.basename(arg))
            out.append(arg)
        return out + ["--seed", str(self.seed)]

    def succeeded(self, columns: dict[str, Any]) -> bool:
        return columns.get("status") == 0

    def run(self, design: Any, spec: Any, overrides: dict[str, Any]) -> dict[str, Any]:
        os.makedirs(self.folder(), exist_ok=True)
        argv = self.command()
        with open(os.path.join(self.folder(), "nextpnr.log"), "w") as log:
            status = subprocess.run([find_tool(argv[0])] + argv[1:], cwd=self.cwd, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                                    ).returncode
        clocks: dict[str, Any] = {}
        report = argv[argv.index("--report") + 1]
        if status == 0:
            with open(os.path.join(self.cwd, report)) as f:
                clocks = nextpnr_clocks(json.load(f))
        return {"status": status, "clocks": clocks, "folder": self.folder()}


def _digest(cwd: str, argv: list[str]) -> str:
    """The inputs of a nextpnr run: its command line and the files it names that exist."""
    digest = hashlib.sha256(json.dumps(argv).encode())
    for i, arg in enumerate(argv):
        path = os.path.join(cwd, arg)
        if i and argv[i - 1] not in OUTPUT_OPTIONS and os.path.isfile(path):
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def place_and_route_seeds(argv: list[str], cwd: str, seeds: list[int], log_name: str,
                          progress: Any, *, workers: int | None = None, explain: Any = None
                          ) -> tuple[int, dict[int, dict[str, Any]]]:
    """Run the nextpnr command ``argv`` (without ``--seed``) in ``cwd`` once per seed, in
    parallel, and copy the best seed's outputs (and its log, as ``log_name``) to where ``argv``
    names them. Returns ``(winner, {seed: clocks})``; raises :class:`BuildFailed` if no seed
    placed and routed, with the first seed's log, and in one line what ``explain(log text)``
    makes of it (as :func:`~.flow.run_step` does for one seed: the design does not fit)."""
    netlist = _digest(cwd, argv)
    jobs = [PlaceAndRoute(argv=tuple(argv), cwd=os.path.abspath(cwd), seed=s, netlist=netlist)
            for s in seeds]
    progress.note(f"pnr: {os.path.basename(argv[0])} with seeds {seeds[0]}-{seeds[-1]} in "
                  f"parallel (seed-<k>/)")
    outcomes = run_sweep(Sweep(None, jobs=list(jobs), name="seeds"), fresh=True,
                         workers=workers or min(len(seeds), os.cpu_count() or 1))
    results = {seed: o.columns["clocks"] for seed, o in zip(seeds, outcomes) if o.ok}
    if not results:
        log = os.path.join(jobs[0].folder(), "nextpnr.log")
        with open(log, errors="replace") as f:
            reason = (explain(f.read()) if explain else None) or outcomes[0].error or "failed"
        raise BuildFailed(f"pnr failed with every seed: {reason} (log of seed {seeds[0]}: {log})")
    winner = max(sorted(results), key=lambda s: worst_ratio(results[s]))
    won = jobs[seeds.index(winner)]
    for i, arg in enumerate(argv):
        if i and argv[i - 1] in OUTPUT_OPTIONS:
            shutil.copyfile(os.path.join(won.folder(), os.path.basename(arg)),
                            os.path.join(cwd, arg))
    shutil.copyfile(os.path.join(won.folder(), "nextpnr.log"), os.path.join(cwd, log_name))
    return winner, results


def place_and_route(argv: list[str], cwd: str, log_name: str, progress: Any, *, seed: int = 1,
                    tries: int = 1, explain: Any = None) -> tuple[float, int, dict[int, Any]]:
    """nextpnr ``argv`` (without ``--seed``) in ``cwd``: with ``seed`` alone (``tries=1``,
    logged to ``log_name`` as any step), or with seeds ``seed`` to ``seed + tries - 1`` through
    :func:`place_and_route_seeds`. Returns ``(seconds, seed kept, {seed: clocks} if several)``."""
    if tries < 1:
        raise BuildFailed(f"--seeds must be at least 1, not {tries}")
    if tries == 1:
        seconds = run_step("pnr", argv + ["--seed", str(seed)], cwd, log_name, progress,
                           explain=explain)
        return seconds, seed, {}
    start = time.monotonic()
    winner, results = place_and_route_seeds(argv, cwd, list(range(seed, seed + tries)),
                                            log_name, progress, explain=explain)
    seconds = time.monotonic() - start
    progress.note(f"  pnr done in {seconds:.1f} s: seed {winner} kept of "
                  f"{seed}-{seed + tries - 1}")
    return seconds, winner, results
