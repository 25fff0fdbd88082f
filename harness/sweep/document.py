"""Reports written into a document: ``apiary sweep FILE --update DOC`` replaces, in ``DOC``, each
block

    <!-- sweep: LABEL -->
    ...
    <!-- end sweep -->

with the report of the sweep's job named ``LABEL`` (a :class:`~harness.sweep.jobs.Bench`'s
``name``), and stamps the block with the day it was measured and what it was measured on
(:meth:`~harness.sweep.jobs.Bench.source_stamp`)::

    <!-- sweep: LABEL (measured 2026-11-30, sources 0123456789ab) -->

Text outside the blocks is the author's and is kept as it is; so is a block whose job failed, or
that the sweep does not have. :func:`stale_blocks` names the blocks whose sources have changed
since (a test runs it on docs/performance.md)."""

import re
from typing import NamedTuple

from .run import Outcome


__all__ = ["BLOCK", "Stamp", "blocks", "stamps", "reports", "update_blocks", "stale_blocks"]

#: A block: its label and stamp, then its text.
BLOCK = re.compile(r"(<!-- sweep: (?P<label>[^>(]+?)"
                   r"(?: \(measured (?P<date>\d{4}-\d\d-\d\d), sources (?P<sources>[0-9a-f]+)\))?"
                   r" -->\n)(?P<text>.*?)(?P<end><!-- end sweep -->)", re.DOTALL)


class Stamp(NamedTuple):
    """When a block's report was measured (``YYYY-MM-DD``) and on what (a source stamp)."""
    date: str
    sources: str


def stamps(text: str) -> dict[str, Stamp | None]:
    """Each block's stamp (``None``: it has none), by label."""
    return {m.group("label"): Stamp(m.group("date"), m.group("sources")) if m.group("sources")
            else None for m in BLOCK.finditer(text)}


def blocks(text: str) -> list[str]:
    """The labels of the blocks in ``text``, in order."""
    return [m.group("label") for m in BLOCK.finditer(text)]


def reports(outcomes: list[Outcome]) -> dict[str, str]:
    """The report of every job of ``outcomes`` that has a label, a ``report`` column and
    succeeded, by label."""
    found = {}
    for outcome in outcomes:
        label = outcome.task.job.label()
        if label is not None and outcome.ok and "report" in outcome.columns:
            found[label] = str(outcome.columns["report"])
    return found


def update_blocks(text: str, new: dict[str, str],
                  new_stamps: dict[str, Stamp] | None = None) -> tuple[str, list[str]]:
    """``text`` with the block of each label of ``new`` holding that report, stamped with its
    :class:`Stamp` from ``new_stamps`` if there; and the labels updated. A label that appears
    twice is an error (:class:`ValueError`)."""
    labels = blocks(text)
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"the blocks {', '.join(map(repr, twice))} appear more than once")
    updated = []

    def replace(m: re.Match[str]) -> str:
        label = m.group("label")
        if label not in new:
            return m.group(0)
        updated.append(label)
        stamp = (new_stamps or {}).get(label)
        head = (f"<!-- sweep: {label} (measured {stamp.date}, sources {stamp.sources}) -->\n"
                if stamp else m.group(1))
        return f"{head}\n{new[label].strip()}\n\n{m.group('end')}"
    return BLOCK.sub(replace, text), updated


def stale_blocks(text: str, current: dict[str, str]) -> dict[str, str]:
    """The blocks of ``text`` not measured on today's sources, each with why: ``current`` maps
    a label to its job's source stamp today. A block without a stamp is stale; so is one with no
    job in ``current`` (nothing could have written it)."""
    stale = {}
    for label, stamp in stamps(text).items():
        if label not in current:
            stale[label] = "no job of that name in the sweep"
        elif stamp is None:
            stale[label] = "not stamped (written before stamps, or by hand)"
        elif stamp.sources != current[label]:
            stale[label] = (f"measured on {stamp.date} on sources {stamp.sources}; today's are "
                            f"{current[label]}")
    return stale
