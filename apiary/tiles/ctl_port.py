"""Control-plane messages as frames on an Ethernet port: a controller for tests and
benchmarks, on either simulation back end."""

from amaranth import Module
from amaranth.lib.wiring import In, Out

from ..stream.mac import FrameStream
from ..tile import Tile


__all__ = ["ControlPortTile"]


class ControlPortTile(Tile):
    """A controller (``controls = True``) driven through a frame port: each frame on ``mac_rx``
    is one whole control-plane message (:mod:`apiary.control.messages`), injected on the
    ``ctl`` plane as it is (:func:`~apiary.tiles.raw_port.message_frame` builds it, ``width``
    the control plane's); each control message delivered leaves on ``mac_tx`` as one frame.
    The frame port is as wide as the control plane, so the design's data plane must be as
    wide too (its data-plane input is taken and counted in ``data_in``).

    Latency: 0 cycles both ways (combinational). Nothing is buffered: a frame's words enter
    the control NoC as the router takes them.
    """

    planes = ("data", "ctl")
    streaming = False
    controls = True

    def __init__(self, env=None):
        if env is None or env.width != env.ctl_width:
            raise ValueError("a ControlPortTile's frame port carries control-plane flits, so "
                             "the design's data plane must be as wide as its control plane")
        super().__init__(env, {"mac_rx": In(FrameStream(env.ctl_width)),
                               "mac_tx": Out(FrameStream(env.ctl_width))},
                         counters={"data_in": "data-plane messages taken and discarded"})

    def elaborate(self, platform):
        m = Module()
        rx, tx = self.mac_rx, self.mac_tx
        m.d.comb += [
            self.ctl_out.valid.eq(rx.valid),
            self.ctl_out.payload.data.eq(rx.payload.data),
            self.ctl_out.payload.last.eq(rx.payload.last),
            rx.ready.eq(self.ctl_out.ready),
            tx.valid.eq(self.ctl_in.valid),
            tx.payload.data.eq(self.ctl_in.payload.data),
            tx.payload.nbytes.eq(self.env.ctl_width // 8),
            tx.payload.last.eq(self.ctl_in.payload.last),
            self.ctl_in.ready.eq(tx.ready),
            self.noc_in.ready.eq(1),
        ]
        with m.If(self.noc_in.valid & self.noc_in.payload.last):
            m.d.sync += self.counters.data_in.eq(self.counters.data_in + 1)
        return m
