"""Elaboration: a checked :class:`~apiary.design.Design` becomes one Amaranth component.

One mesh per plane the design uses, each tile's NoC ports on its router's local port, router-only
positions where no tile sits. Around the tiles, the top level has three kinds of ports:

* **MAC ports** (``<port>_mac``, a :class:`~apiary.stream.mac.MacPort`): each pair of a tile's
  receive and transmit :class:`~apiary.stream.mac.FrameStream` members gets a
  :class:`~apiary.stream.mac.MacEdge`, built with the top's :class:`~apiary.stream.mac.MacOptions`
  (the platform's byte enables, padding and clock domain).
* **Counters** (``counters``): the design's :class:`~apiary.counters.CounterBank`, every tile's
  declared counters and the meshes' own.
* Every other non-NoC member of every tile, named ``<tile>_<member>``, except those an
  :class:`Attachment` builds something for inside the top (the simulators attach memory models to
  memory ports this way).

:func:`design_verilog` converts a top to Verilog through a cache keyed by
:func:`apiary.fingerprint.design_fingerprint`.
"""

import os
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypedDict

from amaranth import Module, ResetInserter
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import Out, connect, flipped

from .control.addrmap import DesignMap, TileMap
from .control.agent import ControlAgent
from .control.messages import AGENT_FBITS
from .counters import CounterBank
from .design import Design, DesignError
from .fingerprint import design_fingerprint
from .noc.header import Fbits
from .noc.merger import MessageMerger
from .noc.mesh import ROUTER_METERS, Mesh
from .noc.splitter import FbitsSplitter
from .stream.counters import CounterSignature
from .stream.mac import FrameStream, MacEdge, MacOptions, MacPort
from .tile import NOC_PORTS, Tile


__all__ = ["DesignTop", "Attachment", "MacPortInfo", "top_name", "design_verilog",
           "router_depths", "generate_verilog", "control_map", "Progress", "no_progress",
           "write_cached"]

#: How a long step is reported: ``progress(label, summary)`` is a context manager around the
#: step, ``label`` says what runs ("building Verilator model (64 bits, 14 tiles)") and
#: ``summary(seconds)`` the line that ends it. The command line passes
#: :class:`apiary.terminal.StatusLine`; library calls default to :func:`no_progress`.
Progress = Callable[[str, Callable[[float], str]], AbstractContextManager[object]]


def no_progress(label: str, summary: Callable[[float], str]) -> AbstractContextManager[object]:
    """The :data:`Progress` that reports nothing."""
    return nullcontext()


@dataclass(frozen=True)
class Attachment:
    """What the top builds, instead of a top-level port, for every tile member whose signature is
    a ``signature_type`` (seen from the tile: ``Out``).

    ``build(signature)`` returns ``(elaboratable, interface)``: the elaboratable becomes the
    submodule ``<tile>_<member>_<name>`` and ``interface`` is connected to the tile's member.
    ``key`` describes what is built, for the Verilog cache key (it must not change between runs
    for the same result).
    """
    name: str
    signature_type: type
    build: Callable
    key: str


@dataclass(frozen=True)
class MacPortInfo:
    """One MAC port of the top: ``member`` (``<name>_mac``), fed by ``rx = (tile, member)`` and
    feeding ``tx = (tile, member)``."""
    name: str
    member: str
    rx: tuple
    tx: tuple


def _frame_streams(
        tiles: Mapping[str, Tile]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(receive, transmit)``: ``[(tile, member)]`` of every FrameStream member, by direction."""
    receive: list[tuple[str, str]] = []
    transmit: list[tuple[str, str]] = []
    for name, tile in tiles.items():
        for member, desc in tile.signature.members.items():
            if desc.is_signature and isinstance(desc.signature, FrameStream):
                (receive if desc.flow == wiring.In else transmit).append((name, member))
    return receive, transmit


def pair_mac_ports(tiles: Mapping[str, Tile]) -> list[MacPortInfo]:
    """The MAC ports of a design: a tile with a receive and a transmit FrameStream is a port
    named after the tile; if exactly one receive and one transmit stream are left unpaired (the
    Beehive arrangement: ``eth_rx`` receives, ``eth_tx`` transmits), they form one port named
    after what their tiles' names share (``eth``). Other unpaired streams stay plain ports."""
    receive, transmit = _frame_streams(tiles)
    rx_tiles = {t: m for t, m in receive}
    tx_tiles = {t: m for t, m in transmit}
    ports = [MacPortInfo(t, f"{t}_mac", (t, rx_tiles[t]), (t, tx_tiles[t]))
             for t in rx_tiles if t in tx_tiles]
    lone_rx = [(t, m) for t, m in receive if t not in tx_tiles]
    lone_tx = [(t, m) for t, m in transmit if t not in rx_tiles]
    if len(lone_rx) == 1 and len(lone_tx) == 1:
        a, b = lone_rx[0][0], lone_tx[0][0]
        shared = os.path.commonprefix([a, b]).rstrip("_") or f"{a}_{b}"
        ports.append(MacPortInfo(shared, f"{shared}_mac", lone_rx[0], lone_tx[0]))
    return ports


class _BankCounters:
    """The members ``<prefix><name>`` of ``top.counters`` as ``counters.<name>``, looked up when
    read (``top`` has no counters yet when its control plane is planned): a control agent
    serves a router's meters from the counter bank as it serves a tile's own counters."""

    def __init__(self, top: "DesignTop", prefix: str) -> None:
        self._top, self._prefix = top, prefix

    @property
    def counters(self) -> "_BankCounters":
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._top.counters, self._prefix + name)


class DesignTop(wiring.Component):
    """The whole design as one component (see the module docstring).

    Parameters
    ----------
    design : Design
    mac : MacOptions
        How every MAC edge is built (default: ``tkeep`` byte enables, no padding, the design's
        own clock: what the simulators use).
    attach : sequence of Attachment
        What to build for which tile members instead of bringing them out.

    Members
    -------
    <port>_mac : Out(MacPort)
        One per MAC port (:func:`pair_mac_ports`).
    counters : Out(CounterSignature)
        The counter bank (:attr:`bank`): ``<tile>_<counter>`` for every counter a tile declares,
        ``<plane>_route_dropped`` (messages a specialised router of that plane dropped: no
        declared route uses their path), or with ``Design(full_routers=True)``
        ``<plane>_edge_dropped`` (messages sunk at the edge of that plane's mesh: addressed
        outside it) and ``<plane>_empty_dropped`` (messages delivered to a router-only position
        of that plane, or to a tile that does not attach to it), and with a control plane
        ``ctl_agents_dropped`` (what the control agents discarded).
    <tile>_<member>
        Every other member of every tile that is not a NoC port and has no attachment.

    Attributes
    ----------
    bank : CounterBank
    mac_ports : list of MacPortInfo
    attached : list of (tile, member, Attachment)
    monitors : dict of str to Component
        The Apiary monitor of every untrusted tile (built by the design's ``guard``), between
        the tile and its data-plane router; its counters are ``<tile>_monitor_<counter>``.
    control_map : DesignMap
        With a controller in the design (a tile whose class says ``controls = True``), the
        address map of the control agent the top puts at every tile with counters or
        registers (:mod:`apiary.control`): the tile's counters, its monitor's, its registers
        and tables. Empty without a controller, and then no agent is built.

    Raises
    ------
    DesignError
        If the design does not pass its checks, or a tile could not be built.
    """

    def __init__(self, design: Design, *, mac: MacOptions = MacOptions(),
                 attach: Sequence[Attachment] = ()):
        self.design = design
        if not isinstance(mac, MacOptions):
            raise TypeError(f"mac must be a MacOptions, not {mac!r}")
        self.mac = mac
        self.attachments = list(attach)
        self.graph = design.check()
        self.tiles = design.build_tiles()
        self._check_wires()
        self.monitors = self._build_monitors()
        self.planes = [p for p in NOC_PORTS if any(p in t.planes for t in self.tiles.values())]
        self.mac_ports = pair_mac_ports(self.tiles)
        edged = {end for port in self.mac_ports for end in (port.rx, port.tx)}
        self.attached = []
        self._outside = {}          # {top member: (tile, member)}, brought out as they are
        members = {port.member: Out(MacPort(design.width, byte_enables=mac.byte_enables))
                   for port in self.mac_ports}
        self.bank = CounterBank()
        for name, tile in self.tiles.items():
            for member in Tile.external_members(tile.signature):
                desc = tile.signature.members[member]
                attachment = self._attachment(desc)
                if attachment is not None:
                    self.attached.append((name, member, attachment))
                elif (name, member) not in edged:
                    outer = f"{name}_{member}"
                    if outer in members or outer == "counters":
                        raise DesignError(f"tile {name!r}: its member {member!r} would be the "
                                          f"top-level port {outer!r}, which another port has; "
                                          f"rename the tile", design=design)
                    members[outer] = desc
                    self._outside[outer] = (name, member)
            if "counters" in tile.signature.members:
                self.bank.add(name, tile.signature.members["counters"].signature)
            if name in self.monitors:
                self.bank.add(f"{name} monitor",
                              self.monitors[name].signature.members["counters"].signature,
                              prefix=f"{name}_monitor")
        for plane in self.planes:
            self.bank.add(f"{plane} mesh", CounterSignature(
                {"edge_dropped": "messages sunk at the edge of the mesh (addressed outside it)",
                 "empty_dropped": "messages delivered to a position without a tile on this "
                                  "plane"} if design.full_routers else
                {"route_dropped": "messages a router dropped: their path is on no declared "
                                  "route (addressed outside the mesh, to a position without a "
                                  "tile, or where the design has no route)"}), prefix=plane)
        if design.settings.get("router_meters"):    # per router input port (noc/meter.py)
            for x in range(design.cols):
                for y in range(design.rows):
                    self.bank.add(f"data router ({x}, {y})", CounterSignature(ROUTER_METERS),
                                  prefix=f"data_r{x}_{y}")
        self.control_map, self._agent_sources = self._control_plane()
        if self._agent_sources:
            self.bank.add("ctl agents", CounterSignature({
                "agents_dropped": "control-plane messages the agents discarded: not a read or "
                                  "a write, or malformed"}), prefix="ctl")
        members["counters"] = Out(self.bank.signature())
        super().__init__(members)

    def _control_plane(self) -> tuple[DesignMap, dict[str, list]]:
        """The address map of every control agent, and the counter signatures each serves,
        ``{tile: [(prefix, CounterSignature, the component that drives them)]}``. A design has a
        control plane when it has a controller (a tile on the ``ctl`` plane whose class says
        ``controls = True``); then every tile with counters or registers gets an agent."""
        d = self.design
        dmap = DesignMap()
        controllers = self.graph.controllers     # the layout check found them
        if not controllers:
            return dmap, {}
        dmap.controller = d.tiles[controllers[0]].at
        sources = {}
        for name, tile in self.tiles.items():
            members = tile.signature.members
            counters: list[tuple[str, Any, Any]] = []
            if "counters" in members:
                counters.append(("", members["counters"].signature, tile))
            if name in self.monitors:
                counters.append(("monitor_", self.monitors[name].signature.members[
                    "counters"].signature, self.monitors[name]))
            if d.settings.get("router_meters"):
                decl = d.tiles[name]
                counters.append(("router_", CounterSignature(ROUTER_METERS),
                                 _BankCounters(self, f"data_r{decl.x}_{decl.y}_")))
            registers = members["regs"].signature if "regs" in members else None
            if not counters and registers is None:
                continue
            decl = d.tiles[name]
            try:
                dmap.tiles[name] = TileMap.build(name, decl.x, decl.y,
                                                 [(p, sig) for p, sig, _ in counters], registers)
            except ValueError as e:
                raise DesignError(f"tile {decl.describe()}: {e}", design=d) from None
            sources[name] = counters
        return dmap, sources

    def _build_monitors(self) -> dict[str, Any]:
        """The monitor of every untrusted tile, from the design's guard."""
        d, monitors, problems = self.design, {}, []
        for name in d.untrusted():
            try:
                monitors[name] = d.guard.monitor(d, name, d.env(name))
            except (ValueError, TypeError) as e:
                problems.append(f"the monitor of tile {d.tiles[name].describe()} could not be "
                                f"built: {e}")
        if problems:
            raise DesignError(problems, design=d)
        return monitors

    def _check_wires(self) -> None:
        """Every :class:`~apiary.tile.WiresSignature` member is joined by exactly one
        ``Design.wire``, to a partner whose member of that name fits it."""
        d, problems = self.design, []
        wired = set()
        for w in d.wires:
            wired.update({(w.a, w.member), (w.b, w.member)})
            members = [self.tiles[name].signature.members for name in (w.a, w.b)]
            missing = [name for name, ms in zip((w.a, w.b), members)
                       if w.member not in ms or not Tile.is_wires(ms[w.member])]
            if missing:
                which = (f"tile {missing[0]!r} has" if len(missing) == 1
                         else f"tiles {' and '.join(map(repr, missing))} have")
                problems.append(f"wires {w.describe()} ({w.where}): {which} no wires member "
                                f"{w.member!r}.")
                continue
            da, db = (ms[w.member] for ms in members)
            if da.flow == db.flow or da.signature != db.signature:
                problems.append(f"wires {w.describe()} ({w.where}) do not fit each other: one "
                                f"tile must drive (Out) what the other takes (In), with equal "
                                f"signatures; they are {da.flow.name} {da.signature!r} and "
                                f"{db.flow.name} {db.signature!r}.")
        self.broadcasts, broadcast_problems = self._broadcast_wires()
        problems += broadcast_problems
        for name, tile in self.tiles.items():
            for member, desc in tile.signature.members.items():
                if Tile.is_wires(desc) and (name, member) not in wired \
                        and not desc.signature.broadcast:
                    problems.append(f"tile {d.tiles[name].describe()} has wires {member!r} to a "
                                    f"partner tile that are joined to nothing; add "
                                    f"d.wire({name!r}, <partner>, member={member!r}).")
        if problems:
            raise DesignError(problems, design=d)

    def _broadcast_wires(self) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
        """Broadcast wires (:class:`~apiary.tile.WiresSignature` with ``broadcast``):
        ``[(driver, member, takers)]``, and the problems (takers with no driver, or several
        drivers)."""
        ends: dict[tuple[str, Any], tuple[list[str], list[str]]] = {}
        for name, tile in self.tiles.items():
            for member, desc in tile.signature.members.items():
                if Tile.is_wires(desc) and desc.signature.broadcast:
                    sig = desc.signature if desc.flow == wiring.Out else desc.signature.flip()
                    key = (member, type(sig))
                    drivers, takers = ends.setdefault(key, ([], []))
                    (drivers if desc.flow == wiring.Out else takers).append(name)
        found, problems = [], []
        for (member, cls), (drivers, takers) in ends.items():
            if takers and len(drivers) != 1:
                problems.append(
                    f"tiles {', '.join(map(repr, takers))} take {member!r} "
                    f"({cls.__name__}) from the one tile that drives it, but "
                    + (f"{len(drivers)} tiles drive it ({', '.join(map(repr, drivers))})"
                       if drivers else "no tile of the design drives it") + ".")
            elif takers:
                found.append((drivers[0], member, takers))
        return found, problems

    def _attachment(self, desc: Any) -> Attachment | None:
        if not desc.is_signature or desc.flow != wiring.Out:
            return None
        for attachment in self.attachments:
            if isinstance(desc.signature, attachment.signature_type):
                return attachment
        return None

    def fingerprint_extra(self) -> str:
        """What the top adds to its design's Verilog cache key: its MAC options and what it
        attaches where."""
        return repr((self.mac, [(t, m, a.key) for t, m, a in self.attached]))

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        d = self.design
        for name, tile in self.tiles.items():
            monitor = self.monitors.get(name)
            if monitor is None:
                m.submodules[name] = tile
            else:   # RELEASE resets the tile through its monitor
                m.submodules[name] = ResetInserter(monitor.tile_reset)(tile)
                m.submodules[f"{name}_monitor"] = monitor
                for counter in monitor.signature.members["counters"].signature.members:
                    m.d.comb += getattr(self.counters, f"{name}_monitor_{counter}").eq(
                        getattr(monitor.counters, counter))
            if "counters" in tile.signature.members:
                for counter in tile.signature.members["counters"].signature.members:
                    m.d.comb += getattr(self.counters, f"{name}_{counter}").eq(
                        getattr(tile.counters, counter))
        for name, member, attachment in self.attached:
            tile = self.tiles[name]
            elaboratable, interface = attachment.build(tile.signature.members[member].signature)
            m.submodules[f"{name}_{member}_{attachment.name}"] = elaboratable
            connect(m, tile=getattr(tile, member), **{attachment.name: interface})
        for port in self.mac_ports:
            edge = m.submodules[port.member] = MacEdge(d.width, self.mac)
            connect(m, top=flipped(getattr(self, port.member)), edge=edge.mac)
            connect(m, edge=edge.rx, tile=getattr(self.tiles[port.rx[0]], port.rx[1]))
            connect(m, tile=getattr(self.tiles[port.tx[0]], port.tx[1]), edge=edge.tx)
        for outer_name, (name, member) in self._outside.items():
            outer, inner = getattr(self, outer_name), getattr(self.tiles[name], member)
            desc = self.tiles[name].signature.members[member]
            if not desc.is_port:
                connect(m, top=flipped(outer), tile=inner)
            elif desc.flow == wiring.Out:
                m.d.comb += outer.eq(inner)
            else:
                m.d.comb += inner.eq(outer)

        for w in d.wires:
            connect(m, getattr(self.tiles[w.a], w.member), getattr(self.tiles[w.b], w.member))
        for driver, member, takers in self.broadcasts:
            connect(m, getattr(self.tiles[driver], member),
                    *(getattr(self.tiles[name], member) for name in takers))

        agents: dict[str, ControlAgent] = {}
        for name, sources in self._agent_sources.items():
            tile = self.tiles[name]
            # The tile's member is In(...): its .signature is the flipped one.
            registers = (tile.signature.members["regs"].signature.flip()
                         if "regs" in tile.signature.members else None)
            agent = agents[name] = m.submodules[f"{name}_agent"] = ControlAgent(
                d.ctl_width, self.control_map.tiles[name],
                [(prefix, sig) for prefix, sig, _ in sources], registers)
            for k, (_, sig, owner) in enumerate(sources):
                port = getattr(agent, f"counters_{k}")
                for counter in sig.members:
                    m.d.comb += getattr(port, counter).eq(getattr(owner.counters, counter))
            if registers is not None:
                connect(m, agent=agent.regs, tile=tile.regs)
        if agents:
            m.d.comb += self.counters.ctl_agents_dropped.eq(
                sum(agent.dropped for agent in agents.values()))

        by_position = {(d.tiles[n].x, d.tiles[n].y): n for n in self.tiles}
        for plane in self.planes:
            width = d.width if plane == "data" else d.ctl_width
            mesh = m.submodules[f"{plane}_mesh"] = Mesh(
                width, d.cols, d.rows, **router_depths(d, plane),
                paths=None if d.full_routers else self.graph.router_paths(plane),
                meters=plane == "data" and bool(d.settings.get("router_meters")))
            if "meters" in mesh.signature.members:
                for x in range(d.cols):
                    for y in range(d.rows):
                        for counter in ROUTER_METERS:
                            m.d.comb += getattr(self.counters, f"data_r{x}_{y}_{counter}").eq(
                                getattr(mesh.meters[x][y], counter))
            if d.full_routers:
                m.d.comb += getattr(self.counters, f"{plane}_edge_dropped").eq(mesh.dropped)
            else:
                m.d.comb += getattr(self.counters, f"{plane}_route_dropped").eq(
                    mesh.route_dropped)
            to_tile, from_tile = NOC_PORTS[plane]
            sunk: list[Any] = []
            for x in range(d.cols):
                for y in range(d.rows):
                    at = by_position.get((x, y))
                    here = self.tiles[at] if at is not None else None
                    monitor = self.monitors.get(at) if at is not None and plane == "data" \
                        else None
                    ctl_agent = agents.get(at) if at is not None and plane == "ctl" else None
                    if ctl_agent is not None and here is not None and plane in here.planes:
                        # A tile on the control plane itself (the controller): its agent on
                        # AGENT_FBITS, the tile on LOCAL0. A controller issues one request at a
                        # time, so its own agent's answer never waits behind another request.
                        split = m.submodules[f"{at}_ctl_split"] = FbitsSplitter(
                            width, [AGENT_FBITS, Fbits.LOCAL0])
                        merge = m.submodules[f"{at}_ctl_merge"] = MessageMerger(width, 2)
                        connect(m, router=mesh.eject[x][y], split=split.i)
                        connect(m, split=split.o[0], ctl_agent=ctl_agent.ctl_in)
                        connect(m, split=split.o[1], tile=getattr(here, to_tile))
                        connect(m, ctl_agent=ctl_agent.ctl_out, merge=merge.i[0])
                        connect(m, tile=getattr(here, from_tile), merge=merge.i[1])
                        connect(m, merge=merge.o, router=mesh.inject[x][y])
                    elif ctl_agent is not None:
                        connect(m, ctl_agent=ctl_agent.ctl_out, router=mesh.inject[x][y])
                        connect(m, router=mesh.eject[x][y], ctl_agent=ctl_agent.ctl_in)
                    elif here is not None and plane in here.planes and monitor is not None:
                        connect(m, tile=getattr(here, from_tile), monitor=monitor.tile_out)
                        connect(m, monitor=monitor.tile_in, tile=getattr(here, to_tile))
                        connect(m, monitor=monitor.noc_out, router=mesh.inject[x][y])
                        connect(m, router=mesh.eject[x][y], monitor=monitor.noc_in)
                    elif here is not None and plane in here.planes:
                        connect(m, tile=getattr(here, from_tile), router=mesh.inject[x][y])
                        connect(m, router=mesh.eject[x][y], tile=getattr(here, to_tile))
                    else:
                        eject = mesh.eject[x][y]
                        m.d.comb += eject.ready.eq(1)
                        sunk.append(eject.valid & eject.payload.last)
            if sunk and d.full_routers:
                empty_dropped = getattr(self.counters, f"{plane}_empty_dropped")
                m.d.sync += empty_dropped.eq(empty_dropped + sum(sunk))
        return m


class RouterDepths(TypedDict):
    """:func:`router_depths`: keyword arguments of a router (or a mesh of them)."""
    depth: int
    local_depth: int


def router_depths(design: Design, plane: str) -> RouterDepths:
    """The input FIFO depths of ``plane``'s routers (:class:`~apiary.noc.mesh.Mesh`'s
    ``depth`` and ``local_depth``): 4 flits (LUT RAM), or on the data plane the design setting
    ``router_depth``. At 2 the FIFOs are registers: on a 64-bit ECP5 core fewer LUTs and no
    LUT RAM write at the end of a hop's path, but less slack between tiles that stall in turn
    (``docs/layout.md``)."""
    depth = int(design.settings.get("router_depth", 4)) if plane == "data" else 4
    return {"depth": depth, "local_depth": depth}


def control_map(design: Design) -> DesignMap:
    """The control plane's address maps of ``design`` (empty without a controller): what
    ``apiary ctl`` and :class:`beehive.control_client.ControlClient` name things by."""
    import gc
    import warnings
    from amaranth.hdl import UnusedElaboratable
    with warnings.catch_warnings():      # built for its address map only, never elaborated
        warnings.simplefilter("ignore", UnusedElaboratable)
        dmap = DesignTop(design).control_map
        gc.collect()
    return dmap


def top_name(design: Design) -> str:
    """The Verilog module name of a design's top level."""
    return re.sub(r"\W", "_", design.name) or "top"


def design_verilog(top: DesignTop, cache_dir: str | None = None,
                   packages: Sequence[str] | None = None,
                   progress: Progress = no_progress) -> str:
    """Verilog text of an elaborated :class:`DesignTop`.

    With ``cache_dir``, the text is also kept in ``<cache_dir>/verilog/<key>.v`` and read back
    instead of converting again (a 512-bit Beehive stack takes tens of seconds to convert). The
    key is :func:`~apiary.fingerprint.design_fingerprint` of the design, with ``packages`` (by
    default the packages of its tile classes) and the top's own options
    (:meth:`DesignTop.fingerprint_extra`); a design whose parameters have no stable text form is
    never cached. A conversion (not a cache hit) is reported to ``progress``.
    """
    key = None
    if cache_dir is not None:
        key = design_fingerprint(top.design, packages, extra=top.fingerprint_extra(),
                                 roots=[__name__])
    path = os.path.join(cache_dir, "verilog", f"{key}.v") if key and cache_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()
    design = top.design
    where = f" (cached at {path})" if path else ""
    with progress(f"converting {design.name!r} to Verilog ({design.width} bits, "
                  f"{len(design.tiles)} tiles)",
                  lambda s: f"converted {design.name!r} to Verilog in {s:.1f} s{where}"):
        text = verilog.convert(top, name=top_name(design), emit_src=False)
    if path:
        write_cached(path, text)
    return text


def write_cached(path: str, text: str) -> None:
    """Write ``text`` to the cache file ``path`` (its folder made if need be) all at once: a
    reader sees the whole file or none (a temporary file renamed into place)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def generate_verilog(design: Design, path: str | None = None, *,
                     progress: Progress = no_progress) -> str:
    """Check and elaborate ``design``, write Verilog to ``path`` (if given), return the text;
    the conversion is reported to ``progress`` (as :func:`design_verilog` does)."""
    text = design_verilog(DesignTop(design), progress=progress)
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text
