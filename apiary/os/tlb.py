"""A set-associative TLB (Coyote's per-vFPGA TLB, OSDI'20 §4.4) and its Python model.

Formats (all addresses are byte addresses, 48 bits):

============  ==================================================================================
layout        fields
============  ==================================================================================
``TLB_FILL``  ``vaddr`` (any address in the page), ``base`` (the page's physical base, page
              aligned), ``mem_x``, ``mem_y`` (the memory tile holding it), ``perm``
``TLB_HIT``   ``valid`` (a lookup finished: of the address presented the cycle before, with no
              fill since), ``vpage`` (that address's page number), ``hit``, then ``base``,
              ``mem_x``, ``mem_y`` and ``perm`` of the entry that hit
============  ==================================================================================

A :class:`Tlb` of ``sets`` × ``ways`` entries caches translations of ``2**page_bits``-byte
pages. An address's page number ``vpage = vaddr >> page_bits`` selects set ``vpage % sets``;
the entry's tag is the rest of ``vpage``. Each way is a :class:`~amaranth.lib.memory.Memory`
with a synchronous read port (block RAM on an FPGA, as Coyote's are), so:

* **Lookup**: 1 cycle. ``lookup`` is read every cycle; ``result`` holds the answer for the
  address of the cycle before (``result.valid`` low while a fill uses the memories).
* **Fill**: 2 cycles (read the set, write one way), during which ``fill.ready`` is low.
  The way is the one already holding the page, else the first invalid way, else the set's
  round-robin victim (a pointer per set, moved on by each replacement).
* **Flush**: a strobe on ``flush`` clears every entry, one set per cycle (``sets`` cycles, no
  lookup finishing and no fill taken meanwhile; a fill being written finishes first); ``busy``
  is high from the strobe until the last set is clear. The memory manager asks for one when a
  page is unmapped at run time (:mod:`apiary.os.paging`), so that no stale translation survives.

Coyote's geometries (its ``lynxTypes``): 4 KiB pages, 1024 sets × 4 ways (:data:`COYOTE_4K`);
2 MiB pages, 64 sets × 2 ways (:data:`COYOTE_2M`). The default :class:`TlbConfig` is small.
"""

from dataclasses import dataclass, field
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Component, In, Out

from ..stream.integers import power_of_two


__all__ = ["TlbConfig", "COYOTE_4K", "COYOTE_2M", "Tlb", "TlbModel", "TlbEntry",
           "ADDR_BITS", "TLB_FILL", "TLB_HIT"]

#: Bits of a virtual or physical byte address.
ADDR_BITS = 48

TLB_FILL = data.StructLayout({"vaddr": ADDR_BITS, "base": ADDR_BITS, "mem_x": 8, "mem_y": 8,
                              "perm": 2})

TLB_HIT = data.StructLayout({"valid": 1, "vpage": ADDR_BITS, "hit": 1, "base": ADDR_BITS,
                             "mem_x": 8, "mem_y": 8, "perm": 2})


@dataclass(frozen=True)
class TlbConfig:
    """The geometry of one TLB: ``sets`` (a power of two, 1 to 4096) × ``ways`` (1 to 8)
    entries of ``2**page_bits``-byte pages (``page_bits`` 12 to 30: 4 KiB to 1 GiB)."""
    sets: int = 16
    ways: int = 2
    page_bits: int = 12
    set_bits: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not power_of_two(self.sets) or self.sets > 4096:
            raise ValueError(f"TlbConfig sets must be a power of two from 1 to 4096, not "
                             f"{self.sets!r}")
        if not isinstance(self.ways, int) or isinstance(self.ways, bool) \
                or not 1 <= self.ways <= 8:
            raise ValueError(f"TlbConfig ways must be 1 to 8, not {self.ways!r}")
        if not isinstance(self.page_bits, int) or isinstance(self.page_bits, bool) \
                or not 12 <= self.page_bits <= 30:
            raise ValueError(f"TlbConfig page_bits must be 12 (4 KiB pages) to 30 (1 GiB), "
                             f"not {self.page_bits!r}")
        object.__setattr__(self, "set_bits", self.sets.bit_length() - 1)

    @property
    def page_bytes(self) -> int:
        return 1 << self.page_bits

    @property
    def entries(self) -> int:
        return self.sets * self.ways

    def set_of(self, vaddr: int) -> int:
        return (vaddr >> self.page_bits) & (self.sets - 1)

    def tag_of(self, vaddr: int) -> int:
        return vaddr >> (self.page_bits + self.set_bits)


#: Coyote's small-page TLB: 4 KiB pages, 1024 sets × 4 ways.
COYOTE_4K = TlbConfig(sets=1024, ways=4, page_bits=12)
#: Coyote's large-page TLB: 2 MiB pages, 64 sets × 2 ways.
COYOTE_2M = TlbConfig(sets=64, ways=2, page_bits=21)


def _tag_bits(config: TlbConfig) -> int:
    return max(1, ADDR_BITS - config.page_bits - config.set_bits)


def _entry_layout(config: TlbConfig) -> data.StructLayout:
    return data.StructLayout({
        "valid": 1, "tag": _tag_bits(config),
        "frame": ADDR_BITS - config.page_bits, "mem_x": 8, "mem_y": 8, "perm": 2,
    })


class Tlb(Component):
    """A set-associative TLB (see the module docstring): lookups of 1 cycle, one per cycle;
    fills of 2 cycles, during which no lookup finishes. It drops nothing: a fill always
    installs (replacing the set's round-robin victim when the set is full).

    Members
    -------
    lookup : In(48)
        The virtual address to look up; its answer is in ``result`` the next cycle.
    result : Out(TLB_HIT)
    fill : In(stream.Signature(TLB_FILL))
        A translation to install.
    flush : In(1)
        Strobe: clear every entry.
    busy : Out(1)
        A flush is asked for or under way.
    """

    def __init__(self, config: TlbConfig = TlbConfig()) -> None:
        if not isinstance(config, TlbConfig):
            raise ValueError(f"a Tlb needs a TlbConfig, not {config!r}")
        self.config = config
        super().__init__({
            "lookup": In(ADDR_BITS),
            "result": Out(TLB_HIT),
            "fill": In(stream.Signature(TLB_FILL)),
            "flush": In(1),
            "busy": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cfg = self.config
        entry = _entry_layout(cfg)
        sb, pb = cfg.set_bits, cfg.page_bits
        tag_bits = _tag_bits(cfg)
        ways = [Memory(shape=entry, depth=cfg.sets, init=[]) for _ in range(cfg.ways)]
        reads, writes = [], []
        for i, mem in enumerate(ways):
            m.submodules[f"way{i}"] = mem
            reads.append(mem.read_port())
            writes.append(mem.write_port())

        def set_of(addr: Any) -> Any:
            return addr[pb:pb + sb] if sb else 0

        filling = Signal()                      # the fill's set is being read this cycle
        writing = Signal()                      # ... and written this one
        flush_asked = Signal()                  # a flush strobe not yet started
        flushing = Signal()                     # clearing set `flush_set`
        flush_set = Signal(max(1, sb))
        m.d.comb += self.busy.eq(flush_asked | flushing)
        with m.If(self.flush):
            m.d.sync += flush_asked.eq(1)
        with m.If((self.flush | flush_asked) & ~writing & ~flushing):
            m.d.sync += [flush_asked.eq(0), flushing.eq(1), flush_set.eq(0)]
        with m.If(flushing):
            m.d.sync += flush_set.eq(flush_set + 1)
            with m.If(flush_set == cfg.sets - 1):
                m.d.sync += flushing.eq(0)
        req = Signal(TLB_FILL)
        read_addr = Signal(max(1, sb))
        m.d.comb += read_addr.eq(Mux(filling, set_of(self.fill.payload.vaddr),
                                     set_of(self.lookup)))
        for rd in reads:
            m.d.comb += rd.addr.eq(read_addr)

        # -- lookup: compare the ways read with the address of the cycle before ---------------
        looked = Signal(ADDR_BITS - pb)
        looked_valid = Signal()
        m.d.sync += [looked.eq(self.lookup[pb:]), looked_valid.eq(~filling & ~writing & ~flushing)]
        tag = looked[sb:sb + tag_bits]
        rows = [data.View(entry, rd.data) for rd in reads]
        res = self.result
        m.d.comb += [res.valid.eq(looked_valid), res.vpage.eq(looked)]
        for row in reversed(rows):
            with m.If(row.valid & (row.tag == tag)):
                m.d.comb += [res.hit.eq(1), res.base.eq(Cat(Const(0, pb), row.frame)),
                             res.mem_x.eq(row.mem_x), res.mem_y.eq(row.mem_y),
                             res.perm.eq(row.perm)]

        # -- fill: read the set, then write the way chosen --------------------------------------
        victim_bits = (cfg.ways - 1).bit_length()
        victims = None
        if cfg.ways > 1:
            m.submodules.victims = victims = Memory(shape=victim_bits, depth=cfg.sets, init=[])
            v_rd, v_wr = victims.read_port(), victims.write_port()
            m.d.comb += [v_rd.addr.eq(read_addr), v_wr.addr.eq(set_of(req.vaddr))]
        m.d.comb += [self.fill.ready.eq(~writing & ~self.busy & ~self.flush),
                     filling.eq(self.fill.valid & self.fill.ready)]
        with m.If(filling):
            m.d.sync += [req.eq(self.fill.payload), writing.eq(1)]
        with m.If(writing):
            m.d.sync += writing.eq(0)
            req_tag = req.vaddr[pb + sb:pb + sb + tag_bits]
            way = Signal(range(cfg.ways), name="fill_way")
            same = Signal(cfg.ways)
            m.d.comb += same.eq(Cat(r.valid & (r.tag == req_tag) for r in rows))
            if victims is not None:
                m.d.comb += way.eq(v_rd.data)
            for i in reversed(range(cfg.ways)):
                with m.If(~rows[i].valid):
                    m.d.comb += way.eq(i)
            replace = Signal()
            m.d.comb += replace.eq(Cat(r.valid for r in rows).all() & ~same.any())
            for i in reversed(range(cfg.ways)):
                with m.If(same[i]):
                    m.d.comb += way.eq(i)
            if victims is not None:
                m.d.comb += [v_wr.en.eq(replace),
                             v_wr.data.eq(Mux(v_rd.data == cfg.ways - 1, 0, v_rd.data + 1))]
            for i, wr in enumerate(writes):
                new = data.View(entry, wr.data)
                m.d.comb += [
                    wr.addr.eq(set_of(req.vaddr)), wr.en.eq(way == i),
                    new.valid.eq(1), new.tag.eq(req_tag), new.frame.eq(req.base[pb:]),
                    new.mem_x.eq(req.mem_x), new.mem_y.eq(req.mem_y), new.perm.eq(req.perm),
                ]
        with m.If(flushing):
            for wr in writes:
                m.d.comb += [wr.addr.eq(flush_set), wr.en.eq(1), wr.data.eq(0)]
        return m


@dataclass
class TlbEntry:
    """A cached translation (the model's; ``base`` is the page's physical base)."""
    vpage: int
    base: int
    mem_x: int = 0
    mem_y: int = 0
    perm: int = 3


class TlbModel:
    """The golden model of :class:`Tlb`: the same sets, ways and replacement."""

    def __init__(self, config: TlbConfig = TlbConfig()) -> None:
        self.config = config
        self.sets: list[list[TlbEntry | None]] = [[None] * config.ways
                                                  for _ in range(config.sets)]
        self.victim = [0] * config.sets

    def lookup(self, vaddr: int) -> TlbEntry | None:
        vpage = vaddr >> self.config.page_bits
        for entry in self.sets[self.config.set_of(vaddr)]:
            if entry is not None and entry.vpage == vpage:
                return entry
        return None

    def fill(self, vaddr: int, base: int, mem_x: int = 0, mem_y: int = 0,
             perm: int = 3) -> int:
        """Install a translation; return the way it went to."""
        cfg = self.config
        vpage = vaddr >> cfg.page_bits
        row = self.sets[cfg.set_of(vaddr)]
        entry = TlbEntry(vpage, base & ~(cfg.page_bytes - 1), mem_x, mem_y, perm)
        same = [i for i, old in enumerate(row) if old is not None and old.vpage == vpage]
        free = [i for i, old in enumerate(row) if old is None]
        if same or free:
            way = (same or free)[0]
        else:
            s = cfg.set_of(vaddr)
            way = self.victim[s]
            self.victim[s] = (way + 1) % cfg.ways
        row[way] = entry
        return way

    def flush(self) -> None:
        """Forget every translation (the round-robin victims stay where they are)."""
        self.sets = [[None] * self.config.ways for _ in range(self.config.sets)]
