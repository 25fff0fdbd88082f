"""The layout graph: a design's tiles on the mesh, the XY path of every route, and its checks.

:class:`LayoutGraph` is a plain Python object built from a :class:`~apiary.design.Design` in the
fixed phases of STYLE §6:

1. **validate**: tile classes and their parameters, coordinates inside the mesh, one tile per
   position, routes between declared tiles on planes both ends attach to, no route twice;
2. **layout**: the XY path of every route (:func:`xy_path`, the router's own rule);
3. **deadlock check** (only when 1 found nothing): the resource-dependency graph of Beehive
   §IV-E, searched for cycles;
4. **node tables**: each tile's ``{plane: {key: [Endpoint, ...]}}``.

Every problem is a sentence naming the tiles and the ``file:line`` that declared them; the graph
keeps them all in :attr:`LayoutGraph.problems` and :meth:`Design.check` raises them together.

The resource-dependency graph
-----------------------------
A message in a wormhole network holds every resource from its head back to its tail, so while its
head waits for the next resource it keeps all the earlier ones. The resources, per plane:

* ``tile.out``: the tile's injection port (tile → router);
* ``link (x,y)→D``: the output of router ``(x, y)`` towards direction ``D`` (N, E, S or W);
* ``tile.in``: the tile's ejection port (router → tile).

A route ``src → dst`` gives the chain ``src.out → links of the XY path → dst.in`` and an edge
between each consecutive pair ("holding this, waits for that"). A *streaming* tile
(``Tile.streaming``) that both receives and sends on a plane holds its input while it waits for
its output: edge ``tile.in → tile.out``. :meth:`Design.depends` adds further ``tile.in →
other.out`` edges, on the same plane or across planes (Beehive's ``depends_on``). A cycle in this
graph is a message-level deadlock. Planes are separate meshes, so without a cross-plane
``depends`` their graphs are separate too.
"""

import difflib
import inspect
from collections import deque
from collections.abc import Container, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .control.messages import AGENT_FBITS
from .noc.header import Fbits
from .noc.msgtype import msg_type_name
from .noc.ports import route_problem, route_types
from .noc.router import DIRS, OPPOSITE, Dir, full_paths
from .tile import NOC_PORTS, Tile


__all__ = ["PLANES", "TileDecl", "Route", "Depends", "Wire", "DIRECTIONS", "xy_step", "xy_path",
           "Link", "Port", "Cycle", "LayoutGraph", "strongly_connected"]


#: The planes a route may use: the data plane and the narrow control plane (separate meshes).
PLANES = tuple(NOC_PORTS)


@dataclass
class TileDecl:
    """One tile of a design: its name, class, constructor parameters and place."""
    name: str
    cls: type
    params: dict
    x: int
    y: int
    where: str = "<unknown>"
    trusted: bool = True

    @property
    def at(self) -> tuple[int, int]:
        return (self.x, self.y)

    @property
    def cls_name(self) -> str:
        return getattr(self.cls, "__name__", repr(self.cls))

    def describe(self) -> str:
        """``'name' (Class, file:line)``, for messages."""
        return f"{self.name!r} ({self.cls_name}, {self.where})"


@dataclass(frozen=True)
class Route:
    """Messages with ``key`` may go from tile ``src`` to tile ``dst`` on ``plane``.

    ``key`` is what ``src`` routes on (an EtherType, a protocol number, a port, or ``None`` for
    any message); several routes from one tile with the same key are replicas.
    """
    src: str
    dst: str
    key: object = None
    plane: str = "data"
    fbits: int = Fbits.LOCAL0
    where: str = "<unknown>"

    def describe(self, *, plane: bool = False) -> str:
        """``src → dst`` with its key (and plane), for messages."""
        text = f"{self.src} → {self.dst}"
        extra = []
        if self.key is not None:
            extra.append(f"key {_show_key(self.key)}")
        if plane:
            extra.append(f"plane {self.plane!r}")
        if extra:
            text += f" [{', '.join(extra)}]"
        return text


@dataclass(frozen=True)
class Depends:
    """While ``tile`` holds a message that arrived on ``plane``, it may wait for ``on`` to send
    on ``on_plane`` (Beehive's ``depends_on``): a dependency edge ``tile.in → on.out``."""
    tile: str
    plane: str
    on: str
    on_plane: str
    where: str = "<unknown>"


@dataclass(frozen=True)
class Wire:
    """Dedicated wires (not the NoC) between member ``member`` of tile ``a`` and the member of
    the same name of tile ``b``: Beehive's TCP RX and TX engines share flow state this way."""
    a: str
    b: str
    member: str
    where: str = "<unknown>"

    def describe(self) -> str:
        return f"{self.a}.{self.member} ⇄ {self.b}.{self.member}"


@dataclass(frozen=True)
class Grant:
    """An IPC capability: untrusted tile ``src`` may send to tile ``dst`` (on port ``port``, a
    ``Fbits`` value, or any port when ``None``). Checked by ``src``'s Apiary monitor."""
    src: str
    dst: str
    port: int | None = None
    where: str = "<unknown>"

    def describe(self) -> str:
        port = "" if self.port is None else f" (port {self.port:#06b})"
        return f"{self.src} → {self.dst}{port}"

    def covers(self, route: "Route") -> bool:
        return (route.src, route.dst) == (self.src, self.dst) and \
            self.port in (None, route.fbits)


def _show_key(key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool) and key > 255:
        return f"{key:#06x}"
    return repr(key)


#: Router output directions other than the local port. ``(0, 0)`` is the top-left, y grows south.
DIRECTIONS = {"N": (0, -1), "E": (1, 0), "S": (0, 1), "W": (-1, 0)}


def xy_step(at: tuple[int, int], dst: tuple[int, int]) -> str | None:
    """The direction a router at ``at`` sends a message for ``dst``: ``None`` when it is there.

    Dimension order, exactly as the router decides: X first (``E`` if ``dst_x > x``, ``W`` if
    ``dst_x < x``), then Y (``N`` if ``dst_y < y``, ``S`` if ``dst_y > y``).
    """
    (x, y), (dx, dy) = at, dst
    if dx > x:
        return "E"
    if dx < x:
        return "W"
    if dy < y:
        return "N"
    if dy > y:
        return "S"
    return None


def xy_path(src: tuple[int, int],
            dst: tuple[int, int]) -> list[tuple[int, int, str]]:
    """The router output links a message from position ``src`` to ``dst`` uses, in order, as
    ``(x, y, direction)`` of the router each link leaves. Empty when ``src == dst``."""
    path = []
    at = (src[0], src[1])
    while (d := xy_step(at, dst)) is not None:
        path.append((at[0], at[1], d))
        ox, oy = DIRECTIONS[d]
        at = (at[0] + ox, at[1] + oy)
    return path


@dataclass(frozen=True, order=True)
class Link:
    """Resource: the output of router ``(x, y)`` towards ``dir`` on ``plane``."""
    plane: str
    x: int
    y: int
    dir: str

    @property
    def to(self) -> tuple[int, int]:
        """The position the link leads to."""
        ox, oy = DIRECTIONS[self.dir]
        return (self.x + ox, self.y + oy)

    def label(self, plane: bool = False) -> str:
        return (f"{self.plane}:" if plane else "") + f"link ({self.x},{self.y})→{self.dir}"

    def __str__(self) -> str:
        return self.label()


@dataclass(frozen=True, order=True)
class Port:
    """Resource: tile ``tile``'s ejection port (``dir="in"``) or injection port (``"out"``)."""
    plane: str
    tile: str
    dir: str

    def label(self, plane: bool = False) -> str:
        return (f"{self.plane}:" if plane else "") + f"{self.tile}.{self.dir}"

    def __str__(self) -> str:
        return self.label()


@dataclass(frozen=True)
class _Streaming:
    """Why an edge ``tile.in → tile.out`` exists: the tile streams."""
    tile: str
    plane: str


@dataclass
class Cycle:
    """A cycle in the resource-dependency graph: a message-level deadlock.

    Attributes
    ----------
    resources : list of Link or Port
        The cycle in order, starting at a tile's injection port; the first resource depends on
        the last.
    knot : list
        Every resource of the strongly connected component the cycle was found in.
    text : str
        The report, first line ``deadlock on plane 'p': a → b → ... → a``.
    """
    resources: list
    knot: list
    text: str = ""
    routes: list = field(default_factory=list)

    @property
    def planes(self) -> list[str]:
        return sorted({r.plane for r in self.resources})

    @property
    def links(self) -> list["Link"]:
        return [r for r in self.resources if isinstance(r, Link)]

    @property
    def ports(self) -> list["Port"]:
        return [r for r in self.resources if isinstance(r, Port)]

    @property
    def tiles(self) -> list[str]:
        seen = []
        for p in self.ports:
            if p.tile not in seen:
                seen.append(p.tile)
        return seen

    def path_text(self) -> str:
        cross = len(self.planes) > 1
        seq = self.resources + self.resources[:1]
        return " → ".join(r.label(cross) for r in seq)


def strongly_connected(succ: Mapping[Hashable, Iterable[Hashable]]) -> list[list[Any]]:
    """Tarjan's algorithm without recursion. ``succ`` maps each node to an iterable of its
    successors (every node must be a key). Returns the components, each a list of nodes, in
    reverse topological order; the order is deterministic for insertion-ordered input."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for root in succ:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    components.append(component)
    return components


def _shortest_cycle_through(start: Any, succ: Mapping[Any, Iterable[Any]],
                            allowed: Container[Any]) -> list[Any] | None:
    """Shortest cycle from ``start`` back to itself using only nodes in ``allowed``."""
    parent = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in succ[v]:
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1]
            if w in allowed and w not in parent:
                parent[w] = v
                queue.append(w)
    return [start]      # not reached for a node of a cyclic component


def _plane_list(planes: Iterable[str]) -> str:
    planes = [repr(p) for p in planes]
    return planes[0] if len(planes) == 1 else ", ".join(planes[:-1]) + " and " + planes[-1]


def _names(items: Iterable[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


class LayoutGraph:
    """A design's layout, checked. Build it with :meth:`Design.graph` (never raises) or
    :meth:`Design.check` (raises :class:`~apiary.design.DesignError` on any problem).

    Attributes
    ----------
    design : Design
    problems : list of str
        Everything wrong, structural problems first, then one entry per deadlock cycle.
    structural_problems : list of str
        Names, classes, coordinates, routes and planes. The deadlock check runs only when this
        is empty (a layout with overlapping tiles has no meaningful paths).
    paths : dict of Route to list of Link
        The XY path of every route whose ends exist, on the route's plane.
    edges : dict of resource to dict of resource to list
        The resource-dependency graph: ``edges[a][b]`` lists why ``a`` waits for ``b`` (the
        routes, streaming tiles and ``depends`` declarations that put the edge there).
    cycles : list of Cycle
        One cycle per strongly connected component of :attr:`edges` that has one.
    node_tables : dict of str to dict
        Per tile, ``{plane: {key: [Endpoint, ...]}}``: what the tile's env carries.
    empty_positions : list of (int, int)
        Mesh positions with no tile (router-only at elaboration).
    """

    def __init__(self, design: Any) -> None:
        self.design = design
        self._planes = PLANES
        self.structural_problems = list(design._problems)
        self.deadlock_problems: list[str] = []
        self.paths: dict[Route, list[Link]] = {}
        self.edges: dict[Any, dict[Any, list[Any]]] = {}
        self.cycles: list[Cycle] = []
        self._validate_tiles()
        self._validate_positions()
        self._valid_routes = self._validate_routes(design.routes)
        self.runtime_routes = self._validate_routes(getattr(design, "runtime_routes", []))
        self._valid_depends = self._validate_depends()
        self._validate_wires()
        self._validate_trust()
        self.kernel_routes = self._kernel_routes()
        self.controllers, self.control_routes = self._control_routes()
        self._layout()
        if not self.structural_problems:
            self._build_dependencies()
            self._find_cycles()
        self.node_tables = {name: design.node_table(name) for name in design.tiles}
        self.empty_positions = design.empty_positions()

    # -- phase 1: validate -------------------------------------------------------------------------

    @property
    def problems(self) -> list[str]:
        return self.structural_problems + self.deadlock_problems

    @property
    def ok(self) -> bool:
        return not self.problems

    def _attaches(self, decl: TileDecl, plane: str) -> bool:
        return isinstance(decl.cls, type) and plane in getattr(decl.cls, "planes", ())

    def _validate_tiles(self) -> None:
        d, out = self.design, self.structural_problems
        for decl in d.tiles.values():
            if not (isinstance(decl.cls, type) and issubclass(decl.cls, Tile)):
                out.append(f"tile {decl.name!r} ({decl.where}): {decl.cls!r} is not a tile class; "
                           f"a tile class derives from apiary.tile.Tile.")
                continue
            bad = [p for p in decl.cls.planes if p not in self._planes]
            if bad:
                out.append(f"tile {decl.describe()}: {decl.cls_name}.planes names "
                           f"{_plane_list(bad)}; the planes are {_plane_list(self._planes)}.")
            try:
                sig = inspect.signature(decl.cls)
            except (TypeError, ValueError):
                sig = None
            if sig is not None:
                try:
                    sig.bind(None, **decl.params)
                except TypeError as e:
                    given = ", ".join(f"{k}={v!r}" for k, v in decl.params.items()) or "nothing"
                    out.append(f"tile {decl.describe()}: {decl.cls_name}{sig} cannot take the "
                               f"parameters given ({given}): {e}.")

    def _validate_positions(self) -> None:
        d, out = self.design, self.structural_problems
        at: dict[tuple[int, int], list[TileDecl]] = {}
        for decl in d.tiles.values():
            if not (0 <= decl.x < d.cols and 0 <= decl.y < d.rows):
                xs = f"0 to {d.cols - 1}" if d.cols > 1 else "0"
                ys = f"0 to {d.rows - 1}" if d.rows > 1 else "0"
                out.append(f"tile {decl.describe()} is placed at ({decl.x},{decl.y}), outside the "
                           f"{d.cols}×{d.rows} mesh: x must be {xs} and y must be {ys}.")
            at.setdefault(decl.at, []).append(decl)
        for (x, y), decls in at.items():
            if len(decls) > 1:
                who = _names([decl.describe() for decl in decls])
                both = "both" if len(decls) == 2 else "all"
                out.append(f"tiles {who} are {both} placed at ({x},{y}); a mesh position holds "
                           f"one tile.")

    def _unknown_tile(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.design.tiles), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"tile {name!r}, which is not declared{hint}"

    def _validate_routes(self, routes: Iterable[Route]) -> list[Route]:
        d, out = self.design, self.structural_problems
        valid: list[Route] = []
        seen: dict[tuple, Route] = {}
        for r in routes:
            what = f"route {r.describe()} ({r.where})"
            bad = False
            if r.plane not in self._planes:
                out.append(f"{what} uses plane {r.plane!r}; the planes are "
                           f"{_plane_list(self._planes)}.")
                bad = True
            for end in dict.fromkeys((r.src, r.dst)):
                if end not in d.tiles:
                    out.append(f"{what} names {self._unknown_tile(end)}.")
                    bad = True
                elif r.plane in self._planes and isinstance(d.tiles[end].cls, type) \
                        and issubclass(d.tiles[end].cls, Tile) \
                        and not self._attaches(d.tiles[end], r.plane):
                    decl = d.tiles[end]
                    out.append(f"{what} is on plane {r.plane!r}, but tile {decl.describe()} does "
                               f"not attach to it ({decl.cls_name}.planes is "
                               f"{tuple(decl.cls.planes)!r}).")
                    bad = True
            if not bad:
                problem = self._message_types(r)
                if problem:
                    out.append(f"{what}: {problem}.")
                    bad = True
            ident = (r.src, r.dst, r.key, r.plane, r.fbits)
            if ident in seen:
                out.append(f"route {r.describe(plane=True)} is declared twice: at "
                           f"{seen[ident].where} and again at {r.where}.")
                bad = True
            else:
                seen[ident] = r
            if not bad:
                valid.append(r)
        return valid

    def _message_types(self, r: Route) -> str | None:
        """What the two ends' message ports (``Tile.inputs``/``outputs``) say of route ``r``:
        ``None`` when it carries a type one sends and the other takes, or either side declares
        nothing."""
        src, dst = self.design.tiles[r.src], self.design.tiles[r.dst]
        if not all(isinstance(t.cls, type) and issubclass(t.cls, Tile) for t in (src, dst)):
            return None
        return route_problem(r.src, src.cls, r.dst, dst.cls, key=r.key, fbits=r.fbits,
                             plane=r.plane)

    def message_types(self, r: Route) -> list[str]:
        """The message types route ``r`` carries by its ends' declared ports (those its source
        sends that its destination takes on the route's sub-port; a side that declares none,
        or takes any type, leaves the other side's), by name; empty when neither says."""
        src, dst = self.design.tiles.get(r.src), self.design.tiles.get(r.dst)
        if src is None or dst is None:
            return []
        sent, taken = route_types(getattr(src.cls, "outputs", ()), getattr(dst.cls, "inputs", ()),
                                  key=r.key, fbits=r.fbits, plane=r.plane)
        types = sent & taken if sent is not None and taken is not None else sent or taken or set()
        return sorted(msg_type_name(t).rpartition(".")[2] for t in types)

    def _validate_depends(self) -> list[Depends]:
        d, out = self.design, self.structural_problems
        valid = []
        for dep in d.dependencies:
            what = f"dependency of {dep.tile!r} on {dep.on!r} ({dep.where})"
            bad = False
            for plane in dict.fromkeys((dep.plane, dep.on_plane)):
                if plane not in self._planes:
                    out.append(f"{what} names plane {plane!r}; the planes are "
                               f"{_plane_list(self._planes)}.")
                    bad = True
            for name, plane in ((dep.tile, dep.plane), (dep.on, dep.on_plane)):
                if name not in d.tiles:
                    out.append(f"{what} names {self._unknown_tile(name)}.")
                    bad = True
                elif plane in self._planes and not self._attaches(d.tiles[name], plane):
                    out.append(f"{what}: tile {d.tiles[name].describe()} does not attach to "
                               f"plane {plane!r}.")
                    bad = True
            if not bad:
                valid.append(dep)
        return valid

    def _validate_trust(self) -> None:
        """Untrusted tiles need a kernel to guard them, sit on the data plane only, and hold an
        IPC capability (a grant) for every route that leaves them."""
        d, out = self.design, self.structural_problems
        untrusted = [decl for decl in d.tiles.values() if not decl.trusted]
        guard = getattr(d, "guard", None)
        if untrusted and guard is None:
            names = ", ".join(decl.describe() for decl in untrusted)
            out.append(f"untrusted tiles need an Apiary kernel to guard them, and the design has "
                       f"none: {names}; add one with apiary.os.Kernel(d, ...).")
        for decl in untrusted:
            if isinstance(decl.cls, type) and "ctl" in getattr(decl.cls, "planes", ()):
                out.append(f"tile {decl.describe()} is untrusted but attaches to the control "
                           f"plane, which no monitor guards; untrusted tiles use the data plane "
                           f"only.")
        for g in getattr(d, "grants", []):
            for end in dict.fromkeys((g.src, g.dst)):
                if end not in d.tiles:
                    out.append(f"grant {g.describe()} ({g.where}) names "
                               f"{self._unknown_tile(end)}.")
        grants = getattr(d, "grants", [])
        for r in self._valid_routes:
            src = d.tiles[r.src]
            if src.trusted or r.plane != "data":
                continue
            if not any(g.covers(r) for g in grants):
                out.append(f"route {r.describe()} ({r.where}) leaves untrusted tile "
                           f"{r.src!r}, which holds no IPC capability for {r.dst!r}: grant one "
                           f"with d.allow({r.src!r}, {r.dst!r}) (or allow=True on the route or "
                           f"chain).")

    def _validate_wires(self) -> None:
        d, out = self.design, self.structural_problems
        used: dict[tuple[str, str], Wire] = {}
        for w in d.wires:
            what = f"wires {w.describe()} ({w.where})"
            for name in dict.fromkeys((w.a, w.b)):
                if name not in d.tiles:
                    out.append(f"{what} name {self._unknown_tile(name)}.")
                elif (name, w.member) in used:
                    out.append(f"{what}: tile {name!r}'s member {w.member!r} is already wired, "
                               f"at {used[(name, w.member)].where}; a member has one partner.")
                else:
                    used[(name, w.member)] = w
            if w.a == w.b:
                out.append(f"{what} join tile {w.a!r} to itself; wires join two tiles.")

    # -- phase 2: layout ---------------------------------------------------------------------------

    def _kernel_routes(self) -> list[Route]:
        """The routes the design's guard adds for the kernel's own traffic (untrusted tiles ⇄
        memory tiles, memory manager, error manager): laid out and in the deadlock check, but in
        no tile's next-hop table."""
        d = self.design
        guard = getattr(d, "guard", None)
        extra = getattr(guard, "routes", None)
        if extra is None:
            return []
        return [r for r in extra(d) if r.src in d.tiles and r.dst in d.tiles
                and r.plane in self._planes]

    def _control_routes(self) -> tuple[list[str], list[Route]]:
        """``(controllers, routes)``: the design's controllers (tiles on the control plane
        whose class says ``controls = True``), and the control plane's own traffic: each
        controller to every tile's control agent (its own included) and back (laid out and in
        the deadlock check, in no next-hop table)."""
        d = self.design
        if "ctl" not in self._planes:
            return [], []
        controllers = [n for n, decl in d.tiles.items()
                       if self._attaches(decl, "ctl") and getattr(decl.cls, "controls", False)]
        routes = []
        for c in controllers:
            where = d.tiles[c].where
            for t in d.tiles:
                routes.append(Route(c, t, None, "ctl", AGENT_FBITS, where))
                if t != c:      # a controller reads its own agent, which answers locally
                    routes.append(Route(t, c, None, "ctl", Fbits.LOCAL0, where))
        return controllers, routes

    @property
    def laid_out(self) -> list[Route]:
        """Every route the layout lays out and checks: the declared ones, the kernel's, the
        control plane's and the paths kept for run-time IPC (:meth:`Design.runtime_route`)."""
        return self._valid_routes + self.kernel_routes + self.control_routes + self.runtime_routes

    def _layout(self) -> None:
        tiles = self.design.tiles
        for r in self.laid_out:
            src, dst = tiles[r.src], tiles[r.dst]
            self.paths[r] = [Link(r.plane, x, y, d) for x, y, d in xy_path(src.at, dst.at)]

    def path(self, route: Route) -> list["Link"]:
        """The links ``route`` uses, in order."""
        return self.paths[route]

    def router_paths(self, plane: str) -> dict[tuple[int, int], set[tuple[Dir, Dir]]]:
        """Every position's router on ``plane``: the ``(input, output)`` crossbar paths that
        the declared, kernel and control routes use (what :class:`~apiary.noc.mesh.Mesh`
        specialises each router to), and those kept for run-time IPC. A route enters at its
        source's P input, turns at each router of its XY path, and leaves at its destination's
        P output."""
        tiles = self.design.tiles
        out: dict[tuple[int, int], set[tuple[Dir, Dir]]] = {
            (x, y): set() for x in range(self.design.cols) for y in range(self.design.rows)}
        for route, links in self.paths.items():
            if route.plane != plane:
                continue
            at, came_from = tiles[route.src].at, Dir.P
            for link in links:
                out[at].add((came_from, Dir[link.dir]))
                at, came_from = link.to, OPPOSITE[Dir[link.dir]]
            out[at].add((came_from, Dir.P))
        return out

    # -- phase 3: deadlock -------------------------------------------------------------------------

    def _edge(self, a: Any, b: Any, why: Any) -> None:
        self.edges.setdefault(a, {})
        self.edges.setdefault(b, {})
        reasons = self.edges[a].setdefault(b, [])
        if why not in reasons:
            reasons.append(why)

    def _build_dependencies(self) -> None:
        d = self.design
        senders, receivers = set(), set()
        for r in self.laid_out:
            chain = [Port(r.plane, r.src, "out"), *self.paths[r], Port(r.plane, r.dst, "in")]
            for a, b in zip(chain, chain[1:]):
                self._edge(a, b, r)
            senders.add((r.src, r.plane))
            receivers.add((r.dst, r.plane))
        for name, decl in d.tiles.items():
            if not getattr(decl.cls, "streaming", True):
                continue
            for plane in self._planes:
                if (name, plane) in senders and (name, plane) in receivers:
                    self._edge(Port(plane, name, "in"), Port(plane, name, "out"),
                               _Streaming(name, plane))
        if self.controllers:
            # A control agent holds its request while its answer waits for the control plane;
            # the controllers themselves never hold an answer (one request at a time).
            for name in d.tiles:
                if name not in self.controllers:
                    self._edge(Port("ctl", name, "in"), Port("ctl", name, "out"),
                               _Streaming(name, "ctl"))
        for dep in self._valid_depends:
            self._edge(Port(dep.plane, dep.tile, "in"), Port(dep.on_plane, dep.on, "out"), dep)

    def dependency_graph(self, plane: str) -> dict[Any, list[Any]]:
        """The resource-dependency graph of one plane: ``{resource: [successor, ...]}``."""
        return {a: [b for b in succ if b.plane == plane]
                for a, succ in self.edges.items() if a.plane == plane}

    def _order(self, resource: Any) -> tuple:
        """Sort key: the tile's declaration order, then out before in, then links."""
        order = list(self.design.tiles)
        if isinstance(resource, Port):
            return (0, order.index(resource.tile), resource.dir != "out", resource.plane)
        return (1, resource.plane, resource.y, resource.x, resource.dir)

    def _find_cycles(self) -> None:
        for component in strongly_connected(self.edges):
            if len(component) == 1 and component[0] not in self.edges[component[0]]:
                continue
            members = set(component)
            start = min(component, key=self._order)
            cycle = _shortest_cycle_through(start, self.edges, members)
            assert cycle is not None, "a strongly connected component holds a cycle"
            cycle = self._rotate(cycle)
            found = Cycle(cycle, sorted(component, key=self._order))
            found.text = self._describe(found)
            self.cycles.append(found)
        self.cycles.sort(key=lambda c: self._order(c.resources[0]))
        self.deadlock_problems = [c.text for c in self.cycles]

    def _rotate(self, cycle: list[Any]) -> list[Any]:
        """Start the cycle at the injection port of the message that wants a link another
        message of the cycle holds (the paper's "must reacquire a NoC link", Fig. 5a)."""
        n = len(cycle)
        for i, res in enumerate(cycle):
            if not isinstance(res, Link):
                continue
            into = set(self.edges[cycle[i - 1]][res])
            out_of = set(self.edges[res][cycle[(i + 1) % n]])
            if into.isdisjoint(out_of):
                for back in range(n):
                    j = (i - back) % n
                    if isinstance(cycle[j], Port) and cycle[j].dir == "out":
                        return cycle[j:] + cycle[:j]
        return cycle

    def _describe(self, cycle: "Cycle") -> str:
        d = self.design
        res = cycle.resources
        n = len(res)
        planes = cycle.planes
        where = (f"on plane {planes[0]!r}" if len(planes) == 1
                 else f"across planes {_plane_list(planes)}")
        lines = [f"deadlock {where}: {cycle.path_text()}"]
        cross = len(planes) > 1
        routes: list[Route] = []
        streaming: list[_Streaming] = []
        depends: list[Depends] = []
        for i in range(n):
            a, b = res[i], res[(i + 1) % n]
            for why in self.edges[a][b]:
                bucket = (routes if isinstance(why, Route) else
                          streaming if isinstance(why, _Streaming) else depends)
                if why not in bucket:
                    bucket.append(why)
        for i, r in enumerate(res):
            if not isinstance(r, Link):
                continue
            into = self.edges[res[i - 1]][r]
            out_of = self.edges[r][res[(i + 1) % n]]
            wants = [x for x in into if isinstance(x, Route) and x not in out_of]
            holds = [x for x in out_of if isinstance(x, Route) and x not in into]
            if wants and holds:
                lines.append(f"{r.label(cross)} is wanted by route {wants[0].describe()} "
                             f"({wants[0].where}) while route {holds[0].describe()} "
                             f"({holds[0].where}) holds it.")
        cycle.routes = routes
        if routes:
            lines.append("routes in the cycle: " + ", ".join(
                f"{r.describe(plane=cross)} ({r.where})" for r in routes))
        if streaming:
            who = _names([d.tiles[s.tile].describe() for s in streaming])
            lines.append(f"streaming tiles in the cycle, each holding its input while it waits "
                         f"for its output: {who}.")
        for dep in depends:
            lines.append(f"{dep.tile!r} holds its input on {dep.plane!r} while it waits for "
                         f"{dep.on!r} to send on {dep.on_plane!r} (declared at {dep.where}).")
        extra = [x for x in cycle.knot if x not in set(res)]
        if extra:
            shown = ", ".join(x.label(cross) for x in extra[:8])
            more = f" and {len(extra) - 8} more" if len(extra) > 8 else ""
            lines.append(f"{len(extra)} more resources are caught in the same knot: "
                         f"{shown}{more}.")
        lines.append("fix: place the tiles so that no chain of messages needs a link it already "
                     "holds (as in the paper's Fig. 5b), move a route to another plane, or make a "
                     "tile in the cycle buffer whole messages (streaming = False).")
        return "\n".join(lines)

    # -- summary -----------------------------------------------------------------------------------

    def planes_in_use(self) -> list[str]:
        """Planes that a declared route, a kernel route or a control route uses."""
        used = {r.plane for r in self.laid_out}
        return [p for p in self._planes if p in used]

    def summary(self) -> str:
        """A few lines for ``apiary check``."""
        d = self.design
        lines = [f"design {d.name!r}: {d.cols}×{d.rows} mesh, {d.width}-bit data plane, "
                 f"{d.ctl_width}-bit control plane"]
        empty = len(self.empty_positions)
        lines.append(f"  {len(d.tiles)} tiles, {empty} router-only position"
                     f"{'' if empty == 1 else 's'}, {len(d.routes)} route"
                     f"{'' if len(d.routes) == 1 else 's'}")
        untrusted = [n for n, decl in d.tiles.items() if not decl.trusted]
        if untrusted:
            lines.append(f"  Apiary: {len(untrusted)} untrusted tile"
                         f"{'' if len(untrusted) == 1 else 's'} behind monitors "
                         f"({', '.join(untrusted)}), {len(getattr(d, 'grants', []))} IPC grants, "
                         f"{len(self.kernel_routes)} kernel routes in the deadlock check")
        if self.controllers:
            lines.append(f"  control plane: controller{'' if len(self.controllers) == 1 else 's'}"
                         f" {', '.join(self.controllers)}, {len(self.control_routes)} control "
                         f"routes in the deadlock check")
        for plane in self.planes_in_use():
            graph = self.dependency_graph(plane)
            n_routes = sum(r.plane == plane for r in d.routes + self.control_routes)
            n_edges = sum(len(s) for s in graph.values())
            lines.append(f"  plane {plane!r}: {n_routes} route{'' if n_routes == 1 else 's'}, "
                         f"{len(graph)} resources, {n_edges} dependencies")
            every = len(full_paths()) * d.cols * d.rows
            if getattr(d, "full_routers", False):
                lines.append(f"    routers: full, all {every} crossbar paths")
            else:
                paths = self.router_paths(plane)
                used = sum(len(p) for p in paths.values())
                inputs = sum(len({i for i, _ in p}) for p in paths.values())
                lines.append(f"    routers: specialised to the routes, {used} of {every} "
                             f"crossbar paths, {inputs} of {len(DIRS) * d.cols * d.rows} input "
                             f"FIFOs")
        if self.cycles:
            lines.append(f"  DEADLOCK: {len(self.cycles)} cycle"
                         f"{'' if len(self.cycles) == 1 else 's'} in the resource-dependency graph")
        elif not self.structural_problems:
            lines.append("  no deadlock: the resource-dependency graph has no cycle")
        return "\n".join(lines)
