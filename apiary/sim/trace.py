"""NoC traces from simulation: taps on the tiles' NoC ports, checked against the message
specification, written as a pcap that the generated scapy dissectors decode.

::

    with open_sim(design, "pysim") as sim:
        trace = NocTrace(sim)                 # before the first run; checks every message
        sim.send(frame)
        sim.run()
        trace.write_pcap("noc.pcap")          # link type 148: apiary.noc.dissect
        for m in trace.messages():
            print(m.cycle_first, m.tap, m.decoded.header.msg_type)

Each tap is an :class:`~apiary.noc.checker.FlitTap` on one tile's port: by default every tile's
output into the data plane (``noc_out``), so each message is seen once, where it leaves its
source; ``directions=("out", "in")`` adds the ports into the tiles, ``planes=("data", "ctl")``
the control plane. With ``check`` (the default) a message that breaks the specification stops
the run with :class:`~apiary.noc.checker.MessageCheckError`, naming the tap, the cycle and the
field. Taps read internal signals, so they need the ``pysim`` back end (a Verilator model has
only the design's top-level ports).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..noc.checker import FlitTap
from ..noc.dissect import LINKTYPE_NOC_TRACE, Plane, TapDirection, trace_record
from ..noc.spec import Decoded, decode_message
from ..tile import NOC_PORTS
from .core import SimError
from .pcap import PcapRecord, cycle_ns, write_pcap_records


__all__ = ["NocTrace", "TracedMessage"]

_DIRECTIONS = {"out": TapDirection.FROM_TILE, "in": TapDirection.TO_TILE}


@dataclass(frozen=True)
class TracedMessage:
    """One message a tap saw: its cycles, its flits, the tile and the port it was seen at
    (``tap``: ``"<tile> <port>"``, ``"<tile> monitor <port>"`` on the router side of a
    monitor)."""
    cycle_first: int
    cycle_last: int
    flits: tuple[int, ...]
    tile: str
    at: tuple[int, int]
    direction: TapDirection
    plane: str
    width: int
    tap: str

    @property
    def decoded(self) -> Decoded:
        return decode_message(self.flits, self.width)

    def record(self) -> bytes:
        """The message as a trace record (:func:`apiary.noc.dissect.trace_record`)."""
        return trace_record(self.flits, self.width, cycle=self.cycle_first, tap=self.at,
                            direction=self.direction, plane=Plane[self.plane.upper()])


class NocTrace:
    """Taps on the NoC ports of the tiles of a pysim simulation ``sim`` (opened, not yet run):
    ``tiles`` (default: all), ``planes`` and ``directions`` (``"out"``: into the NoC, ``"in"``:
    out of it) say which ports; ``side="router"`` taps an untrusted tile's data-plane ports on
    its monitor's router side (where the monitor's own messages, a ``FAULT``, leave), the
    default ``"tile"`` on the tile's side; ``check`` makes every tap a checker.

    Raises
    ------
    SimError
        Another back end, a simulation that has already run, an unknown tile, plane, direction
        or side.
    """

    def __init__(self, sim: Any, tiles: Iterable[str] | None = None, *,
                 planes: Sequence[str] = ("data",), directions: Sequence[str] = ("out",),
                 side: str = "tile", check: bool = True) -> None:
        if getattr(sim, "backend", None) != "pysim":
            raise SimError(f"NoC taps need the pysim back end, not {sim.backend!r}: a Verilator "
                           f"model has only the design's top-level ports")
        design, top = sim.design, sim.top
        names = list(top.tiles) if tiles is None else list(tiles)
        for what, given, known in (("tile", names, top.tiles), ("plane", planes, NOC_PORTS),
                                   ("direction", directions, _DIRECTIONS),
                                   ("side", [side], ("tile", "router"))):
            unknown = [g for g in given if g not in known]
            if unknown:
                raise SimError(f"no {what} {unknown[0]!r} to tap; {what}s are "
                               f"{', '.join(known)}")
        self.clock_hz = sim.clock_hz
        self._taps: list[tuple[FlitTap, str, tuple[int, int], TapDirection, str]] = []
        for name in names:
            tile, decl = top.tiles[name], design.tiles[name]
            for plane in planes:
                if plane not in tile.planes:
                    continue
                width = design.width if plane == "data" else design.ctl_width
                to_tile, from_tile = NOC_PORTS[plane]
                # A monitor's router side has the NoC's names (noc_out into the router).
                owner, label = tile, name
                if side == "router" and plane == "data" and name in top.monitors:
                    owner, label = top.monitors[name], f"{name} monitor"
                    to_tile, from_tile = "noc_in", "noc_out"
                for direction in directions:
                    member = from_tile if direction == "out" else to_tile
                    tap = FlitTap(getattr(owner, member), width, f"{label} {member}",
                                  check=check)
                    self._taps.append((tap, name, (decl.x, decl.y), _DIRECTIONS[direction],
                                       plane))
        for tap, *_ in self._taps:
            sim.add_process(tap.process)

    def messages(self) -> list[TracedMessage]:
        """Every message seen so far, in the order their first flits moved (on one cycle:
        arrivals at a tile before departures, as a cut-through tile forwards what it takes on
        the same cycle; then in tap order)."""
        out = []
        for k, (tap, name, at, direction, plane) in enumerate(self._taps):
            for t in tap.messages:
                out.append((t.cycle_first, direction != TapDirection.TO_TILE, k, TracedMessage(
                    t.cycle_first, t.cycle_last, t.flits, name, at, direction, plane,
                    tap.width, tap.name)))
        return [item[-1] for item in sorted(out, key=lambda item: item[:3])]

    def records(self) -> list[PcapRecord]:
        """The pcap records of :meth:`messages`, stamped at their first flit's cycle."""
        return [PcapRecord(cycle_ns(m.cycle_first, self.clock_hz), raw, len(raw))
                for m in self.messages() for raw in [m.record()]]

    def write_pcap(self, path: Any) -> int:
        """Write :meth:`records` to a nanosecond pcap of link type 148; returns the count."""
        return write_pcap_records(path, self.records(), LINKTYPE_NOC_TRACE)

