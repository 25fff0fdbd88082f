"""Bit-field headers described MSB first, as protocols draw them, and their views on streams.

Network protocols (and Beehive's SystemVerilog packages) list header fields most significant bit
first, while :class:`amaranth.lib.data.StructLayout` places its first field at the least
significant bit. :class:`Header` is the one place where the two meet: a table of ``(name, width)``
pairs, MSB first, from which come

* :meth:`Header.layout`, an :class:`~amaranth.lib.data.FlexibleLayout` to view a signal with;
* :meth:`Header.pack` / :meth:`Header.unpack`, the same fields as Python integers;
* :meth:`Header.to_bytes` / :meth:`Header.from_bytes`, network byte order.

On a payload stream the first byte sits in lane 0, so a header read from (or written to) the
stream is byte-reversed first: :func:`header_view` and :func:`header_signal` do that, and
:func:`byte_reverse` is the wiring under them.
"""

from collections.abc import Iterable, Mapping

from amaranth import Cat, Module, Signal, Value
from amaranth.hdl import unsigned
from amaranth.lib import data


__all__ = ["Header", "byte_reverse", "header_view", "header_signal"]


class Header:
    """A fixed-size header described as ``(name, width)`` pairs, most significant field first.

    Fields whose name starts with ``_`` are padding: they take space, are not in the layout, and
    pack as zero. ``size`` (default: the sum of the widths) pads the header with zeros at the
    least significant end, as Beehive pads its 234-bit header into a 512-bit flit.

    Raises
    ------
    ValueError
        If two fields share a name, a width is not positive, or the fields do not fit ``size``.
    """

    def __init__(self, name: str, fields: Iterable[tuple[str, int]], *,
                 size: int | None = None) -> None:
        self.name = name
        self.fields = [(str(n), int(w)) for n, w in fields]
        names = [n for n, _ in self.fields if not n.startswith("_")]
        if len(set(names)) != len(names):
            raise ValueError(f"header {name!r} names a field twice")
        for n, w in self.fields:
            if w <= 0:
                raise ValueError(f"header {name!r}: field {n!r} has width {w}; widths must be "
                                 f"positive")
        self.bits = sum(w for _, w in self.fields)
        self.size = self.bits if size is None else int(size)
        if self.bits > self.size:
            raise ValueError(f"header {name!r} needs {self.bits} bits but its size is {self.size}")
        self._offsets = {}
        top = self.size
        for n, w in self.fields:
            top -= w
            if not n.startswith("_"):
                self._offsets[n] = (top, w)

    def __repr__(self) -> str:
        return f"Header({self.name!r}, {self.bits} bits in {self.size})"

    @property
    def names(self) -> list[str]:
        return list(self._offsets)

    def offset(self, name: str) -> int:
        """Bit offset of field ``name`` from the LSB of the header."""
        return self._offsets[name][0]

    def width(self, name: str) -> int:
        return self._offsets[name][1]

    def layout(self) -> data.FlexibleLayout:
        """A :class:`~amaranth.lib.data.FlexibleLayout` of :attr:`size` bits with every field."""
        return data.FlexibleLayout(self.size, {
            n: data.Field(unsigned(w), off) for n, (off, w) in self._offsets.items()
        })

    def pack(self, values: Mapping[str, int] | None = None, **kwargs: int) -> int:
        """Pack field values (a dict and/or keywords; missing fields are zero) into an int."""
        values = dict(values or {}, **kwargs)
        word = 0
        for n, v in values.items():
            if n not in self._offsets:
                raise ValueError(f"header {self.name!r} has no field {n!r}; fields are "
                                 f"{self.names}")
            off, w = self._offsets[n]
            v = int(v)
            if not 0 <= v < (1 << w):
                raise ValueError(f"header {self.name!r}: {n}={v} does not fit in {w} bits")
            word |= v << off
        return word

    def unpack(self, word: int) -> dict[str, int]:
        """Split an int of :attr:`size` bits into a dict of field values."""
        return {n: (word >> off) & ((1 << w) - 1) for n, (off, w) in self._offsets.items()}

    def to_bytes(self, values: Mapping[str, int] | None = None, **kwargs: int) -> bytes:
        """Network byte order (the MSB of the header in the first byte)."""
        if self.size % 8:
            raise ValueError(f"header {self.name!r} is {self.size} bits, not a whole number of "
                             f"bytes")
        return self.pack(values, **kwargs).to_bytes(self.size // 8, "big")

    def from_bytes(self, raw: bytes) -> dict[str, int]:
        if len(raw) < self.size // 8:
            raise ValueError(f"header {self.name!r} needs {self.size // 8} bytes, got {len(raw)}")
        return self.unpack(int.from_bytes(raw[:self.size // 8], "big"))


def byte_reverse(value: Value) -> Value:
    """``value`` with its bytes in the opposite order (wiring only).

    A :class:`Header` view is most significant byte first (network order read as a big-endian
    number), while a payload stream and :class:`~apiary.stream.realign.StreamInsert`'s header
    input carry the first byte in lane 0. ``byte_reverse(view.as_value())`` converts one into the
    other; ``len(value)`` must be a multiple of 8.
    """
    if len(value) % 8:
        raise ValueError(f"byte_reverse needs a whole number of bytes, not {len(value)} bits")
    return Cat(value[8 * k:8 * k + 8] for k in reversed(range(len(value) // 8)))


def header_view(header: Header, value: Value, offset: int = 0) -> data.View:
    """View the bytes ``value`` (lane order: byte ``k`` in bits ``8k..8k+7``), starting at byte
    ``offset``, as the MSB-first :class:`Header` ``header``."""
    size = header.size // 8
    return data.View(header.layout(), byte_reverse(value[8 * offset:8 * (offset + size)]))


def header_signal(m: Module, header: Header, value: Value, offset: int = 0) -> data.View:
    """Like :func:`header_view`, but a signal driven once from ``value``: cheaper to elaborate
    when its fields are used many times."""
    sig = Signal(header.layout(), name=f"{header.name}_at{offset}")
    m.d.comb += sig.as_value().eq(header_view(header, value, offset).as_value())
    return sig
