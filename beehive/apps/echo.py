"""UDP echo (RFC 862): every datagram goes back to where it came from.

Message in (``UDP_RX_SEGMENT`` from UDP RX): the payload and its metadata. Message out
(``UDP_TX_SEGMENT`` to UDP TX): the same payload and metadata. The metadata names the client as
the *peer* (:data:`~beehive.proto.messages.PACKET_META`), so sending it back unchanged addresses
the reply, and its ``l4_sum`` (the payload's sum) stays right, so UDP TX needs no pass over the
payload.
"""

from apiary.tiles.forward import ForwardTile

from ..proto.messages import MsgType


__all__ = ["UdpEchoTile"]


class UdpEchoTile(ForwardTile):
    """Send every message back out to the tile's next hop (UDP TX) as ``UDP_TX_SEGMENT``.

    Latency: 0 cycles (combinational, cut-through); one flit per cycle. With no single next hop
    every message is dropped and counted in ``dropped``.
    """

    def __init__(self, env=None):
        super().__init__(env, msg_type=MsgType.UDP_TX_SEGMENT)
