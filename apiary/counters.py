"""The counter bank: every counter of a design, collected from what its tiles declare.

Each tile declares its counters as a :class:`~apiary.stream.counters.CounterSignature` member
(:class:`~apiary.tile.Tile`'s ``counters=``); the design's top level adds the mesh's own (messages
sunk at the edge of a plane, or at a position without a tile). The bank lists them all, in
declaration order, each with its full name ``<tile>_<counter>``, its width, what it counts and its
index (its address in the bank, what a control plane reads it by). The top level brings the
bank out as one member, ``counters``, whose ports are named like the entries; every consumer
(the simulators, ``apiary bench``, the LiteX SoC's registers, the Vivado wrapper) reads the bank
rather than guessing counters from port names.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from .stream.counters import CounterSignature


__all__ = ["Counter", "CounterBank"]


@dataclass(frozen=True)
class Counter:
    """One counter of a design."""
    name: str           # full name: "<owner>_<counter>"
    owner: str          # the tile's name, or "<plane> mesh"
    counter: str        # its name in the owner
    width: int
    description: str
    index: int          # position in the bank


class CounterBank:
    """The ordered counters of a design; see the module docstring.

    Raises
    ------
    ValueError
        If two counters would have the same full name.
    """

    def __init__(self) -> None:
        self._entries: dict[str, Counter] = {}

    def add(self, owner: str, signature: CounterSignature, prefix: str | None = None) -> None:
        """Add every counter of ``signature`` under ``<prefix>_<counter>`` (prefix: ``owner``)."""
        prefix = owner if prefix is None else prefix
        for counter, member in signature.members.items():
            name = f"{prefix}_{counter}"
            if name in self._entries:
                raise ValueError(f"two counters are named {name!r} (of {owner!r} and "
                                 f"{self._entries[name].owner!r})")
            self._entries[name] = Counter(name, owner, counter, member.shape.width,
                                          signature.descriptions[counter], len(self._entries))

    def signature(self) -> CounterSignature:
        """One member per counter, named by its full name: the design's ``counters`` port."""
        return CounterSignature({c.name: (c.width, c.description) for c in self})

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def __getitem__(self, name: str) -> Counter:
        return self._entries[name]

    def __iter__(self) -> Iterator[Counter]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def table(self) -> str:
        """A Markdown table of the bank: index, name, width, what it counts."""
        rows = ["| index | counter | bits | counts |", "|---:|---|---:|---|"]
        rows += [f"| {c.index} | `{c.name}` | {c.width} | {c.description} |" for c in self]
        return "\n".join(rows)
