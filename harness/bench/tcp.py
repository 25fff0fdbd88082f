"""TCP echo benchmark: ``apiary bench DESIGN --tcp`` on a design whose Ethernet port echoes TCP
on port 7 (examples/tcp_echo.py).

Everything is measured cycle-accurately on a Verilator model, through the design's Ethernet
port, with a scripted peer per connection (:mod:`harness.bench.tcp_peer`) that checks every
segment's checksums and every echoed byte; a wrong or missing echo stops the benchmark with
:class:`~harness.bench.echo.BenchError`.

* **Connection set-up**: a SYN into the idle design, first word in → last word of the SYN-ACK
  out; and the whole handshake plus a 1-byte echo, SYN's first word in → the echo's last out.
* **Connection set-up rate**: a connection tried for every flow slot of the engine, opened as a
  load generator would: 16 SYNs at once (back to back on the link; fewer if the engine keeps
  fewer half-open connections), each SYN-ACK answered with the handshake's ACK and the next SYN
  within 4 cycles (more at once overflow the receive tile's queue of 32 segments at 512 bits,
  and a lost ACK would wait for the engine's retransmission); cycles per connection = (last
  SYN-ACK's last word − first SYN's first word) / connections opened, each checked open by the
  engine's counters. A SYN unanswered for 1,000 cycles is sent once more (counted), then given
  up (a connection the engine found no place for: ``syn_dropped``); the SYNs given up hold
  their place in the 16 while they wait, which the figure includes. The measurements before
  it leave every slot free: they close their connections and answer until the engine has
  freed them all.
* **Connections held**: every connection the set-up rate opened, all open at once, each then
  echoes one 64-byte request, 16 requests outstanding at a time (a new one as each echo
  completes): cycles per request = (last echo's last word − first request's first word) /
  connections; each echo checked byte for byte, and the engine's counters show none closed.
* **Latency**: a 1-byte request on an open, idle connection: its first word in → the last word
  of the segment that echoes it (the design also sends a bare ACK first; it is not counted).
* **Request rate** over many connections (Beehive's small-segment figure, Fig. 9): ``flows``
  connections, each with one 64-byte request outstanding at a time (a closed loop: the next
  request, carrying the ACK of the last reply, goes in when the reply is complete): cycles per
  request = (last reply's last word − first request's first word) / requests. All connections'
  first requests arrive together, back to back; what that burst overflows is dropped by the
  design and counted, and the peer sends it again after 4,000 cycles without an echo (also
  counted: ``resent``), as a TCP client would.
* **Bulk echo goodput** by segment size, one connection and several: each connection keeps up to
  a window of bytes in flight (:func:`bulk_window`: the receive ring or the receive tile's
  segment buffer, whichever is smaller; and the connections together three quarters of the
  segments that buffer queues: 8 KiB and 24 segments with ``examples/tcp_echo.py``'s
  defaults), sent in segments of the size given, and acknowledges what comes back; goodput
  counts the payload bytes echoed (each one crossed the engine twice, in and out) over the
  second half of the run: 8 windows per connection, at most 1,024 segments and at least 64 KiB
  (64 KiB with the defaults). A segment the design drops (its buffer full) is sent again after
  a quiet spell, as TCP would, and counted.

Bit rates are at ``clock_mhz`` (250 MHz, the Beehive paper's); the link is ``width`` bits per
cycle each way.
"""

import json
import random
import sys

from apiary.terminal import StatusLine, render_tables

from .echo import BenchError, TARGET_WIDTH, _cycles, _down, _up, target_cell
from .tcp_conn import _close_all, _connect_all, _peers, second_half
from .tcp_peer import run_peers, seq_add, seq_diff


__all__ = ["BEEHIVE_TCP", "TCP_TARGETS", "run_tcp_bench", "render_tcp", "run"]

#: The Beehive paper's TCP figures (512 bits, 250 MHz): small segments over many connections
#: (Fig. 9: 2,666 kreq/s), and Table V's TCP layer and its receive part (Vivado).
BEEHIVE_TCP = {
    "kreq_per_s": 2666,
    "cycles_per_request": 250_000 / 2666,
    "tcp_layer_luts": 41677,
    "tcp_rx_luts": 10304 + 8847,        # processing + router
}
#: The project brief's target (512 bits).
TCP_TARGETS = {"cycles_per_request": 20}

DEFAULT_FLOWS = (1, 16, 64)
DEFAULT_SEGMENTS = (64, 256, 1024, 1460)


def _tcp_config(design):
    """The ``TcpConfig`` of the design's TCP engine, or ``None`` if it has none."""
    from beehive.proto.tcp import TcpRxTile
    for decl in design.tiles.values():
        if decl.cls is TcpRxTile:
            config = decl.params.get("config")
            return config if config is not None else TcpRxTile().config
    return None


def bulk_window(design):
    """``(window, in_flight)`` of the bulk echo: the bytes one connection keeps in flight (its
    receive ring or the receive tile's segment buffer, whichever is smaller) and the segments
    all connections keep in flight together (three quarters of what that buffer queues, at
    least 32 segments: :class:`~beehive.proto.tcp.TcpRxTile`)."""
    config = _tcp_config(design)
    return (min(config.rx_ring, config.segment_buffer),
            max(32, config.segment_buffer // 1024) * 3 // 4)


def tcp_flows(design):
    """The flow slots of the design's TCP engine (0 if it has none)."""
    config = _tcp_config(design)
    return config.flows if config is not None else 0


def half_open(design):
    """The half-open connections the design's TCP engine keeps (``TcpConfig.half_open``)."""
    config = _tcp_config(design)
    return config.half_open if config is not None else 1


def _entered(sim):
    """The first cycle of each frame the design took since the last call."""
    return [f.cycle_first for f in sim.sent(clear=True)]


def handshake_at_once(sim, peer, step=4, tries=1000):
    """Open ``peer``'s connection, answering within ``step`` cycles: ``(syn_in, synack)``, the
    cycle the SYN's first word went in and the SYN-ACK (seen)."""
    _entered(sim)
    peer.send("S", options=peer.syn_options(), ack=0)
    peer.snd_nxt = seq_add(peer.isn, 1)
    for _ in range(tries):
        synack = [s for s in peer.run(step, ack=False) if s.flags == "SA"]
        if synack:
            break
    else:
        raise BenchError("no SYN-ACK")
    syn_in = _entered(sim)[0]
    peer.iss, peer.rcv_nxt = synack[0].tcp.seq, seq_add(synack[0].tcp.seq, 1)
    peer.send("A")
    return syn_in, synack[0]


def measure_setup(sim, design, step=4):
    """SYN in → SYN-ACK out, and SYN in → the first byte's echo out with the peer answering at
    once (within ``step`` cycles)."""
    peer = _peers(sim, design, 1, base=10000)[0]
    syn_in, synack = handshake_at_once(sim, peer, step)
    peer.send_data(b"!")
    for _ in range(1000):
        peer.run(step, ack=False)
        if peer.stream:
            break
    if bytes(peer.stream) != b"!":
        raise BenchError(f"the first echo came back as {bytes(peer.stream)!r}")
    echo = [s for s in peer.seen if s.data][0]
    _close_all(sim, [peer])
    return {"syn_to_synack": synack.cycle - syn_in, "syn_to_first_echo": echo.cycle - syn_in}


def measure_setup_rate(sim, design, count, window=16, step=4, patience=1000, tries=2,
                       ports=None):
    """``count`` handshakes, ``window`` at a time (the module docstring): cycles per
    connection opened, and the peers of the connections opened. A SYN still unanswered after
    ``tries`` sends is given up (the engine counts it in ``syn_dropped``). The peers' ports
    are ``ports`` if given, else sequential."""
    peers = _peers(sim, design, count, base=50000, ports=ports)
    before = sim.counters()
    _entered(sim)
    first_in, last_out, resent, turned_away = None, 0, 0, 0
    waiting: dict = {}                  # sport: (peer, cycle of its last SYN, SYNs sent)
    todo = list(reversed(peers))
    held = []

    def syn(p, sent=0):
        p.send_syn()
        waiting[p.sport] = (p, sim.cycle, sent + 1)

    window = min(window, half_open(design), count)
    for _ in range(window):
        syn(todo.pop())
    limit = sim.cycle + 2000 * count + 100_000
    while waiting:
        if sim.cycle > limit:
            raise BenchError(f"{len(waiting)} of {count} connections got no SYN-ACK")
        new = run_peers(sim, [p for p, _, _ in waiting.values()], step, ack=False)
        entered = _entered(sim)
        if entered and first_in is None:
            first_in = entered[0]
        for sport, segments in new.items():
            p, since, sent = waiting[sport]
            synack = [s for s in segments if s.flags == "SA"]
            if synack:
                p.establish(synack[0])
                held.append(p)
                last_out = max(last_out, synack[0].cycle)
            elif sim.cycle - since <= patience:
                continue
            elif sent < tries:
                syn(p, sent)
                resent += 1
                continue
            else:
                turned_away += 1
            del waiting[sport]
            if todo:
                syn(todo.pop())
    run_peers(sim, peers, 200, ack=False)
    after = sim.counters()
    opened = after.get("tcp_rx_opened", 0) - before.get("tcp_rx_opened", 0)
    dropped = after.get("tcp_rx_syn_dropped", 0) - before.get("tcp_rx_syn_dropped", 0)
    if opened != count - turned_away or dropped != resent + turned_away:
        raise BenchError(f"{count - turned_away} handshakes answered, {opened} connections "
                         f"opened; {resent + turned_away} SYNs unanswered, {dropped} dropped")
    assert first_in is not None
    cycles = last_out - first_in
    return {"connections": count, "opened": opened, "window": window,
            "cycles": cycles, "cycles_per_connection": cycles / opened, "resent": resent}, held


def measure_held(sim, peers, window=16, size=64, step=4, patience=4000):
    """Every connection of ``peers`` (all open) echoes one ``size``-byte request, ``window``
    outstanding at a time (the module docstring)."""
    before = sim.counters()
    _entered(sim)
    todo = list(reversed(peers))
    waiting: dict = {}                  # sport: (peer, request, cycle sent)
    first_in, last_out, resent = None, 0, 0

    def request(p):
        payload = bytes((p.sport + i) & 0xFF for i in range(size))
        p.send_data(payload)
        waiting[p.sport] = (p, payload, sim.cycle)

    for _ in range(min(window, len(todo))):
        request(todo.pop())
    limit = sim.cycle + 400 * len(peers) + 100_000
    while waiting:
        if sim.cycle > limit:
            raise BenchError(f"{len(waiting)} of {len(peers)} held connections did not echo")
        new = run_peers(sim, [p for p, _, _ in waiting.values()], step)
        entered = _entered(sim)
        if entered and first_in is None:
            first_in = entered[0]
        for sport in new:
            p, payload, since = waiting[sport]
            if len(p.stream) < size:
                if sim.cycle - since > patience:        # dropped in a burst: send it again
                    p.send_data(payload, seq=seq_add(p.snd_nxt, -size))
                    waiting[sport] = (p, payload, sim.cycle)
                    resent += 1
                continue
            if bytes(p.stream) != payload:
                raise BenchError(f"connection {sport} echoed {bytes(p.stream)!r}")
            last_out = max(last_out, max(s.cycle for s in p.seen if s.data))
            del waiting[sport]
            if todo:
                request(todo.pop())
    run_peers(sim, peers, 200)
    after = sim.counters()
    for name in ("tcp_rx_closed", "tcp_rx_reset"):
        if after.get(name, 0) != before.get(name, 0):
            raise BenchError(f"{after.get(name, 0) - before.get(name, 0)} held connections "
                             f"were {name[7:]}")
    assert first_in is not None
    cycles = last_out - first_in
    return {"connections": len(peers), "window": window, "payload_bytes": size,
            "cycles": cycles, "cycles_per_request": cycles / len(peers), "resent": resent}


def measure_latency(sim, peer, requests=5):
    rows = []
    for i in range(requests):
        sim.run(500)                 # idle
        peer.run(0)
        _entered(sim)
        before = len(peer.stream)
        peer.send_data(bytes([65 + i]))
        for _ in range(50):
            new = peer.run(50)
            if len(peer.stream) > before:
                break
        request_in = _entered(sim)[0]
        data = [s for s in new if s.data]
        if not data or bytes(peer.stream[before:]) != bytes([65 + i]):
            raise BenchError("a 1-byte request was not echoed")
        rows.append(data[-1].cycle - request_in)
    return {"requests": requests, "min": min(rows), "median": sorted(rows)[len(rows) // 2],
            "max": max(rows)}


def measure_rate(sim, design, flows, rounds, size=64, step=16, patience=4000):
    peers = _peers(sim, design, flows, base=30000 + 100 * flows)
    _connect_all(sim, peers)
    rng = random.Random(flows)
    want = {p.sport: b"" for p in peers}
    done = {p.sport: 0 for p in peers}
    sent_at = {}                        # sport: (cycle, seq, payload) of the request in flight
    resent = 0
    _entered(sim)
    first_in = None
    last_out = 0

    def request(p):
        payload = rng.randbytes(size)
        want[p.sport] += payload
        sent_at[p.sport] = (sim.cycle, p.snd_nxt, payload)
        p.send_data(payload)

    for p in peers:
        request(p)
    limit = sim.cycle + 400 * flows * rounds + 200_000
    while any(d < rounds for d in done.values()):
        if sim.cycle > limit:
            raise BenchError(f"{sum(d < rounds for d in done.values())} connections stalled")
        new = run_peers(sim, peers, step, ack=False)
        entered = _entered(sim)
        if entered and first_in is None:
            first_in = entered[0]
        for p in peers:
            got = [s for s in new[p.sport] if s.data]
            if got:
                last_out = max(last_out, got[-1].cycle)
            if len(p.stream) == len(want[p.sport]) and done[p.sport] < rounds:
                if bytes(p.stream) != want[p.sport]:
                    raise BenchError(f"connection {p.sport}: the echo differs")
                done[p.sport] += 1
                if done[p.sport] < rounds:
                    request(p)
                else:
                    p.send("A")
            elif done[p.sport] < rounds and sim.cycle - sent_at[p.sport][0] > patience:
                # No echo for a while: the request was dropped (a burst of requests found the
                # design's buffers full); send it again, as TCP would.
                cycle, seq, payload = sent_at[p.sport]
                p.send_data(payload, seq=seq, advance=False)
                sent_at[p.sport] = (sim.cycle, seq, payload)
                resent += 1
    _close_all(sim, peers)
    requests = flows * rounds
    assert first_in is not None         # requests went in
    cycles = last_out - first_in
    return {"flows": flows, "rounds": rounds, "payload_bytes": size, "requests": requests,
            "cycles": cycles, "cycles_per_request": cycles / requests, "resent": resent}


def measure_bulk(sim, design, flows, segment, total, window=8192, in_flight=24, step=64,
                 patience=4000):
    """One bulk echo (the module docstring): ``flows`` connections each echo ``total`` bytes in
    segments of ``segment``, ``window`` bytes in flight each and ``in_flight`` segments in all
    (:func:`bulk_window` gives a design's)."""
    peers = _peers(sim, design, flows, base=40000 + 100 * flows + segment % 97)
    _connect_all(sim, peers)
    rng = random.Random(segment)
    data = {p.sport: rng.randbytes(total) for p in peers}
    base = {p.sport: p.snd_nxt for p in peers}
    sent = {p.sport: 0 for p in peers}
    quiet = {p.sport: 0 for p in peers}
    resent = 0
    # What a connection keeps in flight: up to `window` bytes, and `in_flight` segments over all
    # connections (about what the design's segment buffer holds: a burst of more small segments
    # than it can store is dropped, as a switch would, and the peer then has to send again).
    room = min(window, max(2, in_flight // flows) * segment)
    marks = []                          # (cycle, bytes echoed so far)
    limit = sim.cycle + 200 * total * flows // 8 + 200_000
    while any(len(p.stream) < total for p in peers):
        if sim.cycle > limit:
            raise BenchError("the bulk echo stalled")
        for p in peers:
            acked = seq_diff(p.snd_una, base[p.sport]) if p.snd_una is not None else 0
            if quiet[p.sport] >= patience and acked < sent[p.sport]:
                # Nothing acknowledged for a while: send again from the first unacknowledged
                # byte (the design dropped a segment its buffer had no room for).
                sent[p.sport] = acked
                p.snd_nxt = seq_add(base[p.sport], acked)
                quiet[p.sport] = 0
                resent += 1
            while (sent[p.sport] < total and sent[p.sport] - len(p.stream) + segment <= room):
                n = min(segment, total - sent[p.sport])
                p.send_data(data[p.sport][sent[p.sport]:sent[p.sport] + n])
                sent[p.sport] += n
        before = {p.sport: p.snd_una for p in peers}
        new = run_peers(sim, peers, step)
        for p in peers:
            quiet[p.sport] = 0 if p.snd_una != before[p.sport] else quiet[p.sport] + step
        out = [s.cycle for sp in new.values() for s in sp if s.data]
        if out:
            marks.append((max(out), sum(len(p.stream) for p in peers)))
    for p in peers:
        if bytes(p.stream) != data[p.sport]:
            raise BenchError(f"connection {p.sport}: the bulk echo differs")
    _close_all(sim, peers)
    cycles, rate = second_half(marks, flows * total)
    return {"flows": flows, "segment_bytes": segment, "bytes": flows * total,
            "cycles": cycles, "bytes_per_cycle": rate, "resent": resent, "window": window}


def _traffic(sim, design, flows, rounds, segments, bulk_bytes, bulk_flows, note):
    """Set-up, latency, request rates and bulk goodput (the module docstring)."""
    setup = measure_setup(sim, design)
    peer = _peers(sim, design, 1, base=11000)[0]
    _connect_all(sim, [peer])
    latency = measure_latency(sim, peer)
    _close_all(sim, [peer])
    note(f"set-up {setup['syn_to_synack']} cycles, 1-byte echo {latency['median']} cycles")
    rates = []
    for n in flows:
        rates.append(measure_rate(sim, design, n, rounds))
        note(f"{n} connections: {rates[-1]['cycles_per_request']:.1f} cycles/request")
    bulk = []
    window, in_flight = bulk_window(design)
    for n in bulk_flows:
        for size in segments:
            total = bulk_bytes or max(64 * 1024, min(8 * window, 1024 * size))
            bulk.append(measure_bulk(sim, design, n, size, total, window, in_flight))
            note(f"bulk, {n} connection(s), {size}-byte segments: "
                 f"{bulk[-1]['bytes_per_cycle']:.2f} bytes/cycle")
    return setup, latency, rates, bulk


def run_tcp_bench(design, *, clock_mhz=250.0, flows=DEFAULT_FLOWS, rounds=20,
                  segments=DEFAULT_SEGMENTS, bulk_bytes=None, bulk_flows=(1, 8),
                  connections_only=False, log=None, script=None, progress=None):
    """Every measurement above on ``design`` (with ``connections_only``, the set-up rate and
    the connections held alone); returns a dict (see :func:`render_tcp`). A line per
    measurement goes to ``log`` (a stream), the model's conversion and build to ``progress``
    (see :data:`apiary.top.Progress`)."""
    from apiary.sim import open_sim
    from apiary.sim.verilator import verilator_version

    def note(text):
        if log is not None:
            print(text, file=log, flush=True)

    slots = tcp_flows(design)
    if not slots:
        raise BenchError(f"design {design.name!r} has no TCP engine (TcpRxTile)")
    flows = sorted({min(n, slots) for n in flows})
    setup = latency = None
    rates, bulk = [], []
    with open_sim(design, "verilator", progress=progress) as sim:
        if not connections_only:
            setup, latency, rates, bulk = _traffic(sim, design, flows, rounds, segments,
                                                   bulk_bytes, bulk_flows, note)
        # Last: it leaves every flow slot taken.
        setup_rate, peers = measure_setup_rate(sim, design, slots)
        note(f"{setup_rate['opened']} of {slots} connections opened, "
             f"{setup_rate['window']} at a time: "
             f"{setup_rate['cycles_per_connection']:.1f} cycles each")
        held = measure_held(sim, peers)
        note(f"{held['connections']} connections held, each echoed a request: "
             f"{held['cycles_per_request']:.1f} cycles each")
        counters = {k: v for k, v in sim.counters().items() if v}
        cycles = sim.cycle
    return {"design": design.name, "script": script, "width": design.width,
            "clock_mhz": clock_mhz, "simulator": f"Verilator {verilator_version()}",
            "setup": setup, "latency": latency, "rates": rates, "bulk": bulk,
            "setup_rate": setup_rate, "held": held,
            "cycles_simulated": cycles, "counters": counters, "beehive": BEEHIVE_TCP,
            "targets": TCP_TARGETS, "target_width": TARGET_WIDTH}


def _gbps(bytes_per_cycle, mhz):
    return bytes_per_cycle * 8 * mhz / 1000


def _tables(res, markdown=False):
    mhz = res["clock_mhz"]
    tables = _connection_tables(res)
    if res["setup"] is None:
        return tables
    s, lat = res["setup"], res["latency"]
    latency = ("Latency and connection set-up (one at a time, into the idle design)",
               ["measure", "cycles", f"ns at {mhz:g} MHz"],
               [["SYN first word in → SYN-ACK last word out", str(s["syn_to_synack"]),
                 _up(s["syn_to_synack"] * 1000 / mhz, 1)],
                ["SYN in → echo of the first byte out (handshake + request)",
                 str(s["syn_to_first_echo"]), _up(s["syn_to_first_echo"] * 1000 / mhz, 1)],
                [f"1-byte request → its echo (min / median / max of {lat['requests']})",
                 f"{lat['min']} / {lat['median']} / {lat['max']}",
                 _up(lat["median"] * 1000 / mhz, 1)]])
    rate_rows = []
    for r in res["rates"]:
        cpr = r["cycles_per_request"]
        beehive = target = ""
        if r is res["rates"][-1]:
            beehive = (f"{_down(BEEHIVE_TCP['cycles_per_request'], 1)} "
                       f"({BEEHIVE_TCP['kreq_per_s']:,} kreq/s)")
            target = target_cell(res["width"], f"≤ {TCP_TARGETS['cycles_per_request']}",
                                 cpr <= TCP_TARGETS["cycles_per_request"], markdown)
        rate_rows.append([str(r["flows"]), str(r["requests"]), str(r["resent"]), _cycles(cpr),
                          _down(mhz * 1000 / cpr, 0), beehive, target])
    rates = (f"Request rate: 64-byte requests, one outstanding per connection (closed loop), "
             f"{res['rates'][0]['rounds']} per connection",
             ["connections", "requests", "resent (dropped in a burst)", "cycles/request",
              f"kreq/s at {mhz:g} MHz",
              "Beehive (paper, many connections)", "target (512-bit)"], rate_rows)
    bulk_rows = [[str(b["flows"]), str(b["segment_bytes"]),
                  f"{b['bytes'] // b['flows']:,}" if "bytes" in b else "",
                  _down(b["bytes_per_cycle"]),
                  _down(_gbps(b["bytes_per_cycle"], mhz)), str(b["resent"])]
                 for b in res["bulk"]]
    per = res["bulk"][0] if res["bulk"] else {}
    each = f" (up to {per['window']:,} bytes in flight per connection)" if "window" in per else ""
    bulk = ("Bulk echo goodput: payload bytes echoed per cycle (each byte in and out), second "
            f"half of the run{each}",
            ["connections", "segment (B)", "bytes per connection", "bytes/cycle",
             f"Gbps at {mhz:g} MHz", "times the peer resent (a segment dropped)"], bulk_rows)
    return [latency, *tables, rates, bulk]


def _connection_tables(res):
    """The set-up rate's and the connections held's tables."""
    mhz = res["clock_mhz"]
    sr = res["setup_rate"]
    per = sr["cycles_per_connection"]
    setup_rate = (f"Connection set-up rate: a connection tried for each of the engine's "
                  f"{sr['connections']} flow slots, {sr['window']} SYNs outstanding, each "
                  f"SYN-ACK answered at once",
                  ["connections opened (of those tried)",
                   "cycles (first SYN in → last SYN-ACK out)", "cycles/connection",
                   f"connections/s at {mhz:g} MHz", "SYNs sent again"],
                  [[f"{sr['opened']} ({sr['connections']})", str(sr["cycles"]), _cycles(per),
                    f"{_down(mhz * 1e6 / per / 1e6, 2)} M", str(sr["resent"])]])
    h = res["held"]
    held = (f"Connections held: the {h['connections']} connections opened above, all open at "
            f"once, each echoes a {h['payload_bytes']}-byte request, {h['window']} outstanding",
            ["connections held", "cycles (first request in → last echo out)", "cycles/request",
             f"kreq/s at {mhz:g} MHz", "requests sent again"],
            [[str(h["connections"]), str(h["cycles"]), _cycles(h["cycles_per_request"]),
              _down(mhz * 1000 / h["cycles_per_request"], 0), str(h["resent"])]])
    return [setup_rate, held]


def render_tcp(res, fmt="text", command=None):
    """The results as ``"text"`` (tables for a terminal, 100 columns), ``"markdown"`` or
    ``"json"``."""
    if fmt == "json":
        return json.dumps(res, indent=2) + "\n"
    head = (f"TCP echo benchmark of {res['design']!r}: {res['width']}-bit data plane at "
            f"{res['clock_mhz']:g} MHz, {res['simulator']} (cycle-accurate), every echoed byte "
            f"checked")
    markdown = fmt == "markdown"
    return render_tables(head, _tables(res, markdown), markdown, command)


def run(args, design, out=None, log=None):
    """``apiary bench DESIGN --tcp``: measure, print, return the results."""
    from .sink import sink_tile
    from . import sink
    out = sys.stdout if out is None else out
    log = sys.stderr if log is None else log
    parts = ["apiary bench", args.design, "--tcp"]
    if args.width is not None:
        parts.append(f"--width {args.width}")
    parts += [f"--set {name}={value!r}" for name, value in getattr(args, "params", None) or ()]
    if args.connections:
        parts.append("--connections")
    parts.append(f"--clock-mhz {args.clock_mhz:g}")
    if args.markdown:
        parts.append("--markdown")
    if sink_tile(design) is not None:
        if args.connections:
            raise BenchError("--connections measures the echo's connections; this design's "
                             "application is a sink (its benchmark is the goodput into it)")
        return sink.run(args, design, out, log, " ".join(parts))
    res = run_tcp_bench(design, clock_mhz=args.clock_mhz, log=log, script=args.design,
                        connections_only=args.connections, progress=StatusLine(log))
    fmt = "json" if args.json else "markdown" if args.markdown else "text"
    print(render_tcp(res, fmt, " ".join(parts)), end="", file=out)
    return res

