"""Reading a message's header fields from its first flits, and telling which known tile sent it
(the tiles that keep per-source state: credited queues, tenant shapers)."""

from collections.abc import Sequence
from typing import Any

from amaranth import Module, Signal

from ..noc.gate import MessageGate
from ..noc.header import field_location, header_flits, noc_header
from ..noc.judge import FirstFlitJudge


__all__ = ["head_field", "match_source", "head_gate"]


def head_gate(m: Module, width: int, name: str = "gate") -> Any:
    """A submodule ``name`` that judges each message by its whole NoC header: a
    :class:`~apiary.noc.judge.FirstFlitJudge` where the header is one flit (nothing stored), a
    :class:`~apiary.noc.gate.MessageGate` at 64 bits (it stores the first header flit). The
    owner sets ``verdict`` (and must hold a ``PASS`` until ``accept``) and reads ``head``."""
    nh = header_flits(width)
    if nh == 1:
        gate: Any = FirstFlitJudge(width)
    else:
        gate = MessageGate(width, nh)
    m.submodules[name] = gate
    m.d.comb += [gate.need.eq(nh), gate.rewritten.eq(gate.head)]
    return gate


def head_field(width: int, head: Any, name: str) -> Any:
    """Header field ``name`` of a message whose first flits are ``head`` (flit *j* in bits
    ``j * width ..``, as :class:`~apiary.noc.gate.MessageGate` shows them)."""
    flit, lsb = field_location(width, name)
    if len(head) < (flit + 1) * width:
        raise ValueError(f"{name} is in flit {flit} of a {width}-bit header; the head holds "
                         f"{len(head) // width} flits")
    start = flit * width + lsb
    return head[start:start + noc_header(width).width(name)]


def match_source(m: Module, width: int, head: Any,
                 places: Sequence[tuple[int, int]]) -> tuple[Signal, Signal]:
    """``(found, index)``: whether the message's ``src_x, src_y`` is one of ``places``, and
    which (combinational)."""
    found, index = Signal(), Signal(range(max(2, len(places))))
    src_x, src_y = head_field(width, head, "src_x"), head_field(width, head, "src_y")
    for k, (x, y) in enumerate(places):
        with m.If((src_x == x) & (src_y == y)):
            m.d.comb += [found.eq(1), index.eq(k)]
    return found, index
