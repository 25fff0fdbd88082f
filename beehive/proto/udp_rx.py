"""UDP receive: datagrams from IPv4 RX to applications, by destination port.

Message in (``IP_RX_DATAGRAM``, protocol 17): the UDP datagram. Message out
(``UDP_RX_SEGMENT``, to the next hop for the destination port): the UDP payload, metadata
``peer_port``, ``local_port``, and ``l4_sum``/``l4_sum_valid``, the payload's one's-complement
sum, so that a reply with the same payload needs no second pass for its checksum.
"""

from apiary.noc.header import MsgType

from .headers import UDP, IpProtocol
from .layer import RxLayerTile, header_signal, ones_sum


__all__ = ["UdpRxTile", "pseudo_header_sum"]


def pseudo_header_sum(src_ip, dst_ip, protocol, length):
    """One's-complement sum of the IPv4 pseudo-header (RFC 768)."""
    return ones_sum(src_ip[16:32], src_ip[:16], dst_ip[16:32], dst_ip[:16], protocol, length)


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
    drop_reasons = ("truncated", "bad_length")
    verify_offset = 8
    max_packet = 1480

    def verify(self, m, v):
        udp = header_signal(m, UDP, v.first)
        total = ones_sum(pseudo_header_sum(v.meta.peer_ip, v.meta.local_ip,
                                           IpProtocol.UDP.value, udp.length),
                         udp.src_port, udp.dst_port, udp.length, udp.checksum, v.sum)
        ok = (udp.checksum == 0) | (total == 0xFFFF)
        return ok, {"l4_sum": v.sum, "l4_sum_valid": 1}

    def parse(self, m, p):
        udp = p.field(UDP)
        p.drop("truncated", p.head_len < 8)
        p.drop("bad_length", udp.length != p.length)
        p.key = udp.dst_port
        p.strip = 8
        p.set_meta(peer_port=udp.src_port, local_port=udp.dst_port)
