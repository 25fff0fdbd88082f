"""Demultiplex a tile's incoming messages by their destination sub-port (``dst_fbits``) or by
their type (``msg_type``)."""

from collections.abc import Iterable, Sequence
from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..stream.layout import check_width
from .flit import flit_signature
from .header import ROUTING_BITS, field_location, routing_header


__all__ = ["FbitsSplitter", "TypeSplitter"]


class FbitsSplitter(wiring.Component):
    """Send each message to the output whose ``fbits`` value matches its header's ``dst_fbits``.

    The output is chosen on a message's first flit (from the routing word, the top
    :data:`~apiary.noc.header.ROUTING_BITS` bits) and kept until its ``last`` flit, whatever
    later flits hold. Like Beehive's ``beehive_noc_fbits_splitter``, but with any number of
    outputs. A busy output stalls the input (no buffering).

    Latency: 0 cycles (cut-through, combinational from ``i`` to ``o``; nothing registered on the
    data path). Throughput: one flit per cycle.

    Drops: a message whose ``dst_fbits`` matches no output is taken from ``i`` at one flit per
    cycle and discarded whole; ``dropped`` counts such messages (on their first flit).

    Parameters
    ----------
    width : int
        Flit width in bits.
    fbits : list of int
        The ``dst_fbits`` value of each output, e.g. ``[Fbits.LOCAL0, Fbits.LOCAL1]``.

    Members
    -------
    i : In(flit_signature(width))
        Messages addressed to this tile.
    o : Out(flit_signature(width)).array(len(fbits))
        ``o[k]`` carries the messages with ``dst_fbits == fbits[k]``.
    dropped : Out(32)
        Messages with an unknown ``dst_fbits``.

    Raises
    ------
    ValueError
        If the width is not supported, ``fbits`` is empty, or a value repeats or does not fit in
        the ``dst_fbits`` field.
    """

    def __init__(self, width: int, fbits: Sequence[int]) -> None:
        self._width = check_width(width)
        limit = 1 << routing_header().width("dst_fbits")
        fbits = list(fbits)
        if not fbits:
            raise ValueError("FbitsSplitter needs at least one fbits value to route to.")
        for value in fbits:
            if not isinstance(value, int) or not 0 <= value < limit:
                raise ValueError(f"FbitsSplitter: fbits value {value!r} is not an integer "
                                 f"from 0 to {limit - 1}.")
        if len(set(fbits)) != len(fbits):
            raise ValueError(f"FbitsSplitter: fbits {fbits} names an output twice.")
        self._fbits = [int(v) for v in fbits]
        super().__init__({
            "i": In(flit_signature(width)),
            "o": Out(flit_signature(width)).array(len(fbits)),
            "dropped": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n = len(self._fbits)
        i = self.i
        routing = data.View(routing_header().layout(),
                            i.payload.data[self._width - ROUTING_BITS:])

        # The choice for the flit on `i`: decoded on a message's first flit, held after it.
        first = Signal(init=1)          # the next flit on `i` starts a message
        held = Signal(range(n + 1))     # the choice for the rest of the current message
        choice = Signal(range(n + 1))   # n means "drop"
        with m.If(first):
            m.d.comb += choice.eq(n)
            for k, value in enumerate(self._fbits):
                with m.If(routing.dst_fbits == value):
                    m.d.comb += choice.eq(k)
        with m.Else():
            m.d.comb += choice.eq(held)

        for k, out in enumerate(self.o):
            m.d.comb += [
                out.payload.eq(i.payload),
                out.valid.eq(i.valid & (choice == k)),
            ]
        with m.Switch(choice):
            for k, out in enumerate(self.o):
                with m.Case(k):
                    m.d.comb += i.ready.eq(out.ready)
            with m.Default():           # the only place messages are dropped
                m.d.comb += i.ready.eq(1)

        with m.If(i.valid & i.ready):
            m.d.sync += [first.eq(i.payload.last), held.eq(choice)]
            with m.If(first & (choice == n)):
                m.d.sync += self.dropped.eq(self.dropped + 1)
        return m


class TypeSplitter(wiring.Component):
    """Send each message to the output of the group its ``msg_type`` belongs to, and a message of
    any other type to the last output: a tile sub-port that carries messages of different
    metadata layouts (an untrusted tile's LOCAL0 gets its monitor's ``CAP_RESULT`` and
    ``CAP_NOTIFY`` besides its own traffic) feeds one receiver per layout this way.

    The type is read on a message's first flit and the choice kept until its ``last`` flit.
    Latency 0 (combinational), one flit per cycle; a busy output stalls the input. Drops nothing.

    Parameters
    ----------
    width : int
        Flit width in bits.
    groups : list of lists of int
        The message types of each output but the last (no type in two groups).

    Members
    -------
    i : In(flit_signature(width))
    o : Out(flit_signature(width)).array(len(groups) + 1)
        ``o[k]`` carries the messages whose type is in ``groups[k]``; ``o[-1]`` the others.
    """

    def __init__(self, width: int, groups: Sequence[Iterable[int]]) -> None:
        self._width = check_width(width)
        self._groups = [sorted({int(t) for t in group}) for group in groups]
        seen = [t for group in self._groups for t in group]
        if not self._groups or any(not g for g in self._groups):
            raise ValueError("TypeSplitter needs at least one group, and no empty group.")
        if len(set(seen)) != len(seen) or not all(0 <= t < 256 for t in seen):
            raise ValueError(f"TypeSplitter: groups {self._groups} repeat a type or name one "
                             f"outside 0..255.")
        super().__init__({
            "i": In(flit_signature(width)),
            "o": Out(flit_signature(width)).array(len(self._groups) + 1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n = len(self._groups)
        i = self.i
        flit, lsb = field_location(self._width, "msg_type")
        assert flit == 0
        msg_type = i.payload.data[lsb:lsb + 8]
        first = Signal(init=1)
        held = Signal(range(n + 1))
        now = Signal(range(n + 1))
        m.d.comb += now.eq(n)
        for k in reversed(range(n)):
            with m.If(Cat(*(msg_type == t for t in self._groups[k])).any()):
                m.d.comb += now.eq(k)
        choice = Mux(first, now, held)
        for k, out in enumerate(self.o):
            m.d.comb += [out.payload.eq(i.payload), out.valid.eq(i.valid & (choice == k))]
        with m.Switch(choice):
            for k, out in enumerate(self.o):
                with m.Case(k):
                    m.d.comb += i.ready.eq(out.ready)
        with m.If(i.valid & i.ready):
            m.d.sync += [first.eq(i.payload.last), held.eq(choice)]
        return m
