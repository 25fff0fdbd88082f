"""UDP (RFC 768): the header table, and the receive and transmit tiles.

Messages
--------
Into UDP RX (``IP_RX_DATAGRAM``, protocol 17): the UDP datagram. Out of it
(``UDP_RX_SEGMENT``, to the next hop for the destination port): the UDP payload, metadata
``peer_port``, ``local_port``, and ``l4_sum``/``l4_sum_valid``, the payload's one's-complement
sum, so that a reply with the same payload needs no second pass for its checksum.

Into UDP TX (``UDP_TX_SEGMENT``): the payload, metadata ``peer_ip``, ``local_ip``,
``peer_port`` (destination), ``local_port`` (source), and ``l4_sum``/``l4_sum_valid``. Out of it
(``IP_TX_DATAGRAM``): the UDP datagram, ``protocol`` set to 17.
"""

from amaranth import Mux, Signal

from apiary.stream.checksum import ones_sum
from apiary.stream.header import Header, header_signal, header_view

from .ipv4 import IpProtocol, pseudo_header_terms
from .layer import RxLayerTile, TxLayerTile
from .messages import MsgType


__all__ = ["UDP", "UdpRxTile", "UdpTxTile"]


#: UDP header, 8 bytes.
UDP = Header("udp", [("src_port", 16), ("dst_port", 16), ("length", 16), ("checksum", 16)])


class UdpRxTile(RxLayerTile):
    """Check a UDP datagram's length and checksum, strip its header and send the payload to the
    application listening on its destination port.

    The checksum covers the whole datagram, so each one is stored whole while it is summed
    (store-and-forward: the payload starts a few cycles after the datagram's last word). A zero
    checksum means "none" and is accepted.

    Drops, each counted: ``bad_checksum``, ``overflow`` (over ``max_packet`` bytes),
    ``truncated`` (under 8 bytes), ``bad_length`` (the UDP length is not the IP payload
    length), ``no_route`` (no listener on the port).
    """

    head_bytes = 8
    max_strip = 8
    key_width = 16
    msg_type = MsgType.UDP_RX_SEGMENT
    receives = MsgType.IP_RX_DATAGRAM
    drop_reasons = {
        "truncated": "datagrams shorter than 8 bytes",
        "bad_length": "a UDP length other than the IP payload's",
    }
    verify_offset = 8
    max_packet = 1480

    def verify(self, m, v):
        udp = header_signal(m, UDP, v.first)
        total = ones_sum(*pseudo_header_terms(v.meta.peer_ip, v.meta.local_ip,
                                              IpProtocol.UDP.value, udp.length),
                         udp.src_port, udp.dst_port, udp.length, udp.checksum, v.sum,
                         stage=v.stage)
        ok = (udp.checksum == 0) | (total == 0xFFFF)
        return ok, {"l4_sum": v.sum, "l4_sum_valid": 1}

    def parse(self, m, p):
        udp = p.field(UDP)
        p.drop("truncated", p.head_len < 8)
        p.drop("bad_length", udp.length != p.length)
        p.key = udp.dst_port
        p.strip = 8
        p.set_meta(peer_port=udp.src_port, local_port=udp.dst_port)


class UdpTxTile(TxLayerTile):
    """Put an 8-byte UDP header in front of every message's payload.

    The checksum is computed from the pseudo-header, the UDP header and ``l4_sum``, the
    payload's sum carried in the metadata (UDP RX puts it there, and an application that echoes
    or forwards a payload keeps it), so the tile is cut-through. A message without
    ``l4_sum_valid`` is sent with checksum 0, "no checksum", which IPv4 allows.
    """

    max_header = 8
    msg_type = MsgType.IP_TX_DATAGRAM
    receives = MsgType.UDP_TX_SEGMENT

    def build(self, m, length, meta, stage):
        header = Signal(8 * 8)
        udp = header_view(UDP, header)
        udp_length = (length + 8)[:16]
        total = ones_sum(*pseudo_header_terms(meta.local_ip, meta.peer_ip,
                                              IpProtocol.UDP.value, udp_length),
                         meta.local_port, meta.peer_port, udp_length, meta.l4_sum, stage=stage)
        checksum = (~total)[:16]
        m.d.comb += [
            udp.src_port.eq(meta.local_port),
            udp.dst_port.eq(meta.peer_port),
            udp.length.eq(udp_length),
            udp.checksum.eq(Mux(meta.l4_sum_valid, Mux(checksum == 0, 0xFFFF, checksum), 0)),
        ]
        return header, 8, {"protocol": IpProtocol.UDP.value}
