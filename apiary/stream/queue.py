"""A FIFO between two streams, as a component that ``connect`` wires like any other."""

from typing import Any

from amaranth import Module, Mux, Shape, Signal
from amaranth.hdl import ShapeLike
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["Queue", "register_stream"]


class Queue(wiring.Component):
    """Hold up to ``depth`` transfers of ``shape`` between ``i`` and ``o``, in order.

    A :class:`~amaranth.lib.fifo.SyncFIFO` with stream ports (glasgow's ``Queue`` shape): ``o`` is
    valid from the cycle after a transfer on ``i`` (no fall-through), ``i.ready`` is high while
    there is room (not while the queue is full, even in a cycle that empties it); one transfer per
    cycle each way. ``shape`` is any shape-castable, or a dict, which becomes a
    :class:`~amaranth.lib.data.StructLayout`.

    Storage: up to 2 entries are registers, with ``o.payload`` straight from the head register
    (no read mux; the second entry moves up as the head leaves). On FPGAs that is a LUT per bit
    at most where a memory would be LUT RAM (on ECP5 a 4-bit-wide DPR16X4 takes 6 LUT positions),
    and fields written with constants cost nothing. Deeper queues are a ``SyncFIFO``'s memory.
    The two behave the same, cycle for cycle.

    With ``fall_through`` an empty queue passes its input to its output in the same cycle (a
    transfer taken there is never stored): no cycle of latency, a combinational path from
    ``i`` to ``o`` (``i.ready`` still depends on the queue's state only).

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))

    Raises
    ------
    ValueError
        If ``depth`` is not a positive integer.
    """

    def __init__(self, shape: ShapeLike | dict, depth: int = 2, *,
                 fall_through: bool = False) -> None:
        if isinstance(shape, dict):
            shape = data.StructLayout(shape)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"a Queue holds a positive number of transfers, not {depth!r}")
        self._shape = shape
        self._depth = depth
        self._fall_through = bool(fall_through)
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        if self._depth <= 2:
            return self._registers(m)
        m.submodules.fifo = q = fifo.SyncFIFO(width=Shape.cast(self._shape).width,
                                              depth=self._depth)
        m.d.comb += [
            q.w_en.eq(self.i.valid),
            q.w_data.eq(self.i.payload),
            self.i.ready.eq(q.w_rdy),
            self.o.valid.eq(q.r_rdy),
            self.o.payload.eq(q.r_data),
            q.r_en.eq(self.o.ready),
        ]
        if self._fall_through:
            # Empty, the input is the output: a transfer taken at once is never stored.
            m.d.comb += [
                q.w_en.eq(self.i.valid & (q.r_rdy | ~self.o.ready)),
                self.o.valid.eq(q.r_rdy | self.i.valid),
                self.o.payload.eq(Mux(q.r_rdy, q.r_data, self.i.payload)),
            ]
        return m

    def _registers(self, m: Module) -> Module:
        width = Shape.cast(self._shape).width
        head, second = Signal(width), Signal(width)
        level = Signal(range(self._depth + 1))
        full = level == self._depth
        empty = level == 0
        m.d.comb += [
            self.i.ready.eq(~full),
            self.o.valid.eq(~empty),
            self.o.payload.eq(head),
        ]
        write = self.i.valid & self.i.ready
        read = self.o.valid & self.o.ready
        if self._fall_through:
            # Empty, the input is the output: a transfer taken at once is never stored.
            passing = empty & self.o.ready
            m.d.comb += [
                self.o.valid.eq(~empty | self.i.valid),
                self.o.payload.eq(Mux(empty, self.i.payload, head)),
            ]
            write = write & ~passing
            read = read & ~empty
        m.d.sync += level.eq(level + write - read)
        with m.If(read & (level == 2)):
            m.d.sync += head.eq(second)
        with m.Elif(write & ((level == 0) | read)):
            m.d.sync += head.eq(self.i.payload)
        if self._depth == 2:
            with m.If(write):
                m.d.sync += second.eq(self.i.payload)
        return m


def register_stream(m: Module, name: str, source: Any, enabled: bool = True) -> Any:
    """The stream ``source`` through a two-entry :class:`Queue` in registers (submodule
    ``name`` of ``m``) if ``enabled``, else ``source`` itself. The queue costs a cycle of
    latency and keeps one transfer per cycle; no combinational path crosses it either way (a
    place to cut a long path between two components)."""
    if not enabled:
        return source
    m.submodules[name] = queue = Queue(source.payload.shape(), 2)
    wiring.connect(m, source=source, queue=queue.i)
    return queue.o
