"""The Apiary memory manager: allocates the memory tiles' memory to tiles, records who holds a
capability derived from each allocation, and revokes those before an allocation is freed.

Messages (every one a kernel message, :data:`~apiary.os.uapi.KERNEL_META` as ``meta_bits=``
metadata: inline in the header flit at 512 bits, 3 metadata flits at 64; no payload):

=================  ====  =========================  ===============================================
message            type  from → to                  fields of ``KERNEL_META``
=================  ====  =========================  ===============================================
``MM_ALLOC``       37    a monitor → the manager    ``size`` (bytes), ``perm``, ``user``
``CAP_INSTALL``    40    manager → that monitor     ``op`` = ``CAP_ALLOC``, ``status``; when
                         (its ``src_x/y/fbits``)    ``OK``: ``addr`` (physical base in the memory
                                                    tile), ``size`` (as asked), ``perm`` (as
                                                    asked, ``RW`` for 0), ``mem_x/y`` (the memory
                                                    tile), ``root``; always ``user`` (echoed)
``MM_DERIVE``      39    monitor S → the manager    ``addr``, ``size``, ``perm``, ``mem_x/y``,
                                                    ``root``, ``peer_x/y/fbits`` (the receiver),
                                                    ``user``
``CAP_INSTALL``    40    manager → ``peer_x/y/``    ``op`` = ``CAP_SEND``, ``status`` ``OK``;
                         ``fbits`` of the derive    ``addr``, ``size``, ``perm``, ``mem_x/y``,
                                                    ``root``, ``user`` copied; ``peer_x/y`` = S
``MM_FREE``        38    a monitor → the manager    ``root``
``CAP_REVOKE``     41    manager → each holder      ``root``
``CAP_REVOKED``    42    a holder → the manager     ``root``
``TLB_MISS``       60    a paged monitor → manager  ``addr`` (with ``paging``; see
                                                    :mod:`apiary.os.paging`)
``TLB_FILL``       61    manager → that monitor     the page's translation, or ``NO_ENTRY``
=================  ====  =========================  ===============================================

**Roots.** An allocation is named by its *root*, ``mem_index << 12 | leaf``: the index of its
memory in ``memories`` (4 bits) and the block's first leaf in that memory's allocator (12 bits),
so at most 16 memories of at most 4096 leaves each. ``addr`` is ``leaf * block_bytes``.

**Allocation.** Each memory has ``size_bytes // block_bytes`` leaves rounded down to a power of
two, managed by a :class:`~apiary.os.buddy.BuddyAllocator` (all of it free at reset). An
``MM_ALLOC`` of ``size`` bytes takes a block of ``2**k`` leaves, the smallest that holds it,
from the first memory (in ``memories`` order) that has one free, or with ``placement="rotate"``
the first at or after the memory that follows the last allocation's (so a run of allocations
is spread over the memories, as their bandwidth is): the lowest free block of that size, or the
lowest block of the smallest larger size that is free, split. ``size`` 0 or above
the largest memory is answered ``BAD_SIZE``, no room anywhere ``NO_MEMORY``; a failure's
``CAP_INSTALL`` has ``op``, ``status`` and ``user``, every other field zero.

**Derivation.** An ``MM_DERIVE`` of a live root records the receiver ``(root, peer_x, peer_y,
peer_fbits)`` in the holder table (``max_holders`` entries; the same receiver of the same root
twice takes one entry) and installs the capability at the receiver. A full table drops the
derive (no ``CAP_INSTALL``; ``holders_full``). A root that is not allocated, or is being freed,
is dropped too (``bad_derive``): a capability to memory that may be reused must not appear.

**Free and revocation.** An ``MM_FREE`` of a live root sends ``CAP_REVOKE(root)`` to every holder
of it and marks the root *being freed*; each ``CAP_REVOKED(root)`` from a holder's position
clears its entry, and when the last one is in the block goes back to its allocator. A root
without holders is freed at once. A root that is not allocated, or already being freed, is
ignored (``bad_free``); a ``CAP_REVOKED`` that matches no revoke sent is dropped
(``stray_revoked``). The manager trusts its senders, the monitors: it does not check that the
monitor freeing or deriving a root is the one it was allocated to.

Messages are served one at a time, in arrival order. The revocation acks are *not* waited for
in a blocking way: an ack comes in on the same port as every request, so holding a request
until the ack arrives would deadlock. Requests that come in meanwhile are served as usual; as
the block is freed only after its last ack, an ``MM_ALLOC`` served before that cannot get it
(it gets another block or ``NO_MEMORY``), and a second ``MM_FREE`` or an ``MM_DERIVE`` of the
root is refused.

Latency, from an ``MM_ALLOC``'s last flit in to its ``CAP_INSTALL``'s first flit out (with
``noc_out`` ready): ``4 + s`` cycles when the allocator splits a block *s* times (``s <=
log2(leaves) <= 12``), the same at 64 and 512 bits (the receiver passes the last flit on
combinationally, the sender sends the first at once): 4 to 16 cycles, against a target of 50;
2 cycles for ``BAD_SIZE`` and ``NO_MEMORY``. Measured by the tests at 64 and 512 bits: 4
cycles with a free block of the size, 5 with one split, 12 for the first allocation of a
256-leaf memory and 16 of a 4096-leaf one (the worst case). An ``MM_DERIVE``'s
``CAP_INSTALL`` and an ``MM_FREE``'s first ``CAP_REVOKE`` leave 2 cycles after its last flit.

Throughput (measured in simulation): the manager takes the last flit of the next message, at
the earliest, ``5 + s`` cycles after an allocation's at 512 bits and ``9 + s`` at 64 (its
reply's 1 or 5 flits go out first); 3 cycles after a derive or a free with one holder at 512
bits (7 at 64; one more message time per further holder); ``6 + c`` cycles after a free without
holders or the last ``CAP_REVOKED`` of a free, when the allocator merges *c* times; 2 after a
refused request or a stray ack and 1 after a dropped message (a message is 5 flits at 64 bits).
"""

from collections.abc import Sequence
from typing import Any

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data

from ..noc.framing import offer_message
from ..noc.header import Fbits
from ..tile import Receive, Send, Tile, TileEnv
from .buddy import BuddyAllocator, BuddyOp, lowest_one
from .paging import PageRange, page_lookup
from .uapi import KERNEL_FORMAT, KERNEL_META, KernelMsgType, Perm, Status
from ..stream.counters import count


__all__ = ["MemoryManagerTile", "ROOT_LEAF_BITS", "MAX_MEMORIES", "make_root", "split_root"]

#: Bits of a root that hold the block's first leaf; the memory's index is above them.
ROOT_LEAF_BITS = 12
#: Memories one manager can own (the root's remaining 4 bits).
MAX_MEMORIES = 1 << (KERNEL_META["root"].width - ROOT_LEAF_BITS)


def make_root(mem_index: int, leaf: int) -> int:
    """The root of the block starting at ``leaf`` in memory ``mem_index``."""
    return mem_index << ROOT_LEAF_BITS | leaf


def split_root(root: int) -> tuple[int, int]:
    """``(mem_index, leaf)`` of a root."""
    return root >> ROOT_LEAF_BITS, root & (1 << ROOT_LEAF_BITS) - 1


_HOLDER = data.StructLayout({"root": 16, "x": 8, "y": 8, "fbits": 4})
_DST = data.StructLayout({"x": 8, "y": 8, "fbits": 4})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class MemoryManagerTile(Tile):
    """The memory manager (see the module docstring for its messages and behaviour).

    Drops: messages of any other type, and messages with a payload, are dropped and counted in
    ``malformed``, as are those the :class:`~apiary.noc.framing.MessageReceiver` drops (wrong
    ``metadata_flits``, truncated).

    Parameters
    ----------
    env : TileEnv
    memories : sequence of (x, y, size_bytes)
        The memory tiles the manager owns (all of their memory), in the order allocations try
        them; 1 to 16 of them.
    block_bytes : int
        The smallest allocation, a power of two; each memory has ``size_bytes // block_bytes``
        leaves (at least 1, at most 4096), rounded down to a power of two.
    max_holders : int
        Entries of the holder table (receivers of derived capabilities), 1 to 256.

    Counters: ``allocs`` (``MM_ALLOC`` answered ``OK``), ``alloc_failed`` (answered
    ``NO_MEMORY`` or ``BAD_SIZE``), ``frees`` (``MM_FREE`` of a live root, accepted),
    ``bad_free`` (``MM_FREE`` of a root not allocated or already being freed, ignored),
    ``derives`` (``MM_DERIVE`` installed at the receiver), ``holders_full`` (``MM_DERIVE``
    dropped, the holder table full), ``bad_derive`` (``MM_DERIVE`` of a root not allocated or
    being freed, dropped), ``revokes`` (``CAP_REVOKE`` sent), ``stray_revoked``
    (``CAP_REVOKED`` matching no revoke outstanding, dropped), ``malformed`` (see Drops).

    Raises
    ------
    ValueError
        If ``memories`` is empty, too long or malformed, a memory is smaller than a block or
        has more than 4096 leaves, ``block_bytes`` is not a power of two or ``max_holders`` is
        out of range.
    """

    #: The tile holds a request's input while its reply leaves.
    streaming = True

    inputs = (Receive("requests", KernelMsgType.MM_ALLOC, KernelMsgType.MM_DERIVE,
                      KernelMsgType.MM_FREE, KernelMsgType.CAP_REVOKED, KernelMsgType.TLB_MISS,
                      meta=KERNEL_FORMAT),)
    outputs = (Send("replies", KernelMsgType.CAP_INSTALL, KernelMsgType.CAP_REVOKE,
                    KernelMsgType.TLB_FILL, meta=KERNEL_FORMAT),)

    def __init__(self, env: TileEnv | None = None,
                 memories: Sequence[tuple[int, int, int]] = (), *, block_bytes: int = 256,
                 max_holders: int = 16, placement: str = "first", paging: bool = False,
                 pages: Sequence[PageRange] = ()) -> None:
        if not _is_int(block_bytes) or block_bytes < 1 or block_bytes & (block_bytes - 1):
            raise ValueError(f"block_bytes must be a power of two, not {block_bytes!r}")
        if not _is_int(max_holders) or not 1 <= max_holders <= 256:
            raise ValueError(f"max_holders must be an integer from 1 to 256, not "
                             f"{max_holders!r}")
        if placement not in ("first", "rotate"):
            raise ValueError(f"placement must be 'first' or 'rotate', not {placement!r}")
        self.placement = placement
        # Paged translation (apiary/os/paging.py): answer TLB_MISS from the pages given.
        self.paging = bool(paging) or bool(pages)
        self.pages = list(pages)
        for r in self.pages:
            if not isinstance(r, PageRange) or not 0 <= r.mem < len(memories):
                raise ValueError(f"pages must be PageRanges of the manager's memories, not "
                                 f"{r!r}")
        memories = list(memories)
        if not 1 <= len(memories) <= MAX_MEMORIES:
            raise ValueError(f"a memory manager owns 1 to {MAX_MEMORIES} memories, not "
                             f"{len(memories)}")
        self.leaves = []
        for i, mem in enumerate(memories):
            if (not isinstance(mem, tuple | list) or len(mem) != 3
                    or not all(_is_int(v) for v in mem)):
                raise ValueError(f"memory {i} must be (x, y, size_bytes), not {mem!r}")
            x, y, size = mem
            if not (0 <= x < 256 and 0 <= y < 256):
                raise ValueError(f"memory {i} is at ({x}, {y}), outside the mesh's 8-bit "
                                 f"coordinates")
            if not block_bytes <= size < 1 << 48:
                raise ValueError(f"memory {i} has {size} bytes; it needs at least one block "
                                 f"({block_bytes} bytes) and fewer than 2**48")
            leaves = 1 << ((size // block_bytes).bit_length() - 1)
            if leaves > 1 << ROOT_LEAF_BITS:
                raise ValueError(f"memory {i} would have {leaves} leaves of {block_bytes} "
                                 f"bytes; a root names at most {1 << ROOT_LEAF_BITS}, so "
                                 f"block_bytes must be at least "
                                 f"{size >> ROOT_LEAF_BITS} bytes")
            self.leaves.append(leaves)
        self.memories = [tuple(mem) for mem in memories]
        self.block_bytes = block_bytes
        self.max_holders = max_holders
        super().__init__(env, counters={
            "allocs": "MM_ALLOC answered OK",
            "alloc_failed": "MM_ALLOC answered NO_MEMORY or BAD_SIZE",
            "frees": "MM_FREE of a live root, accepted",
            "bad_free": "MM_FREE of a root not allocated or already being freed, ignored",
            "derives": "MM_DERIVE installed at the receiver",
            "holders_full": "MM_DERIVE dropped: the holder table is full",
            "bad_derive": "MM_DERIVE of a root not allocated or being freed, dropped",
            "revokes": "CAP_REVOKE sent",
            "stray_revoked": "CAP_REVOKED matching no revoke outstanding, dropped",
            "malformed": "messages of another type, with a payload, or badly framed, dropped",
            **({"page_fills": "TLB_MISS answered with the page's translation",
                "page_faults": "TLB_MISS answered NO_ENTRY: the tile has no page there"}
               if self.paging else {}),
        })

    def _placement(self, m: Module, fits: Signal, n_mem: int) -> tuple[Any, ...]:
        """The memory an allocation goes to, of those with room (``fits``): ``(one-hot,
        index, any, start)``, the first one, or with rotation the first at or after ``start``
        (a register the caller moves past each allocation; ``None`` without rotation)."""
        if self.placement == "first" or n_mem == 1:
            return (*lowest_one(m, fits, "memory"), None)
        start = Signal(range(n_mem), name="next_memory")
        rotated = Signal(n_mem)
        with m.Switch(start):
            for r in range(n_mem):
                with m.Case(r):
                    m.d.comb += rotated.eq(Cat(fits[r:], fits[:r]))
        _, offset, found = lowest_one(m, rotated, "memory")
        index = Signal(range(n_mem), name="memory_index")
        total = Signal(range(2 * n_mem))
        m.d.comb += [total.eq(offset + start),
                     index.eq(Mux(total >= n_mem, total - n_mem, total))]
        pick = Signal(n_mem, name="memory_pick")
        m.d.comb += pick.eq(Mux(found, Const(1, n_mem) << index, 0))
        return pick, index, found, start

    @property
    def largest_bytes(self) -> int:
        """The largest allocation: the largest memory's leaves times ``block_bytes``."""
        return max(self.leaves) * self.block_bytes

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n_mem = len(self.memories)
        log_bb = self.block_bytes.bit_length() - 1
        tops = [leaves.bit_length() - 1 for leaves in self.leaves]
        max_top = max(tops)
        nh = self.max_holders
        counters = self.counters

        ports = self.message_ports(m)
        rx, tx = ports.requests, ports.replies
        dropped = Signal(32)                        # malformed messages the receiver passed on
        m.d.comb += [counters.malformed.eq(rx.errors + dropped),
                     rx.o_data.ready.eq(1)]         # kernel messages carry no payload

        allocators = []
        for i, leaves in enumerate(self.leaves):
            allocators.append(BuddyAllocator(leaves))
            m.submodules[f"buddy{i}"] = allocators[-1]

        # -- the message being served ----------------------------------------------------------
        hdr = rx.o_hdr.payload
        r_src = Signal(_DST)
        r_req = Signal(KERNEL_META)
        r_mem = Signal(range(MAX_MEMORIES))         # the memory of the allocation under way
        root_mem = r_req.root[ROOT_LEAF_BITS:]
        root_leaf = r_req.root[:ROOT_LEAF_BITS]

        # Is r_req.root a live (allocated) block?
        root_live = Signal()
        for i, (alloc, leaves) in enumerate(zip(allocators, self.leaves)):
            m.d.comb += alloc.query_index.eq(root_leaf)
            with m.If(root_mem == i):
                m.d.comb += root_live.eq((root_leaf < leaves) & alloc.query_found)

        # -- the reply (registered) and the descriptor offered to the sender --------------------
        r_dst = Signal(_DST)
        r_out = Signal(KERNEL_META)
        out_valid = Signal()
        out_dst = Signal(_DST)
        out_type = Signal(8)
        out_meta = Signal(KERNEL_META)
        out_ready = offer_message(m, tx, out_valid, dst=(out_dst.x, out_dst.y, out_dst.fbits),
                                  src=(self.env.x, self.env.y, Fbits.LOCAL0),
                                  msg_type=out_type, meta=out_meta)
        out_taken = out_valid & out_ready
        r_page = Signal()                           # the reply is a TLB_FILL

        def install(**fields: Any) -> None:
            """Register a CAP_INSTALL with ``fields`` (all others zero) to ``dst``."""
            dst = fields.pop("dst")
            m.d.sync += [r_out.eq(0), r_dst.x.eq(dst[0]), r_dst.y.eq(dst[1]),
                         r_dst.fbits.eq(dst[2]), r_page.eq(0)]
            m.d.sync += [getattr(r_out, name).eq(value) for name, value in fields.items()]

        def alloc_failed(status: int) -> None:
            install(dst=(r_src.x, r_src.y, r_src.fbits), op=KernelMsgType.CAP_ALLOC.value,
                    status=status, user=r_req.user)
            count(m, counters.alloc_failed)

        # -- allocation: the level asked for, the first memory with room -------------------------
        size_m1 = Signal(KERNEL_META["size"].width)
        m.d.comb += size_m1.eq(r_req.size - 1)
        bad_size = Signal()
        m.d.comb += bad_size.eq((r_req.size == 0) | (r_req.size > self.largest_bytes))
        level = Signal(range(max_top + 2))          # log2 of the blocks the size needs, rounded up
        for b in range(max_top):
            with m.If(size_m1[log_bb + b]):
                m.d.comb += level.eq(b + 1)
        fits = Signal(n_mem)
        for i, (alloc, top) in enumerate(zip(allocators, tops)):
            room = Cat(alloc.room, Const(0, max_top + 1 - top))
            m.d.comb += fits[i].eq(room.bit_select(level, 1))
        pick, pick_index, pick_any, next_memory = self._placement(m, fits, n_mem)
        mem_x = Array(Const(x, 8) for x, _, _ in self.memories)
        mem_y = Array(Const(y, 8) for _, y, _ in self.memories)

        # -- the holder table ------------------------------------------------------------------
        holders = [Signal(_HOLDER, name=f"holder{i}") for i in range(nh)]
        h_valid = Signal(nh)
        h_pending = Signal(nh)                      # a revoke to send
        h_sent = Signal(nh)                         # a revoke sent, its ack awaited
        root_match = Signal(nh)
        same = Signal(nh)                           # the derive's receiver already holds it
        acked = Signal(nh)                          # the CAP_REVOKED's sender, awaited
        m.d.comb += [
            root_match.eq(Cat(h_valid[i] & (h.root == r_req.root)
                              for i, h in enumerate(holders))),
            same.eq(Cat(root_match[i] & (h.x == r_req.peer_x) & (h.y == r_req.peer_y)
                        & (h.fbits == r_req.peer_fbits) for i, h in enumerate(holders))),
            acked.eq(Cat(root_match[i] & h_sent[i] & (h.x == r_src.x) & (h.y == r_src.y)
                         for i, h in enumerate(holders))),
        ]
        being_freed = Signal()
        m.d.comb += being_freed.eq((root_match & (h_pending | h_sent)).any())
        slot, _, slot_free = lowest_one(m, ~h_valid, "slot")
        pending, pending_index, _ = lowest_one(m, h_pending, "pending")
        ack, _, ack_any = lowest_one(m, acked, "ack")
        revokee = Signal(_DST)                      # the holder the next revoke goes to
        m.d.comb += [revokee.x.eq(Array(h.x for h in holders)[pending_index]),
                     revokee.y.eq(Array(h.y for h in holders)[pending_index]),
                     revokee.fbits.eq(Array(h.fbits for h in holders)[pending_index])]

        # -- the controller --------------------------------------------------------------------
        with m.FSM(name="memory_manager"):
            with m.State("IDLE"):
                m.d.comb += rx.o_hdr.ready.eq(1)
                with m.If(rx.o_hdr.valid):
                    m.d.sync += [r_src.x.eq(hdr.src_x), r_src.y.eq(hdr.src_y),
                                 r_src.fbits.eq(hdr.src_fbits), r_req.eq(hdr.meta)]
                    with m.If(hdr.payload_bytes != 0):
                        m.d.sync += dropped.eq(dropped + 1)
                    with m.Elif(hdr.msg_type == KernelMsgType.MM_ALLOC.value):
                        m.next = "ALLOC"
                    with m.Elif(hdr.msg_type == KernelMsgType.MM_DERIVE.value):
                        m.next = "DERIVE"
                    with m.Elif(hdr.msg_type == KernelMsgType.MM_FREE.value):
                        m.next = "FREE"
                    with m.Elif(hdr.msg_type == KernelMsgType.CAP_REVOKED.value):
                        m.next = "REVOKED"
                    if self.paging:
                        with m.Elif(hdr.msg_type == KernelMsgType.TLB_MISS.value):
                            m.next = "PAGE"
                    with m.Else():
                        m.d.sync += dropped.eq(dropped + 1)

            with m.State("ALLOC"):
                with m.If(bad_size):
                    alloc_failed(Status.BAD_SIZE)
                    m.next = "REPLY"
                with m.Elif(~pick_any):
                    alloc_failed(Status.NO_MEMORY)
                    m.next = "REPLY"
                with m.Else():
                    for i, alloc in enumerate(allocators):
                        m.d.comb += [alloc.req.valid.eq(pick[i]),
                                     alloc.req.payload.op.eq(BuddyOp.ALLOC),
                                     alloc.req.payload.level.eq(level)]
                    with m.If((pick & Cat(a.req.ready for a in allocators)).any()):
                        m.d.sync += r_mem.eq(pick_index)
                        if next_memory is not None:
                            m.d.sync += next_memory.eq(
                                Mux(pick_index == n_mem - 1, 0, pick_index + 1))
                        m.next = "ALLOC_WAIT"

            with m.State("ALLOC_WAIT"):
                for i, alloc in enumerate(allocators):
                    with m.If(r_mem == i):
                        m.d.comb += alloc.resp.ready.eq(1)
                        with m.If(alloc.resp.valid):
                            index = alloc.resp.payload.index
                            m.next = "REPLY"
                            with m.If(alloc.resp.payload.ok):
                                install(dst=(r_src.x, r_src.y, r_src.fbits),
                                        op=KernelMsgType.CAP_ALLOC.value, status=Status.OK,
                                        addr=index << log_bb, size=r_req.size,
                                        perm=Mux(r_req.perm == 0, Perm.RW, r_req.perm),
                                        mem_x=mem_x[i], mem_y=mem_y[i],
                                        root=Cat(index, Const(0, ROOT_LEAF_BITS - len(index)),
                                                 Const(i, 4)),
                                        user=r_req.user)
                                count(m, counters.allocs)
                            with m.Else():          # not expected: room said there was some
                                alloc_failed(Status.NO_MEMORY)

            with m.State("REPLY"):
                m.d.comb += [out_valid.eq(1), out_dst.eq(r_dst),
                             out_type.eq(Mux(r_page, KernelMsgType.TLB_FILL.value,
                                             KernelMsgType.CAP_INSTALL.value)),
                             out_meta.eq(r_out)]
                with m.If(out_taken):
                    m.next = "IDLE"

            if self.paging:
                with m.State("PAGE"):           # answer a TLB_MISS (apiary/os/paging.py)
                    found, base, size, mem, perm = page_lookup(m, self.pages, r_src.x, r_src.y,
                                                               r_req.addr)
                    with m.If(found):
                        install(dst=(r_src.x, r_src.y, r_src.fbits), status=Status.OK,
                                addr=base, size=size, perm=perm, mem_x=mem_x[mem],
                                mem_y=mem_y[mem])
                        count(m, counters.page_fills)
                    with m.Else():
                        install(dst=(r_src.x, r_src.y, r_src.fbits), status=Status.NO_ENTRY)
                        count(m, counters.page_faults)
                    m.d.sync += r_page.eq(1)
                    m.next = "REPLY"

            with m.State("DERIVE"):
                m.next = "IDLE"
                with m.If(~root_live | being_freed):
                    count(m, counters.bad_derive)
                with m.Elif(~same.any() & ~slot_free):
                    count(m, counters.holders_full)
                with m.Else():
                    with m.If(~same.any()):
                        for i, h in enumerate(holders):
                            with m.If(slot[i]):
                                m.d.sync += [h.root.eq(r_req.root), h.x.eq(r_req.peer_x),
                                             h.y.eq(r_req.peer_y),
                                             h.fbits.eq(r_req.peer_fbits)]
                        m.d.sync += h_valid.eq(h_valid | slot)
                    install(dst=(r_req.peer_x, r_req.peer_y, r_req.peer_fbits),
                            op=KernelMsgType.CAP_SEND.value, status=Status.OK,
                            addr=r_req.addr, size=r_req.size, perm=r_req.perm,
                            mem_x=r_req.mem_x, mem_y=r_req.mem_y, root=r_req.root,
                            peer_x=r_src.x, peer_y=r_src.y, user=r_req.user)
                    count(m, counters.derives)
                    m.next = "REPLY"

            with m.State("FREE"):
                with m.If(~root_live | being_freed):
                    count(m, counters.bad_free)
                    m.next = "IDLE"
                with m.Else():
                    count(m, counters.frees)
                    m.d.sync += h_pending.eq(h_pending | root_match)
                    with m.If(root_match.any()):
                        m.next = "REVOKE"
                    with m.Else():
                        m.next = "RELEASE"

            with m.State("REVOKE"):
                m.d.comb += [out_valid.eq(1), out_dst.eq(revokee),
                             out_type.eq(KernelMsgType.CAP_REVOKE.value),
                             out_meta.root.eq(r_req.root)]
                with m.If(out_taken):
                    m.d.sync += [h_pending.eq(h_pending & ~pending), h_sent.eq(h_sent | pending)]
                    count(m, counters.revokes)
                    with m.If((h_pending & ~pending) == 0):
                        m.next = "IDLE"

            with m.State("REVOKED"):
                with m.If(~ack_any):
                    count(m, counters.stray_revoked)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [h_valid.eq(h_valid & ~ack), h_sent.eq(h_sent & ~ack)]
                    with m.If((root_match & h_sent & ~ack).any()):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "RELEASE"

            with m.State("RELEASE"):
                for i, alloc in enumerate(allocators):
                    with m.If(root_mem == i):
                        m.d.comb += [alloc.req.valid.eq(1),
                                     alloc.req.payload.op.eq(BuddyOp.FREE),
                                     alloc.req.payload.index.eq(root_leaf),
                                     alloc.req.payload.level.eq(alloc.query_level)]
                        with m.If(alloc.req.ready):
                            m.d.sync += r_mem.eq(i)
                            m.next = "RELEASE_WAIT"

            with m.State("RELEASE_WAIT"):
                for i, alloc in enumerate(allocators):
                    with m.If(r_mem == i):
                        m.d.comb += alloc.resp.ready.eq(1)
                        with m.If(alloc.resp.valid):
                            m.next = "IDLE"
        return m
