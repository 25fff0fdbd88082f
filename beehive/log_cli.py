"""``apiary log``: read a running design's log tile over UDP and write it as a pcap with the
hardware's timestamps; or match two logs (ingress, egress) and print each packet's latency.

Registered with the ``apiary`` command line through the entry point ``apiary.commands: log``
(``pyproject.toml``). A :class:`~apiary.tiles.log.LogTile`'s counters and its ``log`` table
are read through the design's controller (:mod:`beehive.apps.controller`, UDP port 7200) with
a :class:`~beehive.control_client.ControlClient`: first ``written`` and ``lost``, then each of
the first ``written`` entries (a write to the table's ``LOAD`` word, then a read of its staging
words), every request sent again when its answer does not come (UDP may drop either datagram).
The log keeps its first entries, so entries already written do not change while they are read.

With ``--vcd FILE`` the same entries become a waveform that GTKWave, PulseView or Surfer open
(:mod:`beehive.log_vcd`: one signal per field, the message's header, metadata and packet
fields, valid while it passes); the pcap is then written only if ``-o`` asks for it too.

The pcap (nanosecond, Wireshark and scapy read it) has one packet per entry, stamped with the
entry's cycle at ``--clock`` (default: the clock ``apiary sim`` gives the design, 125 MHz at 64
bits, else 250 MHz): time 0 is the design's reset. Its link type is
the tile's ``linktype`` (``--linktype`` overrides): 147, the whole NoC message as the tile saw
it (header, metadata, payload; what the replay reads, :func:`apiary.sim.replay.trace_from_pcap`);
101, the message's payload as raw IPv4; 1, as Ethernet. A packet holds what the entry's
snapshot kept; its original length is the message's.

``--latency IN OUT`` reads two log tiles and pairs each message of ``OUT`` with the earliest
unpaired message of ``IN`` that carries the same packet (:func:`packet_key`: for IPv4 UDP and
TCP, the two endpoints in either order and the layer-4 payload, so a reply pairs with its
request; otherwise the whole payload) and left ``IN`` no later; it prints each pair's latency in
cycles and nanoseconds, and their minimum, median and maximum.
"""

import argparse
import inspect
import json
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from apiary.cli import Command, error, load
from apiary.sim.base import default_clock_mhz
from apiary.tiles.log import LINKTYPE_ETHERNET, LINKTYPE_NOC, LINKTYPES, LogEntry, LogTile
from beehive.ctl_cli import transport_arguments


__all__ = ["COMMAND", "LogError", "LogSpec", "read_log", "log_tile", "packet_key", "match_latency",
           "format_latency"]


class LogError(Exception):
    """The design has no such log tile, or the log could not be read."""


@dataclass(frozen=True)
class LogSpec:
    """What a reader needs to know of a :class:`LogTile` of a design: its name and
    parameters."""
    name: str
    entries: int
    snap: int
    linktype: int


def log_tile(design: Any, name: str | None) -> LogSpec:
    """The :class:`LogTile` called ``name`` in ``design`` (with ``None``, the design's only
    one): its parameters as the design declares them, the class's defaults for the others."""
    logs = [n for n, d in design.tiles.items()
            if isinstance(d.cls, type) and issubclass(d.cls, LogTile)]
    if name is None:
        if not logs:
            raise LogError(f"design {design.name!r} has no log tile: apiary log reads the "
                           f"trace of a LogTile the design places (examples/logged_echo.py)")
        if len(logs) > 1:
            raise LogError(f"design {design.name!r} has {len(logs)} log tiles "
                           f"({', '.join(logs)}); name one with --tile")
        name = logs[0]
    if name not in logs:
        raise LogError(f"design {design.name!r} has no log tile {name!r}; its log tiles: "
                       f"{', '.join(logs) or 'none'}")
    decl = design.tiles[name]
    params = {k: p.default for k, p in inspect.signature(decl.cls.__init__).parameters.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY}
    params.update(decl.params)
    return LogSpec(name, params["entries"], params["snap"], params["linktype"])


def read_log(client: Any, tile: LogSpec, progress: Callable[[int, int], None] | None = None
             ) -> tuple[list[LogEntry], int, int]:
    """``(entries, written, lost)``: the log of ``tile`` (:func:`log_tile`) read through
    ``client`` (a :class:`~beehive.control_client.ControlClient`), oldest first.
    ``progress(i, n)`` is called after each entry."""
    name = tile.name
    written = client.read(f"{name}.written")
    lost = client.read(f"{name}.lost")
    n = min(written, tile.entries)
    entries = []
    for i in range(n):
        entries.append(LogEntry.decode(client.read_entry(f"{name}.log", i), tile.snap))
        if progress is not None:
            progress(i + 1, n)
    return entries, written, lost


def packet_key(entry: LogEntry, width: int, linktype: int) -> bytes:
    """What identifies the packet an entry logged across tiles: for an IPv4 UDP or TCP packet
    (link type 101 or 1, or a NoC message carrying one), its two endpoints in either order and
    its layer-4 payload; otherwise its payload bytes."""
    from apiary.sim.replay import _payload
    data, _ = _payload(entry, width)
    try:
        from scapy.layers.inet import IP, TCP, UDP
        from scapy.layers.l2 import Ether
        pkt = Ether(data) if linktype == LINKTYPE_ETHERNET else IP(data)
        ip = pkt[IP]
        for l4 in (UDP, TCP):
            if l4 in ip:
                seg = ip[l4]
                ends = sorted([(ip.src, seg.sport), (ip.dst, seg.dport)])
                return repr(ends).encode() + b"|" + bytes(seg.payload)
    except Exception:  # noqa: BLE001 -- anything scapy cannot take apart is keyed by its bytes
        pass
    return data


def match_latency(ingress: Iterable[LogEntry], egress: Iterable[LogEntry], width: int,
                  linktype: int) -> tuple[list[tuple[LogEntry, LogEntry]], int, int]:
    """``(pairs, unmatched_in, unmatched_out)``: each egress entry paired with the earliest
    unpaired ingress entry of the same :func:`packet_key` logged no later, in egress order."""
    waiting: dict[bytes, list[LogEntry]] = {}
    for e in ingress:
        waiting.setdefault(packet_key(e, width, linktype), []).append(e)
    pairs, lone_out = [], 0
    for out in egress:
        queue = waiting.get(packet_key(out, width, linktype), [])
        k = next((i for i, e in enumerate(queue) if e.cycle <= out.cycle), None)
        if k is None:
            lone_out += 1
            continue
        pairs.append((queue.pop(k), out))
    return pairs, sum(map(len, waiting.values())), lone_out


def format_latency(pairs: list[tuple[LogEntry, LogEntry]], lone_in: int, lone_out: int,
                   clock_hz: float, names: tuple[str, str]) -> str:
    """One line per pair (cycles in and out, latency in cycles and ns) and a summary."""
    ns = 1e9 / clock_hz
    lines = [f"{'in cycle':>12}  {'out cycle':>12}  {'cycles':>7}  {'ns':>9}"]
    for a, b in pairs:
        d = b.cycle - a.cycle
        lines.append(f"{a.cycle:>12}  {b.cycle:>12}  {d:>7}  {d * ns:>9.1f}")
    if pairs:
        lat = [b.cycle - a.cycle for a, b in pairs]
        lines.append(f"{len(pairs)} packets {names[0]} → {names[1]}: min {min(lat)}, median "
                     f"{statistics.median(lat):g}, max {max(lat)} cycles ({min(lat) * ns:.1f} / "
                     f"{statistics.median(lat) * ns:.1f} / {max(lat) * ns:.1f} ns at "
                     f"{clock_hz / 1e6:g} MHz)")
    else:
        lines.append(f"no packet of {names[1]} pairs with one of {names[0]}")
    if lone_in or lone_out:
        lines.append(f"unpaired: {lone_in} in {names[0]}, {lone_out} in {names[1]}")
    return "\n".join(lines)


def _client(design: Any, transport: Any) -> Any:
    from apiary.top import control_map
    from beehive.control_client import ControlClient
    return ControlClient(control_map(design), transport)


def _arguments(parser: argparse.ArgumentParser) -> None:
    from beehive.apps.controller import CONTROL_PORT
    parser.add_argument("host", metavar="HOST", help="the design's IP address (or host name)")
    parser.add_argument("--tile", metavar="NAME",
                        help="the log tile to read (default: the design's only one)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the pcap to write (default: <tile>.pcap, unless --vcd is given)")
    parser.add_argument("--vcd", metavar="FILE",
                        help="also (or, without -o, instead) write the entries as a waveform "
                             "(VCD: GTKWave, PulseView), one signal per field")
    parser.add_argument("--linktype", type=int, choices=LINKTYPES,
                        help="the pcap's link type: 147 whole NoC messages, 101 raw IPv4, 1 "
                             "Ethernet (default: the tile's linktype)")
    parser.add_argument("--latency", nargs=2, metavar=("IN", "OUT"),
                        help="read log tiles IN and OUT, pair their packets, print latencies "
                             "(no pcap)")
    parser.add_argument("--clock", type=float, metavar="HZ",
                        help="the design's clock, cycles to time (default: as apiary sim "
                             "chooses it, 125e6 at 64 bits, else 250e6)")
    transport_arguments(parser, port=CONTROL_PORT, service="the controller", timeout=0.5)
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON object")


def _run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536 or args.timeout <= 0 or args.retries < 0 or \
            (args.clock is not None and args.clock <= 0):
        print("apiary log: --port is 1 to 65535, --timeout and --clock above 0, --retries 0 "
              "or more", file=sys.stderr)
        return 2
    if args.latency and (args.tile or args.output or args.vcd):
        print("apiary log: --latency reads two tiles and writes no pcap: leave out --tile, "
              "-o and --vcd", file=sys.stderr)
        return 2
    from beehive.control_client import ControlError, udp_transport
    design = load(args)
    if args.clock is None:
        args.clock = default_clock_mhz(design.width) * 1e6
    where = f"{args.host}:{args.port}"
    try:
        with udp_transport(args.host, args.port, timeout=args.timeout,
                           retries=args.retries) as transport:
            return _report(args, design, _client(design, transport))
    except (LogError, ControlError) as e:
        return error(f"apiary log: {e}" if isinstance(e, LogError) or where in str(e)
                     else f"apiary log: {where}: {e}")


def _report(args: argparse.Namespace, design: Any, client: Any) -> int:
    """Read what ``args`` asks through ``client``, write the pcap, print the summary."""
    if args.latency:
        tiles = [log_tile(design, n) for n in args.latency]
        linktype = args.linktype or tiles[0].linktype
        (ing, _, _), (egr, _, _) = (read_log(client, t) for t in tiles)
        pairs, lone_in, lone_out = match_latency(ing, egr, design.width, linktype)
        if args.json:
            print(json.dumps({"in": args.latency[0], "out": args.latency[1],
                              "clock_hz": args.clock,
                              "pairs": [[a.cycle, b.cycle] for a, b in pairs],
                              "unpaired_in": lone_in, "unpaired_out": lone_out}))
        else:
            print(format_latency(pairs, lone_in, lone_out, args.clock,
                                 tuple(args.latency)))
        return 0
    from apiary.sim.replay import write_log_pcap
    tile = log_tile(design, args.tile)
    linktype = args.linktype or tile.linktype
    entries, written, lost = read_log(client, tile)
    path = args.output or (None if args.vcd else f"{tile.name}.pcap")
    if path is not None:
        write_log_pcap(path, entries, design.width, linktype, args.clock)
    signals = 0
    if args.vcd:
        from .log_vcd import write_log_vcd
        with open(args.vcd, "w") as f:
            signals = len(write_log_vcd(f, entries, design.width, linktype, args.clock,
                                        tile=tile.name, comment=f"apiary log of {design.name}"
                                        f".{tile.name}, {args.clock / 1e6:g} MHz").signals)
    if args.json:
        print(json.dumps({"tile": tile.name, "pcap": path, "vcd": args.vcd,
                          "linktype": linktype, "entries": len(entries), "written": written,
                          "lost": lost, "cycles": [e.cycle for e in entries]}))
    else:
        note = f"; {lost} not logged (the log was full)" if lost else ""
        kind = {LINKTYPE_NOC: "NoC messages"}.get(linktype, "payloads")
        files = " and ".join(filter(None, [path, args.vcd and f"{args.vcd} ({signals} signals)"]))
        print(f"{tile.name}: {len(entries)} entries ({kind}, link type {linktype}) → "
              f"{files}{note}")
    return 0


COMMAND = Command(
    "log", "read a running design's log tile over UDP into a pcap; or packet latencies "
           "between two log tiles", _run,
    description="Read a log tile (apiary.tiles.log.LogTile) of a running design through its "
                "controller (UDP port 7200) and write its entries to a nanosecond pcap that "
                "Wireshark opens: one packet per message the tile saw, stamped with the cycle "
                "its first flit passed at --clock (time 0 is the design's reset), holding the "
                "first bytes the tile kept (whole NoC messages with link type 147, which "
                "apiary.sim.replay replays cycle for cycle; the payload as IPv4 (101) or "
                "Ethernet (1)); with --vcd, a waveform of the same entries, one signal per "
                "field (GTKWave, PulseView). With --latency IN OUT, read two log tiles, pair "
                "each packet of OUT with the one of IN it answers or forwards, and print the "
                "latencies. Exits 1 when the controller does not answer.",
    arguments=_arguments)
"""The ``log`` command (entry point ``apiary.commands: log``)."""
