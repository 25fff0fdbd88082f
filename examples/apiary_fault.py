"""Fault isolation under Apiary (the thesis's Fig. 3.3, over UDP): two untrusted memory
applications behind monitors, one made to fault while both serve requests.

The UDP echo stack of ``examples/udp_echo.py``, plus the Apiary kernel (memory manager ``mm``,
error manager ``errors``, one memory tile ``mem0``), two untrusted
:class:`~beehive.apps.mem_server.UdpMemoryTile` applications (``app_a`` on UDP port 7001,
``app_b`` on 7002) and the kernel's control service (:class:`~beehive.apps.kernel_ctl.
KernelCtlTile`, UDP port 7100), on a 5 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ─▶ (3,0) app_a*   (4,0) mm
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀─ (3,1) app_b*   (4,1) errors
    (0,2) arp       (1,2) icmp     (2,2) echo      (3,2) ctl      (4,2) mem0

    * untrusted: behind a monitor

Out of reset each application asks its monitor for a segment of ``segment`` bytes
(``CAP_ALLOC``); the memory manager allocates it in ``mem0`` and the monitor installs the
capability. A request's ``addr`` (the format of ``beehive/apps/mem_server.py``) is then an
offset into the application's own segment: the monitor checks it and translates it. A write or
read that runs past the segment is a violation: the monitor sinks it, reports it to the error
manager and quarantines the application, which answers nothing more, while the other one keeps
serving at its rate. The fault log is read over UDP (port 7100, ``beehive.apps.kernel_ctl``),
and the same port releases the faulty tile (its monitor resets it, gives back its memory, and
lets it run again)::

    import socket
    from beehive.apps.kernel_ctl import fault_request, parse_fault_reply
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(fault_request(0), ("10.0.0.2", 7100))
    print(parse_fault_reply(s.recv(64)))

Each application sits in a slot whose boundary is registered (``MonitorConfig(slot_registers=
True)``), as a partial-reconfiguration region's would be: a message takes 1 cycle more each way
between the application and its monitor, and no path runs combinationally from an application's
logic through its monitor's checks (on the ECPIX-5 such a path, 35.9 ns, held the core to 27.89
of 37.5 MHz on 2026-11-29). ``slot_registers=False`` drops the registers.

``design(width=64, segment=4096, ...)``.
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.os.kernel import Kernel
from apiary.os.monitor import MonitorConfig
from beehive.apps.kernel_ctl import CTL_PORT, add_control_service
from beehive.apps.mem_server import REPLY_KEY, UdpMemoryTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")

APP_PORTS = {"app_a": 7001, "app_b": 7002}
MEMORY_BYTES = 1 << 16


def design(width=64, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=udp_echo.ECHO_PORT,
           segment=4096, memory_bytes=MEMORY_BYTES, slot_registers=True):
    d = Design("apiary_fault", cols=5, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    udp_echo.build_stack(d, port)
    kernel = Kernel(d, manager=(4, 0), errors=(4, 1), memories={"mem0": ((4, 2), memory_bytes)},
                    monitor=MonitorConfig(slot_registers=slot_registers))
    for (name, app_port), at in zip(APP_PORTS.items(), [(3, 0), (3, 1)]):
        d.add(name, UdpMemoryTile, at=at, segment=segment, trusted=False)
        d.route("udp_rx", name, key=app_port)
        d.route(name, "udp_tx", key=REPLY_KEY, allow=True)
    add_control_service(d, kernel, at=(3, 2), port=CTL_PORT)
    return d
