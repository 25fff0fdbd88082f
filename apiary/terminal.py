"""What the command line shows on a terminal: tables that fit ~100 columns (or Markdown), and the
progress of long steps (a status line that updates in place, or one summary line).

The simulators and benchmarks stay quiet by default; the commands pass a
:class:`StatusLine` where a library call takes ``progress=`` (see
:func:`apiary.sim.verilator.build_model`).
"""

import shutil
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO


__all__ = ["WIDTH", "Table", "text_table", "markdown_table", "render_tables", "for_terminal",
           "StatusLine"]

#: The width, in characters, that plain-text output is wrapped to.
WIDTH = 100
#: Longest word kept whole when a column is narrowed; longer ones are broken.
_LONGEST_WORD = 24
_GAP = "  "

#: ``(title, header, rows)``: one table of strings, as :func:`render_tables` takes them.
Table = tuple[str, Sequence[str], Sequence[Sequence[str]]]


def _narrowest(cells: Sequence[str]) -> int:
    """The narrowest a column of ``cells`` gets: its longest word (up to a limit)."""
    return max([min(len(w), _LONGEST_WORD) for c in cells for w in c.split()] or [1])


def _fit(natural: list[int], body: list[int], narrowest: list[int], width: int) -> list[int]:
    """Column widths that fit ``width`` with the gaps between them: ``natural`` if they fit;
    else ``body`` (headers wrapped, cells whole) if those fit; else narrowed from ``body`` toward
    ``narrowest``, widest first, until they fit (or no column can shrink further)."""
    def total(widths: list[int]) -> int:
        return sum(widths) + len(_GAP) * (len(widths) - 1)
    if total(natural) <= width:
        return list(natural)
    widths = list(body)
    while total(widths) > width:
        k = max(range(len(widths)), key=lambda i: (widths[i] > narrowest[i], widths[i]))
        if widths[k] <= narrowest[k]:
            break
        widths[k] -= 1
    return widths


def _groups(narrowest: list[int], width: int) -> list[list[int]]:
    """Columns in blocks that fit ``width`` side by side, each block after the first starting
    with column 0 again (the key of a row)."""
    groups: list[list[int]] = [[0]]
    for i in range(1, len(narrowest)):
        group = groups[-1]
        needed = sum(narrowest[j] for j in group + [i]) + len(_GAP) * len(group)
        if len(group) > 1 and needed > width:
            groups.append([0])
        groups[-1].append(i)
    return groups


def _row_lines(cells: Sequence[str], widths: Sequence[int]) -> list[str]:
    """One row of ``cells``, each wrapped to its width: as many lines as its tallest cell."""
    wrapped = [textwrap.wrap(c, w, break_on_hyphens=False) or [""] for c, w in zip(cells, widths)]
    height = max(len(c) for c in wrapped)
    return [_GAP.join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(wrapped, widths))
            .rstrip() for k in range(height)]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int = WIDTH) -> str:
    """``header`` and ``rows`` as aligned columns under a rule, no line longer than ``width``:
    long cells wrap within their column, and columns that do not fit side by side continue in
    a further block that repeats the first column."""
    columns = [[header[i]] + [r[i] for r in rows] for i in range(len(header))]
    natural = [max(len(c) for c in col) for col in columns]
    narrowest = [min(n, _narrowest(col)) for n, col in zip(natural, columns)]
    cells_whole = [max([len(c) for c in col[1:]] + [_narrowest(col[:1])]) for col in columns]
    blocks = []
    for group in _groups(narrowest, width):
        widths = _fit([natural[i] for i in group], [cells_whole[i] for i in group],
                      [narrowest[i] for i in group], width)
        body = [_row_lines([r[i] for i in group], widths) for r in rows]
        lines = _row_lines([header[i] for i in group], widths)
        lines.append(_GAP.join("-" * w for w in widths))
        spaced = any(len(r) > 1 for r in body)          # rows of several lines: a gap between
        for k, r in enumerate(body):
            if spaced and k:
                lines.append("")
            lines += r
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``header`` and ``rows`` as a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render_tables(head: str, tables: Sequence[Table], markdown: bool = False,
                  command: str | None = None, width: int = WIDTH) -> str:
    """A report: the sentence ``head``, then each table under its title; for a terminal (lines
    wrapped to ``width``) or, with ``markdown``, as Markdown that begins
    "Measured by `command`." when ``command`` is given."""
    if markdown:
        out = [f"Measured by `{command}`. {head}.\n" if command else f"{head}.\n"]
        for title, header, rows in tables:
            out += [f"{title}:\n", markdown_table(header, rows), ""]
    else:
        out = [textwrap.fill(head, width) + "\n"]
        for title, header, rows in tables:
            out += [textwrap.fill(title + ":", width), text_table(header, rows, width), ""]
    return "\n".join(out)


def _plain(text: str) -> str:
    """Markdown inline markup (``**bold**``, ``*em*``, backticks) taken out."""
    return text.replace("**", "").replace("`", "")


def for_terminal(markdown: str, width: int = WIDTH) -> str:
    """A Markdown report (paragraphs, headings, lists and pipe tables, as the benchmarks print
    them) laid out for a terminal: tables as :func:`text_table`, paragraphs and list items
    wrapped to ``width``, no Markdown markup."""
    out: list[str] = []
    lines = markdown.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k].rstrip()
        if line.lstrip().startswith("|"):
            block = []
            while k < len(lines) and lines[k].lstrip().startswith("|"):
                cells = [_plain(c.strip()) for c in lines[k].strip().strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):    # not the |---| rule
                    block.append(cells)
                k += 1
            header, rows = block[0], [r + [""] * (len(block[0]) - len(r)) for r in block[1:]]
            out.append(text_table(header, rows, width))
            continue
        if not line.strip():
            out.append("")
            k += 1
            continue
        paragraph, k = [line.strip()], k + 1
        bullet = line.lstrip().startswith(("- ", "* "))
        while k < len(lines) and lines[k].strip() and not paragraph[0].startswith("#"):
            nxt = lines[k]
            if bullet and not nxt[:1].isspace():
                break                       # an item goes on only on indented lines
            if nxt.lstrip().startswith(("|", "#", "- ", "* ")):
                break
            paragraph.append(nxt.strip())
            k += 1
        text = _plain(" ".join(paragraph)).lstrip("# ")
        out.append(textwrap.fill(text, width, subsequent_indent="  " if bullet else "",
                                 break_on_hyphens=False))
    return "\n".join(out).strip("\n") + "\n"


class StatusLine:
    """Reports long steps on ``stream`` (default stderr). On a terminal (``live``, by default
    whether the stream is one) a step shows ``label... N s``, updated in place each second,
    then its summary; elsewhere only the summary line.

    Call it as ``with status("building X", lambda s: f"built X in {s:.1f} s"): ...``: the
    form the library's ``progress=`` parameters take. A caller that makes its own live text (a
    board build shows the tool's latest log line) calls :meth:`status` and :meth:`end_status`
    instead, and :meth:`note` for the lines that stay.
    """

    def __init__(self, stream: TextIO | None = None, live: bool | None = None,
                 interval: float = 1.0):
        self.stream = sys.stderr if stream is None else stream
        self.live = _isatty(self.stream) if live is None else live
        self.interval = interval

    def note(self, text: str) -> None:
        """One line of its own."""
        self.stream.write(text + "\n")
        self.stream.flush()

    def status(self, text: str) -> None:
        """Show ``text`` as the live line, in place of the last (cut to the terminal's width so
        that it stays one line); nothing off a terminal."""
        if self.live:
            width = shutil.get_terminal_size((WIDTH, 20)).columns - 1
            self.stream.write("\r\x1b[K" + text[:width])
            self.stream.flush()

    def end_status(self) -> None:
        """Clear the live line (what follows starts on a clean line); nothing off a terminal."""
        if self.live:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    @contextmanager
    def __call__(self, label: str, summary: Callable[[float], str]) -> Iterator[None]:
        start = time.monotonic()
        done = threading.Event()
        thread = None
        if self.live:
            def tick() -> None:
                while True:
                    self.status(f"{label}... {time.monotonic() - start:.0f} s")
                    if done.wait(self.interval):
                        return
            thread = threading.Thread(target=tick, daemon=True)
            thread.start()
        try:
            yield
        finally:
            done.set()
            if thread is not None:
                thread.join()
                self.end_status()
        self.note(summary(time.monotonic() - start))


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
