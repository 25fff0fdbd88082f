"""FLD's transmit side: the accelerator's packets into a shared buffer, their descriptors into the
shared pool, doorbells to the NIC; the NIC's reads answered from both; its completions give the
buffer and the descriptor back and return the queue's credit.

Every packet takes one *slot* of a buffer shared by all send queues (``slots`` slots of
``slot_bytes``, at ``window`` in the NIC's view): the next free one, whatever its queue
(FlexDriver §5: "we map a per-queue virtual address range into the data buffer with another
translation table"). Its descriptor (:data:`~flexdriver.descriptors.TX_DESC`: the slot, the
length, the offload flags) goes to ring position ``producer`` of its queue in the
:class:`~flexdriver.tx_pool.TxDescriptorPool`, which is the translation: the pool's cuckoo table
maps the position to the descriptor, and the descriptor names the slot, so the position's
completion, releasing the descriptor, frees the slot it names (no table of its own). Then the
queue's doorbell rings with the new producer index.

Ports: ``packets`` (In: payload words, :func:`~apiary.stream.layout.payload_layout`, with
``meta``, :func:`tx_meta`: the send queue and the offload flags), ``credit_queue`` (In) and
``credit`` (Out, combinationally: packets that queue may start now), ``nic_read`` (In: the
NIC's DMA reads, ``address`` and ``length``, of the rings' window, answered with the WQE
expanded, or of the buffer's, answered with the bytes; any other address with zeros, counted
in ``stray_reads``), ``nic_data`` (Out: the answers, a word at a time, in order, ``last`` on
each answer's last), ``pcie_write`` (In: the NIC's DMA writes of completions into the
completion window, ``cq_entries`` CQEs at ``cq_base``), ``doorbell`` (Out: ``cq`` 0 and the send
queue's producer index after a post; ``cq`` 1 and how many completions FLD has taken, the
completion queue's consumer index, after each), ``dropped_queue`` (In) and ``dropped`` (Out:
how many packets of that queue were refused; the counts are in a memory,
:class:`~flexdriver.queue_counters.QueueCounters`).

**Credits.** A queue may start a packet while its credit is not zero: it counts the queue's
free ring positions while a slot and a descriptor are free, else 0. Each queue's posted and
completed counts live in two small memories (not registers), so queues cost memory, not logic;
the credit is asked for one queue at a time. A packet started without
credit, longer than a slot, or ended by an abort word is dropped and counted under its queue,
and whatever it took is given back: no queue ever has more packets outstanding than its ring
holds, and no packet overruns its slot. ``packets`` waits (not ready) only while a descriptor
is being posted and its doorbell rung (a few cycles a packet). Throughput: a word a cycle in;
the NIC's reads a word a cycle out, a WQE read 6 cycles after it is taken (the pool's 5).
"""

from types import SimpleNamespace
from typing import Any

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.integers import power_of_two
from apiary.stream.layout import abort_nbytes, check_width, payload_layout
from apiary.stream.queue import Queue
from .descriptors import BUFFER_UNIT, CqeWindow, pcie_write_layout
from .formats import SIGNALED, WQE_BYTES
from .queue_counters import QueueCounters
from .tx_pool import TxDescriptorPool


__all__ = ["TxPath", "tx_meta", "nic_read_layout"]


def tx_meta(queues: int) -> data.StructLayout:
    """What comes with each packet: ``queue`` (the send queue) and ``flags`` (the NIC's
    checksum offloads, ``L3_CSUM`` and ``L4_CSUM``; FLD adds ``SIGNALED`` itself)."""
    return data.StructLayout({"queue": max(1, (queues - 1).bit_length()), "flags": 3})


def nic_read_layout() -> data.StructLayout:
    """A NIC's DMA read: ``length`` bytes at ``address``."""
    return data.StructLayout({"address": 64, "length": 16})


class TxPath(wiring.Component):
    """See the module docstring."""

    def __init__(self, *, width: int, queues: int, ring_entries: int, pool_entries: int,
                 slots: int, slot_bytes: int, ring_base: int, window: int, cq_base: int,
                 cq_entries: int) -> None:
        check_width(width)
        for name, n in (("slots", slots), ("slot_bytes", slot_bytes),
                        ("cq_entries", cq_entries)):
            if not (power_of_two(n) and n >= 2):
                raise ValueError(f"{name} must be a power of two of at least 2, not {n!r}")
        if slot_bytes % BUFFER_UNIT or slot_bytes % (width // 8):
            raise ValueError(f"slot_bytes must be a multiple of {BUFFER_UNIT} and of the word")
        if window % BUFFER_UNIT:
            raise ValueError(f"window must be aligned to {BUFFER_UNIT} bytes")
        self.width, self.queues, self.ring_entries = width, queues, ring_entries
        self.pool_entries, self.slots, self.slot_bytes = pool_entries, slots, slot_bytes
        self.ring_base, self.window = ring_base, window
        self.cq_base, self.cq_entries = cq_base, cq_entries
        self.pool = TxDescriptorPool(queues=queues, ring_entries=ring_entries,
                                     pool_entries=pool_entries, ring_base=ring_base,
                                     window=window)
        qbits = max(1, (queues - 1).bit_length())
        word = data.StructLayout({**dict(payload_layout(width).members.items()),
                                  "meta": tx_meta(queues)})
        super().__init__({
            "packets": In(stream.Signature(word)),
            "credit_queue": In(qbits),
            "credit": Out(range(ring_entries + 1)),
            "nic_read": In(stream.Signature(nic_read_layout())),
            "nic_data": Out(stream.Signature(data.StructLayout({"data": width, "last": 1}))),
            "pcie_write": In(stream.Signature(pcie_write_layout(width))),
            "doorbell": Out(stream.Signature(data.StructLayout({"cq": 1, "queue": qbits,
                                                                "value": 16}))),
            "dropped_queue": In(qbits),
            "dropped": Out(32),
            "stray_reads": Out(32),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.pool = self.pool
        nb = self.width // 8
        words_per_slot = self.slot_bytes // nb
        slot_bits = (self.slots - 1).bit_length()
        m.submodules.buffer = buf = Memory(shape=self.width, depth=self.slots * words_per_slot,
                                           init=[])
        buf_wr, buf_rd = buf.write_port(), buf.read_port(transparent_for=())
        # Free slots: a ring of slot numbers, the next to hand out at ``head``.
        m.submodules.free_list = free_list = Memory(shape=slot_bits, depth=self.slots,
                                                    init=list(range(self.slots)))
        free_rd, free_wr = free_list.read_port(domain="comb"), free_list.write_port()
        head, tail = Signal(slot_bits), Signal(slot_bits)
        free = Signal(range(self.slots + 1), init=self.slots)
        m.d.comb += free_rd.addr.eq(head)
        # Per queue: packets posted (its producer index) and completed, in two memories read
        # combinationally; what is outstanding is the difference, modulo 2**16.
        m.submodules.posted = posted_mem = Memory(shape=16, depth=self.queues, init=[])
        m.submodules.completed = completed_mem = Memory(shape=16, depth=self.queues, init=[])
        counts = SimpleNamespace(
            posted_w=posted_mem.write_port(), completed_w=completed_mem.write_port(),
            posted_r=posted_mem.read_port(domain="comb"),          # the writer's queue
            completed_r=completed_mem.read_port(domain="comb"),
            release_r=completed_mem.read_port(domain="comb"))      # the releaser's queue
        shared_free = (free != 0) & (self.pool.free != 0)

        def credit_of(posted_count: Any, completed_count: Any) -> Any:
            return Mux(shared_free, self.ring_entries - (posted_count - completed_count)[:16], 0)

        ask_p, ask_c = posted_mem.read_port(domain="comb"), completed_mem.read_port(domain="comb")
        m.d.comb += [ask_p.addr.eq(self.credit_queue), ask_c.addr.eq(self.credit_queue),
                     self.credit.eq(credit_of(ask_p.data, ask_c.data))]

        # What each path changes of the free slots, in one update a cycle.
        popped, pushed, released = Signal(), Signal(), Signal()
        # (a slot comes back from the writer, a dropped packet's, or with a completion)
        m.d.sync += [free.eq(free - popped + pushed + released), head.eq(head + popped)]
        doorbell_busy = Signal()                    # the writer has the doorbell port
        shared = SimpleNamespace(
            buf_wr=buf_wr, free_rd=free_rd, free_wr=free_wr, tail=tail, popped=popped,
            pushed=pushed, counts=counts, credit_of=credit_of,
            words_per_slot=words_per_slot, doorbell_busy=doorbell_busy,
            released=released)
        self._writer(m, shared)
        self._releaser(m, shared)
        self._reader(m, buf_rd)
        return m

    def _writer(self, m: Module, s: SimpleNamespace) -> None:
        """The accelerator's packets into slots; each posted, then its doorbell rung."""
        buf_wr, free_rd, free_wr, tail = s.buf_wr, s.free_rd, s.free_wr, s.tail
        popped, pushed, counts = s.popped, s.pushed, s.counts
        words_per_slot = s.words_per_slot
        doorbell_busy = s.doorbell_busy
        i = self.packets
        p, meta = i.payload, i.payload.meta
        slot = Signal.like(free_rd.data)
        word = Signal(range(words_per_slot + 1))
        length = Signal(range(self.slot_bytes + 1))
        queue = Signal.like(meta.queue)
        flags = Signal(3)
        too_long = Signal()
        wbits = (words_per_slot - 1).bit_length()

        def at(slot_number: Any, k: Any) -> Any:    # word ``k`` of a slot in the buffer
            return Cat(k[:wbits], slot_number)[:len(buf_wr.addr)]

        producer = counts.posted_r.data             # of ``queue`` (of ``meta.queue`` in IDLE)
        m.d.comb += [buf_wr.data.eq(p.data), buf_wr.addr.eq(at(slot, word)),
                     counts.posted_r.addr.eq(queue), counts.completed_r.addr.eq(queue)]
        aborted = p.nbytes == abort_nbytes(self.width)

        m.submodules.drops = drops = QueueCounters(self.queues)
        m.d.comb += [drops.read_queue.eq(self.dropped_queue), self.dropped.eq(drops.value)]

        def count_drop(q: Any) -> None:
            m.d.comb += [drops.bump.eq(1), drops.bump_queue.eq(q)]

        def give_back(value: Any) -> None:  # a slot back to the free list (from the writer)
            m.d.comb += [free_wr.addr.eq(tail), free_wr.data.eq(value), free_wr.en.eq(1),
                         pushed.eq(1)]
            m.d.sync += tail.eq(tail + 1)

        with m.FSM(name="writer"):
            with m.State("IDLE"):
                m.d.comb += [i.ready.eq(1), counts.posted_r.addr.eq(meta.queue),
                             counts.completed_r.addr.eq(meta.queue)]
                with m.If(i.valid):
                    m.d.sync += [queue.eq(meta.queue), flags.eq(meta.flags)]
                    credit = s.credit_of(producer, counts.completed_r.data)
                    with m.If((credit == 0) | aborted):
                        count_drop(meta.queue)
                        with m.If(~p.last):
                            m.next = "DISCARD"
                    with m.Else():
                        m.d.comb += [popped.eq(1), buf_wr.addr.eq(at(free_rd.data, word & 0)),
                                     buf_wr.en.eq(1)]
                        m.d.sync += [slot.eq(free_rd.data), word.eq(1), length.eq(p.nbytes),
                                     too_long.eq(0)]
                        with m.If(p.last):
                            m.next = "POST"
                        with m.Else():
                            m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid):
                    full = word == words_per_slot
                    m.d.comb += buf_wr.en.eq(~full & ~aborted)
                    m.d.sync += [word.eq(word + ~full), length.eq(length + p.nbytes),
                                 too_long.eq(too_long | full)]
                    with m.If(p.last):
                        with m.If(too_long | full | aborted):
                            count_drop(queue)
                            give_back(slot)
                            m.next = "IDLE"
                        with m.Else():
                            m.next = "POST"
            with m.State("DISCARD"):                # a refused packet's words
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid & p.last):
                    m.next = "IDLE"
            with m.State("POST"):
                post = self.pool.post
                desc = post.payload.desc
                m.d.comb += [post.valid.eq(1), post.payload.queue.eq(queue),
                             post.payload.index.eq(producer),
                             desc.buffer.eq(slot * (self.slot_bytes // BUFFER_UNIT)),
                             desc.length.eq(length), desc.queue.eq(queue),
                             desc.flags.eq(flags | SIGNALED)]
                with m.If(post.ready):
                    m.d.comb += [counts.posted_w.addr.eq(queue),
                                 counts.posted_w.data.eq(producer + 1), counts.posted_w.en.eq(1)]
                    m.next = "DOORBELL"
            with m.State("DOORBELL"):
                d = self.doorbell
                m.d.comb += [doorbell_busy.eq(1), d.valid.eq(1), d.payload.cq.eq(0),
                             d.payload.queue.eq(queue), d.payload.value.eq(producer)]
                with m.If(d.ready):
                    m.next = "IDLE"

    def _releaser(self, m: Module, s: SimpleNamespace) -> None:
        """Each completion: its descriptor released, its slot freed, the consumer index rung."""
        free_wr, tail, pushed, released = s.free_wr, s.tail, s.pushed, s.released
        counts = s.counts
        doorbell_busy = s.doorbell_busy
        m.submodules.cq = cq = CqeWindow(width=self.width, base=self.cq_base,
                                         entries=self.cq_entries)
        m.d.comb += [cq.writes.payload.eq(self.pcie_write.payload),
                     cq.writes.valid.eq(self.pcie_write.valid), self.pcie_write.ready.eq(1)]
        m.submodules.done = done = Queue(data.StructLayout({"queue": 12, "index": 16}),
                                         self.cq_entries)
        m.d.comb += [done.i.valid.eq(cq.complete), done.i.payload.queue.eq(cq.compact.queue),
                     done.i.payload.index.eq(cq.compact.counter)]
        consumer = Signal(16)
        item = done.o.payload
        slot = Signal.like(s.free_rd.data)          # the released descriptor's slot
        m.d.comb += counts.release_r.addr.eq(item.queue)
        units = self.slot_bytes // BUFFER_UNIT
        with m.FSM(name="releaser"):
            with m.State("IDLE"):
                r = self.pool.release
                m.d.comb += [r.valid.eq(done.o.valid), r.payload.queue.eq(item.queue),
                             r.payload.index.eq(item.index)]
                with m.If(r.valid & r.ready):
                    m.next = "DESCRIPTOR"
            with m.State("DESCRIPTOR"):             # the pool's pulse: what was released
                back = self.pool.released
                with m.If(back.valid):
                    m.d.sync += slot.eq(back.desc.buffer // units)
                    with m.If(back.found):
                        m.next = "FREE"
                    with m.Else():                  # (a completion for nothing posted)
                        m.d.comb += done.o.ready.eq(1)
                        m.d.sync += consumer.eq(consumer + 1)
                        m.next = "DOORBELL"
            with m.State("FREE"):
                # Not in a cycle where the writer gives a dropped packet's slot back: the free
                # list takes one slot a cycle.
                with m.If(~pushed):
                    m.d.comb += [free_wr.addr.eq(tail), free_wr.data.eq(slot),
                                 free_wr.en.eq(1), released.eq(1), done.o.ready.eq(1),
                                 counts.completed_w.addr.eq(item.queue),
                                 counts.completed_w.data.eq(counts.release_r.data + 1),
                                 counts.completed_w.en.eq(1)]
                    m.d.sync += [tail.eq(tail + 1), consumer.eq(consumer + 1)]
                    m.next = "DOORBELL"
            with m.State("DOORBELL"):
                d = self.doorbell
                with m.If(~doorbell_busy):
                    m.d.comb += [d.valid.eq(1), d.payload.cq.eq(1), d.payload.value.eq(consumer)]
                    with m.If(d.ready):
                        m.next = "IDLE"

    def _reader(self, m: Module, buf_rd: Any) -> None:
        """The NIC's reads: a ring position's WQE from the pool, or a slot's bytes."""
        nb = self.width // 8
        out = self.nic_data
        req = self.nic_read.payload
        span = self.slots * self.slot_bytes
        offset = Signal(64)
        m.d.comb += offset.eq(req.address - self.window)
        in_buffer = (req.address >= self.window) & (offset < span)
        ring_span = self.queues * self.ring_entries * WQE_BYTES
        in_rings = (req.address >= self.ring_base) & (req.address < self.ring_base + ring_span)
        words = Signal(range((1 << 16) // nb + 2))      # the answer's words
        sent = Signal.like(words)
        fetched = Signal.like(words)
        have = Signal()                                 # ``buf_rd.data`` is a word to send
        addr = Signal(len(buf_rd.addr))
        zero = Signal()
        wqe = Signal(8 * WQE_BYTES)
        wqe_words = WQE_BYTES // nb
        m.d.comb += buf_rd.en.eq(0)
        with m.FSM(name="reader"):
            with m.State("IDLE"):
                m.d.comb += self.nic_read.ready.eq(1)
                with m.If(self.nic_read.valid):
                    m.d.sync += [words.eq((req.length + nb - 1) >> (nb.bit_length() - 1)),
                                 sent.eq(0), fetched.eq(0), have.eq(0),
                                 addr.eq(offset >> (nb.bit_length() - 1)), zero.eq(0)]
                    with m.If(in_rings):
                        m.d.comb += self.nic_read.ready.eq(0)
                        m.next = "POOL"
                    with m.Elif(in_buffer):
                        m.next = "DATA"
                    with m.Else():
                        m.d.sync += [zero.eq(1),
                                     self.stray_reads.eq(self.stray_reads + 1)]
                        m.next = "DATA"
            with m.State("POOL"):                       # the WQE, from the pool
                m.d.comb += [self.pool.nic_read.valid.eq(1),
                             self.pool.nic_read.payload.eq(req.address),
                             self.pool.nic_data.ready.eq(1)]
                with m.If(self.pool.nic_read.ready):
                    m.d.comb += self.nic_read.ready.eq(1)
                    m.next = "POOL_WAIT"
            with m.State("POOL_WAIT"):
                m.d.comb += self.pool.nic_data.ready.eq(1)
                with m.If(self.pool.nic_data.valid):
                    m.d.sync += [wqe.eq(self.pool.nic_data.payload.wqe), sent.eq(0)]
                    m.next = "WQE"
            with m.State("WQE"):
                lanes = Array(wqe[k * self.width:(k + 1) * self.width] for k in range(wqe_words))
                m.d.comb += [out.valid.eq(1), out.payload.data.eq(lanes[sent]),
                             out.payload.last.eq(sent == wqe_words - 1)]
                with m.If(out.ready):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(sent == wqe_words - 1):
                        m.next = "IDLE"
            with m.State("DATA"):                       # a slot's words (zeros if stray)
                taken = out.valid & out.ready
                fetch = (~have | taken) & (fetched < words)
                m.d.comb += [buf_rd.addr.eq(addr), buf_rd.en.eq(fetch),
                             out.valid.eq(have), out.payload.data.eq(Mux(zero, 0, buf_rd.data)),
                             out.payload.last.eq(sent + 1 == words)]
                m.d.sync += have.eq(fetch | (have & ~taken))
                with m.If(fetch):
                    m.d.sync += [fetched.eq(fetched + 1), addr.eq(addr + 1)]
                with m.If(taken):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(sent + 1 == words):
                        m.d.sync += have.eq(0)
                        m.next = "IDLE"
                with m.If(words == 0):
                    m.next = "IDLE"
