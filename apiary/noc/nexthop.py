"""A tile's next-hop table: from a routing key to the endpoint a message goes to."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from amaranth import Module, Signal, Cat, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .header import Fbits, routing_header


__all__ = ["Endpoint", "NextHopTable", "first_hop", "address_of"]


@dataclass(frozen=True)
class Endpoint:
    """Where a message goes: a tile by name, its coordinates and its sub-port (fbits)."""
    name: str
    x: int
    y: int
    fbits: int = Fbits.LOCAL0


def first_hop(routes: Mapping[Any, list[Endpoint]], *keys: Any) -> Endpoint | None:
    """The first endpoint under the first of ``keys`` that ``routes`` (a tile's next-hop table
    for one plane) has, or ``None``."""
    for key in keys:
        hops = routes.get(key) or []
        if hops:
            return hops[0]
    return None


def address_of(hop: Endpoint | None, fbits: int = Fbits.LOCAL0) -> tuple[int, int, int]:
    """``(x, y, fbits)`` of ``hop``; ``(0, 0, fbits)`` when there is none (a tile built on its
    own, without routes, as in a test)."""
    return (hop.x, hop.y, hop.fbits) if hop is not None else (0, 0, fbits)


class NextHopTable(wiring.Component):
    """Look a key up in a table fixed at elaboration and give the endpoint to send to.

    ``entries`` is a tile's next-hop table for one plane, ``{key: [Endpoint, ...]}`` (see
    :meth:`apiary.tile.TileEnv.next_hops`): ``key`` is an integer (an EtherType, an IP protocol,
    a port...) or ``None`` for the default entry, used when no other key matches. Several
    endpoints under one key are replicas: each entry keeps its own round-robin pointer, which
    moves to the next replica on every cycle with ``lookup`` high while that entry is the one
    matched.

    Latency: 0 cycles (the match is combinational, a small CAM of comparators); one lookup per
    cycle. With no matching key and no default, ``hit`` is 0 and the outputs are 0; the caller
    drops the message and counts it.

    Parameters
    ----------
    entries : dict
        ``{key: [Endpoint, ...]}``, key an int below ``2**key_width`` or ``None``.
    key_width : int
        Width of ``key`` in bits.

    Members
    -------
    key : In(key_width)
        The key to look up.
    lookup : In(1)
        Strobe: the lookup is used; advance the matched entry's round-robin pointer.
    hit : Out(1)
        A key matched, or there is a default entry.
    dst_x, dst_y : Out(8)
        The endpoint's coordinates.
    dst_fbits : Out(4)
        The endpoint's sub-port.

    Raises
    ------
    ValueError
        If ``key_width`` is not a positive integer, a key is neither an integer that fits
        ``key_width`` nor ``None``, an endpoint list is empty or holds something other than an
        :class:`Endpoint`, or an endpoint's coordinates or fbits do not fit the
        header's fields.
    """

    def __init__(self, entries: Mapping[int | None, Iterable[Endpoint]], key_width: int) -> None:
        if not isinstance(key_width, int) or isinstance(key_width, bool) or key_width < 1:
            raise ValueError(f"NextHopTable needs a positive key width, not {key_width!r}.")
        hdr = routing_header()
        limits = {"x": hdr.width("dst_x"), "y": hdr.width("dst_y"), "fbits": hdr.width("dst_fbits")}
        self._entries = {}
        for key, endpoints in dict(entries).items():
            if key is not None and (not isinstance(key, int) or isinstance(key, bool)
                                    or not 0 <= key < (1 << key_width)):
                raise ValueError(f"NextHopTable: key {key!r} is neither None nor an integer "
                                 f"that fits in {key_width} bits.")
            endpoints = list(endpoints)
            if not endpoints:
                raise ValueError(f"NextHopTable: key {key!r} has no endpoints; give at least one.")
            for ep in endpoints:
                if not isinstance(ep, Endpoint):
                    raise ValueError(f"NextHopTable: key {key!r} lists {ep!r}, which is not an "
                                     f"Endpoint.")
                for attr, bits in limits.items():
                    value = getattr(ep, attr)
                    if not isinstance(value, int) or not 0 <= value < (1 << bits):
                        raise ValueError(f"NextHopTable: endpoint {ep.name!r} under key {key!r} "
                                         f"has {attr}={value!r}, which does not fit in {bits} "
                                         f"bits.")
            self._entries[key] = endpoints
        self._key_width = key_width
        super().__init__({
            "key": In(key_width),
            "lookup": In(1),
            "hit": Out(1),
            "dst_x": Out(limits["x"]),
            "dst_y": Out(limits["y"]),
            "dst_fbits": Out(limits["fbits"]),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        exact = {key: self.key == key for key in self._entries if key is not None}
        any_exact = Signal()
        m.d.comb += any_exact.eq(Cat(*exact.values()).any() if exact else 0)
        for number, (key, endpoints) in enumerate(self._entries.items()):
            selected = Signal(name=f"selected{number}")
            m.d.comb += selected.eq(~any_exact if key is None else exact[key])
            pointer = Signal(range(len(endpoints)), name=f"rr{number}")
            with m.If(selected):
                m.d.comb += self.hit.eq(1)
                with m.Switch(pointer):
                    for k, ep in enumerate(endpoints):
                        with m.Case(k):
                            m.d.comb += [self.dst_x.eq(ep.x), self.dst_y.eq(ep.y),
                                         self.dst_fbits.eq(ep.fbits)]
                with m.If(self.lookup):
                    m.d.sync += pointer.eq(Mux(pointer == len(endpoints) - 1, 0, pointer + 1))
        return m
