"""Hold a message's first flits, let the owner judge them, then pass (rewritten) or sink it."""

from typing import Any

from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from ..stream.layout import check_width
from .flit import flit_signature


__all__ = ["MessageGate", "Verdict"]


class Verdict(enum.Enum, shape=2):
    WAIT = 0    # take nothing this cycle
    PASS = 1    # send the (rewritten) head, then the rest of the message
    DROP = 2    # discard the whole message


class MessageGate(wiring.Component):
    """Judge each message on ``i`` by its first flits (its *head*) and pass it to ``o``, with the
    head rewritten, or sink it whole. A message is never cut: it leaves complete or not at all.

    The owner says how many head flits it needs (``need``, from ``first``, the message's flit 0,
    shown as soon as it is on ``i``) and gives a :class:`Verdict` while ``decide`` is high: in the
    cycle the head's last flit is on ``i`` (``head`` holds flits ``0 .. need - 1``, flit *j* in bits
    ``j * width ..``, the last straight from ``i``), or the message's ``last`` flit if it ends
    sooner (``short``). ``accept`` is high in the cycle the verdict takes effect (the owner's
    side effects go there): when the head's last flit is taken from ``i``. ``PASS`` sends
    ``rewritten`` instead of ``head``.

    Latency: a one-flit head passes combinationally (0 cycles) when ``o`` is ready; a head of
    *n* > 1 flits is stored, then sent from the gate: its first flit leaves 1 cycle after the
    head's last arrived (*n* cycles after the message's first), and ``i`` waits during those *n*
    cycles. After the head, flits pass combinationally, one per cycle. Once offered on ``o``, a
    flit stays until taken (the verdict and the rewrite are fixed at ``accept``).

    With ``max_head = 1`` a head that ``o`` does not take at once keeps its verdict from
    ``accept`` on and stays on ``i`` until ``o`` takes it: the gate stores only the bits the owner
    may rewrite (``rewrites``, a mask of the head flit, and ``last``); the rest of the flit
    leaves straight from ``i``, which holds it (a sender that broke the stream rules there
    could change only those bits, never the judged ones). At 512 bits a monitor's gate on the
    tile's side so stores 222 of 513 bits, and its gate on the NoC's side 49.

    Parameters
    ----------
    width : int
        Flit width.
    max_head : int
        Largest ``need`` the owner will ask for.
    rewrites : int or None
        With ``max_head = 1``, the bits of the head flit that ``rewritten`` may change (the
        others are passed from ``i`` whatever ``rewritten`` says); ``None``: all of them.
    """

    def __init__(self, width: int, max_head: int, rewrites: int | None = None) -> None:
        self._width = check_width(width)
        if not isinstance(max_head, int) or max_head < 1:
            raise ValueError(f"max_head must be a positive number of flits, not {max_head!r}")
        if rewrites is not None and not (isinstance(rewrites, int)
                                         and 0 <= rewrites < 1 << width):
            raise ValueError(f"rewrites must be a mask of {width} bits, not {rewrites!r}")
        self._max = max_head
        self._rewrites = (1 << width) - 1 if rewrites is None else rewrites
        super().__init__({
            "i": In(flit_signature(width)),
            "o": Out(flit_signature(width)),
            "first": Out(width),
            "need": In(range(1, max_head + 1), init=1),
            "head": Out(width * max_head),
            "decide": Out(1),
            "short": Out(1),
            "verdict": In(Verdict),
            "rewritten": In(width * max_head),
            "accept": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        if self._max == 1:
            self._one_flit_head(m)
            return m
        w, n = self._width, self._max
        hold = [Signal(w, name=f"hold{j}") for j in range(n)]
        count = Signal(range(n + 1))            # head flits stored so far
        size = Signal(range(n + 1))             # head flits to replay
        ended = Signal()                        # the head ended the message
        replay = Signal(range(n + 1))
        i, o = self.i, self.o
        for j in range(n):
            m.d.comb += self.head[j * w:(j + 1) * w].eq(Mux(count == j, i.payload.data, hold[j]))
        m.d.comb += self.first.eq(Mux(count == 0, i.payload.data, hold[0]))

        with m.FSM(name="gate"):
            with m.State("HEAD"):
                at_end = i.payload.last & (count + 1 < self.need)
                m.d.comb += [
                    self.decide.eq(i.valid & ((count + 1 == self.need) | at_end)),
                    self.short.eq(at_end),
                ]
                with m.If(i.valid & ~self.decide):
                    m.d.comb += i.ready.eq(1)
                    with m.Switch(count):
                        for j in range(n):
                            with m.Case(j):
                                m.d.sync += hold[j].eq(i.payload.data)
                    m.d.sync += count.eq(count + 1)
                with m.If(self.decide):
                    with m.Switch(self.verdict):
                        with m.Case(Verdict.PASS):
                            # A one-flit head goes straight through when `o` takes it; if
                            # `o` waits, the head is stored and sent from the gate, so what is
                            # offered on `o` never changes before it is taken.
                            with m.If(count == 0):      # (valid never depends on ready)
                                m.d.comb += [
                                    o.valid.eq(1),
                                    o.payload.data.eq(self.rewritten[:w]),
                                    o.payload.last.eq(i.payload.last),
                                ]
                            with m.If((count == 0) & o.ready):
                                m.d.comb += [i.ready.eq(1), self.accept.eq(1)]
                                with m.If(~i.payload.last):
                                    m.next = "BODY"
                            with m.Else():
                                m.d.comb += [i.ready.eq(1), self.accept.eq(1)]
                                m.d.sync += [
                                    size.eq(count + 1), ended.eq(i.payload.last), replay.eq(0),
                                    count.eq(0),
                                ]
                                for j in range(n):
                                    m.d.sync += hold[j].eq(self.rewritten[j * w:(j + 1) * w])
                                m.next = "REPLAY"
                        with m.Case(Verdict.DROP):
                            m.d.comb += [i.ready.eq(1), self.accept.eq(1)]
                            m.d.sync += count.eq(0)
                            with m.If(~i.payload.last):
                                m.next = "SINK"
            with m.State("REPLAY"):
                final = replay + 1 == size
                with m.Switch(replay):
                    for j in range(n):
                        with m.Case(j):
                            m.d.comb += o.payload.data.eq(hold[j])
                m.d.comb += [o.valid.eq(1), o.payload.last.eq(final & ended)]
                with m.If(o.ready):
                    m.d.sync += replay.eq(replay + 1)
                    with m.If(final):
                        with m.If(ended):
                            m.next = "HEAD"
                        with m.Else():
                            m.next = "BODY"
            self._body_and_sink(m)
        return m

    def _body_and_sink(self, m: Module) -> None:
        """The FSM states after a head: ``BODY`` passes the rest of the message, ``SINK``
        discards it; both go back to ``HEAD`` after its ``last`` flit."""
        i, o = self.i, self.o
        with m.State("BODY"):
            m.d.comb += [o.valid.eq(i.valid), o.payload.eq(i.payload), i.ready.eq(o.ready)]
            with m.If(i.valid & o.ready & i.payload.last):
                m.next = "HEAD"
        with m.State("SINK"):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid & i.payload.last):
                m.next = "HEAD"

    def _one_flit_head(self, m: Module) -> None:
        """``max_head = 1``: judged as it arrives, left on ``i`` until ``o`` takes it."""
        i, o, mask = self.i, self.o, self._rewrites
        spans = _runs(mask, self._width)
        held = Signal(max(1, sum(hi - lo for lo, hi in spans)))     # the rewritable bits
        held_last = Signal()

        def offer(rewritten: Any) -> list:
            """``o``'s rewritable bits from ``rewritten`` (the rest are always ``i``'s)."""
            data, at = [], 0
            for lo, hi in spans:
                data.append(o.payload.data[lo:hi].eq(rewritten(lo, hi, at)))
                at += hi - lo
            return data

        # o's data, valid or not, is i's but where a head is rewritten: no mux for the rest.
        m.d.comb += [self.first.eq(i.payload.data), self.head.eq(i.payload.data),
                     o.payload.eq(i.payload)]
        with m.FSM(name="gate"):
            with m.State("HEAD"):
                m.d.comb += self.decide.eq(i.valid)
                with m.If(self.decide):
                    with m.Switch(self.verdict):
                        with m.Case(Verdict.PASS):
                            m.d.comb += [o.valid.eq(1), self.accept.eq(1), i.ready.eq(o.ready),
                                         *offer(lambda lo, hi, at: self.rewritten[lo:hi])]
                            with m.If(o.ready):
                                with m.If(~i.payload.last):
                                    m.next = "BODY"
                            with m.Else():
                                m.d.sync += [held.eq(Cat(*(self.rewritten[lo:hi]
                                                           for lo, hi in spans))),
                                             held_last.eq(i.payload.last)]
                                m.next = "HELD"
                        with m.Case(Verdict.DROP):
                            m.d.comb += [i.ready.eq(1), self.accept.eq(1)]
                            with m.If(~i.payload.last):
                                m.next = "SINK"
            with m.State("HELD"):
                m.d.comb += [o.valid.eq(1), o.payload.last.eq(held_last), i.ready.eq(o.ready),
                             *offer(lambda lo, hi, at: held[at:at + hi - lo])]
                with m.If(o.ready):
                    m.next = "HEAD"
                    with m.If(~held_last):
                        m.next = "BODY"
            self._body_and_sink(m)


def _runs(mask: int, width: int) -> list[tuple[int, int]]:
    """The runs of set bits of ``mask`` (``width`` bits) as ``(lo, hi)`` slices."""
    runs, lo = [], None
    for bit in range(width + 1):
        on = bit < width and mask >> bit & 1
        if on and lo is None:
            lo = bit
        elif not on and lo is not None:
            runs.append((lo, bit))
            lo = None
    return runs
