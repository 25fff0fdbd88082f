"""Reports written into a document: ``apiary sweep FILE --update DOC`` replaces, in ``DOC``, each
block

    <!-- sweep: LABEL -->
    ...
    <!-- end sweep -->

with the report of the sweep's job named ``LABEL`` (a :class:`~harness.sweep.jobs.Bench`'s
``name``). Text outside the blocks is the author's and is kept as it is; so is a block whose job
failed, or that the sweep does not have."""

import re

from .run import Outcome


__all__ = ["BLOCK", "blocks", "reports", "update_blocks"]

#: A block: its label, then its text.
BLOCK = re.compile(r"(<!-- sweep: (?P<label>[^>]+?) -->\n)(?P<text>.*?)(<!-- end sweep -->)",
                   re.DOTALL)


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


def update_blocks(text: str, new: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with the block of each label of ``new`` holding that report; and the labels
    updated. A label that appears twice is an error (:class:`ValueError`)."""
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
        return f"{m.group(1)}\n{new[label].strip()}\n\n{m.group(4)}"
    return BLOCK.sub(replace, text), updated
