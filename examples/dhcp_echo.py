"""UDP echo (examples/udp_echo.py) that takes its IPv4 address from the network's DHCP server
(beehive/apps/dhcp.py): until the server grants a lease the design answers nothing but DHCP;
then it answers ARP, pings and UDP on port 7 at the leased address, announces it by gratuitous
ARP, renews the lease at T1 and rebinds at T2. On a 4 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) dhcp (client)
      │               │               │                │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀──────┘
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo

::

    apiary check examples/dhcp_echo.py
    apiary sim   examples/dhcp_echo.py --tap tap0      # then serve DHCP on tap0

``design(width=..., mac=..., cycles_per_second=...)`` overrides the defaults (512-bit data plane,
MAC 02:00:00:00:00:02, the lease's seconds at 125,000,000 cycles: give fewer to run its timers
faster in simulation).
"""

from apiary.design import Design
from apiary.load import sibling
from beehive.apps.dhcp import CLIENT_PORT, DhcpClientTile
from beehive.proto.addresses import DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")


def design(width=512, mac=DEFAULT_MAC, port=udp_echo.ECHO_PORT, cycles_per_second=125_000_000):
    d = Design("dhcp_echo", cols=4, rows=3, width=width)
    d.settings.update(mac=mac, runtime_addresses="dhcp")
    udp_echo.build_stack(d, port)
    d.add("dhcp", DhcpClientTile, at=(3, 0), cycles_per_second=cycles_per_second)
    d.route("udp_rx", "dhcp", key=CLIENT_PORT)
    d.route("dhcp", "udp_tx")
    return d
