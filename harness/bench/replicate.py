"""Replication benchmark: UDP echo throughput of 1, 2, 4 copies of the stack behind a load
balancer at 64-byte payloads, the Beehive thesis's Fig. 4.12 (§4.5.9) in cycles.

The design is ``examples/replicated_echo.py``: Ethernet RX → load balancer → ``copies`` ×
(IPv4 RX → UDP RX → echo → UDP TX → IPv4 TX) → Ethernet TX, on one MAC port; the load balancer
hashes each packet's 4-tuple, read from its IPv4 and UDP headers (``policy="hash"``,
``flow="ipv4"``), as Beehive's front load balancer hashes the frames it spreads. Each copy count
is measured cycle-accurately on a Verilator model with the echo benchmark's own machinery
(:func:`harness.bench.echo.measure_throughput`: requests queued at once and offered back to
back, every reply checked byte for byte against the echo model, cycles per packet where the
replies leave) plus the 1-byte echo latency (:func:`harness.bench.echo.measure_latency`).

What bounds the rate is printed beside it, per packet: the MAC's words (the request frame, 106
bytes at 64-byte payloads: 2 words at 512 bits, 14 at 64), and the flits of the one message per
packet that every shared tile (Ethernet RX's output, the load balancer, Ethernet TX's input)
must move, header and metadata included; a link moves one flit per cycle, so no number of
copies gets below that. The paper's figures are beside ours: one stack 18.4 Mpps (13.6 cycles
per 64-byte packet at 250 MHz), two stacks "roughly double" that, and the load balancer's cap
of 32 Gbps at 64 B (4 cycles per packet: 3 for the NoC message and 1 recovery cycle).

With ``app_cycles`` (``--app-cycles N``) the design is ``examples/replicated_app.py`` instead:
one stack, Ethernet RX → IPv4 RX → UDP RX → load balancer (round robin by default) →
``copies`` × :class:`~beehive.apps.busy_echo.UdpBusyEchoTile` (an echo that takes ``N`` cycles
per message) → UDP TX → IPv4 TX → Ethernet TX, measured by the same code. The application then
bounds the rate at ``N / copies`` cycles per packet, until the shared path's flits do: the
paper's point that copies scale a slow component up to the balancer's cap.
"""

import argparse
import json
import math
import pathlib
import sys
import time

from apiary.cli import add_clock_argument
from apiary.load import load_design
from apiary.noc.framing import meta_plan
from apiary.noc.header import header_flits
from apiary.noc.spec import head_bytes
from apiary.sim.base import default_clock_mhz

from beehive.proto.messages import ETH_META, MsgType
from .echo import (BenchError, measure_latency, request, _addresses, _drops, _expected,
                   _not_an_echo, _per_packet, _run_until_idle)


__all__ = ["PAPER", "DEFAULT_COPIES", "SIZE", "DESIGN", "APP_DESIGN", "bounds",
           "replicate_row", "replicate_table", "render_markdown", "main"]


#: The script that builds the replicated design: ``design(width=, copies=, policy=)``.
DESIGN = pathlib.Path(__file__).resolve().parents[2] / "examples" / "replicated_echo.py"
#: The script with one stack and a slow application replicated:
#: ``design(width=, copies=, policy=, cycles=)``.
APP_DESIGN = DESIGN.with_name("replicated_app.py")
#: The design scripts the benchmark builds (part of a sweep job's source stamp).
SCRIPTS = (DESIGN, APP_DESIGN)
DEFAULT_COPIES = (1, 2, 4)
SIZE = 64                     # UDP payload bytes, as in the paper's figure
IPV4_UDP = 28                 # bytes of IPv4 and UDP headers
ETHERNET = 14

#: Beehive thesis §4.5.9 (512-bit NoC, 250 MHz): 64-byte UDP echo.
PAPER = {
    "one_stack_mpps": 18.4,
    "one_stack_cycles": 250 / 18.4,
    "two_stacks": "roughly double one stack, at the load balancer's cap",
    "lb_cap_cycles": 4,
    "lb_cap_gbps": 32.0,
}


def bounds(width, size=SIZE):
    """``{"mac": words, "shared": flits}`` per packet: the request frame's MAC words, and the
    flits of the message Ethernet RX sends per packet (header, its Ethernet-level metadata and
    the IPv4 packet, less the bytes that ride in the header flit), which Ethernet RX, the load
    balancer and (for the reply) Ethernet TX each move once."""
    nb = width // 8
    frame = max(60, ETHERNET + IPV4_UDP + size)
    meta_flits, _, _ = meta_plan(width, meta_bits=ETH_META.size)
    rest = max(0, frame - ETHERNET - head_bytes(width, MsgType.ETH_RX_FRAME))
    return {"mac": -(-frame // nb), "shared": header_flits(width) + meta_flits + -(-rest // nb)}


def _throughput(sim, packets, mac, ipv4, clock_mhz):
    """:func:`harness.bench.echo.measure_throughput`'s measure, with replies matched to
    requests in any order: copies that answer different flows may overtake one another (a flow
    stays on one copy, so its own replies keep their order). Adds ``reordered``, the replies
    that left before the reply to an earlier request."""
    width = sim.ports[0].width
    frames = [request(SIZE, seq, mac, ipv4) for seq in range(packets)]
    waiting = {_expected(f, mac, ipv4, sim.design): k for k, f in enumerate(frames)}
    before = sim.counters()
    sim.send_many(frames)
    _run_until_idle(sim, 100 * packets * -(-len(frames[0]) // (width // 8)) + 100_000)
    sent, got = sim.sent(clear=True), sim.received(clear=True)
    drops = _drops(before, sim.counters())
    if len(sent) != len(frames):
        raise BenchError(f"design {sim.design.name!r} took {len(sent)} of {len(frames)} frames")
    order = []
    for k, r in enumerate(got):
        if r.data not in waiting:
            raise _not_an_echo(sim, f"reply {k} of {len(got)} ({len(r.data)} bytes) is not the "
                                    f"echo of any request still waiting for one")
        order.append(waiting.pop(r.data))
    if len(got) < len(frames) and not drops:
        raise _not_an_echo(sim, f"{len(frames) - len(got)} of {len(frames)} requests got no "
                                f"reply and no drop counter rose")
    if len(got) < 2:
        raise BenchError(f"only {len(got)} of {packets} requests were echoed (dropped: {drops})")
    cpp = _per_packet([r.cycle_last for r in got])
    mpps = clock_mhz / cpp
    reply_bytes = len(got[0].data)
    return {
        "payload_bytes": SIZE, "request_bytes": len(frames[0]), "reply_bytes": reply_bytes,
        "packets": packets, "offered_cycles_per_packet": _per_packet([s.cycle_first
                                                                      for s in sent]),
        "echoed": len(got), "dropped": drops,
        "reordered": sum(b < max(order[:k + 1]) for k, b in enumerate(order[1:])),
        "cycles_per_packet": cpp, "mpps": mpps,
        "gbps_frames": mpps * reply_bytes * 8 / 1000, "gbps_payload": mpps * SIZE * 8 / 1000,
        "link_fraction": reply_bytes * 8 / (cpp * width),
    }


def replicate_row(width, copies, *, packets=200, policy="hash", clock_mhz=250.0,
                  design=None, log=None, app_cycles=None):
    """Measure one design: ``copies`` copies at ``width`` bits. ``design`` is a callable
    ``(width, copies, policy) -> Design`` (default: :data:`DESIGN`, or :data:`APP_DESIGN` with
    ``cycles=app_cycles`` when ``app_cycles`` is given). Returns a dict (the keys of
    :func:`harness.bench.echo.measure_throughput` and ``reordered``, plus ``width``,
    ``copies``, ``policy``, ``packets_per_cycle``, ``latency`` (1-byte, first word in → last
    word out, median), ``per_copy`` (replies each copy sent: its IPv4 TX's ``forwarded``, or
    with ``app_cycles`` the application's), ``bound_mac`` and ``bound_shared``
    (:func:`bounds`), ``app_cycles`` and ``bound_app`` (``app_cycles / copies``, or ``None``),
    and ``bound``, the largest of the three: the fewest cycles per packet possible)."""
    from apiary.sim import open_sim

    if design is not None:
        d = design(width, copies, policy)
    elif app_cycles is None:
        d = load_design(str(DESIGN), width=width, copies=copies, policy=policy)
    else:
        d = load_design(str(APP_DESIGN), width=width, copies=copies, policy=policy,
                        cycles=app_cycles)
    copy_tile = "ip_tx" if app_cycles is None else "app"
    mac, ipv4 = _addresses(d)
    t0 = time.time()
    with open_sim(d, "verilator", clock_hz=clock_mhz * 1e6) as sim:
        built = time.time() - t0
        latency = measure_latency(sim, mac, ipv4, requests=3)
        before = sim.counters()
        row = _throughput(sim, packets, mac, ipv4, clock_mhz)
        after = sim.counters()
    names = [f"{copy_tile}_{k}_forwarded" for k in range(copies)]
    per_copy = [after.get(c, 0) - before.get(c, 0) for c in names]
    b = bounds(width)
    bound_app = None if app_cycles is None else app_cycles / copies
    row.update(width=width, copies=copies, policy=policy, clock_mhz=clock_mhz,
               packets_per_cycle=1 / row["cycles_per_packet"],
               latency=latency["first_in_last_out"]["median"], per_copy=per_copy,
               bound_mac=b["mac"], bound_shared=b["shared"], app_cycles=app_cycles,
               bound_app=bound_app, bound=max(b["mac"], b["shared"], bound_app or 0),
               build_seconds=built)
    if log is not None:
        print(f"{width}-bit, {copies} cop{'y' if copies == 1 else 'ies'}: "
              f"{row['cycles_per_packet']:.2f} cycles/packet, {row['echoed']}/{packets} echoed "
              f"({time.time() - t0:.0f} s)", file=log, flush=True)
    return row


def replicate_table(widths=(512,), copies=DEFAULT_COPIES, *, packets=200,
                    policy="hash", clock_mhz=None, design=None, log=None, app_cycles=None):
    """:func:`replicate_row` for every width and copy count; adds ``speedup`` (over the row
    of the fewest copies at the same width). ``clock_mhz`` defaults to the width's
    (:func:`apiary.sim.base.default_clock_mhz`). Returns the rows."""
    rows = []
    for width in widths:
        base = None
        for n in copies:
            row = replicate_row(width, n, packets=packets, policy=policy,
                                clock_mhz=clock_mhz or default_clock_mhz(width),
                                design=design, log=log, app_cycles=app_cycles)
            base = base or row
            row["speedup"] = base["cycles_per_packet"] / row["cycles_per_packet"]
            rows.append(row)
    return rows


def _num(x, digits=2):
    return str(int(x)) if float(x).is_integer() else f"{x:.{digits}f}"


def render_markdown(rows):
    """The rows as a Markdown table, with the paper's figures (rows measured with
    ``app_cycles``: the replicated application's table)."""
    if rows and rows[0].get("app_cycles") is not None:
        return _render_app(rows)
    head = ["data plane", "copies", "echoed", "dropped (counters)", "cycles/packet",
            "packets/cycle", "speedup", "replies overtaken", "Mpps", "Gbps (64 B payloads)",
            "replies per copy",
            "bound: MAC words / shared-tile flits", "1-byte latency (cycles)",
            "Beehive (paper, 512-bit)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        paper = ""
        if r["width"] == 512:
            paper = {1: f"{_num(PAPER['one_stack_cycles'])} cycles "
                        f"({PAPER['one_stack_mpps']:g} Mpps)",
                     2: "≈ 2 × one stack, at the LB cap"}.get(r["copies"], "")
        drops = ", ".join(f"{k} {v}" for k, v in r["dropped"].items()) or "0"
        out.append("| " + " | ".join([
            f"{r['width']}-bit", str(r["copies"]), f"{r['echoed']} / {r['packets']}", drops,
            _num(r["cycles_per_packet"]), f"{r['packets_per_cycle']:.3f}",
            f"{r['speedup']:.2f}×", str(r["reordered"]), _num(r["mpps"]),
            _num(r["gbps_payload"]),
            " / ".join(map(str, r["per_copy"])), f"{r['bound_mac']} / {r['bound_shared']}",
            _num(r["latency"]), paper]) + " |")
    clock = next((r["clock_mhz"] for r in rows if r["width"] == 512), 250.0)
    out.append("")
    out.append(f"Rates at {_clocks(rows)}. Paper: the load balancer caps at "
               f"{PAPER['lb_cap_cycles']} cycles per 64-byte packet "
               f"({PAPER['lb_cap_gbps']:g} Gbps); ours moves a packet in as many cycles as the "
               f"shared tiles' message has flits (the bound column), "
               f"{math.floor(SIZE * 8 * clock / bounds(512)['shared']) / 1000:g} Gbps at "
               f"512 bits.")
    return "\n".join(out) + "\n"


def _clocks(rows):
    """The clocks the rows' rates are at, e.g. "250 MHz" or "125 MHz (64-bit), 250 MHz
    (512-bit)"."""
    by_width = {r["width"]: r["clock_mhz"] for r in rows}
    if len(set(by_width.values())) <= 1:
        return f"{next(iter(by_width.values()), 250.0):g} MHz"
    return ", ".join(f"{c:g} MHz ({w}-bit)" for w, c in sorted(by_width.items()))


def _caps(r):
    """What bounds a row's rate: the application (``app_cycles / copies``) or the shared path."""
    shared = max(r["bound_mac"], r["bound_shared"])
    if r["bound_app"] > shared:
        return f"application ({r['app_cycles']} / {r['copies']})"
    if r["bound_app"] == shared:
        return "application = shared path"
    return "shared path"


def _render_app(rows):
    head = ["data plane", "copies", "app cycles/message", "echoed", "dropped (counters)",
            "cycles/packet", "packets/cycle", "speedup", "replies overtaken", "Mpps",
            "Gbps (64 B payloads)", "replies per copy",
            "bound: app cycles / copies, shared-tile flits", "bounded by",
            "1-byte latency (cycles)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        drops = ", ".join(f"{k} {v}" for k, v in r["dropped"].items()) or "0"
        out.append("| " + " | ".join([
            f"{r['width']}-bit", str(r["copies"]), str(r["app_cycles"]),
            f"{r['echoed']} / {r['packets']}", drops, _num(r["cycles_per_packet"]),
            f"{r['packets_per_cycle']:.3f}", f"{r['speedup']:.2f}×", str(r["reordered"]),
            _num(r["mpps"]), _num(r["gbps_payload"]), " / ".join(map(str, r["per_copy"])),
            f"{_num(r['bound_app'])} / {r['bound_shared']}", _caps(r),
            _num(r["latency"])]) + " |")
    out.append("")
    out.append(f"Rates at {_clocks(rows)}; {rows[0]['policy']} policy. Paper (Fig. 12): one stack "
               f"{_num(PAPER['one_stack_cycles'])} cycles per packet, two roughly double it, "
               f"up to the load balancer's cap of {PAPER['lb_cap_cycles']} cycles "
               f"({PAPER['lb_cap_gbps']:g} Gbps).")
    return "\n".join(out) + "\n"


def _ints(text):
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") \
            from None


def main(argv=None):
    """``apiary bench replicate [--widths 64,512] [--copies 1,2,4] [--packets N]
    [--policy P] [--clock-mhz MHZ] [--app-cycles N] [--json]``: the table in Markdown (or the
    rows as JSON). ``--app-cycles N`` measures :data:`APP_DESIGN` (the application, taking ``N``
    cycles per message, replicated; policy ``round_robin`` unless given) instead."""
    parser = argparse.ArgumentParser(
        prog="apiary bench replicate",
        description="UDP echo throughput of 1, 2, 4 copies of the stack behind a load balancer "
                    "at 64-byte payloads (the Beehive thesis's Fig. 4.12), on Verilator.")
    parser.add_argument("--widths", type=_ints, default=(512,), metavar="W,W")
    parser.add_argument("--copies", type=_ints, default=DEFAULT_COPIES, metavar="N,N")
    parser.add_argument("--packets", type=int, default=200, metavar="N")
    parser.add_argument("--policy", default=None, choices=("round_robin", "hash", "port"),
                        help="the load balancer's policy (default: hash; round_robin with "
                             "--app-cycles)")
    add_clock_argument(parser, "the clock rates are given at")
    parser.add_argument("--app-cycles", type=int, default=None, metavar="N",
                        help="measure examples/replicated_app.py: one stack, the application "
                             "(N cycles per message) replicated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.app_cycles is not None and args.app_cycles < 1:
        parser.error(f"--app-cycles must be at least 1, not {args.app_cycles}")
    policy = args.policy or ("hash" if args.app_cycles is None else "round_robin")
    rows = replicate_table(args.widths, args.copies, packets=args.packets, policy=policy,
                           clock_mhz=args.clock_mhz, log=sys.stderr,
                           app_cycles=args.app_cycles)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(render_markdown(rows), end="")
    return 0
