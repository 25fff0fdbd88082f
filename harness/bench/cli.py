"""``apiary bench``: the UDP echo benchmark of a design, or the NoC router benchmark.

Registered with the ``apiary`` command line through the entry point ``apiary.commands: bench``
(``pyproject.toml``); this module is light, the benchmarks are imported when run.

Every benchmark runs as a sweep of one job (:class:`harness.sweep.jobs.Bench`), so a measurement
has one way to run: in this process by default, on a Dask cluster with ``--workers N`` or
``--scheduler ADDRESS``, and from the sweep cache when nothing it depends on has changed
(``--fresh`` measures again). The job calls :func:`harness.bench.runner.measure`.
"""

import argparse
import sys

from apiary.cli import Command, UsageError, error, load, run_settings

from .design import bench_options, bench_parser, parse_rest
from .runner import SUB_BENCHES, measure


__all__ = ["COMMAND"]


def _sweep_options(parser, defaults=True):
    """Where the benchmark runs (an option not given stays out of the namespace unless
    ``defaults``)."""
    def default(value):
        return value if defaults else argparse.SUPPRESS
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=default(0), metavar="N",
                       help="run on an embedded Dask cluster of N workers (default: in this "
                            "process)")
    where.add_argument("--scheduler", default=default(None), metavar="ADDRESS",
                       help="run on the Dask cluster of this scheduler (tcp://HOST:PORT)")
    parser.add_argument("--fresh", action="store_true", default=default(False),
                        help="measure even if the sweep cache has this benchmark's result for "
                             "the same sources")


def _arguments(parser):
    bench_options(parser)
    _sweep_options(parser)
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


_DESCRIPTION = (
    "Measure, cycle-accurately on Verilator, the latency and throughput of a design whose "
    "Ethernet port echoes UDP on port 7 (examples/udp_echo.py): 1-byte echo latency (first word "
    "in to last word out, the Beehive paper's measure) and, for each payload size, cycles per "
    "packet, Mpps, Gbps and fraction of the link (width x clock) with the requests back to "
    "back, with every reply checked against beehive.model.echo_reply. Beehive's published "
    "figures and the project's targets are printed beside them. `apiary bench noc [...]` runs "
    "the NoC router benchmark instead; everything after `noc` is passed to it "
    "(`apiary bench noc --help`); `apiary bench kernel [...]` the Apiary kernel's (monitor "
    "latency, allocation latency, area with --area); `apiary bench faults [...]` the fault "
    "matrix (what each kind of fault by one tenant costs another); `apiary bench control [...]` "
    "the control "
    "plane's (register round trips, area with --area); `apiary bench replicate [...]` 1, 2 and "
    "4 copies of the stack behind a load balancer (the paper's Fig. 12; with `--app-cycles N` "
    "a slow application replicated instead); `apiary bench slots [...]` the area of 1, 2 and 4 "
    "slots behind monitors (Coyote's Table 1 shape); `apiary bench nf "
    "[...]` the network-function tiles' cycles and area; `apiary bench area DESIGN [...]` a "
    "design's area tile by tile (Yosys); `apiary bench timing DESIGN [...]` its core's Fmax "
    "and critical paths on an ECP5 (Yosys, nextpnr out of context); `apiary bench vr [...]` "
    "the VR witness; `apiary bench "
    "sizing [...]` FlexDriver's descriptor and buffer sizes for a link. Every benchmark runs "
    "as a sweep job (docs/sweeps.md): in this process unless --workers N or --scheduler "
    "ADDRESS, and its report comes from the sweep cache when nothing it depends on has "
    "changed (--fresh to measure again). The first line (on stderr) says the "
    "width, clock and back end chosen: the clock follows the width unless --clock-mhz is given "
    "(125 MHz at 64 bits, gigabit Ethernet's MAC clock; 250 MHz at 128 bits and up, the "
    "paper's). The targets are the project's for 512 bits: at another width the table says "
    "there is none. Tables are laid out for a terminal (100 columns) unless --markdown.")


def _help_parser():
    parser = bench_parser(prog="apiary bench", description=_DESCRIPTION)
    _sweep_options(parser)
    return parser


def _strip_sweep_options(argv):
    """``argv`` without the sweep options (which may come anywhere after a benchmark's name),
    and those options as ``{"workers": N, "scheduler": ADDRESS, "fresh": bool}``."""
    parser = argparse.ArgumentParser(add_help=False)
    _sweep_options(parser, defaults=False)
    found, rest = {}, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in ("--workers", "--scheduler"):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv)
                                                             else "")
            i += 1 if "=" in arg else 2
            parsed = parser.parse_args([name, value])
            found.update(vars(parsed))
            continue
        if arg == "--fresh":
            found["fresh"] = True
        else:
            rest.append(arg)
        i += 1
    return rest, found


def _canonical_argv(args):
    """The command line of ``apiary bench DESIGN`` that ``args`` (parsed in full) stand for."""
    argv = [args.design]
    if args.width is not None:
        argv += ["--width", str(args.width)]
    for name, value in args.params:
        argv += ["--set", f"{name}={value!r}"]
    if args.full_routers:
        argv.append("--full-routers")
    if args.sizes is not None:
        argv += ["--sizes", ",".join(map(str, args.sizes))]
    if args.packets is not None:
        argv += ["--packets", str(args.packets)]
    if args.tcp:
        argv.append("--tcp")
    if args.connections:
        argv.append("--connections")
    if args.clock_mhz is not None:
        argv += ["--clock-mhz", f"{args.clock_mhz:g}"]
    argv += ["--json"] * args.json + ["--markdown"] * args.markdown
    return argv


def run(args):
    """``apiary bench``: the benchmark as a sweep of one :class:`harness.sweep.jobs.Bench` job,
    its report printed; the benchmark's exit status."""
    if args.design in SUB_BENCHES:
        name = args.design
        if (args.width, args.sizes, args.packets, args.clock_mhz, args.json, args.markdown,
                args.tcp, args.connections, args.params) != (None, None, None, None, False,
                                                             False, False, False, []):
            raise UsageError(f"the options of `apiary bench {name}` go after `{name}` "
                             f"(see `apiary bench {name} --help`)")
        rest, where = _strip_sweep_options(list(args.args))
        if {"-h", "--help"} & set(rest):
            return measure([name, *rest])
        argv = [name, *rest]
    else:
        # argparse leaves what follows DESIGN in args.args: read the options there too.
        if "-h" in args.args or "--help" in args.args:
            _help_parser().print_help()
            return 0
        parse_rest(args, _sweep_options)
        if args.connections and not args.tcp:
            raise UsageError("--connections is an option of the TCP benchmark: give --tcp too")
        where = {}
        design = load(args)                        # a bad design: one line, before any cluster
        print(run_settings(args, design, "verilator"), file=sys.stderr, flush=True)
        argv = _canonical_argv(args)
    where = {"workers": args.workers, "scheduler": args.scheduler, "fresh": args.fresh,
             **where}
    return _run_as_sweep(argv, **where)


def _run_as_sweep(argv, workers=0, scheduler=None, fresh=False):
    import io
    from harness.sweep import Bench, Sweep, run_sweep
    from harness.sweep.run import Progress
    sweep = Sweep(None, jobs=[Bench(args=tuple(argv))], name="bench")
    outcome, = run_sweep(sweep, workers=workers, scheduler=scheduler, fresh=fresh,
                         progress=Progress(1, io.StringIO(), live=False))
    if outcome.cached:
        print("apiary bench: from the sweep cache (nothing it depends on has changed since it "
              "was measured; --fresh measures again)", file=sys.stderr)
    sys.stdout.write(str(outcome.columns.get("report", "")))
    if "status" not in outcome.columns:          # the job raised on a worker: its error
        raise BenchRunError(outcome.error)
    return int(outcome.columns["status"])


class BenchRunError(Exception):
    """A benchmark that failed on a Dask worker (its error, reported in one line)."""


def _errors():
    """What a benchmark raises for a design or a tool (reported in one line); imported only when
    the command runs (scapy is slow to import)."""
    from apiary.sim import SimError
    from .echo import BenchError
    return (BenchError, SimError, BenchRunError)


COMMAND = Command(
    "bench", "benchmark a design's UDP echo (`apiary bench DESIGN`), or the NoC router "
             "(`apiary bench noc [...]`)",
    lambda args: _run_reporting(args), description=_DESCRIPTION, arguments=_arguments)
"""The ``bench`` command (entry point ``apiary.commands: bench``)."""


def _run_reporting(args):
    try:
        errors = _errors()
    except ImportError as e:
        return error(f"apiary bench is not available in this installation: {e}")
    try:
        return run(args)
    except errors as e:
        return error(f"apiary bench: {e}")
