"""A placeholder tile that forwards every message to its declared next hop."""

from amaranth import Module, Signal
from amaranth.lib.wiring import Out

from ..noc.header import field_location, header_flits
from ..tile import Tile


__all__ = ["ForwardTile"]


class ForwardTile(Tile):
    """Forward each message unchanged but for its header's destination (the tile's next hop) and
    source (this tile).

    Latency: 0 cycles (combinational, cut-through). Throughput: one flit per cycle.
    With no next hop declared, or several (this placeholder does not balance), messages are
    dropped and counted in ``dropped``.

    Members
    -------
    dropped : Out(32)
        Messages dropped for want of a single next hop.
    """

    def __init__(self, env=None):
        super().__init__(env, {"dropped": Out(32)})
        hops = [ep for eps in self.env.next_hops("data").values() for ep in eps]
        self._hop = hops[0] if len(set(hops)) == 1 else None

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        nh = header_flits(width)
        index = Signal(range(nh + 1))          # which flit of the message is at the input
        with m.If(self.noc_in.valid & self.noc_in.ready):
            with m.If(self.noc_in.payload.last):
                m.d.sync += index.eq(0)
            with m.Elif(index < nh):
                m.d.sync += index.eq(index + 1)

        if self._hop is None:
            m.d.comb += self.noc_in.ready.eq(1)
            with m.If(self.noc_in.valid & self.noc_in.payload.last):
                m.d.sync += self.dropped.eq(self.dropped + 1)
            return m

        rewrite = {
            "dst_x": self._hop.x, "dst_y": self._hop.y, "dst_fbits": self._hop.fbits,
            "src_x": self.env.x, "src_y": self.env.y,
        }
        data = Signal(width)
        m.d.comb += data.eq(self.noc_in.payload.data)
        for name, value in rewrite.items():
            flit, lsb = field_location(width, name)
            w = len(data[lsb:lsb + {"dst_fbits": 4}.get(name, 8)])
            with m.If(index == flit):
                m.d.comb += data[lsb:lsb + w].eq(value)
        m.d.comb += [
            self.noc_out.valid.eq(self.noc_in.valid),
            self.noc_out.payload.data.eq(data),
            self.noc_out.payload.last.eq(self.noc_in.payload.last),
            self.noc_in.ready.eq(self.noc_out.ready),
        ]
        return m
