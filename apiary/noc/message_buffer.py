"""A store-and-forward buffer of whole NoC messages, optionally one that never stalls its input.

Messages are stored whole in a :class:`~apiary.stream.packet_buffer.PacketBuffer` (one buffer
word per flit) and sent on in order. With ``always_ready`` the input never waits: a message that
finds no room (or is longer than ``max_flits``) is taken and dropped whole, never cut. This is
what a stage facing a source that must not be stalled needs (the no-backpressure receive
contract of :mod:`apiary.tiles.rx_guard`, the per-queue buffers of
:mod:`apiary.tiles.credit_queues`).
"""

from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..stream.layout import check_width
from ..stream.packet_buffer import PacketBuffer
from .flit import flit_signature


__all__ = ["MessageBuffer"]


class MessageBuffer(wiring.Component):
    """Hold whole messages between ``i`` and ``o``: at most ``buffer_flits`` flits.

    Latency: a message's first flit is offered 3 cycles after the cycle its last flit is taken
    (store and forward: :class:`~apiary.stream.packet_buffer.PacketBuffer`'s descriptor, then
    its words).
    Throughput: one flit per cycle each way. ``occupancy`` is the number of flits held (stored
    messages not yet sent, counted from the cycle their last flit is taken); it never exceeds
    ``buffer_flits``.

    Drops (only with ``always_ready``, else ``i`` waits): a message longer than ``max_flits`` or
    finding less than its length free; ``dropped`` pulses in the cycle its last flit is taken.

    Parameters
    ----------
    width : int
        Flit width.
    buffer_flits : int
        Flits the buffer holds, rounded up to a power of two (at least ``max_flits``).
    max_flits : int
        Longest message, in flits.
    always_ready : bool
        Never stall ``i``: drop messages that do not fit.

    Members
    -------
    i : In(flit_signature(width))
    o : Out(flit_signature(width))
    stored, dropped : Out(1)
        Pulse in the cycle a message's last flit is taken on ``i`` and it is stored, or dropped.
    sent : Out(1)
        Pulses in the cycle a message's last flit leaves on ``o``.
    occupancy : Out(range(buffer_flits + 1))
    """

    def __init__(self, width: int, *, buffer_flits: int, max_flits: int,
                 always_ready: bool = False) -> None:
        self._width = check_width(width)
        for name, value in (("buffer_flits", buffer_flits), ("max_flits", max_flits)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MessageBuffer {name} must be a positive integer, not "
                                 f"{value!r}")
        if buffer_flits < max_flits:
            raise ValueError(f"MessageBuffer buffer_flits ({buffer_flits}) must hold the longest "
                             f"message (max_flits {max_flits})")
        self.buffer_flits = 1 << (buffer_flits - 1).bit_length() if buffer_flits > 1 else 2
        self.max_flits = max_flits
        self.always_ready = bool(always_ready)
        super().__init__({
            "i": In(flit_signature(width)),
            "o": Out(flit_signature(width)),
            "stored": Out(1),
            "dropped": Out(1),
            "sent": Out(1),
            "occupancy": Out(range(self.buffer_flits + 1)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        m.submodules.buffer = buf = PacketBuffer(
            self._width, max_bytes=self.max_flits * nb, buffer_bytes=self.buffer_flits * nb,
            max_queued=self.buffer_flits, verdict=False, always_ready=self.always_ready)
        m.d.comb += [
            buf.i.valid.eq(self.i.valid),
            buf.i.payload.data.eq(self.i.payload.data),
            buf.i.payload.nbytes.eq(nb),
            buf.i.payload.last.eq(self.i.payload.last),
            self.i.ready.eq(buf.i.ready),
            buf.o_desc.ready.eq(1),
            self.o.valid.eq(buf.o.valid),
            self.o.payload.data.eq(buf.o.payload.data),
            self.o.payload.last.eq(buf.o.payload.last),
            buf.o.ready.eq(self.o.ready),
            self.stored.eq(buf.accepted),
            self.dropped.eq(buf.i_dropped),
            self.sent.eq(self.o.valid & self.o.ready & self.o.payload.last),
        ]
        # Flits of the message arriving, and flits held.
        arriving = Signal(range(self.buffer_flits + 2))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += arriving.eq(Mux(self.i.payload.last, 0, arriving + 1))
        out = Signal()
        m.d.comb += out.eq(self.o.valid & self.o.ready)
        m.d.sync += self.occupancy.eq(self.occupancy - out
                                      + (buf.accepted * (arriving + 1))[:len(self.occupancy)])
        return m
