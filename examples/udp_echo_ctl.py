"""UDP echo (examples/udp_echo.py) plus the internal controller: every counter of every tile is
readable, and every register writable, by name from the network (``apiary ctl``, UDP port
7200), through the control NoC and a control agent at each tile; and the same words over
Etherbone (UDP port 1234) for LiteX's host tools (``litex_server --udp``, ``litex_cli``,
``RemoteClient``). Control requests pass an
audit log on their way to the controller, which keeps the first 64 with the cycle each came;
its ``rearm`` register empties it. On a 4 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) audit (log)
      │               │               │                │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀─ (3,1) ctl (controller)
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo

::

    apiary check examples/udp_echo_ctl.py
    apiary ctl   examples/udp_echo_ctl.py list                    # the address map
    apiary sim   examples/udp_echo_ctl.py --tap tap0              # then, from Linux:
    apiary ctl   examples/udp_echo_ctl.py 10.0.0.2 counters       # every counter that moved
    apiary ctl   examples/udp_echo_ctl.py 10.0.0.2 read udp_rx.bad_checksum
    apiary ctl   examples/udp_echo_ctl.py 10.0.0.2 write audit.rearm 1
    apiary ctl   examples/udp_echo_ctl.py 10.0.0.2 table audit.log 0
    apiary ctl   examples/udp_echo_ctl.py csr > csr.csv           # LiteX's register list
    litex_server --udp --udp-ip 10.0.0.2 &                          # then:
    litex_cli    --csr-csv csr.csv --regs                           # every counter, register

On a board the controller's bus port (``bridge``) puts the same words on the SoC's UART
bridge, named in the build's ``csr.csv`` (docs/platforms.md)::

    apiary build examples/udp_echo_ctl.py --platform ecpix5
    litex_server --uart --uart-port /dev/ttyUSB1 &
    litex_cli    --csr-csv build/udp_echo_ctl-ecpix5/csr.csv --read arp_ipv4

The design's MAC, IPv4 address, netmask and gateway are registers of the ARP tile, read and
written like the others; a new address takes effect at once and is announced by gratuitous
ARP (beehive/proto/addresses.py)::

    apiary ctl   examples/udp_echo_ctl.py 10.0.0.2 write arp.ipv4 10.0.0.7
    apiary ctl   examples/udp_echo_ctl.py 10.0.0.7 read arp.mac arp.ipv4

``design(width=..., ctl_width=..., mac=..., ipv4=..., netmask=..., gateway=..., port=...,
runtime_addresses=..., bridge=...)`` overrides the defaults (512-bit data plane, 64-bit control
plane, MAC 02:00:00:00:00:02, IPv4 10.0.0.2, netmask and gateway 0.0.0.0: every address on the
link, echo on port 7, addresses in registers, the controller's bus port).
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.tiles.log import LogTile
from beehive.apps.controller import CONTROL_PORT, REPLY_KEY, ControllerTile
from beehive.apps.etherbone import ETHERBONE_PORT
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")


def design(width=512, ctl_width=64, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, netmask="0.0.0.0",
           gateway="0.0.0.0", port=udp_echo.ECHO_PORT, runtime_addresses=True, bridge=True):
    d = Design("udp_echo_ctl", cols=4, rows=3, width=width, ctl_width=ctl_width)
    d.settings.update(mac=mac, ipv4=ipv4, netmask=netmask, gateway=gateway,
                      runtime_addresses=runtime_addresses)
    udp_echo.build_stack(d, port)
    d.add("audit", LogTile, at=(3, 0), entries=64, snap=16)
    d.add("ctl", ControllerTile, at=(3, 1), bridge=bridge)
    d.route("udp_rx", "audit", key=CONTROL_PORT)
    d.route("audit", "ctl")
    d.route("udp_rx", "ctl", key=ETHERBONE_PORT)            # LiteX's Etherbone, unlogged
    d.route("ctl", "udp_tx", key=REPLY_KEY)
    return d
