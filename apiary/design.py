"""A design: which tiles sit where on the mesh, and which messages may flow between them.

A design script builds a :class:`Design` in a few lines::

    d = Design("udp_rx", cols=4, rows=1, width=512)
    d.add("eth", PortTile, at=(0, 0), route=True)
    d.add("ip", ForwardTile, at=(1, 0))
    d.add("udp", ForwardTile, at=(2, 0))
    d.add("app", PortTile, at=(3, 0))
    d.chain("eth", "ip", "udp", "app")

and then goes through fixed phases (STYLE §6, after FlooNoC): *declare* (the calls above, each
recording the script line it came from) → *validate* (names, classes, coordinates, dangling routes,
planes) → *layout graph* (XY paths) → *deadlock check* (the resource-dependency graph) → *node
tables* (each tile's next hops) → *elaborate* (:mod:`apiary.top`). :meth:`Design.check` runs every
phase up to the node tables and raises one :class:`DesignError` listing every problem, each
naming the tile and the ``file:line`` that declared it.

Problems with a single argument that make the call meaningless (a coordinate that is not a pair of
integers, a key that cannot be a table key) raise at once; everything that depends on the rest of
the design (duplicate names, overlaps, routes to nowhere, deadlock) is reported by
:meth:`Design.check`, all together.
"""

import os
import sys
from collections.abc import Hashable, Iterable, Sequence
from types import FrameType
from typing import Any

from .layout import PLANES, Depends, Grant, LayoutGraph, Route, TileDecl, Wire
from .noc.header import Fbits
from .noc.nexthop import Endpoint
from .stream.layout import check_width
from .tile import Tile, TileEnv


__all__ = ["DesignError", "Design", "TileDecl", "Route", "Depends", "Wire", "Grant", "PLANES",
           "where_declared"]


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class DesignError(Exception):
    """A design is not sound, or could not be loaded.

    ``str(error)`` is one readable report listing every problem found; each problem is a full
    sentence naming the tile(s) and the ``file:line`` where they were declared.

    Attributes
    ----------
    problems : list of str
        The problems, one entry each (an entry may span several lines).
    graph : LayoutGraph or None
        The layout graph, when the problems were found while building it (a drawing of a
        deadlocking design can still highlight the cycle).
    """

    def __init__(self, problems: str | Iterable[str], *, design: "Design | None" = None,
                 graph: LayoutGraph | None = None) -> None:
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        self.design = design
        self.graph = graph
        super().__init__(self._report())

    def _report(self) -> str:
        if self.design is None:
            return "\n".join(self.problems)
        name = self.design.name
        if len(self.problems) == 1:
            first, *rest = self.problems[0].split("\n")
            return "\n".join([f"design {name!r}: {first}", *(f"    {line}" for line in rest)])
        lines = [f"design {name!r} has {len(self.problems)} problems:"]
        for i, problem in enumerate(self.problems, 1):
            first, *rest = problem.split("\n")
            lines.append(f"  {i}. {first}")
            lines.extend(f"     {line}" for line in rest)
        return "\n".join(lines)


def _in_package(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def _show_path(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:          # another drive
        return filename
    return filename if rel.startswith(os.pardir) else rel


def where_declared(depth: int = 1) -> str:
    """``"file:line"`` of the first caller outside the :mod:`apiary` package."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and _in_package(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{_show_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def _check_int(value: object, lo: int, hi: int, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise DesignError(f"{what} must be an integer from {lo} to {hi}, not {value!r} ({where}).")
    return value


class Design:
    """A mesh of ``cols`` × ``rows`` positions, the tiles placed on it, and the routes between them.

    Parameters
    ----------
    name : str
        The design's name (also the name of its Verilog top module).
    cols, rows : int
        Mesh size, 1 to 255 each. Position ``(0, 0)`` is the top-left; ``y`` grows south.
    width : int
        Data-plane flit width: 64, 128, 256 or 512 bits.
    ctl_width : int
        Control-plane flit width (same choices).
    full_routers : bool
        Build every router with all its ports, FIFOs and crossbar paths (for debugging: a
        message on an undeclared route then reaches its destination, or the mesh edge, instead
        of being dropped). By default each router is specialised to the paths the layout
        graph's routes use (:meth:`LayoutGraph.router_paths`), and drops anything else.

    Attributes
    ----------
    tiles : dict of str to TileDecl
        In declaration order.
    routes : list of Route
        In declaration order.
    dependencies : list of Depends
        Declared with :meth:`depends`.
    wires : list of Wire
        Declared with :meth:`wire`.
    grants : list of Grant
        IPC capabilities of untrusted tiles, declared with :meth:`allow` (or ``allow=True``).
    guard : object or None
        What builds the monitor of each untrusted tile (an Apiary kernel,
        :class:`apiary.os.Kernel`, sets itself here): ``guard.monitor(design, name, env)``
        returns the monitor component.
    settings : dict
        Free-form design-level settings (addresses and the like), passed to every tile's env.

    Raises
    ------
    DesignError
        If the mesh size or a width is out of range (naming the line that built the design).
    """

    def __init__(self, name: str, *, cols: int, rows: int, width: int = 512,
                 ctl_width: int = 64, full_routers: bool = False) -> None:
        where = where_declared(2)
        if not isinstance(name, str) or not name:
            raise DesignError(f"a design's name must be a non-empty string, not {name!r} "
                              f"({where}).")
        self.name = name
        self.where = where
        self.cols = _check_int(cols, 1, 255, f"design {name!r}: cols", where)
        self.rows = _check_int(rows, 1, 255, f"design {name!r}: rows", where)
        for value, what in ((width, "data plane width"), (ctl_width, "control plane width")):
            try:
                check_width(value, what)
            except ValueError as e:
                raise DesignError(f"design {name!r}: {e} ({where}).") from None
        self.width = width
        self.ctl_width = ctl_width
        self.full_routers = bool(full_routers)
        self.tiles: dict[str, TileDecl] = {}
        self.routes: list[Route] = []
        self.dependencies: list[Depends] = []
        self.wires: list[Wire] = []
        self.grants: list[Grant] = []
        self.runtime_routes: list[Route] = []
        self.guard: Any = None
        self.settings: dict[str, Any] = {}
        # Declaration problems found before check(), e.g. duplicate names.
        self._problems: list[str] = []

    def __repr__(self) -> str:
        return (f"Design({self.name!r}, {self.cols}x{self.rows}, {len(self.tiles)} tiles, "
                f"{len(self.routes)} routes)")

    # -- declare ---------------------------------------------------------------------------------

    def add(self, name: str, tile_cls: type, *, at: tuple[int, int], trusted: bool | None = None,
            **params: Any) -> str:
        """Place a tile of class ``tile_cls`` at ``at = (x, y)``; ``params`` go to its constructor.

        ``trusted=False`` puts the tile behind an Apiary monitor (the design needs a kernel,
        :class:`apiary.os.Kernel`); the default is the class's ``trusted`` attribute (true for
        every tile class of this project: they are the kernel's and the stack's).

        Returns ``name``, so that ``eth = d.add("eth", ...)`` reads well in scripts.
        """
        where = where_declared(2)
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise DesignError(f"tile name {name!r} ({where}) must be a Python identifier that "
                              f"does not start with '_' (letters, digits and underscores): it "
                              f"names the tile's ports at the top level.")
        if (not isinstance(at, (tuple, list)) or len(at) != 2
                or not all(isinstance(c, int) and not isinstance(c, bool) for c in at)):
            raise DesignError(f"tile {name!r} ({where}): at= must be an (x, y) pair of integers, "
                              f"not {at!r}.")
        if trusted is None:
            trusted = bool(getattr(tile_cls, "trusted", True))
        elif not isinstance(trusted, bool):
            raise DesignError(f"tile {name!r} ({where}): trusted= must be True or False, not "
                              f"{trusted!r}.")
        decl = TileDecl(name, tile_cls, dict(params), at[0], at[1], where, trusted)
        if name in self.tiles:
            first = self.tiles[name]
            self._problems.append(f"tile name {name!r} is declared twice: at {first.where} and "
                                  f"again at {where}; tile names must be unique.")
        else:
            self.tiles[name] = decl
        return name

    def route(self, src: str, dst: str, *, key: Hashable = None, plane: str = "data",
              fbits: int = Fbits.LOCAL0, allow: bool = False) -> None:
        """Declare that messages with ``key`` may go from tile ``src`` to tile ``dst`` on
        ``plane``; ``allow=True`` also grants ``src`` the IPC capability (:meth:`allow`)."""
        where = where_declared(2)
        self._route(src, dst, key, plane, fbits, where)
        if allow:
            self.grants.append(Grant(src, dst, fbits, where))

    def runtime_route(self, src: str, dst: str, *, plane: str = "data") -> None:
        """Keep a path from tile ``src`` to tile ``dst`` for IPC that a trusted tile grants at
        run time (``IPC_GRANT``): laid out, in the deadlock check and built into the routers
        (which are specialised to the routes), but in no next-hop table and no capability at
        reset. Without it, a message on a path no route declares is dropped by the first
        router that lacks the path, whatever the monitors allow."""
        where = where_declared(2)
        for end in (src, dst):
            if not isinstance(end, str):
                raise DesignError(f"runtime_route {src!r} → {dst!r} ({where}): name tiles by "
                                  f"their name (a string), not {end!r}.")
        self.runtime_routes.append(Route(src, dst, ("runtime", dst), plane, Fbits.LOCAL0, where))

    def allow(self, src: str, dst: str, *, port: int | None = None) -> None:
        """Grant untrusted tile ``src`` an IPC capability for tile ``dst`` (on ``port``, a
        ``Fbits`` value, or every port): its monitor lets it send there. Every route leaving an
        untrusted tile needs one; the layout check names the route that has none."""
        where = where_declared(2)
        for end in (src, dst):
            if not isinstance(end, str):
                raise DesignError(f"allow {src!r} → {dst!r} ({where}): name tiles by their name "
                                  f"(a string), not {end!r}.")
        if port is not None and (not isinstance(port, int) or not 0 <= port < 16):
            raise DesignError(f"allow {src} → {dst} ({where}): port must be a 4-bit value such "
                              f"as Fbits.LOCAL0 (or None: every port), not {port!r}.")
        self.grants.append(Grant(src, dst, port, where))

    def _route(self, src: str, dst: str, key: Hashable, plane: str, fbits: int,
               where: str) -> None:
        for end in (src, dst):
            if not isinstance(end, str):
                raise DesignError(f"route {src!r} → {dst!r} ({where}): routes name tiles by their "
                                  f"name (a string), not {end!r}.")
        try:
            hash(key)
        except TypeError:
            raise DesignError(f"route {src} → {dst} ({where}): key {key!r} cannot be a table key "
                              f"(it is not hashable).") from None
        if not isinstance(fbits, int) or not 0 <= fbits < 16:
            raise DesignError(f"route {src} → {dst} ({where}): fbits must be a 4-bit value such as "
                              f"Fbits.LOCAL0, not {fbits!r}.")
        self.routes.append(Route(src, dst, key, plane, fbits, where))

    def chain(self, *names: str, keys: Sequence[Hashable] | None = None,
              plane: str = "data", allow: bool = False) -> None:
        """Route each tile in ``names`` to the next; ``keys`` gives one key per hop (or
        ``None``); ``allow=True`` grants every hop's IPC capability as well."""
        where = where_declared(2)
        if len(names) < 2:
            raise DesignError(f"chain ({where}) needs at least two tiles, got {len(names)}.")
        hops = len(names) - 1
        if keys is None:
            keys = [None] * hops
        keys = list(keys)
        if len(keys) != hops:
            raise DesignError(f"chain {' → '.join(map(str, names))} ({where}) has {hops} hops but "
                              f"{len(keys)} keys; give one key per hop.")
        for src, dst, key in zip(names, names[1:], keys):
            self._route(src, dst, key, plane, Fbits.LOCAL0, where)
            if allow:
                self.grants.append(Grant(src, dst, Fbits.LOCAL0, where))

    def depends(self, tile: str, *, on: str | None = None, plane: str = "data",
                on_plane: str | None = None) -> None:
        """Declare that ``tile`` may hold a message arriving on ``plane`` while it waits for tile
        ``on`` (default: itself) to send on ``on_plane`` (default: ``plane``).

        This is Beehive's ``depends_on``: e.g. a TCP receive tile holding a segment until its
        memory request (on another plane or through another tile) goes out. Streaming tiles get
        the same-tile, same-plane dependency automatically.
        """
        where = where_declared(2)
        self.dependencies.append(Depends(tile, plane, tile if on is None else on,
                                    plane if on_plane is None else on_plane, where))

    def wire(self, a: str, b: str, *, member: str = "wires") -> None:
        """Join tiles ``a`` and ``b`` with dedicated wires: the member ``member`` of one (a
        :class:`~apiary.tile.WiresSignature`, seen from the tile that drives it) is connected to
        the member of the same name of the other. The wires are not the NoC: the deadlock check
        does not see them, and the tiles must not wait on each other through them in a way that
        could close a cycle (Beehive's TCP RX and TX engines share flow state this way)."""
        where = where_declared(2)
        for end in (a, b):
            if not isinstance(end, str):
                raise DesignError(f"wire {a!r} ⇄ {b!r} ({where}): wires name tiles by their name "
                                  f"(a string), not {end!r}.")
        if not isinstance(member, str) or not member.isidentifier():
            raise DesignError(f"wire {a} ⇄ {b} ({where}): member must be a member name such as "
                              f"'wires', not {member!r}.")
        self.wires.append(Wire(a, b, member, where))

    def replicate(self, names: str | Sequence[str], n: int, *,
                  at: Sequence[tuple[int, int]] | dict[str, Sequence[tuple[int, int]]]
                  | None = None,
                  step: tuple[int, int] | None = None) -> list[str] | list[dict[str, str]]:
        """Replace tile ``names`` (one name, or a group of tiles wired to each other) by ``n``
        copies, ``<name>_0`` to ``<name>_<n-1>``, and every route, grant, dependency and wire
        that names them by one per copy.

        * A route from outside into the group becomes ``n`` routes with the same key, one to
          each copy: the sender's next-hop table lists the copies under one key, as replicas
          to balance across (a :class:`~beehive.nf.balancer.LoadBalancerTile` in front, or a
          receive layer's round robin; a transmit layer or a forwarding tile needs a single
          next hop and drops, counted, what it cannot send, so put a balancer behind it).
        * A route out of the group to a tile outside it: one from each copy.
        * A route between two tiles of the group: from copy ``k`` to copy ``k`` (so each copy of
          a group is a whole chain, a stack's copy).

        Call it after the routes that name the tiles: the original names are gone afterwards
        (a route declared later that names one is reported, with the copies as the hint).
        Placement: ``at`` gives the ``n`` positions, a list for one tile or ``{name: [...]}``
        for a group; or ``step=(dx, dy)`` puts copy ``k`` of every tile at its original
        position plus ``k * (dx, dy)`` (copy 0 stays where the tile was). The checks
        (:meth:`check`) then see the copies as any other tiles: overlaps, the mesh's bounds,
        the deadlock check.

        Returns the copies' names, ``[name_0, ...]`` for one tile or ``[{name: copy}, ...]``
        per copy for a group.

        Raises
        ------
        DesignError
            Naming this call's line, if a name is not a declared tile (or repeats), ``n`` is
            not a positive integer, a copy's name is taken, the placement is missing, given
            twice or of the wrong shape, or a tile of the group has wires to a tile outside it.
        """
        where = where_declared(2)
        group = [names] if isinstance(names, str) else list(names) \
            if isinstance(names, (list, tuple)) else None
        what = f"replicate {names!r} ({where})"
        if not group or not all(isinstance(g, str) for g in group):
            raise DesignError(f"{what}: name one tile (a string) or a group (a list of names).")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise DesignError(f"{what}: n must be a positive integer (the number of copies), "
                              f"not {n!r}.")
        for g in group:
            if g not in self.tiles:
                close = [t for t in self.tiles if t.startswith(g + "_")]
                hint = f" (already replicated: {', '.join(close)})" if close else ""
                raise DesignError(f"{what}: there is no tile {g!r} to replicate{hint}; declare "
                                  f"it with d.add() first.")
        if len(set(group)) != len(group):
            raise DesignError(f"{what}: the group names a tile twice.")
        copy = {g: [f"{g}_{k}" for k in range(n)] for g in group}
        for g, copies in copy.items():
            for c in copies:
                if c in self.tiles:
                    raise DesignError(f"{what}: a copy of {g!r} would be named {c!r}, and tile "
                                      f"{self.tiles[c].describe()} already has that name.")
        places = self._replica_places(group, n, at, step, what)
        for w in self.wires:
            inside = (w.a in copy, w.b in copy)
            if inside[0] != inside[1]:
                raise DesignError(f"{what}: tile {w.a if inside[0] else w.b!r} has wires "
                                  f"({w.describe()}, {w.where}) to a tile outside the group; "
                                  f"replicate both ends together.")

        def ends(src: str, dst: str) -> list[tuple[str, str]]:
            if src in copy and dst in copy:
                return [(copy[src][k], copy[dst][k]) for k in range(n)]
            if src in copy:
                return [(c, dst) for c in copy[src]]
            if dst in copy:
                return [(src, c) for c in copy[dst]]
            return [(src, dst)]

        tiles: dict[str, TileDecl] = {}
        for name, decl in self.tiles.items():
            if name not in copy:
                tiles[name] = decl
                continue
            for k, c in enumerate(copy[name]):
                x, y = places[name][k]
                tiles[c] = TileDecl(c, decl.cls, dict(decl.params), x, y,
                                    f"{decl.where}, copy {k} at {where}", decl.trusted)
        self.tiles = tiles
        self.routes = [Route(s, t, r.key, r.plane, r.fbits, r.where)
                       for r in self.routes for s, t in ends(r.src, r.dst)]
        self.grants = [Grant(s, t, g.port, g.where)
                       for g in self.grants for s, t in ends(g.src, g.dst)]
        self.dependencies = [Depends(s, dep.plane, t, dep.on_plane, dep.where)
                             for dep in self.dependencies for s, t in ends(dep.tile, dep.on)]
        self.wires = [Wire(s, t, w.member, w.where)
                      for w in self.wires for s, t in ends(w.a, w.b)]
        if isinstance(names, str):
            return copy[names]
        return [{g: copy[g][k] for g in group} for k in range(n)]

    def _replica_places(self, group: list[str], n: int, at: Any, step: Any,
                        what: str) -> dict[str, list[tuple[int, int]]]:
        """``{name: [(x, y) of each copy]}`` from :meth:`replicate`'s ``at`` or ``step``."""
        def pair(value: Any) -> bool:
            return (isinstance(value, (tuple, list)) and len(value) == 2
                    and all(isinstance(c, int) and not isinstance(c, bool) for c in value))

        if (at is None) == (step is None):
            raise DesignError(f"{what}: place the copies with at= (their positions) or "
                              f"step=(dx, dy) (copy k at the original position + k·(dx, dy)), "
                              f"one of the two.")
        if step is not None:
            if not pair(step):
                raise DesignError(f"{what}: step= must be a (dx, dy) pair of integers, not "
                                  f"{step!r}.")
            return {g: [(self.tiles[g].x + k * step[0], self.tiles[g].y + k * step[1])
                        for k in range(n)] for g in group}
        if not isinstance(at, dict):
            if len(group) != 1:
                raise DesignError(f"{what}: a group's positions are at={{name: [(x, y), ...]}}, "
                                  f"one list per tile (or use step=).")
            at = {group[0]: at}
        if set(at) != set(group):
            raise DesignError(f"{what}: at= must give positions for exactly the tiles "
                              f"{', '.join(group)}, not {', '.join(map(str, at))}.")
        places = {}
        for g in group:
            spots = at[g]
            if (not isinstance(spots, (list, tuple)) or len(spots) != n
                    or not all(pair(s) for s in spots)):
                raise DesignError(f"{what}: at= for {g!r} must be a list of {n} (x, y) pairs "
                                  f"of integers, one per copy, not {spots!r}.")
            places[g] = [(s[0], s[1]) for s in spots]
        return places

    # -- derive ----------------------------------------------------------------------------------

    def graph(self) -> LayoutGraph:
        """Build the :class:`~apiary.layout.LayoutGraph` without raising (see its ``problems``)."""
        return LayoutGraph(self)

    def check(self) -> LayoutGraph:
        """Run every check; raise :class:`DesignError` listing all problems, else return the
        graph."""
        graph = self.graph()
        if graph.problems:
            raise DesignError(graph.problems, design=self, graph=graph)
        return graph

    def node_table(self, name: str) -> dict[str, dict[Hashable, list[Endpoint]]]:
        """``{plane: {key: [Endpoint, ...]}}`` from the routes leaving tile ``name``; routes to a
        tile that does not exist are left out (the checks report them)."""
        table: dict[str, dict[Hashable, list[Endpoint]]] = {}
        for r in self.routes:
            if r.src != name or r.dst not in self.tiles:
                continue
            dst = self.tiles[r.dst]
            table.setdefault(r.plane, {}).setdefault(r.key, []).append(
                Endpoint(r.dst, dst.x, dst.y, r.fbits))
        return table

    def env(self, name: str) -> TileEnv:
        """The :class:`~apiary.tile.TileEnv` tile ``name`` is built with."""
        if name not in self.tiles:
            raise DesignError(f"design {self.name!r} has no tile {name!r}.")
        decl = self.tiles[name]
        return TileEnv(name=name, x=decl.x, y=decl.y, width=self.width, ctl_width=self.ctl_width,
                       routes=self.node_table(name), settings=dict(self.settings),
                       trusted=decl.trusted)

    def build_tiles(self) -> dict[str, Tile]:
        """Construct every tile, ``cls(self.env(name), **params)``, in declaration order.

        Raises :class:`DesignError` for the design's declaration problems (not the deadlock check;
        call :meth:`check` for that) and for every constructor that raised, naming the tile and
        the line that declared it.
        """
        graph = self.graph()
        if graph.structural_problems:
            raise DesignError(graph.structural_problems, design=self, graph=graph)
        tiles, problems = {}, []
        for name, decl in self.tiles.items():
            try:
                tiles[name] = decl.cls(self.env(name), **decl.params)
            except Exception as e:   # noqa: BLE001 -- any constructor failure is the user's to fix
                problems.append(f"tile {decl.describe()} could not be built: "
                                f"{type(e).__name__}: {e}")
        if problems:
            raise DesignError(problems, design=self)
        return tiles

    def elaborate_tiles(self) -> int:
        """Build every tile (:meth:`build_tiles`) and elaborate each one alone, with its
        submodules, without converting anything: what ``apiary check`` does after the layout
        checks, so that a tile broken inside ``elaborate()`` is found in seconds. Returns the
        number of tiles; raises :class:`DesignError` naming each tile that fails, the line of
        its code where it failed (the innermost frame outside Amaranth) and Amaranth's message.
        """
        import traceback

        import amaranth
        from amaranth.hdl import Fragment
        library = os.path.dirname(amaranth.__file__)
        problems = []
        for name, tile in self.build_tiles().items():
            try:
                Fragment.get(tile, None)
            except Exception as e:   # noqa: BLE001 -- reported, whatever the tile did
                frames = [f for f in traceback.extract_tb(e.__traceback__)
                          if not f.filename.startswith(library)]
                where = f" at {_show_path(frames[-1].filename)}:{frames[-1].lineno}" \
                    if frames else ""
                problems.append(f"tile {self.tiles[name].describe()} does not elaborate{where}: "
                                f"{type(e).__name__}: {e}")
        if problems:
            raise DesignError(problems, design=self)
        return len(self.tiles)

    def untrusted(self) -> list[str]:
        """Names of the tiles behind a monitor, in declaration order."""
        return [name for name, decl in self.tiles.items() if not decl.trusted]

    def ipc_caps(self, name: str) -> tuple[list[tuple], list[tuple]]:
        """``(out, in)``: the IPC capabilities of tile ``name`` at reset, as ``(x, y, port)``
        (``port`` ``None``: any). Out: its grants. In: the sources of the data-plane routes into
        it, with the port they arrive on."""
        out = [(self.tiles[g.dst].x, self.tiles[g.dst].y, g.port) for g in self.grants
               if g.src == name and g.dst in self.tiles]
        into = [(self.tiles[r.src].x, self.tiles[r.src].y, r.fbits) for r in self.routes
                if r.dst == name and r.plane == "data" and r.src in self.tiles]
        return list(dict.fromkeys(out)), list(dict.fromkeys(into))

    def empty_positions(self) -> list[tuple[int, int]]:
        """Mesh positions ``(x, y)`` with no tile, row by row; they get router-only tiles."""
        used = {decl.at for decl in self.tiles.values()}
        return [(x, y) for y in range(self.rows) for x in range(self.cols) if (x, y) not in used]

    def planes_used(self) -> list[str]:
        """Planes that some route uses, in :data:`PLANES` order."""
        return [p for p in PLANES if any(r.plane == p for r in self.routes)]
