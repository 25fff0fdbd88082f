"""Whole designs with the tunnel tiles, for the tests: a UDP echo reached through IP-in-IP and
one reached through VXLAN. Both show where the second IPv4 RX (and UDP RX) goes, so that a
packet crossing repeated headers never uses a tile twice and the layout check passes::

    ipip_design (5 × 2):
    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) decap ─▶ (3,0) ip_rx2 ─▶ (4,0) udp_rx
                          └──────── protocol 17 (plain) ───────────────▶ ┘      │
    (0,1) eth_tx ◀─ (1,1) encap ◀─ (2,1) ip_tx ◀─ (3,1) udp_tx ◀─ (4,1) echo ◀──┘

    vxlan_design (6 × 2):
    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) decap ─▶ (4,0) ip_rx2 ─▶ (5,0) udp_rx2
    (0,1) eth_tx ◀─ (1,1) encap ◀─ (2,1) ip_tx ◀─ (3,1) udp_tx ◀──────────────── (5,1) echo
"""

from apiary.design import Design
from beehive.apps import UdpEchoTile
from beehive.nf import IpipDecapTile, IpipEncapTile, VxlanDecapTile, VxlanEncapTile
from beehive.nf.ipip import IPPROTO_IPIP
from beehive.nf.vxlan import VXLAN_PORT
from beehive.proto import (EthernetRxTile, EthernetTxTile, Ipv4RxTile, Ipv4TxTile, UdpRxTile,
                           UdpTxTile)
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol

ECHO_PORT = 7
IPV4, UDP = EtherType.IPV4.value, IpProtocol.UDP.value


def ipip_design(width=512, routes=(), mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4):
    d = Design("ipip_echo", cols=5, rows=2, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("ip_rx", Ipv4RxTile, at=(1, 0))
    d.add("decap", IpipDecapTile, at=(2, 0), rules=routes)
    d.add("ip_rx2", Ipv4RxTile, at=(3, 0))
    d.add("udp_rx", UdpRxTile, at=(4, 0))
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("encap", IpipEncapTile, at=(1, 1), rules=routes)
    d.add("ip_tx", Ipv4TxTile, at=(2, 1))
    d.add("udp_tx", UdpTxTile, at=(3, 1))
    d.add("echo", UdpEchoTile, at=(4, 1))
    d.route("eth_rx", "ip_rx", key=IPV4)
    d.route("ip_rx", "decap", key=IPPROTO_IPIP)
    d.route("ip_rx", "udp_rx", key=UDP)
    d.route("decap", "ip_rx2")
    d.route("ip_rx2", "udp_rx", key=UDP)
    d.route("udp_rx", "echo", key=ECHO_PORT)
    d.chain("echo", "udp_tx", "ip_tx", "encap", "eth_tx")
    return d


def vxlan_design(width=512, peers=(), mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4):
    d = Design("vxlan_echo", cols=6, rows=2, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("ip_rx", Ipv4RxTile, at=(1, 0))
    d.add("udp_rx", UdpRxTile, at=(2, 0))
    d.add("decap", VxlanDecapTile, at=(3, 0), rules=peers)
    d.add("ip_rx2", Ipv4RxTile, at=(4, 0))
    d.add("udp_rx2", UdpRxTile, at=(5, 0))
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("encap", VxlanEncapTile, at=(1, 1), rules=peers)
    d.add("ip_tx", Ipv4TxTile, at=(2, 1))
    d.add("udp_tx", UdpTxTile, at=(3, 1))
    d.add("echo", UdpEchoTile, at=(5, 1))
    d.route("eth_rx", "ip_rx", key=IPV4)
    d.route("ip_rx", "udp_rx", key=UDP)
    d.route("udp_rx", "decap", key=VXLAN_PORT)
    d.route("decap", "ip_rx2", key=IPV4)
    d.route("ip_rx2", "udp_rx2", key=UDP)
    d.route("udp_rx2", "echo", key=ECHO_PORT)
    d.chain("echo", "udp_tx", "ip_tx", "encap", "eth_tx")
    return d
