"""Ethernet II with 802.1Q: the header table, and the receive and transmit tiles at the MAC.

Messages
--------
``ETH_RX_FRAME`` (Ethernet RX → the next hop for the frame's EtherType): the frame without its
Ethernet header (and 802.1Q tag), metadata ``peer_mac``, ``ethertype``, ``vlan``, ``vlan_tci``
(:data:`~beehive.proto.messages.PACKET_META`). Payload length is the frame's, padding included:
the IPv4 layer trims it to the datagram's total length.

``ETH_TX_FRAME`` (into Ethernet TX): the frame's payload, with metadata ``peer_mac``
(destination), ``ethertype``, ``vlan`` and ``vlan_tci``.

Both tiles face a MAC through :class:`~apiary.stream.mac.FrameStream` ports (``mac_rx``,
``mac_tx``), which the design's top level gives a MAC edge.
"""

from amaranth import Cat, Mux, Signal
from amaranth.lib import enum
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.stream.header import Header, header_view
from apiary.stream.mac import FrameStream
from apiary.stream.packet_buffer import PacketBuffer

from .addresses import address_members, tile_addresses
from .layer import RxLayerTile, TxLayerTile, buffered_packets, early_first_word
from .messages import MsgType
from apiary.stream.counters import count


__all__ = ["EtherType", "ETHERNET", "VLAN", "BROADCAST", "EthernetRxTile", "EthernetTxTile",
           "vlan_tags"]


class EtherType(enum.Enum, shape=16):
    IPV4 = 0x0800
    ARP  = 0x0806
    VLAN = 0x8100       # the 802.1Q tag protocol identifier


#: Ethernet II header, 14 bytes.
ETHERNET = Header("ethernet", [("dst", 48), ("src", 48), ("ethertype", 16)])

#: An 802.1Q tag as it sits after the source address: TPID (0x8100), tag control information,
#: then the EtherType of what follows; 6 bytes, so a tagged Ethernet header is 12 + 6 bytes.
VLAN = Header("vlan", [("tpid", 16), ("pcp", 3), ("dei", 1), ("vid", 12), ("ethertype", 16)])

BROADCAST = (1 << 48) - 1


def vlan_tags(env):
    """Whether Ethernet RX and TX handle 802.1Q tags: the design setting ``vlan``, on by
    default. Off (as in LiteEth's stack), Ethernet RX takes a tagged frame's EtherType to be
    the tag's, 0x8100, for which there is no next hop, so it drops and counts it under
    ``no_route``; Ethernet TX sends every frame untagged (a message's ``vlan`` is ignored);
    and both realign by the one fixed count, 14 bytes: on the 25F's UDP echo about 500 LUT4s
    fewer (docs/performance.md)."""
    return bool(env.settings.get("vlan", True))


class EthernetRxTile(RxLayerTile):
    """Receive Ethernet frames from ``mac_rx``, strip the Ethernet header (14 bytes, or 18 with an
    802.1Q tag), and send the rest to the next hop for its EtherType.

    The NoC header needs the payload length before the payload, and a MAC only knows a frame is
    good at its end, so each frame is stored whole first (a :class:`PacketBuffer`,
    store-and-forward, one frame's words of latency; every later tile is cut-through). ``mac_rx``
    is never back-pressured.

    Drops, each counted: ``bad_fcs`` (the MAC saw a bad FCS: the frame ends with an abort word),
    ``oversized`` (longer than ``max_frame``, or malformed words), ``buffer_full`` (no room in
    the buffer: frames arriving faster than the next hops take them), ``runt`` (shorter than its
    Ethernet header), ``not_for_us`` (destination neither the design's MAC nor broadcast),
    ``no_route`` (an EtherType with no next hop).

    Parameters
    ----------
    env : TileEnv
        ``settings["mac"]`` is the design's MAC (default ``02:00:00:00:00:02``);
        ``settings["vlan"]`` off leaves tagged frames unhandled (:func:`vlan_tags`).
    max_frame : int
        Longest frame accepted, in bytes, without FCS (default 1518: 1500-byte MTU, 802.1Q tag).
    buffer_bytes : int or None
        Receive buffer (default ``4 * max_frame``).
    """

    head_bytes = 18
    max_strip = 18
    strip_counts: tuple[int, ...] | None = (14, 18)
    key_width = 16
    msg_type = MsgType.ETH_RX_FRAME
    inputs = ()                     # frames come from the MAC (mac_rx), not the NoC
    drop_reasons = {
        "runt": "frames shorter than their Ethernet header",
        "not_for_us": "frames to another MAC than the design's or broadcast",
    }

    def __init__(self, env=None, *, max_frame=1518, buffer_bytes=None, max_queued=32):
        width = env.width if env else 512
        super().__init__(env, {"mac_rx": In(FrameStream(width)), **address_members(env)},
                         counters={
                             "oversized": "frames over max_frame, or malformed",
                             "buffer_full": "frames that found the receive buffer full",
                             "bad_fcs": "frames the MAC marked bad (FCS error)",
                         })
        self.mac, _ = tile_addresses(self)
        self.vlan = vlan_tags(self.env)
        if not self.vlan:
            self.head_bytes = self.max_strip = 14
            self.strip_counts = None
        self.max_frame = max_frame
        self.buffer_bytes = buffer_bytes if buffer_bytes is not None else 4 * max_frame
        self.max_queued = max_queued

    def source(self, m):
        m.submodules.frames = buf = PacketBuffer(
            self.env.width, max_bytes=self.max_frame, buffer_bytes=self.buffer_bytes,
            max_queued=self.max_queued, verdict=False, always_ready=True, count_no_room=True,
            first_word_with_desc=early_first_word(self.env))
        connect(m, mac=flipped(self.mac_rx), frames=buf.i)
        m.d.comb += [
            self.counters.oversized.eq(buf.overflow),
            self.counters.buffer_full.eq(buf.no_room),
            self.counters.bad_fcs.eq(buf.aborted),
        ]
        return buffered_packets(m, buf)

    def parse(self, m, p):
        eth = p.field(ETHERNET)
        if not self.vlan:
            p.drop("runt", p.head_len < 14)
            p.drop("not_for_us", (eth.dst != self.mac) & (eth.dst != BROADCAST))
            p.key = eth.ethertype
            p.strip = 14
            p.set_meta(peer_mac=eth.src, ethertype=eth.ethertype)
            return
        tag = p.field(VLAN, 12)
        tagged = eth.ethertype == EtherType.VLAN.value
        p.drop("runt", p.head_len < Mux(tagged, 18, 14))
        p.drop("not_for_us", (eth.dst != self.mac) & (eth.dst != BROADCAST))
        p.key = Mux(tagged, tag.ethertype, eth.ethertype)
        p.strip = Mux(tagged, 18, 14)
        p.set_meta(peer_mac=eth.src, ethertype=p.key, vlan=tagged,
                   vlan_tci=Cat(tag.vid, tag.dei, tag.pcp))


class EthernetTxTile(TxLayerTile):
    """Put an Ethernet header (destination ``peer_mac``, source the design's MAC, and an 802.1Q
    tag when ``vlan`` is set) in front of every message's payload and send it on ``mac_tx``.

    Cut-through: the first word leaves in the cycle the message's payload arrives (the header
    fills the first word at 128 bits and above). Frames are not padded to 60 bytes here; the MAC
    edge does that where the MAC does not (:class:`~apiary.stream.mac.MacOptions`). Nothing is
    dropped. With the design setting ``vlan`` off (:func:`vlan_tags`) every frame goes untagged.

    Members
    -------
    mac_tx : Out(FrameStream(width))
        Frames to the MAC.

    Counters: ``forwarded``, frames sent (counted when their header is built).
    """

    max_header = 18
    fixed = False
    header_counts: tuple[int, ...] | None = (14, 18)
    msg_type = MsgType.ETH_TX_FRAME
    receives = MsgType.ETH_TX_FRAME
    outputs = ()                    # frames go to the MAC (mac_tx), not the NoC

    def __init__(self, env=None):
        width = env.width if env else 512
        super().__init__(env, {"mac_tx": Out(FrameStream(width)), **address_members(env)})
        self.mac, _ = tile_addresses(self)
        self.vlan = vlan_tags(self.env)
        if not self.vlan:
            self.max_header, self.fixed, self.header_counts = 14, True, None

    def build(self, m, length, meta, stage):
        header = Signal(8 * self.max_header)
        eth = header_view(ETHERNET, header)
        if not self.vlan:
            m.d.comb += [
                eth.dst.eq(meta.peer_mac),
                eth.src.eq(self.mac),
                eth.ethertype.eq(meta.ethertype),
            ]
            return header, 14, {}
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
            count(m, self.counters.forwarded)
        connect(m, insert=o, mac=flipped(self.mac_tx))
