"""A placeholder tile that forwards every message to its declared next hop."""

from amaranth import Module
from amaranth.lib.wiring import connect

from ..noc.rewrite import HeaderRewriter
from ..tile import Receive, Send, Tile
from ..stream.counters import count


__all__ = ["ForwardTile", "next_hop_fields"]


def next_hop_fields(env):
    """Header fields that send a message from the tile in ``env`` to its single next hop, or
    ``None`` if the tile has no next hop or several (placeholders do not balance)."""
    hops = {ep for eps in env.next_hops("data").values() for ep in eps}
    if len(hops) != 1:
        return None
    hop, = hops
    return {"dst_x": hop.x, "dst_y": hop.y, "dst_fbits": hop.fbits,
            "src_x": env.x, "src_y": env.y}


class ForwardTile(Tile):
    """Forward each message unchanged but for its header's destination (the tile's next hop) and
    source (this tile), and with ``msg_type`` given, its message type.

    Latency: 0 cycles (combinational, cut-through). Throughput: one flit per cycle.
    With no next hop declared, or several, messages are dropped and counted in ``dropped``.

    Counters: ``dropped``, messages dropped for want of a single next hop.

    Message ports: ``messages`` in and ``forwarded`` out, any type, as flits (``raw``); with
    ``msg_type``, ``forwarded`` carries that type alone.
    """

    inputs = (Receive("messages", raw=True),)
    outputs = (Send("forwarded", raw=True),)

    def __init__(self, env=None, *, msg_type=None):
        super().__init__(env, counters={
            "dropped": "messages dropped for want of a single next hop"})
        self._fields = next_hop_fields(self.env)
        if self._fields is not None and msg_type is not None:
            self._fields["msg_type"] = int(getattr(msg_type, "value", msg_type))
            self.outputs = (Send("forwarded", self._fields["msg_type"], raw=True),)

    def elaborate(self, platform):
        m = Module()
        ports = self.message_ports(m)
        if self._fields is None:
            m.d.comb += ports.messages.ready.eq(1)
            with m.If(ports.messages.valid & ports.messages.payload.last):
                count(m, self.counters.dropped)
            return m
        m.submodules.rewrite = rewrite = HeaderRewriter(self.env.width, self._fields)
        connect(m, tile=ports.messages, rewrite=rewrite.i)
        connect(m, rewrite=rewrite.o, tile=ports.forwarded)
        return m
