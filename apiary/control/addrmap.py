"""The address map of a tile on the control plane, and of a whole design.

Every tile's control agent serves 32-bit words at 16-bit addresses:

==================  ======================================================================
address             word
==================  ======================================================================
``0x0000 + i``      the counters at the position: the tile's own, then its monitor's
                    (``monitor_<name>``), in declaration order; a counter wider than 32 bits
                    takes several words, least significant first. Read-only.
``0x1000 + i``      the tile's registers (:class:`~apiary.stream.registers.Register`), in
                    declaration order, each ``ceil(width / 32)`` words, least significant
                    first. A register wider than 32 bits is written a word at a time, each
                    word taking effect when written.
``0x2000 + 64 t``   table ``t`` (:class:`~apiary.stream.registers.Table`), in declaration order:
                    ``k = ceil(width / 32)`` *staging* words (``+0 .. +k-1``, least significant
                    first), then ``COMMIT`` (``+k``: writing ``i`` copies the staging words into
                    entry ``i`` whole, in one cycle) and ``LOAD`` (``+k+1``: writing ``i`` copies
                    entry ``i`` into the staging words, to be read). A read-only table has no
                    ``COMMIT`` (a write there is refused) and its staging words are read-only.
==================  ======================================================================

So an entry is written with one burst of ``k + 1`` writes (the entry's words, then its index at
``COMMIT``) and read with a write to ``LOAD`` and ``k`` reads. Any other address answers
``BAD_ADDR``.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..stream.counters import CounterSignature
from ..stream.registers import Register, RegisterSignature, Table


__all__ = ["COUNTER_BASE", "REGISTER_BASE", "TABLE_BASE", "TABLE_STRIDE", "WORD_BITS",
           "MapEntry", "TileMap", "DesignMap", "words_of"]

COUNTER_BASE = 0x0000
REGISTER_BASE = 0x1000
TABLE_BASE = 0x2000
TABLE_STRIDE = 64
WORD_BITS = 32


def words_of(width: int) -> int:
    """How many 32-bit words a value of ``width`` bits takes."""
    return -(-width // WORD_BITS)


@dataclass(frozen=True)
class MapEntry:
    """One named thing in a tile's address map.

    ``kind`` is ``"counter"``, ``"register"`` or ``"table"``; ``addr`` its first word (for a
    table, its first staging word); ``words`` how many words it (an entry) takes; ``entries``
    the number of entries of a table (1 otherwise); ``writable`` whether the control plane may
    change it; ``reset`` a register's value at reset; ``layout`` the
    :class:`~apiary.stream.header.Header` naming a table entry's fields, if it has one.
    """
    name: str
    kind: str
    addr: int
    width: int
    words: int
    description: str
    entries: int = 1
    writable: bool = False
    reset: int = 0
    layout: Any = field(default=None, compare=False)

    @property
    def commit(self) -> int:
        """A table's ``COMMIT`` address."""
        return self.addr + self.words

    @property
    def load(self) -> int:
        """A table's ``LOAD`` address."""
        return self.addr + self.words + 1


@dataclass
class TileMap:
    """The address map of the agent at one position: tile ``name`` at ``(x, y)``.

    Parameters
    ----------
    counters : sequence of (prefix, CounterSignature)
        The counter signatures at the position, in order; a counter is named
        ``<prefix><counter>`` (prefix ``""`` for the tile's own, ``"monitor_"`` for its
        monitor's).
    registers : RegisterSignature or None
    """
    name: str
    x: int
    y: int
    entries: dict[str, MapEntry] = field(default_factory=dict)

    @classmethod
    def build(cls, name: str, x: int, y: int,
              counters: Iterable[tuple[str, CounterSignature]] = (),
              registers: RegisterSignature | None = None) -> "TileMap":
        tmap = cls(name, x, y)
        addr = COUNTER_BASE
        for prefix, sig in counters:
            for counter, member in sig.members.items():
                width = member.shape.width
                tmap._add(MapEntry(f"{prefix}{counter}", "counter", addr, width, words_of(width),
                                   sig.descriptions[counter]))
                addr += words_of(width)
        if addr > REGISTER_BASE:
            raise ValueError(f"tile {name!r} has more counter words ({addr}) than the map "
                             f"holds ({REGISTER_BASE})")
        if registers is not None:
            addr, table = REGISTER_BASE, 0
            for reg, spec in registers.registers.items():
                if isinstance(spec, Register):
                    tmap._add(MapEntry(reg, "register", addr, spec.width, words_of(spec.width),
                                       spec.description, writable=True, reset=spec.reset))
                    addr += words_of(spec.width)
                else:
                    assert isinstance(spec, Table)
                    tmap._add(MapEntry(reg, "table", TABLE_BASE + TABLE_STRIDE * table,
                                       spec.width, words_of(spec.width), spec.description,
                                       entries=spec.entries, writable=spec.writable,
                                       layout=spec.layout))
                    table += 1
            if addr > TABLE_BASE:
                raise ValueError(f"tile {name!r} has more register words than the map holds")
            if TABLE_BASE + TABLE_STRIDE * table > 1 << 16:
                raise ValueError(f"tile {name!r} has more tables than the map holds")
        return tmap

    def _add(self, entry: MapEntry) -> None:
        if entry.name in self.entries:
            raise ValueError(f"tile {self.name!r}: two things in its address map are named "
                             f"{entry.name!r}")
        self.entries[entry.name] = entry

    def __iter__(self) -> Iterator[MapEntry]:
        return iter(self.entries.values())

    def __getitem__(self, name: str) -> MapEntry:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(self.entries) or "nothing"
            raise KeyError(f"tile {self.name!r} has no counter, register or table named "
                           f"{name!r}; it has {known}") from None

    def of_kind(self, kind: str) -> list[MapEntry]:
        return [e for e in self if e.kind == kind]

    def counter_words(self) -> int:
        return sum(e.words for e in self.of_kind("counter"))


@dataclass
class DesignMap:
    """The address maps of every control agent of a design, by tile name, and where the design's
    controller sits (``controller``: ``(x, y)`` or ``None``)."""
    tiles: dict[str, TileMap] = field(default_factory=dict)
    controller: Any = None

    def __iter__(self) -> Iterator[TileMap]:
        return iter(self.tiles.values())

    def tile(self, name: str) -> TileMap:
        try:
            return self.tiles[name]
        except KeyError:
            known = ", ".join(self.tiles) or "none"
            raise KeyError(f"no tile named {name!r} on the control plane; tiles: "
                           f"{known}") from None

    def lookup(self, name: str) -> tuple[TileMap, MapEntry]:
        """``(tile map, entry)`` for ``"<tile>.<name>"``."""
        tile, sep, what = name.partition(".")
        if not sep or not what:
            raise KeyError(f"{name!r}: name a counter, register or table as <tile>.<name>, "
                           f"e.g. udp_rx.bad_checksum")
        tmap = self.tile(tile)
        return tmap, tmap[what]
