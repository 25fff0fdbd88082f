"""Paged translation for the monitor (Coyote's TLBs, in place of segments) and the memory
manager's page table behind it.

Messages (kernel messages, :data:`~apiary.os.uapi.KERNEL_META`, no payload):

============  ====  =====================  =======================================================
message       type  from → to              fields of ``KERNEL_META``
============  ====  =====================  =======================================================
``TLB_MISS``  60    monitor → manager      ``addr``: the virtual address that missed (the tile is
                                           the header's ``src_x/y``)
``TLB_FILL``  61    manager → monitor      ``status`` ``OK``: ``addr`` (the page's physical
                                           base), ``size`` (the page's bytes), ``perm``,
                                           ``mem_x/y`` (its memory tile); ``NO_ENTRY``: the tile
                                           has no page there
``PAGE_MAP``  62    a trusted tile →       ``peer_x/y`` (the tile), ``addr`` (the virtual page),
                    manager                ``root`` (a frame of the pool), ``perm``, ``user``
``PAGE_UNMAP``  63  a trusted tile →       ``peer_x/y``, ``addr``, ``user``
                    manager
``CAP_RESULT``  35  manager → the trusted  ``op`` (``PAGE_MAP`` or ``PAGE_UNMAP``), ``status``,
                    tile                   ``user``
``TLB_SHOOTDOWN``  64  manager → the       (nothing): forget every translation
                    tile's monitor
``TLB_SHOOTDOWN_ACK``  65  the monitor →   (nothing): done, and none of the tile's loads and
                    manager                stores is in flight
============  ====  =====================  =======================================================

**The monitor's side** (:class:`PagedTranslation`, built by the monitor when
``MonitorConfig.tlbs`` names one or more :class:`~apiary.os.tlb.TlbConfig`, one per page size):
a load or store addresses a plain 48-bit virtual address. Every TLB is looked up at once
(1 cycle); on a hit the access must lie in the page (a ring access: its whole ring) and have the
permission, and goes to ``base + offset`` at the page's memory tile; on a miss the monitor sends
one ``TLB_MISS`` and holds the message until the ``TLB_FILL``, installs the translation in the
TLB of that page size, and looks up again. A ``NO_ENTRY`` answer is a ``PAGE_FAULT``: the
message is sunk, reported and the tile quarantined, as any violation. The tile's ``tag`` goes
to the memory tile and comes back in the ack untouched, with the ack's physical address (it
opens nothing: every access is translated), so the tile matches acks by tag.

**The manager's side** (:class:`PageRange`, :func:`page_lookup`): the pages each paged tile was
given, fixed when the design is built (:meth:`apiary.os.kernel.Kernel.map_pages`), as ranges of
contiguous virtual and physical pages; a ``TLB_MISS`` is answered from them in 2 cycles.

**Pages mapped at run time** (Coyote's virtual memory, driven by a trusted tile; the pool from
:meth:`apiary.os.kernel.Kernel.page_pool`): ``PAGE_MAP`` puts frame ``root`` of the
:class:`PagePool` at a tile's virtual page in a :class:`PageMaps` table (``map_entries`` rows),
answered ``OK``, ``TABLE_FULL`` (no free row), ``BAD_HANDLE`` (that page is mapped already) or
``BAD_SIZE`` (no such frame); a ``TLB_MISS`` is answered from the table when no fixed range
holds the address. ``PAGE_UNMAP`` clears the row at once (a miss from then on is a
``PAGE_FAULT``) and sends ``TLB_SHOOTDOWN`` to the tile's monitor, which flushes its TLBs,
waits until every load and store its tile has sent is acknowledged (:class:`Shootdown`: one
sent before the flush may still be on its way to the frame), and answers
``TLB_SHOOTDOWN_ACK``; only then does the trusted tile get its ``CAP_RESULT`` ``OK``, so a frame
unmapped from one tile and mapped to another is never reached by the first again. One unmap
waits for its shootdown at a time (another is answered ``BUSY``); the manager serves other
requests meanwhile.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream
from amaranth.lib.wiring import Component, In, Out

from ..noc.header import Fbits
from ..stream.counters import count
from .monitor_messages import REQUEST, request
from .tlb import ADDR_BITS, Tlb, TlbConfig
from .uapi import FaultKind, KernelMsgType as K, Status


__all__ = ["PagedTranslation", "PageRange", "page_lookup", "PAGE_ANSWER", "PAGED_COUNTERS",
           "check_tlbs", "PagePool", "PageMaps", "Shootdown", "SHOOTDOWN_COUNTERS"]

#: What the monitor's in side hands over from a ``TLB_FILL``.
PAGE_ANSWER = data.StructLayout({"status": 4, "base": ADDR_BITS, "size": 40, "mem_x": 8,
                                 "mem_y": 8, "perm": 2})

#: The monitor's counters when it translates by pages.
PAGED_COUNTERS = {
    "tlb_hits": "loads and stores judged on a TLB hit (after its fill, for one that missed)",
    "tlb_misses": "TLB_MISS sent to the memory manager",
    "page_faults": "loads and stores to a page the tile was not given (PAGE_FAULT)",
}

#: The paged monitor's own counter (:class:`Shootdown`).
SHOOTDOWN_COUNTERS = {
    "shootdowns": "TLB_SHOOTDOWN served: TLBs flushed, the tile's accesses drained, acked",
}


def check_tlbs(tlbs: object) -> tuple[TlbConfig, ...]:
    """``tlbs`` as a tuple of TlbConfig with distinct page sizes, or a ValueError."""
    if not isinstance(tlbs, tuple | list) or not all(isinstance(t, TlbConfig) for t in tlbs):
        raise ValueError(f"MonitorConfig tlbs must be a tuple of TlbConfig (one per page "
                         f"size), not {tlbs!r}")
    sizes = [t.page_bits for t in tlbs]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"MonitorConfig tlbs: two TLBs of the same page size "
                         f"({sorted(sizes)} page bits); give one TLB per page size")
    return tuple(tlbs)


class PagedTranslation(Component):
    """The monitor's paged translation (see the module docstring).

    While ``query`` is high (a load or store's head is being judged, held still), ``ready``
    rises once the answer is for that head: 1 cycle after a hit's head appears, and after the
    ``TLB_FILL`` plus 3 cycles (2 to fill, 1 to look up again) after a miss. ``fault`` then
    says what is wrong (0: nothing), ``addr`` is the physical address and ``mem_x/y`` the
    memory tile. ``miss`` offers the address to ask the manager about (once per miss);
    ``answer`` takes the ``TLB_FILL``. ``taken`` pulses when the monitor's verdict on the head
    takes effect (for the counters).

    Members
    -------
    query : In(1)
    vaddr : In(48)
    size : In(40)
    wrap : In(6)
    want : In(2)
    ready, fault, addr, mem_x, mem_y : Out
    miss : Out(stream.Signature(48))
    answer : In(stream.Signature(PAGE_ANSWER))
    taken : In(1)
    flush : In(1)
        Strobe: flush every TLB (:class:`~apiary.os.tlb.Tlb`).
    flushing : Out(1)
        A flush is asked for or under way in some TLB.
    hits, misses, page_faults : Out(32)
    """

    def __init__(self, tlbs: Sequence[TlbConfig]) -> None:
        self.tlbs = check_tlbs(tuple(tlbs))
        if not self.tlbs:
            raise ValueError("PagedTranslation needs at least one TlbConfig")
        super().__init__({
            "query": In(1), "vaddr": In(ADDR_BITS), "size": In(40), "wrap": In(6),
            "want": In(2), "taken": In(1),
            "ready": Out(1), "fault": Out(4), "addr": Out(ADDR_BITS), "mem_x": Out(8),
            "mem_y": Out(8),
            "miss": Out(stream.Signature(ADDR_BITS)),
            "answer": In(stream.Signature(PAGE_ANSWER)),
            "flush": In(1), "flushing": Out(1),
            "hits": Out(32), "misses": Out(32), "page_faults": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        tlbs = []
        for i, cfg in enumerate(self.tlbs):
            m.submodules[f"tlb{i}"] = tlb = Tlb(cfg)
            m.d.comb += [tlb.lookup.eq(self.vaddr), tlb.flush.eq(self.flush)]
            tlbs.append(tlb)
        m.d.comb += self.flushing.eq(Cat(t.busy for t in tlbs).any())

        # -- the answer for the head: every TLB has looked this address up --------------------
        answered = Cat(t.result.valid & (t.result.vpage == self.vaddr[c.page_bits:])
                       for t, c in zip(tlbs, self.tlbs)).all()
        hit = Signal()
        page_bytes = Signal(31)                 # up to 2**30
        base = Signal(ADDR_BITS)
        perm = Signal(2)
        for t, c in reversed(list(zip(tlbs, self.tlbs))):
            with m.If(t.result.hit):
                m.d.comb += [hit.eq(1), page_bytes.eq(c.page_bytes), base.eq(t.result.base),
                             perm.eq(t.result.perm), self.mem_x.eq(t.result.mem_x),
                             self.mem_y.eq(t.result.mem_y)]
        offset = Signal(30)
        m.d.comb += [offset.eq(self.vaddr & (page_bytes - 1)),
                     self.addr.eq(base + offset)]
        ring = Signal(31)
        m.d.comb += ring.eq(Const(1, 1) << self.wrap)
        lo = Mux(self.wrap != 0, offset & ~(ring - 1), offset)
        span = Mux(self.wrap != 0, ring, self.size)
        in_page = (lo + span <= page_bytes) & (self.wrap <= 30)

        # -- a miss: one TLB_MISS, then wait for the answer ------------------------------------
        pending = Signal()
        missed = Signal(ADDR_BITS)              # the address asked about
        unmapped = Signal()                     # ... was answered NO_ENTRY
        smallest = min(c.page_bits for c in self.tlbs)
        is_unmapped = unmapped & (missed[smallest:] == self.vaddr[smallest:])

        with m.If(self.query & answered):
            with m.If(hit):
                m.d.comb += self.ready.eq(1)
                with m.If((perm & self.want) != self.want):
                    m.d.comb += self.fault.eq(FaultKind.PERMISSION)
                with m.Elif(~in_page):
                    m.d.comb += self.fault.eq(FaultKind.OUT_OF_BOUNDS)
            with m.Elif(is_unmapped):
                m.d.comb += [self.ready.eq(1), self.fault.eq(FaultKind.PAGE_FAULT)]
            with m.Elif(~pending):
                m.d.comb += [self.miss.valid.eq(1), self.miss.payload.eq(self.vaddr)]
        with m.If(self.miss.valid & self.miss.ready):
            m.d.sync += [pending.eq(1), missed.eq(self.vaddr), unmapped.eq(0),
                         self.misses.eq(self.misses + 1)]
        with m.If(self.taken & self.ready):
            with m.If(self.fault == FaultKind.PAGE_FAULT):
                m.d.sync += [unmapped.eq(0), self.page_faults.eq(self.page_faults + 1)]
            with m.Elif(hit):
                m.d.sync += self.hits.eq(self.hits + 1)

        # -- the answer: install it in the TLB of its page size, or remember the fault ---------
        ans = self.answer.payload
        ok = ans.status == Status.OK
        fits = Cat(ans.size == c.page_bytes for c in self.tlbs)
        m.d.comb += self.answer.ready.eq(~ok | ~fits.any()
                                         | Cat(f & t.fill.ready
                                               for f, t in zip(fits, tlbs)).any())
        for f, t in zip(fits, tlbs):
            m.d.comb += [t.fill.valid.eq(self.answer.valid & ok & f),
                         t.fill.payload.vaddr.eq(missed), t.fill.payload.base.eq(ans.base),
                         t.fill.payload.mem_x.eq(ans.mem_x), t.fill.payload.mem_y.eq(ans.mem_y),
                         t.fill.payload.perm.eq(ans.perm)]
        with m.If(self.answer.valid & self.answer.ready):
            m.d.sync += [pending.eq(0), unmapped.eq(~ok | ~fits.any())]
        return m


@dataclass(frozen=True)
class PageRange:
    """Pages a tile was given: ``size`` bytes of virtual addresses from ``vaddr``, on
    ``2**page_bits``-byte pages, at physical ``base`` of memory ``mem`` (an index into the
    manager's memories), with ``perm``."""
    tile_x: int
    tile_y: int
    vaddr: int
    size: int
    page_bits: int
    mem: int
    base: int
    perm: int

    def translate(self, vaddr: int) -> int | None:
        """The physical base of the page holding ``vaddr``, or None outside the range."""
        if not self.vaddr <= vaddr < self.vaddr + self.size:
            return None
        return self.base + ((vaddr - self.vaddr) >> self.page_bits << self.page_bits)


def page_lookup(m: Module, ranges: Sequence[PageRange], tile_x: Any, tile_y: Any,
                vaddr: Any, fallback: tuple[Any, Any, Any, Any, Any] | None = None,
                ) -> tuple[Any, Any, Any, Any, Any]:
    """``(found, base, page_bytes, mem, perm)`` of the page holding ``vaddr`` for the tile at
    ``(tile_x, tile_y)`` (combinational: each range's bounds are constants); where no range
    holds it, ``fallback``'s (the same five values, ``found`` first), if given."""
    found = Signal(name="page_found")
    base = Signal(ADDR_BITS, name="page_base")
    size = Signal(40, name="page_bytes")
    mem = Signal(4, name="page_mem")
    perm = Signal(2, name="page_perm")
    if fallback is not None:                # the ranges' assignments below take precedence
        with m.If(fallback[0]):
            m.d.comb += [dst.eq(src) for dst, src in zip((found, base, size, mem, perm),
                                                         fallback)]
    for r in reversed(ranges):
        inside = ((tile_x == r.tile_x) & (tile_y == r.tile_y) & (vaddr >= r.vaddr)
                  & (vaddr < r.vaddr + r.size))
        with m.If(inside):
            rel = (vaddr - r.vaddr)[r.page_bits:]
            m.d.comb += [found.eq(1), base.eq(r.base + (rel << r.page_bits)),
                         size.eq(1 << r.page_bits), mem.eq(r.mem), perm.eq(r.perm)]
    return found, base, size, mem, perm


@dataclass(frozen=True)
class PagePool:
    """Frames a trusted tile may map at run time (``PAGE_MAP``): ``pages`` frames of
    ``2**page_bits`` bytes from physical ``base`` of memory ``mem`` (an index into the manager's
    memories)."""
    mem: int
    base: int
    pages: int
    page_bits: int

    def __post_init__(self) -> None:
        if not 1 <= self.pages <= 1 << 16:
            raise ValueError(f"a PagePool holds 1 to 65536 frames, not {self.pages!r}")


def _map_row(page_bits: int) -> data.StructLayout:
    return data.StructLayout({"valid": 1, "x": 8, "y": 8, "vpage": ADDR_BITS - page_bits,
                              "frame": 16, "perm": 2})


class PageMaps(Component):
    """The manager's table of pages mapped at run time: ``entries`` rows of (tile, virtual page,
    frame, permission), in registers.

    ``x``, ``y``, ``vaddr`` are looked up combinationally: ``hit`` (and ``index``, ``frame``,
    ``perm`` of the row) if the tile has a page there. ``free`` (and ``free_index``) name the
    first free row. ``put`` writes the row ``free_index`` with the looked-up tile and page and
    ``put_frame``, ``put_perm``; ``clear`` frees the row ``index``. Both take effect the next
    cycle.
    """

    def __init__(self, entries: int, page_bits: int) -> None:
        if not isinstance(entries, int) or not 1 <= entries <= 64:
            raise ValueError(f"PageMaps entries must be 1 to 64, not {entries!r}")
        self.entries, self.page_bits = entries, page_bits
        super().__init__({
            "x": In(8), "y": In(8), "vaddr": In(ADDR_BITS),
            "hit": Out(1), "index": Out(range(entries)), "frame": Out(16), "perm": Out(2),
            "free": Out(1), "free_index": Out(range(entries)),
            "put": In(1), "put_frame": In(16), "put_perm": In(2), "clear": In(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        layout = _map_row(self.page_bits)
        rows = [Signal(layout, name=f"row{i}") for i in range(self.entries)]
        vpage = self.vaddr[self.page_bits:]
        for i, row in reversed(list(enumerate(rows))):
            with m.If(row.valid & (row.x == self.x) & (row.y == self.y) & (row.vpage == vpage)):
                m.d.comb += [self.hit.eq(1), self.index.eq(i), self.frame.eq(row.frame),
                             self.perm.eq(row.perm)]
            with m.If(~row.valid):
                m.d.comb += [self.free.eq(1), self.free_index.eq(i)]
        for i, row in enumerate(rows):
            with m.If(self.put & (self.free_index == i)):
                m.d.sync += [row.valid.eq(1), row.x.eq(self.x), row.y.eq(self.y),
                             row.vpage.eq(vpage), row.frame.eq(self.put_frame),
                             row.perm.eq(self.put_perm)]
            with m.If(self.clear & (self.index == i)):
                m.d.sync += row.valid.eq(0)
        return m


class Shootdown(Component):
    """A paged monitor's side of ``PAGE_UNMAP``: on ``start`` (the in side took a
    ``TLB_SHOOTDOWN``) flush every TLB, then, once the flush is done and ``outstanding`` (the
    tile's loads and stores passed out, less the acks that came back) is zero, offer
    ``TLB_SHOOTDOWN_ACK`` to the manager on ``to_kernel``. ``busy`` from ``start`` until the
    ack is taken.

    ``sent`` pulses for each load or store passed to the NoC, ``acked`` for each load or store
    ack from the kernel that reaches the monitor (passed to the tile, or sunk: it is no longer
    on its way either way).
    """

    def __init__(self, manager: tuple[int, int]) -> None:
        self._manager = manager
        super().__init__({
            "start": In(1), "sent": In(1), "acked": In(1), "tlb_flushing": In(1),
            "flush": Out(1), "busy": Out(1), "outstanding": Out(16),
            "to_kernel": Out(stream.Signature(REQUEST)),
            "shootdowns": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        left = self.outstanding
        with m.If(self.sent & ~self.acked):
            m.d.sync += left.eq(left + 1)
        with m.Elif(self.acked & ~self.sent & (left != 0)):
            m.d.sync += left.eq(left - 1)
        # From the cycle after the strobe, the TLBs say busy until their flush is done.
        waiting = Signal()
        m.d.comb += [self.busy.eq(waiting), self.flush.eq(self.start)]
        with m.If(self.start):
            m.d.sync += waiting.eq(1)
        with m.If(waiting & ~self.tlb_flushing & (left == 0)):
            m.d.comb += request(self.to_kernel, K.TLB_SHOOTDOWN_ACK,
                                     (*self._manager, Fbits.LOCAL0))
            with m.If(self.to_kernel.ready):
                m.d.sync += waiting.eq(0)
                count(m, self.shootdowns)
        return m
