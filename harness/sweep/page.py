"""A sweep's results as one HTML page: its table, then its plots (the SVG files beside it),
for ``apiary sweep --open``. The page is self-contained apart from the plots it links."""

import html
import os

from .run import Outcome
from .table import table, text_of


__all__ = ["write_page"]


def write_page(path: str, outcomes: list[Outcome], title: str, plots: list[str]) -> str:
    """Write the page to ``path`` and return it: ``title``, the sweep's table (failed points
    show their errors) and every SVG of ``plots`` (paths; PNGs are left out, as the SVGs
    show the same), each linked by its path relative to the page."""
    columns, rows = table(outcomes)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(text_of(row.get(c), grouped=True))}</td>"
                         for c in columns) + "</tr>" for row in rows)
    folder = os.path.dirname(os.path.abspath(path))
    figures = "\n".join(
        f'<figure><img src="{html.escape(os.path.relpath(os.path.abspath(p), folder))}" '
        f'alt="{html.escape(os.path.basename(p))}"></figure>'
        for p in plots if p.endswith(".svg"))
    page = f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #999; padding: 0.2em 0.6em; text-align: right; }}
img {{ max-width: 48em; }}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<table>
<tr>{head}</tr>
{body}
</table>
{figures}
</body>
</html>
"""
    with open(path, "w") as f:
        f.write(page)
    return path
