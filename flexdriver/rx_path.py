"""FLD's receive side: the NIC writes packets into FLD's buffers and completions into its
completion window; FLD streams each packet to the accelerator with its metadata, never waiting
on it, and gives the buffers back to the NIC in the order they were posted.

FlexDriver §5 leaves the receive rings in host memory, unmodified: receive queue ``q`` has
``buffers`` buffers of ``buffer_bytes`` (buffer ``i`` at ``rx_base + (q * buffers + i) *
buffer_bytes`` in the NIC's view), always posted at ring position ``i`` modulo ``buffers``, so
recycling a buffer is moving the queue's producer index (``doorbell``: the index FLD writes to
the NIC's receive doorbell of that queue). The NIC fills a queue's buffers in that order and
completes them in order; the queues share one completion queue (``queues * buffers`` entries
at ``cq_base``), each completion naming its queue and ring position.

Ports: ``pcie_write`` (In stream: ``address`` and ``width // 8`` bytes of ``data``, aligned: the
NIC's DMA writes, split into words), ``packets`` (Out stream: the payload stream,
:func:`~apiary.stream.layout.payload_layout`, with ``meta`` beside every word: the receive
queue, the context ID, the completion's checks and the length), ``accept`` (In, a bit per
queue, all set unless driven: the accelerator takes that queue's packets now), ``doorbell``
(Out stream: ``cq`` 0, the ``queue`` and its producer index after each buffer is given back;
then ``cq`` 1 and how many completions FLD has taken, the completion queue's consumer index),
``dropped_queue`` (In) and ``dropped`` (Out: how many packets of that receive queue the
accelerator did not take; the counts are in a memory,
:class:`~flexdriver.queue_counters.QueueCounters`).

**No backpressure** (FLD §5.5): a packet whose first word finds ``packets`` not ready, or its
queue's ``accept`` bit clear, is dropped whole and counted under its queue; one whose later
word finds ``packets`` not ready is aborted in-band (a last word with the abort ``nbytes``) and
counted too; either way its buffer goes back at once, so a slow consumer of one queue costs the
other queues nothing. ``pcie_write`` is always ready. A completion with an error is not
delivered (its buffer goes back). Throughput: one word a cycle out; a packet costs 3 cycles
more (its completion, the first read, the second doorbell).
"""

from typing import Any

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.integers import power_of_two
from apiary.stream.layout import abort_nbytes, check_width, payload_layout
from .descriptors import CqeWindow, pcie_write_layout
from .formats import CQE_RECV
from .queue_counters import QueueCounters


__all__ = ["RxPath", "rx_meta"]


def rx_meta(queues: int) -> data.StructLayout:
    """What comes with each packet: ``queue`` (the receive queue), ``context``, ``checks``
    (the completion's), ``length`` (bytes)."""
    return data.StructLayout({"queue": max(1, (queues - 1).bit_length()), "context": 24,
                              "checks": 6, "length": 14})


class RxPath(wiring.Component):
    """See the module docstring."""

    def __init__(self, *, width: int, buffers: int, buffer_bytes: int, rx_base: int,
                 cq_base: int, queues: int = 1) -> None:
        check_width(width)
        if not (power_of_two(buffers) and buffers >= 2 and power_of_two(buffer_bytes)) or \
                buffer_bytes % (width // 8):
            raise ValueError("buffers and buffer_bytes must be powers of two, buffer_bytes a "
                             "multiple of the word")
        if not (power_of_two(queues) and queues <= 4096):
            raise ValueError(f"queues must be a power of two up to 4096, not {queues!r}")
        self.width, self.buffers, self.buffer_bytes = width, buffers, buffer_bytes
        self.rx_base, self.cq_base, self.queues = rx_base, cq_base, queues
        word = data.StructLayout({**dict(payload_layout(width).members.items()),
                                  "meta": rx_meta(queues)})
        qbits = max(1, (queues - 1).bit_length())
        super().__init__({
            "pcie_write": In(stream.Signature(pcie_write_layout(width))),
            "packets": Out(stream.Signature(word)),
            "accept": In(queues, init=(1 << queues) - 1),
            "doorbell": Out(stream.Signature(data.StructLayout({"cq": 1, "queue": qbits,
                                                                "value": 16}))),
            "dropped_queue": In(qbits),
            "dropped": Out(32),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        nb = self.width // 8
        words_per_buffer = self.buffer_bytes // nb
        all_buffers = self.queues * self.buffers
        m.submodules.buffer = buf = Memory(shape=self.width, depth=all_buffers * words_per_buffer,
                                           init=[])
        wr, rd = buf.write_port(), buf.read_port(transparent_for=())

        # The NIC's writes: packet words into the buffers, completion words into one CQE.
        w = self.pcie_write
        m.d.comb += w.ready.eq(1)
        offset = Signal(64)
        m.d.comb += offset.eq(w.payload.address - self.rx_base)
        in_buffers = (w.payload.address >= self.rx_base) & \
            (offset < all_buffers * self.buffer_bytes)
        m.d.comb += [wr.addr.eq(offset >> (nb.bit_length() - 1)), wr.data.eq(w.payload.data),
                     wr.en.eq(w.valid & in_buffers)]
        m.submodules.cq = cq = CqeWindow(width=self.width, base=self.cq_base,
                                         entries=all_buffers)
        m.d.comb += [cq.writes.payload.eq(w.payload), cq.writes.valid.eq(w.valid)]
        complete = cq.complete                      # a whole CQE is in ``cq.compact``

        # Completions wait in a queue (the NIC writes them faster than packets leave only for
        # packets shorter than their completion).
        c = cq.compact
        index_bits = (self.buffers - 1).bit_length()
        pending = Signal(range(all_buffers + 1))
        m.submodules.completions = completions = Memory(
            shape=data.StructLayout({"ok": 1, "queue": 12, "index": index_bits, "context": 24,
                                     "checks": 6, "length": 14}), depth=all_buffers, init=[])
        cwr = completions.write_port()
        crd = completions.read_port(domain="comb")
        c_head = Signal(range(all_buffers))
        c_tail = Signal(range(all_buffers))
        m.d.comb += [cwr.addr.eq(c_tail), cwr.en.eq(complete),
                     cwr.data.ok.eq((c.opcode == CQE_RECV) & (c.error == 0)
                                    & (c.queue < self.queues)),
                     cwr.data.queue.eq(c.queue), cwr.data.index.eq(c.counter[:index_bits]),
                     cwr.data.context.eq(c.context), cwr.data.checks.eq(c.checks),
                     cwr.data.length.eq(c.length), crd.addr.eq(c_head)]
        taken = Signal()
        m.d.sync += pending.eq(pending + complete - taken)
        with m.If(complete):
            m.d.sync += c_tail.eq(c_tail + 1)
        self._deliver(m, rd, crd.data, pending, taken, c_head, words_per_buffer)
        return m

    def _deliver(self, m: Module, rd: Any, entry: Any, pending: Any, taken: Any, c_head: Any,
                 words_per_buffer: int) -> None:
        """The packets out, in completion order; each buffer back to its queue's ring."""
        nb = self.width // 8
        qbits = max(1, (self.queues - 1).bit_length())
        m.submodules.drops = drops = QueueCounters(self.queues)
        m.d.comb += [drops.read_queue.eq(self.dropped_queue), self.dropped.eq(drops.value)]
        producers = Array(Signal(16, init=self.buffers, name=f"producer{q}")
                          for q in range(self.queues))
        consumed = Signal(16)                       # completions taken
        buffer = Signal(range(self.queues * self.buffers))
        word = Signal(range(words_per_buffer + 1))
        left = Signal(15)
        meta = Signal(rx_meta(self.queues))
        queue = meta.queue
        out, d = self.packets, self.doorbell
        wbits = (words_per_buffer - 1).bit_length()
        m.d.comb += rd.addr.eq(Cat(word[:wbits], buffer) if wbits else buffer)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(pending != 0):
                    m.d.comb += taken.eq(1)
                    m.d.sync += [c_head.eq(c_head + 1), consumed.eq(consumed + 1), word.eq(0),
                                 left.eq(entry.length),
                                 buffer.eq(Cat(entry.index, entry.queue[:qbits])
                                           if self.queues > 1 else entry.index),
                                 meta.queue.eq(entry.queue), meta.context.eq(entry.context),
                                 meta.checks.eq(entry.checks), meta.length.eq(entry.length)]
                    with m.If(entry.ok & (entry.length != 0)):
                        m.next = "FIRST"
                    with m.Elif(entry.queue < self.queues):
                        m.next = "RECYCLE"
                    with m.Else():                  # (no such queue: nothing to give back)
                        m.next = "CQ_DOORBELL"
            with m.State("FIRST"):                  # the buffer's first word is read
                m.d.sync += word.eq(1)
                m.next = "SEND"
            with m.State("SEND"):
                last = left <= nb
                m.d.comb += [out.payload.data.eq(rd.data),
                             out.payload.nbytes.eq(Mux(last, left, nb)),
                             out.payload.last.eq(last), out.payload.meta.eq(meta)]
                first = word == 1
                refused = ~out.ready | (first & ~self.accept.bit_select(queue, 1))
                with m.If(refused):                 # no waiting on the accelerator
                    m.d.comb += [drops.bump.eq(1), drops.bump_queue.eq(queue)]
                    with m.If(first):               # not begun: dropped whole
                        m.next = "RECYCLE"
                    with m.Else():                  # begun: ended by an abort word
                        m.next = "ABORT"
                with m.Else():
                    m.d.comb += out.valid.eq(1)
                    with m.If(last):
                        m.next = "RECYCLE"
                    with m.Else():
                        m.d.sync += [word.eq(word + 1), left.eq(left - nb)]
            with m.State("ABORT"):
                m.d.comb += [out.valid.eq(1), out.payload.last.eq(1),
                             out.payload.nbytes.eq(abort_nbytes(self.width)),
                             out.payload.meta.eq(meta)]
                with m.If(out.ready):
                    m.next = "RECYCLE"
            with m.State("RECYCLE"):
                m.d.sync += producers[queue].eq(producers[queue] + 1)
                m.next = "RQ_DOORBELL"
            with m.State("RQ_DOORBELL"):
                m.d.comb += [d.valid.eq(1), d.payload.cq.eq(0), d.payload.queue.eq(queue),
                             d.payload.value.eq(producers[queue])]
                with m.If(d.ready):
                    m.next = "CQ_DOORBELL"
            with m.State("CQ_DOORBELL"):
                m.d.comb += [d.valid.eq(1), d.payload.cq.eq(1), d.payload.value.eq(consumed)]
                with m.If(d.ready):
                    m.next = "IDLE"
