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
``PAGE_MAP``,      62,   a trusted tile → manager   (with ``pool``) pages mapped and unmapped at
``PAGE_UNMAP``     63                               run time, answered ``CAP_RESULT``; an unmap
``TLB_SHOOTDOWN``  64    manager → a monitor        sends ``TLB_SHOOTDOWN`` and answers after its
``..._ACK``        65    that monitor → manager     ``TLB_SHOOTDOWN_ACK`` (see
                                                    :mod:`apiary.os.paging`)
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
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..noc.framing import offer_message
from ..noc.header import Fbits
from ..tile import Receive, Send, Tile, TileEnv
from .buddy import BuddyAllocator, BuddyOp, lowest_one
from .paging import PagePool, PageMaps, PageRange, page_lookup
from .uapi import KERNEL_FORMAT, KERNEL_META, KernelMsgType, Perm, Status
from ..stream.counters import count
from ..stream.integers import is_int as _is_int, power_of_two


__all__ = ["MemoryManagerTile", "AllocPlacement", "HolderTable", "ROOT_LEAF_BITS", "MAX_MEMORIES",
           "make_root", "split_root"]

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


class MemoryManagerTile(Tile):
    """The memory manager (see the module docstring for its messages and behaviour).

    One controller serves the messages, with a :class:`~apiary.os.buddy.BuddyAllocator` per
    memory, an :class:`AllocPlacement` that picks an allocation's level and memory, and a
    :class:`HolderTable` of the receivers of derived capabilities.

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
    paging, pages : bool, sequence of PageRange
        Answer paged monitors' ``TLB_MISS`` (:mod:`apiary.os.paging`), from ``pages`` fixed
        when the design is built.
    pool, map_entries : PagePool or None, int
        Frames a trusted tile maps at run time (``PAGE_MAP``, ``PAGE_UNMAP``), and how many
        such maps the manager keeps (:class:`~apiary.os.paging.PageMaps`).

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
                      KernelMsgType.PAGE_MAP, KernelMsgType.PAGE_UNMAP,
                      KernelMsgType.TLB_SHOOTDOWN_ACK, meta=KERNEL_FORMAT),)
    outputs = (Send("replies", KernelMsgType.CAP_INSTALL, KernelMsgType.CAP_REVOKE,
                    KernelMsgType.TLB_FILL, KernelMsgType.TLB_SHOOTDOWN, KernelMsgType.CAP_RESULT,
                    meta=KERNEL_FORMAT),)

    def __init__(self, env: TileEnv | None = None,
                 memories: Sequence[tuple[int, int, int]] = (), *, block_bytes: int = 256,
                 max_holders: int = 16, placement: str = "first", paging: bool = False,
                 pages: Sequence[PageRange] = (), pool: PagePool | None = None,
                 map_entries: int = 8) -> None:
        if not power_of_two(block_bytes):
            raise ValueError(f"block_bytes must be a power of two, not {block_bytes!r}")
        if not _is_int(max_holders) or not 1 <= max_holders <= 256:
            raise ValueError(f"max_holders must be an integer from 1 to 256, not "
                             f"{max_holders!r}")
        if placement not in ("first", "rotate"):
            raise ValueError(f"placement must be 'first' or 'rotate', not {placement!r}")
        self.placement = placement
        # Paged translation (apiary/os/paging.py): answer TLB_MISS from the pages given.
        self.paging = bool(paging) or bool(pages) or pool is not None
        self.pages = list(pages)
        # Pages mapped at run time, from a pool of frames (PAGE_MAP, PAGE_UNMAP).
        if pool is not None and (not isinstance(pool, PagePool)
                                 or not 0 <= pool.mem < len(memories)):
            raise ValueError(f"pool must be a PagePool of the manager's memories, not {pool!r}")
        self.pool = pool
        self.map_entries = map_entries
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
            **({"maps": "PAGE_MAP answered OK",
                "unmaps": "PAGE_UNMAP answered OK (after its shootdown)",
                "map_refused": "PAGE_MAP or PAGE_UNMAP answered with another status",
                "stray_shootdown_acks": "TLB_SHOOTDOWN_ACK matching no unmap, dropped"}
               if pool is not None else {}),
        })

    @property
    def largest_bytes(self) -> int:
        """The largest allocation: the largest memory's leaves times ``block_bytes``."""
        return max(self.leaves) * self.block_bytes

    def elaborate(self, platform: Any) -> Module:
        m = Module()
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
        m.submodules.placement = placement = AllocPlacement(
            self.leaves, block_bytes=self.block_bytes, rotate=self.placement == "rotate")
        m.submodules.holders = holders = HolderTable(self.max_holders)
        s = _Serving(m, tx, self.env, self.memories)

        # Is the root served a live (allocated) block, and not being freed?
        root_mem, root_leaf = s.req.root[ROOT_LEAF_BITS:], s.req.root[:ROOT_LEAF_BITS]
        root_live = Signal()
        for i, (alloc, leaves) in enumerate(zip(allocators, self.leaves)):
            m.d.comb += alloc.query_index.eq(root_leaf)
            with m.If(root_mem == i):
                m.d.comb += root_live.eq((root_leaf < leaves) & alloc.query_found)
        dead = Signal()                             # a free or derive of it is refused
        m.d.comb += dead.eq(~root_live | holders.being_freed)

        m.d.comb += placement.size.eq(s.req.size)
        for i, alloc in enumerate(allocators):
            m.d.comb += placement.rooms[i].eq(alloc.room)
        granted = Signal()                          # the picked allocator takes the request
        m.d.comb += granted.eq((placement.pick & Cat(a.req.ready for a in allocators)).any())
        m.d.comb += [
            holders.root.eq(s.req.root),
            holders.peer.x.eq(s.req.peer_x), holders.peer.y.eq(s.req.peer_y),
            holders.peer.fbits.eq(s.req.peer_fbits),
            holders.src.x.eq(s.src.x), holders.src.y.eq(s.src.y),
        ]

        with m.FSM(name="memory_manager"):
            with m.State("IDLE"):
                self._receive(m, rx, s, dropped)
            self._allocate(m, s, allocators, placement, granted)
            with m.State("REPLY"):
                m.d.comb += [s.out_valid.eq(1), s.out_dst.eq(s.dst), s.out_type.eq(s.kind),
                             s.out_meta.eq(s.out)]
                with m.If(s.out_taken):
                    m.next = "IDLE"
            maps = None
            if self.pool is not None:
                m.submodules.maps = maps = PageMaps(self.map_entries, self.pool.page_bits)
                self._run_time_maps(m, s, maps)
            if self.paging:
                with m.State("PAGE"):           # answer a TLB_MISS (apiary/os/paging.py)
                    self._page(m, s, maps)
            with m.State("DERIVE"):
                self._derive(m, s, holders, dead)
            self._free(m, s, holders, dead)
            self._release(m, s, allocators)
        return m

    def _receive(self, m: Module, rx: Any, s: "_Serving", dropped: Signal) -> None:
        """State ``IDLE``: take a message, go to the state that serves its type, or drop it."""
        hdr = rx.o_hdr.payload
        m.d.comb += rx.o_hdr.ready.eq(1)
        with m.If(rx.o_hdr.valid):
            m.d.sync += [s.src.x.eq(hdr.src_x), s.src.y.eq(hdr.src_y),
                         s.src.fbits.eq(hdr.src_fbits), s.req.eq(hdr.meta)]
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
            if self.pool is not None:
                for msg_type, state in ((KernelMsgType.PAGE_MAP, "MAP"),
                                        (KernelMsgType.PAGE_UNMAP, "UNMAP"),
                                        (KernelMsgType.TLB_SHOOTDOWN_ACK, "SHOT")):
                    with m.Elif(hdr.msg_type == msg_type.value):
                        m.next = state
            with m.Else():
                m.d.sync += dropped.eq(dropped + 1)

    def _alloc_failed(self, m: Module, s: "_Serving", status: int) -> None:
        s.install(dst=s.to_src(), op=KernelMsgType.CAP_ALLOC.value, status=status,
                  user=s.req.user)
        count(m, self.counters.alloc_failed)

    def _allocate(self, m: Module, s: "_Serving", allocators: list[BuddyAllocator],
                  placement: "AllocPlacement", granted: Signal) -> None:
        """States ``ALLOC`` and ``ALLOC_WAIT``: ask the picked memory's allocator for a block
        of the level, and register the answer."""
        log_bb = self.block_bytes.bit_length() - 1
        with m.State("ALLOC"):
            with m.If(placement.bad_size):
                self._alloc_failed(m, s, Status.BAD_SIZE)
                m.next = "REPLY"
            with m.Elif(~placement.found):
                self._alloc_failed(m, s, Status.NO_MEMORY)
                m.next = "REPLY"
            with m.Else():
                for i, alloc in enumerate(allocators):
                    m.d.comb += [alloc.req.valid.eq(placement.pick[i]),
                                 alloc.req.payload.op.eq(BuddyOp.ALLOC),
                                 alloc.req.payload.level.eq(placement.level)]
                with m.If(granted):
                    m.d.sync += s.mem.eq(placement.index)
                    m.d.comb += placement.placed.eq(1)
                    m.next = "ALLOC_WAIT"

        with m.State("ALLOC_WAIT"):
            for i, alloc in enumerate(allocators):
                with m.If(s.mem == i):
                    m.d.comb += alloc.resp.ready.eq(1)
                    with m.If(alloc.resp.valid):
                        index = alloc.resp.payload.index
                        m.next = "REPLY"
                        with m.If(alloc.resp.payload.ok):
                            s.install(dst=s.to_src(),
                                      op=KernelMsgType.CAP_ALLOC.value, status=Status.OK,
                                      addr=index << log_bb, size=s.req.size,
                                      perm=Mux(s.req.perm == 0, Perm.RW, s.req.perm),
                                      mem_x=s.mem_x[i], mem_y=s.mem_y[i],
                                      root=Cat(index, Const(0, ROOT_LEAF_BITS - len(index)),
                                               Const(i, 4)),
                                      user=s.req.user)
                            count(m, self.counters.allocs)
                        with m.Else():          # not expected: room said there was some
                            self._alloc_failed(m, s, Status.NO_MEMORY)

    def _page(self, m: Module, s: "_Serving", maps: PageMaps | None) -> None:
        """State ``PAGE``: answer a ``TLB_MISS`` from the pages given, else from those mapped
        at run time."""
        mapped = None
        if maps is not None and self.pool is not None:
            pool = self.pool
            m.d.comb += [maps.x.eq(s.src.x), maps.y.eq(s.src.y), maps.vaddr.eq(s.req.addr)]
            mapped = (maps.hit, pool.base + (maps.frame << pool.page_bits),
                      1 << pool.page_bits, pool.mem, maps.perm)
        found, base, size, mem, perm = page_lookup(m, self.pages, s.src.x, s.src.y, s.req.addr,
                                                   mapped)
        with m.If(found):
            s.install(dst=s.to_src(), status=Status.OK, addr=base, size=size, perm=perm,
                      mem_x=s.mem_x[mem], mem_y=s.mem_y[mem], kind=KernelMsgType.TLB_FILL)
            count(m, self.counters.page_fills)
        with m.Else():
            s.install(dst=s.to_src(), status=Status.NO_ENTRY, kind=KernelMsgType.TLB_FILL)
            count(m, self.counters.page_faults)
        m.next = "REPLY"

    def _run_time_maps(self, m: Module, s: "_Serving", maps: PageMaps) -> None:
        """States ``MAP``, ``UNMAP`` and ``SHOT`` (a ``TLB_SHOOTDOWN_ACK``): pages mapped and
        unmapped at run time (:mod:`apiary.os.paging`). An unmap waiting for its shootdown is
        kept in registers, so the manager serves other requests meanwhile."""
        assert self.pool is not None
        c = self.counters
        pending = Signal(name="unmap_pending")
        asker = Signal(_DST, name="unmap_asker")
        tile = Signal(_DST, name="unmap_tile")
        user = Signal(32, name="unmap_user")

        def answer(op: KernelMsgType, status: Any, dst: Any = None, who: Any = None) -> None:
            s.install(dst=dst if dst is not None else s.to_src(), kind=KernelMsgType.CAP_RESULT,
                      op=op.value, status=status, user=who if who is not None else s.req.user)

        with m.State("MAP"):
            m.d.comb += [maps.x.eq(s.req.peer_x), maps.y.eq(s.req.peer_y),
                         maps.vaddr.eq(s.req.addr)]
            m.next = "REPLY"
            with m.If(maps.hit):
                answer(KernelMsgType.PAGE_MAP, Status.BAD_HANDLE)
                count(m, c.map_refused)
            with m.Elif(s.req.root >= self.pool.pages):
                answer(KernelMsgType.PAGE_MAP, Status.BAD_SIZE)
                count(m, c.map_refused)
            with m.Elif(~maps.free):
                answer(KernelMsgType.PAGE_MAP, Status.TABLE_FULL)
                count(m, c.map_refused)
            with m.Else():
                m.d.comb += [maps.put.eq(1), maps.put_frame.eq(s.req.root),
                             maps.put_perm.eq(Mux(s.req.perm == 0, Perm.RW, s.req.perm))]
                answer(KernelMsgType.PAGE_MAP, Status.OK)
                count(m, c.maps)

        with m.State("UNMAP"):
            m.d.comb += [maps.x.eq(s.req.peer_x), maps.y.eq(s.req.peer_y),
                         maps.vaddr.eq(s.req.addr)]
            m.next = "REPLY"
            with m.If(pending):
                answer(KernelMsgType.PAGE_UNMAP, Status.BUSY)
                count(m, c.map_refused)
            with m.Elif(~maps.hit):
                answer(KernelMsgType.PAGE_UNMAP, Status.NO_ENTRY)
                count(m, c.map_refused)
            with m.Else():              # gone from the table at once; answered after the ack
                m.d.comb += maps.clear.eq(1)
                m.d.sync += [pending.eq(1), asker.eq(s.src), tile.x.eq(s.req.peer_x),
                             tile.y.eq(s.req.peer_y), user.eq(s.req.user)]
                s.install(dst=(s.req.peer_x, s.req.peer_y, Fbits.LOCAL0),
                          kind=KernelMsgType.TLB_SHOOTDOWN)

        with m.State("SHOT"):
            with m.If(pending & (s.src.x == tile.x) & (s.src.y == tile.y)):
                m.d.sync += pending.eq(0)
                answer(KernelMsgType.PAGE_UNMAP, Status.OK,
                       dst=(asker.x, asker.y, asker.fbits), who=user)
                count(m, c.unmaps)
                m.next = "REPLY"
            with m.Else():
                count(m, c.stray_shootdown_acks)
                m.next = "IDLE"

    def _derive(self, m: Module, s: "_Serving", holders: "HolderTable", dead: Signal) -> None:
        """State ``DERIVE``: record the receiver and install the capability there."""
        m.next = "IDLE"
        with m.If(dead):
            count(m, self.counters.bad_derive)
        with m.Elif(holders.full):
            count(m, self.counters.holders_full)
        with m.Else():
            m.d.comb += holders.derive.eq(1)
            s.install(dst=(s.req.peer_x, s.req.peer_y, s.req.peer_fbits),
                      op=KernelMsgType.CAP_SEND.value, status=Status.OK,
                      addr=s.req.addr, size=s.req.size, perm=s.req.perm,
                      mem_x=s.req.mem_x, mem_y=s.req.mem_y, root=s.req.root,
                      peer_x=s.src.x, peer_y=s.src.y, user=s.req.user)
            count(m, self.counters.derives)
            m.next = "REPLY"

    def _free(self, m: Module, s: "_Serving", holders: "HolderTable", dead: Signal) -> None:
        """States ``FREE``, ``REVOKE`` and ``REVOKED``: revoke every holder of the root, one
        message each, and count their acks; the block is released after the last."""
        counters = self.counters
        with m.State("FREE"):
            with m.If(dead):
                count(m, counters.bad_free)
                m.next = "IDLE"
            with m.Else():
                count(m, counters.frees)
                m.d.comb += holders.free.eq(1)
                with m.If(holders.held):
                    m.next = "REVOKE"
                with m.Else():
                    m.next = "RELEASE"

        with m.State("REVOKE"):
            m.d.comb += [s.out_valid.eq(1), s.out_dst.eq(holders.revokee),
                         s.out_type.eq(KernelMsgType.CAP_REVOKE.value),
                         s.out_meta.root.eq(s.req.root)]
            with m.If(s.out_taken):
                m.d.comb += holders.sent.eq(1)
                count(m, counters.revokes)
                with m.If(holders.last):
                    m.next = "IDLE"

        with m.State("REVOKED"):
            with m.If(holders.stray):
                count(m, counters.stray_revoked)
                m.next = "IDLE"
            with m.Else():
                m.d.comb += holders.acked.eq(1)
                with m.If(holders.awaited):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "RELEASE"

    def _release(self, m: Module, s: "_Serving", allocators: list[BuddyAllocator]) -> None:
        """States ``RELEASE`` and ``RELEASE_WAIT``: give the root's block back to its
        memory's allocator."""
        root_mem, root_leaf = s.req.root[ROOT_LEAF_BITS:], s.req.root[:ROOT_LEAF_BITS]
        with m.State("RELEASE"):
            for i, alloc in enumerate(allocators):
                with m.If(root_mem == i):
                    m.d.comb += [alloc.req.valid.eq(1),
                                 alloc.req.payload.op.eq(BuddyOp.FREE),
                                 alloc.req.payload.index.eq(root_leaf),
                                 alloc.req.payload.level.eq(alloc.query_level)]
                    with m.If(alloc.req.ready):
                        m.d.sync += s.mem.eq(i)
                        m.next = "RELEASE_WAIT"

        with m.State("RELEASE_WAIT"):
            for i, alloc in enumerate(allocators):
                with m.If(s.mem == i):
                    m.d.comb += alloc.resp.ready.eq(1)
                    with m.If(alloc.resp.valid):
                        m.next = "IDLE"


class _Serving:
    """The manager's registers and its offer to the sender: the message being served (its
    source ``src`` and metadata ``req``, taken in ``IDLE``), the allocator awaited (``mem``;
    ``mem_x``, ``mem_y``: the memories' tiles by index),
    the reply registered for it (``dst``, ``out``, its type ``kind``), and the
    descriptor offered (``out_valid``, ``out_dst``, ``out_type``, ``out_meta``; taken on
    ``out_taken``)."""

    def __init__(self, m: Module, tx: Any, env: TileEnv,
                 memories: Sequence[tuple[int, ...]]) -> None:
        self.m = m
        self.mem_x = Array(Const(x, 8) for x, _, _ in memories)     # each memory's tile
        self.mem_y = Array(Const(y, 8) for _, y, _ in memories)
        self.src = Signal(_DST, name="r_src")
        self.req = Signal(KERNEL_META, name="r_req")
        self.mem = Signal(range(MAX_MEMORIES), name="r_mem")  # the allocator awaited
        self.dst = Signal(_DST, name="r_dst")
        self.out = Signal(KERNEL_META, name="r_out")
        self.kind = Signal(8, name="r_kind")        # the reply's message type
        self.out_valid = Signal()
        self.out_dst = Signal(_DST)
        self.out_type = Signal(8)
        self.out_meta = Signal(KERNEL_META)
        out_ready = offer_message(m, tx, self.out_valid,
                                  dst=(self.out_dst.x, self.out_dst.y, self.out_dst.fbits),
                                  src=(env.x, env.y, Fbits.LOCAL0), msg_type=self.out_type,
                                  meta=self.out_meta)
        self.out_taken = Signal()
        m.d.comb += self.out_taken.eq(self.out_valid & out_ready)

    def to_src(self) -> tuple[Any, Any, Any]:
        """The served message's source, as a reply's destination."""
        return self.src.x, self.src.y, self.src.fbits

    def install(self, **fields: Any) -> None:
        """Register a reply of type ``kind`` (``CAP_INSTALL`` unless given) with ``fields``
        (all others zero) to ``dst``."""
        dst = fields.pop("dst")
        kind = fields.pop("kind", KernelMsgType.CAP_INSTALL)
        self.m.d.sync += [self.out.eq(0), self.dst.x.eq(dst[0]), self.dst.y.eq(dst[1]),
                          self.dst.fbits.eq(dst[2]), self.kind.eq(kind.value)]
        self.m.d.sync += [getattr(self.out, name).eq(value) for name, value in fields.items()]


class AllocPlacement(wiring.Component):
    """Where an allocation of ``size`` bytes goes: the buddy level it needs and the memory
    that takes it (combinational).

    ``level`` is the smallest ``k`` with ``2**k`` blocks of ``block_bytes`` holding ``size``;
    ``bad_size`` is high for ``size`` 0 or above the largest memory. Of the memories whose
    allocator has a free block of that level or above (``rooms[i]``, bit ``k``: the
    :class:`~apiary.os.buddy.BuddyAllocator`'s ``room``), ``pick`` (one-hot) and ``index``
    name the first, or with ``rotate`` the first at or after the one that follows the memory
    of the last allocation (``placed``, one cycle: an allocation went to ``index``; it moves
    the start on the next cycle); ``found`` is low when none has room.

    Parameters
    ----------
    leaves : sequence of int
        Each memory's leaves, a power of two.
    block_bytes : int
        The bytes of a leaf.
    rotate : bool
        Rotating placement (see above).
    """

    def __init__(self, leaves: Sequence[int], *, block_bytes: int,
                 rotate: bool = False) -> None:
        self._leaves = list(leaves)
        self._block_bytes = block_bytes
        self._rotate = bool(rotate) and len(self._leaves) > 1
        n = len(self._leaves)
        max_top = max(leaves).bit_length() - 1
        super().__init__({
            "size": In(KERNEL_META["size"].width),
            "rooms": In(max_top + 1).array(n),
            "level": Out(range(max_top + 2)),
            "bad_size": Out(1),
            "pick": Out(n),
            "index": Out(max(1, (n - 1).bit_length())),
            "found": Out(1),
            "placed": In(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n_mem = len(self._leaves)
        log_bb = self._block_bytes.bit_length() - 1
        max_top = max(self._leaves).bit_length() - 1
        size_m1 = Signal(len(self.size))
        m.d.comb += size_m1.eq(self.size - 1)
        m.d.comb += self.bad_size.eq((self.size == 0)
                                     | (self.size > max(self._leaves) * self._block_bytes))
        level = self.level                          # log2 of the blocks the size needs
        for b in range(max_top):
            with m.If(size_m1[log_bb + b]):
                m.d.comb += level.eq(b + 1)
        fits = Signal(n_mem)
        for i in range(n_mem):
            m.d.comb += fits[i].eq(self.rooms[i].bit_select(level, 1))

        if not self._rotate:
            pick, index, found = lowest_one(m, fits, "memory")
            m.d.comb += [self.pick.eq(pick), self.index.eq(index), self.found.eq(found)]
            return m
        start = Signal(range(n_mem), name="next_memory")
        rotated = Signal(n_mem)
        with m.Switch(start):
            for r in range(n_mem):
                with m.Case(r):
                    m.d.comb += rotated.eq(Cat(fits[r:], fits[:r]))
        _, offset, found = lowest_one(m, rotated, "memory")
        index = self.index
        total = Signal(range(2 * n_mem))
        m.d.comb += [total.eq(offset + start),
                     index.eq(Mux(total >= n_mem, total - n_mem, total)),
                     self.found.eq(found)]
        m.d.comb += self.pick.eq(Mux(found, Const(1, n_mem) << index, 0))
        with m.If(self.placed):
            m.d.sync += start.eq(Mux(index == n_mem - 1, 0, index + 1))
        return m


class HolderTable(wiring.Component):
    """Who holds a capability derived from each root, and the revocations under way.

    ``entries`` entries, each a receiver ``(root, x, y, fbits)`` (valid, *pending*: a
    ``CAP_REVOKE`` to send it, or *sent*: its ``CAP_REVOKED`` awaited). Combinational, for
    the root ``root`` (and ``peer``, ``src``): ``being_freed`` (an entry of the root pending
    or sent), ``held`` (any entry of the root), ``full`` (``peer`` holds no entry of the
    root and no entry is free), ``revokee`` (the lowest pending entry: where the next
    ``CAP_REVOKE`` goes), ``last`` (it is the only one pending), ``stray`` (no sent entry of
    the root is at ``src``), ``awaited`` (a sent entry of the root other than the one
    ``acked`` would clear).
    Each command takes one cycle and shows the next: ``derive`` records ``peer`` for
    ``root`` in the lowest free entry unless it already holds it; ``free`` marks every entry
    of ``root`` pending; ``sent`` moves ``revokee`` from pending to sent; ``acked`` clears
    the lowest sent entry of ``root`` at ``src``.

    Parameters
    ----------
    entries : int
        Entries of the table.
    """

    def __init__(self, entries: int) -> None:
        self._entries = entries
        super().__init__({
            "root": In(_HOLDER["root"].shape),
            "peer": In(_DST),
            "src": In(data.StructLayout({"x": 8, "y": 8})),
            "derive": In(1),
            "free": In(1),
            "sent": In(1),
            "acked": In(1),
            "being_freed": Out(1),
            "held": Out(1),
            "full": Out(1),
            "revokee": Out(_DST),
            "last": Out(1),
            "stray": Out(1),
            "awaited": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nh = self._entries
        root, peer, src = self.root, self.peer, self.src
        holders = [Signal(_HOLDER, name=f"holder{i}") for i in range(nh)]
        h_valid = Signal(nh)
        h_pending = Signal(nh)                      # a revoke to send
        h_sent = Signal(nh)                         # a revoke sent, its ack awaited
        root_match = Signal(nh)
        same = Signal(nh)                           # the derive's receiver already holds it
        acked = Signal(nh)                          # the CAP_REVOKED's sender, awaited
        m.d.comb += [
            root_match.eq(Cat(h_valid[i] & (h.root == root) for i, h in enumerate(holders))),
            same.eq(Cat(root_match[i] & (h.x == peer.x) & (h.y == peer.y)
                        & (h.fbits == peer.fbits) for i, h in enumerate(holders))),
            acked.eq(Cat(root_match[i] & h_sent[i] & (h.x == src.x) & (h.y == src.y)
                         for i, h in enumerate(holders))),
        ]
        m.d.comb += self.being_freed.eq((root_match & (h_pending | h_sent)).any())
        slot, _, slot_free = lowest_one(m, ~h_valid, "slot")
        pending, pending_index, _ = lowest_one(m, h_pending, "pending")
        ack, _, ack_any = lowest_one(m, acked, "ack")
        revokee = self.revokee
        m.d.comb += [revokee.x.eq(Array(h.x for h in holders)[pending_index]),
                     revokee.y.eq(Array(h.y for h in holders)[pending_index]),
                     revokee.fbits.eq(Array(h.fbits for h in holders)[pending_index])]
        m.d.comb += [
            self.full.eq(~same.any() & ~slot_free),
            self.held.eq(root_match.any()),
            self.last.eq((h_pending & ~pending) == 0),
            self.stray.eq(~ack_any),
            self.awaited.eq((root_match & h_sent & ~ack).any()),
        ]

        with m.If(self.derive):
            with m.If(~same.any()):
                for i, h in enumerate(holders):
                    with m.If(slot[i]):
                        m.d.sync += [h.root.eq(root), h.x.eq(peer.x), h.y.eq(peer.y),
                                     h.fbits.eq(peer.fbits)]
                m.d.sync += h_valid.eq(h_valid | slot)
        with m.If(self.free):
            m.d.sync += h_pending.eq(h_pending | root_match)
        with m.If(self.sent):
            m.d.sync += [h_pending.eq(h_pending & ~pending), h_sent.eq(h_sent | pending)]
        with m.If(self.acked):
            m.d.sync += [h_valid.eq(h_valid & ~ack), h_sent.eq(h_sent & ~ack)]
        return m
