"""A five-port wormhole router with XY dimension-order routing (Beehive's / OpenPiton's
"dynamic node", rebuilt for val/rdy streams)."""

import enum as py_enum

from collections.abc import Iterable
from typing import Any

from amaranth import Module, Signal, Array, Cat, Const, Mux, Value
from amaranth.hdl import ValueLike
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..stream.layout import check_width
from ..stream.queue import Queue
from .flit import flit_signature
from .header import ROUTING_BITS, routing_header


__all__ = ["Dir", "DIRS", "SOURCES", "OPPOSITE", "Router", "xy_route", "full_paths"]


class Dir(py_enum.IntEnum):
    """Router ports. ``P`` is the local tile. Port ``{name}_in`` / ``{name}_out``."""
    N = 0
    E = 1
    S = 2
    W = 3
    P = 4

    @property
    def port(self) -> str:
        return self.name.lower()


#: All five directions, in port order.
DIRS = tuple(Dir)

#: Which inputs each output's crossbar mux takes: only the turns XY routing can make
#: (X first, so nothing turns from N/S into E/W, and nothing makes a U-turn), plus P to P.
SOURCES = {
    Dir.N: (Dir.S, Dir.E, Dir.W, Dir.P),
    Dir.E: (Dir.W, Dir.P),
    Dir.S: (Dir.N, Dir.E, Dir.W, Dir.P),
    Dir.W: (Dir.E, Dir.P),
    Dir.P: (Dir.N, Dir.E, Dir.S, Dir.W, Dir.P),
}


#: The input a message arrives on at the next router after leaving on an output.
OPPOSITE = {Dir.N: Dir.S, Dir.S: Dir.N, Dir.E: Dir.W, Dir.W: Dir.E}


def full_paths() -> frozenset[tuple[Dir, Dir]]:
    """Every ``(input, output)`` crossbar path of an unspecialised router (:data:`SOURCES`)."""
    return frozenset((i, o) for o, srcs in SOURCES.items() for i in srcs)


def xy_route(x: int, y: int, dst_x: int, dst_y: int, came_from: Dir = Dir.P,
             paths: Iterable[tuple[Dir, Dir]] | None = None) -> Dir | None:
    """Python model of the router's choice: the output a message for ``(dst_x, dst_y)`` takes at
    router ``(x, y)`` when it arrives on input ``came_from``.

    X first: East if ``dst_x > x``, West if ``dst_x < x``; then North if ``dst_y < y`` (y grows
    southwards), South if ``dst_y > y``; else P. Inputs N and S compare only ``dst_y``: a message
    on them has finished its X hops. A full router (``paths`` is ``None``) sends a choice the
    input has no crossbar path for (impossible under XY routing from a tile of the mesh) to P; a
    router specialised to ``paths`` drops it (``None``).
    """
    came_from = Dir(came_from)
    if came_from in (Dir.N, Dir.S):
        want = Dir.N if dst_y < y else Dir.S if dst_y > y else Dir.P
    elif dst_x > x:
        want = Dir.E
    elif dst_x < x:
        want = Dir.W
    else:
        want = Dir.N if dst_y < y else Dir.S if dst_y > y else Dir.P
    if paths is not None:
        return want if (came_from, want) in set(paths) else None
    return want if came_from in SOURCES[want] else Dir.P


class Router(wiring.Component):
    """Five-port wormhole router at tile ``(x, y)``, XY dimension-order routing, X first.

    (0, 0) is the top-left tile and y grows southwards: a message goes East while
    ``dst_x > x``, West while ``dst_x < x``, then North while ``dst_y < y``, South while
    ``dst_y > y``, and to the local port P at ``(x, y)`` whatever its ``dst_fbits`` (sub-ports
    are the tile's business). Only the first flit of a message is routed, on ``dst_x`` and
    ``dst_y`` in its top 64 bits (:func:`~apiary.noc.header.routing_header`); the route holds
    until the flit with ``last`` set has passed (wormhole). ``msg_len`` is not read.

    Each input has a :class:`~apiary.stream.queue.Queue` (``depth`` flits on N/E/S/W,
    ``local_depth`` on P: a ``SyncFIFO`` whose storage is an asynchronous-read memory, i.e.
    LUTRAM, or for 2 flits or fewer registers, the same cycle for cycle), whose head goes
    through combinational route, arbitration and crossbar logic straight to the output: outputs
    are not registered. Registers end every hop's path at a flip-flop instead of a LUTRAM write
    port, and at 64 bits cost fewer LUTs than LUTRAM on ECP5. Each output's mux takes only the
    inputs XY routing can turn into it (:data:`SOURCES`): E and W take 2, N and S 4, P all 5.

    Arbitration: per output, round-robin among the inputs whose head flit asks for it, at whole
    message granularity. A grant is made when a head is offered (whether or not the output is
    ready, so ``valid`` and the payload stay put until taken) and held until ``last`` passes.

    * Latency: 1 cycle per hop. A flit taken at an input on cycle *t* is valid at its output on
      cycle *t*+1 if the output is free (measured in ``tests/noc/test_router.py``).
    * Throughput: 1 flit per cycle on every port at once when the outputs differ (and
      ``depth >= 2``: a 1-entry FIFO cannot take a flit in the cycle it gives one, so it carries
      a flit every other cycle). Under contention, outputs are shared fairly, message by message.
    * Drops: nothing, unspecialised. A message whose route would need a turn the crossbar lacks
      (a U-turn, or N/S into E/W; impossible for traffic injected by tiles of an XY mesh) is
      delivered to P.
    * Specialised (``paths`` given, as :class:`~apiary.noc.mesh.Mesh` does from a design's
      layout graph): only those ``(input, output)`` paths are built. An input no path starts
      from has no FIFO and takes whatever arrives; an output no path ends at is never valid; a
      mux takes only its paths' inputs (an output with one source has no mux). A message whose
      XY route needs a path the router lacks is taken and dropped whole, at 1 flit per cycle,
      and ``dropped`` counts it in the cycle its last flit goes: never delivered elsewhere.
    * Ready: ``{d}_in.ready`` is the FIFO's not-full (registered, independent of any output),
      so routers can be chained without combinational ready paths.
    * Area (``python -m apiary.bench.noc``; Yosys 0.70 ``synth_xilinx -family xcup``,
      flattened): at 512 bits 3,302 LUTs of logic, 1,480 LUTs as LUTRAM (37 RAM32M16 per
      input FIFO) and 58 FFs; at 64 bits 614 + 200 LUTs, 58 FFs. The crossbar is 6 LUTs per
      bit (a LUT3 each for E and W, a LUT6 each for N and S, two LUTs for P's 5:1 mux).

    Parameters
    ----------
    width : int
        Flit data width: 64, 128, 256 or 512.
    x, y : int
        This router's coordinates, 0 to 255.
    depth : int
        Input FIFO depth on N, E, S and W, in flits (at least 1).
    local_depth : int
        Input FIFO depth on P, in flits (at least 1).
    paths : iterable of (Dir, Dir), optional
        Build only these ``(input, output)`` crossbar paths (each one an XY turn of
        :data:`SOURCES`); ``None`` (the default) builds them all.

    Members
    -------
    n_in, e_in, s_in, w_in, p_in : In(flit_signature(width))
        Flits arriving from the neighbour in that direction, or from the tile (P).
    n_out, e_out, s_out, w_out, p_out : Out(flit_signature(width))
        Flits leaving towards that neighbour, or to the tile (P).
    dropped : Out(3)
        Messages dropped this cycle (at their last flit) for want of a path: always 0 when
        unspecialised.

    Raises
    ------
    ValueError
        If the width is not supported, a coordinate is not in 0..255, a depth is below 1, or a
        path is not an XY turn.
    """

    def __init__(self, width: int, x: int, y: int, *, depth: int = 4,
                 local_depth: int = 4,
                 paths: Iterable[tuple[Dir, Dir]] | None = None) -> None:
        check_width(width)
        for name, v in (("x", x), ("y", y)):
            if not isinstance(v, int) or not 0 <= v <= 255:
                raise ValueError(f"Router coordinate {name} must be an integer from 0 to 255, "
                                 f"not {v!r}.")
        for name, v in (("depth", depth), ("local_depth", local_depth)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Router {name} must be an integer of at least 1 flit, "
                                 f"not {v!r}.")
        self._width = width
        self._x = x
        self._y = y
        self._depth = depth
        self._local_depth = local_depth
        self._specialised = paths is not None
        self._paths = full_paths() if paths is None else self._check_paths(paths)
        #: Per output, the inputs its crossbar mux takes, in :data:`SOURCES` order.
        self._sources = {o: tuple(i for i in srcs if (i, o) in self._paths)
                         for o, srcs in SOURCES.items()}
        sig: dict[str, Any] = {}
        for d in DIRS:
            sig[f"{d.port}_in"] = In(flit_signature(width))
            sig[f"{d.port}_out"] = Out(flit_signature(width))
        sig["dropped"] = Out(range(len(DIRS) + 1))
        super().__init__(sig)

    def _check_paths(self, paths: Iterable[tuple[Dir, Dir]]) -> frozenset[tuple[Dir, Dir]]:
        legal = full_paths()
        out = set()
        for i, o in paths:
            i, o = Dir(i), Dir(o)
            if (i, o) not in legal:
                raise ValueError(f"Router ({self._x}, {self._y}) has no crossbar path from "
                                 f"{i.name} to {o.name}: XY routing never makes that turn.")
            out.add((i, o))
        return frozenset(out)

    @property
    def width(self) -> int:
        return self._width

    @property
    def x(self) -> int:
        return self._x

    @property
    def y(self) -> int:
        return self._y

    @property
    def paths(self) -> frozenset[tuple[Dir, Dir]]:
        """The ``(input, output)`` crossbar paths this router has."""
        return self._paths

    @property
    def specialised(self) -> bool:
        """Built for a given set of paths (drops what arrives for any other)."""
        return self._specialised

    def port_in(self, d: Dir) -> Any:
        return getattr(self, f"{Dir(d).port}_in")

    def port_out(self, d: Dir) -> Any:
        return getattr(self, f"{Dir(d).port}_out")

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self._width
        rhdr = routing_header().layout()
        sources = {o: srcs for o, srcs in self._sources.items() if srcs}
        inputs = [d for d in DIRS if any(d in srcs for srcs in sources.values())]

        fifos = {}      # input -> its Queue
        head = {}       # input -> head flit, width + 1 bits: data, then last at the top
        valid = {}      # input -> FIFO not empty
        route = {}      # input -> {output: the head flit asks for it}
        miss = {}       # input -> the head flit asks for an output this router has no path to
        # input -> terms OR-ed into its FIFO's r_en
        pop: dict[Dir, list[Value]] = {d: [] for d in inputs}
        # Per input, a message that ended being dropped this cycle.
        ended: list[Value] = []
        for d in DIRS:
            port = self.port_in(d)
            if d not in inputs:
                # No path from here: whatever arrives (nothing, if the neighbour is specialised
                # for the same routes) is taken and dropped.
                m.d.comb += port.ready.eq(1)
                ended.append(port.valid & port.payload.last)
                continue
            fifo = Queue(width + 1, self._local_depth if d == Dir.P else self._depth)
            m.submodules[f"fifo_{d.port}"] = fifo
            m.d.comb += [
                fifo.i.payload.eq(port.payload),
                fifo.i.valid.eq(port.valid),
                port.ready.eq(fifo.i.ready),
            ]
            route[d], miss[d] = self._route(
                m, d, data.View(rhdr, fifo.o.payload[width - ROUTING_BITS:width]))
            fifos[d], head[d], valid[d] = fifo, fifo.o.payload, fifo.o.valid

        # Per output: busy (holding a message), gnt (which source holds it), rr (last granted).
        state = {}
        for o, srcs in sources.items():
            k = len(srcs)
            state[o] = (Signal(name=f"{o.port}_busy"),
                        Signal(range(k), name=f"{o.port}_gnt"),
                        Signal(range(k), name=f"{o.port}_rr"))

        # An input whose message holds an output, or is being dropped, asks no output for a
        # route (its head may be a body flit, whose top bits are payload).
        free = {}
        for d in inputs:
            terms = []
            for o, srcs in sources.items():
                if d in srcs:
                    busy, gnt, _ = state[o]
                    terms.append(busy & (gnt == srcs.index(d)))
            owned = Signal(name=f"{d.port}_owned")
            m.d.comb += owned.eq(Cat(*terms).any())
            if not self._specialised:       # nothing to drop
                free[d] = ~owned
                continue
            discard = Signal(name=f"{d.port}_discard")
            free[d] = ~owned & ~discard
            drop = Signal(name=f"{d.port}_drop")
            m.d.comb += drop.eq(valid[d] & (discard | (free[d] & miss[d])))
            pop[d].append(drop)
            last = head[d][width]
            with m.If(drop):
                m.d.sync += discard.eq(~last)
            ended.append(drop & last)

        for o, srcs in sources.items():
            k = len(srcs)
            busy, gnt, rr = state[o]
            out = self.port_out(o)
            req = Signal(k, name=f"{o.port}_req")
            m.d.comb += req.eq(Cat(*(valid[i] & free[i] & route[i][o] for i in srcs)))

            # Round-robin: the first requester after the last granted one.
            pick = Signal(range(k), name=f"{o.port}_pick")
            with m.Switch(rr):
                for r in range(k):
                    with m.Case(r):
                        order = [(r + 1 + n) % k for n in range(k)]
                        for j in reversed(order):
                            with m.If(req[j]):
                                m.d.comb += pick.eq(j)

            sel = Signal(range(k), name=f"{o.port}_sel")
            with m.If(busy):
                m.d.comb += sel.eq(gnt)
            with m.Else():
                m.d.comb += sel.eq(pick)
            granted = busy | req.any()

            # Crossbar: one mux per output over its legal sources, on a binary select (a tree
            # of 2:1 muxes keeps a 4:1 mux to one LUT6 per bit in Yosys).
            m.d.comb += [
                out.payload.eq(_mux_tree(sel, [head[i] for i in srcs])),
                out.valid.eq(granted & Array(valid[i] for i in srcs)[sel]),
            ]
            for j, i in enumerate(srcs):
                pop[i].append(granted & (sel == j) & out.ready)

            fire_last = out.valid & out.ready & out.payload.last
            with m.If(busy):
                with m.If(fire_last):
                    m.d.sync += busy.eq(0)
            with m.Elif(req.any()):
                m.d.sync += rr.eq(pick)
                with m.If(~fire_last):
                    m.d.sync += [busy.eq(1), gnt.eq(pick)]

        for d in inputs:
            m.d.comb += fifos[d].o.ready.eq(Cat(*pop[d]).any())
        m.d.comb += self.dropped.eq(sum(ended) if ended else 0)
        return m

    def _route(self, m: Module, d: Dir, hdr: Any) -> tuple[dict[Dir, Signal], Value]:
        """One-hot request of input ``d``'s head flit over the outputs ``d`` has paths to, and
        whether the flit asks for an output it has no path to (never, unspecialised: what XY
        routing cannot turn into goes to P)."""
        x, y = self._x, self._y
        go = {o: Signal(name=f"{d.port}_to_{o.port}") for o in DIRS if (d, o) in self._paths}
        y_n = hdr.dst_y < y
        y_s = hdr.dst_y > y
        here = ~y_n & ~y_s
        if d in (Dir.N, Dir.S):
            want = {Dir.N: y_n, Dir.S: y_s, Dir.P: here}
        else:
            x_e = hdr.dst_x > x
            x_w = hdr.dst_x < x
            x_eq = ~x_e & ~x_w
            want = {Dir.E: x_e, Dir.W: x_w, Dir.N: x_eq & y_n, Dir.S: x_eq & y_s,
                    Dir.P: x_eq & here}
        for o, cond in want.items():
            if o in go and (o != Dir.P or self._specialised):
                m.d.comb += go[o].eq(cond)
        if not self._specialised:
            m.d.comb += go[Dir.P].eq(~Cat(*(go[o] for o in go if o != Dir.P)).any())
            return go, Const(0)
        return go, ~Cat(*go.values()).any()


def _mux_tree(sel: Value, items: Iterable[ValueLike]) -> ValueLike:
    """``items[sel]`` as a balanced tree of 2:1 muxes, low select bit first."""
    items = list(items)
    bit = 0
    while len(items) > 1:
        items = [Mux(sel[bit], items[j + 1], items[j]) if j + 1 < len(items) else items[j]
                 for j in range(0, len(items), 2)]
        bit += 1
    return items[0]
