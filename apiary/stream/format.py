"""Message formats: one bit-field table per format, with what each field means and which values
it may take, from which everything else about the format is generated.

A :class:`Format` is a :class:`~apiary.stream.header.Header` (so its layout, ``pack`` and
``unpack`` are the header's, bit for bit) whose fields are :class:`Field`\\ s: each has a width,
a one-line description and, optionally, the values it may take (an enum). The table is
written in one of two orders:

* ``order="msb"`` (the default): first field at the most significant end, as protocols draw
  headers; :meth:`Format.layout` is the header's ``FlexibleLayout``.
* ``order="lsb"``: first field at the least significant bit, as
  :class:`amaranth.lib.data.StructLayout` packs it; :meth:`Format.layout` *is* that
  ``StructLayout`` (equal to one written out by hand with the same fields).

From the one table come the hardware layout, the Python ``pack``/``unpack``, the docs' table
(:meth:`Format.markdown`), the value checks of the simulation-time checkers
(:meth:`Format.problems`) and, in :mod:`apiary.noc.dissect`, a scapy ``Packet`` class. The
serialised form (``to_bytes``, and the scapy class) is the format's value most significant byte
first, padded with zero bits at the top to whole bytes.
"""

import enum as py_enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from amaranth.hdl import unsigned
from amaranth.lib import data

from .header import Header


__all__ = ["Field", "Format"]


@dataclass(frozen=True)
class Field:
    """One field of a :class:`Format`: ``name`` (a leading ``_`` makes it reserved: it must be
    zero and is not in the layout), ``width`` in bits, ``doc`` (what it holds, one line) and
    ``values``, the enum of the values it may take (``None``: any value of its width)."""
    name: str
    width: int
    doc: str = ""
    values: type[py_enum.Enum] | None = None

    def value_names(self) -> dict[int, str]:
        """``{value: name}`` of :attr:`values` (empty without)."""
        if self.values is None:
            return {}
        return {int(member.value): member.name for member in self.values}


def _as_field(item: "Field | tuple[str, int]") -> Field:
    if isinstance(item, Field):
        return item
    name, width = item
    return Field(str(name), int(width))


class Format(Header):
    """A message format: a table of :class:`Field`\\ s (or ``(name, width)`` pairs), in
    ``order`` ``"msb"`` (first field most significant, the default) or ``"lsb"`` (first field at
    bit 0, a ``StructLayout``'s order), ``size`` bits in all (default: the fields' sum; extra
    bits are zero, below the fields for ``"msb"``, above them for ``"lsb"``), and ``doc``, a
    sentence on what the format is for.

    Raises
    ------
    ValueError
        As :class:`~apiary.stream.header.Header` does; and for an ``order`` other than ``"msb"``
        or ``"lsb"``, a reserved field in an ``"lsb"`` table, or a field whose ``values`` do not
        fit its width.
    """

    def __init__(self, name: str, fields: Iterable["Field | tuple[str, int]"], *,
                 order: str = "msb", size: int | None = None, doc: str = "") -> None:
        specs = [_as_field(f) for f in fields]
        if order not in ("msb", "lsb"):
            raise ValueError(f"format {name!r}: order must be 'msb' or 'lsb', not {order!r}")
        if order == "lsb" and any(f.name.startswith("_") for f in specs):
            raise ValueError(f"format {name!r}: an 'lsb' table has no reserved fields (a "
                             f"StructLayout has no padding between fields)")
        for f in specs:
            bad = [v for v in f.value_names() if not 0 <= v < 1 << f.width]
            if bad:
                raise ValueError(f"format {name!r}: field {f.name!r} of {f.width} bits cannot "
                                 f"hold the values {bad} of {f.values!r}")
        super().__init__(name, [(f.name, f.width) for f in specs], size=size)
        self.order = order
        self.doc = doc
        self.specs = specs
        if order == "lsb":
            self._offsets = {}
            at = 0
            for f in specs:
                self._offsets[f.name] = (at, f.width)
                at += f.width

    def __repr__(self) -> str:
        return f"Format({self.name!r}, {self.bits} bits in {self.size}, {self.order} first)"

    def layout(self) -> Any:
        """The hardware layout: a ``FlexibleLayout`` of :attr:`size` bits (``"msb"``), or the
        ``StructLayout`` of the fields in table order (``"lsb"``)."""
        if self.order == "msb":
            return super().layout()
        return data.StructLayout({f.name: unsigned(f.width) for f in self.specs})

    def field(self, name: str) -> Field:
        for f in self.specs:
            if f.name == name:
                return f
        raise ValueError(f"format {self.name!r} has no field {name!r}; fields are {self.names}")

    def reserved(self) -> list[tuple[str, int, int]]:
        """``(name, offset, width)`` of every reserved (``_``) field."""
        out, top = [], self.size
        for f in self.specs:
            top -= f.width
            if f.name.startswith("_"):
                out.append((f.name, top, f.width))
        return out

    def problems(self, value: int) -> list[tuple[str, str]]:
        """``(field, what is wrong)`` for every field of ``value`` (the format's integer) that
        holds a value it may not: a reserved field not zero, a value outside its enum."""
        found = []
        for name, off, width in self.reserved():
            bits = value >> off & (1 << width) - 1
            if bits:
                found.append((name, f"reserved, must be zero, holds {bits:#x}"))
        for f in self.specs:
            names = f.value_names()
            if not names:
                continue
            v = value >> self.offset(f.name) & (1 << f.width) - 1
            if v not in names:
                known = ", ".join(f"{k} {n}" for k, n in sorted(names.items()))
                kind = getattr(f.values, "__name__", "known")
                found.append((f.name, f"{v} is not a {kind} value ({known})"))
        return found

    def bit_range(self, name: str) -> tuple[int, int]:
        """``(msb, lsb)`` of field ``name`` (reserved fields included) in the format's value."""
        top = self.size
        for f in self.specs:
            top -= f.width
            if f.name == name:
                return (top + f.width - 1, top) if self.order == "msb" else \
                    (self.offset(name) + f.width - 1, self.offset(name))
        raise ValueError(f"format {self.name!r} has no field {name!r}; fields are {self.names}")

    def markdown(self) -> str:
        """The format's table in Markdown: bits, field, width, values, meaning; most
        significant field first, whatever the table's order."""
        rows = ["| bits | field | width | values | meaning |", "|---|---|---|---|---|"]
        specs = self.specs if self.order == "msb" else list(reversed(self.specs))
        for f in specs:
            hi, lo = self.bit_range(f.name)
            bits = f"[{hi}]" if hi == lo else f"[{hi}:{lo}]"
            names = f.value_names()
            values = ", ".join(f"{v} {n}" for v, n in sorted(names.items())) if names else ""
            doc = "reserved (zero)" if f.name.startswith("_") and not f.doc else f.doc
            rows.append(f"| {bits} | `{f.name}` | {f.width} | {values} | {doc} |")
        return "\n".join(rows)
