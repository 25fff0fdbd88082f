"""The project's benchmarks by name, run in this process: :func:`measure` takes ``apiary
bench``'s arguments (a design and the UDP/TCP echo options, or a benchmark's name and its own
options), prints the report and returns the exit status.

This is what the sweep job :class:`harness.sweep.jobs.Bench` calls, on a worker or in the
process of ``apiary bench`` (:mod:`harness.bench.cli`, which runs every benchmark as such a
job). The benchmarks themselves are imported when run, by name, and :func:`measure_modules`
names the one ``argv`` runs: this module imports none of them, so a job's source stamp covers
its own benchmark's code and not every other's.
"""

import sys


__all__ = ["DESIGN_BENCH", "SUB_BENCHES", "measure", "measure_modules", "measure_scripts"]


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


#: The module that runs a design's echo benchmark (``apiary bench DESIGN [options]``).
DESIGN_BENCH = "harness.bench.design"


def measure_modules(argv):
    """The benchmark modules behind ``argv`` (besides this one's own imports): the sweep job's
    cache key and source stamp cover what they import."""
    if argv and argv[0] in SUB_BENCHES:
        return [SUB_BENCHES[argv[0]]]
    import importlib
    return [DESIGN_BENCH, *importlib.import_module(DESIGN_BENCH).design_modules(list(argv))]


def measure_scripts(argv):
    """The design scripts a benchmark by name builds (its module's ``SCRIPTS``): the sweep job's
    source stamp covers their code and what they import, as it does a design given in ``argv``."""
    if not argv or argv[0] not in SUB_BENCHES:
        return []
    import importlib
    return [str(s) for s in getattr(importlib.import_module(SUB_BENCHES[argv[0]]), "SCRIPTS", ())]


def measure(argv):
    """Run the benchmark that ``argv`` (``apiary bench``'s arguments, without the sweep's
    options) names, in this process; print its report and return its exit status. What the
    sweep job :class:`harness.sweep.jobs.Bench` calls."""
    import importlib
    if argv and argv[0] in SUB_BENCHES:
        return _run_sub_bench(argv[0], list(argv[1:]))
    return importlib.import_module(DESIGN_BENCH).measure_design(list(argv))
