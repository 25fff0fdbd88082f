"""Header tables and protocol numbers for Ethernet, 802.1Q, ARP, IPv4, ICMP echo and UDP.

Each protocol has one :class:`~apiary.noc.header.Header` table (fields MSB first, as the RFCs
draw them), from which its RX and TX tiles take the layout, and tests take ``to_bytes`` /
``from_bytes`` in network order. Nothing else lives here.
"""

from amaranth.lib import enum

from apiary.noc.header import Header


__all__ = ["EtherType", "IpProtocol", "ArpOperation", "IcmpType",
           "ETHERNET", "VLAN", "ARP", "IPV4", "ICMP_ECHO", "UDP",
           "ARP_HTYPE_ETHERNET", "IPV4_VERSION", "IPV4_MIN_IHL", "IPV4_FLAG_DF", "IPV4_FLAG_MF"]


class EtherType(enum.Enum, shape=16):
    IPV4 = 0x0800
    ARP  = 0x0806
    VLAN = 0x8100       # the 802.1Q tag protocol identifier


class IpProtocol(enum.Enum, shape=8):
    ICMP = 1
    TCP  = 6
    UDP  = 17


class ArpOperation(enum.Enum, shape=16):
    REQUEST = 1
    REPLY   = 2


class IcmpType(enum.Enum, shape=8):
    ECHO_REPLY   = 0
    ECHO_REQUEST = 8


#: Ethernet II header, 14 bytes.
ETHERNET = Header("ethernet", [("dst", 48), ("src", 48), ("ethertype", 16)])

#: An 802.1Q tag as it sits after the source address: TPID (0x8100), tag control information,
#: then the EtherType of what follows; 6 bytes, so a tagged Ethernet header is 12 + 6 bytes.
VLAN = Header("vlan", [("tpid", 16), ("pcp", 3), ("dei", 1), ("vid", 12), ("ethertype", 16)])

#: ARP for IPv4 over Ethernet (RFC 826), 28 bytes.
ARP = Header("arp", [
    ("htype", 16), ("ptype", 16), ("hlen", 8), ("plen", 8), ("oper", 16),
    ("sha", 48), ("spa", 32), ("tha", 48), ("tpa", 32),
])
ARP_HTYPE_ETHERNET = 1

#: The fixed 20-byte IPv4 header (RFC 791); options, if ``ihl > 5``, follow it.
IPV4 = Header("ipv4", [
    ("version", 4), ("ihl", 4), ("dscp", 6), ("ecn", 2), ("total_length", 16),
    ("identification", 16), ("flags", 3), ("fragment_offset", 13),
    ("ttl", 8), ("protocol", 8), ("checksum", 16),
    ("src", 32), ("dst", 32),
])
IPV4_VERSION = 4
IPV4_MIN_IHL = 5
IPV4_FLAG_DF = 0b010    # in ``flags``, whose MSB is reserved
IPV4_FLAG_MF = 0b001

#: ICMP echo request and reply (RFC 792), 8 bytes before the data.
ICMP_ECHO = Header("icmp_echo", [
    ("type", 8), ("code", 8), ("checksum", 16), ("identifier", 16), ("sequence", 16),
])

#: UDP (RFC 768), 8 bytes.
UDP = Header("udp", [("src_port", 16), ("dst_port", 16), ("length", 16), ("checksum", 16)])
