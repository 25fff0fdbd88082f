"""FLD's transmit side: the accelerator's packets into a paged buffer shared by every send queue,
their descriptors into the shared pool, doorbells to the NIC; the NIC's reads answered from both;
its completions give the pages and the descriptor back and return the queue's credit.

**The paged buffer** (FlexDriver §5 and Table 3: "Tx buffers: 2·S_txbdp + S_xltData"): ``pages``
pages of ``page_bytes`` (any number of them: Table 2a's 2 × 305 KiB is 2,442 pages of 256
bytes). A packet takes as many pages as its bytes need, the next free ones whatever its queue,
and they are linked in a chain, the translation: one page number a page, the page after it.
The NIC sees each packet in a virtual range of its own, ``span`` bytes (``max_packet`` rounded
up to a power of two) at ``window + first_page * span``, its bytes in order however its pages
lie; a read there is translated by following the chain a page at a time as the words go out (a
read that starts past the packet's first page first walks to it, two cycles a page). The
packet's descriptor (:data:`~flexdriver.descriptors.TX_DESC`: that offset, the length, the
flags) goes to ring position ``producer`` of its queue in the
:class:`~flexdriver.tx_pool.TxDescriptorPool`, which maps ring positions onto the shared pool
of descriptors; the position's completion releases the descriptor, whose first page and length
give the chain back to the free pages, a page a cycle.

Free pages wait in a ring of page numbers. A packet takes its pages from the ring's head as its
words come, and keeps them only when it is posted: a dropped packet gives nothing back, since it
took nothing.

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
:class:`~flexdriver.queue_counters.QueueCounters`), ``free_pages`` (Out: pages free now).

**Credits.** A queue may start a packet while its credit is not zero: it counts the queue's
free ring positions while a descriptor and a largest packet's pages are free, else 0, and it is
0 while a packet is being written and posted (the pages it takes are not known until it ends). Each
queue's posted and completed counts live in two small memories (not registers), so queues cost
memory, not logic; the credit is asked for one queue at a time. A packet started without
credit, longer than ``max_packet``, or ended by an abort word is dropped and counted under its
queue: no queue ever has more packets outstanding than its ring holds, and no packet runs out
of pages. ``packets`` waits (not ready) only while a descriptor is being posted and its
doorbell rung (a few cycles a packet). Throughput: a word a cycle in; the NIC's reads a word a
cycle out (a packet's read starts 2 cycles after it is taken), a WQE read 6 cycles after it is
taken (the pool's 5).
"""

from types import SimpleNamespace
from typing import Any

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.integers import power_of_two
from apiary.stream.layout import abort_nbytes, check_width, payload_layout
from apiary.stream.queue import Queue
from .descriptors import BUFFER_UNIT, TX_DESC, CqeWindow, pcie_write_layout
from .formats import SIGNALED, WQE_BYTES
from .queue_counters import QueueCounters, queue_bits
from .tx_pool import TxDescriptorPool


__all__ = ["TxPath", "tx_meta", "nic_read_layout"]


def tx_meta(queues: int) -> data.StructLayout:
    """What comes with each packet: ``queue`` (the send queue) and ``flags`` (the NIC's
    checksum offloads, ``L3_CSUM`` and ``L4_CSUM``; FLD adds ``SIGNALED`` itself)."""
    return data.StructLayout({"queue": queue_bits(queues), "flags": 3})


def nic_read_layout() -> data.StructLayout:
    """A NIC's DMA read: ``length`` bytes at ``address``."""
    return data.StructLayout({"address": 64, "length": 16})


def _log2(n: int) -> int:
    return (n - 1).bit_length()


class TxPath(wiring.Component):
    """See the module docstring."""

    def __init__(self, *, width: int, queues: int, ring_entries: int, pool_entries: int,
                 pages: int, page_bytes: int, max_packet: int, ring_base: int, window: int,
                 cq_base: int, cq_entries: int) -> None:
        check_width(width)
        nb = width // 8
        if not (power_of_two(page_bytes) and page_bytes >= max(2 * nb, BUFFER_UNIT)):
            raise ValueError(f"page_bytes must be a power of two of at least two words and "
                             f"{BUFFER_UNIT} bytes, not {page_bytes!r}")
        if not (power_of_two(cq_entries) and cq_entries >= 2):
            raise ValueError(f"cq_entries must be a power of two of at least 2, not "
                             f"{cq_entries!r}")
        if max_packet < 1 or max_packet % page_bytes or max_packet // page_bytes > pages or \
                max_packet >= 1 << TX_DESC["length"].width:
            raise ValueError(f"max_packet must be whole pages of {page_bytes} bytes, fit the "
                             f"{pages} pages and a descriptor's length, not {max_packet!r}")
        if window % BUFFER_UNIT:
            raise ValueError(f"window must be aligned to {BUFFER_UNIT} bytes")
        self.span = 1 << _log2(max_packet)
        if pages * self.span // BUFFER_UNIT > 1 << TX_DESC["buffer"].width:
            raise ValueError(f"{pages} pages of packets up to {max_packet} bytes do not fit a "
                             f"descriptor's offsets")
        self.width, self.queues, self.ring_entries = width, queues, ring_entries
        self.pool_entries, self.pages, self.page_bytes = pool_entries, pages, page_bytes
        self.max_pages = max_packet // page_bytes
        self.ring_base, self.window = ring_base, window
        self.cq_base, self.cq_entries = cq_base, cq_entries
        self.pool = TxDescriptorPool(queues=queues, ring_entries=ring_entries,
                                     pool_entries=pool_entries, ring_base=ring_base,
                                     window=window)
        qbits = queue_bits(queues)
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
            "free_pages": Out(range(pages + 1)),
        })

    def _step(self, p: Any) -> Any:
        """The free ring's position after ``p``."""
        return Mux(p == self.pages - 1, 0, p + 1)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.pool = self.pool
        words_per_page = self.page_bytes // (self.width // 8)
        page_bits = max(1, _log2(self.pages))
        m.submodules.buffer = buf = Memory(shape=self.width,
                                           depth=self.pages * words_per_page, init=[])
        buf_wr, buf_rd = buf.write_port(), buf.read_port(transparent_for=())
        # The translation: each page's next page in its packet.
        m.submodules.chain = chain = Memory(shape=page_bits, depth=self.pages, init=[])
        # Free pages: a ring of page numbers from ``head`` (``free`` of them, to ``tail``).
        m.submodules.free_list = free_list = Memory(shape=page_bits, depth=self.pages,
                                                    init=list(range(self.pages)))
        take = Signal(range(self.pages))            # the writer's next page, from ``head``
        free_rd, free_wr = free_list.read_port(domain="comb"), free_list.write_port()
        head, tail = Signal(range(self.pages)), Signal(range(self.pages))
        free = Signal(range(self.pages + 1), init=self.pages)
        m.d.comb += [free_rd.addr.eq(take), self.free_pages.eq(free)]
        # Per queue: packets posted (its producer index) and completed, in two memories read
        # combinationally; what is outstanding is the difference, modulo 2**16.
        m.submodules.posted = posted_mem = Memory(shape=16, depth=self.queues, init=[])
        m.submodules.completed = completed_mem = Memory(shape=16, depth=self.queues, init=[])
        counts = SimpleNamespace(
            posted_w=posted_mem.write_port(), completed_w=completed_mem.write_port(),
            posted_r=posted_mem.read_port(domain="comb"),          # the writer's queue
            completed_r=completed_mem.read_port(domain="comb"),
            release_r=completed_mem.read_port(domain="comb"))      # the releaser's queue
        shared_free = (free >= self.max_pages) & (self.pool.free != 0)

        def credit_of(posted_count: Any, completed_count: Any) -> Any:
            return Mux(shared_free, self.ring_entries - (posted_count - completed_count)[:16], 0)

        # Shown only while the writer waits for a packet, so that a credit seen is one the
        # writer grants: a packet still being written may take pages a credit would count.
        idle = Signal()
        ask_p, ask_c = posted_mem.read_port(domain="comb"), completed_mem.read_port(domain="comb")
        m.d.comb += [ask_p.addr.eq(self.credit_queue), ask_c.addr.eq(self.credit_queue),
                     self.credit.eq(Mux(idle, credit_of(ask_p.data, ask_c.data), 0))]

        # The free pages change in one update a cycle: the writer keeps a posted packet's
        # pages, the releaser gives one back.
        kept = Signal(range(self.max_pages + 1))
        pushed = Signal()
        m.d.sync += free.eq(free - kept + pushed)
        doorbell_busy = Signal()                    # the writer has the doorbell port
        shared = SimpleNamespace(
            buf_wr=buf_wr, free_rd=free_rd, free_wr=free_wr, head=head, take=take, tail=tail,
            kept=kept, pushed=pushed, counts=counts, credit_of=credit_of, idle=idle,
            words_per_page=words_per_page, doorbell_busy=doorbell_busy,
            chain_wr=chain.write_port(), page_bits=page_bits)
        self._writer(m, shared)
        self._releaser(m, shared, chain.read_port(transparent_for=()))
        self._reader(m, buf_rd, chain.read_port(transparent_for=()), words_per_page)
        return m

    def _writer(self, m: Module, s: SimpleNamespace) -> None:
        """The accelerator's packets into pages; each posted, then its doorbell rung."""
        buf_wr, chain_wr, counts = s.buf_wr, s.chain_wr, s.counts
        i = self.packets
        p, meta = i.payload, i.payload.meta
        new_page = s.free_rd.data                   # the free page at ``take``
        page, first = Signal(s.page_bits), Signal(s.page_bits)
        used = Signal(range(self.max_pages + 1))    # pages taken
        word = Signal(range(s.words_per_page + 1))  # the next word of ``page``
        length = Signal(16)
        queue = Signal.like(meta.queue)
        flags = Signal(3)
        too_long = Signal()
        wbits = _log2(s.words_per_page)

        def put(page_number: Any, k: Any) -> None:  # this word to word ``k`` of a page
            m.d.comb += [buf_wr.addr.eq(Cat(k[:wbits], page_number)), buf_wr.data.eq(p.data)]

        producer = counts.posted_r.data             # of ``queue`` (of ``meta.queue`` in IDLE)
        m.d.comb += [counts.posted_r.addr.eq(queue), counts.completed_r.addr.eq(queue)]
        aborted = p.nbytes == abort_nbytes(self.width)
        m.submodules.drops = drops = QueueCounters(self.queues)
        m.d.comb += [drops.read_queue.eq(self.dropped_queue), self.dropped.eq(drops.value)]

        def count_drop(q: Any) -> None:
            m.d.comb += [drops.bump.eq(1), drops.bump_queue.eq(q)]

        with m.FSM(name="writer"):
            with m.State("IDLE"):
                m.d.comb += [s.idle.eq(1), i.ready.eq(1), counts.posted_r.addr.eq(meta.queue),
                             counts.completed_r.addr.eq(meta.queue)]
                with m.If(i.valid):
                    m.d.sync += [queue.eq(meta.queue), flags.eq(meta.flags)]
                    credit = s.credit_of(producer, counts.completed_r.data)
                    with m.If((credit == 0) | aborted):
                        count_drop(meta.queue)
                        with m.If(~p.last):
                            m.next = "DISCARD"
                    with m.Else():
                        put(new_page, Const(0, wbits))
                        m.d.comb += buf_wr.en.eq(1)
                        m.d.sync += [page.eq(new_page), first.eq(new_page), used.eq(1),
                                     word.eq(1), s.take.eq(self._step(s.take)),
                                     length.eq(p.nbytes), too_long.eq(0)]
                        with m.If(p.last):
                            m.next = "POST"
                        with m.Else():
                            m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid):
                    next_page = word == s.words_per_page
                    full = next_page & (used == self.max_pages)
                    with m.If(full):
                        pass                        # (a packet too long: its words go nowhere)
                    with m.Elif(next_page):         # the next page, chained to this one
                        put(new_page, Const(0, wbits))
                        m.d.comb += [buf_wr.en.eq(~aborted), chain_wr.addr.eq(page),
                                     chain_wr.data.eq(new_page), chain_wr.en.eq(1)]
                        m.d.sync += [page.eq(new_page), used.eq(used + 1), word.eq(1),
                                     s.take.eq(self._step(s.take))]
                    with m.Else():
                        put(page, word)
                        m.d.comb += buf_wr.en.eq(~aborted)
                        m.d.sync += word.eq(word + 1)
                    m.d.sync += [length.eq(length + p.nbytes), too_long.eq(too_long | full)]
                    with m.If(p.last):
                        with m.If(too_long | full | aborted):
                            count_drop(queue)
                            m.d.sync += s.take.eq(s.head)       # its pages never taken
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
                             desc.buffer.eq(first * (self.span // BUFFER_UNIT)),
                             desc.length.eq(length), desc.queue.eq(queue),
                             desc.flags.eq(flags | SIGNALED)]
                with m.If(post.ready):
                    m.d.comb += [counts.posted_w.addr.eq(queue),
                                 counts.posted_w.data.eq(producer + 1), counts.posted_w.en.eq(1),
                                 s.kept.eq(used)]
                    m.d.sync += s.head.eq(s.take)
                    m.next = "DOORBELL"
            with m.State("DOORBELL"):
                d = self.doorbell
                m.d.comb += [s.doorbell_busy.eq(1), d.valid.eq(1), d.payload.cq.eq(0),
                             d.payload.queue.eq(queue), d.payload.value.eq(producer)]
                with m.If(d.ready):
                    m.next = "IDLE"

    def _releaser(self, m: Module, s: SimpleNamespace, chain_rd: Any) -> None:
        """Each completion: its descriptor released, its pages freed, the consumer index
        rung."""
        counts = s.counts
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
        first = Signal(s.page_bits)                 # the released packet's first page
        pages = Signal(range(self.max_pages + 1))   # and how many it has
        hop = Signal.like(pages)
        m.d.comb += counts.release_r.addr.eq(item.queue)
        span_units = _log2(self.span // BUFFER_UNIT)
        page_shift = _log2(self.page_bytes)
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
                    length = back.desc.length
                    n = (length + self.page_bytes - 1) >> page_shift
                    m.d.sync += [first.eq(back.desc.buffer >> span_units),
                                 pages.eq(Mux(n == 0, 1, n)), hop.eq(0)]
                    with m.If(back.found):
                        m.next = "FREE"
                    with m.Else():                  # (a completion for nothing posted)
                        m.d.comb += done.o.ready.eq(1)
                        m.d.sync += consumer.eq(consumer + 1)
                        m.next = "DOORBELL"
            with m.State("FREE"):                   # the chain back, a page a cycle
                page = Mux(hop == 0, first, chain_rd.data)
                m.d.comb += [chain_rd.addr.eq(page),
                             s.free_wr.addr.eq(s.tail), s.free_wr.data.eq(page),
                             s.free_wr.en.eq(1), s.pushed.eq(1)]
                m.d.sync += [s.tail.eq(self._step(s.tail)), hop.eq(hop + 1)]
                with m.If(hop == pages - 1):
                    m.d.comb += [done.o.ready.eq(1),
                                 counts.completed_w.addr.eq(item.queue),
                                 counts.completed_w.data.eq(counts.release_r.data + 1),
                                 counts.completed_w.en.eq(1)]
                    m.d.sync += consumer.eq(consumer + 1)
                    m.next = "DOORBELL"
            with m.State("DOORBELL"):
                d = self.doorbell
                with m.If(~s.doorbell_busy):
                    m.d.comb += [d.valid.eq(1), d.payload.cq.eq(1), d.payload.value.eq(consumer)]
                    with m.If(d.ready):
                        m.next = "IDLE"

    def _reader(self, m: Module, buf_rd: Any, chain_rd: Any, words_per_page: int) -> None:
        """The NIC's reads: a ring position's WQE from the pool, or a packet's bytes through
        its chain of pages."""
        nb = self.width // 8
        out = self.nic_data
        req = self.nic_read.payload
        offset = Signal(64)
        m.d.comb += offset.eq(req.address - self.window)
        in_buffer = (req.address >= self.window) & (offset < self.pages * self.span)
        ring_span = self.queues * self.ring_entries * WQE_BYTES
        in_rings = (req.address >= self.ring_base) & (req.address < self.ring_base + ring_span)
        words = Signal(range((1 << 16) // nb + 2))      # the answer's words
        sent = Signal.like(words)
        fetched = Signal.like(words)
        have = Signal()                                 # ``buf_rd.data`` is a word to send
        page = Signal(max(1, _log2(self.pages)))
        word = Signal(range(words_per_page))
        hops = Signal(range(self.span // self.page_bytes + 1))   # pages to walk first
        settled = Signal()                              # ``chain_rd.data`` is ``page``'s next
        zero = Signal()
        wqe = Signal(8 * WQE_BYTES)
        wqe_words = WQE_BYTES // nb
        wbits, page_shift, span_shift = _log2(words_per_page), _log2(self.page_bytes), \
            _log2(self.span)
        within = offset[:span_shift]
        m.d.comb += [buf_rd.en.eq(0), chain_rd.addr.eq(page)]
        with m.FSM(name="reader"):
            with m.State("IDLE"):
                m.d.comb += self.nic_read.ready.eq(1)
                with m.If(self.nic_read.valid):
                    m.d.sync += [words.eq((req.length + nb - 1) >> _log2(nb)),
                                 sent.eq(0), fetched.eq(0), have.eq(0), zero.eq(0),
                                 page.eq(offset[span_shift:]), hops.eq(within >> page_shift),
                                 word.eq(within[_log2(nb):page_shift]), settled.eq(0)]
                    with m.If(in_rings):
                        m.d.comb += self.nic_read.ready.eq(0)
                        m.next = "POOL"
                    with m.Elif(in_buffer):
                        m.next = "WALK"
                    with m.Else():
                        m.d.sync += [zero.eq(1), hops.eq(0),
                                     self.stray_reads.eq(self.stray_reads + 1)]
                        m.next = "WALK"
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
            with m.State("WALK"):                       # to the page the read starts in
                m.d.sync += settled.eq(~settled)
                with m.If(settled):
                    with m.If(hops == 0):
                        m.d.sync += settled.eq(1)
                        m.next = "DATA"
                    with m.Else():
                        m.d.sync += [page.eq(chain_rd.data), hops.eq(hops - 1)]
            with m.State("DATA"):                       # the packet's words (zeros if stray)
                taken = out.valid & out.ready
                fetch = (~have | taken) & (fetched < words)
                m.d.comb += [buf_rd.addr.eq(Cat(word[:wbits], page)), buf_rd.en.eq(fetch),
                             out.valid.eq(have), out.payload.data.eq(Mux(zero, 0, buf_rd.data)),
                             out.payload.last.eq(sent + 1 == words)]
                m.d.sync += have.eq(fetch | (have & ~taken))
                with m.If(fetch):
                    m.d.sync += fetched.eq(fetched + 1)
                    with m.If(word == words_per_page - 1):
                        m.d.sync += [word.eq(0), page.eq(chain_rd.data)]
                    with m.Else():
                        m.d.sync += word.eq(word + 1)
                with m.If(taken):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(sent + 1 == words):
                        m.d.sync += have.eq(0)
                        m.next = "IDLE"
                with m.If(words == 0):
                    m.next = "IDLE"
