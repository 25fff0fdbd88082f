"""The no-backpressure receive contract (FlexDriver §5.5): a tile that stops reading drops its own
messages and holds up no one else.

On a wormhole NoC a tile that stops taking flits holds its router's output, then every link
on the path to it, and every sender whose messages share those links: one stalled application
stops a service (UDP RX, the TCP engine) for all. :class:`RxGuardTile` puts a
:class:`~apiary.noc.message_buffer.MessageBuffer` that never stalls in front of the tile's
``noc_in``: the router's output is always taken; while the tile keeps up, messages pass through
the buffer; when it does not, messages that find the buffer full are dropped whole and counted
in ``rx_guard_dropped``. Opt in per tile::

    d.add("app", RxGuardTile, at=(2, 2), tile=UdpEchoTile, buffer_flits=64)

The guarded tile never holds its router's output, so it adds no in → out dependency to the
deadlock check (``streaming`` is false).
"""

from typing import Any

from amaranth import Module
from amaranth.lib.wiring import connect

from ..noc.message_buffer import MessageBuffer
from ..tile import TileEnv
from .wrapper import TileWrapper


__all__ = ["RxGuardTile"]


class RxGuardTile(TileWrapper):
    """``tile`` (built with the other ``params``) behind a receive buffer that never stalls the
    NoC.

    Latency: 3 cycles more from a message's last flit in to its first flit into the tile (store
    and forward). Throughput: one flit per cycle. Drops: a message that finds fewer than its
    length of ``buffer_flits`` free (or is longer than ``max_flits``), whole, counted in
    ``rx_guard_dropped``; ``rx_guard_passed`` counts the messages stored for the tile.
    Cost: ``buffer_flits`` flits of memory.

    Parameters
    ----------
    tile : type
        The tile class to guard.
    buffer_flits : int
        Flits held for the tile (a power of two; default 64).
    max_flits : int
        Longest message in flits (default: ``buffer_flits``).
    """

    holds_input = False     # the guard takes every flit the router offers

    def __init__(self, env: TileEnv | None = None, *, tile: type, buffer_flits: int = 64,
                 max_flits: int | None = None, **params: Any) -> None:
        super().__init__(env, tile=tile, counters={
            "rx_guard_dropped": "messages to the tile dropped: its receive buffer was full",
            "rx_guard_passed": "messages to the tile stored in its receive buffer",
        }, **params)
        self.buffer = MessageBuffer(self.env.width, buffer_flits=buffer_flits,
                                    max_flits=buffer_flits if max_flits is None else max_flits,
                                    always_ready=True)

    def inbound(self, m: Module, ports: Any, tile: Any) -> None:
        buf = m.submodules.rx_guard = self.buffer
        connect(m, router=ports.to_tile, buffer=buf.i)
        connect(m, buffer=buf.o, tile=tile)
        c = self.counters
        m.d.sync += [c.rx_guard_dropped.eq(c.rx_guard_dropped + buf.dropped),
                     c.rx_guard_passed.eq(c.rx_guard_passed + buf.stored)]
