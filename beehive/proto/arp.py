"""ARP: answer requests for the design's IPv4 address.

Message in (``ETH_RX_FRAME`` from Ethernet RX, EtherType 0x0806): the ARP packet (with any
Ethernet padding). Message out (``ETH_TX_FRAME`` to Ethernet TX): the 28-byte reply, metadata
``peer_mac`` (the requester) and ``ethertype`` 0x0806, the request's VLAN tag kept.
"""

from amaranth import Signal

from apiary.noc.header import MsgType

from .headers import ARP, ARP_HTYPE_ETHERNET, ArpOperation, EtherType
from .layer import RxLayerTile, header_view
from .meta import local_addresses


__all__ = ["ArpTile"]


class ArpTile(RxLayerTile):
    """Answer every ARP request (RFC 826) for the design's IPv4 address with its MAC.

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
    drop_reasons = ("truncated", "unsupported", "not_request", "not_for_us")
    patch_bytes = 28

    def __init__(self, env=None):
        super().__init__(env)
        self.mac, self.ipv4 = local_addresses(self.env)

    def parse(self, m, p):
        req = p.field(ARP)
        p.drop("truncated", p.head_len < 28)
        p.drop("unsupported", (req.htype != ARP_HTYPE_ETHERNET) | (req.ptype != EtherType.IPV4.value)
               | (req.hlen != 6) | (req.plen != 4))
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
