"""A deep FIFO in block RAM that behaves, cycle for cycle, as :class:`~apiary.stream.queue.Queue`
does."""

from typing import Any

from amaranth import Module, Mux, Shape, Signal
from amaranth.hdl import ShapeLike
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .queue import Queue


__all__ = ["BlockQueue", "deep_queue", "BLOCK_QUEUE_DEPTH"]

#: From this depth up :func:`deep_queue` holds its transfers in block RAM: a RAMB18 holds 512
#: entries of up to 36 bits, where LUT RAM takes about a LUT per 21 bits.
BLOCK_QUEUE_DEPTH = 512


class BlockQueue(wiring.Component):
    """Hold up to ``depth`` transfers of ``shape`` between ``i`` and ``o``, in order, in a
    memory read with a clock (block RAM on an FPGA), with the same ports and timing as a
    :class:`~apiary.stream.queue.Queue` of that depth: ``o`` valid from the cycle after a
    transfer on ``i``, ``i.ready`` high while fewer than ``depth`` transfers are held; one
    transfer per cycle each way.

    A ``Queue`` deeper than two is a ``SyncFIFO``, whose memory is read without a clock: LUT
    RAM, a LUT per 64 entries and 3 bits and a read multiplexer, some 1,300 LUTs for 4,096
    entries of 12 bits, where block RAM holds them in one and a half RAMB36. Here the memory
    (``depth`` entries) feeds a head of two registers, which ``o`` shows: a transfer into an
    empty memory with room in the head goes straight to the head; otherwise it is written to
    the memory, and the memory is read a cycle ahead whenever the head and the read under way
    leave room, so that the head never runs dry while the memory holds transfers.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape: ShapeLike | dict, depth: int) -> None:
        if isinstance(shape, dict):
            shape = data.StructLayout(shape)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise ValueError(f"a BlockQueue holds at least 2 transfers, not {depth!r}")
        self._shape, self._depth = shape, depth
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        depth = self._depth
        width = Shape.cast(self._shape).width
        m.submodules.memory = memory = Memory(shape=width, depth=depth, init=[])
        wr, rd = memory.write_port(), memory.read_port(transparent_for=())
        w_ptr, r_ptr = Signal(range(depth)), Signal(range(depth))
        stored = Signal(range(depth + 1))           # transfers in the memory, not yet read
        heads = Signal(range(3))                    # transfers in the head
        head, second = Signal(width), Signal(width)
        arriving = Signal()                         # the read of the last cycle comes now
        level = Signal(range(depth + 1))
        m.d.comb += [self.i.ready.eq(level != depth), self.o.valid.eq(heads != 0),
                     self.o.payload.eq(head)]
        write = self.i.valid & self.i.ready
        take = self.o.valid & self.o.ready
        m.d.sync += level.eq(level + write - take)

        # What stays in the head, then what joins it in order: the arriving read, the input.
        kept = Signal(range(3))
        m.d.comb += kept.eq(heads - take)
        bypass = write & (stored == 0) & (kept + arriving < 2)
        read = (stored != 0) & (kept + arriving < 2)
        m.d.comb += [rd.addr.eq(r_ptr), rd.en.eq(read),
                     wr.addr.eq(w_ptr), wr.data.eq(self.i.payload), wr.en.eq(write & ~bypass)]
        def advance(ptr: Any) -> Any:
            if depth & (depth - 1) == 0:
                return ptr + 1
            return Mux(ptr == depth - 1, 0, ptr + 1)

        with m.If(write & ~bypass):
            m.d.sync += w_ptr.eq(advance(w_ptr))
        with m.If(read):
            m.d.sync += r_ptr.eq(advance(r_ptr))
        m.d.sync += [stored.eq(stored + (write & ~bypass) - read), arriving.eq(read),
                     heads.eq(kept + arriving + bypass)]
        # The head's new contents: what it keeps (moved up if its first left), then the
        # arriving read, then the bypassed input (a read is only made for a place that will be
        # free when it arrives, and an input only bypasses an empty memory, so both fit).
        with m.If(take):
            m.d.sync += head.eq(second)
        place = kept
        for present, value in ((arriving, rd.data), (bypass, self.i.payload)):
            with m.If(present):
                with m.If(place == 0):
                    m.d.sync += head.eq(value)
                with m.Else():
                    m.d.sync += second.eq(value)
            place = place + present
        return m


def deep_queue(shape: ShapeLike | dict, depth: int) -> "Queue | BlockQueue":
    """A :class:`~apiary.stream.queue.Queue` of ``depth`` transfers of ``shape``, or from
    :data:`BLOCK_QUEUE_DEPTH` up a :class:`BlockQueue`: the same ports and timing either way."""
    if depth >= BLOCK_QUEUE_DEPTH:
        return BlockQueue(shape, depth)
    return Queue(shape, depth)
