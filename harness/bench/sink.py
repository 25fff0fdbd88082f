"""TCP bulk sink benchmark: ``apiary bench DESIGN --tcp`` on a design whose TCP application is
a :class:`~beehive.apps.TcpSinkTile` (examples/tcp_sink.py): how fast one connection (and a
few) can send into the design, the figure iperf reports.

Each connection's peer (:mod:`harness.bench.tcp_peer`) sends ``total`` bytes in segments of the
size given, keeping in flight as much as the design's advertised window allows (no congestion
window of its own: a LAN peer past slow start), and looks at the design's ACKs every ``step``
cycles; a segment the design dropped is sent again once nothing was acknowledged for
``patience`` cycles, as TCP would, and counted. Goodput is the bytes acknowledged per cycle over
the second half of the run (from the ACK that passed half the bytes to the last ACK; each
ACK's cycle is that of its last word out); the sink's ``bytes`` counter must have moved by
exactly what was sent, so every byte was read out of the rings, not only acknowledged.

The link bound beside it is the segment's payload over the words its frame takes on the link
(Ethernet, IPv4 and a 20-byte TCP header, one word a cycle): what a wire of the data plane's
width carries at most.
"""

import json
import random

from apiary.terminal import StatusLine, render_tables

from .echo import BenchError, _down
from .tcp_conn import _close_all, _connect_all, _peers, second_half
from .tcp_peer import run_peers, seq_add, seq_diff


__all__ = ["sink_tile", "sink_segments", "measure_sink", "run_sink_bench", "render_sink", "run"]

#: Segment sizes measured: the standard MSS and a smaller one; and the design's MSS if it is
#: larger (jumbo frames: :func:`sink_segments`).
SINK_SEGMENTS = (1460, 512)
#: Connections at once.
SINK_FLOWS = (1, 4)
#: Bytes each connection sends.
SINK_BYTES = 1 << 20


def sink_tile(design):
    """The name of the design's :class:`~beehive.apps.TcpSinkTile`, or ``None``."""
    from beehive.apps import TcpSinkTile
    return next((name for name, decl in design.tiles.items() if decl.cls is TcpSinkTile), None)


def sink_segments(design):
    """:data:`SINK_SEGMENTS`, and the design's MSS after them if it is larger (a design that
    takes jumbo frames)."""
    from beehive.proto.tcp import TcpRxTile
    mss = max((decl.params["config"].mss for decl in design.tiles.values()
               if decl.cls is TcpRxTile and decl.params.get("config") is not None), default=0)
    return SINK_SEGMENTS + ((mss,) if mss > max(SINK_SEGMENTS) else ())


def _sink_port(design, tile):
    """The local port the RX tile routes to the sink (its integer route key)."""
    for route in design.routes:
        if route.src == "tcp_rx" and route.dst == tile and isinstance(route.key, int):
            return route.key
    raise BenchError(f"no TCP port is routed to {tile!r}")


def link_bound(segment, width):
    """Payload bytes per cycle of back-to-back frames of ``segment``-byte segments."""
    nb = width // 8
    return segment / -(-(14 + 20 + 20 + segment) // nb)


def measure_sink(sim, design, tile, flows, segment, total, *, step=16, patience=4000):
    port = _sink_port(design, tile)
    peers = _peers(sim, design, flows, base=30000 + 100 * flows + segment % 97, port=port)
    _connect_all(sim, peers)
    rng = random.Random(segment + flows)
    data = {p.sport: rng.randbytes(total) for p in peers}
    base = {p.sport: p.snd_nxt for p in peers}
    sent = {p.sport: 0 for p in peers}
    quiet = {p.sport: 0 for p in peers}
    window = {p.sport: 0 for p in peers}
    for p in peers:                      # the window the handshake's SYN-ACK advertised
        synack = next(s for s in p.seen if s.flags == "SA")
        window[p.sport] = synack.tcp.window
    counter = f"{tile}_bytes"
    read_before = sim.counters()[counter]
    resent = 0
    marks = []                          # (cycle, bytes acknowledged so far)
    limit = sim.cycle + 100 * total * flows // 8 + 200_000

    def acked(p):
        return seq_diff(p.snd_una, base[p.sport]) if p.snd_una is not None else 0

    while any(acked(p) < total for p in peers):
        if sim.cycle > limit:
            raise BenchError("the transfer into the sink stalled")
        for p in peers:
            done = acked(p)
            if quiet[p.sport] >= patience and done < sent[p.sport]:
                sent[p.sport] = done
                p.snd_nxt = seq_add(base[p.sport], done)
                quiet[p.sport] = 0
                resent += 1
            while (sent[p.sport] < total
                   and sent[p.sport] + min(segment, total - sent[p.sport])
                   <= done + window[p.sport]):
                n = min(segment, total - sent[p.sport])
                p.send_data(data[p.sport][sent[p.sport]:sent[p.sport] + n])
                sent[p.sport] += n
        before = {p.sport: p.snd_una for p in peers}
        new = run_peers(sim, peers, step)
        for p in peers:
            quiet[p.sport] = 0 if p.snd_una != before[p.sport] else quiet[p.sport] + step
            for s in new[p.sport]:
                if "A" in s.flags and s.tcp.ack == p.snd_una:
                    window[p.sport] = s.tcp.window << p.peer_wscale
        acks = [s.cycle for segs in new.values() for s in segs if "A" in s.flags]
        if acks and any(p.snd_una != before[p.sport] for p in peers):
            marks.append((max(acks), sum(acked(p) for p in peers)))
    # Acknowledged is stored, not yet read: the sink reads the last bytes after their ACK.
    for _ in range(100):
        read = sim.counters()[counter] - read_before
        if read >= flows * total:
            break
        run_peers(sim, peers, 100)
    _close_all(sim, peers)
    if read != flows * total:
        raise BenchError(f"the sink read {read} bytes of the {flows * total} sent")
    cycles, rate = second_half(marks, flows * total)
    return {"flows": flows, "segment_bytes": segment, "bytes": flows * total,
            "cycles": cycles, "bytes_per_cycle": rate, "resent": resent, "read": read,
            "link_bound": link_bound(segment, design.width)}


def run_sink_bench(design, *, clock_mhz=250.0, flows=SINK_FLOWS, segments=None,
                   total=SINK_BYTES, log=None, script=None, progress=None):
    """The sink's goodput for each number of connections and segment size; a dict (see
    :func:`render_sink`)."""
    from apiary.sim import open_sim
    from apiary.sim.verilator import verilator_version

    tile = sink_tile(design)
    if tile is None:
        raise BenchError(f"design {design.name!r} has no TcpSinkTile")
    if segments is None:
        segments = sink_segments(design)
    runs = []
    with open_sim(design, "verilator", progress=progress) as sim:
        for n in flows:
            for size in segments:
                runs.append(measure_sink(sim, design, tile, n, size, total))
                if log is not None:
                    print(f"sink, {n} connection(s), {size}-byte segments: "
                          f"{runs[-1]['bytes_per_cycle']:.2f} bytes/cycle", file=log, flush=True)
        counters = {k: v for k, v in sim.counters().items() if v}
    return {"design": design.name, "script": script, "width": design.width,
            "clock_mhz": clock_mhz, "simulator": f"Verilator {verilator_version()}",
            "sink": runs, "counters": counters}


def _gbps(bytes_per_cycle, mhz):
    return bytes_per_cycle * 8 * mhz / 1000


def render_sink(res, fmt="text", command=None):
    """The results as ``"text"``, ``"markdown"`` or ``"json"``."""
    if fmt == "json":
        return json.dumps(res, indent=2) + "\n"
    mhz = res["clock_mhz"]
    rows = [[str(r["flows"]), str(r["segment_bytes"]), f"{r['bytes']:,}",
             _down(r["bytes_per_cycle"]), _down(_gbps(r["bytes_per_cycle"], mhz)),
             _down(r["link_bound"]), _down(_gbps(r["link_bound"], mhz)), str(r["resent"])]
            for r in res["sink"]]
    table = ("Goodput into the sink: payload bytes acknowledged per cycle (every one read by the "
             "sink), second half of the run",
             ["connections", "segment (B)", "bytes sent", "bytes/cycle", f"Gbps at {mhz:g} MHz",
              "link bound (B/cycle)", f"link bound (Gbps at {mhz:g} MHz)",
              "times the peer resent (a segment dropped)"], rows)
    head = (f"TCP sink benchmark of {res['design']!r}: {res['width']}-bit data plane at "
            f"{mhz:g} MHz, {res['simulator']} (cycle-accurate), every byte read by the sink")
    return render_tables(head, [table], fmt == "markdown", command)


def run(args, design, out, log, command):
    """``apiary bench DESIGN --tcp`` on a sink design: measure, print, return the results."""
    res = run_sink_bench(design, clock_mhz=args.clock_mhz, log=log, script=args.design,
                         progress=StatusLine(log))
    fmt = "json" if args.json else "markdown" if args.markdown else "text"
    print(render_sink(res, fmt, command), end="", file=out)
    return res
