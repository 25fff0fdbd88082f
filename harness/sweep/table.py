"""A sweep's results as one table: a row per point, the point's parameters, then each job's
columns (``echo latency_cycles``, ``area luts``...) and ``errors`` (the failed jobs, with
their errors). Written as CSV and as a Markdown table in the style of docs/performance.md.

A job whose columns hold ``rows`` (a list of column dicts: the echo benchmark's figures per
payload size, with ``Echo(per_size=True)``) gives its point a row per item of that list, each
with the point's other columns: the "long" table a plot against payload size needs."""

import csv
import io
from typing import Any

from .run import Outcome


__all__ = ["table", "text_of", "to_csv", "to_markdown"]


def table(outcomes: list[Outcome]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(columns, rows)``: one row per point, in the order the points first appear; a job with
    a :meth:`~harness.sweep.jobs.Job.label` (a :class:`~harness.sweep.jobs.Bench`) has a row of
    its own, named in the ``job`` column."""
    params: list[str] = []
    measured: list[str] = []
    rows: dict[str, dict[str, Any]] = {}
    expanded: dict[str, list[dict[str, Any]]] = {}
    for outcome in outcomes:
        point = outcome.task.point
        label = outcome.task.job.label()
        if label is not None and "job" not in params:
            params.insert(0, "job")
        for name in point:
            if name not in params:
                params.append(name)
        key = repr((sorted(point.items()), label))
        row = rows.setdefault(key, dict(point) if label is None else {"job": label, **point})
        kind = outcome.task.job.kind
        if outcome.ok:
            for name, value in outcome.columns.items():
                if name == "rows" and isinstance(value, list):
                    subs = [{f"{kind} {n}": v for n, v in sub.items()} for sub in value]
                    for sub in subs:
                        measured += [c for c in sub if c not in measured]
                    expanded.setdefault(key, []).extend(subs)
                    continue
                column = f"{kind} {name}"
                if column not in measured:
                    measured.append(column)
                row[column] = value
        else:
            row["errors"] = "; ".join(filter(None, [row.get("errors"),
                                                    f"{kind}: {outcome.error}"]))
    errors = ["errors"] if any("errors" in r for r in rows.values()) else []
    flat = [{**row, **sub} for key, row in rows.items() for sub in expanded.get(key, [{}])]
    return params + measured + errors, flat


def text_of(value: Any, grouped: bool = False) -> str:
    """A cell: floats in their shortest form, integers with thousands separators if
    ``grouped`` (as docs/performance.md writes them)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,g}" if grouped else f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool) and grouped:
        return f"{value:,}"
    return str(value)


def _numeric(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def to_csv(outcomes: list[Outcome]) -> str:
    """The table as CSV (a header line, then a line per point)."""
    columns, rows = table(outcomes)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([text_of(row.get(c)) for c in columns])
    return out.getvalue()


def _cell(value: Any) -> str:
    """A Markdown cell: a text of several lines (a whole report) by its first line."""
    text = text_of(value, grouped=True)
    if "\n" in text.strip():
        lines = text.strip().splitlines()
        text = f"{lines[0]} ({len(lines)} lines)"
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(outcomes: list[Outcome], title: str | None = None) -> str:
    """The table in Markdown (numbers right-aligned; a text of several lines by its first),
    under ``title`` if given."""
    columns, rows = table(outcomes)
    numeric = [all(_numeric(r.get(c)) for r in rows) for c in columns]
    lines = [f"{title}\n" if title else ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    for row in rows:
        cells = [_cell(row.get(c)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines).lstrip("\n") + "\n"
