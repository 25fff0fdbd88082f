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
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream
from amaranth.lib.wiring import Component, In, Out

from .tlb import ADDR_BITS, Tlb, TlbConfig
from .uapi import FaultKind, Status


__all__ = ["PagedTranslation", "PageRange", "page_lookup", "PAGE_ANSWER", "PAGED_COUNTERS",
           "check_tlbs"]

#: What the monitor's in side hands over from a ``TLB_FILL``.
PAGE_ANSWER = data.StructLayout({"status": 4, "base": ADDR_BITS, "size": 40, "mem_x": 8,
                                 "mem_y": 8, "perm": 2})

#: The monitor's counters when it translates by pages.
PAGED_COUNTERS = {
    "tlb_hits": "loads and stores judged on a TLB hit (after its fill, for one that missed)",
    "tlb_misses": "TLB_MISS sent to the memory manager",
    "page_faults": "loads and stores to a page the tile was not given (PAGE_FAULT)",
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
            "hits": Out(32), "misses": Out(32), "page_faults": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        tlbs = []
        for i, cfg in enumerate(self.tlbs):
            m.submodules[f"tlb{i}"] = tlb = Tlb(cfg)
            m.d.comb += tlb.lookup.eq(self.vaddr)
            tlbs.append(tlb)

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
                vaddr: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``(found, base, page_bytes, mem, perm)`` of the page holding ``vaddr`` for the tile at
    ``(tile_x, tile_y)`` (combinational: each range's bounds are constants)."""
    found = Signal(name="page_found")
    base = Signal(ADDR_BITS, name="page_base")
    size = Signal(40, name="page_bytes")
    mem = Signal(4, name="page_mem")
    perm = Signal(2, name="page_perm")
    for r in reversed(ranges):
        inside = ((tile_x == r.tile_x) & (tile_y == r.tile_y) & (vaddr >= r.vaddr)
                  & (vaddr < r.vaddr + r.size))
        with m.If(inside):
            rel = (vaddr - r.vaddr)[r.page_bits:]
            m.d.comb += [found.eq(1), base.eq(r.base + (rel << r.page_bits)),
                         size.eq(1 << r.page_bits), mem.eq(r.mem), perm.eq(r.perm)]
    return found, base, size, mem, perm
