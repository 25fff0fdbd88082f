"""Per-queue transmit credits (FlexDriver §5.5), the application's side: a tile sends to a shared
service only with credits, so its messages always find room there and a slow queue never blocks
a fast one.

Messages
--------
=============  ========================================  ==================================
type           from → to                                 metadata (:data:`CREDIT_META`)
=============  ========================================  ==================================
``TX_CREDIT``  the service (:class:`~apiary.tiles.       ``flits``: flits of the tile's queue
               credit_queues.CreditQueuesTile`) → a       freed since the last credit
               sending tile                               (its messages sent on)
=============  ========================================  ==================================

The tile starts with ``credits`` flits, the size of its queue in the service; a message of
``msg_len + 1`` flits to the service waits until that many credits are held, and spends them;
``TX_CREDIT`` gives them back. Messages to anywhere else pass unchanged.
"""

from typing import Any

from amaranth import Module, Signal
from amaranth.lib import data, enum
from amaranth.lib.wiring import connect

from ..noc.msgtype import register_msg_types
from ..noc.spec import register_formats
from ..stream.format import Field, Format
from ..tile import Receive, TileEnv
from .sources import head_field
from .wrapper import TileWrapper
from ..stream.counters import count


__all__ = ["CreditMsgType", "CREDIT_META", "TxCreditTile"]


@register_msg_types
class CreditMsgType(enum.Enum, shape=8):
    TX_CREDIT = 0xF1     # far from the values in use (1-50), which other packages extend


CREDIT_FORMAT = Format("credit_meta", [
    Field("flits", 16, "flits freed in the receiver's queue since the last TX_CREDIT"),
], order="lsb", doc="The metadata of TX_CREDIT, from a credited service to a TxCreditTile.")
#: The metadata of ``TX_CREDIT``: flits freed in the receiver's queue.
CREDIT_META = CREDIT_FORMAT.layout()
register_formats(CreditMsgType, CREDIT_FORMAT)


class TxCreditTile(TileWrapper):
    """``tile`` (built with the other ``params``), sending to ``service`` only with credits.

    Latency: 0 cycles added to a message that has its credits (every flit passes
    combinationally, nothing is stored); a message without waits at its first flit, holding
    only this tile. ``TX_CREDIT`` messages are consumed here (never reach the tile), at one
    flit per cycle. Counters:
    ``credit_waits`` (cycles a message to the service waited for credits), ``credits_back``
    (``TX_CREDIT`` messages taken). Cost (Yosys ``synth_xilinx``): 148 LUTs, 140 FFs at 64
    bits; 134 LUTs, 108 FFs at 512.

    Parameters
    ----------
    tile : type
        The sending tile's class.
    service : (x, y)
        The credited service's place.
    credits : int
        Flits of this tile's queue in the service (its ``buffer_flits``).

    Message ports: ``tx_credit`` in (``TX_CREDIT``, framed), split by type from ``to_tile`` (every
    other type, raw flits to the tile); ``from_tile`` out, as for every
    :class:`~apiary.tiles.wrapper.TileWrapper`.
    """

    inputs = (Receive("tx_credit", CreditMsgType.TX_CREDIT, meta=CREDIT_FORMAT),
              Receive("to_tile", raw=True))

    def __init__(self, env: TileEnv | None = None, *, tile: type, service: tuple[int, int],
                 credits: int, **params: Any) -> None:
        if (not isinstance(service, (tuple, list)) or len(service) != 2
                or not all(isinstance(c, int) for c in service)):
            raise ValueError(f"TxCreditTile service= must be an (x, y) place, not {service!r}")
        if not isinstance(credits, int) or isinstance(credits, bool) or not 1 <= credits < 1 << 16:
            raise ValueError(f"TxCreditTile credits= must be a number of flits from 1 to 65535, "
                             f"not {credits!r}")
        self.service, self.credits = tuple(service), credits
        super().__init__(env, tile=tile, counters={
            "credit_waits": "cycles a message to the credited service waited for credits",
            "credits_back": "TX_CREDIT messages taken",
        }, **params)
        self._back = Signal(16)         # credits given back this cycle

    def inbound(self, m: Module, ports: Any, tile: Any) -> None:
        rx = ports.tx_credit
        connect(m, router=ports.to_tile, tile=tile)
        m.d.comb += [rx.o_hdr.ready.eq(1), rx.o_data.ready.eq(1)]
        with m.If(rx.o_hdr.valid):
            m.d.comb += self._back.eq(data.View(CREDIT_META, rx.o_hdr.payload.meta).flits)
            count(m, self.counters.credits_back)

    def outbound(self, m: Module, tile: Any, ports: Any) -> None:
        # Hold a message to the service at its first flit until its flits are in credit; every
        # flit passes combinationally (nothing stored). While a message waits the credits can
        # only grow, so once offered it stays offered (the stream rules hold).
        w = self.env.width
        router = ports.from_tile
        data = tile.payload.data
        credits = Signal(range(1 << 16), init=self.credits)
        first = Signal(init=1)
        cost = Signal(23)
        to_service, blocked = Signal(), Signal()
        m.d.comb += [
            cost.eq(head_field(w, data, "msg_len") + 1),
            to_service.eq(first & (head_field(w, data, "dst_x") == self.service[0])
                          & (head_field(w, data, "dst_y") == self.service[1])),
            blocked.eq(to_service & (credits < cost)),
            router.payload.eq(tile.payload),
            router.valid.eq(tile.valid & ~blocked),
            tile.ready.eq(router.ready & ~blocked),
        ]
        moved = tile.valid & tile.ready
        with m.If(moved):
            m.d.sync += first.eq(tile.payload.last)
        spent = Signal(23)
        with m.If(moved & to_service):
            m.d.comb += spent.eq(cost)
        with m.If(tile.valid & blocked):
            count(m, self.counters.credit_waits)
        m.d.sync += credits.eq(credits - spent + self._back)
