"""A 2D mesh of :class:`~apiary.noc.router.Router`\\ s."""

from collections.abc import Iterable, Mapping
from typing import Any

from amaranth import Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..stream.counters import CounterSignature
from ..stream.layout import check_width
from .flit import flit_signature
from .meter import FlitMeter, meter
from .router import Dir, Router


__all__ = ["Mesh", "ROUTER_METERS"]

#: A router's fairness counters (``Mesh(meters=True)``): ``<port>_in_<counter>`` for its five
#: input ports (``n``, ``e``, ``s``, ``w``, ``p``: the local tile).
ROUTER_METERS = {name: text for d in Dir
                 for name, text in FlitMeter.counter_names(f"{d.port}_in_").items()}


class Mesh(wiring.Component):
    """``cols`` × ``rows`` routers, each joined to its neighbours, XY routed.

    Router ``(x, y)`` sits in column ``x`` and row ``y``; (0, 0) is the top-left corner and y
    grows southwards. Its ``e_out`` feeds ``(x+1, y).w_in`` and its ``s_out`` feeds
    ``(x, y+1).n_in`` (and back the other way). Each tile injects into its router's P input and
    receives from its P output.

    * Latency: 1 cycle per router, so a message's first flit taken at ``inject[x][y]`` on cycle
      *t* is valid at ``eject[dx][dy]`` on cycle *t* + 1 + ``|dx-x| + |dy-y|`` when the path is
      free.
    * Throughput: 1 flit per cycle on every link and tile port.
    * Drops: a message routed off the edge of the mesh (a destination outside it) is taken at
      the edge and dropped whole, and counted in ``dropped`` once, at its last flit. Mesh-edge
      inputs are tied off (never valid). With ``paths``, each router is specialised to its
      paths (see :class:`~apiary.noc.router.Router`) and a message that needs a path its
      router lacks is dropped there and counted in ``route_dropped``.

    Parameters
    ----------
    width : int
        Flit width: 64, 128, 256 or 512.
    cols, rows : int
        Mesh size, 1 to 255 each.
    depth, local_depth : int
        Router input FIFO depths (see :class:`~apiary.noc.router.Router`).
    paths : mapping of (x, y) to iterable of (Dir, Dir), optional
        The crossbar paths of each router (a position left out gets none); ``None`` builds
        every router in full.

    Members
    -------
    inject : In(flit_signature(width)).array(cols, rows)
        ``inject[x][y]``: flits from the tile at (x, y) into the mesh.
    eject : Out(flit_signature(width)).array(cols, rows)
        ``eject[x][y]``: flits the mesh delivers to the tile at (x, y).
    dropped : Out(32)
        Messages routed off the mesh edge (wraps around; counted 3 cycles after their last
        flit).
    route_dropped : Out(32)
        Messages the specialised routers dropped for want of a path (wraps around; 3 cycles
        after their last flit).
    meters : Out(CounterSignature(ROUTER_METERS)).array(cols, rows)
        With ``meters=True`` only: per router, each input port's flits, messages, payload
        bytes and stall cycles (:class:`~apiary.noc.meter.FlitMeter` taps on the links, outside
        the routers: the routers are the same as without them).

    Raises
    ------
    ValueError
        If the width is not supported or ``cols`` or ``rows`` is not in 1..255.
    """

    def __init__(self, width: int, cols: int, rows: int, *, depth: int = 4,
                 local_depth: int = 4,
                 paths: Mapping[tuple[int, int], Iterable[tuple[Dir, Dir]]] | None = None,
                 meters: bool = False) -> None:
        check_width(width)
        for name, v in (("cols", cols), ("rows", rows)):
            if not isinstance(v, int) or not 1 <= v <= 255:
                raise ValueError(f"Mesh {name} must be an integer from 1 to 255, not {v!r}.")
        self._width = width
        self._cols = cols
        self._rows = rows
        self._meters = bool(meters)
        # Build the routers now, so that their parameters are checked at construction.
        self._routers = [[Router(width, x, y, depth=depth, local_depth=local_depth,
                                 paths=None if paths is None else paths.get((x, y), ()))
                          for y in range(rows)] for x in range(cols)]
        super().__init__({
            "inject": In(flit_signature(width)).array(cols, rows),
            "eject": Out(flit_signature(width)).array(cols, rows),
            "dropped": Out(32),
            "route_dropped": Out(32),
            **({"meters": Out(CounterSignature(ROUTER_METERS)).array(cols, rows)}
               if self._meters else {}),
        })

    @property
    def width(self) -> int:
        return self._width

    @property
    def cols(self) -> int:
        return self._cols

    @property
    def rows(self) -> int:
        return self._rows

    def router(self, x: int, y: int) -> Router:
        return self._routers[x][y]

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cols, rows = self._cols, self._rows
        r = self._routers
        for x in range(cols):
            for y in range(rows):
                m.submodules[f"router_{x}_{y}"] = r[x][y]
                connect(m, tile=flipped(self.inject[x][y]), router=r[x][y].p_in)
                connect(m, router=r[x][y].p_out, tile=flipped(self.eject[x][y]))

        # Links between neighbours, both ways.
        for x in range(cols):
            for y in range(rows):
                if x + 1 < cols:
                    connect(m, **{f"r{x}_{y}_e_out": r[x][y].e_out,
                                  f"r{x + 1}_{y}_w_in": r[x + 1][y].w_in})
                    connect(m, **{f"r{x + 1}_{y}_w_out": r[x + 1][y].w_out,
                                  f"r{x}_{y}_e_in": r[x][y].e_in})
                if y + 1 < rows:
                    connect(m, **{f"r{x}_{y}_s_out": r[x][y].s_out,
                                  f"r{x}_{y + 1}_n_in": r[x][y + 1].n_in})
                    connect(m, **{f"r{x}_{y + 1}_n_out": r[x][y + 1].n_out,
                                  f"r{x}_{y}_s_in": r[x][y].s_in})

        if self._meters:                # fairness counters on every router input (meter.py)
            for x in range(cols):
                for y in range(rows):
                    for d in Dir:
                        meter(m, f"meter_{x}_{y}_{d.port}", self._width, r[x][y].port_in(d),
                              self.meters[x][y], f"{d.port}_in_")

        # Mesh edges: inputs never valid; outputs always ready, and what leaves is dropped.
        edges = []
        for x in range(cols):
            edges += [(r[x][0], Dir.N), (r[x][rows - 1], Dir.S)]
        for y in range(rows):
            edges += [(r[0][y], Dir.W), (r[cols - 1][y], Dir.E)]
        ends = []
        for router, d in edges:
            out = router.port_out(d)
            m.d.comb += [
                router.port_in(d).valid.eq(0),
                out.ready.eq(1),
            ]
            ends.append(out.valid & out.payload.last)
        # Several messages may end on the mesh's edges in the same cycle. Each router's count
        # is registered, then their sum, then added (3 cycles after the last flit), so that no
        # path runs from one router's handshakes through the others' into a 32-bit adder.
        def registered(values: list[Value], name: str) -> list[Signal]:
            regs = [Signal(v.shape(), name=f"{name}{k}") for k, v in enumerate(values)]
            m.d.sync += [reg.eq(v) for reg, v in zip(regs, values)]
            return regs
        ends_now = registered(ends, "edge_end")
        drops_now = registered([r[x][y].dropped for x in range(cols) for y in range(rows)],
                               "route_drops")
        ended = Signal(range(len(ends) + 1))
        routed = Signal(range(len(Dir) * cols * rows + 1))
        m.d.sync += [
            ended.eq(sum(ends_now)),
            routed.eq(sum(drops_now)),
            self.dropped.eq(self.dropped + ended),
            self.route_dropped.eq(self.route_dropped + routed),
        ]
        return m
