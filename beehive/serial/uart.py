"""An 8N1 UART: a receiver and a transmitter of byte streams, for boards whose only link to a
host is a serial line (see :mod:`beehive.serial.slip`).

Both count time in clock cycles per bit, ``divisor`` (at least 4): ``round(clock_hz / baud)``,
e.g. 104 for 115200 baud at 12 MHz (0.2 % fast, well inside what 8N1 tolerates). A frame on the
line is a start bit (0), eight data bits, least significant first, and a stop bit (1); the idle
line is high.
"""

from amaranth import Module, Signal, Cat
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["UartRx", "UartTx", "check_divisor", "baud_divisor"]


def check_divisor(divisor, who):
    if isinstance(divisor, bool) or not isinstance(divisor, int) or divisor < 4:
        raise ValueError(f"{who}: divisor (clock cycles per bit) must be an integer of at least "
                         f"4, not {divisor!r}")
    return divisor


def baud_divisor(clock_hz, baud, who="UART", tolerance=0.02):
    """Clock cycles per bit for ``baud`` at ``clock_hz``: ``round(clock_hz / baud)``.

    Raises :class:`ValueError` if that is under 4 cycles, or if the rate it gives is more than
    ``tolerance`` (2 %) off ``baud``: the far end samples its last bits too late or too early.
    """
    for value, name in ((clock_hz, "clock_hz"), (baud, "baud")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{who}: {name} must be a positive number, not {value!r}")
    divisor = round(clock_hz / baud)
    if divisor < 4:
        raise ValueError(f"{who}: {baud} baud at {clock_hz} Hz is {clock_hz / baud:.2f} clock "
                         f"cycles per bit; the UART needs at least 4")
    error = (clock_hz / divisor - baud) / baud
    if abs(error) > tolerance:
        raise ValueError(f"{who}: {baud} baud at {clock_hz} Hz: the nearest divisor, {divisor} "
                         f"cycles per bit, gives {clock_hz / divisor:.0f} baud ({error:+.1%}); "
                         f"choose a baud rate closer to a divisor of the clock")
    return divisor


class UartRx(wiring.Component):
    """Receive 8N1 bytes from the line ``rx`` and put them on the byte stream ``o``.

    ``rx`` goes through a two-flop synchroniser (it may come straight from a pin). A start bit
    is a falling edge seen while idle; the line is then sampled in the middle of each bit,
    ``divisor // 2`` cycles after the edge is seen and every ``divisor`` cycles after that. A
    start bit that is high again at its middle is a glitch and is ignored. A stop bit that reads
    0 is a **framing error**: the byte is dropped, ``framing_errors`` counts it, and the receiver
    waits for the line to go high (the end of a break) before it looks for the next start bit.
    Otherwise the receiver is ready for the next start bit from the middle of the stop bit, so
    back-to-back bytes are received, and a sender whose rate is off by a few percent still is.

    ``o`` is never back-pressured: each byte is held on ``o`` (``valid`` high, payload steady)
    from the cycle after its stop bit's middle until it is taken, and a byte completed while the
    previous one is still not taken is **dropped** and counted in ``overrun``. A sink that is
    ready at least once per byte time (``10 * divisor`` cycles) loses nothing.

    Latency: a byte is valid on ``o`` about ``divisor // 2 + 9 * divisor + 3`` cycles after its
    start bit's falling edge reaches ``rx`` (9.5 bit times, plus the synchroniser and the output
    register).

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, at least 4.

    Members
    -------
    rx : In(1)
        The line (idle high; ``init`` 1).
    o : Out(stream.Signature(8))
        The bytes received.
    framing_errors : Out(32)
        Bytes whose stop bit read 0.
    overrun : Out(32)
        Bytes dropped because the one before was still waiting on ``o``.
    """

    class _State(enum.Enum):
        IDLE = 0
        START = 1
        DATA = 2
        STOP = 3
        BREAK = 4

    def __init__(self, divisor):
        self.divisor = check_divisor(divisor, "UartRx")
        super().__init__({
            "rx": In(1, init=1),
            "o": Out(stream.Signature(8)),
            "framing_errors": Out(32),
            "overrun": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        S = self._State
        sync1 = Signal(init=1)
        line = Signal(init=1)
        m.d.sync += [sync1.eq(self.rx), line.eq(sync1)]

        state = Signal(S)
        timer = Signal(range(self.divisor))
        bit = Signal(range(8))
        shift = Signal(8)
        out = Signal(8)
        out_valid = Signal()
        m.d.comb += [
            self.o.valid.eq(out_valid),
            self.o.payload.eq(out),
        ]
        with m.If(self.o.ready):
            m.d.sync += out_valid.eq(0)

        tick = timer == 0
        with m.If(~tick):
            m.d.sync += timer.eq(timer - 1)
        with m.Switch(state):
            with m.Case(S.IDLE):
                with m.If(~line):
                    m.d.sync += [state.eq(S.START), timer.eq(self.divisor // 2 - 1)]
            with m.Case(S.START):
                with m.If(tick):
                    m.d.sync += [state.eq(S.DATA), timer.eq(self.divisor - 1), bit.eq(0)]
                    with m.If(line):                    # a glitch, not a start bit
                        m.d.sync += state.eq(S.IDLE)
            with m.Case(S.DATA):
                with m.If(tick):
                    m.d.sync += [shift.eq(Cat(shift[1:], line)), bit.eq(bit + 1),
                                 timer.eq(self.divisor - 1)]
                    with m.If(bit == 7):
                        m.d.sync += state.eq(S.STOP)
            with m.Case(S.STOP):
                with m.If(tick):
                    with m.If(line):
                        m.d.sync += state.eq(S.IDLE)
                        with m.If(out_valid & ~self.o.ready):
                            m.d.sync += self.overrun.eq(self.overrun + 1)
                        with m.Else():
                            m.d.sync += [out.eq(shift), out_valid.eq(1)]
                    with m.Else():
                        m.d.sync += [state.eq(S.BREAK),
                                     self.framing_errors.eq(self.framing_errors + 1)]
            with m.Case(S.BREAK):
                with m.If(line):
                    m.d.sync += state.eq(S.IDLE)
        return m


class UartTx(wiring.Component):
    """Send the bytes of the stream ``i`` on the line ``tx``, 8N1, back to back.

    A byte is taken when the transmitter is idle (``i.ready`` depends on its state only); its
    start bit is on ``tx`` from the next cycle, each bit lasts exactly ``divisor`` cycles, and
    ``i.ready`` rises again in the last cycle of the stop bit, so a stream that is always valid
    gives one byte every ``10 * divisor`` cycles without idle time on the line. ``tx`` is a register
    (no glitches), high while idle and after reset.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, at least 4.

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send.
    tx : Out(1)
        The line (``init`` 1).
    """

    def __init__(self, divisor):
        self.divisor = check_divisor(divisor, "UartTx")
        super().__init__({
            "i": In(stream.Signature(8)),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        shift = Signal(9)                   # data bits still to send, then the stop bit
        left = Signal(range(11))            # bit periods not yet finished, the current included
        timer = Signal(range(self.divisor))
        # Ready when idle, or in the last cycle of a stop bit: the next start bit follows it.
        m.d.comb += self.i.ready.eq((left == 0) | ((left == 1) & (timer == 0)))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                self.tx.eq(0),
                shift.eq(Cat(self.i.payload, 1)),
                left.eq(10),
                timer.eq(self.divisor - 1),
            ]
        with m.Elif(left != 0):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Else():
                m.d.sync += [left.eq(left - 1), timer.eq(self.divisor - 1)]
                with m.If(left != 1):
                    m.d.sync += [self.tx.eq(shift[0]), shift.eq(shift[1:])]
        return m
