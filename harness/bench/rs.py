"""Reed-Solomon over TCP under Apiary: the Apiary thesis's case study (§3.5), cycle-accurate.

``apiary bench rs`` builds ``examples/rs_apiary.py`` (the TCP engine and ``tiles`` encoders,
all untrusted behind monitors, the encoders behind the round-robin scheduler, two memory
tiles) and drives it on Verilator through its Ethernet port with scripted TCP clients
(:mod:`harness.bench.tcp_peer`), checking every parity byte against the Python model:

* **Throughput and latency, 1 to 4 encoders** (the thesis's Table 3.3): one connection per
  encoder, each client with one request (8 data shards: 4 KiB by default) outstanding at a time;
  throughput = requests / (last reply's last word out − first request's first word in);
  latency per request = its first word in → the last word of its parity out, averaged.
* **The same with a random 10-20-cycle memory delay** (every load and store of the memory tiles,
  seeded), one encoder.
* **First request**: an idle design, SYN's first word in → the first reply's last word out, the
  client answering at once; and the allocation of a connection's rings, which the engine does
  ahead of the connection (:mod:`beehive.proto.tcp.segments`): reset → the first pair allocated.
* **Fault isolation over time** (the thesis's Fig. 3.3): two connections, two encoders; in
  window ``fault_window`` the first connection's encoder addresses its send ring out of bounds;
  replies per window of each connection, as a table and an SVG plot.

Times are at ``clock_mhz`` (250: the thesis's 4 ns cycle).
"""

import argparse
import json
import pathlib
import random
import sys

from apiary.cli import add_clock_argument
from apiary.terminal import render_tables

from .echo import BenchError, _cycles, _down, _up
from .tcp import _close_all, _connect_all, _peers, handshake_at_once
from .tcp_peer import run_peers


__all__ = ["THESIS_TABLE_3_3", "THESIS_DELAY", "THESIS_FIRST", "closed_loop", "main"]

DESIGN = pathlib.Path(__file__).resolve().parents[2] / "examples" / "rs_apiary.py"
#: The design scripts the benchmark builds (part of a sweep job's source stamp).
SCRIPTS = (DESIGN,)

#: The thesis's Table 3.3 (simulation, 4 ns per cycle): encoders → (kreq/s, average µs).
THESIS_TABLE_3_3 = {1: (105, 9.4), 2: (147, 13.1), 3: (175, 16.5), 4: (190, 18.3)}
#: With a random 10-20-cycle memory delay, one encoder: (kreq/s, average µs).
THESIS_DELAY = (20.5, 49.0)
#: The first request with one encoder: (µs in all, µs of it allocating the buffers).
THESIS_FIRST = (11.0, 1.8)


def _request_frames(sim):
    """``{sport: first cycle}`` of the TCP segments with data the design took since the last
    call (a request's first word in)."""
    from scapy.layers.inet import TCP
    from scapy.layers.l2 import Ether
    first: dict[int, int] = {}
    for f in sim.sent(clear=True):
        packet = Ether(f.data)
        if TCP in packet and len(packet[TCP].payload):
            first.setdefault(packet[TCP].sport, f.cycle_first)
    return first


def send_request(peer, payload):
    """Send ``payload`` on ``peer``'s connection in segments of its MSS."""
    for i in range(0, len(payload), peer.mss):
        peer.send_data(payload[i:i + peer.mss])


def closed_loop(sim, peers, requests, service, *, seed=1, step=8, patience=200_000,
                until=None):
    """Each of ``peers`` (open connections) sends ``requests`` requests, one outstanding at a
    time (or, with ``until``, as many as it can until that cycle); ``service`` is
    ``(make(rng) -> request bytes, reply(request) -> bytes)``. Returns the latencies (cycles,
    request first word in → reply last word out), the span, and when each connection's replies
    were complete (``done_at``, by source port)."""
    make, reply_of = service
    rng = random.Random(seed)
    want = {p.sport: bytearray() for p in peers}
    done = {p.sport: 0 for p in peers}
    started = {}                        # sport: cycle its request's first word went in
    waiting = {}                        # sport: the request in flight (not seen going in yet)
    latencies = []
    done_at: dict[int, list[int]] = {p.sport: [] for p in peers}
    first_in = last_out = None
    if until is not None:
        requests = 1 << 30
    _request_frames(sim)

    def request(p):
        payload = make(rng)
        want[p.sport] += reply_of(payload)
        waiting[p.sport] = sim.cycle
        send_request(p, payload)

    for p in peers:
        request(p)
    limit = sim.cycle + patience * requests if until is None else until
    while any(d < requests for d in done.values()):
        if until is not None and sim.cycle >= until:
            break
        if sim.cycle > limit:
            raise BenchError(f"{sum(d < requests for d in done.values())} connections stalled "
                             f"({done})")
        new = run_peers(sim, peers, step, ack=False)
        for sport, cycle in _request_frames(sim).items():
            if sport in waiting:
                del waiting[sport]
                started[sport] = cycle
                first_in = cycle if first_in is None else min(first_in, cycle)
        for p in peers:
            got = [s for s in new[p.sport] if s.data]
            if done[p.sport] >= requests or len(p.stream) < len(want[p.sport]):
                continue
            if bytes(p.stream) != bytes(want[p.sport]):
                raise BenchError(f"connection {p.sport}: the reply to request "
                                 f"{done[p.sport] + 1} differs from the model's")
            out = got[-1].cycle
            latencies.append(out - started.pop(p.sport))
            done_at[p.sport].append(out)
            last_out = out if last_out is None else max(last_out, out)
            done[p.sport] += 1
            if done[p.sport] < requests:
                request(p)
            else:
                p.send("A")
    if not latencies:
        raise BenchError("no request was answered")
    assert first_in is not None and last_out is not None    # set by every answer
    return {"requests": len(latencies), "cycles": last_out - first_in,
            "latency_mean": sum(latencies) / len(latencies), "latency_min": min(latencies),
            "latency_max": max(latencies), "done_at": done_at, "first_in": first_in}


def rs_service(shard_bytes):
    """Requests of 8 random shards; the reply is their 2 parity shards."""
    from beehive.apps.reed_solomon import encode_shards

    def make(rng):
        return rng.randbytes(8 * shard_bytes)

    def reply(request):
        shards = [request[i * shard_bytes:(i + 1) * shard_bytes] for i in range(8)]
        return b"".join(encode_shards(shards))
    return make, reply


def _open(design, progress=None):
    from apiary.sim import open_sim
    return open_sim(design, "verilator", progress=progress)


def measure_scaling(rs_apiary, tiles, *, width, shard_bytes, requests, memory_latency=None,
                    log=None):
    """Table 3.3's row for ``tiles`` encoders (one connection each)."""
    design = rs_apiary.design(width=width, encoders=tiles, shard_bytes=shard_bytes,
                              memory_latency=memory_latency)
    with _open(design) as sim:
        peers = _peers(sim, design, tiles, port=rs_apiary.RS_PORT)
        _connect_all(sim, peers)
        res = closed_loop(sim, peers, requests, rs_service(shard_bytes))
        _close_all(sim, peers)
        res["counters"] = {k: v for k, v in sim.counters().items() if v}
    del res["done_at"]
    res["encoders"] = tiles
    if log:
        print(f"{tiles} encoder(s): {res['cycles'] / res['requests']:.1f} cycles/request, "
              f"latency {res['latency_mean']:.0f} cycles", file=log, flush=True)
    return res


def measure_first_request(rs_apiary, *, width, shard_bytes, step=4):
    """An idle design: reset → the first pair of rings allocated; SYN in → SYN-ACK out; SYN in →
    the first reply's last word out (the client answering at once)."""
    design = rs_apiary.design(width=width, encoders=1, shard_bytes=shard_bytes)
    make, reply_of = rs_service(shard_bytes)
    with _open(design) as sim:
        allocated = None
        while sim.cycle < 2000:
            sim.run(1)
            if sim.counters().get("mm_allocs", 0) >= 2:
                allocated = sim.cycle
                break
        if allocated is None:
            raise BenchError("the engine allocated no rings")
        sim.run(500)
        peer = _peers(sim, design, 1, base=10000, port=rs_apiary.RS_PORT)[0]
        syn_in, synack = handshake_at_once(sim, peer, step)
        request = make(random.Random(7))
        want = reply_of(request)
        send_request(peer, request)
        for _ in range(20_000):
            peer.run(step, ack=False)
            if len(peer.stream) >= len(want):
                break
        if bytes(peer.stream) != want:
            raise BenchError("the first reply differs from the model's")
        out = [s for s in peer.seen if s.data][-1].cycle
        _close_all(sim, [peer])
    return {"allocation": allocated, "syn_to_synack": synack.cycle - syn_in,
            "syn_to_reply": out - syn_in}


def measure_isolation(rs_apiary, *, width, shard_bytes, windows=8, fault_window=3,
                      window_cycles=None, log=None):
    """Two connections, two encoders; the first's encoder stores out of bounds during window
    ``fault_window``: replies per window of each connection."""
    # A first run without the fault times a request, to size the windows.
    design = rs_apiary.design(width=width, encoders=2, shard_bytes=shard_bytes)
    with _open(design) as sim:
        peers = _peers(sim, design, 2, port=rs_apiary.RS_PORT)
        _connect_all(sim, peers)
        probe = closed_loop(sim, peers, 4, rs_service(shard_bytes))
    per_request = probe["cycles"] / probe["requests"] * 2      # per connection
    window = window_cycles or int(per_request * 8)
    fault_after = int(fault_window * window / per_request + 4)   # its store in that window
    design = rs_apiary.design(width=width, encoders=2, shard_bytes=shard_bytes,
                              fault=(0, fault_after))
    with _open(design) as sim:
        peers = _peers(sim, design, 2, port=rs_apiary.RS_PORT)
        _connect_all(sim, peers)
        start = sim.cycle
        res = closed_loop(sim, peers, 0, rs_service(shard_bytes),
                          until=start + windows * window)
        counters = {k: v for k, v in sim.counters().items() if v}
    start = res["first_in"]
    rows = []
    # The faulty encoder's connection first (the scheduler's turn order decides which it is):
    # the one whose replies stopped first.
    peers = sorted(peers, key=lambda p: max(res["done_at"][p.sport], default=0))
    for p in peers:
        per = [0] * windows
        for cycle in res["done_at"][p.sport]:
            k = (cycle - start) // window
            if 0 <= k < windows:
                per[k] += 1
        rows.append(per)
    if log:
        print(f"isolation: replies per window {rows}", file=log, flush=True)
    return {"window_cycles": window, "windows": windows, "fault_window": fault_window,
            "fault_after": fault_after, "replies": rows,
            "faults": counters.get("app_monitor_faults", 0),
            "other_faults": counters.get("app1_monitor_faults", 0)}


def isolation_svg(iso, mhz):
    """The fault-isolation run as a line chart (the shape of the thesis's Fig. 3.3)."""
    from apiary.svg import line_chart
    us = iso["window_cycles"] / mhz
    series = [(f"connection {k + 1}" + (" (its encoder faults)" if k == 0 else ""),
               [(w * us, n / us * 1000) for w, n in enumerate(per)])
              for k, per in enumerate(iso["replies"])]
    return line_chart("Fault isolation: two connections, two encoders under Apiary",
                      "time (µs)", "kreq/s", series)


def _rows_scaling(results, mhz, thesis):
    rows = []
    for r in results:
        kreq = r["requests"] / r["cycles"] * mhz * 1000
        lat_us = r["latency_mean"] / mhz
        t = thesis.get(r["encoders"]) if isinstance(thesis, dict) else thesis
        rows.append([str(r["encoders"]), str(r["requests"]), _cycles(r["cycles"] / r["requests"]),
                     _down(kreq, 1), _cycles(r["latency_mean"]), _up(lat_us, 2),
                     f"{t[0]:g} / {t[1]:g}" if t else ""])
    return rows


def render(res, fmt="markdown", command=None):
    if fmt == "json":
        return json.dumps(res, indent=2) + "\n"
    mhz = res["clock_mhz"]
    head = (f"Reed-Solomon (8,2) over TCP under Apiary: {res['width']}-bit data plane, "
            f"{res['shard_bytes'] * 8} B requests, {res['shard_bytes'] * 2} B parity replies, "
            f"at {mhz:g} MHz ({1000 / mhz:g} ns per cycle), Verilator")
    columns = ["encoders", "requests", "cycles/request", f"kreq/s at {mhz:g} MHz",
               "mean latency (cycles)", "µs", "thesis kreq/s / µs"]
    tables = [("Throughput and latency, one connection per encoder (thesis Table 3.3)", columns,
               _rows_scaling(res["scaling"], mhz, THESIS_TABLE_3_3))]
    if res.get("delay"):
        tables.append(("The same, memory delay random 10-20 cycles (thesis §3.5: 20.5 kreq/s, "
                       "49 µs)", columns, _rows_scaling(res["delay"], mhz, THESIS_DELAY)))
    if res.get("first"):
        f = res["first"]
        tables.append((
            "The first request, into an idle design (thesis: 11 µs, of which 1.8 µs allocating "
            "the buffers)", ["measure", "cycles", "µs"],
            [["reset → the first connection's rings allocated (ahead of any connection)",
              str(f["allocation"]), _up(f["allocation"] / mhz, 2)],
             ["SYN first word in → SYN-ACK last word out", str(f["syn_to_synack"]),
              _up(f["syn_to_synack"] / mhz, 2)],
             ["SYN in → the first reply's last word out (handshake + request + reply)",
              str(f["syn_to_reply"]), _up(f["syn_to_reply"] / mhz, 2)]]))
    if res.get("isolation"):
        iso = res["isolation"]
        us = iso["window_cycles"] / mhz
        tables.append((
            f"Fault isolation (thesis Fig. 3.3): replies per window of {iso['window_cycles']} "
            f"cycles ({_up(us, 2)} µs); connection 1's encoder stores out of bounds in window "
            f"{iso['fault_window']} (its monitor: {iso['faults']} fault; the other's: "
            f"{iso['other_faults']})",
            ["window", *[str(w) for w in range(iso["windows"])]],
            [[f"connection {k + 1}", *[str(n) for n in per]]
             for k, per in enumerate(iso["replies"])]))
    return render_tables(head, tables, fmt == "markdown", command)


def main(argv=None):
    """``apiary bench rs [--width W] [--encoders 1,2,3,4] [--requests N] [--shard-bytes B]
    [--no-delay] [--clock-mhz MHZ] [--json]``."""
    from apiary.load import load_script
    parser = argparse.ArgumentParser(prog="apiary bench rs", description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=512, choices=(64, 128, 256, 512))
    parser.add_argument("--encoders", default="1,2,3,4", metavar="N,N")
    parser.add_argument("--requests", type=int, default=20, metavar="N",
                        help="requests per connection (default 20)")
    parser.add_argument("--shard-bytes", type=int, default=512, metavar="B")
    parser.add_argument("--no-delay", action="store_true",
                        help="skip the run with a random memory delay")
    parser.add_argument("--no-first", action="store_true", help="skip the first-request run")
    parser.add_argument("--no-isolation", action="store_true",
                        help="skip the fault-isolation run")
    parser.add_argument("--svg", metavar="FILE",
                        help="write the fault-isolation plot there (SVG)")
    add_clock_argument(parser, "times are given at", default=250.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    encoders = [int(n) for n in args.encoders.split(",")]
    if not all(1 <= n <= 4 for n in encoders) or args.requests < 1:
        parser.error("--encoders takes 1 to 4 each, --requests at least 1")
    rs_apiary = load_script(DESIGN)
    common = dict(width=args.width, shard_bytes=args.shard_bytes, requests=args.requests,
                  log=sys.stderr)
    res = {"width": args.width, "shard_bytes": args.shard_bytes, "clock_mhz": args.clock_mhz,
           "scaling": [measure_scaling(rs_apiary, n, **common) for n in encoders]}
    if not args.no_delay:
        res["delay"] = [measure_scaling(rs_apiary, 1, memory_latency=(10, 20), **common)]
    if not args.no_first:
        res["first"] = measure_first_request(rs_apiary, width=args.width,
                                             shard_bytes=args.shard_bytes)
    if not args.no_isolation:
        res["isolation"] = measure_isolation(rs_apiary, width=args.width,
                                             shard_bytes=args.shard_bytes, log=sys.stderr)
        if args.svg:
            with open(args.svg, "w") as f:
                f.write(isolation_svg(res["isolation"], args.clock_mhz))
    print(render(res, "json" if args.json else "markdown",
                 "apiary bench rs " + " ".join(argv or [])), end="")
    return 0
