"""The project's benchmarks by name, run in this process: :func:`measure` takes ``apiary
bench``'s arguments (a design and the UDP/TCP echo options, or a benchmark's name and its own
options), prints the report and returns the exit status.

This is what the sweep job :class:`harness.sweep.jobs.Bench` calls, on a worker or in the
process of ``apiary bench`` (:mod:`harness.bench.cli`, which runs every benchmark as such a
job). The benchmarks themselves are imported when run.
"""

import argparse
import sys

from apiary.cli import add_clock_argument, add_design_arguments, int_option, load, run_settings
from apiary.load import design_parameter

from . import MAX_PAYLOAD


__all__ = ["SUB_BENCHES", "bench_options", "bench_parser", "measure", "measure_modules"]


def _sizes(text):
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated byte counts, not {text!r}") from None
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    if any(not 0 <= s <= MAX_PAYLOAD for s in sizes):
        raise argparse.ArgumentTypeError(
            f"payload sizes must be from 0 to {MAX_PAYLOAD} bytes, not {text}")
    return sizes


_packets = int_option(2, " (a rate needs two replies)")


def bench_options(parser, defaults=True):
    """The options of ``apiary bench DESIGN`` but ``--width`` (defaults:
    :mod:`harness.bench.echo`'s; the clock's follows the width). With ``defaults=False`` an
    option not given stays out of the namespace."""
    def default(value):
        return value if defaults else argparse.SUPPRESS
    parser.add_argument("--sizes", type=_sizes, default=default(None), metavar="B,B,...",
                        help=f"UDP payload sizes in bytes, 0 to {MAX_PAYLOAD} "
                             f"(default 64,128,256,512,1024,1472)")
    parser.add_argument("--packets", type=_packets, default=default(None), metavar="N",
                        help="requests per payload size for the throughput, at least 2 "
                             "(default 200)")
    parser.add_argument("--tcp", action="store_true", default=default(False),
                        help="run the TCP echo benchmark (port 7: set-up, latency, request rate "
                             "over many connections, bulk goodput) instead of the UDP one")
    add_clock_argument(parser, "clock that cycles convert to time and bit rates at",
                       default=default(None))
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", default=default(False),
                        help="print the results as JSON")
    output.add_argument("--markdown", action="store_true", default=default(False),
                        help="print Markdown tables (for docs/performance.md) instead of tables "
                             "for a terminal")


def bench_parser(**kwargs):
    """The parser of ``apiary bench DESIGN [options]`` (what follows ``DESIGN`` is left in
    ``args``, to be read again: argparse stops at the design)."""
    parser = argparse.ArgumentParser(**kwargs)
    add_design_arguments(parser)
    bench_options(parser)
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def parse_rest(args, sweep_options=None):
    """Read the options that follow ``DESIGN`` (left in ``args.args``) into ``args``."""
    rest = argparse.ArgumentParser(prog="apiary bench", add_help=False,
                                   usage="%(prog)s DESIGN [options] (see `apiary bench --help`)")
    rest.add_argument("--width", type=int, metavar="N", default=argparse.SUPPRESS)
    rest.add_argument("--set", action="append", type=design_parameter, dest="params",
                      default=argparse.SUPPRESS)
    rest.add_argument("--full-routers", action="store_true", default=argparse.SUPPRESS)
    bench_options(rest, defaults=False)
    if sweep_options is not None:
        sweep_options(rest, defaults=False)
    rest.parse_args(args.args, namespace=args)
    return args


#: Benchmarks with options of their own, ``apiary bench NAME [...]``: the module whose
#: ``main(argv)`` runs each.
SUB_BENCHES = {
    "noc": "apiary.bench.noc",
    "kernel": "apiary.bench.kernel",
    "faults": "apiary.bench.faults",
    "control": "apiary.bench.control",
    "replicate": "harness.bench.replicate",
    "nf": "harness.bench.nf",
    "rs": "harness.bench.rs",
    "slots": "apiary.bench.slots",
    "area": "apiary.bench.area",
    "timing": "apiary.bench.timing",
    "vr": "harness.vr_bench",
    "sizing": "apiary.stream.sizing",
}


def _run_sub_bench(name, argv):
    """``apiary bench NAME ARGV``: its report (Markdown) laid out for a terminal, unless
    ``--markdown`` (or ``--json``, or ``--help``) is among ``argv``."""
    import contextlib
    import importlib
    import io
    from apiary.terminal import for_terminal
    main = importlib.import_module(SUB_BENCHES[name]).main
    markdown = "--markdown" in argv
    if markdown and name != "kernel":           # (kernel takes --markdown itself)
        argv = [a for a in argv if a != "--markdown"]
    if markdown or {"--json", "-h", "--help"} & set(argv):
        return int(main(argv) or 0)
    report = io.StringIO()
    try:
        with contextlib.redirect_stdout(report):
            code = int(main(argv) or 0)
    finally:
        sys.stdout.write(for_terminal(report.getvalue()) if report.getvalue() else "")
    return code


def measure_modules(argv):
    """The benchmark module behind ``argv`` (besides this one's own imports): the sweep job's
    cache key covers what it imports."""
    return [SUB_BENCHES[argv[0]]] if argv and argv[0] in SUB_BENCHES else []


def measure(argv):
    """Run the benchmark that ``argv`` (``apiary bench``'s arguments, without the sweep's
    options) names, in this process; print its report and return its exit status. What the
    sweep job :class:`harness.sweep.jobs.Bench` calls."""
    if argv and argv[0] in SUB_BENCHES:
        return _run_sub_bench(argv[0], list(argv[1:]))
    args = parse_rest(bench_parser(prog="apiary bench").parse_args(argv))
    design = load(args)
    run_settings(args, design, "verilator")        # (the clock, if not given)
    if args.tcp:
        from .tcp import run as run_tcp
        run_tcp(args, design)
        return 0
    from .echo import run as run_echo
    run_echo(args, design)
    return 0
