"""A Python model of what the UDP echo stack answers, for tests and for users' own checks.

:func:`echo_reply` takes one frame as it arrives on the wire (without FCS) and returns what the
design built by ``examples/udp_echo.py`` sends back (or ``None``) and the counter that records
it, e.g. ``"udp_rx_forwarded"`` or ``"ip_rx_bad_checksum"``. Requests are parsed here by hand,
byte by byte, as the tiles parse them; replies are built with scapy, independently of the
hardware, so a test comparing the two checks both the parsing and the header building.
"""

import struct

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from apiary.stream.checksum import internet_checksum, ones_complement_sum

from .proto.addresses import (DEFAULT_IPV4, DEFAULT_MAC, int_to_ipv4, int_to_mac, ipv4_to_int,
                              mac_to_int)


__all__ = ["echo_reply", "MAX_FRAME"]

#: Longest frame Ethernet RX accepts (bytes, without FCS): a 1500-byte MTU and an 802.1Q tag.
MAX_FRAME = 1518
#: Longest IP payload the checksum-verifying tiles (UDP RX, ICMP) store.
MAX_L4 = 1480
BROADCAST = b"\xff" * 6


def echo_reply(frame, *, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=7, ttl=64, ip_options=True,
               verify_checksums=True, vlan=True):
    """``(reply, counter)``: the frame the echo design sends for ``frame`` (bytes, or ``None``
    if it sends nothing) and the name of the counter that counts what happened.
    ``ip_options`` and ``verify_checksums`` are the design's (``udp_echo.design``): without
    options a datagram with any is dropped (``ip_rx_options``); without verification UDP and
    ICMP checksums are not checked, a UDP reply carries checksum 0 and an ICMP reply the
    request's checksum updated for the new type (RFC 1624), right only if the request's was.
    ``vlan`` is the design setting (:func:`beehive.proto.ethernet.vlan_tags`): without it a
    tagged frame has EtherType 0x8100, which goes nowhere (``eth_rx_no_route``)."""
    frame = bytes(frame)
    my_mac, my_ip = mac_to_int(mac).to_bytes(6, "big"), ipv4_to_int(ipv4)
    if len(frame) > MAX_FRAME:
        return None, "eth_rx_oversized"
    if len(frame) < 14:
        return None, "eth_rx_runt"
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    tag = None
    header = 14
    if vlan and ethertype == 0x8100:
        if len(frame) < 18:
            return None, "eth_rx_runt"
        tag, ethertype = struct.unpack_from("!HH", frame, 14)
        header = 18
    if frame[:6] not in (my_mac, BROADCAST):
        return None, "eth_rx_not_for_us"
    peer_mac = frame[6:12]
    body = frame[header:]

    def ether(inner_type):
        eth = Ether(dst=int_to_mac(int.from_bytes(peer_mac, "big")), src=mac)
        if tag is None:
            eth.type = inner_type
            return eth
        return eth / Dot1Q(prio=tag >> 13, dei=(tag >> 12) & 1, vlan=tag & 0xFFF,
                           type=inner_type)

    if ethertype == 0x0806:
        return _arp(body, ether, mac, ipv4, my_ip)
    if ethertype != 0x0800:
        return None, "eth_rx_no_route"
    return _ipv4(body, ether, mac, ipv4, my_ip, port, ttl, ip_options, verify_checksums)


def _arp(body, ether, mac, ipv4, my_ip):
    if len(body) < 28:
        return None, "arp_truncated"
    htype, ptype, hlen, plen, oper = struct.unpack_from("!HHBBH", body)
    if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4):
        return None, "arp_unsupported"
    if oper != 1:
        return None, "arp_not_request"
    sha, spa, tpa = body[8:14], body[14:18], body[24:28]
    if int.from_bytes(tpa, "big") != my_ip:
        return None, "arp_not_for_us"
    peer = int_to_mac(int.from_bytes(sha, "big"))
    reply = Ether(dst=peer, src=mac) / ARP(op=2, hwsrc=mac, psrc=ipv4, hwdst=peer,
                                           pdst=int_to_ipv4(int.from_bytes(spa, "big")))
    eth = ether(0x0806)
    eth.dst = peer
    return bytes(eth / reply[ARP]), "arp_forwarded"


def _ipv4(body, ether, mac, ipv4, my_ip, port, ttl, ip_options, verify):
    if len(body) < 20 or (ip_options and len(body) < 4 * (body[0] & 0xF)):
        return None, "ip_rx_truncated"
    version, ihl = body[0] >> 4, body[0] & 0xF
    if version != 4:
        return None, "ip_rx_bad_version"
    if ihl < 5:
        return None, "ip_rx_bad_header_length"
    if ihl > 5 and not ip_options:
        return None, "ip_rx_options"
    hlen = 4 * ihl
    if ones_complement_sum(body[:hlen]) != 0xFFFF:
        return None, "ip_rx_bad_checksum"
    total, = struct.unpack_from("!H", body, 2)
    if total < hlen or total > len(body):
        return None, "ip_rx_bad_length"
    flags_frag, = struct.unpack_from("!H", body, 6)
    if flags_frag & 0x2000 or flags_frag & 0x1FFF:
        return None, "ip_rx_fragment"
    if body[8] == 0:
        return None, "ip_rx_ttl_expired"
    protocol = body[9]
    src, dst = body[12:16], body[16:20]
    if int.from_bytes(dst, "big") != my_ip:
        return None, "ip_rx_not_for_us"
    payload = body[hlen:total]
    peer_ip = int_to_ipv4(int.from_bytes(src, "big"))
    ip = IP(src=ipv4, dst=peer_ip, id=0, flags="DF", ttl=ttl)

    if protocol == 1:
        if verify and len(payload) > MAX_L4:
            return None, "icmp_overflow"
        if verify and ones_complement_sum(payload) != 0xFFFF:
            return None, "icmp_bad_checksum"
        if len(payload) < 8:
            return None, "icmp_truncated"
        if payload[0] != 8 or payload[1] != 0:
            return None, "icmp_not_echo_request"
        ident, seq = struct.unpack_from("!HH", payload, 4)
        reply = ICMP(type=0, code=0, id=ident, seq=seq) / payload[8:]
        if not verify:
            # RFC 1624: only the type changes, 8 -> 0.
            checksum, = struct.unpack_from("!H", payload, 2)
            reply.chksum = internet_checksum(b"", (~checksum & 0xFFFF) + 0xF7FF)
        return bytes(ether(0x0800) / ip / reply), "icmp_forwarded"
    if protocol != 17:
        return None, "ip_rx_no_route"

    if verify and len(payload) > MAX_L4:
        return None, "udp_rx_overflow"
    # The checksum is verified before the header is parsed, over the datagram as received;
    # a datagram too short for a header reads as zeros past its end.
    padded = payload + bytes(max(0, 8 - len(payload)))
    sport, dport, length, checksum = struct.unpack_from("!HHHH", padded)
    pseudo = src + dst + bytes([0, 17]) + length.to_bytes(2, "big")
    if verify and checksum and ones_complement_sum(pseudo + padded) != 0xFFFF:
        return None, "udp_rx_bad_checksum"
    if len(payload) < 8:
        return None, "udp_rx_truncated"
    if length != len(payload):
        return None, "udp_rx_bad_length"
    if dport != port:
        return None, "udp_rx_no_route"
    reply = UDP(sport=dport, dport=sport, chksum=None if verify else 0) / payload[8:]
    return bytes(ether(0x0800) / ip / reply), "udp_rx_forwarded"
