"""What a monitor (:mod:`apiary.os.monitor`) reads and what it sends.

Reads: the *head* of a message (its header flits, then its metadata flits), as a
:class:`~apiary.noc.gate.MessageGate` holds it, through :class:`HeadFormat`'s views.

Sends: kernel messages of header and metadata only (``FAULT``, ``CAP_RESULT``, ``MM_FREE`` ...),
each described by a :data:`REQUEST` (type, destination, :data:`~apiary.os.uapi.KERNEL_META`)
offered on a stream (:func:`request`) to a :class:`RequestSender`.
"""

from collections.abc import Iterable
from typing import Any

from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out, Component, connect, flipped

from ..noc.flit import flit_signature
from ..noc.framing import MessageSender, meta_plan
from ..noc.gate import MessageGate, Verdict
from ..noc.header import Fbits, field_location, header_flits, noc_header, spare_bytes
from .memory_tile import MEM_META
from .uapi import KERNEL_META


__all__ = ["REQUEST", "HeadFormat", "is_type", "judge_members", "judge", "request",
           "request_payload", "merge_requests", "offered_only_if", "RequestSender",
           "spare_lanes"]


#: A kernel message the monitor sends: type, destination and metadata (the source is its tile's).
REQUEST = data.StructLayout({
    "msg_type": 8, "dst_x": 8, "dst_y": 8, "dst_fbits": 4, "meta": KERNEL_META,
})

Dest = tuple[Any, Any, Any]         # x, y, fbits (ints or values)


def is_type(value: Any, types: Iterable[Any]) -> Any:
    """Whether ``value`` is one of ``types`` (enum members or ints)."""
    return Cat(*(value == int(getattr(t, "value", t)) for t in types)).any()


class HeadFormat:
    """Where a message head's fields are at one flit width.

    A head is ``n`` flits, flit *j* in bits ``j * width ..`` (as :class:`MessageGate` holds it);
    :meth:`views` reorders it into one value (header, then metadata) and views its fields,
    :meth:`flits_of` turns such a value back into head flits.
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self.header_flits = header_flits(width)
        self.mem_flits = self.flits(MEM_META)
        self.kernel_flits = self.flits(KERNEL_META)
        self.max_head = max(self.mem_flits, self.kernel_flits)
        self._type_lsb = field_location(width, "msg_type")[1]

    def held(self, header: bool = True, mem_meta: tuple[str, ...] | None = None) -> int | None:
        """With a one-flit head, the mask of its bits a gate keeps while a passed head waits
        (:class:`MessageGate`'s ``rewrites``): the header's fields (``header``) and the
        ``mem_meta`` fields of :data:`MEM_META` (``None``: all). A gate keeps what its judge
        rewrites and, when the sender is untrusted, everything the judge reads: the header and
        the memory metadata (kernel metadata is read only in messages the monitor consumes).
        ``None`` for longer heads."""
        if self.max_head != 1:
            return None
        w, mask = self.width, 0
        if header:
            for _, field in noc_header(w).layout():
                mask |= (1 << field.width) - 1 << field.offset
        for name, field in MEM_META:            # inline, from bit 0 (one-flit heads)
            if mem_meta is None or name in mem_meta:
                mask |= (1 << field.width) - 1 << field.offset
        return mask

    def flits(self, layout: data.StructLayout) -> int:
        """Head flits of a message whose metadata is ``layout``."""
        w = self.width
        return header_flits(w) + meta_plan(w, meta_bits=layout.size)[0]

    def views(self, head: Any) -> tuple[Any, Any, Any, Any]:
        """``(value, header, mem_meta, kernel_meta)`` views of a gate's head."""
        w, nh = self.width, self.header_flits
        flits = [head[j * w:(j + 1) * w] for j in range(len(head) // w)]
        value = Cat(*reversed(flits[:nh]), *flits[nh:])
        return (value, self.header(value), self.meta(value, MEM_META),
                self.meta(value, KERNEL_META))

    def header(self, value: Any) -> Any:
        """The header view of a value from :meth:`views`."""
        hdr = noc_header(self.width)
        return data.View(hdr.layout(), value[:hdr.size])

    def meta(self, value: Any, layout: data.StructLayout) -> Any:
        """The ``layout`` metadata view of a value from :meth:`views`."""
        w = self.width
        _, inline, bits = meta_plan(w, meta_bits=layout.size)
        start = 0 if inline else noc_header(w).size
        return data.View(layout, value[start:start + bits])

    def flits_of(self, value: Any) -> Any:
        """The inverse of :meth:`views`: the ``max_head`` head flits of a value."""
        w, nh = self.width, self.header_flits
        flits = [value[(nh - 1 - j) * w:(nh - j) * w] for j in range(nh)]
        flits += [value[nh * w + j * w: nh * w + (j + 1) * w]
                  for j in range(self.max_head - nh)]
        return Cat(*flits)

    def need(self, first: Any, mem_types: Iterable[Any], kern_types: Iterable[Any]) -> Any:
        """The head flits to judge a message by, from its first flit: memory metadata for
        ``mem_types``, kernel metadata for ``kern_types``, the header alone otherwise."""
        msg_type = first[self._type_lsb:self._type_lsb + 8]
        return Mux(is_type(msg_type, mem_types), self.mem_flits,
                   Mux(is_type(msg_type, kern_types), self.kernel_flits, self.header_flits))


_FROM_GATE = ("first", "head", "decide", "short", "accept")
_TO_GATE = ("need", "verdict", "rewritten")


def judge_members(width: int, max_head: int) -> dict[str, Any]:
    """The members of a component that judges a :class:`MessageGate`'s messages: the gate's
    ``first``, ``need``, ``head``, ``decide``, ``short``, ``verdict``, ``rewritten`` and
    ``accept``, flipped."""
    head = width * max_head
    return {"first": In(width), "need": Out(range(1, max_head + 1), init=1), "head": In(head),
            "decide": In(1), "short": In(1), "verdict": Out(Verdict), "rewritten": Out(head),
            "accept": In(1)}


def judge(m: Module, gate: MessageGate, judge: Any) -> None:
    """Connect ``gate`` to the component that judges its messages (:func:`judge_members`)."""
    m.d.comb += [getattr(judge, name).eq(getattr(gate, name)) for name in _FROM_GATE]
    m.d.comb += [getattr(gate, name).eq(getattr(judge, name)) for name in _TO_GATE]


def request(port: Any, msg_type: Any, dst: Dest, **meta: Any) -> list[Any]:
    """Statements (for ``m.d.comb``) offering a :data:`REQUEST` on the stream ``port``: its type,
    destination ``(x, y, fbits)`` and the named metadata fields (the others zero)."""
    return [port.valid.eq(1), *request_payload(port, msg_type, dst, **meta)]


def request_payload(port: Any, msg_type: Any, dst: Dest, **meta: Any) -> list[Any]:
    """:func:`request`'s statements but ``valid``: the payload alone."""
    p = port.payload
    stmts = [p.msg_type.eq(msg_type), p.dst_x.eq(dst[0]), p.dst_y.eq(dst[1]),
             p.dst_fbits.eq(dst[2])]
    return stmts + [getattr(p.meta, k).eq(v) for k, v in meta.items()]


def merge_requests(m: Module, into: Any, *sources: Any) -> None:
    """Drive the stream ``into`` from whichever of ``sources`` is valid (their owners offer at
    most one at a time; should two be valid, the last listed is taken); each source sees
    ``into.ready``. Combinational, no state. With none valid, ``into`` shows the first
    source's payload (no gate on the payload)."""
    m.d.comb += into.payload.eq(sources[0].payload)
    for source in sources:
        m.d.comb += source.ready.eq(into.ready)
        with m.If(source.valid):
            m.d.comb += [into.valid.eq(1), into.payload.eq(source.payload)]


def offered_only_if(m: Module, cond: Any, *strobes: Any) -> None:
    """Hold ``strobes`` (the valids of requests, the enables of commands) low unless ``cond``.
    A producer builds its requests without the condition that enables them and calls this
    after: what it offers does not change, and its payloads need no gate on ``cond``."""
    with m.If(~cond):
        m.d.comb += [strobe.eq(0) for strobe in strobes]


class RequestSender(Component):
    """Send each :data:`REQUEST` taken from ``i`` as a kernel message of header and metadata
    from ``(x, y, LOCAL0)``.

    One request is held at a time: ``i.ready`` is high while none is; the one taken is offered
    to a :class:`~apiary.noc.framing.MessageSender` from the next cycle, so its first flit is
    on ``o`` 1 cycle after the transfer on ``i``, and ``i.ready`` rises again the cycle after
    its last header or metadata flit is taken. Nothing is dropped.

    Members
    -------
    i : In(stream.Signature(REQUEST))
    o : Out(flit)
    """

    def __init__(self, width: int, x: int, y: int) -> None:
        self._width, self._x, self._y = width, x, y
        super().__init__({
            "i": In(stream.Signature(REQUEST)),
            "o": Out(flit_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.tx = tx = MessageSender(self._width, meta_bits=KERNEL_META.size)
        req = Signal(REQUEST)
        held = Signal()
        d = tx.i_hdr.payload
        m.d.comb += [
            tx.i_hdr.valid.eq(held), tx.i_data.valid.eq(0), self.i.ready.eq(~held),
            d.dst_x.eq(req.dst_x), d.dst_y.eq(req.dst_y), d.dst_fbits.eq(req.dst_fbits),
            d.src_x.eq(self._x), d.src_y.eq(self._y), d.src_fbits.eq(Fbits.LOCAL0),
            d.msg_type.eq(req.msg_type), d.payload_bytes.eq(0), d.meta.eq(req.meta),
        ]
        connect(m, sender=tx.o, out=flipped(self.o))
        with m.If(tx.i_hdr.valid & tx.i_hdr.ready):
            m.d.sync += held.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [req.eq(self.i.payload), held.eq(1)]
        return m


def spare_lanes(width: int) -> tuple[int, int] | None:
    """The data bits ``[lo, hi)`` of a :class:`RequestSender`'s message that carry neither its
    header nor its metadata, when the message is one flit (at 512 bits: the head payload lanes
    below the header, empty as ``payload_bytes`` is 0); ``None`` at widths where it is longer.
    Whatever they hold is ignored by the receiver."""
    flits, inline, _ = meta_plan(width, meta_bits=KERNEL_META.size)
    if flits or header_flits(width) != 1:
        return None
    return inline, spare_bytes(width) * 8
