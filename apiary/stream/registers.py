"""Run-time registers and tables as a signature: how a component declares state the control
plane may read and change while the design runs.

A component declares its control registers beside its counters (:mod:`.counters`), as one
member whose signature is a :class:`RegisterSignature` (seen from the component: ``In``):

* a :class:`Register` is a value the component reads (``regs.<name>``, an ``unsigned(width)``);
  whoever holds the control plane keeps it and writes it whole in one cycle. Without a control
  plane it is its ``reset`` value, constant.
* a :class:`Table` is ``entries`` entries of ``width`` bits that the component keeps itself (in
  registers or a memory). The control plane writes an entry whole in one cycle (``w_valid``,
  ``w_index``, ``w_data``) and reads one back (``r_index`` in, ``r_data`` out of the component
  on the next cycle or the same one: the reader holds ``r_index`` two cycles and samples
  ``r_data`` on the second). A read-only table (``writable=False``, a log) has only the read
  side. Without a control plane ``w_valid`` is 0 and ``r_index`` is 0.

A component that looks an entry up once per packet and keeps what it read until the packet ends
is *atomic per packet*: a packet never sees half of an old entry and half of a new one, because
an entry is written in one cycle.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from amaranth.hdl import unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["Register", "Table", "RegisterSignature", "TableSignature", "REGISTER_MAX_WIDTH",
           "TABLE_MAX_WIDTH"]

#: Widest register and table entry the control plane's address map allows.
REGISTER_MAX_WIDTH = 256
TABLE_MAX_WIDTH = 1984


def _check(name: str, width: object, limit: int, what: str) -> int:
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= limit:
        raise ValueError(f"{what} {name!r} must be 1 to {limit} bits wide, not {width!r}")
    return width


@dataclass(frozen=True)
class Register:
    """A control register: ``width`` bits, what it is for, its value at reset."""
    width: int
    description: str
    reset: int = 0


@dataclass(frozen=True)
class Table:
    """A table the component keeps: ``entries`` entries of ``width`` bits each.

    ``layout``, a :class:`~apiary.stream.header.Header` of ``width`` bits, names an entry's
    fields, so that tools can show and write entries field by field (``apiary ctl table``)."""
    entries: int
    width: int
    description: str
    writable: bool = True
    layout: Any = field(default=None, compare=False, hash=False)


class TableSignature(wiring.Signature):
    """The control plane's port into one :class:`Table`, seen from the control plane."""

    def __init__(self, table: Table):
        self.table = table
        index = unsigned(max(1, (table.entries - 1).bit_length()))
        members = {"r_index": Out(index), "r_data": In(table.width)}
        if table.writable:
            members.update(w_valid=Out(1), w_index=Out(index), w_data=Out(table.width))
        super().__init__(members)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.table == other.table

    def __hash__(self) -> int:
        return hash(self.table)


class RegisterSignature(wiring.Signature):
    """One member per register (``Out(unsigned(width))``) and per table (``Out(TableSignature)``),
    seen from the control plane; a component declares it ``In``.

    Parameters
    ----------
    registers : mapping
        ``{name: Register | Table}``, in address-map order.

    Attributes
    ----------
    registers : dict of str to Register or Table

    Raises
    ------
    ValueError
        If a name is not a Python identifier, a width is out of range, a table has no entries,
        a reset value does not fit, or a description is not a string.
    """

    def __init__(self, registers: Mapping):
        members, self.registers = {}, {}
        for name, spec in dict(registers).items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"a register's name must be a Python identifier, not {name!r}")
            if not isinstance(getattr(spec, "description", None), str):
                raise ValueError(f"register {name!r} needs a description (a string)")
            if isinstance(spec, Register):
                width = _check(name, spec.width, REGISTER_MAX_WIDTH, "register")
                if not isinstance(spec.reset, int) or not 0 <= spec.reset < 1 << width:
                    raise ValueError(f"register {name!r}: reset value {spec.reset!r} does not "
                                     f"fit in {width} bits")
                members[name] = Out(unsigned(width), init=spec.reset)
            elif isinstance(spec, Table):
                _check(name, spec.width, TABLE_MAX_WIDTH, "table")
                if isinstance(spec.entries, bool) or not isinstance(spec.entries, int) \
                        or not 1 <= spec.entries <= 1 << 16:
                    raise ValueError(f"table {name!r} must have 1 to 65536 entries, not "
                                     f"{spec.entries!r}")
                size = getattr(spec.layout, "size", spec.width)
                if size != spec.width:
                    raise ValueError(f"table {name!r}: its layout is {size} bits, its entries "
                                     f"{spec.width}")
                members[name] = Out(TableSignature(spec))
            else:
                raise ValueError(f"register {name!r} must be a Register or a Table, not "
                                 f"{spec!r}")
            self.registers[name] = spec
        super().__init__(members)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.registers == other.registers

    def __hash__(self) -> int:
        return hash(tuple(self.registers))

    def __repr__(self) -> str:
        return f"RegisterSignature({list(self.registers)})"
