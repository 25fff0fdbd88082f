"""IPv4 receive: datagrams from Ethernet RX to the transport tiles, by protocol.

Message in (``ETH_RX_FRAME``): the IPv4 datagram, possibly followed by Ethernet padding.
Message out (``IP_RX_DATAGRAM``, to the next hop for the protocol number): the datagram's
payload (options skipped, padding trimmed), metadata ``peer_ip``, ``local_ip`` and ``protocol``
added (:mod:`beehive.proto.meta`).
"""

from amaranth import Cat, Const

from apiary.noc.header import MsgType

from .headers import IPV4, IPV4_FLAG_MF, IPV4_MIN_IHL, IPV4_VERSION
from .layer import RxLayerTile, fold16
from .meta import local_addresses


__all__ = ["Ipv4RxTile", "header_sum"]


def header_sum(head, words):
    """One's-complement sum of the first ``words`` (a value) big-endian 16-bit words of ``head``
    (lane order), at most ``len(head) // 16`` of them."""
    total = Const(0, 16)
    terms = []
    for k in range(len(head) // 16):
        word = Cat(head[16 * k + 8:16 * k + 16], head[16 * k:16 * k + 8])
        if isinstance(words, int):
            if k < words:
                terms.append(word)
        else:
            terms.append(word & (words > k).replicate(16))
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[0::2], terms[1::2])] + terms[len(terms) & ~1:]
    return fold16(terms[0] if terms else total)


class Ipv4RxTile(RxLayerTile):
    """Check an IPv4 header, strip it (options included) and send the payload on by protocol.

    Cut-through: the payload streams on once the header (up to 60 bytes) is in; the verdict is
    taken from the header alone. The header checksum covers exactly ``ihl * 4`` bytes.

    Drops, each counted once, in this order: ``truncated`` (shorter than its header),
    ``bad_version``, ``bad_header_length`` (IHL below 5), ``bad_checksum``, ``bad_length``
    (total length below the header's, or above the bytes received: the frame was cut),
    ``fragment`` (MF set or a fragment offset: fragments are not reassembled),
    ``ttl_expired`` (TTL 0), ``not_for_us`` (another destination address), ``no_route``
    (a protocol with no next hop). Bytes past the total length (Ethernet padding) are trimmed.
    """

    head_bytes = 60
    max_strip = 60
    strip_counts = tuple(range(20, 61, 4))
    key_width = 8
    msg_type = MsgType.IP_RX_DATAGRAM
    drop_reasons = ("truncated", "bad_version", "bad_header_length", "bad_checksum",
                    "bad_length", "fragment", "ttl_expired", "not_for_us")

    def __init__(self, env=None):
        super().__init__(env)
        _, self.ipv4 = local_addresses(self.env)

    def parse(self, m, p):
        ip = p.field(IPV4)
        header_len = Cat(Const(0, 2), ip.ihl)
        p.drop("truncated", (p.head_len < 20) | (p.head_len < header_len))
        p.drop("bad_version", ip.version != IPV4_VERSION)
        p.drop("bad_header_length", ip.ihl < IPV4_MIN_IHL)
        p.drop("bad_checksum", header_sum(p.head, Cat(Const(0, 1), ip.ihl)) != 0xFFFF)
        p.drop("bad_length", (ip.total_length < header_len) | (ip.total_length > p.length))
        p.drop("fragment", (ip.flags & IPV4_FLAG_MF).any() | (ip.fragment_offset != 0))
        p.drop("ttl_expired", ip.ttl == 0)
        p.drop("not_for_us", ip.dst != self.ipv4)
        p.key = ip.protocol
        p.strip = header_len
        p.out_length = ip.total_length - header_len
        p.set_meta(peer_ip=ip.src, local_ip=ip.dst, protocol=ip.protocol)
