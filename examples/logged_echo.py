"""UDP echo with two logging tiles and the controller that reads them over UDP (Beehive's
Ethernet latency log): ``log_in`` records every IPv4 datagram Ethernet RX hands to IPv4 RX,
``log_out`` every datagram IPv4 TX hands to Ethernet TX, each with the cycle it passed, on a
4 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) log_in  ─▶ (2,0) ip_rx ─▶ (3,0) udp_rx ─▶ echo (port 7), ctl (7200)
      │                                   │              │
    (0,1) eth_tx ◀─ (1,1) log_out ◀─ (2,1) ip_tx ◀─ (3,1) udp_tx ◀─ echo, ctl
      ▲                                   ▲              ▲
    (0,2) arp       (1,2) ctl           (2,2) icmp     (3,2) echo

The log tiles are pass-through (0 cycles, one flit per cycle) and never stall the path; each
keeps the first ``entries`` datagrams it sees (the control requests that read it included)
with their first ``snap`` bytes: enough, at the default 192, for whole small messages at both
widths, so that a log can be replayed (:mod:`apiary.sim.replay`). Read them as pcaps::

    apiary check examples/logged_echo.py
    apiary sim   examples/logged_echo.py --tap tap0        # then, from Linux:
    apiary log   examples/logged_echo.py 10.0.0.2 --tile log_in -o in.pcap
    apiary log   examples/logged_echo.py 10.0.0.2 --latency log_in log_out

``design(width=..., entries=..., snap=..., mac=..., ipv4=...)`` overrides the defaults
(512-bit data plane, 256 entries of 192 bytes, MAC 02:00:00:00:00:02, IPv4 10.0.0.2).
"""

from apiary.design import Design
from apiary.tiles.log import LINKTYPE_RAW_IPV4, LogTile
from beehive.apps import UdpEchoTile
from beehive.apps.controller import CONTROL_PORT, REPLY_KEY, ControllerTile
from beehive.proto import (ArpTile, EthernetRxTile, EthernetTxTile, IcmpEchoTile, Ipv4RxTile,
                           Ipv4TxTile, UdpRxTile, UdpTxTile)
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol


ECHO_PORT = 7


def design(width=512, entries=256, snap=192, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4):
    d = Design("logged_echo", cols=4, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    log = dict(entries=entries, snap=snap, linktype=LINKTYPE_RAW_IPV4)
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("log_in", LogTile, at=(1, 0), **log)
    d.add("ip_rx", Ipv4RxTile, at=(2, 0))
    d.add("udp_rx", UdpRxTile, at=(3, 0))
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("log_out", LogTile, at=(1, 1), **log)
    d.add("ip_tx", Ipv4TxTile, at=(2, 1))
    d.add("udp_tx", UdpTxTile, at=(3, 1))
    d.add("arp", ArpTile, at=(0, 2))
    d.add("ctl", ControllerTile, at=(1, 2))
    d.add("icmp", IcmpEchoTile, at=(2, 2))
    d.add("echo", UdpEchoTile, at=(3, 2))

    d.route("eth_rx", "log_in", key=EtherType.IPV4.value)
    d.route("eth_rx", "arp", key=EtherType.ARP.value)
    d.route("log_in", "ip_rx")
    d.route("ip_rx", "udp_rx", key=IpProtocol.UDP.value)
    d.route("ip_rx", "icmp", key=IpProtocol.ICMP.value)
    d.route("udp_rx", "echo", key=ECHO_PORT)
    d.route("udp_rx", "ctl", key=CONTROL_PORT)
    d.route("ctl", "udp_tx", key=REPLY_KEY)
    d.chain("echo", "udp_tx", "ip_tx", "log_out", "eth_tx")
    d.route("icmp", "ip_tx")
    d.route("arp", "eth_tx")
    return d
