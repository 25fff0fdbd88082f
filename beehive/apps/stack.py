"""The Beehive UDP echo stack as one call: the nine tiles of the paper's Fig. 8a and their
routes, for a design to build on (``examples/udp_echo.py`` is this alone; ``examples/
upper_echo.py`` adds a tile of its own beside it)."""

from apiary.design import Design

from ..proto import (ArpTile, EthernetRxTile, EthernetTxTile, IcmpEchoTile, Ipv4RxNoOptionsTile,
                     Ipv4RxTile, Ipv4TxTile, UdpRxTile, UdpTxTile)
from ..proto.ethernet import EtherType
from ..proto.ipv4 import IpProtocol
from .echo import UdpEchoTile


__all__ = ["add_udp_stack", "ECHO_PORT"]

#: The UDP port the stack's echo answers on by default.
ECHO_PORT = 7


def add_udp_stack(d: Design, port: int = ECHO_PORT, *, ip_options: bool = True) -> Design:
    """Add the stack's nine tiles to ``d`` in columns 0 to 2, rows 0 to 2, and their routes::

        (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx
        (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx
        (0,2) arp       (1,2) icmp      (2,2) echo

    with the UDP echo on ``port`` (``ip_options=False``: IPv4 RX without options, half its
    area). The design's ``settings`` give the MAC and IPv4 address. Returns ``d``."""
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("ip_rx", Ipv4RxTile if ip_options else Ipv4RxNoOptionsTile, at=(1, 0))
    d.add("udp_rx", UdpRxTile, at=(2, 0))
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("ip_tx", Ipv4TxTile, at=(1, 1))
    d.add("udp_tx", UdpTxTile, at=(2, 1))
    d.add("arp", ArpTile, at=(0, 2))
    d.add("icmp", IcmpEchoTile, at=(1, 2))
    d.add("echo", UdpEchoTile, at=(2, 2))

    d.route("eth_rx", "ip_rx", key=EtherType.IPV4.value)
    d.route("eth_rx", "arp", key=EtherType.ARP.value)
    d.route("ip_rx", "udp_rx", key=IpProtocol.UDP.value)
    d.route("ip_rx", "icmp", key=IpProtocol.ICMP.value)
    d.route("udp_rx", "echo", key=port)
    d.chain("echo", "udp_tx", "ip_tx", "eth_tx")
    d.route("icmp", "ip_tx")
    d.route("arp", "eth_tx")
    return d
