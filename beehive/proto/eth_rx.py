"""Ethernet receive: frames from the MAC to the NoC, by EtherType.

Message out (``ETH_RX_FRAME``, to the next hop for the frame's EtherType): the frame without its
Ethernet header (and 802.1Q tag), metadata ``peer_mac``, ``ethertype``, ``vlan``, ``vlan_tci``
(:mod:`beehive.proto.meta`). Payload length is the frame's, padding included: the IPv4 layer
trims it to the datagram's total length.
"""

from amaranth import Cat, Mux
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.flit import payload_signature
from apiary.noc.header import MsgType
from apiary.noc.packet_buffer import PacketBuffer

from .headers import ETHERNET, VLAN, EtherType
from .layer import RxLayerTile, buffered_packets
from .meta import local_addresses


__all__ = ["EthernetRxTile"]

BROADCAST = (1 << 48) - 1


class EthernetRxTile(RxLayerTile):
    """Receive Ethernet frames from ``mac_rx``, strip the Ethernet header (14 bytes, or 18 with an
    802.1Q tag), and send the rest to the next hop for its EtherType.

    The NoC header needs the payload length before the payload, and a MAC only knows a frame is
    good at its end, so each frame is stored whole first (a :class:`PacketBuffer`,
    store-and-forward, one frame's words of latency; every later tile is cut-through). ``mac_rx``
    is never back-pressured.

    Drops, each counted: ``oversized`` (longer than ``max_frame``, malformed words, or no room
    in the buffer), ``runt`` (shorter than its Ethernet header), ``not_for_us`` (destination
    neither the design's MAC nor broadcast), ``no_route`` (an EtherType with no next hop).

    Parameters
    ----------
    env : TileEnv
        ``settings["mac"]`` is the design's MAC (default ``02:00:00:00:00:02``).
    max_frame : int
        Longest frame accepted, in bytes, without FCS (default 1518: 1500-byte MTU, 802.1Q tag).
    buffer_bytes : int or None
        Receive buffer (default ``4 * max_frame``).
    """

    head_bytes = 18
    max_strip = 18
    strip_counts = (14, 18)
    key_width = 16
    msg_type = MsgType.ETH_RX_FRAME
    drop_reasons = ("runt", "not_for_us")

    def __init__(self, env=None, *, max_frame=1518, buffer_bytes=None, max_queued=32):
        width = env.width if env else 512
        super().__init__(env, {"mac_rx": In(payload_signature(width)), "oversized": Out(32)})
        self.mac, _ = local_addresses(self.env)
        self.max_frame = max_frame
        self.buffer_bytes = buffer_bytes if buffer_bytes is not None else 4 * max_frame
        self.max_queued = max_queued

    def source(self, m):
        m.submodules.frames = buf = PacketBuffer(
            self.env.width, max_bytes=self.max_frame, buffer_bytes=self.buffer_bytes,
            max_queued=self.max_queued, verdict=False, always_ready=True)
        connect(m, mac=flipped(self.mac_rx), frames=buf.i)
        m.d.comb += self.oversized.eq(buf.overflow)
        return buffered_packets(m, buf)

    def parse(self, m, p):
        eth = p.field(ETHERNET)
        tag = p.field(VLAN, 12)
        tagged = eth.ethertype == EtherType.VLAN.value
        p.drop("runt", p.head_len < Mux(tagged, 18, 14))
        p.drop("not_for_us", (eth.dst != self.mac) & (eth.dst != BROADCAST))
        p.key = Mux(tagged, tag.ethertype, eth.ethertype)
        p.strip = Mux(tagged, 18, 14)
        p.set_meta(peer_mac=eth.src, ethertype=p.key, vlan=tagged,
                   vlan_tci=Cat(tag.vid, tag.dei, tag.pcp))
