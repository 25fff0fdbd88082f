"""FLD's receive side: the NIC writes packets into FLD's buffers and completions into its
completion window; FLD streams each packet to the accelerator with its metadata, never waiting
on it, and gives the buffers back to the NIC in the order they were posted.

FlexDriver §5 and Table 3: one receive ring, shared by every receive queue (ConnectX's shared,
striding receive queue), left in host memory unmodified: ring position ``i`` always holds buffer
``i mod buffers`` (``buffer_bytes`` at ``rx_base + (i mod buffers) * buffer_bytes`` in the NIC's
view), so recycling a buffer is moving the ring's producer index (``doorbell``: the index FLD
writes to the NIC's receive doorbell). Each buffer holds several packets, each from a stride of
``stride_bytes`` (the completion's ``stride``); the NIC fills the buffers in posting order and
closes each with a filler completion (:data:`~flexdriver.formats.CQE_FILLER`) unless a packet
ends exactly at its last stride. Every completion goes to one window of ``cq_entries`` CQEs at
``cq_base``, naming the packet's receive queue.

Ports: ``pcie_write`` (In stream: ``address`` and ``width // 8`` bytes of ``data``, aligned: the
NIC's DMA writes, split into words), ``packets`` (Out stream: the payload stream,
:func:`~apiary.stream.layout.payload_layout`, with ``meta`` beside every word: the receive
queue, the context ID, the completion's checks and the length), ``accept`` (In, a bit per
queue, all set unless driven: the accelerator takes that queue's packets now), ``doorbell``
(Out stream: ``cq`` 0, ``queue`` 0 and the ring's producer index after each buffer is given
back; then ``cq`` 1 and how many completions FLD has taken, the completion queue's consumer
index), ``dropped_queue`` (In) and ``dropped`` (Out: how many packets of that receive queue
the accelerator did not take; the counts are in a memory,
:class:`~flexdriver.queue_counters.QueueCounters`).

A buffer goes back when its filler completion is taken or when the packet that ends at its
last stride has been delivered (or dropped); a completion with an error (the NIC's
``ERR_LENGTH``) delivers nothing and frees nothing, and a completion for a queue beyond
``queues`` delivers nothing. Completions wait in a queue of ``cq_entries`` (the NIC never has
more outstanding: FLD's consumer index holds it back).

**No backpressure** (FLD §5.5): a packet whose first word finds ``packets`` not ready, or its
queue's ``accept`` bit clear, is dropped whole and counted under its queue; one whose later
word finds ``packets`` not ready is aborted in-band (a last word with the abort ``nbytes``) and
counted too; either way its strides are done with at once, so a slow consumer of one queue
costs the other queues nothing. ``pcie_write`` is always ready. Throughput: one word a cycle
out; a packet costs 3 cycles more (its completion, the first read, the completion doorbell), a
buffer given back one more (its ring doorbell), a filler completion 3 cycles.
"""

from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.stream.integers import power_of_two
from apiary.stream.layout import abort_nbytes, check_width, payload_layout
from .descriptors import CqeWindow, pcie_write_layout
from .formats import CQE_FILLER, CQE_RECV
from .queue_counters import QueueCounters, queue_bits


__all__ = ["RxPath", "rx_meta"]


def rx_meta(queues: int) -> data.StructLayout:
    """What comes with each packet: ``queue`` (the receive queue), ``context``, ``checks``
    (the completion's), ``length`` (bytes)."""
    return data.StructLayout({"queue": max(1, (queues - 1).bit_length()), "context": 24,
                              "checks": 6, "length": 14})


class RxPath(wiring.Component):
    """See the module docstring."""

    def __init__(self, *, width: int, buffers: int, buffer_bytes: int, stride_bytes: int,
                 rx_base: int, cq_base: int, cq_entries: int, queues: int = 1) -> None:
        check_width(width)
        nb = width // 8
        if not (power_of_two(buffers) and buffers >= 2):
            raise ValueError(f"buffers must be a power of two of at least 2, not {buffers!r}")
        if not (power_of_two(stride_bytes) and stride_bytes >= max(64, nb)):
            raise ValueError(f"stride_bytes must be a power of two and a multiple of 64 bytes "
                             f"and of the word ({nb} bytes), not {stride_bytes!r}")
        if not (power_of_two(buffer_bytes) and stride_bytes <= buffer_bytes
                <= 256 * stride_bytes):
            raise ValueError(f"buffer_bytes must be a power of two, a multiple of stride_bytes "
                             f"({stride_bytes}) and at most 256 strides (a compact "
                             f"completion's stride has 8 bits), not {buffer_bytes!r}")
        if not (power_of_two(cq_entries) and cq_entries >= 2):
            raise ValueError(f"cq_entries must be a power of two of at least 2, not "
                             f"{cq_entries!r}")
        if not (power_of_two(queues) and queues <= 4096):
            raise ValueError(f"queues must be a power of two up to 4096, not {queues!r}")
        self.width, self.buffers, self.buffer_bytes = width, buffers, buffer_bytes
        self.stride_bytes, self.cq_entries = stride_bytes, cq_entries
        self.rx_base, self.cq_base, self.queues = rx_base, cq_base, queues
        word = data.StructLayout({**dict(payload_layout(width).members.items()),
                                  "meta": rx_meta(queues)})
        qbits = queue_bits(queues)
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
        words = self.buffers * self.buffer_bytes // nb
        m.submodules.buffer = buf = Memory(shape=self.width, depth=words, init=[])
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
                                         entries=self.cq_entries)
        m.d.comb += [cq.writes.payload.eq(w.payload), cq.writes.valid.eq(w.valid)]
        complete = cq.complete                      # a whole CQE is in ``cq.compact``

        # Completions wait in a queue (the NIC writes them faster than packets leave only for
        # packets shorter than their completion), each with where its packet is and whether it
        # gives its buffer back.
        c = cq.compact
        strides = self.buffer_bytes // self.stride_bytes
        stride_shift = self.stride_bytes.bit_length() - 1
        used = (c.length + self.stride_bytes - 1) >> stride_shift
        recv = c.opcode == CQE_RECV
        pending = Signal(range(self.cq_entries + 1))
        m.submodules.completions = completions = Memory(
            shape=_entry_layout(self.queues, self.buffers, strides), depth=self.cq_entries,
            init=[])
        cwr = completions.write_port()
        crd = completions.read_port(domain="comb")
        c_head = Signal(range(self.cq_entries))
        c_tail = Signal(range(self.cq_entries))
        e = cwr.data
        m.d.comb += [cwr.addr.eq(c_tail), cwr.en.eq(complete),
                     e.deliver.eq(recv & (c.error == 0) & (c.queue < self.queues)
                                  & (c.length != 0)),
                     e.frees.eq((c.opcode == CQE_FILLER)
                                | (recv & (c.stride + used == strides))),
                     e.queue.eq(c.queue), e.buffer.eq(c.counter), e.stride.eq(c.stride),
                     e.context.eq(c.context), e.checks.eq(c.checks), e.length.eq(c.length),
                     crd.addr.eq(c_head)]
        taken = Signal()
        m.d.sync += pending.eq(pending + complete - taken)
        with m.If(complete):
            m.d.sync += c_tail.eq(c_tail + 1)
        self._deliver(m, rd, crd.data, pending, taken, c_head)
        return m

    def _deliver(self, m: Module, rd: Any, entry: Any, pending: Any, taken: Any,
                 c_head: Any) -> None:
        """The packets out, in completion order; each buffer back to the ring when done."""
        nb = self.width // 8
        m.submodules.drops = drops = QueueCounters(self.queues)
        m.d.comb += [drops.read_queue.eq(self.dropped_queue), self.dropped.eq(drops.value)]
        producer = Signal(16, init=self.buffers)    # every buffer posted once at the start
        consumed = Signal(16)                       # completions taken
        address = Signal(range(self.buffers * self.buffer_bytes // nb))
        first = Signal()                            # the packet's first word is out now
        frees = Signal()                            # the packet gives its buffer back
        left = Signal(15)
        meta = Signal(rx_meta(self.queues))
        queue = meta.queue
        out, d = self.packets, self.doorbell
        buffer_shift = (self.buffer_bytes // nb).bit_length() - 1
        stride_shift = (self.stride_bytes // nb).bit_length() - 1
        m.d.comb += rd.addr.eq(address)

        def done() -> None:                         # the completion is dealt with
            with m.If(frees):
                m.d.sync += producer.eq(producer + 1)
                m.next = "RQ_DOORBELL"
            with m.Else():
                m.next = "CQ_DOORBELL"

        with m.FSM():
            with m.State("IDLE"):
                with m.If(pending != 0):
                    m.d.comb += taken.eq(1)
                    m.d.sync += [c_head.eq(c_head + 1), consumed.eq(consumed + 1),
                                 address.eq((entry.buffer << buffer_shift)
                                            | (entry.stride << stride_shift)),
                                 left.eq(entry.length), frees.eq(entry.frees),
                                 meta.queue.eq(entry.queue), meta.context.eq(entry.context),
                                 meta.checks.eq(entry.checks), meta.length.eq(entry.length)]
                    with m.If(entry.deliver):
                        m.next = "FIRST"
                    with m.Elif(entry.frees):
                        m.d.sync += producer.eq(producer + 1)
                        m.next = "RQ_DOORBELL"
                    with m.Else():                  # (an error, or no such queue)
                        m.next = "CQ_DOORBELL"
            with m.State("FIRST"):                  # the packet's first word is read
                m.d.sync += [address.eq(address + 1), first.eq(1)]
                m.next = "SEND"
            with m.State("SEND"):
                last = left <= nb
                m.d.comb += [out.payload.data.eq(rd.data),
                             out.payload.nbytes.eq(Mux(last, left, nb)),
                             out.payload.last.eq(last), out.payload.meta.eq(meta)]
                refused = ~out.ready | (first & ~self.accept.bit_select(queue, 1))
                with m.If(refused):                 # no waiting on the accelerator
                    m.d.comb += [drops.bump.eq(1), drops.bump_queue.eq(queue)]
                    with m.If(first):               # not begun: dropped whole
                        done()
                    with m.Else():                  # begun: ended by an abort word
                        m.next = "ABORT"
                with m.Else():
                    m.d.comb += out.valid.eq(1)
                    with m.If(last):
                        done()
                    with m.Else():
                        m.d.sync += [address.eq(address + 1), left.eq(left - nb), first.eq(0)]
            with m.State("ABORT"):
                m.d.comb += [out.valid.eq(1), out.payload.last.eq(1),
                             out.payload.nbytes.eq(abort_nbytes(self.width)),
                             out.payload.meta.eq(meta)]
                with m.If(out.ready):
                    done()
            with m.State("RQ_DOORBELL"):
                m.d.comb += [d.valid.eq(1), d.payload.cq.eq(0), d.payload.queue.eq(0),
                             d.payload.value.eq(producer)]
                with m.If(d.ready):
                    m.next = "CQ_DOORBELL"
            with m.State("CQ_DOORBELL"):
                m.d.comb += [d.valid.eq(1), d.payload.cq.eq(1), d.payload.value.eq(consumed)]
                with m.If(d.ready):
                    m.next = "IDLE"


def _entry_layout(queues: int, buffers: int, strides: int) -> data.StructLayout:
    """A completion waiting to be dealt with: whether its packet goes out (``deliver``) and
    whether it gives its buffer back (``frees``), the receive queue, the buffer and the first
    stride, the rest of the packet's metadata."""
    return data.StructLayout({"deliver": 1, "frees": 1, "queue": queue_bits(queues),
                              "buffer": (buffers - 1).bit_length(),
                              "stride": max(1, (strides - 1).bit_length()), "context": 24,
                              "checks": 6, "length": 14})
