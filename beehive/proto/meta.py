"""The metadata every Beehive protocol message carries, and the design's own addresses.

Beehive gives each layer its own metadata flit (``eth_rx``, ``ip_rx``, ``udp_rx``...). Here one
layout, :data:`PACKET_META`, travels with a packet along its whole chain, receive path, application
and transmit path: each receive tile fills in what its header told it, and each transmit tile
builds its header from it. The fields are named from this end's point of view (*peer* is the
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
widths it takes ``meta_words(width)`` flits after the header: 4 at 64 bits, 2 at 128, 1 at 256.
A message descriptor's ``meta`` field is the metadata itself: ``PACKET_META.layout()`` views it.
"""

import ipaddress

from apiary.noc.framing import meta_plan
from apiary.noc.header import Header


__all__ = ["PACKET_META", "meta_words", "meta_to_words", "meta_from_words",
           "DEFAULT_MAC", "DEFAULT_IPV4", "mac_to_int", "ipv4_to_int", "int_to_mac",
           "int_to_ipv4", "local_addresses"]


PACKET_META = Header("packet_meta", [
    ("peer_mac", 48), ("ethertype", 16), ("vlan", 1), ("vlan_tci", 16),
    ("peer_ip", 32), ("local_ip", 32), ("protocol", 8),
    ("peer_port", 16), ("local_port", 16),
    ("l4_sum", 16), ("l4_sum_valid", 1),
])

DEFAULT_MAC = "02:00:00:00:00:02"
DEFAULT_IPV4 = "10.0.0.2"


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


def mac_to_int(text):
    """``"02:00:00:00:00:02"`` → ``0x020000000002``; raises :class:`ValueError` naming the text."""
    parts = str(text).replace("-", ":").split(":")
    try:
        if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
            raise ValueError
        return int("".join(p.zfill(2) for p in parts), 16)
    except ValueError:
        raise ValueError(f"{text!r} is not a MAC address (six hex bytes such as "
                         f"{DEFAULT_MAC})") from None


def int_to_mac(value):
    return ":".join(f"{(value >> (8 * k)) & 0xFF:02x}" for k in reversed(range(6)))


def ipv4_to_int(text):
    """``"10.0.0.2"`` → ``0x0A000002``; raises :class:`ValueError` naming the text."""
    try:
        return int(ipaddress.IPv4Address(str(text)))
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv4 address (such as {DEFAULT_IPV4})") from None


def int_to_ipv4(value):
    return str(ipaddress.IPv4Address(value))


def local_addresses(env):
    """``(mac, ipv4)`` as integers from the ``settings`` (``"mac"``, ``"ipv4"``) of a tile's
    env or of a design, defaulting to :data:`DEFAULT_MAC` and :data:`DEFAULT_IPV4`."""
    settings = env.settings
    return (mac_to_int(settings.get("mac", DEFAULT_MAC)),
            ipv4_to_int(settings.get("ipv4", DEFAULT_IPV4)))
