"""UDP echo that models an application which computes: at most one message every ``cycles``.

A stand-in for a compute-bound application (Reed-Solomon, a key-value store's lookup): it echoes
like :class:`~beehive.apps.echo.UdpEchoTile`, but takes ``cycles`` cycles per message, so that
replicating it behind a load balancer (``examples/replicated_app.py``) shows copies scaling a slow
component up to the shared path's rate (the Beehive paper's Fig. 12).

==========================  =====================================================================
message                     flits
==========================  =====================================================================
in: ``UDP_RX_SEGMENT``      NoC header, :data:`~beehive.proto.messages.PACKET_META`, payload
(from UDP RX or a balancer)
out: ``UDP_TX_SEGMENT``     the same flits; header ``msg_type`` set to ``UDP_TX_SEGMENT``,
(to UDP TX)                 ``dst_*`` to the tile's next hop, ``src_x``/``src_y`` to this tile
==========================  =====================================================================

The metadata goes back unchanged: it names the client as the peer, so it addresses the reply,
and its ``l4_sum`` stays right.
"""

from amaranth import Module, Signal
from amaranth.lib.wiring import connect

from apiary.noc.rewrite import HeaderRewriter
from apiary.tile import Receive, Send, Tile, TileEnv
from apiary.tiles.forward import next_hop_fields

from ..proto.messages import MsgType
from apiary.stream.counters import count


__all__ = ["UdpBusyEchoTile"]


class UdpBusyEchoTile(Tile):
    """Echo every message to the next hop (UDP TX) as ``UDP_TX_SEGMENT``, starting one message
    at most every ``cycles`` cycles.

    A message *starts* in the cycle its first flit is taken (in and out are the same cycle: the
    tile is cut-through). The first flit of a message is held until ``cycles`` cycles after the
    previous message started; the rest of the message passes combinationally.

    Latency: 0 cycles (first flit in to first flit out) when ``cycles`` cycles have passed since
    the previous message started, else the wait until then. Throughput: one flit per cycle
    within a message; messages start at least ``cycles`` cycles apart, and exactly ``cycles``
    apart when the next message is waiting, the output is ready and a message has at most
    ``cycles`` flits (a longer one starts the next as soon as its last flit has left):
    ``1 / max(cycles, flits)`` messages per cycle. Drops: with no single next hop, every message
    (counted in ``dropped``).

    Counters: ``forwarded``, messages echoed (counted on their last flit); ``dropped``.

    Parameters
    ----------
    env : TileEnv
        Its next hop on the data plane: one endpoint (UDP TX).
    cycles : int
        Cycles per message, at least 1 (1: no wait, as :class:`~beehive.apps.echo.UdpEchoTile`).

    Raises
    ------
    ValueError
        If ``cycles`` is not a positive integer.
    """

    # Cut-through: the messages pass as flits, their header rewritten (no framing).
    inputs = (Receive("segments", MsgType.UDP_RX_SEGMENT, raw=True),)
    outputs = (Send("replies", MsgType.UDP_TX_SEGMENT, raw=True),)

    def __init__(self, env: TileEnv | None = None, *, cycles: int = 16) -> None:
        if isinstance(cycles, bool) or not isinstance(cycles, int) or cycles < 1:
            raise ValueError(f"UdpBusyEchoTile: cycles must be a positive integer (cycles per "
                             f"message), not {cycles!r}")
        self.cycles = cycles
        super().__init__(env, counters={
            "forwarded": "messages echoed (sent to the next hop)",
            "dropped": "messages dropped for want of a single next hop"})
        self._fields = next_hop_fields(self.env)
        if self._fields is not None:
            self._fields["msg_type"] = MsgType.UDP_TX_SEGMENT.value

    def elaborate(self, platform):
        m = Module()
        ports = self.message_ports(m)
        i = ports.segments
        if self._fields is None:
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid & i.payload.last):
                count(m, self.counters.dropped)
            return m
        m.submodules.rewrite = rewrite = HeaderRewriter(self.env.width, self._fields)
        connect(m, rewrite=rewrite.o, tile=ports.replies)

        # ``first``: the next flit on ``i`` is a message's first. ``wait``: cycles until the
        # next message may start (``cycles - 1`` in the cycle after a start, counting down).
        first = Signal(init=1)
        wait = Signal(range(self.cycles))
        open_ = Signal()
        m.d.comb += [
            open_.eq(~first | (wait == 0)),
            rewrite.i.valid.eq(i.valid & open_),
            rewrite.i.payload.eq(i.payload),
            i.ready.eq(rewrite.i.ready & open_),
        ]
        take = i.valid & i.ready
        with m.If(take & first):
            m.d.sync += wait.eq(self.cycles - 1)
        with m.Elif(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        with m.If(take):
            m.d.sync += first.eq(i.payload.last)
            with m.If(i.payload.last):
                count(m, self.counters.forwarded)
        return m
