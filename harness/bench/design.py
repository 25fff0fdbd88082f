"""The options of ``apiary bench DESIGN`` and the run of a design's echo benchmark (UDP, or TCP
with ``--tcp``): what :func:`harness.bench.runner.measure` calls for a design.

Apart from :mod:`~harness.bench.runner` so that a benchmark by name (``noc``, ``kernel``...)
does not depend on the design benchmarks' code: the sweep's source stamp of a job covers the
modules it imports, and a change to the TCP echo benchmark re-runs only what runs it.
"""

import argparse

from apiary.cli import add_clock_argument, add_design_arguments, int_option, load, run_settings
from apiary.load import design_parameter

from . import MAX_PAYLOAD


__all__ = ["bench_options", "bench_parser", "design_modules", "measure_design", "parse_rest"]


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
    parser.add_argument("--connections", action="store_true", default=default(False),
                        help="with --tcp: only the connection set-up rate and the connections "
                             "held (every flow slot open at once), for a design of thousands of "
                             "flows")
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


#: The benchmark module behind a design's ``--tcp`` flag (run by name: a UDP echo benchmark does
#: not depend on the TCP one's code).
ECHO_BENCHES = {False: "harness.bench.echo", True: "harness.bench.tcp"}


def design_modules(argv: list[str]) -> list[str]:
    """The echo benchmark module ``argv`` (``DESIGN [options]``) runs."""
    return [ECHO_BENCHES["--tcp" in argv]]


def measure_design(argv: list[str]) -> int:
    """Run the echo benchmark of the design ``argv`` names, print its report, return 0."""
    import importlib
    args = parse_rest(bench_parser(prog="apiary bench").parse_args(argv))
    design = load(args)
    run_settings(args, design, "verilator")        # (the clock, if not given)
    importlib.import_module(ECHO_BENCHES[bool(args.tcp)]).run(args, design)
    return 0
