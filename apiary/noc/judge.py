"""Pass or drop each message on its first flit, storing nothing: the cheap
:class:`~apiary.noc.gate.MessageGate` for owners whose verdict holds still."""

from typing import Any

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..stream.layout import check_width
from .flit import flit_signature
from .gate import Verdict


__all__ = ["FirstFlitJudge"]


class FirstFlitJudge(wiring.Component):
    """Judge each message on ``i`` by its first flit (``head``, straight from ``i``) and pass it
    to ``o`` unchanged or sink it whole.

    While ``decide`` is high (a first flit is on ``i``) the owner gives a
    :class:`~apiary.noc.gate.Verdict`; ``accept`` is high in the cycle the first flit is taken
    (passed to ``o`` or sunk). Unlike :class:`~apiary.noc.gate.MessageGate`, nothing is stored:
    a ``PASS`` first flit waits on ``i`` for ``o``, so **the owner must not change a ``PASS``
    verdict before ``accept``** (a verdict from the flit itself, or one that waits for tokens
    that only grow, holds still). Same members as the gate's (``need`` and ``rewritten``
    unused, for a drop-in replacement where the head is one flit).

    Latency: 0 cycles (combinational). Throughput: one flit per cycle. Cost: two flip-flops.
    """

    def __init__(self, width: int) -> None:
        self._width = check_width(width)
        super().__init__({
            "i": In(flit_signature(width)),
            "o": Out(flit_signature(width)),
            "head": Out(width),
            "decide": Out(1),
            "verdict": In(Verdict),
            "accept": Out(1),
            "need": In(range(1, 2), init=1),
            "rewritten": In(width),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        i, o = self.i, self.o
        at_first = Signal(init=1)
        sinking = Signal()
        m.d.comb += [self.head.eq(i.payload.data), self.decide.eq(i.valid & at_first),
                     o.payload.eq(i.payload)]
        with m.If(at_first):
            with m.If(self.verdict == Verdict.PASS):
                m.d.comb += [o.valid.eq(i.valid), i.ready.eq(o.ready)]
            with m.Elif(self.verdict == Verdict.DROP):
                m.d.comb += i.ready.eq(1)
            m.d.comb += self.accept.eq(i.valid & i.ready)
        with m.Else():
            m.d.comb += [o.valid.eq(i.valid & ~sinking), i.ready.eq(o.ready | sinking)]
        with m.If(i.valid & i.ready):
            m.d.sync += at_first.eq(i.payload.last)
            with m.If(at_first):
                m.d.sync += sinking.eq(self.verdict == Verdict.DROP)
        return m
