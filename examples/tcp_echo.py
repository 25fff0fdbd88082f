"""TCP echo on port 7 beside the UDP echo stack: ARP, ping, UDP echo and TCP echo at one address,
on a 4 × 4 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx     (3,0) tcp_rx ◀─┐
      │               │     └────────────────────────▶ │  ▲  │     │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx     (3,1) rx_mem   │ wires
      ▲               ▲               ▲                            │
    (0,2) arp       (1,2) icmp      (2,2) echo      (3,2) tcp_echo │
                                    (2,3) tx_mem    (3,3) tcp_tx ──┘

The TCP engine is two tiles, ``tcp_rx`` and ``tcp_tx``, joined by dedicated wires
(:class:`~beehive.proto.tcp.state.TcpWires`); each connection's receive ring is in ``rx_mem`` and
its send ring in ``tx_mem``, and the echo application moves bytes from one to the other
(:class:`~beehive.apps.TcpEchoTile`). Each memory is next to the engine tile that uses it, the
application between them: the 16 messages of a 1-byte echo that asks for room cross 23 links
(29 with :func:`add_tcp`'s places; ``bulk=True`` keeps those, its application at (1,3)).
Every tile that waits on the NoC for an answer (the TCP tiles, the application) never holds its
input meanwhile, so the layout passes ``apiary check``::

    apiary check examples/tcp_echo.py
    apiary sim   examples/tcp_echo.py --tap tap0 --width 64      # then: nc 10.0.0.2 7

``design(width=512, mac=..., ipv4=..., port=7, flows=None, ring=None, rto=None, memory_latency=2,
name="tcp_echo", ctl_width=64, bulk=False, chunk=None, low_latency=False, **tcp)``: ``flows``
defaults to 256 at 512 bits and 32 below; ``ring`` is each connection's receive and send ring
(default 16 KiB; in ``rx_mem`` and ``tx_mem``, whose read latency in simulation is
``memory_latency`` cycles: block RAM); ``rto`` the retransmission timeout in cycles (default
200,000: 0.8 ms at 250 MHz, and a fraction of a second of a TAP bridge's idle time, which it runs at
``idle_hz``); ``chunk`` the echo's largest step (:class:`~beehive.apps.TcpEchoTile`: default a
segment); ``tcp`` overrides any other :class:`~beehive.proto.tcp.TcpConfig` field; ``low_latency``
is the design setting (:func:`beehive.proto.layer.low_latency`: every queue passed straight through
when empty). The UDP echo answers on port 7 too (UDP and TCP ports are separate).

``bulk=True`` is the configuration for a few connections' bulk echo at the link's rate::

    apiary bench examples/tcp_echo.py --tcp --set bulk=True

16 flows (unless ``flows`` says otherwise) of 128 KiB rings, both memories on chip and duplex
(``MemoryTile(bram=True, duplex=True)``: a store streams in while a load streams out; 4 MiB of
rings in all), a segment buffer of two rings, the echo moving up to 64 KiB a step (its buffer
holds a step per job: 256 KiB), and the echo at (1,3), off the receive tile's column (as
``examples/tcp_sink.py``'s sink: there, the engine's messages to the echo wait in no router in
front of the stores). A step is a round of requests to the engine (none when what the flow's
last grant left covers it) and the two memories, its store cut through as its load's data
comes: one segment a step (the default design) moves one connection's 1,460-byte bulk echo at
19.08 bytes/cycle each way at 512 bits, the bulk design's 64 KiB steps at 36.60
(docs/performance.md, 2026-12-06).
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.noc.header import Fbits
from apiary.os.memory_tile import MemoryTile
from beehive.apps import TcpEchoTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.arp import RESOLVED_KEY
from beehive.proto.ipv4 import IpProtocol
from beehive.proto.tcp import TcpConfig, TcpRxTile, TcpTxTile


udp_echo = sibling(__file__, "udp_echo.py")

ECHO_PORT = 7
#: Read latency (cycles) of the buffer memories in simulation: block RAM, as Beehive's buffer
#: tiles (a DRAM behind LiteDRAM is more like 20; ``memory_latency=20``).
BRAM_LATENCY = 2
#: Simulated cycles per wall-clock second while a TAP-bridged simulation is idle, so that the
#: retransmission timer runs while Linux thinks.
IDLE_HZ = 1_000_000


def tcp_config(width=512, flows=None, ring=16384, rto=None, **more):
    """The engine's :class:`TcpConfig` for this example (``more`` overrides any field)."""
    if flows is None:
        flows = 256 if width >= 256 else 32
    fields = dict(flows=flows, rx_ring=ring, tx_ring=ring, rto=200_000 if rto is None else rto,
                  linger=400_000)
    fields.update(more)
    return TcpConfig(**fields)


#: Where the engine's transmit tile and the receive rings' memory go (unless ``bulk``).
ONE_ROUND_TRIP = dict(tx_at=(3, 3), rx_mem_at=(3, 1))

#: ``bulk=True``: each connection's rings, the echo's largest step, the flows, the echo's place.
BULK_RING, BULK_CHUNK, BULK_FLOWS, BULK_AT = 131072, 65536, 16, (1, 3)


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=ECHO_PORT, flows=None,
           ring=None, rto=None, memory_latency=BRAM_LATENCY, *, name="tcp_echo", ctl_width=64,
           bulk=False, chunk=None, low_latency=False, **tcp):
    d = Design(name, cols=4, rows=4, width=width, ctl_width=ctl_width)
    d.settings.update(mac=mac, ipv4=ipv4, idle_hz=IDLE_HZ, memory_latency=memory_latency,
                      low_latency=low_latency)
    udp_echo.build_stack(d, port)
    memory, at, places = None, (3, 2), ONE_ROUND_TRIP
    if bulk:
        at, places = BULK_AT, {}
        flows = BULK_FLOWS if flows is None else flows
        ring = BULK_RING if ring is None else ring
        chunk = BULK_CHUNK if chunk is None else chunk
        tcp.setdefault("segment_buffer", 2 * ring)
        memory = dict(bram=True, duplex=True)
    config = tcp_config(width, flows, 16384 if ring is None else ring, rto, **tcp)
    add_tcp(d, config, rx_mem=memory, tx_mem=memory, **places)
    step = {} if chunk is None else {"chunk": chunk}
    d.add("tcp_echo", TcpEchoTile, at=at, config=config, **step)
    connect_app(d, "tcp_echo", port)
    return d


def add_tcp(d, config, *, rx_at=(3, 0), tx_at=(3, 1), rx_mem_at=(3, 3), tx_mem_at=(2, 3),
            apiary=False, rx_mem=None, tx_mem=None):
    """Add the TCP engine (``tcp_rx``, ``tcp_tx``), its two buffer memories and their routes to
    a design that has ``ip_rx``, ``ip_tx`` and ``arp``. ``apiary``: the engine's tiles are
    untrusted, behind monitors (the design has a :class:`~apiary.os.kernel.Kernel`), and each
    connection's rings are segments of the kernel's memories, so no buffer memories are added
    (``examples/tcp_apiary.py``). ``rx_mem``: more parameters of the receive rings'
    :class:`~apiary.os.memory_tile.MemoryTile` (``examples/tcp_sink.py``: on chip, duplex);
    ``tx_mem`` the same for the send rings'."""
    d.add("tcp_rx", TcpRxTile, at=rx_at, config=config, trusted=not apiary)
    d.add("tcp_tx", TcpTxTile, at=tx_at, config=config, trusted=not apiary)
    d.wire("tcp_rx", "tcp_tx")
    d.route("ip_rx", "tcp_rx", key=IpProtocol.TCP.value)
    d.route("tcp_tx", "ip_tx", allow=apiary)
    if apiary:
        d.allow("tcp_rx", "tcp_tx")         # each connection's send ring goes to tcp_tx
        return d
    d.add("rx_mem", MemoryTile, at=rx_mem_at, size_bytes=config.rx_memory_bytes(),
          **(rx_mem or {}))
    d.add("tx_mem", MemoryTile, at=tx_mem_at, size_bytes=config.tx_memory_bytes(),
          **(tx_mem or {}))
    d.route("tcp_rx", "rx_mem", key="rx_mem")
    d.route("rx_mem", "tcp_rx", fbits=Fbits.LOCAL1)
    d.route("tcp_tx", "tx_mem", key="tx_mem")
    d.route("tx_mem", "tcp_tx", fbits=Fbits.LOCAL1)
    return d


def connect_app(d, app, port=None, *, opens=False, apiary=False):
    """Routes between the TCP engine and the application tile ``app``: new connections to
    ``port`` go to it (if given); ``opens``: it also opens connections (through ARP).
    ``apiary``: the engine (and the application) are untrusted; every route is also an IPC
    capability, and the application reaches its rings through its monitor, not by routes."""
    d.route("tcp_rx", app, key="app" if port is None else port, allow=apiary)
    d.route("tcp_tx", app, key="app", allow=apiary)
    d.route(app, "tcp_rx", key="tcp_rx", fbits=Fbits.LOCAL2, allow=apiary)
    d.route(app, "tcp_tx", key="tcp_tx", allow=apiary)
    if not apiary:
        d.route(app, "rx_mem", key="rx_mem")
        d.route("rx_mem", app, fbits=Fbits.LOCAL1)
        d.route(app, "tx_mem", key="tx_mem")
        d.route("tx_mem", app, fbits=Fbits.LOCAL1)
    if opens:
        d.route("tcp_rx", "arp", key="arp", allow=apiary)
        d.route("arp", "tcp_rx", key=RESOLVED_KEY, fbits=Fbits.LOCAL3)
    return d
