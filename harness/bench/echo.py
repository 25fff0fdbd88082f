"""UDP echo benchmark: latency and throughput of a design that echoes UDP on port 7.

``apiary bench examples/udp_echo.py [--width N] [--sizes 64,128,...] [--packets N]
[--clock-mhz MHZ] [--json | --markdown]`` (the command and its options are declared in
:mod:`harness.bench.cli`).

Everything is measured cycle-accurately on a Verilator model of the design, through its Ethernet
port (:mod:`apiary.sim`), and every reply is checked byte for byte against
:func:`beehive.model.echo_reply`; a wrong reply, or a missing one that no drop counter accounts
for, stops the benchmark with :class:`BenchError`.

* **Latency** (:func:`measure_latency`): one 1-byte UDP request at a time into an idle design.
  *First in → last out* is the cycle the reply's last word left ``mac_tx`` minus the cycle the
  request's first word was taken on ``mac_rx`` (the Beehive paper's definition: first flit into
  Ethernet RX to last flit out of Ethernet TX). Also *first in → first out* and *last in → first
  out*.
* **Throughput** (:func:`measure_throughput`): ``packets`` requests of one UDP payload size queued
  at once, which the bench offers back to back (no idle cycle between words or frames). Cycles
  per packet are measured where the replies leave: (last word of the last reply − last word of the
  first reply) / (replies − 1). ``mac_rx`` is never back-pressured, so a design that cannot keep
  up drops requests (Ethernet RX counts them as ``buffer_full``); what is echoed is then the
  sustained rate, and the drops are reported with the counters that rose.
  :func:`zero_drop_spacing` then finds the shortest spacing between requests (a fixed number of
  cycles from one request's first word to the next one's) that is echoed with no drop and
  without the replies falling behind.

Requests are padded to Ethernet's 60-byte minimum (without FCS), as a NIC sends them; the echo
design does not pad its replies, so a 1-byte echo goes out as 43 bytes. Bit rates count the
bytes of the Ethernet frames (without preamble, FCS or inter-frame gap) or of the UDP payloads
alone, and the link is the data plane: ``width`` bits per cycle at ``clock_mhz``.
"""

import json
import math
import statistics
import sys
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.terminal import StatusLine, render_tables

from beehive.model import echo_reply
from beehive.proto.addresses import design_addresses
from . import MAX_PAYLOAD


__all__ = ["BenchError", "BEEHIVE", "TARGETS", "TARGET_WIDTH", "DEFAULT_SIZES", "request",
           "measure_latency", "measure_throughput", "zero_drop_spacing", "trace_messages",
           "run_bench", "render", "verdict", "target_cell", "command_line", "run"]


class BenchError(Exception):
    """The design under test did not behave as a UDP echo (or the benchmark was misused)."""


#: The Beehive paper's UDP echo figures (512-bit NoC at 250 MHz).
BEEHIVE = {
    "latency_cycles": 92,            # 1-byte echo: first flit into Ethernet RX to last out of TX
    "mpps_64": 18.4,                 # at 64 B
    "cycles_per_packet_64": 250 / 18.4,
    "line_rate_from_bytes": 1024,    # "line rate from about 1 KB"
}

#: The data-plane width the targets are for: at another width none is judged.
TARGET_WIDTH = 512

#: The project brief's targets (512 bits, 250 MHz).
TARGETS = {
    "latency_cycles": 40,            # at most
    "cycles_per_packet_64": 4,       # at most, 64-byte payloads
    "link_fraction": 0.95,           # at least, of width x clock ...
    "link_fraction_from_bytes": 256,  # ... from this payload size up
}

DEFAULT_SIZES = (64, 128, 256, 512, 1024, 1472)
DEFAULT_PACKETS = 200
LATENCY_REQUESTS = 5
MIN_FRAME = 60                       # Ethernet minimum without FCS
PORT = 7


# -- requests and replies -------------------------------------------------------------------------

def _addresses(design):
    """``(mac, ipv4)`` of the design as text, from its settings (Beehive's defaults)."""
    try:
        return design_addresses(design)
    except ValueError as e:
        raise BenchError(f"design {design.name!r}: {e}") from None


def request(size, seq, mac, ipv4):
    """The ``seq``-th UDP request with a ``size``-byte payload to ``mac``/``ipv4`` port 7, padded
    to 60 bytes. The payload starts with ``seq`` (4 bytes, big-endian) so replies can be told
    apart (for payloads of fewer than 4 bytes, in part)."""
    peer_mac = "02:00:00:00:00:01" if mac != "02:00:00:00:00:01" else "02:00:00:00:00:03"
    peer_ip = "10.0.0.1" if ipv4 != "10.0.0.1" else "10.0.0.3"
    payload = ((seq & 0xFFFFFFFF).to_bytes(4, "big")
               + bytes((i * 7 + 3) & 0xFF for i in range(max(0, size - 4))))[:size]
    frame = bytes(Ether(dst=mac, src=peer_mac) / IP(src=peer_ip, dst=ipv4, id=seq & 0xFFFF)
                  / UDP(sport=1024 + seq % 1000, dport=PORT) / payload)
    return frame.ljust(MIN_FRAME, b"\0")


def _expected(frame, mac, ipv4, design):
    """The echo model's reply to ``frame`` from ``design``, whose settings say whether its UDP
    checksums are verified (without, a reply carries checksum 0) and its VLAN tags handled."""
    reply, _ = echo_reply(frame, mac=mac, ipv4=ipv4, port=PORT,
                          verify_checksums=design.settings.get("verify_checksums", True),
                          vlan=design.settings.get("vlan", True))
    assert reply is not None, "the benchmark built a request the echo model rejects"
    return reply


def _difference(got, want):
    if len(got) != len(want):
        return f"{len(got)} bytes, the echo has {len(want)}"
    k = next(i for i in range(len(got)) if got[i] != want[i])
    return f"first difference at byte {k}: 0x{got[k]:02x}, the echo has 0x{want[k]:02x}"


def _not_an_echo(sim, what):
    name = sim.design.name
    return BenchError(f"design {name!r} is not a UDP echo on port 7: {what}. This benchmark needs "
                      f"a design whose Ethernet port answers UDP on port 7 as examples/udp_echo.py "
                      f"does (replies checked against beehive.model.echo_reply).")


def _match(requests, expected, replies, sim):
    """Match ``replies`` (in order) to ``requests``: each reply must be the echo of a later request
    than the previous reply's. Returns ``[(request_index, reply_frame)]``."""
    matched: list[tuple] = []          # (request index, reply frame)
    j = 0
    for k, r in enumerate(replies):
        while j < len(expected) and expected[j] != r.data:
            j += 1
        if j == len(expected):
            near = expected[min(len(matched), len(expected) - 1)]
            raise _not_an_echo(sim, f"reply {k} of {len(replies)} ({len(r.data)} bytes) is not "
                               f"the echo of any request still waiting for one "
                               f"({_difference(r.data, near)})")
        matched.append((j, r))
        j += 1
    return matched


def _drops(before, after):
    """Counters other than ``*_forwarded`` that rose between two :meth:`Sim.counters` reads."""
    return {k: after[k] - before.get(k, 0) for k in after
            if not k.endswith("_forwarded") and after[k] != before.get(k, 0)}


def _run_until_idle(sim, budget):
    sim.run(max_cycles=budget)
    if not sim.idle:
        raise BenchError(f"design {sim.design.name!r} was still busy after {budget} cycles")


# -- measurements ------------------------------------------------------------------------------

def _one(sim, frame, mac, ipv4, size):
    """Send one request (``size``-byte payload) into the idle design; return its ``(sent,
    reply)`` frames, checked."""
    want = _expected(frame, mac, ipv4, sim.design)
    what = f"a UDP request to {ipv4} port 7 ({size}-byte payload, {len(frame)}-byte frame)"
    before = sim.counters()
    sim.send(frame)
    _run_until_idle(sim, 100_000)
    sent, got = sim.sent(clear=True), sim.received(clear=True)
    if len(sent) != 1:
        raise BenchError(f"design {sim.design.name!r} took {len(sent)} frames for 1 request")
    if not got:
        rose = _drops(before, sim.counters())
        why = (" (counters that rose: " + ", ".join(f"{k} {v}" for k, v in rose.items()) + ")"
               if rose else "")
        raise _not_an_echo(sim, f"it sent nothing back for {what}{why}")
    if len(got) != 1:
        raise _not_an_echo(sim, f"it sent {len(got)} frames back for {what}")
    if got[0].data != want:
        how = ("it sent the request back unchanged" if got[0].data == frame
               else _difference(got[0].data, want))
        raise _not_an_echo(sim, f"its reply to {what} is not the echo ({how})")
    return sent[0], got[0]


def _stats(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "values": list(values)}


def measure_latency(sim, mac, ipv4, *, size=1, requests=LATENCY_REQUESTS):
    """Latency of ``requests`` echoes of ``size`` bytes, one at a time into an idle design.

    Returns ``{"payload_bytes", "request_bytes", "reply_bytes", "requests", "first_in_last_out",
    "first_in_first_out", "last_in_first_out"}``, each of the last three
    ``{"min", "median", "max", "values"}`` in cycles.
    """
    fl, ff, lf = [], [], []
    for seq in range(requests):
        frame = request(size, seq, mac, ipv4)
        s, r = _one(sim, frame, mac, ipv4, size)
        fl.append(r.cycle_last - s.cycle_first)
        ff.append(r.cycle_first - s.cycle_first)
        lf.append(r.cycle_first - s.cycle_last)
    return {"payload_bytes": size, "request_bytes": len(frame), "reply_bytes": len(r.data),
            "requests": requests, "first_in_last_out": _stats(fl),
            "first_in_first_out": _stats(ff), "last_in_first_out": _stats(lf)}


def _batch(sim, frames, expected, *, spacing=None):
    """Offer ``frames``: all queued at once (back to back), or one every ``spacing`` cycles.
    Returns ``(sent, matched, drops)``."""
    before = sim.counters()
    if spacing is None:
        sim.send_many(frames)
    else:
        for f in frames:
            sim.send(f)
            sim.run(spacing)
    nb = sim.ports[0].width // 8
    _run_until_idle(sim, 100 * sum(-(-len(f) // nb) for f in frames) + 100_000)
    sent, got = sim.sent(clear=True), sim.received(clear=True)
    if len(sent) != len(frames):
        raise BenchError(f"design {sim.design.name!r} took {len(sent)} of {len(frames)} frames")
    matched = _match(frames, expected, got, sim)
    drops = _drops(before, sim.counters())
    missing = len(frames) - len(matched)
    if missing and not drops:
        raise _not_an_echo(sim, f"{missing} of {len(frames)} requests got no reply and no drop "
                                f"counter rose")
    return sent, matched, drops


def _per_packet(cycles):
    return (cycles[-1] - cycles[0]) / (len(cycles) - 1)


def measure_throughput(sim, size, packets, mac, ipv4, *, clock_mhz, frames=None):
    """Queue ``packets`` requests with ``size``-byte payloads at once and measure what comes back.

    Returns a dict: ``offered_cycles_per_packet`` (the spacing of the requests' first words, as
    taken), ``echoed``, ``dropped`` (counters that rose), ``cycles_per_packet`` (at the output),
    ``mpps``, ``gbps_frames`` and ``gbps_payload`` at ``clock_mhz``, ``link_fraction`` (frame bits
    out per cycle / width).
    """
    width = sim.ports[0].width
    frames = frames or [request(size, seq, mac, ipv4) for seq in range(packets)]
    expected = [_expected(f, mac, ipv4, sim.design) for f in frames]
    sent, matched, drops = _batch(sim, frames, expected)
    if len(matched) < 2:
        raise BenchError(f"only {len(matched)} of {packets} requests with {size}-byte payloads "
                         f"were echoed; cannot measure a rate (dropped: {drops})")
    cpp = _per_packet([r.cycle_last for _, r in matched])
    reply_bytes = len(matched[0][1].data)
    mpps = clock_mhz / cpp
    return {
        "payload_bytes": size, "request_bytes": len(frames[0]), "reply_bytes": reply_bytes,
        "words_in": -(-len(frames[0]) // (width // 8)),
        "words_out": -(-reply_bytes // (width // 8)),
        "packets": packets,
        "offered_cycles_per_packet": _per_packet([s.cycle_first for s in sent]),
        "echoed": len(matched), "dropped": drops,
        "cycles_per_packet": cpp, "mpps": mpps,
        "gbps_frames": mpps * reply_bytes * 8 / 1000,
        "gbps_payload": mpps * size * 8 / 1000,
        "link_fraction": reply_bytes * 8 / (cpp * width),
    }


def zero_drop_spacing(sim, size, packets, mac, ipv4, *, start, lowest, frames=None):
    """The shortest spacing in cycles (one request's first word to the next one's), from
    ``lowest`` up, at which ``packets`` requests are all echoed and the replies keep pace (their
    spacing is no longer than the requests'). The search starts at ``start`` and moves down, or up,
    one cycle at a time. Returns ``None`` if no spacing up to ``4 * start + 64`` works."""
    frames = frames or [request(size, seq, mac, ipv4) for seq in range(packets)]
    expected = [_expected(f, mac, ipv4, sim.design) for f in frames]

    def clean(spacing):
        sent, matched, _ = _batch(sim, frames, expected, spacing=spacing)
        taken = [s.cycle_first for s in sent]
        if any(b - a != spacing for a, b in zip(taken, taken[1:])):
            raise BenchError(f"requests were not taken {spacing} cycles apart "
                             f"({_per_packet(taken):g} on average)")
        return (len(matched) == len(frames)
                and _per_packet([r.cycle_last for _, r in matched]) <= spacing)

    spacing = max(start, lowest)
    if clean(spacing):
        while spacing > lowest and clean(spacing - 1):
            spacing -= 1
        return spacing
    while spacing < 4 * start + 64:
        spacing += 1
        if clean(spacing):
            return spacing
    return None


def run_bench(design, *, sizes=DEFAULT_SIZES, packets=DEFAULT_PACKETS, clock_mhz=250.0,
              latency_requests=LATENCY_REQUESTS, zero_drop=True, log=None, script=None,
              progress=None):
    """Open a Verilator simulation of ``design`` and measure everything; returns the results as a
    JSON-ready dict (see :func:`render`). A line per payload size goes to ``log`` (a stream),
    the model's conversion and build to ``progress`` (see :data:`apiary.top.Progress`). Raises
    :class:`BenchError`, or the simulator's :class:`~apiary.sim.SimError` /
    :class:`~apiary.sim.BuildError`."""
    from apiary.sim import open_sim
    from apiary.sim.verilator import verilator_version

    sizes = list(sizes)
    if not sizes or any(not 0 <= s <= MAX_PAYLOAD for s in sizes):
        raise BenchError(f"payload sizes must be from 0 to {MAX_PAYLOAD} bytes, not {sizes}")
    if packets < 2:
        raise BenchError(f"--packets must be at least 2 (a rate needs two replies), not {packets}")
    if not clock_mhz > 0:
        raise BenchError(f"--clock-mhz must be positive, not {clock_mhz}")

    def note(msg):
        if log is not None:
            print(msg, file=log, flush=True)

    mac, ipv4 = _addresses(design)
    with open_sim(design, "verilator", clock_hz=clock_mhz * 1e6, progress=progress) as sim:
        width = sim.port().width
        latency = measure_latency(sim, mac, ipv4, requests=latency_requests)
        rows = []
        for size in sizes:
            t = time.time()
            frames = [request(size, seq, mac, ipv4) for seq in range(packets)]
            idle = _one(sim, frames[0], mac, ipv4, size)
            row = measure_throughput(sim, size, packets, mac, ipv4, clock_mhz=clock_mhz,
                                     frames=frames)
            row["idle_latency"] = idle[1].cycle_last - idle[0].cycle_first
            lowest = row["words_in"]
            if not zero_drop:
                row["zero_drop_spacing"] = None
            elif row["echoed"] == packets and row["cycles_per_packet"] <= row[
                    "offered_cycles_per_packet"]:
                row["zero_drop_spacing"] = row["offered_cycles_per_packet"]   # back to back
            else:
                row["zero_drop_spacing"] = zero_drop_spacing(
                    sim, size, packets, mac, ipv4, start=math.ceil(row["cycles_per_packet"]),
                    lowest=lowest, frames=frames)
            rows.append(row)
            note(f"{size:5d}-byte payloads: {row['cycles_per_packet']:.2f} cycles/packet, "
                 f"{row['echoed']}/{packets} echoed ({time.time() - t:.1f} s)")
        cycles = sim.cycle
    return {
        "design": design.name, "script": script, "width": width, "clock_mhz": clock_mhz,
        "link_gbps": width * clock_mhz / 1000, "mac": mac, "ipv4": ipv4, "port": PORT,
        "packets": packets, "sizes": sizes, "simulator": f"Verilator {verilator_version()}",
        "cycles_simulated": cycles, "latency": latency, "throughput": rows,
        "beehive": BEEHIVE, "targets": TARGETS, "target_width": TARGET_WIDTH,
    }


def trace_messages(design, frames, cycles):
    """Where the cycles go: run ``frames`` (bytes) back to back into ``design``'s Ethernet port
    in Amaranth's simulator for ``cycles`` cycles, watching every tile's data-plane NoC ports.

    Returns ``{stream: [(first, last), ...]}``, the cycles on which each message's (or frame's)
    first and last flit moved on ``"mac_rx"``, ``"mac_tx"``, ``"<tile>.in"`` (the tile took it
    from its router) and ``"<tile>.out"`` (the tile's router took it), with the same cycle
    numbering as :mod:`apiary.sim`; and under ``"<stream> stalls"`` the number of cycles a flit
    was offered there and not taken. Slow (Python): for a few packets.
    """
    from amaranth.sim import Simulator
    from apiary.sim import elaborate
    from apiary.sim.core import frame_words

    top, ports, _ = elaborate(design)
    if not ports:
        raise BenchError(f"design {design.name!r} has no Ethernet port")
    port = ports[0]
    rx, tx = getattr(top, port.member).rx, getattr(top, port.member).tx
    streams = [("mac_rx", rx), ("mac_tx", tx)]
    for name, tile in top.tiles.items():
        if "data" in tile.planes:
            streams += [(f"{name}.in", tile.noc_in), (f"{name}.out", tile.noc_out)]
    moved: dict[str, list[tuple[int, bool]]] = {n: [] for n, _ in streams}
    stalls = {n: 0 for n, _ in streams}

    async def drive(ctx):
        for f in frames:
            for data, nbytes, last in frame_words(f, port.width // 8):
                ctx.set(rx.payload, {"data": data, "keep": (1 << nbytes) - 1, "last": last})
                ctx.set(rx.valid, 1)
                await ctx.tick()
        ctx.set(rx.valid, 0)

    async def watch(ctx):
        ctx.set(tx.ready, 1)
        signals = [sig for _, s in streams for sig in (s.valid, s.ready, s.payload.last)]
        cycle = 0
        async for values in ctx.tick().sample(*signals):
            values = values[2:]          # after the clock and reset
            for k, (name, _) in enumerate(streams):
                valid, ready, last = values[3 * k:3 * k + 3]
                if valid and ready:
                    moved[name].append((cycle, bool(last)))
                elif valid:
                    stalls[name] += 1
            cycle += 1

    async def run(ctx):
        await ctx.tick().repeat(cycles)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(drive, background=True)
    sim.add_testbench(watch, background=True)
    sim.add_testbench(run)
    sim.run()
    result: dict[str, list | int] = {}
    for name, _ in streams:
        messages, first = [], None
        for cycle, last in moved[name]:
            first = cycle if first is None else first
            if last:
                messages.append((first, cycle))
                first = None
        result[name] = messages
        result[f"{name} stalls"] = stalls[name]
    return result


# -- output ------------------------------------------------------------------------------------

# Displayed figures are rounded against us: costs (cycles) up, rates and fractions down.
def _up(x, digits=2):
    s = 10 ** digits
    return f"{math.ceil(x * s - 1e-9) / s:.{digits}f}"


def _down(x, digits=2):
    s = 10 ** digits
    return f"{math.floor(x * s + 1e-9) / s:.{digits}f}"


def _cycles(x):
    return str(int(x)) if float(x).is_integer() else _up(x)


def verdict(ok, markdown=False):
    """``met`` or ``missed`` (in bold, for Markdown)."""
    return "met" if ok else "**missed**" if markdown else "missed"


def target_cell(width, target, ok, markdown=False):
    """A target column's cell: ``target: met|missed`` when the benchmark ran at
    :data:`TARGET_WIDTH`, else that there is none at this width."""
    if width != TARGET_WIDTH:
        return f"no target at {width} bits"
    return f"{target}: {verdict(ok, markdown)}"


def _tables(res, markdown=False):
    """``[(title, header, rows)]`` of strings."""
    mhz = res["clock_mhz"]
    lat = res["latency"]
    n = lat["requests"]
    width = res["width"]

    def target(text, ok):
        return target_cell(width, text, ok, markdown)

    def mmm(key):
        s = lat[key]
        return f"{_cycles(s['min'])} / {_cycles(s['median'])} / {_cycles(s['max'])}"

    def ns(key):
        return _up(lat[key]["median"] * 1000 / mhz, 1)

    worst = lat["first_in_last_out"]["max"]
    lat_rows = [
        ["first word in → last word out (Beehive's measure)", mmm("first_in_last_out"),
         ns("first_in_last_out"), str(BEEHIVE["latency_cycles"]),
         target(f"≤ {TARGETS['latency_cycles']}", worst <= TARGETS["latency_cycles"])],
        ["first word in → first word out", mmm("first_in_first_out"), ns("first_in_first_out"),
         "", ""],
        ["last word in → first word out", mmm("last_in_first_out"), ns("last_in_first_out"),
         "", ""],
    ]
    latency = (f"Latency: {lat['payload_bytes']}-byte UDP payload ({lat['request_bytes']}-byte "
               f"request, {lat['reply_bytes']}-byte reply), one request at a time into the idle "
               f"design",
               ["measure", f"cycles (min / median / max of {n})", f"ns at {mhz:g} MHz (median)",
                "Beehive (paper, 512-bit)", "target (512-bit)"],
               lat_rows)

    t_rows = []
    for r in res["throughput"]:
        size = r["payload_bytes"]
        drops = ", ".join(f"{k} {v}" for k, v in r["dropped"].items()) or "0"
        beehive = goal = ""
        if size == 64:
            beehive = (f"{_down(BEEHIVE['cycles_per_packet_64'])} cycles "
                       f"({BEEHIVE['mpps_64']:g} Mpps)")
            goal = target_cell(width, f"≤ {TARGETS['cycles_per_packet_64']} cycles",
                                 r["cycles_per_packet"] <= TARGETS["cycles_per_packet_64"],
                                 markdown)
        elif size >= BEEHIVE["line_rate_from_bytes"]:
            beehive = "line rate"
        if size >= TARGETS["link_fraction_from_bytes"]:
            goal = target_cell(width, f"≥ {TARGETS['link_fraction']:.0%}",
                                 r["link_fraction"] >= TARGETS["link_fraction"], markdown)
        z = r["zero_drop_spacing"]
        t_rows.append([
            str(size), f"{r['request_bytes']} / {r['reply_bytes']}",
            _cycles(r["offered_cycles_per_packet"]),
            f"{r['echoed']} / {r['packets']}", drops,
            _cycles(r["cycles_per_packet"]), _down(r["mpps"]), _down(r["gbps_frames"]),
            _down(r["gbps_payload"]), _down(100 * r["link_fraction"], 1),
            "—" if z is None else f"{_cycles(z)} ({_down(mhz / z)} Mpps)",
            str(r["idle_latency"]), beehive, goal])
    throughput = (f"Throughput: {res['packets']} requests per size queued at once and offered "
                  f"back to back; cycles/packet where the replies leave; bit rates at {mhz:g} MHz; "
                  f"link = {res['width']} bits × {mhz:g} MHz = {_down(res['link_gbps'])} Gbps",
                  ["UDP payload (B)", "frame in / out (B)", "offered (cycles/packet)",
                   "echoed", "dropped (counters)", "cycles/packet out", "Mpps",
                   "Gbps (frames out)", "Gbps (UDP payload)", "% of link (frames)",
                   "zero-drop spacing (cycles)", "idle latency (cycles)",
                   "Beehive (paper, 512-bit)", "target (512-bit)"],
                  t_rows)
    return [latency, throughput]


def render(res, fmt="text", command=None):
    """The results as ``"text"`` (tables for a terminal, 100 columns), ``"markdown"`` or
    ``"json"``."""
    if fmt == "json":
        return json.dumps(res, indent=2) + "\n"
    head = (f"UDP echo benchmark of {res['design']!r}: {res['width']}-bit data plane at "
            f"{res['clock_mhz']:g} MHz, {res['simulator']} (cycle-accurate), replies checked "
            f"against beehive.model.echo_reply")
    markdown = fmt == "markdown"
    return render_tables(head, _tables(res, markdown), markdown, command)


# -- command line ------------------------------------------------------------------------------

def command_line(args):
    """The canonical command that repeats a run with these options."""
    parts = ["apiary bench", args.design]
    if args.width is not None:
        parts.append(f"--width {args.width}")
    parts += [f"--sizes {','.join(map(str, args.sizes))}", f"--packets {args.packets}",
              f"--clock-mhz {args.clock_mhz:g}"]
    if args.json:
        parts.append("--json")
    if args.markdown:
        parts.append("--markdown")
    return " ".join(parts)


def run(args, design, out=None, log=None):
    """Run the benchmark for the options of ``apiary bench DESIGN`` (parsed ``args``; ``None``
    for a default) on a loaded ``design``; print the results to ``out`` (default stdout),
    progress to ``log`` (default stderr). Returns the results."""
    out = sys.stdout if out is None else out
    log = sys.stderr if log is None else log
    if args.sizes is None:
        args.sizes = list(DEFAULT_SIZES)
    if args.packets is None:
        args.packets = DEFAULT_PACKETS
    res = run_bench(design, sizes=args.sizes, packets=args.packets, clock_mhz=args.clock_mhz,
                    log=log, script=args.design, progress=StatusLine(log))
    fmt = "json" if args.json else "markdown" if args.markdown else "text"
    print(render(res, fmt, command_line(args)), end="", file=out)
    return res
