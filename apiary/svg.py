"""SVG written by hand (no dependencies): elements, and a line chart for benchmark reports."""

from collections.abc import Sequence
from xml.sax.saxutils import escape, quoteattr


__all__ = ["attrs", "element", "line_chart"]

#: Colours of a chart's series, in order.
SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def attrs(**kw: object) -> str:
    """``key="value"`` pairs (``_`` in a key becomes ``-``, a trailing one is dropped; ``None``
    values are left out; floats to one decimal)."""
    out = []
    for key, value in kw.items():
        if value is None:
            continue
        key = key.rstrip("_").replace("_", "-")
        if isinstance(value, float):
            value = f"{value:.1f}".rstrip("0").rstrip(".")
        out.append(f"{key}={quoteattr(str(value))}")
    return " ".join(out)


def element(tag: str, text: str | None = None, **kw: object) -> str:
    """One element: empty, or holding ``text`` (escaped)."""
    attributes = attrs(**kw)
    if text is None:
        return f"<{tag} {attributes}/>"
    return f"<{tag} {attributes}>{escape(text)}</{tag}>"


def line_chart(title: str, x_label: str, y_label: str,
               series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
               *, width: int = 640, height: int = 360) -> str:
    """A chart of ``series`` (``(name, [(x, y), ...])``), steps drawn as lines with a marker
    per point, axes from 0 to the largest value, a legend: the whole SVG document."""
    left, right, top, bottom = 64, 16, 48, 48
    xs = [x for _, points in series for x, _ in points] or [1]
    ys = [y for _, points in series for _, y in points] or [1]
    x_max, y_max = max(xs) or 1, max(ys) or 1
    pw, ph = width - left - right, height - top - bottom

    def at(x: float, y: float) -> tuple[float, float]:
        return left + pw * x / x_max, top + ph * (1 - y / y_max)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           element("rect", x=0, y=0, width=width, height=height, fill="white"),
           element("text", title, x=width / 2, y=20, text_anchor="middle", font_size=14),
           element("line", x1=left, y1=top + ph, x2=left + pw, y2=top + ph, stroke="black"),
           element("line", x1=left, y1=top, x2=left, y2=top + ph, stroke="black"),
           element("text", x_label, x=left + pw / 2, y=height - 10, text_anchor="middle"),
           element("text", y_label, x=14, y=top + ph / 2, text_anchor="middle",
                   transform=f"rotate(-90 14 {top + ph / 2:.1f})")]
    for k in range(5):
        y = y_max * k / 4
        _, py = at(0, y)
        out += [element("line", x1=left - 4, y1=py, x2=left, y2=py, stroke="black"),
                element("text", f"{y:.4g}", x=left - 6, y=py + 4, text_anchor="end")]
    for x in sorted(set(xs)):
        px, _ = at(x, 0)
        out.append(element("text", f"{x:.4g}", x=px, y=top + ph + 16, text_anchor="middle"))
    for k, (name, points) in enumerate(series):
        colour = SERIES_COLOURS[k % len(SERIES_COLOURS)]
        coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in (at(x, y) for x, y in points))
        out.append(element("polyline", points=coords, fill="none", stroke=colour,
                           stroke_width=2))
        for x, y in points:
            px, py = at(x, y)
            out.append(element("circle", cx=px, cy=py, r=3, fill=colour))
        out += [element("line", x1=left + 12, y1=top - 14, x2=left + 32,
                        y2=top - 14, stroke=colour, stroke_width=2,
                        transform=f"translate({260 * k} 0)"),
                element("text", name, x=left + 36 + 260 * k, y=top - 10)]
    out.append("</svg>")
    return "\n".join(out) + "\n"
