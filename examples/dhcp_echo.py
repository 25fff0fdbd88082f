"""UDP echo (examples/udp_echo.py) that takes its IPv4 address from the network's DHCP server
(beehive/apps/dhcp.py): until the server grants a lease the design answers nothing but DHCP;
then it answers ARP, pings and UDP on port 7 at the leased address, announces it by gratuitous
ARP, renews the lease at T1 and rebinds at T2. Its controller (UDP port 7200 for `apiary ctl`,
1234 for LiteX's Etherbone tools) reads the client's counters and releases the lease. On a 4 × 3
mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) dhcp (client)
      │               │               │                │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀── (3,1) ctl (controller)
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo

::

    apiary check examples/dhcp_echo.py
    apiary sim   examples/dhcp_echo.py --tap tap0      # then serve DHCP on tap0, and:
    apiary ctl   examples/dhcp_echo.py LEASED-ADDRESS counters
    apiary ctl   examples/dhcp_echo.py LEASED-ADDRESS write dhcp.release 1
    apiary ctl   examples/dhcp_echo.py csr > csr.csv
    litex_server --udp --udp-ip LEASED-ADDRESS &   litex_cli --csr-csv csr.csv --regs

On a board the controller's bus port also puts these words on the SoC's UART bridge, so the
leased address can be read before it is known (docs/platforms.md)::

    apiary build examples/dhcp_echo.py --platform ecpix5
    litex_server --uart --uart-port /dev/ttyUSB1 &
    litex_cli    --csr-csv build/dhcp_echo-ecpix5/csr.csv --read arp_ipv4

``design(width=..., ctl_width=..., mac=..., port=..., clock_hz=..., bridge=...)`` overrides the
defaults (512-bit data plane, 64-bit control plane, MAC 02:00:00:00:00:02, echo on port 7, the
core's clock 125 MHz: the lease's timers count its seconds; `apiary build` passes the board's
clock, and in simulation a smaller number runs the timers faster, ``--set clock_hz=20000``; the
controller's bus port).
"""

from apiary.design import Design
from apiary.load import sibling
from beehive.apps.controller import CONTROL_PORT, REPLY_KEY, ControllerTile
from beehive.apps.dhcp import CLIENT_PORT, DhcpClientTile
from beehive.apps.etherbone import ETHERBONE_PORT
from beehive.proto.addresses import DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")


def design(width=512, ctl_width=64, mac=DEFAULT_MAC, port=udp_echo.ECHO_PORT,
           clock_hz=125_000_000, bridge=True):
    d = Design("dhcp_echo", cols=4, rows=3, width=width, ctl_width=ctl_width)
    d.settings.update(mac=mac, runtime_addresses="dhcp")
    udp_echo.build_stack(d, port)
    d.add("dhcp", DhcpClientTile, at=(3, 0), cycles_per_second=int(clock_hz))
    d.route("udp_rx", "dhcp", key=CLIENT_PORT)
    d.route("dhcp", "udp_tx")
    d.add("ctl", ControllerTile, at=(3, 1), bridge=bridge)
    d.route("udp_rx", "ctl", key=CONTROL_PORT)
    d.route("udp_rx", "ctl", key=ETHERBONE_PORT)
    d.route("ctl", "udp_tx", key=REPLY_KEY)
    return d
