"""Beehive's protocol layers, one file per protocol as LiteEth has them: its header table and its
tiles, RX and TX side by side.

* :mod:`~beehive.proto.ethernet`: Ethernet II with 802.1Q (RX and TX, at the MAC);
* :mod:`~beehive.proto.arp`: ARP replies, and address resolution for other tiles;
* :mod:`~beehive.proto.ipv4`: IPv4 RX and TX;
* :mod:`~beehive.proto.icmp`: ICMP echo;
* :mod:`~beehive.proto.udp`: UDP RX and TX;
* :mod:`~beehive.proto.tcp`: TCP, a package: two tiles sharing flow state.

Below them: :mod:`~beehive.proto.layer` (the receive and transmit frameworks every tile is
written in), :mod:`~beehive.proto.messages` (message types and the metadata every message
carries) and :mod:`~beehive.proto.addresses` (the design's MAC and IPv4 address).
"""

from .arp import ArpTile
from .ethernet import EthernetRxTile, EthernetTxTile
from .icmp import IcmpEchoTile
from .ipv4 import Ipv4RxNoOptionsTile, Ipv4RxTile, Ipv4TxTile
from .udp import UdpRxTile, UdpTxTile

__all__ = ["ArpTile", "EthernetRxTile", "EthernetTxTile", "IcmpEchoTile", "Ipv4RxTile",
           "Ipv4RxNoOptionsTile", "Ipv4TxTile", "UdpRxTile", "UdpTxTile"]
