"""Plots of a sweep's table (matplotlib, PNG and SVG): one column against another, a line per
value of a third (``by``); and a Pareto front, the points that no other point beats on both of
two columns (less of the first, area say, and more of the second, throughput). Points whose jobs
failed (empty cells) are left out."""

import os
from typing import Any

from .run import Outcome
from .table import table


__all__ = ["series", "plot", "pareto_front", "pareto"]

#: ``{line label: [(x, y), ...]}``, each line sorted by x.
Series = dict[str, list[tuple[Any, float]]]


def series(outcomes: list[Outcome], x: str, y: str, by: str | None = None) -> Series:
    """The points of column ``y`` against column ``x`` of the sweep's table, a line per value of
    column ``by`` (one line, labelled ``y``, without). :class:`ValueError` names a column the
    table does not have."""
    columns, rows = table(outcomes)
    for name in (x, y, by):
        if name is not None and name not in columns:
            raise ValueError(f"the sweep's table has no column {name!r}; its columns are "
                             f"{', '.join(columns)}")
    lines: Series = {}
    for row in rows:
        if row.get(x) is None or row.get(y) is None:
            continue
        label = f"{by}={row.get(by)}" if by is not None else y
        lines.setdefault(label, []).append((row[x], float(row[y])))
    return {label: sorted(points, key=lambda p: (str(type(p[0])), p[0]))
            for label, points in lines.items()}


def plot(outcomes: list[Outcome], x: str, y: str, path: str, *, by: str | None = None,
         title: str | None = None) -> list[str]:
    """Draw :func:`series` and write it as ``path.png`` and ``path.svg``; returns the two
    paths."""
    import matplotlib
    matplotlib.use("Agg")                      # files only: no display needed
    import matplotlib.pyplot as plt

    lines = series(outcomes, x, y, by)
    figure, axes = plt.subplots(figsize=(6, 4))
    try:
        for label, points in lines.items():
            xs = [p[0] if isinstance(p[0], (int, float)) and not isinstance(p[0], bool)
                  else str(p[0]) for p in points]
            axes.plot(xs, [p[1] for p in points], marker="o", label=label)
        axes.set_xlabel(x)
        axes.set_ylabel(y)
        if title:
            axes.set_title(title)
        if by is not None:
            axes.legend()
        return _save(figure, axes, path)
    finally:
        plt.close(figure)


def _save(figure: Any, axes: Any, path: str) -> list[str]:
    """Grid, layout, and ``path.png`` and ``path.svg`` (no date in the SVG, so that the same
    plot is the same file); the two paths."""
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    written = [f"{path}.png", f"{path}.svg"]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    for name in written:
        figure.savefig(name, metadata={"Date": None} if name.endswith(".svg") else None)
    return written


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point dominates, taking less x and more y as better (a point with
    the same x and y as another is kept once), by increasing x."""
    front: list[tuple[float, float]] = []
    for px, py in sorted(set(points), key=lambda p: (p[0], -p[1])):
        if not front or py > front[-1][1]:
            front.append((px, py))
    return front


def pareto(outcomes: list[Outcome], x: str, y: str, path: str, *, label: str | None = None,
           title: str | None = None) -> list[str]:
    """Every row of the table as a point of column ``x`` (less is better) against column
    ``y`` (more is better), each named by its values of the columns ``label`` names
    (separated by commas); the Pareto front
    joined by a line. Written as ``path.png`` and ``path.svg``; returns the two paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns, rows = table(outcomes)
    labels = label.split(",") if label else []
    for name in (x, y, *labels):
        if name not in columns:
            raise ValueError(f"the sweep's table has no column {name!r}; its columns are "
                             f"{', '.join(columns)}")
    named = [(float(r[x]), float(r[y]), ", ".join(f"{n}={r.get(n)}" for n in labels))
             for r in rows if r.get(x) is not None and r.get(y) is not None]
    front = pareto_front([(px, py) for px, py, _ in named])
    figure, axes = plt.subplots(figsize=(6, 4))
    try:
        axes.scatter([p[0] for p in named], [p[1] for p in named], color="grey",
                     label="every point")
        axes.plot([p[0] for p in front], [p[1] for p in front], marker="o", color="C3",
                  drawstyle="steps-post", label="Pareto front")
        for px, py, text in named:
            if text:
                axes.annotate(text, (px, py), textcoords="offset points", xytext=(4, 4),
                              fontsize=7)
        axes.set_xlabel(f"{x} (less is better)")
        axes.set_ylabel(f"{y} (more is better)")
        axes.set_title(title or f"{y} against {x}: the Pareto front")
        axes.legend()
        return _save(figure, axes, path)
    finally:
        plt.close(figure)
