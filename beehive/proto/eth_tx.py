"""Ethernet transmit: NoC messages to frames for the MAC.

Message in (``ETH_TX_FRAME``): the frame's payload, with metadata ``peer_mac`` (destination),
``ethertype``, ``vlan`` and ``vlan_tci`` (:mod:`beehive.proto.meta`).
"""

from amaranth import Mux, Signal
from amaranth.lib.wiring import Out, connect, flipped

from apiary.noc.flit import payload_signature
from apiary.noc.header import MsgType

from .headers import ETHERNET, VLAN, EtherType
from .layer import TxLayerTile, header_view
from .meta import local_addresses


__all__ = ["EthernetTxTile"]


class EthernetTxTile(TxLayerTile):
    """Put an Ethernet header (destination ``peer_mac``, source the design's MAC, and an 802.1Q
    tag when ``vlan`` is set) in front of every message's payload and send it on ``mac_tx``.

    Cut-through: the first word leaves in the cycle the message's payload arrives (the header
    fills the first word at 128 bits and above). Frames are not padded to 60 bytes; the MAC does
    that (LiteEth's padding inserter, or the kernel for a TAP device). Nothing is dropped.

    Members
    -------
    mac_tx : Out(payload_signature(width))
        Frames to the MAC.
    forwarded : Out(32)
        Frames sent (counted when their header is built).
    """

    max_header = 18
    fixed = False
    header_counts = (14, 18)
    msg_type = MsgType.ETH_TX_FRAME

    def __init__(self, env=None):
        width = env.width if env else 512
        super().__init__(env, {"mac_tx": Out(payload_signature(width))})
        self.mac, _ = local_addresses(self.env)

    def build(self, m, length, meta):
        header = Signal(8 * self.max_header)
        eth = header_view(ETHERNET, header)
        tag = header_view(VLAN, header, 12)
        m.d.comb += [
            eth.dst.eq(meta.peer_mac),
            eth.src.eq(self.mac),
            eth.ethertype.eq(Mux(meta.vlan, EtherType.VLAN.value, meta.ethertype)),
            tag.pcp.eq(meta.vlan_tci[13:16]),
            tag.dei.eq(meta.vlan_tci[12]),
            tag.vid.eq(meta.vlan_tci[:12]),
            tag.ethertype.eq(meta.ethertype),
        ]
        return header, Mux(meta.vlan, 18, 14), {}

    def sink(self, m, desc, o):
        m.d.comb += desc.ready.eq(1)
        with m.If(desc.valid):
            m.d.sync += self.forwarded.eq(self.forwarded + 1)
        connect(m, insert=o, mac=flipped(self.mac_tx))
