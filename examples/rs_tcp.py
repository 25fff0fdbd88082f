"""Reed-Solomon (8,2) encoding over TCP on port 7300, beside the TCP echo (examples/tcp_echo.py),
on a 4 × 4 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx     (3,0) tcp_rx ◀─┐
      │               │     └────────────────────────▶ │   ▲ wires  │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx     (3,1) tcp_tx   │
      ▲               ▲               ▲                │           │
    (0,2) arp       (1,2) icmp      (2,2) echo      (3,2) tcp_echo │
    (0,3)           (1,3) rs        (2,3) tx_mem    (3,3) rx_mem ──┘

Connections to port 7300 go to ``rs`` (:class:`~beehive.apps.tcp_rs.TcpRsTile`): each request
is ``8 * shard_bytes`` bytes (the 8 data shards back to back, no header) and is answered with
``2 * shard_bytes`` bytes (the 2 parity shards), as ``reedsolo.RSCodec(2)`` codes each byte
column (see ``docs/reed-solomon.md``). ::

    apiary check examples/rs_tcp.py
    apiary sim   examples/rs_tcp.py --tap tap0 --width 64       # then send 4 KiB to 10.0.0.2 7300

``design(width=512, shard_bytes=512, port=7300, *, name="rs_tcp", **tcp_echo_options)``: the
options of ``examples/tcp_echo.py``'s ``design`` (its ``ring`` must hold a request:
``8 * shard_bytes`` bytes; ``shard_bytes`` a multiple of ``width // 8``).
"""

from apiary.load import sibling
from beehive.apps.tcp_rs import DEFAULT_SHARD_BYTES, TcpRsTile


tcp_echo = sibling(__file__, "tcp_echo.py")

RS_PORT = 7300


def design(width=512, shard_bytes=DEFAULT_SHARD_BYTES, port=RS_PORT, *, name="rs_tcp",
           **options):
    d = tcp_echo.design(width=width, name=name, **options)
    config = d.tiles["tcp_rx"].params["config"]        # the engine's, as the example set it
    d.add("rs", TcpRsTile, at=(1, 3), config=config, shard_bytes=shard_bytes)
    tcp_echo.connect_app(d, "rs", port)
    return d

