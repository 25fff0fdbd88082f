"""Beehive's protocol tiles: Ethernet (with 802.1Q), ARP, IPv4, ICMP echo and UDP, receive and
transmit, each in its own file with its message format at the top."""

from .arp import ArpTile
from .eth_rx import EthernetRxTile
from .eth_tx import EthernetTxTile
from .icmp import IcmpEchoTile
from .ip_rx import Ipv4RxTile
from .ip_tx import Ipv4TxTile
from .udp_rx import UdpRxTile
from .udp_tx import UdpTxTile

__all__ = ["ArpTile", "EthernetRxTile", "EthernetTxTile", "IcmpEchoTile", "Ipv4RxTile",
           "Ipv4TxTile", "UdpRxTile", "UdpTxTile"]
