"""Logs as pcaps, and cycle-accurate replay of a log into a simulation (Beehive's trace replay,
thesis §4.3.6).

A :class:`~apiary.tiles.log.LogTile` records each message that passes it with the cycle its
first flit left. This module turns such a log into

* a pcap with hardware timestamps (:func:`log_records`, :func:`write_log_pcap`): each entry's
  cycle at the design's clock, in nanoseconds; the packet is the whole NoC message (link type
  147) or, on paths that carry IPv4 datagrams or Ethernet frames, the message's payload (101,
  1);
* a trace (:class:`Logged` messages: :func:`trace_from_entries`, :func:`trace_from_pcap`), and
  a design that replays it (:func:`replay_design`, :func:`open_replay`): the log tile is
  replaced by a :class:`ReplayTile` that injects each logged message into the log tile's next
  hop at its recorded cycle, instead of what arrives from upstream. Same reset, same cycle
  counter: the downstream tiles see the same messages on the same cycles as in the logged run,
  so they do the same things on the same cycles.

Replay is cycle-exact when each logged message left the log tile without a gap between its
flits (its entry's ``span`` is ``flits - 1``; the stack's tiles send a message's flits back to
back): the replay tile sends every message's flits back to back. The trace is part of the
replay design (a ROM in the replay tile), so on Verilator each trace is its own model (built
once, cached like any other).
"""

import copy
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from amaranth import Module, Signal
from amaranth.lib.memory import Memory

from ..noc.header import Message, header_flits
from ..noc.spec import head_bytes
from ..tile import Receive, Send, Tile, TileEnv
from ..tiles.log import LINKTYPE_NOC, LINKTYPES, LogEntry, LogTile
from ..tiles.raw_port import frame_message
from .base import DEFAULT_CLOCK_HZ
from .core import SimError
from .pcap import PcapRecord, cycle_ns, read_pcap_records, write_pcap_records


__all__ = ["Logged", "ReplayTile", "log_records", "write_log_pcap", "trace_from_entries",
           "trace_from_pcap", "replay_design", "open_replay"]


@dataclasses.dataclass(frozen=True)
class Logged:
    """One logged message: the cycle its first flit left the log tile, and its flits' data
    (the last flit is the last of the tuple)."""
    cycle: int
    flits: tuple[int, ...]

    def message(self, width: int) -> Message:
        return Message.from_flits(list(self.flits), width)


# -- log → pcap ---------------------------------------------------------------------------------

def _payload(entry: LogEntry, width: int) -> tuple[bytes, int]:
    """``(captured, length)``: the message's payload bytes the snapshot holds (head payload
    bytes in its header flit included, :func:`~apiary.noc.spec.decode_message`), and its
    ``payload_bytes``."""
    d = entry.decoded(width)
    if d is None:
        return b"", entry.payload_bytes
    start = (header_flits(width) + d.header.metadata_flits) * (width // 8)
    held = head_bytes(width, d.header.msg_type) + max(0, len(entry.snap) - start)
    return d.payload[:held], entry.payload_bytes


def log_records(entries: Iterable[LogEntry], width: int, linktype: int = LINKTYPE_NOC,
                clock_hz: float = DEFAULT_CLOCK_HZ) -> list[PcapRecord]:
    """The pcap records of a log's ``entries`` (at data-plane width ``width``), each at its
    cycle at ``clock_hz``: with ``linktype`` 147 the message as it left the log tile (all of it
    if the snapshot held it, ``orig_len`` its flits' bytes), with 101 or 1 its payload
    (``orig_len`` its ``payload_bytes``; what the snapshot held of it)."""
    if linktype not in LINKTYPES:
        raise SimError(f"linktype must be one of {', '.join(map(str, LINKTYPES))}, not "
                       f"{linktype!r}")
    out = []
    for e in entries:
        if linktype == LINKTYPE_NOC:
            data = e.message_bytes(width)
            out.append(PcapRecord(cycle_ns(e.cycle, clock_hz), data,
                                  max(len(data), e.flits * (width // 8))))
        else:
            data, length = _payload(e, width)
            out.append(PcapRecord(cycle_ns(e.cycle, clock_hz), data, max(length, len(data))))
    return out


def write_log_pcap(path: Any, entries: Iterable[LogEntry], width: int,
                   linktype: int = LINKTYPE_NOC, clock_hz: float = DEFAULT_CLOCK_HZ) -> int:
    """Write :func:`log_records` to a nanosecond pcap at ``path``; returns the packets
    written."""
    return write_pcap_records(path, log_records(entries, width, linktype, clock_hz), linktype)


# -- traces -------------------------------------------------------------------------------------

def trace_from_entries(entries: Iterable[LogEntry], width: int) -> list[Logged]:
    """The trace of a log's ``entries``.

    Raises
    ------
    SimError
        An entry's snapshot does not hold its whole message (log with a larger ``snap``).
    """
    trace = []
    for i, e in enumerate(entries):
        if not e.whole(width):
            raise SimError(f"log entry {i} holds {len(e.snap)} bytes of a {e.flits}-flit "
                           f"message ({e.flits * width // 8} bytes at {width} bits): replay "
                           f"needs whole messages (a larger snap)")
        trace.append(Logged(e.cycle, tuple(d for d, _ in
                                           frame_message(e.message_bytes(width), width))))
    return trace


def trace_from_pcap(path: Any, width: int, clock_hz: float = DEFAULT_CLOCK_HZ) -> list[Logged]:
    """The trace in a pcap that ``apiary log`` wrote with link type 147 (whole NoC messages),
    cycles from its timestamps at ``clock_hz``.

    Raises
    ------
    SimError
        Another link type, a truncated packet, or a packet that is not a whole message.
    """
    linktype, records = read_pcap_records(path)
    if linktype != LINKTYPE_NOC:
        raise SimError(f"{path}: link type {linktype}; replay needs whole NoC messages (link "
                       f"type {LINKTYPE_NOC}: apiary log --linktype {LINKTYPE_NOC})")
    nb = width // 8
    trace = []
    for i, (ns, data, orig_len) in enumerate(records):
        if orig_len != len(data) or not data or len(data) % nb:
            raise SimError(f"{path}: packet {i} holds {len(data)} of {orig_len} bytes: replay "
                           f"needs whole {width}-bit messages")
        flits = frame_message(data, width)
        try:
            Message.from_flits(flits, width)
        except ValueError as e:
            raise SimError(f"{path}: packet {i} is not a {width}-bit NoC message: {e}") from None
        trace.append(Logged(round(ns * clock_hz / 1e9), tuple(d for d, _ in flits)))
    return trace


# -- replay -------------------------------------------------------------------------------------

def _check_trace(trace: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    out: list[tuple[int, tuple[int, ...]]] = []
    for i, item in enumerate(trace):
        cycle, flits = (item.cycle, item.flits) if isinstance(item, Logged) else item
        if not isinstance(cycle, int) or cycle < 0 or not flits:
            raise ValueError(f"trace item {i}: a cycle (a non-negative int) and at least one "
                             f"flit, not {item!r}")
        if out and cycle <= out[-1][0]:
            raise ValueError(f"trace item {i}: cycle {cycle} is not after the previous one's "
                             f"({out[-1][0]}); a trace is in cycle order")
        out.append((int(cycle), tuple(int(f) for f in flits)))
    return tuple(out)


class ReplayTile(Tile):
    """Inject a recorded trace into the NoC, each message at its cycle: the driver that stands
    where a :class:`~apiary.tiles.log.LogTile` stood when its log is replayed.

    ``trace`` is a sequence of :class:`Logged` (or ``(cycle, flits)`` pairs) in cycle order,
    kept in a ROM. The tile counts cycles from reset as a log tile does; the first flit of
    message *i* is offered from cycle ``cycle_i`` (with ``at``: ``at + cycle_i - cycle_0``) and
    its flits follow back to back, sent as they are (the log holds them as they left the log
    tile: already addressed to its next hop). A message that cannot start on its cycle (the
    previous one has not left, or the next hop holds it back) starts as soon as it can and is
    counted in ``late``. Messages arriving from upstream are taken and discarded, counted in
    ``discarded``.

    Counters: ``injected``, messages sent; ``late``, messages sent after their cycle;
    ``discarded``, messages from upstream taken and dropped.

    Message ports: ``discarded`` in and ``trace`` out, any type, as flits (``raw``).
    """

    inputs = (Receive("discarded", raw=True),)
    outputs = (Send("trace", raw=True),)

    def __init__(self, env: TileEnv | None = None, *, trace: Sequence = (),
                 at: int | None = None) -> None:
        trace = _check_trace(trace)
        if at is not None:
            if not isinstance(at, int) or at < 0:
                raise ValueError(f"at must be a non-negative cycle, not {at!r}")
            trace = tuple((at + c - trace[0][0], f) for c, f in trace)
        self.trace = trace
        super().__init__(env, counters={
            "injected": "messages of the trace sent",
            "late": "messages sent after their recorded cycle",
            "discarded": "messages from upstream taken and dropped",
        })
        mask = (1 << self.env.width) - 1
        for c, flits in trace:
            if any(not 0 <= f <= mask for f in flits):
                raise ValueError(f"the trace's message at cycle {c} has a flit wider than "
                                 f"{self.env.width} bits")

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self.env.width
        counters = self.counters
        ports = self.message_ports(m)
        m.d.comb += ports.discarded.ready.eq(1)
        with m.If(ports.discarded.valid & ports.discarded.payload.last):
            m.d.sync += counters.discarded.eq(counters.discarded + 1)
        cycle = Signal(64)
        m.d.sync += cycle.eq(cycle + 1)
        if not self.trace:
            return m

        flits = [(f, int(k == len(fl) - 1)) for _, fl in self.trace for k, f in enumerate(fl)]
        m.submodules.rom = rom = Memory(shape=width + 1, depth=len(flits),
                                        init=[d | last << width for d, last in flits])
        m.submodules.starts = starts = Memory(shape=64, depth=len(self.trace),
                                              init=[c for c, _ in self.trace])
        flit_rd = rom.read_port(domain="comb")
        start_rd = starts.read_port(domain="comb")
        ptr = Signal(range(len(flits) + 1))
        msg = Signal(range(len(self.trace) + 1))
        first = Signal(init=1)
        out = ports.trace
        m.d.comb += [
            flit_rd.addr.eq(ptr),
            start_rd.addr.eq(msg),
            out.valid.eq((msg < len(self.trace)) & (cycle >= start_rd.data)),
            out.payload.data.eq(flit_rd.data[:width]),
            out.payload.last.eq(flit_rd.data[width]),
        ]
        with m.If(out.valid & out.ready):
            m.d.sync += [ptr.eq(ptr + 1), first.eq(out.payload.last)]
            with m.If(first & (cycle != start_rd.data)):
                m.d.sync += counters.late.eq(counters.late + 1)
            with m.If(out.payload.last):
                m.d.sync += [msg.eq(msg + 1), counters.injected.eq(counters.injected + 1)]
        return m


def replay_design(design: Any, log_tile: str, trace: Sequence, *, at: int | None = None) -> Any:
    """A copy of ``design`` in which the tile ``log_tile`` (a
    :class:`~apiary.tiles.log.LogTile`) is a :class:`ReplayTile` injecting ``trace`` (see it
    for ``at``); everything else, the routes into and out of that position included, is the
    same. The copy is named ``<name>_replay``.

    Raises
    ------
    SimError
        ``design`` has no tile ``log_tile``, or it is not a log tile.
    """
    decl = design.tiles.get(log_tile)
    if decl is None:
        raise SimError(f"design {design.name!r} has no tile {log_tile!r}")
    if not (isinstance(decl.cls, type) and issubclass(decl.cls, LogTile)):
        raise SimError(f"tile {log_tile!r} of design {design.name!r} is a {decl.cls_name}, not "
                       f"a LogTile: only a log tile is replaced by its replay")
    try:
        trace = _check_trace(trace)
    except ValueError as e:
        raise SimError(str(e)) from None
    out = copy.copy(design)
    out.name = f"{design.name}_replay"
    out.tiles = dict(design.tiles)
    out.tiles[log_tile] = dataclasses.replace(decl, cls=ReplayTile,
                                              params={"trace": trace, "at": at})
    for name in ("routes", "dependencies", "wires", "grants"):
        setattr(out, name, list(getattr(design, name)))
    out.settings = dict(design.settings)
    return out


def open_replay(design: Any, log_tile: str, trace: Sequence, backend: str = "pysim", *,
                at: int | None = None, **options: Any) -> Any:
    """:func:`~apiary.sim.open_sim` of :func:`replay_design`: a :class:`~apiary.sim.Sim`
    in which the trace is injected once it runs (``options`` go to ``open_sim``; use the logged
    run's ``seed`` and ``stall`` for the same back-pressure on the same cycles)."""
    from . import open_sim
    return open_sim(replay_design(design, log_tile, trace, at=at), backend, **options)
