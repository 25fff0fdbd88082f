"""``apiary sweep FILE``: run the sweep a file defines and write its table.

FILE is a Python file that defines ``sweep = Sweep(...)`` (see docs/sweeps.md); a relative
design path in it is taken from the file's folder. Registered through the entry point
``apiary.commands: sweep`` (``pyproject.toml``).
"""

import argparse
import dataclasses
import os
import sys

from apiary.cli import Command, UsageError
from apiary.load import load_script
from .jobs import Bench
from .run import Outcome, default_cache_dir, run_sweep
from .spec import Sweep
from .table import to_csv, to_markdown


__all__ = ["COMMAND", "load_sweep", "stale_only", "write_plots", "main"]


def load_sweep(path: str) -> Sweep:
    """The ``sweep`` a sweep file defines; :class:`ValueError` if it defines none."""
    module = load_script(path)
    sweep = getattr(module, "sweep", None)
    if not isinstance(sweep, Sweep):
        raise ValueError(f"sweep file {path!r} defines no `sweep = Sweep(...)` "
                         f"(found {type(sweep).__name__})")
    if sweep.base is None:
        sweep.base = os.path.dirname(os.path.abspath(path))
    return sweep


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 0 or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of workers (0: in this process, "
                                         f"without Dask), not {text!r}")
    return n


def _plot(text: str) -> tuple[str, ...]:
    parts = tuple(text.split(":"))
    if len(parts) not in (2, 3) or not all(parts):
        raise argparse.ArgumentTypeError(f"expected X:Y or X:Y:BY (column names), not {text!r}")
    return parts


def _file_name(column: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in column)


def write_plots(outcomes: list[Outcome], plots: list[tuple[str, ...]], base: str,
                paretos: list[tuple[str, ...]] | None = None) -> list[str]:
    """Draw each ``(x, y[, by])`` of ``plots`` as ``base-Y-vs-X.png`` and ``.svg``, and each
    ``(x, y[, label])`` of ``paretos`` as ``base-pareto-Y-vs-X``; returns the files written.
    :class:`ValueError` for a column the table does not have."""
    from .plot import pareto, plot
    written = []
    for x, y, *by in plots:
        written += plot(outcomes, x, y, f"{base}-{_file_name(y)}-vs-{_file_name(x)}",
                        by=by[0] if by else None, title=f"{y} against {x}")
    for x, y, *label in paretos or []:
        written += pareto(outcomes, x, y, f"{base}-pareto-{_file_name(y)}-vs-{_file_name(x)}",
                          label=label[0] if label else None)
    return written


def _of(sweep: Sweep) -> str:
    return "" if sweep.design is None else f" of {sweep.design}"


def _write_reports(outcomes: list[Outcome], base: str, docs: list[str]) -> list[str]:
    """Each named job's report as ``base-NAME.md``, and into the blocks of ``docs``; the files
    written. A document's block whose job failed or is not in the sweep is kept, with a line on
    stderr."""
    from .document import Stamp, blocks, reports, update_blocks
    found = reports(outcomes)
    dated: dict[str, Stamp] = {}
    for outcome in outcomes:
        job, label = outcome.task.job, outcome.task.job.label()
        if isinstance(job, Bench) and label in found:
            dated[label] = Stamp(outcome.measured, job.source_stamp())
    written = []
    for label, report in found.items():
        path = f"{base}-{_file_name(label)}.md"
        with open(path, "w") as f:
            f.write(report)
        written.append(path)
    for doc in docs:
        with open(doc) as f:
            text = f.read()
        new, updated = update_blocks(text, found, dated)
        if new != text:
            with open(doc, "w") as f:
                f.write(new)
        kept = [label for label in blocks(text) if label not in updated]
        print(f"{doc}: {len(updated)} block(s) updated"
              + (f"; kept as they were (no report from this sweep): {', '.join(kept)}"
                 if kept else ""), file=sys.stderr)
        if doc not in written:
            written.append(doc)
    return written


def stale_only(sweep: Sweep, docs: list[str]) -> Sweep:
    """``sweep`` with only the jobs whose blocks in ``docs`` were measured on other sources than
    today's (:func:`~.document.stale_blocks`); a job without a block in any is left out."""
    from .document import stale_blocks
    current = {t.job.name: t.job.source_stamp() for t in sweep.tasks()
               if isinstance(t.job, Bench) and t.job.name}
    stale: set[str] = set()
    for doc in docs:
        with open(doc) as f:
            stale |= set(stale_blocks(f.read(), current)) & set(current)
    return dataclasses.replace(sweep, jobs=[job for job in sweep.jobs
                                            if isinstance(job, Bench) and job.name in stale])


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Python file defining `sweep = Sweep(...)`")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: an "
                            "embedded LocalCluster on this machine)")
    where.add_argument("--workers", type=_workers, metavar="N",
                       help="worker processes of the embedded cluster (default: one per core; 0 "
                            "runs the jobs here, one after another, without Dask)")
    parser.add_argument("--out", metavar="DIR", default=".",
                        help="where to write NAME.csv and NAME.md (default: here)")
    parser.add_argument("--plot", action="append", default=[], type=_plot, metavar="X:Y[:BY]",
                        help="also draw column Y against column X of the table (a line per "
                             "value of column BY) as NAME-Y-vs-X.png and .svg (repeatable; "
                             "besides the sweep's own plots)")
    parser.add_argument("--pareto", action="append", default=[], type=_plot,
                        metavar="X:Y[:LABEL]",
                        help="also draw every row as a point of X (less is better: area) "
                             "against Y (more is better: throughput), named by LABEL, with "
                             "their Pareto front, as NAME-pareto-Y-vs-X.png and .svg "
                             "(repeatable)")
    parser.add_argument("--open", action="store_true",
                        help="also write NAME.html (the table and the plots) and open it in a "
                             "web browser when there is a display")
    parser.add_argument("--cache", metavar="DIR", default=None,
                        help=f"the result cache (default {default_cache_dir()})")
    parser.add_argument("--fresh", action="store_true",
                        help="run every job, even those in the cache (their results replace "
                             "the cached ones)")
    parser.add_argument("--update", metavar="DOC", action="append", default=[],
                        help="write the report of each named job (a Bench's name) into the "
                             "block `<!-- sweep: NAME -->` ... `<!-- end sweep -->` of DOC, e.g. "
                             "docs/performance.md (repeatable)")
    parser.add_argument("--stale", action="store_true",
                        help="with --update, run only the jobs whose blocks there were measured "
                             "on other sources than today's (the rest are neither run nor "
                             "looked up in the cache)")


def run(args: argparse.Namespace) -> int:
    """Run the sweep of ``args.file``; 0 if every job succeeded, 1 if any failed."""
    if not os.path.isfile(args.file):
        raise UsageError(f"sweep file {args.file!r} does not exist")
    sweep = load_sweep(args.file)
    for doc in args.update:                      # a bad document is found before any job runs
        if not os.path.isfile(doc):
            raise UsageError(f"--update: {doc!r} does not exist")
    if args.stale:
        if not args.update:
            raise UsageError("--stale needs --update DOC: the document whose stale blocks to run")
        sweep = stale_only(sweep, args.update)
        names = [job.name for job in sweep.jobs if isinstance(job, Bench) and job.name]
        print(f"stale: {', '.join(names) if names else 'nothing'}", file=sys.stderr)
        if not names:
            return 0
    outcomes = run_sweep(sweep, scheduler=args.scheduler, workers=args.workers,
                         cache_dir=args.cache, fresh=args.fresh)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, sweep.name)
    import datetime
    today = datetime.date.today().isoformat()
    markdown = to_markdown(outcomes, title=f"Measured by `apiary sweep {args.file}` (sweep "
                                           f"{sweep.name!r}{_of(sweep)}) on {today}:")
    with open(base + ".csv", "w") as f:
        f.write(to_csv(outcomes))
    with open(base + ".md", "w") as f:
        f.write(markdown)
    sys.stdout.write(markdown)
    written = _write_reports(outcomes, base, args.update)
    plots = write_plots(outcomes, [*sweep.plots, *args.plot], base,
                        [*sweep.paretos, *args.pareto])
    if args.open:
        import webbrowser
        from .page import write_page
        page = write_page(base + ".html", outcomes, f"sweep {sweep.name!r}{_of(sweep)}",
                          plots)
        plots.append(page)
        if sys.platform in ("darwin", "win32") or os.environ.get("DISPLAY") \
                or os.environ.get("WAYLAND_DISPLAY"):
            webbrowser.open("file://" + os.path.abspath(page))
        # Without a display the page is only written (a console browser would take the terminal).
    failed = sum(not o.ok for o in outcomes)
    ran = sum(not o.cached for o in outcomes)
    print(f"{len(outcomes)} jobs: {ran} run, {len(outcomes) - ran} from the cache, "
          f"{failed} failed; wrote {base}.csv and {base}.md"
          + "".join(f", {p}" for p in written + plots), file=sys.stderr)
    return 1 if failed else 0


COMMAND = Command(
    "sweep", "run a sweep (a design at many points, jobs at each) on Dask and write its table",
    run, description=(
        "Run the sweep that FILE defines (`sweep = Sweep(design, grid={...}, jobs=[...])`, see "
        "docs/sweeps.md) on Dask distributed: an embedded LocalCluster, or the cluster of "
        "--scheduler. Every job's result is cached by the hash of its design, job and "
        "parameters, so a re-run runs only what changed. A failed job is reported and the "
        "others go on; Ctrl-C cancels the rest (exit status 130). Writes the table as "
        "NAME.csv and NAME.md under --out and prints it, and draws the sweep's plots and those "
        "of --plot (PNG and SVG); with --open also NAME.html, the table and the plots on one "
        "page, opened in a browser; exit status 1 if a job failed."),
    arguments=_arguments, takes_design=False, errors=(ValueError,))
"""The ``sweep`` command (entry point ``apiary.commands: sweep``)."""


def main(argv: list[str] | None = None) -> int:
    """``apiary sweep`` on its own (``python -m harness.sweep.cli FILE ...``)."""
    parser = argparse.ArgumentParser(prog="apiary sweep", description=COMMAND.description)
    _arguments(parser)
    args = parser.parse_args(argv)
    try:
        return COMMAND.run(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except UsageError as e:
        parser.error(str(e))
    except ValueError as e:
        print(f"apiary sweep: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
