"""TCP echo with contexts: connections served by whichever of two echo copies is free, each
connection's state in a context block kept in memory between its turns (the Apiary thesis's
Table 3.1), on a 5 × 4 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx     (3,0) tcp_rx     (4,0) sched
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx     (3,1) tcp_tx     (4,1) app
    (0,2) arp       (1,2) icmp      (2,2) echo                       (4,2) app1
                                    (2,3) tx_mem    (3,3) rx_mem     (4,3) ctx_mem

The engine's application on the echo port is ``sched``
(:class:`~beehive.apps.contexts.TcpContextSchedulerTile`); it resumes a connection on a free
copy (``app``, ``app1``: :class:`~beehive.apps.context_echo.TcpContextEchoTile`) with one
engine message and the connection's block from ``ctx_mem``, and stores the block the copy
yields back. So two copies serve every connection the engine holds (``flows``), each copy
holding none of them between turns. ::

    apiary check examples/tcp_contexts.py
    apiary sim   examples/tcp_contexts.py --tap tap0 --width 64      # then: nc 10.0.0.2 7

With ``apiary=True`` the engine, the scheduler and the copies are untrusted tiles behind
monitors, as in ``examples/tcp_apiary.py`` (the kernel's memory manager, error manager and memory
at column 4; the engine at (3, 0) and (3, 1), ``sched`` at (3, 2), the copies below it): the
scheduler allocates its context blocks as one segment of the kernel's memory, and sends each
connection's rings on to every copy, so any copy can take any connection's turn.

``design(width=512, mac=..., ipv4=..., port=7, flows=8, ring=4096, rto=None, copies=2,
ctx_bytes=32, chunk=1024, apiary=False, name="tcp_contexts", **tcp)``: ``copies`` echo copies
(1 to 3), ``ctx_bytes`` the context block, ``chunk`` the bytes a turn echoes at most; the rest
as in ``examples/tcp_echo.py``.
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.noc.header import Fbits
from apiary.os.kernel import Kernel
from apiary.os.memory_tile import MemoryTile
from apiary.os.monitor import MonitorConfig
from beehive.apps.context_echo import KEY_SCHED, TcpContextEchoTile
from beehive.apps.contexts import KEY_CTX_MEM, KEY_WORKER, TcpContextSchedulerTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


tcp_echo = sibling(__file__, "tcp_echo.py")
tcp_apiary = sibling(__file__, "tcp_apiary.py")
udp_echo = sibling(__file__, "udp_echo.py")


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=tcp_echo.ECHO_PORT, flows=8,
           ring=4096, rto=None, *, copies=2, ctx_bytes=32, chunk=1024, apiary=False,
           name="tcp_contexts", **tcp):
    if not 1 <= copies <= 3:
        raise ValueError(f"copies must be 1 to 3, not {copies!r}")
    d = Design(name, cols=5, rows=3 + copies if apiary else 4, width=width)
    d.settings.update(mac=mac, ipv4=ipv4, idle_hz=tcp_echo.IDLE_HZ,
                      memory_latency=tcp_echo.BRAM_LATENCY)
    udp_echo.build_stack(d, port)
    config = tcp_echo.tcp_config(width, flows, ring, rto, **tcp)
    if apiary:
        Kernel(d, manager=(4, 0), errors=(4, 1), memories={"mem0": ((4, 2), 1 << 17)},
               monitor=MonitorConfig(entries=tcp_apiary.monitor_entries(config.flows,
                                                                         config.spare)),
               max_holders=min(256, (4 + 2 * copies) * config.flows))
    tcp_echo.add_tcp(d, config, apiary=apiary)
    workers = ["app" if k == 0 else f"app{k}" for k in range(copies)]
    sched_at = (3, 2) if apiary else (4, 0)
    d.add("sched", TcpContextSchedulerTile, at=sched_at, config=config, ctx_bytes=ctx_bytes,
          trusted=not apiary)
    d.route("tcp_rx", "sched", key=port, allow=apiary)
    d.route("tcp_tx", "sched", key="app", allow=apiary)
    if not apiary:                      # (under Apiary: a segment, through the monitor)
        d.add("ctx_mem", MemoryTile, at=(4, 3), size_bytes=max(64, config.flows * ctx_bytes))
        d.route("sched", "ctx_mem", key=KEY_CTX_MEM)
        d.route("ctx_mem", "sched", fbits=Fbits.LOCAL1)
    for k, app in enumerate(workers):
        at = (3, 3 + k) if apiary else (4, 1 + k) if k < 2 else (3, 2)
        d.add(app, TcpContextEchoTile, at=at, config=config, ctx_bytes=ctx_bytes, chunk=chunk,
              trusted=not apiary)
        d.route("sched", app, key=KEY_WORKER, allow=apiary)
        d.route(app, "sched", key=KEY_SCHED, fbits=Fbits.LOCAL1, allow=apiary)
        d.route(app, "tcp_rx", key="tcp_rx", fbits=Fbits.LOCAL2, allow=apiary)
        d.route(app, "tcp_tx", key="tcp_tx", allow=apiary)
        if not apiary:
            d.route(app, "rx_mem", key="rx_mem")
            d.route("rx_mem", app, fbits=Fbits.LOCAL1)
            d.route(app, "tx_mem", key="tx_mem")
            d.route("tx_mem", app, fbits=Fbits.LOCAL1)
    return d
