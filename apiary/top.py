"""Elaboration: a checked :class:`~apiary.design.Design` becomes one Amaranth component.

One mesh per plane the design uses, each tile's NoC ports on its router's local port, router-only
positions where no tile sits, and every non-NoC member of every tile brought out as a top-level
port named ``<tile>_<member>``.
"""

import re

from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import Out, connect, flipped

from .noc.mesh import Mesh
from .tile import NOC_PORTS, Tile


__all__ = ["DesignTop", "top_name", "design_verilog", "generate_verilog"]


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


def design_verilog(top):
    """Verilog text of an elaborated :class:`DesignTop`."""
    return verilog.convert(top, name=top_name(top.design), emit_src=False)


def generate_verilog(design, path=None):
    """Check and elaborate ``design``, write Verilog to ``path`` (if given), return the text."""
    text = design_verilog(DesignTop(design))
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text
