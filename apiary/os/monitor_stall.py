"""A monitor's watches on a tile that stops (:mod:`apiary.os.monitor`): one that stops reading,
one that stops part way through a message it sends, which is then ended on the NoC."""

from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out, Component

from ..noc.flit import flit_signature
from ..noc.header import Fbits
from .monitor_messages import REQUEST, request_payload
from .uapi import FaultKind, KernelMsgType as K


__all__ = ["StallWatch", "MessageCut", "check_stall_limit"]


def check_stall_limit(limit: Any, what: str, *, none_ok: bool = False) -> Any:
    """``limit`` if it is a number of cycles a watch can count (1 to 2**32 - 1), or ``None``
    with ``none_ok``; else a ``ValueError`` naming ``what``."""
    if none_ok and limit is None:
        return limit
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit < 1 << 32:
        raise ValueError(f"{what} must be a number of cycles from 1 to 2**32 - 1"
                         f"{', or None' if none_ok else ''}, not {limit!r}")
    return limit


class StallWatch(Component):
    """Quarantine a tile that leaves a message it was offered untaken for ``limit`` cycles.

    A cycle counts when ``offered`` is high (a flit waits at the tile's input) and ``blocked``
    is low (the tile is not itself waiting to send: a tile held up by the NoC or its rate limit
    is not hung). Any other cycle starts the count again, and nothing counts while
    ``quarantined``. After ``limit`` counted cycles in a row the watch offers a ``FAULT`` of
    ``kind`` (:attr:`~apiary.os.uapi.FaultKind.STALLED` by default; the monitor's watch on its
    tile's sends reports ``UNFINISHED``) to the error manager on ``to_kernel``, holds
    it until taken, and counts again from 0; ``fault`` is high in the cycle it is taken (the
    monitor then quarantines the tile, which drains what waited for it).

    Members
    -------
    offered, blocked, quarantined : In(1)
    fault : Out(1)
    to_kernel : Out(stream.Signature(REQUEST))
    """

    def __init__(self, limit: int, errors: tuple[int, int],
                 kind: FaultKind = FaultKind.STALLED) -> None:
        self._limit = check_stall_limit(limit, "a stall limit")
        self._errors = (*errors, Fbits.LOCAL0)
        self._kind = FaultKind(kind)
        super().__init__({
            "offered": In(1), "blocked": In(1), "quarantined": In(1),
            "fault": Out(1),
            "to_kernel": Out(stream.Signature(REQUEST)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        waited = Signal(range(self._limit + 1))
        stalled = Signal()
        m.d.comb += stalled.eq(waited == self._limit)
        # Offered until taken, whatever happens meanwhile (a stream's valid holds).
        m.d.comb += [*request_payload(self.to_kernel, K.FAULT, self._errors, op=self._kind),
                     self.to_kernel.valid.eq(stalled),
                     self.fault.eq(stalled & self.to_kernel.ready)]
        restart = Mux(stalled, self.to_kernel.ready,
                      self.quarantined | ~self.offered | self.blocked)
        with m.If(restart):
            m.d.sync += waited.eq(0)
        with m.Elif(~stalled):
            m.d.sync += waited.eq(waited + 1)
        return m


class MessageCut(Component):
    """Pass flits from ``i`` to ``o`` unchanged, and end a message left part way on request.

    ``mid`` is high while a message is part way out (a flit of it without ``last`` has left on
    ``o``, its ``last`` not yet). ``cut`` in such a cycle, with nothing offered on ``i``, ends
    the message on ``o`` with one flit marked ``last`` (so that every router on its path is free
    again; its data is whatever ``i`` shows, which its source could have sent anyway: no
    multiplexer on the data), then takes and discards the rest of that message from ``i``, up
    to and including its ``last`` flit, unless ``flush`` (the source was reset: no rest will
    come) ends that first. ``cut`` at any other time is ignored. Latency 0 (``o`` is ``i``
    otherwise), one flit per cycle.

    Members
    -------
    i : In(flit_signature(width))
    o : Out(flit_signature(width))
    cut, flush : In(1)
    mid : Out(1)
    """

    def __init__(self, width: int) -> None:
        super().__init__({
            "i": In(flit_signature(width)), "o": Out(flit_signature(width)),
            "cut": In(1), "flush": In(1), "mid": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        ending = Signal()
        m.d.comb += [
            self.o.payload.data.eq(self.i.payload.data),
            self.o.payload.last.eq(self.i.payload.last | ending),
        ]
        with m.FSM(name="cut"):
            with m.State("PASS"):
                m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]
                with m.If(self.o.valid & self.o.ready):
                    m.d.sync += self.mid.eq(~self.o.payload.last)
                with m.If(self.cut & self.mid & ~self.i.valid):
                    m.next = "END"
            with m.State("END"):
                m.d.comb += [self.o.valid.eq(1), ending.eq(1)]
                with m.If(self.o.ready):
                    m.d.sync += self.mid.eq(0)
                    m.next = "SWALLOW"
            with m.State("SWALLOW"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.flush | (self.i.valid & self.i.payload.last)):
                    m.next = "PASS"
        return m
