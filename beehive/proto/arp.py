"""ARP (RFC 826): the header table, and the tile that answers requests for the design's address.

Messages
--------
In (``ETH_RX_FRAME`` from Ethernet RX, EtherType 0x0806): the ARP packet (with any Ethernet
padding). Out (``ETH_TX_FRAME`` to Ethernet TX): the 28-byte reply, metadata ``peer_mac`` (the
requester) and ``ethertype`` 0x0806, the request's VLAN tag kept.
"""

from amaranth import Signal
from amaranth.lib import enum

from apiary.stream.header import Header, header_view

from .addresses import local_addresses
from .ethernet import EtherType
from .layer import RxLayerTile
from .messages import MsgType


__all__ = ["ArpOperation", "ARP", "ARP_HTYPE_ETHERNET", "ArpTile"]


class ArpOperation(enum.Enum, shape=16):
    REQUEST = 1
    REPLY   = 2


#: ARP for IPv4 over Ethernet (RFC 826), 28 bytes.
ARP = Header("arp", [
    ("htype", 16), ("ptype", 16), ("hlen", 8), ("plen", 8), ("oper", 16),
    ("sha", 48), ("spa", 32), ("tha", 48), ("tpa", 32),
])
ARP_HTYPE_ETHERNET = 1


class ArpTile(RxLayerTile):
    """Answer every ARP request for the design's IPv4 address with its MAC.

    The reply goes to the requester's hardware address; nothing is stored, because every reply
    the design sends (ARP, ICMP, UDP) goes back to the MAC its request came from, carried in the
    packet's metadata. The Linux side therefore needs no static entry.

    Cut-through: the reply's first word leaves as soon as the request's first 28 bytes are in.
    Drops, each counted: ``truncated`` (under 28 bytes), ``unsupported`` (not IPv4 over
    Ethernet), ``not_request`` (replies, including gratuitous ARP), ``not_for_us`` (another
    target address), ``no_route``.
    """

    head_bytes = 28
    key_width = 1
    msg_type = MsgType.ETH_TX_FRAME
    drop_reasons = {
        "truncated": "packets shorter than 28 bytes",
        "unsupported": "ARP for other than IPv4 over Ethernet",
        "not_request": "replies (gratuitous ARP included)",
        "not_for_us": "requests for another address",
    }
    patch_bytes = 28

    def __init__(self, env=None):
        super().__init__(env)
        self.mac, self.ipv4 = local_addresses(self.env)

    def parse(self, m, p):
        req = p.field(ARP)
        p.drop("truncated", p.head_len < 28)
        p.drop("unsupported", (req.htype != ARP_HTYPE_ETHERNET)
               | (req.ptype != EtherType.IPV4.value) | (req.hlen != 6) | (req.plen != 4))
        p.drop("not_request", req.oper != ArpOperation.REQUEST.value)
        p.drop("not_for_us", req.tpa != self.ipv4)
        reply = Signal(8 * 28)
        rep = header_view(ARP, reply)
        m.d.comb += [
            rep.htype.eq(ARP_HTYPE_ETHERNET), rep.ptype.eq(EtherType.IPV4.value),
            rep.hlen.eq(6), rep.plen.eq(4), rep.oper.eq(ArpOperation.REPLY.value),
            rep.sha.eq(self.mac), rep.spa.eq(self.ipv4), rep.tha.eq(req.sha), rep.tpa.eq(req.spa),
        ]
        p.patch(reply, 28)
        p.out_length = 28
        p.set_meta(peer_mac=req.sha, ethertype=EtherType.ARP.value)
