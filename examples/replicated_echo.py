"""UDP echo on port 7 with the IPv4/UDP stack and the echo application replicated behind a
load balancer (the Beehive thesis's duplicated-stack experiment, §4.5.9, Fig. 4.12)::

    (0,0) eth_rx ─▶ (1,0) lb        (2,0) arp
      ▲               │ one copy per message, by policy
    (0,1) eth_tx ◀─ (1,1) ip_rx_0 ─▶ udp_rx_0 ─▶ echo_0 ─▶ udp_tx_0 ─▶ (5,1) ip_tx_0
      ▲               │                                                     │
      └───────────────┼──────────── west along row 1 ◀──────────────────────┘
                    (1,2) ip_rx_1 ─▶ ...                                (5,2) ip_tx_1
                      ...  (copy k in row k + 1)

Ethernet RX sends IPv4 packets to the load balancer, which spreads them over the copies (policy
``round_robin``, ``hash`` over the 4-tuple read from the IPv4 header, or ``port``); each copy is
a whole IPv4 RX → UDP RX → echo → UDP TX → IPv4 TX chain, and every copy's replies go to the one
Ethernet TX. ARP is answered once, beside the load balancer; ICMP is not served (the copies'
IPv4 RX count pings as ``no_route``). The copies are made by one line,
``d.replicate([...], n=copies, step=(0, 1))``; ``apiary check`` proves the layout deadlock-free.

``design(width=512, copies=2, policy="round_robin")``.
"""

from apiary.design import Design
from beehive.apps import UdpEchoTile
from beehive.nf import LoadBalancerTile
from beehive.proto import (ArpTile, EthernetRxTile, EthernetTxTile, Ipv4RxTile, Ipv4TxTile,
                           UdpRxTile, UdpTxTile)
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol


ECHO_PORT = 7
#: The tiles of one copy of the stack, in the order a request meets them.
STACK = ("ip_rx", "udp_rx", "echo", "udp_tx", "ip_tx")


def design(width=512, copies=2, policy="round_robin", mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4,
           port=ECHO_PORT):
    d = Design(f"replicated_echo_{copies}", cols=6, rows=1 + copies, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    d.add("eth_rx", EthernetRxTile, at=(0, 0))
    d.add("lb", LoadBalancerTile, at=(1, 0), policy=policy, flow="ipv4")
    d.add("arp", ArpTile, at=(2, 0))
    d.add("eth_tx", EthernetTxTile, at=(0, 1))
    d.add("ip_rx", Ipv4RxTile, at=(1, 1))
    d.add("udp_rx", UdpRxTile, at=(2, 1))
    d.add("echo", UdpEchoTile, at=(3, 1))
    d.add("udp_tx", UdpTxTile, at=(4, 1))
    d.add("ip_tx", Ipv4TxTile, at=(5, 1))

    d.route("eth_rx", "lb", key=EtherType.IPV4.value)
    d.route("eth_rx", "arp", key=EtherType.ARP.value)
    d.route("arp", "eth_tx")
    d.route("lb", "ip_rx")
    d.route("ip_rx", "udp_rx", key=IpProtocol.UDP.value)
    d.route("udp_rx", "echo", key=port)
    d.chain("echo", "udp_tx", "ip_tx", "eth_tx")
    d.replicate(list(STACK), n=copies, step=(0, 1))
    return d
