"""TCP bulk sink on port 5001 (iperf's) beside the UDP echo stack: every byte a connection
sends is read and counted, as iperf's server does; on a 4 × 4 mesh laid out as
``examples/tcp_echo.py``, with the sink (:class:`~beehive.apps.TcpSinkTile`) in the bottom row::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx     (3,0) tcp_rx
      │               │     └────────────────────────▶ │  ▲ wires
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx     (3,1) tcp_tx
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo
                    (1,3) tcp_sink  (2,3) tx_mem    (3,3) rx_mem

    apiary check examples/tcp_sink.py
    apiary bench examples/tcp_sink.py --tcp          # one connection's goodput into the sink
    apiary sim   examples/tcp_sink.py --tap tap0 --width 64   # then: iperf3 -c 10.0.0.2 ...

(``iperf3`` speaks a control protocol of its own first; ``nc 10.0.0.2 5001 < file`` is a plain
sender.)

The sink is not where the echo is, at (3,2): there, the receive tile's notifications to it
came down column 3 in front of the stores, and a notification waiting for the sink's port
(busy taking a 4 KiB load's 65 flits) held the store behind it in the router for up to 50
cycles (wormhole routers have one queue per input). At (1,3) the notifications turn down
column 1 and the loads' answers come along row 3, so nothing shares a link with the stores:
54.40 bytes/cycle into the sink instead of 45.05 (docs/performance.md, 2026-12-03).

The receive rings are on chip, in a duplex memory tile (``MemoryTile(bram=True,
duplex=True)``: one port writes what the engine stores while the other reads what the sink
loads), so that the rings move a word a cycle each way: a memory tile that serves one request
at a time carries the stores and the loads in turn, half a word a cycle each. The send rings
(unused: the sink sends nothing) are small, in ``tx_mem``.

``design(width=512, mac=..., ipv4=..., port=5001, flows=16, ring=None, rto=None,
name="tcp_sink", ctl_width=64, chunk=None, **tcp)``: ``ring`` is each connection's receive ring
(default 64 KiB at 512 bits and 16 KiB below: what one connection keeps in flight at the link's
rate, with room for the round trip), ``flows * ring`` bytes of on-chip memory in all; the
receive tile's segment buffer is ``2 * ring`` unless ``segment_buffer`` says otherwise (a whole
window of segments arriving at the wire's rate waits there: the receive path takes each
1,460-byte segment in about 26 cycles to the wire's 24);
``chunk`` the sink's largest load; ``mtu`` the largest IPv4 datagram taken (``mtu=9000``:
jumbo frames, segments of up to 8,960 bytes, and ``apiary bench --tcp`` measures them beside
the 1,460-byte ones); ``tcp`` overrides any other :class:`~beehive.proto.tcp.TcpConfig`
field.
"""

from apiary.design import Design
from apiary.load import sibling
from beehive.apps import TcpSinkTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


tcp_echo = sibling(__file__, "tcp_echo.py")

SINK_PORT = 5001
#: Off the receive tile's column: see the module docstring.
SINK_AT = (1, 3)
#: Each connection's send ring: the sink sends nothing, but the engine keeps one per flow.
TX_RING = 4096


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=SINK_PORT, flows=16, ring=None,
           rto=None, *, name="tcp_sink", ctl_width=64, chunk=None, mtu=1500, **tcp):
    if ring is None:
        ring = 65536 if width >= 256 else 16384
    d = Design(name, cols=4, rows=4, width=width, ctl_width=ctl_width)
    d.settings.update(mac=mac, ipv4=ipv4, idle_hz=tcp_echo.IDLE_HZ,
                      memory_latency=tcp_echo.BRAM_LATENCY)
    tcp_echo.udp_echo.build_stack(d, tcp_echo.ECHO_PORT)
    if mtu != 1500:
        # Frames of the MTU, an 802.1Q tag included; segments of the MTU less 40 header bytes.
        d.tiles["eth_rx"].params["max_frame"] = mtu + 18
        tcp.setdefault("mss", mtu - 40)
        tcp.setdefault("tx_ring", max(TX_RING, 1 << (2 * (mtu - 40) - 1).bit_length()))
    tcp.setdefault("tx_ring", TX_RING)
    # Room for a whole window of arriving segments (with their headers), as they come at the
    # wire's rate and leave at the receive path's, a little slower.
    tcp.setdefault("segment_buffer", 2 * ring)
    config = tcp_echo.tcp_config(width, flows, ring, rto, **tcp)
    tcp_echo.add_tcp(d, config, rx_mem=dict(bram=True, duplex=True))
    d.add("tcp_sink", TcpSinkTile, at=SINK_AT, config=config, chunk=chunk)
    tcp_echo.connect_app(d, "tcp_sink", port)
    return d
