"""Plots of a sweep's table (matplotlib, PNG and SVG): one column against another, a line per
value of a third (``by``). Points whose jobs failed (empty cells) are left out."""

import os
from typing import Any

from .run import Outcome
from .table import table


__all__ = ["series", "plot"]

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
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
        written = [f"{path}.png", f"{path}.svg"]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        for name in written:
            figure.savefig(name, metadata={"Date": None} if name.endswith(".svg") else None)
    finally:
        plt.close(figure)
    return written
