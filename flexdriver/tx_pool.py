"""FLD's shared pool of transmit descriptors behind the NIC's view of per-queue rings.

The NIC reads each send queue's WQEs from a ring of ``ring_entries`` 64-byte entries at
``ring_base + queue * ring_entries * 64`` (a window of the FPGA's PCIe BAR); FLD keeps no such
rings. A posted descriptor (8 bytes, :data:`~flexdriver.descriptors.TX_DESC`) takes a slot of
one pool of ``pool_entries`` shared by every queue, and a cuckoo table at load ½
(:class:`~apiary.stream.cuckoo.CuckooTable`) maps ``(queue, index)`` to the slot; a NIC read
of a ring address is translated through it and answered with the WQE expanded from the slot
(:class:`~flexdriver.descriptors.WqeExpander`). A release (the WQE's completion) frees the
slot. FlexDriver §5: "FLD maps PCIe reads from the queue's virtual address into a smaller
physical array of descriptors" (2,080× less memory than rings per queue).

Ports (streams): ``post`` (``queue``, ``index``, ``desc``: a descriptor for ring position
``index`` of ``queue``; not taken while the pool is full), ``release`` (``queue``, ``index``),
``nic_read`` (``address``: a 64-byte read of a ring entry) and ``nic_data`` (its answer:
``found``, ``wqe``, the 64 bytes in lane order; a read of a position with no descriptor, or
outside the rings, answers ``found`` 0 and zeros). ``free``: slots free now. ``released``: a
one-cycle pulse (``valid``) after each release, with the descriptor it released (``found`` 0:
there was none at that position), so that its buffer can be freed too.

One request at a time, reads first, then releases, then posts; a read is answered 5 cycles
after it is taken (the table's 3, the pool's read, the answer), a post takes 4, a release 5
(its pulse in the last). A
post for a position that already has a descriptor replaces it (and frees the old slot); every
post needs a free slot to be taken, replacing or not.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.cuckoo import CuckooOp, CuckooTable
from apiary.stream.integers import power_of_two
from .descriptors import TX_DESC, WqeExpander
from .formats import WQE_BYTES


__all__ = ["TxDescriptorPool"]


class TxDescriptorPool(wiring.Component):
    """See the module docstring. ``window`` is where FLD's transmit buffer sits in the NIC's
    address space (what a descriptor's offset is added to)."""

    def __init__(self, *, queues: int, ring_entries: int, pool_entries: int, ring_base: int,
                 window: int) -> None:
        for name, n in (("queues", queues), ("ring_entries", ring_entries),
                        ("pool_entries", pool_entries)):
            if not (power_of_two(n) and n >= 2):
                raise ValueError(f"{name} must be a power of two of at least 2, not {n!r}")
        self.queues, self.ring_entries, self.pool_entries = queues, ring_entries, pool_entries
        self.ring_base, self.window = ring_base, window
        self.queue_bits = (queues - 1).bit_length()
        self.index_bits = (ring_entries - 1).bit_length()
        self.slot_bits = (pool_entries - 1).bit_length()
        position = {"queue": self.queue_bits, "index": self.index_bits}
        super().__init__({
            "post": In(stream.Signature(data.StructLayout({**position, "desc": TX_DESC}))),
            "release": In(stream.Signature(data.StructLayout(position))),
            "nic_read": In(stream.Signature(64)),
            "nic_data": Out(stream.Signature(data.StructLayout({"found": 1,
                                                                "wqe": 8 * WQE_BYTES}))),
            "free": Out(range(pool_entries + 1)),
            "released": Out(data.StructLayout({"valid": 1, "found": 1, "desc": TX_DESC})),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        key_bits = self.queue_bits + self.index_bits
        # Load ½: twice as many places as descriptors, in 4 banks.
        m.submodules.table = table = CuckooTable(key_bits, self.slot_bits,
                                                 2 * self.pool_entries // 4)
        m.submodules.pool = pool = Memory(shape=TX_DESC, depth=self.pool_entries, init=[])
        pool_rd, pool_wr = pool.read_port(transparent_for=()), pool.write_port()
        m.submodules.free_list = free_list = Memory(
            shape=self.slot_bits or 1, depth=self.pool_entries,
            init=list(range(self.pool_entries)))
        free_rd, free_wr = free_list.read_port(domain="comb"), free_list.write_port()
        head = Signal(self.slot_bits)               # the next free slot to hand out
        tail = Signal(self.slot_bits)               # where a freed slot goes
        free = Signal(range(self.pool_entries + 1), init=self.pool_entries)
        m.d.comb += [self.free.eq(free), free_rd.addr.eq(head)]
        m.submodules.expand = expand = WqeExpander(self.window)

        key = Signal(key_bits)
        slot = Signal(self.slot_bits)
        outside = Signal()
        # A NIC read's ring position: the address's offset from the rings, 64 bytes an entry.
        span = self.queues * self.ring_entries * WQE_BYTES
        offset = Signal(64)
        m.d.comb += offset.eq(self.nic_read.payload - self.ring_base)
        read_key = offset[6:6 + key_bits]
        read_outside = (self.nic_read.payload < self.ring_base) | (offset >= span) | \
            (offset[:6] != 0)

        def push_free(value: object) -> None:
            m.d.comb += [free_wr.addr.eq(tail), free_wr.data.eq(value), free_wr.en.eq(1)]
            m.d.sync += tail.eq(tail + 1)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.nic_read.valid):
                    m.d.comb += self.nic_read.ready.eq(1)
                    m.d.sync += [key.eq(read_key), outside.eq(read_outside)]
                    m.next = "READ_ASK"
                with m.Elif(self.release.valid):
                    m.d.comb += self.release.ready.eq(1)
                    m.d.sync += key.eq(Cat(self.release.payload.index,
                                           self.release.payload.queue))
                    m.next = "RELEASE_ASK"
                with m.Elif(self.post.valid & (free != 0)):
                    p = self.post.payload
                    m.d.comb += [self.post.ready.eq(1), pool_wr.addr.eq(free_rd.data),
                                 pool_wr.data.eq(p.desc), pool_wr.en.eq(1)]
                    m.d.sync += [key.eq(Cat(p.index, p.queue)), slot.eq(free_rd.data),
                                 head.eq(head + 1), free.eq(free - 1)]
                    m.next = "POST_ASK"
            for op, state, after in ((CuckooOp.LOOKUP, "READ_ASK", "READ_WAIT"),
                                     (CuckooOp.REMOVE, "RELEASE_ASK", "RELEASE_WAIT"),
                                     (CuckooOp.INSERT, "POST_ASK", "POST_WAIT")):
                with m.State(state):
                    m.d.comb += [table.command.valid.eq(1), table.command.payload.op.eq(op),
                                 table.command.payload.key.eq(key),
                                 table.command.payload.value.eq(slot)]
                    with m.If(table.command.ready):
                        m.next = after
            with m.State("READ_WAIT"):
                m.d.comb += [table.answer.ready.eq(1), pool_rd.addr.eq(table.answer.payload.value)]
                with m.If(table.answer.valid):
                    m.d.sync += outside.eq(outside | ~table.answer.payload.found)
                    m.next = "READ_ANSWER"
            with m.State("READ_ANSWER"):
                m.d.comb += [pool_rd.en.eq(0),                  # (held while nic_data waits)
                             expand.desc.eq(pool_rd.data), expand.index.eq(key[:self.index_bits]),
                             self.nic_data.valid.eq(1),
                             self.nic_data.payload.found.eq(~outside),
                             self.nic_data.payload.wqe.eq(Mux(outside, 0, expand.wqe))]
                with m.If(self.nic_data.ready):
                    m.next = "IDLE"
            with m.State("RELEASE_WAIT"):
                m.d.comb += [table.answer.ready.eq(1), pool_rd.addr.eq(table.answer.payload.value)]
                with m.If(table.answer.valid):
                    m.d.sync += outside.eq(~table.answer.payload.found)
                    with m.If(table.answer.payload.found):
                        push_free(table.answer.payload.value)
                        m.d.sync += free.eq(free + 1)
                    m.next = "RELEASE_ANSWER"
            with m.State("RELEASE_ANSWER"):                 # the descriptor released, a pulse
                m.d.comb += [self.released.valid.eq(1), self.released.found.eq(~outside),
                             self.released.desc.eq(pool_rd.data)]
                m.next = "IDLE"
            with m.State("POST_WAIT"):
                m.d.comb += table.answer.ready.eq(1)
                with m.If(table.answer.valid):
                    with m.If(table.answer.payload.found):       # replaced: the old slot back
                        push_free(table.answer.payload.value)
                        m.d.sync += free.eq(free + 1)
                    m.next = "IDLE"
        return m
