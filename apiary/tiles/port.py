"""A tile whose NoC port is brought out to the design's top level."""

from amaranth import Module
from amaranth.lib.wiring import In, Out, connect, flipped

from ..noc.flit import flit_signature
from ..noc.rewrite import HeaderRewriter
from ..tile import Receive, Send, Tile, TileEnv
from .forward import next_hop_fields


__all__ = ["PortTile"]


class PortTile(Tile):
    """Bring the tile's local NoC port out of the design, for test benches and off-mesh logic.

    Messages the router delivers come out on ``rx``. Messages on ``tx`` enter the NoC as given
    (the sender writes the whole header) or, with ``route=True``, addressed to the tile's single
    declared next hop with this tile as source. No latency, no buffering, nothing dropped.

    Message ports: ``delivered`` in (to ``rx``) and ``injected`` out (from ``tx``), any type,
    as flits (``raw``).
    """

    inputs = (Receive("delivered", raw=True),)
    outputs = (Send("injected", raw=True),)

    def __init__(self, env=None, *, route=False):
        env = env if env is not None else TileEnv()
        self._fields = next_hop_fields(env) if route else {}
        if self._fields is None:
            raise ValueError(f"PortTile {env.name!r} has route=True but not exactly one next hop")
        super().__init__(env, {
            "tx": In(flit_signature(env.width)),
            "rx": Out(flit_signature(env.width)),
        })

    def elaborate(self, platform):
        m = Module()
        ports = self.message_ports(m)
        m.submodules.rewrite = rewrite = HeaderRewriter(self.env.width, self._fields)
        connect(m, port=flipped(self.tx), rewrite=rewrite.i)
        connect(m, rewrite=rewrite.o, tile=ports.injected)
        connect(m, tile=ports.delivered, port=flipped(self.rx))
        return m
