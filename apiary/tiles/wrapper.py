"""A tile around another tile: the base of opt-in stages between a tile and its router.

``d.add("app", SomeWrapper, at=(x, y), tile=AppTile, **app_params, **wrapper_params)`` places
``AppTile`` as usual, with the wrapper's stages on its data-plane NoC ports. Every other member
of the inner tile (its top-level ports, registers, wires to another tile, the control plane) is
passed through unchanged, and its counters keep their names beside the wrapper's own.

``SomeWrapper.of(AppTile, **params)`` is a tile class with the parameters bound and the inner
class's planes: the form to nest wrappers (``tile=RxGuardTile.of(AppTile, buffer_flits=64)``)
and to wrap a tile that is also on the control plane.

A wrapper's message ports (:mod:`apiary.noc.ports`) are the router's side of its planes, as
flits (``raw``): ``to_tile`` (what the router delivers) and ``from_tile`` (what the inner tile
sends), of any type, whatever the inner tile declares. The layout check reads a tile's ports
from its class, and a wrapper's class does not know the tile it wraps (``tile=`` is a
parameter), so it checks no route into or out of a wrapped tile.
"""

from collections.abc import Mapping
from typing import Any

from amaranth import Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import connect, flipped

from ..tile import NOC_PORTS, Receive, Send, Tile, TileEnv


__all__ = ["TileWrapper"]


class TileWrapper(Tile):
    """Build ``tile(env, **params)`` inside and stand in its place.

    A subclass takes its own keyword parameters out of ``params`` before calling
    ``super().__init__``, passes its own counters as ``counters``, and overrides
    :meth:`inbound` and/or :meth:`outbound`, which join the router's side of the data plane
    (the wrapper's message ports: ``to_tile`` in, ``from_tile`` out, raw flits of any type) to
    the inner tile's (the default joins them directly). A subclass that takes some messages
    itself declares an input for them before ``to_tile``, which then gets every other type
    (:class:`~apiary.tiles.tx_credit.TxCreditTile`). On the control plane (a tile wrapped with
    :meth:`of`), ``ctl_to_tile`` and ``ctl_from_tile`` join the router to the inner tile
    directly.
    """

    #: Whether the wrapper may hold its input waiting for its output when the inner tile may
    #: (a wrapper whose inbound stage never waits says False).
    holds_input = True
    inputs: tuple[Receive, ...] = (Receive("to_tile", raw=True),)
    outputs: tuple[Send, ...] = (Send("from_tile", raw=True),)

    @classmethod
    def of(cls, tile: type[Tile], **params: Any) -> type:
        """A tile class: ``tile`` inside this wrapper, with ``params`` bound (more may be given
        to the constructor), declaring ``tile``'s planes to the layout graph."""
        def __init__(self: Any, env: TileEnv | None = None, **more: Any) -> None:
            cls.__init__(self, env, tile=tile, **params, **more)
        inputs = tuple(p for p in cls.inputs if p.plane != "ctl")
        outputs = tuple(p for p in cls.outputs if p.plane != "ctl")
        if "ctl" in tile.planes:
            inputs += (Receive("ctl_to_tile", plane="ctl", raw=True),)
            outputs += (Send("ctl_from_tile", plane="ctl", raw=True),)
        return type(f"{cls.__name__}_{tile.__name__}", (cls,), {
            "__init__": __init__, "planes": tuple(tile.planes), "controls": tile.controls,
            "streaming": tile.streaming and cls.holds_input, "inputs": inputs,
            "outputs": outputs})

    def __init__(self, env: TileEnv | None = None, *, tile: type[Tile],
                 counters: Mapping | None = None, **params: Any) -> None:
        if not (isinstance(tile, type) and issubclass(tile, Tile)):
            raise ValueError(f"{type(self).__name__}: tile= must be a Tile class, not {tile!r}")
        if tuple(tile.planes) != tuple(self.planes):
            raise ValueError(f"{type(self).__name__}: {tile.__name__} is on planes "
                             f"{tuple(tile.planes)}; wrap it as "
                             f"{type(self).__name__}.of({tile.__name__}, ...)")
        if "data" not in tile.planes:
            raise ValueError(f"{type(self).__name__}: {tile.__name__} is not on the data plane")
        env = env if env is not None else TileEnv()
        self.inner = tile(env, **params)
        self.streaming = self.inner.streaming and self.holds_input
        noc = {p for pair in NOC_PORTS.values() for p in pair}
        inner_members = self.inner.signature.members
        members = {name: member for name, member in inner_members.items()
                   if name not in noc and name != "counters"}
        all_counters: dict[str, Any] = {}
        if "counters" in inner_members:
            sig = inner_members["counters"].signature
            for name, member in sig.members.items():
                all_counters[name] = (Shape.cast(member.shape).width, sig.descriptions[name])
        for name, spec in (counters or {}).items():
            if name in all_counters:
                raise ValueError(f"{type(self).__name__}: counter {name!r} clashes with one of "
                                 f"{tile.__name__}'s")
            all_counters[name] = spec
        super().__init__(env, members=members, counters=all_counters)

    def inbound(self, m: Module, ports: Any, tile: Any) -> None:
        """Join ``ports.to_tile`` (the flits the router delivers; ``ports``: the wrapper's
        data-plane message ports) to ``tile`` (the inner ``noc_in``)."""
        connect(m, router=ports.to_tile, tile=tile)

    def outbound(self, m: Module, tile: Any, ports: Any) -> None:
        """Join ``tile`` (the inner ``noc_out``) to ``ports.from_tile`` (the flits to
        inject)."""
        connect(m, tile=tile, router=ports.from_tile)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        inner = m.submodules.inner = self.inner
        ports = self.message_ports(m)
        self.inbound(m, ports, inner.noc_in)
        self.outbound(m, inner.noc_out, ports)
        if "ctl" in self.planes:
            ctl = self.message_ports(m, "ctl")
            connect(m, router=ctl.ctl_to_tile, tile=inner.ctl_in)
            connect(m, tile=inner.ctl_out, router=ctl.ctl_from_tile)
        for name, member in inner.signature.members.items():
            if name in NOC_PORTS["data"] + NOC_PORTS["ctl"]:
                continue
            if name == "counters":
                for counter in member.signature.members:
                    m.d.comb += getattr(self.counters, counter).eq(
                        getattr(inner.counters, counter))
            elif member.is_port and member.flow == wiring.Out:
                m.d.comb += getattr(self, name).eq(getattr(inner, name))
            elif member.is_port:
                m.d.comb += getattr(inner, name).eq(getattr(self, name))
            else:
                connect(m, outer=flipped(getattr(self, name)), tile=getattr(inner, name))
        return m
