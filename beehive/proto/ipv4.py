"""IPv4 (RFC 791): the header table, the pseudo-header sum, and the receive and transmit tiles.

Messages
--------
Into IPv4 RX (``ETH_RX_FRAME``): the IPv4 datagram, possibly followed by Ethernet padding. Out
of it (``IP_RX_DATAGRAM``, to the next hop for the protocol number): the datagram's payload
(options skipped, padding trimmed), metadata ``peer_ip``, ``local_ip`` and ``protocol`` added
(:data:`~beehive.proto.messages.PACKET_META`).

Into IPv4 TX (``IP_TX_DATAGRAM``): the datagram's payload, metadata ``peer_ip`` (destination),
``local_ip`` (source) and ``protocol``. Out of it (``ETH_TX_FRAME``): the datagram, metadata
``ethertype`` set to IPv4.
"""

from amaranth import Cat, Const, Signal
from amaranth.lib import enum

from apiary.stream.checksum import ones_sum, word_sum
from apiary.stream.header import Header, header_view

from .addresses import address_members, address_source, tile_addresses
from .ethernet import EtherType
from .layer import RxLayerTile, TxLayerTile
from .messages import MsgType


__all__ = ["IpProtocol", "IPV4", "IPV4_VERSION", "IPV4_MIN_IHL", "IPV4_FLAG_DF", "IPV4_FLAG_MF",
           "pseudo_header_terms", "pseudo_header_sum", "Ipv4RxTile", "Ipv4RxNoOptionsTile",
           "Ipv4TxTile"]


class IpProtocol(enum.Enum, shape=8):
    ICMP = 1
    TCP  = 6
    UDP  = 17


#: The fixed 20-byte IPv4 header (RFC 791); options, if ``ihl > 5``, follow it.
IPV4 = Header("ipv4", [
    ("version", 4), ("ihl", 4), ("dscp", 6), ("ecn", 2), ("total_length", 16),
    ("identification", 16), ("flags", 3), ("fragment_offset", 13),
    ("ttl", 8), ("protocol", 8), ("checksum", 16),
    ("src", 32), ("dst", 32),
])
IPV4_VERSION = 4
IPV4_MIN_IHL = 5
#: The ports of a UDP header right after a 20-byte IPv4 header, and the DHCP client's port:
#: what IPv4 RX looks at to let a DHCP server's broadcast in (``runtime_addresses="dhcp"``).
_UDP_PORTS = Header("udp_ports", [("src_port", 16), ("dst_port", 16)])
_DHCP_CLIENT_PORT = 68
IPV4_FLAG_DF = 0b010    # in ``flags``, whose MSB is reserved
IPV4_FLAG_MF = 0b001


def pseudo_header_terms(src_ip, dst_ip, protocol, length):
    """The 16-bit words of the IPv4 pseudo-header that UDP and TCP checksums cover (RFC 768):
    source and destination address, protocol, transport length."""
    return [src_ip[16:32], src_ip[:16], dst_ip[16:32], dst_ip[:16], protocol, length]


def pseudo_header_sum(src_ip, dst_ip, protocol, length):
    """One's-complement sum of the IPv4 pseudo-header (:func:`pseudo_header_terms`)."""
    return ones_sum(*pseudo_header_terms(src_ip, dst_ip, protocol, length))


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
    receives = MsgType.ETH_RX_FRAME
    drop_reasons = {
        "truncated": "datagrams shorter than their header",
        "bad_version": "a version other than 4",
        "bad_header_length": "an IHL below 5",
        "bad_checksum": "a wrong header checksum",
        "bad_length": "a total length below the header's or above the bytes received",
        "fragment": "fragments (not reassembled)",
        "ttl_expired": "a TTL of 0",
        "not_for_us": "datagrams to another address",
    }

    #: IP options are skipped (``False``: datagrams with options are dropped, see
    #: :class:`Ipv4RxNoOptionsTile`).
    options = True


    def __init__(self, env=None):
        super().__init__(env, address_members(env))
        _, self.ipv4 = tile_addresses(self)
        # With a DHCP client, broadcasts to its port pass too (the server's OFFER and ACK
        # come to 255.255.255.255 before the design has an address).
        self.dhcp = address_source(self.env) == "dhcp"
        if self.dhcp:
            self.head_bytes = max(self.head_bytes, 24)

    def parse(self, m, p):
        ip = p.field(IPV4)
        if self.options:
            header_len = Cat(Const(0, 2), ip.ihl)
            checksum = word_sum(p.head, Cat(Const(0, 1), ip.ihl), stage=p.stage, m=m)
        else:
            header_len = Const(20, 6)
            checksum = word_sum(p.head, 10, stage=p.stage, m=m)
        p.drop("truncated", (p.head_len < 20) | (p.head_len < header_len))
        p.drop("bad_version", ip.version != IPV4_VERSION)
        p.drop("bad_header_length", ip.ihl < IPV4_MIN_IHL)
        if not self.options:
            p.drop("options", ip.ihl != IPV4_MIN_IHL)
        p.drop("bad_checksum", checksum != 0xFFFF)
        p.drop("bad_length", (ip.total_length < header_len) | (ip.total_length > p.length))
        p.drop("fragment", (ip.flags & IPV4_FLAG_MF).any() | (ip.fragment_offset != 0))
        p.drop("ttl_expired", ip.ttl == 0)
        for_us = ip.dst == self.ipv4
        if self.dhcp:
            ports = p.field(_UDP_PORTS, 20)
            for_us = (for_us & (self.ipv4 != 0)) | (
                (ip.dst == 0xFFFF_FFFF) & (ip.protocol == IpProtocol.UDP.value)
                & (ip.ihl == IPV4_MIN_IHL) & (ports.dst_port == _DHCP_CLIENT_PORT))
        p.drop("not_for_us", ~for_us)
        p.key = ip.protocol
        p.strip = header_len
        p.out_length = ip.total_length - header_len
        p.set_meta(peer_ip=ip.src, local_ip=ip.dst, protocol=ip.protocol)


class Ipv4RxNoOptionsTile(Ipv4RxTile):
    """:class:`Ipv4RxTile` for small FPGAs: the fixed 20-byte header only. A datagram with IP
    options (IHL above 5, rare on today's networks) is dropped and counted in ``options``; in
    exchange the tile peeks at 20 bytes instead of 60, sums a fixed 10-word header and strips a
    fixed 20 bytes (no variable realignment). Everything else is :class:`Ipv4RxTile`'s."""

    head_bytes = 20
    max_strip = 20
    strip_counts = (20,)
    options = False
    drop_reasons = dict([
        *list(Ipv4RxTile.drop_reasons.items())[:3],        # up to bad_header_length
        ("options", "datagrams with IP options (not supported by this tile)"),
        *list(Ipv4RxTile.drop_reasons.items())[3:],
    ])


class Ipv4TxTile(TxLayerTile):
    """Put a 20-byte IPv4 header (no options, DF set, identification 0, TTL ``ttl``, checksum
    computed) in front of every message's payload.

    Cut-through: the header depends on the metadata and length only. Nothing is dropped except
    when the tile has no single next hop (``no_route``).
    """

    max_header = 20
    msg_type = MsgType.ETH_TX_FRAME
    receives = MsgType.IP_TX_DATAGRAM

    def __init__(self, env=None, *, ttl=64):
        if not isinstance(ttl, int) or not 1 <= ttl <= 255:
            raise ValueError(f"ttl must be an integer from 1 to 255, not {ttl!r}")
        super().__init__(env)
        self.ttl = ttl

    def build(self, m, length, meta, stage):
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
            final.checksum.eq(~word_sum(plain, 10, stage=stage)),
        ]
        return header, 20, {"ethertype": EtherType.IPV4.value}
