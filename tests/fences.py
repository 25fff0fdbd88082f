"""The fenced blocks of a Markdown text, for the tests that run or compare what the docs quote
(imported by name: ``tests/`` is on ``sys.path`` when pytest imports a test module there)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Fence:
    """One fenced block: its info string (``python``, or ``""``), the 1-based line of its first
    line of content, its lines, and the line just before its opening fence."""
    info: str
    line: int
    lines: list[str]
    before: str


def fences(text):
    """Every fenced block of ``text``, in order (fences with or without a language)."""
    found, opening = [], None
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if opening is None:
            opening = n
        else:
            found.append(Fence(lines[opening][3:].strip(), opening + 2, lines[opening + 1:n],
                               lines[opening - 1] if opening else ""))
            opening = None
    return found


def fence_at(found, text):
    """The index in ``found`` (a list of :func:`fences`) of the one fence whose first line holds
    ``text``; fails the test if there is none or more than one."""
    at = [k for k, fence in enumerate(found) if fence.lines and text in fence.lines[0]]
    assert len(at) == 1, f"{len(at)} fenced blocks begin with a line holding {text!r}"
    return at[0]


def fenced_blocks(text):
    """The lines of each fenced block of ``text`` (fences with or without a language)."""
    return [fence.lines for fence in fences(text)]
