"""Draw a design as SVG: the mesh, its tiles, every route along its XY path, and deadlocks.

:func:`render_svg` writes the SVG by hand (no dependencies). Each mesh position is a box with the
tile's name, class and coordinates; its router is the small square inside, near the bottom right,
and links run between routers. Each declared route is an arrow from its source's router to its
destination's router along the XY path the router takes (X first, then Y). Traffic keeps to the
right of the link it uses, in lanes, so parallel and opposite routes stay apart; the data plane is
drawn in solid blue, the control plane in dashed green. Positions without a tile are drawn dashed
as "router only". The links and ports of every deadlock cycle are underlaid in red, and the
cycle is written out in red under the drawing. Hovering over a route shows its declaration.

Declarations are shown as ``file:line``; a file outside the current directory appears by its
name alone, so that the drawing holds no absolute path of the machine that drew it.
"""

import os
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from .layout import DIRECTIONS, Link
from .svg import element as _el


__all__ = ["render_svg", "PLANE_STYLES", "CYCLE_COLOUR", "MONITOR_COLOUR"]

#: Stroke colour and dash pattern per plane.
PLANE_STYLES: dict[str, dict[str, Any]] = {
    "data": {"colour": "#1c64c8", "dash": None, "label": "data plane"},
    "ctl": {"colour": "#1f9d55", "dash": "7 4", "label": "control plane"},
}
CYCLE_COLOUR = "#e03131"
#: Fill of an Apiary monitor (an untrusted tile's guard).
MONITOR_COLOUR = "#e8590c"

_FONT = "Helvetica, Arial, sans-serif"
_MONO = "Menlo, Consolas, 'DejaVu Sans Mono', monospace"

_BOX_W, _BOX_H = 220, 150        # a tile's box
_GAP = 58                        # between boxes
_PITCH_X, _PITCH_Y = _BOX_W + _GAP, _BOX_H + _GAP
_ROUTER_X, _ROUTER_Y = 160, 100  # router centre, from the box's top-left
_ROUTER = 28                     # router square side
_LANE_FIRST, _LANE_STEP, _LANE_MAX = 5, 7, 26   # lane offsets right of the link's centre line
_MARGIN = 36
_TOP = 96                        # title and subtitle above the grid


def _declared_in(d):
    """The absolute paths of the files ``d``'s parts were declared in (``where`` is
    ``file:line``, the file relative to the current directory when it lies under it)."""
    parts = [d, *d.tiles.values(), *d.routes]
    for name in ("grants", "dependencies", "wires"):
        parts.extend(getattr(d, name, []))
    files = {getattr(p, "where", "").rpartition(":")[0] for p in parts}
    return {f for f in files if os.path.isabs(f)}


def _without_absolute_paths(text, d):
    """``text`` with every absolute path of :func:`_declared_in` cut to the file's name."""
    for path in sorted(_declared_in(d), key=len, reverse=True):
        for form in {path, escape(path)}:
            text = text.replace(form + ":", os.path.basename(path) + ":")
    return text


def _right(direction):
    """Unit vector to the right of travel in ``direction`` (screen coordinates, y down)."""
    dx, dy = DIRECTIONS[direction]
    return (-dy, dx)


def _runs(links):
    """Split a path into runs of one direction: ``[(direction, [link, ...]), ...]``."""
    runs: list[tuple[str, list[Link]]] = []
    for link in links:
        if runs and runs[-1][0] == link.dir:
            runs[-1][1].append(link)
        else:
            runs.append((link.dir, [link]))
    return runs


def _wrap_path(text, width):
    """Wrap a cycle (``a → b → c``) at its arrows, ``width`` characters a line."""
    parts = text.split(" → ")
    lines, line = [], ""
    for i, part in enumerate(parts):
        piece = part if i == 0 else " → " + part
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = "  → " + part
        else:
            line += piece
    lines.append(line)
    return lines


def _wrap_words(text, width):
    """Wrap a sentence at spaces, keeping ``a → b`` together."""
    words = text.replace(" → ", "\u00a0→\u00a0").split(" ")
    lines, line = [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = "  " + word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return [ln.replace("\u00a0", " ") for ln in lines]


class _Canvas:
    def __init__(self, design, graph):
        self.d = design
        self.g = graph
        self.grid_w = design.cols * _PITCH_X - _GAP
        self.grid_h = design.rows * _PITCH_Y - _GAP
        self.width = max(self.grid_w + 2 * _MARGIN, 760)
        self.ox = (self.width - self.grid_w) / 2
        self.oy = _TOP
        self.body = []

    # geometry
    def box(self, x, y):
        return self.ox + x * _PITCH_X, self.oy + y * _PITCH_Y

    def router(self, x, y):
        bx, by = self.box(x, y)
        return bx + _ROUTER_X, by + _ROUTER_Y

    def add(self, text):
        self.body.append(text)


def _assign_lanes(graph, routes):
    """Give each run of each route a lane (0, 1, ...) free on all the links it uses."""
    used: dict[tuple[int, int, str], set[int]] = {}     # (x, y, dir) -> set of lanes
    lanes = {}
    for r in routes:
        for i, (_direction, links) in enumerate(_runs(graph.paths[r])):
            taken = set().union(*(used.get((ln.x, ln.y, ln.dir), set()) for ln in links))
            lane = 0
            while lane in taken:
                lane += 1
            for ln in links:
                used.setdefault((ln.x, ln.y, ln.dir), set()).add(lane)
            lanes[r, i] = lane
    deepest = max((max(s) for s in used.values()), default=0)
    step = _LANE_STEP if deepest * _LANE_STEP + _LANE_FIRST <= _LANE_MAX else \
        (_LANE_MAX - _LANE_FIRST) / deepest
    return lanes, step


def render_svg(design, graph=None):
    """Return an SVG drawing of ``design`` (and of ``graph``'s deadlock cycles) as a string.

    ``graph`` defaults to ``design.graph()``. Tiles outside the mesh are not drawn, and routes
    whose ends are not both drawable are left out; ``apiary show`` refuses such designs anyway.
    """
    return _Drawing(design, design.graph() if graph is None else graph).svg()


class _Drawing:
    """One drawing of a design: each method draws one thing onto the canvas, in the order
    :meth:`svg` calls them (later elements are drawn over earlier ones)."""

    def __init__(self, design, graph):
        self.d, self.g = design, graph
        self.c = _Canvas(design, graph)
        self.by_pos: dict[tuple[int, int], list] = {}
        for decl in design.tiles.values():
            if 0 <= decl.x < design.cols and 0 <= decl.y < design.rows:
                self.by_pos.setdefault(decl.at, []).append(decl)
        drawable = {decl.name for decls in self.by_pos.values() for decl in decls}
        self.routes = [r for r in design.routes
                       if r in graph.paths and r.src in drawable and r.dst in drawable]
        self.cycle_ports = {p.tile for cyc in graph.cycles for p in cyc.ports}
        self.cycle_links = [ln for cyc in graph.cycles for ln in cyc.links]
        self.planes = [p for p in PLANE_STYLES
                       if any(r.plane == p for r in self.routes)] or ["data"]
        self.lanes, self.lane_step = _assign_lanes(graph, self.routes)
        self.badges: list[tuple[float, float]] = []     # route numbers' centres, drawn so far

    def svg(self):
        """The whole document."""
        c = self.c
        self.mesh()
        self.cycle_underlay()
        numbers = self.draw_routes()
        y = self.legend(c.oy + c.grid_h + 34) + 26
        y = self.route_list(y, numbers)
        height = self.cycle_caption(y) + 10
        out = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{c.width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {c.width:.0f} {height:.0f}">',
            _el("title", f"{self.d.name}: {self.d.cols}×{self.d.rows} mesh"),
            *_marker_defs(),
            _el("rect", x=0, y=0, width=f"{c.width:.0f}", height=f"{height:.0f}",
                fill="#ffffff"),
            *self.heading(),
            *c.body,
            "</svg>",
        ]
        return _without_absolute_paths("\n".join(out) + "\n", self.d)

    # -- the mesh: boxes, routers, mesh wires ----------------------------------------------------

    def mesh(self):
        """Every position of the mesh: the wires between routers (under everything), then each
        position's box, coordinates and router."""
        c, d = self.c, self.d
        c.add('<g class="mesh">')
        for y in range(d.rows):
            for x in range(d.cols):
                rx, ry = c.router(x, y)
                if x + 1 < d.cols:
                    c.add(_el("line", x1=rx, y1=ry, x2=rx + _PITCH_X, y2=ry, stroke="#d9dee5",
                              stroke_width=1.5))
                if y + 1 < d.rows:
                    c.add(_el("line", x1=rx, y1=ry, x2=rx, y2=ry + _PITCH_Y, stroke="#d9dee5",
                              stroke_width=1.5))
        for y in range(d.rows):
            for x in range(d.cols):
                decls = self.by_pos.get((x, y))
                if decls:
                    self.tile_box(x, y, decls)
                else:
                    self.empty_box(x, y)
                bx, by = c.box(x, y)
                c.add(_el("text", f"({x},{y})", x=bx + 12, y=by + _BOX_H - 10,
                          font_family=_MONO, font_size=11, fill="#8a8270"))
                self.router(x, y, decls or [])
        c.add("</g>")

    def in_cycle(self, decls):
        """Whether one of the tiles ``decls`` has a port in a deadlock cycle."""
        return any(decl.name in self.cycle_ports for decl in decls)

    def tile_box(self, x, y, decls):
        """The box of position (``x``, ``y``) holding the tiles ``decls``: their names and
        classes, red if one is in a deadlock cycle, and a monitor if one is untrusted."""
        c = self.c
        bx, by = c.box(x, y)
        red = self.in_cycle(decls)
        c.add(f'<g class="{"tile cycle" if red else "tile"}">')
        c.add(_el("title", "\n".join(f"{decl.name}: {decl.cls_name} at ({x},{y}), "
                                      f"declared at {decl.where}" for decl in decls)))
        c.add(_el("rect", x=bx, y=by, width=_BOX_W, height=_BOX_H, rx=10,
                  fill="#fdf6e3" if not red else "#fff1f0",
                  stroke=CYCLE_COLOUR if red else "#8a7f62",
                  stroke_width=2.5 if red else 1.4))
        name = " / ".join(decl.name for decl in decls)
        size = min(16.0, 125 / max(1, 0.6 * len(name)))
        c.add(_el("text", name, x=bx + 12, y=by + 27, font_family=_FONT,
                  font_size=size, font_weight="bold", fill="#222"))
        kind = " / ".join(decl.cls_name for decl in decls)
        ksize = min(12.0, 125 / max(1, 0.58 * len(kind)))
        c.add(_el("text", kind, x=bx + 12, y=by + 46, font_family=_FONT,
                  font_size=ksize, fill="#5c5647"))
        if any(not decl.trusted for decl in decls):
            self.monitor(x, y)
            c.add(_el("text", "untrusted", x=bx + 12, y=by + 64, font_family=_FONT,
                      font_size=11, font_style="italic", fill="#9c4f00"))
        c.add("</g>")

    def monitor(self, x, y):
        """The monitor of an untrusted tile at (``x``, ``y``): between the tile and its
        router."""
        c = self.c
        mx, my = c.router(x, y)
        c.add('<g class="monitor">')
        c.add(_el("title", "untrusted: an Apiary monitor guards this tile"))
        c.add(_el("rect", x=mx - _ROUTER / 2 - 64, y=my - 11, width=56, height=22,
                  rx=4, fill=MONITOR_COLOUR, stroke="#9c4f00", stroke_width=1.2))
        c.add(_el("text", "monitor", x=mx - _ROUTER / 2 - 36, y=my + 4,
                  font_family=_FONT, font_size=11, text_anchor="middle",
                  fill="#fff", font_weight="bold"))
        c.add("</g>")

    def empty_box(self, x, y):
        """The dashed box of a position without a tile."""
        c = self.c
        bx, by = c.box(x, y)
        c.add('<g class="empty">')
        c.add(_el("title", f"({x},{y}): no tile; a router-only position"))
        c.add(_el("rect", x=bx, y=by, width=_BOX_W, height=_BOX_H, rx=10, fill="#f6f7f9",
                  stroke="#aab2bd", stroke_width=1.2, stroke_dasharray="5 4"))
        c.add(_el("text", "router only", x=bx + 12, y=by + 27, font_family=_FONT,
                  font_size=13, font_style="italic", fill="#8a929c"))
        c.add("</g>")

    def router(self, x, y, decls):
        """The router of position (``x``, ``y``), red if one of its tiles ``decls`` is in a
        deadlock cycle."""
        rx, ry = self.c.router(x, y)
        red = self.in_cycle(decls)
        self.c.add(_el("rect", x=rx - _ROUTER / 2, y=ry - _ROUTER / 2, width=_ROUTER,
                       height=_ROUTER, rx=4, fill="#e9ecef" if not red else "#ffe3e3",
                       stroke=CYCLE_COLOUR if red else "#6c757d", stroke_width=1.3,
                       class_="router"))

    # -- deadlock cycles: red underlay on their links ---------------------------------------------

    def cycle_underlay(self):
        """A wide red line under each link of a deadlock cycle."""
        c = self.c
        if not self.cycle_links:
            return
        c.add('<g class="cycle">')
        for ln in self.cycle_links:
            x1, y1 = c.router(ln.x, ln.y)
            x2, y2 = c.router(*ln.to)
            px, py = _right(ln.dir)
            off = (_LANE_FIRST + _LANE_MAX) / 2
            c.add(_el("line", x1=x1 + px * off, y1=y1 + py * off, x2=x2 + px * off,
                      y2=y2 + py * off, stroke=CYCLE_COLOUR, stroke_width=_LANE_MAX - 1,
                      stroke_opacity=0.28, stroke_linecap="round", class_="cycle",
                      data_link=str(ln)))
        c.add("</g>")

    # -- routes ----------------------------------------------------------------------------------

    def draw_routes(self):
        """Every route, numbered from 1: ``{route: number}``."""
        c = self.c
        numbers: dict = {}
        c.add('<g class="routes" fill="none">')
        for n, r in enumerate(self.routes, 1):
            numbers[r] = n
            types = self.g.message_types(r)
            title = (f"{n}: {r.describe(plane=True)}"
                     + (f", carrying {', '.join(types)}" if types else "")
                     + f", declared at {r.where}")
            if self.g.paths[r]:
                self.route(n, r, title)
            else:
                self.self_loop(r, title)
        c.add("</g>")
        return numbers

    def self_loop(self, r, title):
        """Route ``r`` from a tile to itself: a small loop at its router."""
        c = self.c
        style = PLANE_STYLES.get(r.plane, PLANE_STYLES["data"])
        rx, ry = c.router(*self.d.tiles[r.src].at)
        c.add(f'<g class="route" data-plane={quoteattr(r.plane)}>')
        c.add(_el("title", title))
        c.add(_el("path", d=f"M {rx - 14} {ry - 6} C {rx - 40} {ry - 30}, {rx - 40} {ry + 30}, "
                            f"{rx - 14} {ry + 6}", stroke=style["colour"], stroke_width=2.2,
                  stroke_dasharray=style["dash"], marker_end=f"url(#arrow-{r.plane})"))
        c.add("</g>")

    def route_points(self, r):
        """The polyline of route ``r``: from the edge of its source's router, through a corner
        at each turn, to the edge of its destination's; each run in its lane, to the right of
        the links' centre line."""
        c = self.c
        runs = _runs(self.g.paths[r])
        offsets = []
        for i, (direction, _) in enumerate(runs):
            px, py = _right(direction)
            off = _LANE_FIRST + self.lanes[r, i] * self.lane_step
            offsets.append((px * off, py * off))
        sx, sy = c.router(*self.d.tiles[r.src].at)
        fx, fy = DIRECTIONS[runs[0][0]]
        points = [(sx + offsets[0][0] + fx * _ROUTER / 2, sy + offsets[0][1] + fy * _ROUTER / 2)]
        for i in range(len(runs) - 1):
            tx, ty = c.router(*runs[i][1][-1].to)
            points.append((tx + offsets[i][0] + offsets[i + 1][0],
                           ty + offsets[i][1] + offsets[i + 1][1]))
        ex, ey = c.router(*self.d.tiles[r.dst].at)
        lx, ly = DIRECTIONS[runs[-1][0]]
        points.append((ex + offsets[-1][0] - lx * (_ROUTER / 2 + 1),
                       ey + offsets[-1][1] - ly * (_ROUTER / 2 + 1)))
        return points

    def route(self, n, r, title):
        """Route number ``n``, ``r``, along its XY path: an arrow from a dot at its source's
        router, and its number in a badge near the start, clear of the badges drawn before."""
        c = self.c
        style = PLANE_STYLES.get(r.plane, PLANE_STYLES["data"])
        colour = style["colour"]
        points = self.route_points(r)
        start = points[0]
        in_cycle = any(r in cyc.routes for cyc in self.g.cycles)
        c.add(f'<g class="route{" in-cycle" if in_cycle else ""}" '
              f'data-plane={quoteattr(r.plane)}>')
        c.add(_el("title", title))
        c.add(_el("polyline", points=" ".join(f"{x:.1f},{y:.1f}" for x, y in points),
                  stroke=colour, stroke_width=2.2, stroke_dasharray=style["dash"],
                  stroke_linejoin="round", marker_end=f"url(#arrow-{r.plane})"))
        c.add(_el("circle", cx=start[0], cy=start[1], r=2.8, fill=colour))
        first_dir = self.g.paths[r][0].dir
        fx, fy = DIRECTIONS[first_dir]
        bpx, bpy = _right(first_dir)
        along = 15
        while True:
            bx_ = start[0] + fx * along + bpx * 8
            by_ = start[1] + fy * along + bpy * 8
            if all((bx_ - qx) ** 2 + (by_ - qy) ** 2 >= 17 ** 2 for qx, qy in self.badges):
                break
            along += 17
        self.badges.append((bx_, by_))
        c.add(_el("circle", cx=bx_, cy=by_, r=7.5, fill="#fff", stroke=colour, stroke_width=1.2))
        c.add(_el("text", str(n), x=bx_, y=by_ + 3.3, font_family=_FONT, font_size=9.5,
                  text_anchor="middle", fill=colour, stroke="none", font_weight="bold"))
        c.add("</g>")

    # -- legend, route list, deadlock caption ---------------------------------------------------

    def legend_entries(self):
        """``[(kind, plane or None, label)]``: the legend's entries, in order."""
        d, g = self.d, self.g
        entries: list[tuple[str, str | None, str]] = [
            ("plane", p, f"{PLANE_STYLES[p]['label']} "
                         f"({d.width if p == 'data' else d.ctl_width} bits)")
            for p in self.planes]
        entries.append(("router", None, "router"))
        if any(not decl.trusted for decl in d.tiles.values()):
            entries.append(("monitor", None,
                            "Apiary monitor (untrusted tile); ⚿ route with an IPC capability"))
        if g.empty_positions:
            entries.append(("empty", None, "router-only position"))
        if g.cycles:
            entries.append(("cycle", None, "deadlock cycle"))
        return entries

    def legend(self, y):
        """The legend, from ``y`` down, wrapped to the drawing's width; returns the last line's
        ``y``."""
        c = self.c
        c.add('<g class="legend">')
        x = left = _MARGIN
        for kind, p, label in self.legend_entries():
            if x > left and x + 50 + 7 * len(label) > c.width - _MARGIN:
                x = left
                y += 24
            c.add(_legend_symbol(kind, p, x, y))
            c.add(_el("text", label, x=x + 50, y=y + 4, font_family=_FONT, font_size=12,
                      fill="#333"))
            x += 50 + 7 * len(label) + 28
        c.add("</g>")
        return y

    def route_list(self, y, numbers):
        """Each route's number, description (what it carries, ⚿ if an IPC capability covers
        it) and declaration, one a line from ``y``; returns the ``y`` below the list."""
        if not self.routes:
            return y
        c, left = self.c, _MARGIN
        texts = {}
        for r in self.routes:
            text = r.describe(plane=len(self.planes) > 1)
            types = self.g.message_types(r)
            if types:
                text += f"  ({', '.join(types)})"
            if any(g.covers(r) for g in getattr(self.d, "grants", [])):
                text += " ⚿"
            texts[r] = text
        width_routes = max(len(text) for text in texts.values())
        c.add('<g class="route-list">')
        for r in self.routes:
            colour = PLANE_STYLES.get(r.plane, PLANE_STYLES["data"])["colour"]
            c.add(_el("circle", cx=left + 8, cy=y - 4, r=7.5, fill="#fff", stroke=colour,
                      stroke_width=1.2))
            c.add(_el("text", str(numbers[r]), x=left + 8, y=y - 0.7, font_family=_FONT,
                      font_size=9.5, text_anchor="middle", fill=colour, font_weight="bold"))
            c.add(_el("text", texts[r], x=left + 24, y=y, font_family=_MONO, font_size=11.5,
                      fill="#333"))
            c.add(_el("text", r.where, x=left + 24 + 7 * (width_routes + 3), y=y,
                      font_family=_MONO, font_size=11.5, fill="#888"))
            y += 19
        c.add("</g>")
        return y + 8

    def cycle_caption(self, y):
        """Each deadlock cycle written out in red from ``y`` (the path, then the explanation
        without the generic advice); returns the ``y`` below it."""
        if not self.g.cycles:
            return y
        c, left = self.c, _MARGIN
        chars = int((c.width - 2 * _MARGIN) / 7.0)
        c.add('<g class="cycle-caption">')
        for cyc in self.g.cycles:
            lines = cyc.text.split("\n")
            head = _wrap_path("Deadlock " + lines[0][len("deadlock "):], chars)
            for i, line in enumerate(head):
                c.add(_el("text", line, x=left, y=y, font_family=_MONO, font_size=12,
                          font_weight="bold" if i == 0 else None, fill=CYCLE_COLOUR,
                          class_="cycle"))
                y += 18
            for line in lines[1:-1]:          # the explanation, without the generic advice
                for part in _wrap_words(line, chars):
                    c.add(_el("text", part, x=left + 14, y=y, font_family=_MONO, font_size=11,
                              fill="#a61e1e"))
                    y += 16
            y += 8
        c.add("</g>")
        return y

    # -- title -----------------------------------------------------------------------------------

    def heading(self):
        """The design's name, its deadlock status (top right) and a line of its sizes."""
        d, g = self.d, self.g
        plural = "s" if len(g.cycles) > 1 else ""
        status, colour = ((f"DEADLOCK ({len(g.cycles)} cycle{plural})",
                           CYCLE_COLOUR) if g.cycles else
                          ("problems: see apiary check", CYCLE_COLOUR) if g.problems else
                          ("no deadlock", "#2b8a3e"))
        sub = (f"{d.cols}×{d.rows} mesh · {d.width}-bit data plane · {d.ctl_width}-bit control "
               f"plane · {len(d.tiles)} tile{'s' if len(d.tiles) != 1 else ''} · "
               f"{len(d.routes)} route{'s' if len(d.routes) != 1 else ''}")
        return [
            _el("text", d.name, x=_MARGIN, y=40, font_family=_FONT, font_size=22,
                font_weight="bold", fill="#222"),
            _el("text", status, x=self.c.width - _MARGIN, y=40, font_family=_FONT, font_size=15,
                font_weight="bold", fill=colour, text_anchor="end",
                class_="status cycle" if g.cycles else "status"),
            _el("text", sub, x=_MARGIN, y=64, font_family=_FONT, font_size=13, fill="#555"),
        ]


def _legend_symbol(kind, plane, x, y):
    """The symbol of a legend entry of ``kind`` (a ``plane``'s line, ...) at (``x``, ``y``)."""
    if kind == "plane":
        st = PLANE_STYLES[plane]
        return _el("line", x1=x, y1=y, x2=x + 34, y2=y, stroke=st["colour"], stroke_width=2.2,
                   stroke_dasharray=st["dash"], marker_end=f"url(#arrow-{plane})")
    if kind == "router":
        return _el("rect", x=x + 10, y=y - 8, width=16, height=16, rx=3, fill="#e9ecef",
                   stroke="#6c757d", stroke_width=1.2)
    if kind == "monitor":
        return _el("rect", x=x + 4, y=y - 9, width=28, height=18, rx=4, fill=MONITOR_COLOUR,
                   stroke="#9c4f00")
    if kind == "empty":
        return _el("rect", x=x + 4, y=y - 9, width=28, height=18, rx=4, fill="#f6f7f9",
                   stroke="#aab2bd", stroke_dasharray="4 3")
    return _el("line", x1=x, y1=y, x2=x + 34, y2=y, stroke=CYCLE_COLOUR, stroke_width=12,
               stroke_opacity=0.28, stroke_linecap="round")


def _marker_defs():
    """The arrowheads, one per plane in its colour."""
    defs = ["<defs>"]
    for plane, st in PLANE_STYLES.items():
        defs.append(f'<marker id="arrow-{plane}" viewBox="0 0 10 10" refX="9" refY="5" '
                    f'markerWidth="9" markerHeight="9" markerUnits="userSpaceOnUse" '
                    f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
                    f'fill="{st["colour"]}"/></marker>')
    defs.append("</defs>")
    return defs
