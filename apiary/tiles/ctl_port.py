"""Control-plane messages as frames on an Ethernet port: a controller for tests and
benchmarks, on either simulation back end."""

from amaranth import Module
from amaranth.lib.wiring import In, Out

from ..stream.mac import FrameStream
from ..tile import Receive, Send, Tile
from ..stream.counters import count


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

    Message ports: on the ``ctl`` plane ``to_mac`` in (to ``mac_tx``) and ``from_mac`` out
    (from ``mac_rx``), any type, as flits (``raw``); on the data plane ``discarded`` in, any
    type, and nothing out.
    """

    planes = ("data", "ctl")
    streaming = False
    controls = True
    inputs = (Receive("discarded", raw=True), Receive("to_mac", plane="ctl", raw=True))
    outputs = (Send("from_mac", plane="ctl", raw=True),)

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
        data = self.message_ports(m)
        ctl = self.message_ports(m, "ctl")
        m.d.comb += [
            ctl.from_mac.valid.eq(rx.valid),
            ctl.from_mac.payload.data.eq(rx.payload.data),
            ctl.from_mac.payload.last.eq(rx.payload.last),
            rx.ready.eq(ctl.from_mac.ready),
            tx.valid.eq(ctl.to_mac.valid),
            tx.payload.data.eq(ctl.to_mac.payload.data),
            tx.payload.nbytes.eq(self.env.ctl_width // 8),
            tx.payload.last.eq(ctl.to_mac.payload.last),
            ctl.to_mac.ready.eq(tx.ready),
            data.discarded.ready.eq(1),
        ]
        with m.If(data.discarded.valid & data.discarded.payload.last):
            count(m, self.counters.data_in)
        return m
