"""The messages of the Beehive stack: their types, and the metadata every one carries.

Message types (:class:`MsgType`) keep Beehive's values and are registered with the NoC
(:func:`~apiary.noc.msgtype.register_msg_types`).

Beehive gives each layer its own metadata flit (``eth_rx``, ``ip_rx``, ``udp_rx``...). Here one
layout, :data:`PACKET_META`, travels with a packet along its whole chain, receive path, application
and transmit path: each receive tile fills in what its header told it, and each transmit tile
builds its header from it. A message carries only the fields that exist at its layer, a prefix
of the layout (its low bits): :data:`ETH_META` between Ethernet RX and IPv4 RX and between IPv4 TX
and Ethernet TX, :data:`IP_META` between IPv4 and UDP/TCP/ICMP, all of it between UDP and the
application (:data:`PACKET_LEVELS`, registered per message type). A tile that takes one type
(``receives``) takes exactly that level; one that takes any (network functions, ARP) zeroes the
fields a message does not carry. The fields are named from this end's point of view (*peer* is the
client, *local* is the design), so an application replies by sending the metadata it received,
unchanged, to the transmit path, and the reply goes back to the MAC, VLAN, address and port the
request came from. That is also how replies find the client's MAC without an ARP table.

=============  =====  =========================================================================
field          bits   set by
=============  =====  =========================================================================
peer_mac       48     Ethernet RX (source MAC); Ethernet TX sends to it
ethertype      16     Ethernet RX (inner EtherType); the ARP and IPv4 TX paths set theirs
vlan           1      Ethernet RX: the frame had an 802.1Q tag; Ethernet TX adds one
vlan_tci       16     Ethernet RX: the tag's PCP, DEI and VID; Ethernet TX repeats them
peer_ip        32     IPv4 RX (source address); IPv4 TX's destination
local_ip       32     IPv4 RX (destination address); IPv4 TX's source
protocol       8      IPv4 RX; IPv4 TX
peer_port      16     UDP RX (source port); UDP TX's destination port
local_port     16     UDP RX (destination port); UDP TX's source port
l4_sum         16     UDP RX: one's-complement sum of the UDP payload (RFC 1071), valid if
l4_sum_valid   1      set; UDP TX then needs no pass over the payload for its checksum
=============  =====  =========================================================================

At 512 bits the metadata rides in the header flit, in the 256 bits below the header's fields
(:func:`apiary.noc.framing.meta_plan`), so a message costs one flit before its payload; at other
widths it takes flits after the header: at 64 bits 2 for the Ethernet level, 3 for IPv4, 4 for
all of it (``meta_words(width)``); 1 or 2 at 128, 1 at 256. A message descriptor's ``meta``
field is the metadata itself: ``PACKET_META.layout()`` views it.
"""

from amaranth.lib import enum

from apiary.noc.framing import meta_plan
from apiary.noc.msgtype import register_msg_types
from apiary.noc.spec import message_spec, register_formats
from apiary.stream.format import Field, Format


__all__ = ["MsgType", "PACKET_META", "ETH_META", "IP_META", "PACKET_LEVELS", "META_BITS",
           "packet_format", "meta_words", "meta_to_words", "meta_from_words"]


@register_msg_types
class MsgType(enum.Enum, shape=8):
    """Beehive's NoC message types, with Beehive's values, and four of ours for the TCP
    application interface (:mod:`beehive.proto.tcp.app`)."""
    ETH_TX_FRAME            = 1
    IP_RX_DATAGRAM          = 2
    TCP_RX_SEGMENT          = 3
    IP_TX_DATAGRAM          = 4
    TCP_NEW_FLOW_NOTIF      = 5
    TCP_RX_MSG_REQ          = 6
    TCP_RX_ADJUST_PTR       = 7
    TCP_RX_MSG_RESP         = 8
    TCP_TX_MSG_REQ          = 9
    TCP_TX_MSG_RESP         = 10
    TCP_TX_ADJUST_PTR       = 11
    ETH_RX_FRAME            = 12     # Beehive gives UDP_RX_SEGMENT the same value
    UDP_TX_SEGMENT          = 13
    IP_REWRITE_ADJUST_TABLE = 15
    TRACKER_MSG             = 16
    UDP_RX_SEGMENT          = 26     # distinct from ETH_RX_FRAME here; Beehive uses 12 for both
    TCP_OPEN_REQ            = 29     # not in Beehive (server-only): an application opens
    TCP_CLOSE_REQ           = 30     # not in Beehive: an application closes its side
    TCP_PEER_REQ            = 21     # not in Beehive: an application asks for a flow's peer
    TCP_PEER_RESP           = 22     # not in Beehive: ... and is told it


_ETH_FIELDS = [
    Field("peer_mac", 48, "Ethernet RX: source MAC; Ethernet TX sends to it"),
    Field("ethertype", 16, "Ethernet RX: inner EtherType; the ARP and IPv4 TX paths set theirs"),
    Field("vlan", 1, "the frame had (Ethernet TX: gets) an 802.1Q tag"),
    Field("vlan_tci", 16, "the tag's PCP, DEI and VID"),
]
_IP_FIELDS = [
    Field("peer_ip", 32, "IPv4 RX: source address; IPv4 TX's destination"),
    Field("local_ip", 32, "IPv4 RX: destination address; IPv4 TX's source"),
    Field("protocol", 8, "IPv4 protocol number"),
]
_L4_FIELDS = [
    Field("peer_port", 16, "UDP RX: source port; UDP TX's destination port"),
    Field("local_port", 16, "UDP RX: destination port; UDP TX's source port"),
    Field("l4_sum", 16, "UDP RX: one's-complement sum of the UDP payload"),
    Field("l4_sum_valid", 1, "l4_sum is set (UDP TX needs no pass over the payload)"),
]

PACKET_META = Format("packet_meta", _ETH_FIELDS + _IP_FIELDS + _L4_FIELDS, order="lsb",
                     doc="The metadata every packet carries along the Beehive stack, receive "
                         "path to transmit path.")
#: The fields an Ethernet-level message carries (Ethernet RX → IPv4 RX, IPv4 TX → Ethernet TX):
#: the first fields of :data:`PACKET_META`, at the same bits.
ETH_META = Format("eth_meta", _ETH_FIELDS, order="lsb",
                  doc="The Ethernet fields of packet_meta, all an Ethernet-level message carries.")
#: The fields an IPv4-level message carries (IPv4 RX → UDP/TCP RX, UDP/TCP TX → IPv4 TX).
IP_META = Format("ip_meta", _ETH_FIELDS + _IP_FIELDS, order="lsb",
                 doc="The Ethernet and IPv4 fields of packet_meta, all an IPv4-level message "
                     "carries.")

_PAYLOAD = "the packet from this layer's header on"
# The Ethernet and IPv4 hops carry the packet's first bytes in the header flit where their
# metadata leaves room (37 and 28 bytes at 512 bits): a 64-byte UDP echo is then two flits a hop.
register_formats((MsgType.ETH_RX_FRAME, MsgType.ETH_TX_FRAME), ETH_META, payload=_PAYLOAD,
                 head_payload=True)
register_formats((MsgType.IP_RX_DATAGRAM, MsgType.IP_TX_DATAGRAM), IP_META, payload=_PAYLOAD,
                 head_payload=True)
register_formats((MsgType.TCP_RX_SEGMENT,), IP_META, payload=_PAYLOAD)
register_formats((MsgType.UDP_RX_SEGMENT, MsgType.UDP_TX_SEGMENT), PACKET_META,
                 payload=_PAYLOAD)

#: Bits of :data:`PACKET_META`, as the tiles' message framing carries them.
META_BITS = PACKET_META.size

#: The formats a packet's messages carry by level, smallest first: each the first fields of
#: the next, so each is a prefix (the low bits) of :data:`PACKET_META`.
PACKET_LEVELS = (ETH_META, IP_META, PACKET_META)


def packet_format(msg_type) -> Format:
    """The metadata format a packet message of ``msg_type`` (a :class:`MsgType`, or its value)
    carries: one of :data:`PACKET_LEVELS`, :data:`PACKET_META` for any other type."""
    spec = message_spec(int(getattr(msg_type, "value", msg_type)))
    if spec is not None and spec.meta in PACKET_LEVELS:
        return spec.meta
    return PACKET_META


def meta_words(width):
    """Metadata flits per message at flit width ``width`` (0 at 512 bits: inline)."""
    flits, _, _ = meta_plan(width, meta_bits=PACKET_META.size)
    return flits


def meta_to_words(width, values=None, **kwargs):
    """The metadata (a dict and/or keywords) as ``meta_words(width)`` flit words, first first
    (none at 512 bits, where it is in the header flit)."""
    value = PACKET_META.pack(values, **kwargs)
    return [(value >> (width * k)) & ((1 << width) - 1) for k in range(meta_words(width))]


def meta_from_words(words, width):
    """The metadata fields (a dict) from a message's metadata words."""
    value = sum(int(w) << (width * k) for k, w in enumerate(words))
    return PACKET_META.unpack(value & ((1 << PACKET_META.size) - 1))
