"""IPv4 transmit: datagrams from the transport tiles to Ethernet TX.

Message in (``IP_TX_DATAGRAM``): the datagram's payload, metadata ``peer_ip`` (destination),
``local_ip`` (source) and ``protocol``. Message out (``ETH_TX_FRAME``): the datagram, metadata
``ethertype`` set to IPv4.
"""

from amaranth import Signal

from apiary.noc.header import MsgType

from .headers import IPV4, IPV4_FLAG_DF, IPV4_MIN_IHL, IPV4_VERSION, EtherType
from .ip_rx import header_sum
from .layer import TxLayerTile, header_view


__all__ = ["Ipv4TxTile"]


class Ipv4TxTile(TxLayerTile):
    """Put a 20-byte IPv4 header (no options, DF set, identification 0, TTL ``ttl``, checksum
    computed) in front of every message's payload.

    Cut-through: the header depends on the metadata and length only. Nothing is dropped except
    when the tile has no single next hop (``no_route``).
    """

    max_header = 20
    msg_type = MsgType.ETH_TX_FRAME

    def __init__(self, env=None, *, ttl=64):
        if not isinstance(ttl, int) or not 1 <= ttl <= 255:
            raise ValueError(f"ttl must be an integer from 1 to 255, not {ttl!r}")
        super().__init__(env)
        self.ttl = ttl

    def build(self, m, length, meta):
        plain = Signal(8 * 20)          # the header with a zero checksum
        ip = header_view(IPV4, plain)
        m.d.comb += [
            ip.version.eq(IPV4_VERSION), ip.ihl.eq(IPV4_MIN_IHL),
            ip.total_length.eq(length + 20), ip.flags.eq(IPV4_FLAG_DF), ip.ttl.eq(self.ttl),
            ip.protocol.eq(meta.protocol), ip.src.eq(meta.local_ip), ip.dst.eq(meta.peer_ip),
        ]
        header = Signal(8 * 20)
        final = header_view(IPV4, header)
        m.d.comb += [
            header.eq(plain),
            final.checksum.eq(~header_sum(plain, 10)),
        ]
        return header, 20, {"ethertype": EtherType.IPV4.value}
