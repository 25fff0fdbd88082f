"""Merge several message streams into one, a whole message at a time."""

from typing import Any

from amaranth import Module, Signal, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..stream.layout import check_width
from .flit import flit_signature


__all__ = ["MessageMerger"]


class MessageMerger(wiring.Component):
    """Merge ``n`` flit streams into ``o`` without interleaving messages.

    An input that puts a flit on ``o`` keeps ``o`` until its message's ``last`` flit has been
    taken; ``o`` also stays with that input while a presented flit waits for ``o.ready``, so
    ``o`` obeys the stream rules. Between messages the next input is chosen among those with a
    valid flit:

    * round-robin (default): starting after the input that sent the previous message, so under
      saturation every input sends the same number of messages;
    * fixed priority (``priority=True``): the lowest-numbered input first, as Beehive's
      ``beehive_noc_prio_merger`` (input 0 highest); a busy input 0 starves the others.

    Latency: 0 cycles (combinational from the chosen input to ``o``). Throughput: one flit per
    cycle, including from the last flit of one message to the first of the next, from any input.
    Nothing is dropped.

    Parameters
    ----------
    width : int
        Flit width in bits.
    n : int
        Number of inputs, at least 1.
    priority : bool
        Fixed priority instead of round-robin.

    Members
    -------
    i : In(flit_signature(width)).array(n)
        Message streams to merge.
    o : Out(flit_signature(width))
        The merged messages.

    Raises
    ------
    ValueError
        If the width is not supported or ``n`` is not a positive integer.
    """

    def __init__(self, width: int, n: int, *, priority: bool = False) -> None:
        self._width = check_width(width)
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"MessageMerger needs a positive number of inputs, not {n!r}.")
        self._n = n
        self._priority = bool(priority)
        super().__init__({
            "i": In(flit_signature(width)).array(n),
            "o": Out(flit_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n = self._n
        valid = [port.valid for port in self.i]

        start = Signal(range(n), name="start")      # the input with the highest priority now
        grant = Signal(range(n), name="grant")      # the input picked if `o` is free
        with m.Switch(start):
            for s in range(n if not self._priority else 1):
                with m.Case(s):
                    # Later assignments win, so the first valid input from `s` on is granted.
                    for k in reversed([(s + off) % n for off in range(n)]):
                        with m.If(valid[k]):
                            m.d.comb += grant.eq(k)

        locked = Signal()                           # `o` belongs to `owner`
        owner = Signal(range(n), name="owner")
        current = Signal(range(n), name="current")
        m.d.comb += current.eq(Mux(locked, owner, grant))

        with m.Switch(current):
            for k, port in enumerate(self.i):
                with m.Case(k):
                    m.d.comb += [
                        self.o.valid.eq(port.valid),
                        self.o.payload.eq(port.payload),
                        port.ready.eq(self.o.ready),
                    ]

        with m.If(self.o.valid):
            done = self.o.ready & self.o.payload.last
            m.d.sync += [locked.eq(~done), owner.eq(current)]
            if not self._priority:
                with m.If(done):
                    m.d.sync += start.eq(Mux(current == n - 1, 0, current + 1))
        return m
