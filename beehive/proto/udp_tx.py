"""UDP transmit: application payloads to IPv4 TX.

Message in (``UDP_TX_SEGMENT``): the payload, metadata ``peer_ip``, ``local_ip``,
``peer_port`` (destination), ``local_port`` (source), and ``l4_sum``/``l4_sum_valid``.
Message out (``IP_TX_DATAGRAM``): the UDP datagram, ``protocol`` set to 17.
"""

from amaranth import Mux, Signal

from apiary.noc.header import MsgType

from .headers import UDP, IpProtocol
from .layer import TxLayerTile, header_view, ones_sum
from .udp_rx import pseudo_header_sum


__all__ = ["UdpTxTile"]


class UdpTxTile(TxLayerTile):
    """Put an 8-byte UDP header in front of every message's payload.

    The checksum is computed from the pseudo-header, the UDP header and ``l4_sum``, the
    payload's sum carried in the metadata (UDP RX puts it there, and an application that echoes
    or forwards a payload keeps it), so the tile is cut-through. A message without
    ``l4_sum_valid`` is sent with checksum 0, "no checksum", which IPv4 allows.
    """

    max_header = 8
    msg_type = MsgType.IP_TX_DATAGRAM

    def build(self, m, length, meta):
        header = Signal(8 * 8)
        udp = header_view(UDP, header)
        udp_length = (length + 8)[:16]
        total = ones_sum(pseudo_header_sum(meta.local_ip, meta.peer_ip, IpProtocol.UDP.value,
                                           udp_length),
                         meta.local_port, meta.peer_port, udp_length, meta.l4_sum)
        checksum = (~total)[:16]
        m.d.comb += [
            udp.src_port.eq(meta.local_port),
            udp.dst_port.eq(meta.peer_port),
            udp.length.eq(udp_length),
            udp.checksum.eq(Mux(meta.l4_sum_valid, Mux(checksum == 0, 0xFFFF, checksum), 0)),
        ]
        return header, 8, {"protocol": IpProtocol.UDP.value}
