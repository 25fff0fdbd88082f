"""UDP echo on port 7 through one Beehive stack, with a slow application replicated behind a load
balancer: the Beehive paper's Fig. 12 point that copies scale a slow component up to the shared
path's rate::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) lb
      │               │               │               │ one copy per message, round robin
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀─ (3,1) app_0
      ▲               ▲               ▲ ◀──────────  (3,2) app_1
    (0,2) arp       (1,2) icmp        └──────────── (3,3) app_2 ...  (copy k at (3, k + 1))

The application is :class:`~beehive.apps.busy_echo.UdpBusyEchoTile`: an echo that takes
``cycles`` cycles per message, as one that computes would. The rest is the stack of
``examples/udp_echo.py`` (ARP and ICMP echo included), unreplicated: Ethernet, IPv4 and UDP
move a 64-byte request in 3 flits at 512 bits, so ``copies`` applications serve up to
``copies / cycles`` messages per cycle until that path is the limit. The copies are made by one
line, ``d.replicate("app", n=copies, step=(0, 1))``; ``apiary check`` proves the layout
deadlock-free::

    apiary check examples/replicated_app.py
    apiary bench replicate --app-cycles 16

``design(width=512, copies=1, policy="round_robin", cycles=16)``.
"""

from apiary.design import Design
from beehive.apps.busy_echo import UdpBusyEchoTile
from beehive.nf import LoadBalancerTile
from beehive.proto import (ArpTile, EthernetRxTile, EthernetTxTile, IcmpEchoTile, Ipv4RxTile,
                           Ipv4TxTile, UdpRxTile, UdpTxTile)
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol


ECHO_PORT = 7


def design(width=512, copies=1, policy="round_robin", cycles=16, mac=DEFAULT_MAC,
           ipv4=DEFAULT_IPV4, port=ECHO_PORT):
    d = Design(f"replicated_app_{copies}", cols=4, rows=max(3, copies + 1), width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("ip_rx", Ipv4RxTile, at=(1, 0))
    d.add("udp_rx", UdpRxTile, at=(2, 0))
    d.add("lb", LoadBalancerTile, at=(3, 0), policy=policy)
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("ip_tx", Ipv4TxTile, at=(1, 1))
    d.add("udp_tx", UdpTxTile, at=(2, 1))
    d.add("app", UdpBusyEchoTile, at=(3, 1), cycles=cycles)
    d.add("arp", ArpTile, at=(0, 2))
    d.add("icmp", IcmpEchoTile, at=(1, 2))

    d.route("eth_rx", "ip_rx", key=EtherType.IPV4.value)
    d.route("eth_rx", "arp", key=EtherType.ARP.value)
    d.route("ip_rx", "udp_rx", key=IpProtocol.UDP.value)
    d.route("ip_rx", "icmp", key=IpProtocol.ICMP.value)
    d.route("udp_rx", "lb", key=port)
    d.route("lb", "app")
    d.chain("app", "udp_tx", "ip_tx", "eth_tx")
    d.route("icmp", "ip_tx")
    d.route("arp", "eth_tx")
    d.replicate("app", n=copies, step=(0, 1))
    return d
