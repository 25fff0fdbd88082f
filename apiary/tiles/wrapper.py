"""A tile around another tile: the base of opt-in stages between a tile and its router.

``d.add("app", SomeWrapper, at=(x, y), tile=AppTile, **app_params, **wrapper_params)`` places
``AppTile`` as usual, with the wrapper's stages on its data-plane NoC ports. Every other member
of the inner tile (its top-level ports, registers, wires to another tile, the control plane) is
passed through unchanged, and its counters keep their names beside the wrapper's own.

``SomeWrapper.of(AppTile, **params)`` is a tile class with the parameters bound and the inner
class's planes: the form to nest wrappers (``tile=RxGuardTile.of(AppTile, buffer_flits=64)``)
and to wrap a tile that is also on the control plane.
"""

from collections.abc import Mapping
from typing import Any

from amaranth import Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import connect, flipped

from ..tile import NOC_PORTS, Tile, TileEnv


__all__ = ["TileWrapper"]


class TileWrapper(Tile):
    """Build ``tile(env, **params)`` inside and stand in its place.

    A subclass takes its own keyword parameters out of ``params`` before calling
    ``super().__init__``, passes its own counters as ``counters``, and overrides
    :meth:`inbound` and/or :meth:`outbound`, which join the router's side of the data plane to
    the inner tile's (the default joins them directly).
    """

    #: Whether the wrapper may hold its input waiting for its output when the inner tile may
    #: (a wrapper whose inbound stage never waits says False).
    holds_input = True

    @classmethod
    def of(cls, tile: type, **params: Any) -> type:
        """A tile class: ``tile`` inside this wrapper, with ``params`` bound (more may be given
        to the constructor), declaring ``tile``'s planes to the layout graph."""
        def __init__(self: Any, env: TileEnv | None = None, **more: Any) -> None:
            cls.__init__(self, env, tile=tile, **params, **more)
        return type(f"{cls.__name__}_{tile.__name__}", (cls,), {
            "__init__": __init__, "planes": tuple(tile.planes), "controls": tile.controls,
            "streaming": tile.streaming and cls.holds_input})

    def __init__(self, env: TileEnv | None = None, *, tile: type, counters: Mapping | None = None,
                 **params: Any) -> None:
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

    def inbound(self, m: Module, router: Any, tile: Any) -> None:
        """Join ``router`` (the flits the router delivers) to ``tile`` (the inner ``noc_in``)."""
        connect(m, router=router, tile=tile)

    def outbound(self, m: Module, tile: Any, router: Any) -> None:
        """Join ``tile`` (the inner ``noc_out``) to ``router`` (the flits to inject)."""
        connect(m, tile=tile, router=router)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        inner = m.submodules.inner = self.inner
        self.inbound(m, flipped(self.noc_in), inner.noc_in)
        self.outbound(m, inner.noc_out, flipped(self.noc_out))
        if "ctl" in self.planes:
            connect(m, router=flipped(self.ctl_in), tile=inner.ctl_in)
            connect(m, tile=inner.ctl_out, router=flipped(self.ctl_out))
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
