"""UDP echo on port 7 through the Beehive stack, as in the paper's Fig. 8a: Ethernet, IPv4 and
UDP each in separate receive and transmit tiles, plus ARP, ICMP echo (ping) and the echo
application, on a 3 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx
      │               │               │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo

Every packet moves through the stack in protocol order, so the layout is deadlock-free
(``apiary check``). The design answers ARP for its address, pings, and UDP on port 7::

    apiary check examples/udp_echo.py
    apiary show  examples/udp_echo.py -o udp_echo.svg
    apiary sim   examples/udp_echo.py --tap tap0

``design(mac=..., ipv4=..., width=...)`` overrides the defaults (MAC 02:00:00:00:00:02, IPv4
10.0.0.2, 512-bit data plane). ``ip_options=False`` (``--set ip_options=False``) puts
:class:`~beehive.proto.ipv4.Ipv4RxNoOptionsTile` in IPv4 RX's place: half its area, and a
datagram with IP options is dropped and counted instead of answered. ``verify_checksums=False``
leaves the UDP and ICMP checksums unchecked (:func:`beehive.proto.layer.verify_checksums`): UDP RX
and ICMP become cut-through, without their packet buffers, and UDP replies carry checksum 0. The
25F board (``colorlight_5a_75b``) builds with both off, as LiteEth's own stack would be.
"""

from apiary.design import Design
from beehive.apps import UdpEchoTile
from beehive.proto import (ArpTile, EthernetRxTile, EthernetTxTile, IcmpEchoTile,
                           Ipv4RxNoOptionsTile, Ipv4RxTile, Ipv4TxTile, UdpRxTile, UdpTxTile)
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol


ECHO_PORT = 7


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=ECHO_PORT, ip_options=True,
           verify_checksums=True):
    d = Design("udp_echo", cols=3, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4, verify_checksums=verify_checksums)
    return build_stack(d, port, ip_options=ip_options)


def build_stack(d, port=ECHO_PORT, *, ip_options=True):
    """Add the stack's nine tiles (columns 0 to 2, rows 0 to 2) and their routes to the design
    ``d``, the echo on ``port``; returns ``d``. ``examples/udp_dram.py`` builds on it."""
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
