"""Tiles that fail without doing anything a monitor calls a violation: the clumsy developer's
tiles the Apiary kernel must survive (the stall watch, :mod:`apiary.os.monitor_stall`), for
tests and the fault matrix (``apiary bench faults``).

* :class:`HangingPortTile` takes a few messages, then never another: a reply it is offered
  waits at its monitor, and whatever sent it waits behind it.
* :class:`EndlessTile` starts a message and never ends it: every router on its path stays held.
"""

from amaranth import Array, Module, Signal

from ..noc.header import Message, NocHeader
from ..tile import Receive, Send, Tile
from .raw_port import RawPortTile


__all__ = ["HangingPortTile", "EndlessTile"]


class HangingPortTile(RawPortTile):
    """A :class:`~apiary.tiles.RawPortTile` that takes ``reads`` messages from the NoC, then
    never another (until it is reset): it only stops reading."""

    def __init__(self, env=None, *, reads: int = 1, **kwargs) -> None:
        super().__init__(env, **kwargs)
        if not isinstance(reads, int) or isinstance(reads, bool) or reads < 0:
            raise ValueError(f"HangingPortTile reads must be a count of messages, not {reads!r}")
        self.reads = reads

    def elaborate(self, platform):
        m = super().elaborate(platform)
        taken = Signal(range(self.reads + 1))
        tx = self.mac_tx
        with m.If(tx.valid & tx.ready & tx.payload.last & (taken < self.reads)):
            m.d.sync += taken.eq(taken + 1)
        with m.If(taken == self.reads):
            m.d.comb += [self.noc_in.ready.eq(0), tx.valid.eq(0)]
        return m


class EndlessTile(Tile):
    """``start`` cycles out of reset, sends the first ``sent`` flits of a 64-byte message to
    ``dst`` and never the rest; takes whatever it is sent."""

    streaming = False
    inputs = (Receive("heard", raw=True),)
    outputs = (Send("said", raw=True),)

    def __init__(self, env=None, *, dst: tuple[int, int] = (0, 0), sent: int = 3,
                 start: int = 0) -> None:
        super().__init__(env)
        hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], src_x=self.env.x, src_y=self.env.y,
                        msg_type=12)
        flits = Message(hdr, [], bytes(range(64))).flits(self.env.width)
        if not isinstance(sent, int) or not 1 <= sent < len(flits):
            raise ValueError(f"EndlessTile sent must be 1 to {len(flits) - 1} flits (fewer than "
                             f"the whole message), not {sent!r}")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise ValueError(f"EndlessTile start must be a number of cycles, not {start!r}")
        self.flits = flits[:sent]
        self.start = start

    def elaborate(self, platform):
        m = Module()
        ports = self.message_ports(m)
        out, heard = ports.said, ports.heard
        wait = Signal(range(self.start + 1), init=self.start)
        index = Signal(range(len(self.flits) + 1))
        data = Array(d for d, _ in self.flits)
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        m.d.comb += [heard.ready.eq(1), out.valid.eq((wait == 0) & (index < len(self.flits))),
                     out.payload.data.eq(data[index]), out.payload.last.eq(0)]
        with m.If(out.valid & out.ready):
            m.d.sync += index.eq(index + 1)
        return m
