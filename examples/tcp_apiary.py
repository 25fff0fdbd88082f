"""TCP under Apiary: the TCP engine and its applications as untrusted tiles behind monitors, each
connection's rings allocated through the memory manager (the thesis's §3.4.3), on a 5 × 4 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx    (3,0) tcp_rx*   (4,0) mm
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx    (3,1) tcp_tx*   (4,1) errors
    (0,2) arp       (1,2) icmp     (2,2) echo      (3,2) app*      (4,2) mem0
                                   (2,3) ctl       (3,3) app1*     (4,3) mem1 ...

    * untrusted: behind a monitor

When a connection opens, ``tcp_rx`` takes a pair of rings it allocated ahead (a receive ring
and a send ring, ``CAP_ALLOC`` through its monitor to the memory manager, which places them in
one of the memory tiles), sends the send ring to ``tcp_tx`` and both to the application with
``CAP_SEND``: the capability is the application's notification of the new connection
(:mod:`beehive.proto.tcp.segments`). From then on every load and store of the engine and of
the application names a ring by its own handle, and the monitors check and translate it. An
application that reads or writes past its rings is quarantined, and nothing else notices.

``design(width=64, app=TcpEchoTile, apps=1, scheduler=False, memories=1, port=7, flows=8,
ring=4096, ...)``: ``apps`` copies of ``app``, each on its own port (``port``, ``port + 1``,
...), or with ``scheduler`` all on ``port`` behind a round-robin scheduler (``sched`` at (3, 2),
:class:`~beehive.apps.scheduler.TcpSchedulerTile`, which gives each new connection to the next
copy); ``memories`` memory tiles of ``memory_bytes`` each (the memory manager places the rings
in turn over them); ``app_params`` go to each
application (a list: one dict per application); ``tcp`` overrides any other
:class:`~beehive.proto.tcp.TcpConfig` field; ``ctl`` adds the kernel's control service (UDP port
7100 at (2, 3): ``apiary faults 10.0.0.2``, run-time IPC grants). ::

    apiary check examples/tcp_apiary.py
    apiary sim   examples/tcp_apiary.py --tap tap0 --width 64      # then: nc 10.0.0.2 7
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.noc.header import Fbits
from apiary.os.kernel import Kernel
from apiary.os.monitor import MonitorConfig
from beehive.apps import TcpEchoTile
from beehive.apps.kernel_ctl import CTL_PORT, add_control_service
from beehive.apps.scheduler import KEY_WORKER, TcpSchedulerTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


tcp_echo = sibling(__file__, "tcp_echo.py")
udp_echo = sibling(__file__, "udp_echo.py")

MEMORY_BYTES = 1 << 17


def monitor_entries(flows, spare):
    """Capability-table entries enough for the receive tile: two rings per flow slot, plus the
    spare pairs (a power of two, at most 64)."""
    need = 2 * (flows + spare)
    entries = 2
    while entries < need:
        entries *= 2
    if entries > 64:
        raise ValueError(f"{flows} flows and {spare} spare pairs need {need} capabilities; a "
                         f"monitor holds at most 64 (use at most {32 - spare} flows)")
    return entries


def design(width=64, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, *, app=TcpEchoTile, apps=1,
           scheduler=False, memories=1, port=tcp_echo.ECHO_PORT, flows=8, ring=4096, rto=None,
           memory_bytes=MEMORY_BYTES, memory_latency=tcp_echo.BRAM_LATENCY, app_params=None,
           ctl=True, name="tcp_apiary", **tcp):
    if not 1 <= apps <= 4 or not 1 <= memories <= 4:
        raise ValueError(f"apps and memories must be 1 to 4, not {apps} and {memories}")
    rows = max(4, 2 + apps + scheduler, 2 + memories)
    d = Design(name, cols=5, rows=rows, width=width)
    d.settings.update(mac=mac, ipv4=ipv4, idle_hz=tcp_echo.IDLE_HZ,
                      memory_latency=memory_latency)
    udp_echo.build_stack(d, udp_echo.ECHO_PORT)
    config = tcp_echo.tcp_config(width, flows, ring, rto, **tcp)
    entries = monitor_entries(config.flows, config.spare)
    kernel = Kernel(d, manager=(4, 0), errors=(4, 1),
                    memories={f"mem{k}": ((4, 2 + k), memory_bytes) for k in range(memories)},
                    monitor=MonitorConfig(entries=entries),
                    max_holders=min(256, 6 * config.flows), placement="rotate")
    tcp_echo.add_tcp(d, config, apiary=True)
    names = ["app" if k == 0 else f"app{k}" for k in range(apps)]
    for k, app_name in enumerate(names):
        params = app_params[k] if isinstance(app_params, (list, tuple)) else app_params
        d.add(app_name, app, at=(3, 2 + scheduler + k), config=config, trusted=False,
              **dict(params or {}))
        if scheduler:
            d.route("sched", app_name, key=KEY_WORKER, allow=True)
            d.route(app_name, "tcp_rx", key="tcp_rx", fbits=Fbits.LOCAL2, allow=True)
            d.route(app_name, "tcp_tx", key="tcp_tx", allow=True)
        else:
            tcp_echo.connect_app(d, app_name, port + k, apiary=True)
    if scheduler:
        d.add("sched", TcpSchedulerTile, at=(3, 2), config=config, trusted=False)
        d.route("tcp_rx", "sched", key=port, allow=True)
        d.route("tcp_tx", "sched", key="app", allow=True)
    if ctl:
        add_control_service(d, kernel, at=(2, 3), port=CTL_PORT)
    return d
