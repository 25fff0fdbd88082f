"""Reed-Solomon (8,2) encoding over TCP under Apiary: the Apiary thesis's case study (§3.4.4,
§3.5). The TCP engine, a round-robin scheduler and ``encoders`` encoder tiles
(:class:`~beehive.apps.tcp_rs.TcpRsTile`), all untrusted behind monitors, and the kernel with
``memories`` memory tiles, on port 7300 (the layout of ``examples/tcp_apiary.py``)::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx    (3,0) tcp_rx*   (4,0) mm
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx    (3,1) tcp_tx*   (4,1) errors
    (0,2) arp       (1,2) icmp     (2,2) echo      (3,2) sched*    (4,2) mem0
                                   (2,3) ctl       (3,3) app*      (4,3) mem1
                                                   (3,4) app1* ...

    * untrusted: behind a monitor

Each new connection gets a receive and a send ring, allocated through the memory manager in
one of the memory tiles, and goes to the next encoder; a client sends requests of 8 data shards
(``8 * shard_bytes`` bytes, 4 KiB by default) and gets the 2 parity shards back on the same
connection. An encoder reaches its rings only through its monitor: one that stores out of
bounds is quarantined and the others keep going (``apiary bench rs`` measures all of this).

``design(width=512, encoders=1, memories=2, shard_bytes=512, flows=4, memory_latency=None,
fault=None, ...)``: ``memory_latency`` cycles of the memory tiles in simulation (an int, or a
range ``(lo, hi)`` drawn at random per access, seeded); ``fault=(k, n)``: encoder ``k``'s
``n``-th store (0 the first) goes out of bounds, for the fault-isolation experiment. Any of
them can be set on the command line, ``--set NAME=VALUE``::

    apiary check examples/rs_apiary.py --set encoders=4 --set memories=2
    apiary sim   examples/rs_apiary.py --tap tap0 --width 64 --set encoders=2
    python examples/rs_client.py 10.0.0.2 --requests 10      # from the namespace
"""

from apiary.load import sibling
from beehive.apps.tcp_rs import TcpRsTile


tcp_apiary = sibling(__file__, "tcp_apiary.py")

RS_PORT = 7300


def design(width=512, *, encoders=1, memories=2, shard_bytes=512, flows=4, memory_latency=None,
           fault=None, name="rs_apiary", **tcp):
    if encoders not in (1, 2, 3, 4):
        raise ValueError(f"encoders must be 1 to 4, not {encoders!r}")
    ring = max(4096, 1 << (8 * shard_bytes - 1).bit_length())     # a request fits in a ring
    need = 2 * ring * (flows + 2)           # every flow slot's pair of rings, and the spares
    params = [dict(shard_bytes=shard_bytes) for _ in range(encoders)]
    if fault is not None:
        index, after = fault
        params[index]["fault_after"] = after
    more = {} if memory_latency is None else {"memory_latency": memory_latency}
    return tcp_apiary.design(width=width, app=TcpRsTile, apps=encoders, scheduler=True,
                             memories=memories, port=RS_PORT, flows=flows,
                             ring=ring, app_params=params,
                             memory_bytes=max(1 << 17, 1 << (need - 1).bit_length()),
                             name=name, **more, **tcp)
