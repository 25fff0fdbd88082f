"""A tile whose NoC port is brought out to the design's top level."""

from amaranth import Module
from amaranth.lib.wiring import In, Out

from ..noc.flit import flit_signature
from ..tile import Tile


__all__ = ["PortTile"]


class PortTile(Tile):
    """Bring the tile's local NoC port out of the design, for test benches and off-mesh logic.

    Messages on ``tx`` enter the NoC exactly as given (the sender writes the whole header);
    messages the router delivers come out on ``rx``. No latency, no buffering, nothing dropped.
    """

    def __init__(self, env=None):
        super().__init__(env, {
            "tx": In(flit_signature((env.width if env else 512))),
            "rx": Out(flit_signature((env.width if env else 512))),
        })

    def elaborate(self, platform):
        m = Module()
        for src, dst in ((self.tx, self.noc_out), (self.noc_in, self.rx)):
            m.d.comb += [
                dst.valid.eq(src.valid),
                dst.payload.eq(src.payload),
                src.ready.eq(dst.ready),
            ]
        return m
