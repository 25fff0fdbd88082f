"""Wall-clock build times, median of runs: ``python -m platforms.bench [--runs N] [FLOW ...]``.

Each run builds into a fresh temporary directory (the Verilog conversion cache stays warm, as it
does for a user building again). Prints one Markdown table: median seconds per step and in total,
with the number of runs, and the resources and Fmax of the last run.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

from apiary.load import load_design
from apiary.terminal import StatusLine

from . import build, resolve


__all__ = ["FLOWS", "SEEDS", "time_flow", "main"]

#: name -> (design script, platform)
FLOWS = {
    "ice40-slip_loopback": ("examples/slip_loopback.py", "amaranth:icebreaker"),
    "ecp5-udp_echo": ("examples/udp_echo.py", "versa_ecp5"),
    "ecp5-25f-udp_echo": ("examples/udp_echo.py", "colorlight_5a_75b"),
    "ecp5-udp_dram": ("examples/udp_dram.py", "ecpix5"),      # 90 % of the Versa: the 85F
    "ecp5-liteeth_udp": (None, "versa_ecp5"),
    "ecp5-25f-liteeth_udp": (None, "colorlight_5a_75b"),     # beside ecp5-25f-udp_echo
    "u200-udp_echo": ("examples/udp_echo.py", "u200"),
    "enzian-udp_echo": ("examples/udp_echo.py", "enzian"),
}

#: The place-and-route seed of a flow whose README board line names one (else 1): the 25F's
#: PHY clock meets 125 MHz at seeds 2 and 4 of 1-6 (docs/platforms.md, 2026-11-30).
SEEDS = {"ecp5-25f-udp_echo": 2}


def time_flow(name, runs, quiet=True):
    """``(median total seconds, {step: median seconds}, last report)`` of ``runs`` builds."""
    script, platform = FLOWS[name]
    totals, report = [], None
    steps: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="apiary_buildbench_") as out:
            progress = StatusLine(open(os.devnull, "w") if quiet else sys.stderr, live=False)
            start = time.monotonic()
            if script is None:
                from .litex_soc.liteeth_ref import build_liteeth_reference
                report = build_liteeth_reference(platform, out, progress)
            else:
                target = resolve(platform)
                design = load_design(script, defaults=target.design_defaults())
                report = build(design, target, out, progress=progress,
                               seed=SEEDS.get(name, 1))
            totals.append(time.monotonic() - start)
            for step, seconds in report.times.items():
                steps.setdefault(step, []).append(seconds)
    return (statistics.median(totals), {k: statistics.median(v) for k, v in steps.items()},
            report)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m platforms.bench", description=__doc__)
    parser.add_argument("flows", nargs="*", metavar="FLOW",
                        help=f"flows to time (default all): {', '.join(FLOWS)}")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    unknown = [f for f in args.flows if f not in FLOWS]
    if unknown:
        parser.error(f"unknown flow(s) {', '.join(unknown)}; choose from {', '.join(FLOWS)}")
    print("| flow | design | platform | runs | median total (s) | median per step (s) | "
          "LUTs | Fmax (MHz) |")
    print("|---|---|---|---:|---:|---|---:|---|")
    for name in args.flows or FLOWS:
        total, steps, report = time_flow(name, args.runs)
        script, platform = FLOWS[name]
        per_step = ", ".join(f"{k} {v:.1f}" for k, v in steps.items())
        luts = next((r["used"] for k, r in report.resources.items()
                     if k in ("LUT4s", "logic cells (LUT4+FF)", "CLB LUTs")), None)
        fmax = ", ".join(f"{n} {c['fmax_mhz']:.1f}" for n, c in report.clocks.items()) or "-"
        print(f"| {name} | {script or 'LiteEth UDP/IP core'} | {platform} | {args.runs} | "
              f"{total:.1f} | {per_step} | {luts if luts is not None else '-'} | {fmax} |",
              flush=True)


if __name__ == "__main__":
    main()
