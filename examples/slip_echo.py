"""UDP echo and ping over a serial line: the Beehive stack with SLIP (RFC 1055) on a UART in
place of Ethernet, for small boards whose only link to a host is a UART (iCEBreaker, ULX3S...).
On a 4 × 2 mesh, the smallest that holds its eight tiles::

    (0,0) slip_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) echo
                       │                              │
                       └───────────▶ (2,1) icmp       ▼
    (0,1) slip_tx ◀─ (1,1) ip_tx ◀──────┘ ◀──── (3,1) udp_tx

Datagrams go right along the top row, down, and left along the bottom row, so every packet
moves in one direction per row and the layout is deadlock-free (``apiary check``). The design
answers pings and UDP on port 7 at ``ipv4``; it has no MAC address and no ARP (a serial line
is point to point).

The top level has one serial pin each way, ``slip_rx_uart_rx`` (from the host) and
``slip_tx_uart_tx`` (to it), 8N1 at ``baud``. A board build passes the board's clock
frequency as ``clock_hz``; it must be within 2 % of a multiple of ``baud`` of at least 4 (12 MHz
and 115200 baud: 104 cycles per bit, 0.2 % off). From Linux, with the board's UART on
``/dev/ttyUSB1``::

    slattach -p slip -s 115200 /dev/ttyUSB1 &
    ip addr add 10.0.0.1 peer 10.0.0.2 dev sl0
    ip link set sl0 up
    ping 10.0.0.2
    echo hello | nc -u -w1 10.0.0.2 7

(use ``-p slip``, not ``cslip``: header compression is not supported.) Check and draw it with::

    apiary check examples/slip_echo.py
    apiary show  examples/slip_echo.py -o slip_echo.svg
    python -m apiary.bench.area examples/slip_echo.py --target ecp5 --width 64

``design(width=64, clock_hz=12_000_000, baud=115200, ipv4="10.0.0.2", port=7)``.
"""

from apiary.design import Design
from beehive.apps import UdpEchoTile
from beehive.proto import IcmpEchoTile, Ipv4RxTile, Ipv4TxTile, UdpRxTile, UdpTxTile
from beehive.proto.addresses import DEFAULT_IPV4
from beehive.proto.ethernet import EtherType
from beehive.proto.ipv4 import IpProtocol
from beehive.serial.slip import SlipRxTile, SlipTxTile


ECHO_PORT = 7


def design(width=64, clock_hz=12_000_000, baud=115200, ipv4=DEFAULT_IPV4, port=ECHO_PORT):
    d = Design("slip_echo", cols=4, rows=2, width=width)
    d.settings.update(ipv4=ipv4, clock_hz=clock_hz)
    d.add("slip_rx", SlipRxTile, at=(0, 0), baud=baud)
    d.add("ip_rx", Ipv4RxTile, at=(1, 0))
    d.add("udp_rx", UdpRxTile, at=(2, 0))
    d.add("echo", UdpEchoTile, at=(3, 0))
    d.add("slip_tx", SlipTxTile, at=(0, 1), baud=baud)
    d.add("ip_tx", Ipv4TxTile, at=(1, 1))
    d.add("icmp", IcmpEchoTile, at=(2, 1))
    d.add("udp_tx", UdpTxTile, at=(3, 1))

    d.route("slip_rx", "ip_rx", key=EtherType.IPV4.value)
    d.route("ip_rx", "udp_rx", key=IpProtocol.UDP.value)
    d.route("ip_rx", "icmp", key=IpProtocol.ICMP.value)
    d.route("udp_rx", "echo", key=port)
    d.chain("echo", "udp_tx", "ip_tx", "slip_tx")
    d.route("icmp", "ip_tx")
    return d
