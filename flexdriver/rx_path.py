"""FLD's receive side: the NIC writes packets into FLD's buffers and completions into its
completion window; FLD streams each packet to the accelerator with its metadata, never waiting
on it, and gives the buffers back to the NIC in the order they were posted.

FlexDriver §5 leaves the receive ring in host memory, unmodified: buffer ``i`` of ``buffers``
(each ``buffer_bytes``, at ``rx_base + i * buffer_bytes`` in the NIC's view) is always posted
at ring position ``i`` modulo ``buffers``, so recycling a buffer is moving the producer index
(``doorbell``, the index FLD writes to the NIC's receive doorbell). The NIC fills buffers in
that order and completes them in order, so a completion's buffer is the next one.

Ports: ``pcie_write`` (In stream: ``address`` and ``width // 8`` bytes of ``data``, aligned: the
NIC's DMA writes, split into words), ``packets`` (Out stream: the payload stream,
:func:`~apiary.stream.layout.payload_layout`, with ``meta`` beside every word: the receive
queue, the context ID, the completion's checks and the length), ``doorbell`` (Out stream: the
producer index after each buffer is given back; less ``buffers``, it is also how many
completions FLD has taken, the NIC's completion queue doorbell), ``dropped`` (Out: packets
the accelerator was not ready for, by receive queue).

**No backpressure** (FLD §5.5): a packet whose first word finds ``packets`` not ready is
dropped whole and counted under its queue; one whose later word does is aborted in-band (a last
word with the abort ``nbytes``) and counted too; either way its buffer goes back at once.
``pcie_write`` is always ready. A completion with an error is not delivered (its buffer goes
back). Throughput: one word a cycle out; a packet costs 2 cycles more (its completion and the
first read).
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.integers import power_of_two
from apiary.stream.layout import abort_nbytes, check_width, payload_layout
from .descriptors import CqeWindow, pcie_write_layout
from .formats import CQE_RECV


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
        self.width, self.buffers, self.buffer_bytes = width, buffers, buffer_bytes
        self.rx_base, self.cq_base, self.queues = rx_base, cq_base, queues
        word = data.StructLayout({**dict(payload_layout(width).members.items()),
                                  "meta": rx_meta(queues)})
        super().__init__({
            "pcie_write": In(stream.Signature(pcie_write_layout(width))),
            "packets": Out(stream.Signature(word)),
            "doorbell": Out(stream.Signature(16)),
            "dropped": Out(data.ArrayLayout(32, queues)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        nb = self.width // 8
        words_per_buffer = self.buffer_bytes // nb
        depth = self.buffers * words_per_buffer
        m.submodules.buffer = buf = Memory(shape=self.width, depth=depth, init=[])
        wr, rd = buf.write_port(), buf.read_port(transparent_for=())

        # The NIC's writes: packet words into the buffers, completion words into one CQE.
        w = self.pcie_write
        m.d.comb += w.ready.eq(1)
        offset = Signal(64)
        m.d.comb += offset.eq(w.payload.address - self.rx_base)
        in_buffers = (w.payload.address >= self.rx_base) & \
            (offset < self.buffers * self.buffer_bytes)
        m.d.comb += [wr.addr.eq(offset >> (nb.bit_length() - 1)), wr.data.eq(w.payload.data),
                     wr.en.eq(w.valid & in_buffers)]
        m.submodules.cq = cq = CqeWindow(width=self.width, base=self.cq_base,
                                         entries=self.buffers)
        m.d.comb += [cq.writes.payload.eq(w.payload), cq.writes.valid.eq(w.valid)]
        complete = cq.complete                      # a whole CQE is in ``cq.compact``

        # Completions wait in a small queue (the NIC writes them faster than packets leave only
        # for packets shorter than their completion).
        c = cq.compact
        pending = Signal(range(self.buffers + 1))
        m.submodules.completions = completions = Memory(
            shape=data.StructLayout({"ok": 1, "queue": 12, "context": 24, "checks": 6,
                                     "length": 14}), depth=self.buffers, init=[])
        cwr = completions.write_port()
        crd = completions.read_port(domain="comb")
        c_head = Signal(range(self.buffers))
        c_tail = Signal(range(self.buffers))
        m.d.comb += [cwr.addr.eq(c_tail), cwr.en.eq(complete),
                     cwr.data.ok.eq((c.opcode == CQE_RECV) & (c.error == 0)),
                     cwr.data.queue.eq(c.queue), cwr.data.context.eq(c.context),
                     cwr.data.checks.eq(c.checks), cwr.data.length.eq(c.length),
                     crd.addr.eq(c_head)]
        taken = Signal()
        m.d.sync += pending.eq(pending + complete - taken)
        with m.If(complete):
            m.d.sync += c_tail.eq(c_tail + 1)

        # The packets out, one at a time, buffer after buffer.
        next_buffer = Signal(range(self.buffers))
        producer = Signal(16, init=self.buffers)
        word = Signal(range(words_per_buffer + 1))
        left = Signal(15)
        meta = Signal(rx_meta(self.queues))
        out = self.packets
        m.d.comb += rd.addr.eq(next_buffer * words_per_buffer + word)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(pending != 0):
                    m.d.comb += taken.eq(1)
                    m.d.sync += [c_head.eq(c_head + 1), word.eq(0),
                                 left.eq(crd.data.length),
                                 meta.queue.eq(crd.data.queue), meta.context.eq(crd.data.context),
                                 meta.checks.eq(crd.data.checks), meta.length.eq(crd.data.length)]
                    with m.If(crd.data.ok & (crd.data.length != 0)):
                        m.next = "FIRST"
                    with m.Else():
                        m.next = "RECYCLE"
            with m.State("FIRST"):                          # the buffer's first word is read
                m.d.sync += word.eq(1)
                m.next = "SEND"
            with m.State("SEND"):
                last = left <= nb
                m.d.comb += [out.payload.data.eq(rd.data),
                             out.payload.nbytes.eq(Mux(last, left, nb)),
                             out.payload.last.eq(last), out.payload.meta.eq(meta)]
                with m.If(~out.ready):                      # no waiting on the accelerator
                    m.d.sync += self.dropped[meta.queue].eq(self.dropped[meta.queue] + 1)
                    with m.If(word == 1):                   # not begun: dropped whole
                        m.next = "RECYCLE"
                    with m.Else():                          # begun: ended by an abort word
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
                m.d.sync += [next_buffer.eq(next_buffer + 1), producer.eq(producer + 1)]
                m.next = "DOORBELL"
            with m.State("DOORBELL"):
                m.d.comb += [self.doorbell.valid.eq(1), self.doorbell.payload.eq(producer)]
                with m.If(self.doorbell.ready):
                    m.next = "IDLE"
        return m
