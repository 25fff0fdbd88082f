"""UDP echo behind a NAT you can reconfigure and watch from Linux: the echo design of
examples/udp_echo.py with a NAT tile on each side of the IPv4 tiles, the internal controller
(``apiary ctl``, UDP port 7200) and a log of every datagram as the NAT hands it to IPv4 RX
(``apiary log``), on a 5 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) nat_in  ─▶ (2,0) log ─▶ (3,0) ip_rx ─▶ (4,0) udp_rx
      │                                              │              │
    (0,1) eth_tx ◀─ (1,1) nat_out ◀──────────────── (3,1) ip_tx ◀─ (4,1) udp_tx
      ▲                                              ▲              ▲
    (0,2) arp       (1,2) ctl                      (3,2) icmp     (4,2) echo

``nat_in`` rewrites datagrams to a rule's public address and port into its private ones before
IPv4 RX sees them; ``nat_out`` rewrites the replies back, so the echo service, which listens on
port 7 of the design's address, answers on the public address and port. Checksums are updated
incrementally (:mod:`beehive.nf.nat`). Every packet still moves through the stack in protocol
order, so the layout is deadlock-free::

    apiary check examples/nat_echo.py
    apiary sim   examples/nat_echo.py --tap tap0     # then, from Linux:
    echo hi | nc -u -w1 10.0.0.2 5000
    apiary ctl   examples/nat_echo.py 10.0.0.2 table nat_in.rules 0 public_port=6000
    apiary ctl   examples/nat_echo.py 10.0.0.2 table nat_out.rules 0 public_port=6000
    echo hi | nc -u -w1 10.0.0.2 6000
    apiary log   examples/nat_echo.py 10.0.0.2 --tile log -o nat.pcap

The default rule publishes the echo service as port 5000 of the design's own address (so ARP
and a TAP peer work unchanged); ``design(rules=[nat_rule(...), ...])`` gives others, such as a
public address of its own (a peer must then reach it through a static ARP entry or a router).
Both NAT tiles start with the same rules and keep them in a table the control plane rewrites
whole, one entry at a time (``nat_in.rules``, ``nat_out.rules``); a datagram sees either the
old entry or the new one, never a mix. The log keeps the first ``entries`` datagrams (control
requests included) with their first ``snap`` bytes.

``design(width=..., mac=..., ipv4=..., rules=..., control=..., entries=..., snap=...)``
overrides the defaults (512-bit data plane, MAC 02:00:00:00:00:02, IPv4 10.0.0.2, the
controller and the log included: ``control=False`` leaves both out).
"""

from apiary.design import Design
from apiary.tiles.log import LINKTYPE_RAW_IPV4, LogTile
from beehive.apps import UdpEchoTile
from beehive.apps.controller import CONTROL_PORT, REPLY_KEY, ControllerTile
from beehive.nf import NatTile, nat_rule
from beehive.proto import (ArpTile, EthernetRxTile, EthernetTxTile, IcmpEchoTile, Ipv4RxTile,
                           Ipv4TxTile, UdpRxTile, UdpTxTile)
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol


ECHO_PORT = 7
PUBLIC_PORT = 5000


def default_rules(ipv4=DEFAULT_IPV4):
    """Port ``PUBLIC_PORT`` of the design's address → the echo service on port 7, UDP."""
    return [nat_rule(ipv4, ipv4, public_port=PUBLIC_PORT, private_port=ECHO_PORT,
                     protocol=IpProtocol.UDP.value)]


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, rules=None, control=True,
           entries=256, snap=192):
    d = Design("nat_echo", cols=5, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    rules = default_rules(ipv4) if rules is None else list(rules)
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("nat_in", NatTile, at=(1, 0), direction="in", rules=rules)
    d.add("ip_rx", Ipv4RxTile, at=(3, 0))
    d.add("udp_rx", UdpRxTile, at=(4, 0))
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("nat_out", NatTile, at=(1, 1), direction="out", rules=rules)
    d.add("ip_tx", Ipv4TxTile, at=(3, 1))
    d.add("udp_tx", UdpTxTile, at=(4, 1))
    d.add("arp", ArpTile, at=(0, 2))
    d.add("icmp", IcmpEchoTile, at=(3, 2))
    d.add("echo", UdpEchoTile, at=(4, 2))

    d.route("eth_rx", "nat_in", key=EtherType.IPV4.value)
    d.route("eth_rx", "arp", key=EtherType.ARP.value)
    if control:
        d.add("log", LogTile, at=(2, 0), entries=entries, snap=snap,
              linktype=LINKTYPE_RAW_IPV4)
        d.add("ctl", ControllerTile, at=(1, 2))
        d.chain("nat_in", "log", "ip_rx")
        d.route("udp_rx", "ctl", key=CONTROL_PORT)
        d.route("ctl", "udp_tx", key=REPLY_KEY)
    else:
        d.route("nat_in", "ip_rx")
    d.route("ip_rx", "udp_rx", key=IpProtocol.UDP.value)
    d.route("ip_rx", "icmp", key=IpProtocol.ICMP.value)
    d.route("udp_rx", "echo", key=ECHO_PORT)
    d.chain("echo", "udp_tx", "ip_tx", "nat_out", "eth_tx")
    d.route("icmp", "ip_tx")
    d.route("arp", "eth_tx")
    return d
