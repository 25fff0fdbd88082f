"""A monitor's outgoing side (:mod:`apiary.os.monitor`): what its tile may send.

:class:`OutgoingCheck` judges each message from the tile (as the owner of its
:class:`~apiary.noc.gate.MessageGate`), with :class:`OutgoingRules` (what is wrong with a
message, from its head), :class:`TileOps` (the tile's capability operations), a token bucket
for the rate limit and, when the monitor translates by pages, a
:class:`~apiary.os.paging.PagedTranslation`.
"""

from typing import Any

from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, Component, connect, flipped

from ..noc.gate import Verdict
from ..noc.header import Fbits
from ..stream.counters import CounterSignature, count
from ..stream.token_bucket import Rate, TokenBucket
from ..tile import TileEnv
from .memory_tile import LOAD_MEM, MEM_META, STORE_MEM
from .monitor_messages import (REQUEST, HeadFormat, is_type, judge_members, merge_requests,
                               offered_only_if, request, request_payload)
from .monitor_tables import SEGMENT, command, free_row, ipc_lookup, segment_lookup
from .paging import PAGE_ANSWER, PAGED_COUNTERS, PagedTranslation
from .tlb import TlbConfig
from .uapi import (HANDLE_BITS, KERNEL_META, KERNEL_ONLY, OFFSET_BITS, TILE_OPS, FaultKind,
                   KernelMsgType as K, Perm, Status)


__all__ = ["OutgoingRules", "TileOps", "OutgoingCheck", "translation"]

Place = tuple[int, int]


def translation() -> wiring.Signature:
    """A load or store's translation (the translator's side): its ``fault`` (0: none), the
    physical ``addr`` and the memory tile ``mem_x, mem_y``."""
    return wiring.Signature({"fault": Out(4), "addr": Out(48), "mem_x": Out(8),
                             "mem_y": Out(8)})


class OutgoingRules(Component):
    """What, if anything, is wrong with a message from the tile, judged by its head (the
    module docstring of :mod:`apiary.os.monitor` has the rules); combinational, no state.

    ``fault`` is the :class:`~apiary.os.uapi.FaultKind` (0: none): ``MALFORMED`` for a head cut
    ``short``, ``FORGED`` for a kernel-only type, the checks of a load, store (a segment's,
    through ``mem``, or the ``page`` translation's when ``paged``) or ``CAP_SEND`` (through
    ``op`` and ``peer``), ``NO_IPC_CAP`` for any other message but the tile's capability
    operations (``tile_op``) without a capability for its destination (``dst``); with a
    rate limit that faults, ``RATE`` for a message that would pass but for ``tokens_ok``.
    ``report`` is the metadata of its ``FAULT`` (kind, the load, store or ``CAP_SEND``'s
    handle, address, size and permissions, the destination, the type). ``rewritten`` is the
    head to pass: its source the tile's place, a load or store addressed to its memory tile.
    ``cost`` is its rate-limit tokens (flits, at most ``burst``).

    Members
    -------
    head : In(width * max_head)
    short, tokens_ok : In(1)
    seg : Out(segment_lookup())
    dst : Out(ipc_lookup())
    page : In(translation())  (only when ``paged``)
    fault : Out(4)
    report : Out(KERNEL_META)
    rewritten : Out(width * max_head)
    is_mem, tile_op : Out(1)
    want : Out(2)
    cost : Out(23)
    """

    def __init__(self, width: int, place: Place, rate: Any = None, *,
                 paged: bool = False) -> None:
        self._fmt = fmt = HeadFormat(width)
        self._place, self._rate, self._paged = place, rate, paged
        head = width * fmt.max_head
        super().__init__({
            "head": In(head), "short": In(1), "tokens_ok": In(1, init=1),
            "seg": Out(segment_lookup()), "dst": Out(ipc_lookup()),
            **({"page": In(translation())} if paged else {}),
            "fault": Out(4), "report": Out(KERNEL_META), "rewritten": Out(head),
            "is_mem": Out(1), "tile_op": Out(1), "want": Out(2), "cost": Out(23),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        fmt, rate, short = self._fmt, self._rate, self.short
        value, hdr, mm, km = fmt.views(self.head)
        new = Signal(len(value))
        new_hdr, new_mm = fmt.header(new), fmt.meta(new, MEM_META)
        msg_type = hdr.msg_type
        is_mem, is_send = self.is_mem, msg_type == K.CAP_SEND.value
        handle = mm.addr[OFFSET_BITS:OFFSET_BITS + HANDLE_BITS]
        m.d.comb += [
            new.eq(value), self.rewritten.eq(fmt.flits_of(new)),
            # The source is the tile's own place, whatever it wrote: replies and memory acks
            # come back to it, never to a tile it names.
            new_hdr.src_x.eq(self._place[0]), new_hdr.src_y.eq(self._place[1]),
            is_mem.eq(is_type(msg_type, (LOAD_MEM, STORE_MEM))),
            self.tile_op.eq(is_type(msg_type, TILE_OPS)),
            self.want.eq(Mux(msg_type == LOAD_MEM, Perm.READ, Perm.WRITE)),
            self.seg.handle.eq(Mux(is_mem, handle, km.handle)),
            self.dst.x.eq(Mux(is_send, km.peer_x, hdr.dst_x)),
            self.dst.y.eq(Mux(is_send, km.peer_y, hdr.dst_y)),
            self.dst.fbits.eq(Mux(is_send, km.peer_fbits, hdr.dst_fbits)),
        ]
        if rate is not None:            # flits; a message larger than the bucket takes a full one
            m.d.comb += self.cost.eq(hdr.msg_len + 1)
            with m.If(hdr.msg_len + 1 > rate.burst):
                m.d.comb += self.cost.eq(rate.burst)
        fits, ring = self._fits(m, mm, km, is_send)
        mem_fault = self._memory(m, mm, handle, new_hdr, new_mm, fits, ring)

        op_entry = self.seg.entry
        narrower = (fits & ((km.perm & ~op_entry.perm) == 0)
                    & (km.addr < (1 << OFFSET_BITS)))
        send_fault = Signal(4)
        with m.If(~self.seg.current):
            m.d.comb += send_fault.eq(FaultKind.STALE_HANDLE)
        with m.Elif(~narrower):
            m.d.comb += send_fault.eq(FaultKind.DERIVE_WIDER)
        with m.Elif(~self.dst.allowed):
            m.d.comb += send_fault.eq(FaultKind.NO_IPC_CAP)

        checked = Signal(4)             # the violation the checks find, before the rate limit
        with m.If(short):
            m.d.comb += checked.eq(FaultKind.MALFORMED)
        with m.Elif(is_type(msg_type, KERNEL_ONLY)):
            m.d.comb += checked.eq(FaultKind.FORGED)
        with m.Elif(is_send):
            m.d.comb += checked.eq(send_fault)
        with m.Elif(is_mem):
            m.d.comb += checked.eq(mem_fault)
        with m.Elif(~self.tile_op & ~self.dst.allowed):
            m.d.comb += checked.eq(FaultKind.NO_IPC_CAP)
        m.d.comb += self.fault.eq(checked)
        if rate is not None and rate.on_excess == "fault":
            with m.If((checked == 0) & ~self.tokens_ok):
                m.d.comb += self.fault.eq(FaultKind.RATE)

        # What a FAULT reports beyond kind, destination and type: the details of a (whole) load,
        # store or CAP_SEND; zero for anything else (its head may hold no such fields).
        f_mem, f_send, r = is_mem & ~short, is_send & ~short, self.report
        m.d.comb += [
            r.op.eq(self.fault), r.user.eq(msg_type),
            r.handle.eq(Mux(f_mem, handle, Mux(f_send, km.handle, 0))),
            r.addr.eq(Mux(f_mem, mm.addr, Mux(f_send, km.addr, 0))),
            r.size.eq(Mux(f_mem, mm.size, Mux(f_send, km.size, 0))),
            r.perm.eq(Mux(f_mem, self.want, Mux(f_send, km.perm, 0))),
            r.peer_x.eq(Mux(f_send, km.peer_x, hdr.dst_x)),
            r.peer_y.eq(Mux(f_send, km.peer_y, hdr.dst_y)),
            r.peer_fbits.eq(Mux(f_send, km.peer_fbits, hdr.dst_fbits)),
        ]
        return m

    def _fits(self, m: Module, mm: Any, km: Any, is_send: Any) -> tuple[Any, Any]:
        """Whether the range a load or store (``mm``) or a ``CAP_SEND`` (``km``) names ends
        within its segment (one adder and one comparison serve both: a message is one or the
        other), and the ring mask of a load or store: a ring access (``wrap = k``) spans the
        ``2**k`` bytes around its offset, its last byte the offset with its low ``k`` bits set."""
        ring = Signal(OFFSET_BITS)
        m.d.comb += ring.eq(Cat(*(mm.wrap > k for k in range(OFFSET_BITS))))
        offset, ringed = mm.addr[:OFFSET_BITS], mm.wrap != 0
        first = Mux(is_send, km.addr[:OFFSET_BITS], Mux(ringed, offset | ring, offset))
        extent = Mux(is_send, km.size, Mux(ringed, 1, mm.size))
        fits = Signal()
        m.d.comb += fits.eq(first + extent <= self.seg.entry.size)
        return fits, ring

    def _memory(self, m: Module, mm: Any, handle: Any, new_hdr: Any, new_mm: Any, fits: Any,
                ring: Any) -> Any:
        """A load or store (its segment's ``handle``): its fault, and its head rewritten to
        the physical address (``fits`` and ``ring`` from :meth:`_fits`)."""
        mem_fault = Signal(4)
        with m.If(self.is_mem):
            m.d.comb += new_hdr.dst_fbits.eq(Fbits.LOCAL0)
        if self._paged:
            page = self.page
            m.d.comb += mem_fault.eq(page.fault)
            with m.If(self.is_mem):
                m.d.comb += [new_hdr.dst_x.eq(page.mem_x), new_hdr.dst_y.eq(page.mem_y),
                             new_mm.addr.eq(page.addr), new_mm.tag.eq(mm.tag)]
            return mem_fault
        entry, want = self.seg.entry, self.want
        offset = mm.addr[:OFFSET_BITS]
        in_bounds = Signal()
        m.d.comb += in_bounds.eq(
            fits & ((mm.wrap == 0) | ((mm.wrap <= OFFSET_BITS) & ((entry.base & ring) == 0))))
        with m.If(~self.seg.current):
            m.d.comb += mem_fault.eq(FaultKind.STALE_HANDLE)
        with m.Elif((entry.perm & want) != want):
            m.d.comb += mem_fault.eq(FaultKind.PERMISSION)
        with m.Elif(~in_bounds):
            m.d.comb += mem_fault.eq(FaultKind.OUT_OF_BOUNDS)
        with m.If(self.is_mem):
            m.d.comb += [new_hdr.dst_x.eq(entry.mem_x), new_hdr.dst_y.eq(entry.mem_y),
                         new_mm.addr.eq(entry.base + offset), new_mm.tag.eq(handle)]
        return mem_fault


class TileOps(Component):
    """The tile's capability operations (``CAP_ALLOC``, ``CAP_FREE``, ``CAP_SEND`` of type
    ``msg_type`` and metadata ``meta``, its handle's row ``entry``, ``current`` or not),
    done when ``go`` is high: combinational requests, taken at the clock edge.

    * ``CAP_ALLOC``: ``MM_ALLOC`` to the manager when the table has a free row, else
      ``CAP_RESULT`` ``TABLE_FULL`` to the tile.
    * ``CAP_FREE``: of a current handle, ``CAP_RESULT`` ``OK``, the row dropped (``drop``) and,
      when the tile owns the segment, ``MM_FREE`` of its root to the manager; of another,
      ``CAP_RESULT`` ``BAD_HANDLE``.
    * ``CAP_SEND`` (checked already): ``MM_DERIVE`` of the range to the manager, and
      ``CAP_RESULT`` ``OK``.

    The owner offers ``go`` only while ``to_noc`` and ``to_tile`` are ready.

    Members
    -------
    go : In(1)
    msg_type : In(8)
    meta : In(KERNEL_META)
    entry : In(SEGMENT)
    current : In(1)
    free : In(free_row(entries))
    to_noc, to_tile : Out(stream.Signature(REQUEST))
    drop : Out(command(slot=range(entries)))
    """

    def __init__(self, entries: int, tile: Place, manager: Place) -> None:
        self._tile = (*tile, Fbits.LOCAL0)
        self._manager = (*manager, Fbits.LOCAL0)
        super().__init__({
            "go": In(1), "msg_type": In(8), "meta": In(KERNEL_META), "entry": In(SEGMENT),
            "current": In(1), "free": In(free_row(entries)),
            "to_noc": Out(stream.Signature(REQUEST)), "to_tile": Out(stream.Signature(REQUEST)),
            "drop": Out(command(slot=range(entries))),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        km, entry, manager, tile = self.meta, self.entry, self._manager, self._tile
        to_noc, to_tile = self.to_noc, self.to_tile
        # Every CAP_RESULT answers the operation with its handle, size, permissions and word,
        # whatever the type: only the status depends on it.
        m.d.comb += [*request_payload(to_tile, K.CAP_RESULT, tile, op=self.msg_type,
                                      handle=km.handle, size=km.size, perm=km.perm,
                                      user=km.user),
                     self.drop.slot.eq(km.handle)]

        def answer(status: Status) -> list:
            return [to_tile.valid.eq(1), to_tile.payload.meta.status.eq(status)]

        with m.Switch(self.msg_type):
            with m.Case(K.CAP_ALLOC.value):
                with m.If(self.free.found):
                    m.d.comb += request(to_noc, K.MM_ALLOC, manager, size=km.size,
                                        perm=km.perm, user=km.user)
                with m.Else():
                    m.d.comb += answer(Status.TABLE_FULL)
            with m.Case(K.CAP_FREE.value):
                with m.If(self.current):
                    m.d.comb += [*answer(Status.OK), self.drop.en.eq(1)]
                    with m.If(entry.owner):
                        m.d.comb += request(to_noc, K.MM_FREE, manager, root=entry.root)
                with m.Else():
                    m.d.comb += answer(Status.BAD_HANDLE)
            with m.Case(K.CAP_SEND.value):
                m.d.comb += [
                    *request(to_noc, K.MM_DERIVE, manager, addr=entry.base + km.addr,
                             size=km.size, perm=km.perm, mem_x=entry.mem_x,
                             mem_y=entry.mem_y, root=entry.root, peer_x=km.peer_x,
                             peer_y=km.peer_y, peer_fbits=km.peer_fbits, user=km.user),
                    *answer(Status.OK),
                ]
        offered_only_if(m, self.go, to_noc.valid, to_tile.valid, self.drop.en)
        return m


class OutgoingCheck(Component):
    """The judge of every message from the tile (the owner of its gate: ``first`` ...
    ``accept``, see :class:`~apiary.noc.gate.MessageGate`), each judged once its head is in.

    In this order: while ``quarantined`` it is sunk (``sunk_out``); while the ``dst`` lookup
    is ``busy`` (an IPC grant uses it this cycle) it waits; a load or store waits for
    its page's translation (paged); a violation (:class:`OutgoingRules`) waits for ``to_noc``,
    then is sunk with ``faulted`` high (the tile is to be quarantined) and its ``FAULT`` sent
    to the error manager (``sunk_out``); a capability operation waits for ``to_noc`` and
    ``to_tile``, then is consumed by :class:`TileOps` (``cap_ops``); a message waits for its
    rate tokens (``rate_stalls``, each cycle); anything else passes, rewritten
    (``passed_out``), and spends its tokens. ``to_noc`` also carries a ``TLB_MISS`` (paged).
    Verdicts are combinational: a judged head adds no cycle here (the gate's own latency
    aside; a hit on a page adds 1, see :mod:`apiary.os.paging`).

    Members
    -------
    first, head, decide, short, accept : In; need, verdict, rewritten : Out  (the gate's)
    quarantined : In(1)
    faulted : Out(1)
    seg : Out(segment_lookup())
    dst : Out(ipc_lookup())
    free : In(free_row(entries))
    drop : Out(command(slot=range(entries)))
    to_noc, to_tile : Out(stream.Signature(REQUEST))
    answer : In(stream.Signature(PAGE_ANSWER))  (paged: the TLB_FILL from the in side)
    flush : In(1); flushing, mem_sent : Out(1)  (paged: flush the TLBs; a load or store passed)
    counters : Out(CounterSignature)
    """

    COUNTERS = {
        "passed_out": "messages from the tile passed to the NoC",
        "sunk_out": "messages from the tile sunk (violations, and everything while quarantined)",
        "cap_ops": "capability operations (CAP_ALLOC, CAP_FREE, CAP_SEND) handled",
        "rate_stalls": "cycles a message waited for rate tokens",
    }

    def __init__(self, env: TileEnv, entries: int, *, manager: Place, errors: Place,
                 rate: Any = None, tlbs: tuple[TlbConfig, ...] = ()) -> None:
        self._fmt = fmt = HeadFormat(env.width)
        self._env, self._entries, self._rate, self._tlbs = env, entries, rate, tlbs
        self._manager, self._errors = manager, errors
        super().__init__({
            **judge_members(env.width, fmt.max_head),
            "quarantined": In(1), "faulted": Out(1),
            "seg": Out(segment_lookup()), "dst": Out(ipc_lookup()),
            "free": In(free_row(entries)), "drop": Out(command(slot=range(entries))),
            "to_noc": Out(stream.Signature(REQUEST)), "to_tile": Out(stream.Signature(REQUEST)),
            **({"answer": In(stream.Signature(PAGE_ANSWER)), "flush": In(1),
                "flushing": Out(1), "mem_sent": Out(1)} if tlbs else {}),
            "counters": Out(CounterSignature({
                **self.COUNTERS, **(PAGED_COUNTERS if tlbs else {})})),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        fmt, c, env, rate = self._fmt, self.counters, self._env, self._rate
        m.submodules.rules = rules = OutgoingRules(env.width, (env.x, env.y), rate,
                                                   paged=bool(self._tlbs))
        m.submodules.ops = ops = TileOps(self._entries, (env.x, env.y), self._manager)
        _, hdr, mm, km = fmt.views(self.head)
        m.d.comb += [
            self.need.eq(fmt.need(self.first, (LOAD_MEM, STORE_MEM), TILE_OPS)),
            rules.head.eq(self.head), rules.short.eq(self.short),
            self.rewritten.eq(rules.rewritten),
            ops.msg_type.eq(hdr.msg_type), ops.meta.eq(km),
            ops.entry.eq(self.seg.entry), ops.current.eq(self.seg.current),
        ]
        for name in ("seg", "dst"):
            connect(m, rules=getattr(rules, name), tables=flipped(getattr(self, name)))
        connect(m, tables=flipped(self.free), ops=ops.free)
        connect(m, ops=ops.drop, tables=flipped(self.drop))
        connect(m, ops=ops.to_tile, sender=flipped(self.to_tile))
        take = Signal()
        if rate is not None:
            m.submodules.bucket = bucket = TokenBucket(Rate(rate.burst, rate.refill, rate.period))
            m.d.comb += [bucket.cost.eq(rules.cost), rules.tokens_ok.eq(bucket.ok),
                         bucket.take.eq(take)]
        accept = self.decide & self.accept
        translating, miss = self._paging(m, rules, mm, accept) if self._tlbs else (None, None)
        fault = stream.Signature(REQUEST).create()      # offered below, on a violation
        m.d.comb += [*request_payload(fault, K.FAULT, (*self._errors, Fbits.LOCAL0)),
                     fault.payload.meta.eq(rules.report)]

        with m.If(self.decide):
            with m.If(self.quarantined):
                m.d.comb += self.verdict.eq(Verdict.DROP)
                with m.If(self.accept):
                    count(m, c.sunk_out)
            with m.Elif(self.dst.busy):
                m.d.comb += self.verdict.eq(Verdict.WAIT)
            if translating is not None:
                with m.Elif(translating):
                    m.d.comb += self.verdict.eq(Verdict.WAIT)
            with m.Elif(rules.fault != 0):
                m.d.comb += self.verdict.eq(Mux(self.to_noc.ready, Verdict.DROP, Verdict.WAIT))
                with m.If(accept):
                    count(m, c.sunk_out)
                    m.d.comb += [self.faulted.eq(1), fault.valid.eq(1)]
            with m.Elif(~rules.tokens_ok):
                m.d.comb += self.verdict.eq(Verdict.WAIT)
                count(m, c.rate_stalls)
            with m.Elif(rules.tile_op):         # paid for from the bucket, as messages are
                ready = self.to_noc.ready & self.to_tile.ready
                m.d.comb += self.verdict.eq(Mux(ready, Verdict.DROP, Verdict.WAIT))
                with m.If(accept):
                    count(m, c.cap_ops)
                    m.d.comb += [ops.go.eq(1), take.eq(1)]
            with m.Else():
                m.d.comb += self.verdict.eq(Verdict.PASS)
                with m.If(accept):
                    count(m, c.passed_out)
                    m.d.comb += take.eq(1)
                    if self._tlbs:
                        m.d.comb += self.mem_sent.eq(rules.is_mem)
        merge_requests(m, self.to_noc, *([miss] if miss is not None else []), fault, ops.to_noc)
        return m

    def _paging(self, m: Module, rules: OutgoingRules, mm: Any,
                accept: Any) -> tuple[Any, Any]:
        """Paged translation of loads and stores; returns ``translating`` (a load or store
        waits for its page's translation) and the ``TLB_MISS`` requests' stream."""
        c = self.counters
        m.submodules.paging = paging = PagedTranslation(self._tlbs)
        translating = Signal()
        m.d.comb += [
            paging.query.eq(self.decide & rules.is_mem & ~self.short & ~self.quarantined),
            paging.vaddr.eq(mm.addr),
            paging.size.eq(mm.size), paging.wrap.eq(mm.wrap), paging.want.eq(rules.want),
            paging.taken.eq(accept), translating.eq(paging.query & ~paging.ready),
            rules.page.fault.eq(paging.fault), rules.page.addr.eq(paging.addr),
            rules.page.mem_x.eq(paging.mem_x), rules.page.mem_y.eq(paging.mem_y),
            c.tlb_hits.eq(paging.hits), c.tlb_misses.eq(paging.misses),
            c.page_faults.eq(paging.page_faults),
            paging.flush.eq(self.flush), self.flushing.eq(paging.flushing),
        ]
        connect(m, in_side=flipped(self.answer), paging=paging.answer)
        miss = stream.Signature(REQUEST).create()
        m.d.comb += [*request_payload(miss, K.TLB_MISS, (*self._manager, Fbits.LOCAL0),
                                      addr=paging.miss.payload),
                     miss.valid.eq(paging.miss.valid), paging.miss.ready.eq(miss.ready)]
        return translating, miss
