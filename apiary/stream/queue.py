"""A FIFO between two streams, as a component that ``connect`` wires like any other."""

from typing import Any

from amaranth import Module, Shape
from amaranth.hdl import ShapeLike
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["Queue"]


class Queue(wiring.Component):
    """Hold up to ``depth`` transfers of ``shape`` between ``i`` and ``o``, in order.

    A :class:`~amaranth.lib.fifo.SyncFIFO` with stream ports (glasgow's ``Queue`` shape): ``o`` is
    valid from the cycle after a transfer on ``i`` (no fall-through), ``i.ready`` is high while
    there is room; one transfer per cycle each way. ``shape`` is any shape-castable, or a dict,
    which becomes a :class:`~amaranth.lib.data.StructLayout`.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))

    Raises
    ------
    ValueError
        If ``depth`` is not a positive integer.
    """

    def __init__(self, shape: ShapeLike | dict, depth: int = 2) -> None:
        if isinstance(shape, dict):
            shape = data.StructLayout(shape)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"a Queue holds a positive number of transfers, not {depth!r}")
        self._shape = shape
        self._depth = depth
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
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
        return m
