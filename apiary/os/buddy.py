"""A hardware buddy allocator over a power-of-two number of blocks, and its Python model.

The allocator hands out aligned runs of ``2**level`` *leaves* (the smallest blocks) out of
``leaves``; the memory manager (:mod:`apiary.os.memory_manager`) keeps one per memory tile.
:class:`BuddyModel` has the same semantics, block for block, and is what the tests compare the
gateware with.
"""

from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.hdl import unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream.integers import power_of_two


__all__ = ["BuddyOp", "BuddyAllocator", "BuddyModel", "lowest_one"]


class BuddyOp(enum.Enum, shape=1):
    """What a request to a :class:`BuddyAllocator` asks for."""
    ALLOC = 0
    FREE = 1


def _log2(leaves: object) -> int:
    if power_of_two(leaves):
        return leaves.bit_length() - 1
    raise ValueError(f"a buddy allocator needs a power of two of leaves (1 or more), "
                     f"not {leaves!r}")


def lowest_one(m: Module, value: Value, name: str) -> tuple[Signal, Signal, Signal]:
    """``(onehot, index, any)`` of the lowest set bit of ``value`` (combinational; ``onehot``
    and ``index`` are 0 when no bit is set)."""
    n = len(value)
    onehot = Signal(n, name=f"{name}_onehot")
    index = Signal(max(1, (n - 1).bit_length()), name=f"{name}_index")
    found = Signal(name=f"{name}_any")
    m.d.comb += [
        onehot.eq(value & (~value + 1)),
        index.eq(Cat(Cat(*(onehot[i] for i in range(n) if i >> b & 1)).any()
                     for b in range(len(index))) if n > 1 else 0),
        found.eq(value.any()),
    ]
    return onehot, index, found


class BuddyAllocator(wiring.Component):
    """A buddy allocator over ``leaves`` leaves (a power of two), levels ``0 .. L`` with
    ``L = log2(leaves)``: a block of level *k* is ``2**k`` leaves, aligned to its size.

    At reset the whole range is one free block of level ``L``. Requests on ``req``, one at a
    time, each answered on ``resp``:

    * ``ALLOC`` of ``level`` *k*: the first free block of level *k* (lowest index), or when
      there is none, the first free block of the smallest level above *k* that has one, split
      in halves down to level *k* (one level per cycle), the lower half kept each time and the
      upper half left free. ``resp.ok`` is 1 and ``resp.index`` the block's first leaf; with no
      room (or ``level > L``) ``ok`` is 0 and ``index`` 0.
    * ``FREE`` of ``index`` and ``level``: the block of that level starting at that leaf is
      freed and merged with its buddy while the buddy is free, one level per cycle.
      ``resp.ok`` is 1. A block that is not allocated at that level (a double free, a free of
      a block never allocated, a misaligned ``index``, ``level > L``) is ignored: ``ok`` is 0
      and ``bad_frees`` counts it.

    Latency, from a request's transfer on ``req`` (cycle *t*) to its response's ``valid``:
    an ``ALLOC`` that splits *s* times (``0 <= s <= L``) answers on *t* + 2 + *s*, at worst
    *t* + 2 + ``L``; a failed one on *t* + 2. A ``FREE`` that merges *c* times answers on
    *t* + 3 + *c*, at worst *t* + 3 + ``L``; a refused one on *t* + 2. ``resp`` is registered
    and held until taken; ``req`` is ready only while the allocator is idle and ``resp`` empty.

    State: two bitmaps in registers, ``2 * leaves`` bits each, in heap order (position 1 the
    whole range, ``2p`` and ``2p + 1`` the halves of ``p``; level *k* occupies positions
    ``leaves >> k`` to ``2 * (leaves >> k) - 1``): *free*, set on the free blocks that are not
    part of a larger free block, and *used*, set on allocated blocks. A search tests every level
    at once (a lowest-set-bit per level), so ``leaves`` of a few thousand is the practical limit.

    Parameters
    ----------
    leaves : int
        Number of leaves, a power of two (1 or more).

    Members
    -------
    req : In(stream.Signature(BuddyAllocator.request_layout(leaves)))
        ``op`` (:class:`BuddyOp`), ``level``, ``index`` (``FREE`` only).
    resp : Out(stream.Signature(BuddyAllocator.response_layout(leaves)))
        ``ok``, ``index`` (``ALLOC``: the block's first leaf).
    room : Out(L + 1)
        Bit *k* set when an ``ALLOC`` of level *k* would succeed now (combinational from the
        bitmaps; meaningful while the allocator is idle).
    query_index : In(index width)
        A leaf to look up, for ``query_found`` and ``query_level``.
    query_found : Out(1)
        An allocated block starts at ``query_index`` (combinational).
    query_level : Out(level width)
        That block's level.
    bad_frees : Out(32)
        ``FREE`` requests ignored.

    Raises
    ------
    ValueError
        If ``leaves`` is not a power of two.
    """

    @staticmethod
    def request_layout(leaves: int) -> data.StructLayout:
        """``op``, ``level`` and ``index`` (a leaf number)."""
        log = _log2(leaves)
        return data.StructLayout({"op": BuddyOp, "level": unsigned(max(1, log.bit_length())),
                                  "index": unsigned(max(1, log))})

    @staticmethod
    def response_layout(leaves: int) -> data.StructLayout:
        """``ok`` and ``index`` (a leaf number)."""
        return data.StructLayout({"ok": unsigned(1), "index": unsigned(max(1, _log2(leaves)))})

    def __init__(self, leaves: int) -> None:
        self._log = _log2(leaves)
        self._leaves = leaves
        req = self.request_layout(leaves)
        super().__init__({
            "req": In(stream.Signature(req)),
            "resp": Out(stream.Signature(self.response_layout(leaves))),
            "room": Out(self._log + 1),
            "query_index": In(req["index"].shape),
            "query_found": Out(1),
            "query_level": Out(req["level"].shape),
            "bad_frees": Out(32),
        })

    @property
    def leaves(self) -> int:
        return self._leaves

    @property
    def top_level(self) -> int:
        """``log2(leaves)``: the level of the whole range."""
        return self._log

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        leaves, top = self._leaves, self._log
        pos_bits = top + 1                          # positions 1 .. 2 * leaves - 1
        free = Signal(2 * leaves, init=0b10, name="free")   # the whole range, position 1
        used = Signal(2 * leaves, name="used")

        def level_slice(bitmap: Signal, k: int) -> Value:
            return bitmap[leaves >> k:2 * (leaves >> k)]

        # -- room, and the first free block of every level ---------------------------------------
        # The first free blocks are found from the bitmap a cycle before ALLOC uses them (a
        # search over 2 * leaves bits is a carry chain as long): the bitmap is never written in
        # the cycle before ALLOC (IDLE, which takes a request only once the last response has
        # been offered for a cycle), so they are current there.
        any_free = Signal(top + 1)
        any_free_q = Signal(top + 1)
        firsts = []
        for k in range(top + 1):
            _, first, found = lowest_one(m, level_slice(free, k), f"level{k}")
            first_q = Signal.like(first, name=f"level{k}_first")
            m.d.comb += any_free[k].eq(found)
            m.d.sync += first_q.eq(first)
            firsts.append(first_q)
        m.d.sync += any_free_q.eq(any_free)
        for k in range(top + 1):
            m.d.comb += self.room[k].eq(any_free[k:].any())

        # -- lookup: the allocated block starting at query_index ---------------------------------
        q = self.query_index
        hits = Signal(top + 1)
        for k in range(top + 1):
            aligned = q[:k] == 0 if k else 1
            at = level_slice(used, k)
            bit = at.bit_select(q[k:top], 1) if k < top else at[0]
            m.d.comb += hits[k].eq(aligned & bit)
        _, hit_level, hit = lowest_one(m, hits, "query")
        m.d.comb += [self.query_found.eq(hit), self.query_level.eq(hit_level)]

        # -- the request being served ------------------------------------------------------------
        r_level = Signal.like(self.req.payload.level)
        r_index = Signal.like(self.req.payload.index)
        r_target = Signal(pos_bits)                 # leaves >> r_level: level r_level's first
        r_pos = Signal(pos_bits)                    # the block being split or merged

        def respond(ok: Any, index: Any = 0) -> None:
            m.d.sync += [self.resp.valid.eq(1), self.resp.payload.ok.eq(ok),
                         self.resp.payload.index.eq(index)]

        def index_of(pos: Value) -> Value:
            """The first leaf of ``pos``, a block of level ``r_level``."""
            return (pos ^ r_target) << r_level

        with m.If(self.resp.valid & self.resp.ready):
            m.d.sync += self.resp.valid.eq(0)

        # The smallest level >= r_level with a free block, and that block's position.
        eligible = Signal(top + 1)
        m.d.comb += eligible.eq(Cat(any_free_q[k] & (r_level <= k) for k in range(top + 1)))
        pick, _, can = lowest_one(m, eligible, "pick")
        pick_pos = Signal(pos_bits)
        for k in range(top + 1):
            with m.If(pick[k]):
                m.d.comb += pick_pos.eq((leaves >> k) | firsts[k])

        # The block a FREE names.
        free_pos = Signal(pos_bits)
        misaligned = Cat(r_index[b] & (r_level > b) for b in range(len(r_index))).any()
        free_ok = Signal()
        m.d.comb += [
            free_pos.eq(r_target | (r_index >> r_level)),
            free_ok.eq((r_level <= top) & ~misaligned & used.bit_select(free_pos, 1)),
        ]

        # Each bitmap takes at most one bit write a cycle, through one decoder: a bit_select
        # write per state would make a case over every position for each (and Yosys's
        # WebAssembly build runs out of memory on them at 256 leaves).
        writes = {}
        for name, bitmap in (("free", free), ("used", used)):
            we, at, value = Signal(name=f"{name}_we"), Signal(pos_bits, name=f"{name}_at"), Signal()
            bit = Signal(2 * leaves, name=f"{name}_bit")
            m.d.comb += bit.eq(Const(1, 2 * leaves) << at)
            with m.If(we):
                m.d.sync += bitmap.eq(Mux(value, bitmap | bit, bitmap & ~bit))
            writes[name] = (we, at, value)

        def write(name: str, pos: Value, value: int) -> None:
            we, at, bit = writes[name]
            m.d.comb += [we.eq(1), at.eq(pos), bit.eq(value)]

        with m.FSM(name="buddy"):
            with m.State("IDLE"):
                m.d.comb += self.req.ready.eq(~self.resp.valid)
                with m.If(self.req.valid & self.req.ready):
                    p = self.req.payload
                    target = Mux(p.level <= top, Const(leaves, pos_bits) >> p.level, 0)
                    m.d.sync += [r_level.eq(p.level), r_index.eq(p.index), r_target.eq(target)]
                    with m.If(p.op == BuddyOp.ALLOC):
                        m.next = "ALLOC"
                    with m.Else():
                        m.next = "FREE"
            with m.State("ALLOC"):
                with m.If(~can | (r_level > top)):
                    respond(0)
                    m.next = "IDLE"
                with m.Else():
                    write("free", pick_pos, 0)
                    with m.If(pick_pos >= r_target):            # of level r_level: no split
                        write("used", pick_pos, 1)
                        respond(1, index_of(pick_pos))
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += r_pos.eq(pick_pos)
                        m.next = "SPLIT"
            with m.State("SPLIT"):
                child = Signal(pos_bits)
                m.d.comb += child.eq(r_pos << 1)
                write("free", child | 1, 1)
                m.d.sync += r_pos.eq(child)
                with m.If(child >= r_target):
                    write("used", child, 1)
                    respond(1, index_of(child))
                    m.next = "IDLE"
            with m.State("FREE"):
                with m.If(free_ok):
                    write("used", free_pos, 0)
                    m.d.sync += r_pos.eq(free_pos)
                    m.next = "MERGE"
                with m.Else():
                    m.d.sync += self.bad_frees.eq(self.bad_frees + 1)
                    respond(0)
                    m.next = "IDLE"
            with m.State("MERGE"):
                buddy = Signal(pos_bits)
                m.d.comb += buddy.eq(r_pos ^ 1)
                with m.If((r_pos != 1) & free.bit_select(buddy, 1)):
                    write("free", buddy, 0)
                    m.d.sync += r_pos.eq(r_pos >> 1)
                with m.Else():
                    write("free", r_pos, 1)
                    respond(1)
                    m.next = "IDLE"
        return m


class BuddyModel:
    """The Python model of :class:`BuddyAllocator`: the same blocks, chosen the same way
    (smallest level with a free block, lowest index; splits keep the lower half).

    ``alloc(level)`` returns the first leaf of the block or ``None``; ``free(index, level)``
    returns whether the block was allocated (and is now free); ``room(level)`` whether an
    allocation of that level would succeed; ``level_of(index)`` the level of the allocated
    block starting at leaf ``index``, or ``None``. ``steps`` is the number of splits (``alloc``)
    or merges (``free``) the last call made, which sets the gateware's latency.
    """

    def __init__(self, leaves: int) -> None:
        self.leaves = leaves
        self.top = _log2(leaves)
        self.free_nodes: list[set[int]] = [set() for _ in range(self.top + 1)]
        self.free_nodes[self.top].add(0)
        self.used: set[tuple[int, int]] = set()     # (level, node)
        self.steps = 0

    def room(self, level: int) -> bool:
        return level <= self.top and any(self.free_nodes[j] for j in range(level, self.top + 1))

    def alloc(self, level: int) -> int | None:
        self.steps = 0
        if not 0 <= level <= self.top:
            return None
        for j in range(level, self.top + 1):
            if self.free_nodes[j]:
                node = min(self.free_nodes[j])
                self.free_nodes[j].remove(node)
                self.steps = j - level
                while j > level:
                    j -= 1
                    node *= 2
                    self.free_nodes[j].add(node + 1)
                self.used.add((level, node))
                return node << level
        return None

    def free(self, index: int, level: int) -> bool:
        self.steps = 0
        if not 0 <= level <= self.top or index % (1 << level) or not 0 <= index < self.leaves:
            return False
        node = index >> level
        if (level, node) not in self.used:
            return False
        self.used.remove((level, node))
        while level < self.top and node ^ 1 in self.free_nodes[level]:
            self.free_nodes[level].remove(node ^ 1)
            node >>= 1
            level += 1
            self.steps += 1
        self.free_nodes[level].add(node)
        return True

    def level_of(self, index: int) -> int | None:
        for level in range(self.top + 1):
            if index % (1 << level) == 0 and (level, index >> level) in self.used:
                return level
        return None

    def free_leaves(self) -> int:
        return sum(len(nodes) << level for level, nodes in enumerate(self.free_nodes))
