"""Per-tenant rate limits in front of a shared service (FlexDriver §7, the IoT experiment), with
the tenant taken from a source no tenant can forge.

Which tenant a message belongs to is decided here, from its ``src_x, src_y``: the Apiary
monitor of an untrusted tile writes its tile's own place there whatever the tile wrote
(:mod:`apiary.os.monitor`), and the table from places to tenants is the design's, fixed at
build time. So a tile that forges another tenant's source, or writes any tenant number into
its message, is still charged to its own tenant (FlexDriver: "untrusted VMs cannot control the
context ID tag"). Messages leave with that source unchanged: the service behind can index
per-tenant state (keys, counters) by it.
"""

from collections.abc import Mapping, Sequence
from typing import Any, cast

from amaranth import Module, Mux, Signal
from amaranth.lib.wiring import connect

from ..noc.gate import Verdict
from ..noc.rewrite import HeaderRewriter
from ..stream.token_bucket import Rate, TokenBucket
from ..tile import Receive, Send, Tile, TileEnv
from .sources import head_field, head_gate, match_source
from ..stream.counters import count


__all__ = ["TenantShaperTile", "tenant_places"]


def tenant_places(design: Any, tenants: Mapping[str, int]) -> dict[tuple[int, int], int]:
    """``{(x, y): tenant}`` from ``{tile name: tenant}``: the ``tenants=`` of a
    :class:`TenantShaperTile`, from the names the design gave its tiles (declare them first)."""
    places = {}
    for name, tenant in tenants.items():
        if name not in design.tiles:
            raise ValueError(f"tenant_places: the design has no tile {name!r} (declare it "
                             f"before the shaper)")
        decl = design.tiles[name]
        places[(decl.x, decl.y)] = tenant
    return places


class TenantShaperTile(Tile):
    """Police each tenant's messages to its :class:`~apiary.stream.token_bucket.Rate` (in flits)
    and send the rest to the next hop (key ``None``); only the destination is rewritten.

    A message whose tenant holds fewer tokens than its flits is dropped whole, counted in
    ``t<k>_dropped``: the shaper never holds its input for tokens (the service path must not
    stall, :mod:`apiary.tiles.rx_guard`). A sender that wants delay instead of loss uses the
    drain rates of :class:`~apiary.tiles.credit_queues.CreditQueuesTile`. A tenant with rate
    ``None`` is not limited (the shaper then only counts). Messages from a place in no tenant
    are dropped, counted in ``unknown_source``. ``t<k>_passed`` counts each tenant's messages
    sent on.

    Latency: 0 cycles at 128 bits and above (judged on the first flit); at 64 bits the two
    header flits are judged together (:class:`~apiary.noc.gate.MessageGate`, 2 cycles).
    Throughput: one flit per cycle. Cost: a token bucket per limited tenant.

    Parameters
    ----------
    tenants : mapping of (x, y) to int
        The tenant of each sending tile's place, 0 to ``len(rates) - 1``.
    rates : sequence of Rate or None
        Each tenant's limit.

    Message ports: ``messages`` in and ``forwarded`` out, any type, as flits (``raw``).
    """

    streaming = True
    inputs = (Receive("messages", raw=True),)
    outputs = (Send("forwarded", raw=True),)

    def __init__(self, env: TileEnv | None = None, *, tenants: Mapping[tuple[int, int], int],
                 rates: Sequence[Rate | None]) -> None:
        env = env if env is not None else TileEnv()
        self.rates = list(rates)
        if not self.rates or any(r is not None and not isinstance(r, Rate) for r in self.rates):
            raise ValueError(f"TenantShaperTile rates must be a list of Rate or None, one per "
                             f"tenant, not {rates!r}")
        self.tenants = {cast(tuple[int, int], tuple(place)): t
                        for place, t in dict(tenants).items()}
        for place, t in self.tenants.items():
            if not isinstance(t, int) or not 0 <= t < len(self.rates):
                raise ValueError(f"TenantShaperTile: place {place} has tenant {t!r}; tenants are "
                                 f"0 to {len(self.rates) - 1} (one per rate)")
        hops = env.next_hops("data").get(None, [])
        if len(hops) != 1:
            raise ValueError(f"TenantShaperTile {env.name!r} needs exactly one next hop (a route "
                             f"with key None), not {len(hops)}")
        self.next_hop = hops[0]
        counters: dict[str, Any] = {
            "unknown_source": "messages dropped: from a place that belongs to no tenant"}
        for k in range(len(self.rates)):
            counters[f"t{k}_passed"] = f"messages of tenant {k} sent on"
            counters[f"t{k}_dropped"] = f"messages of tenant {k} dropped over its rate"
        super().__init__(env, counters=counters)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        w, c = self.env.width, self.counters
        places = list(self.tenants)
        ports = self.message_ports(m)
        gate = head_gate(m, w)
        connect(m, router=ports.messages, gate=gate.i)
        found, index = match_source(m, w, gate.head, places)
        tenant = Signal(range(max(2, len(self.rates))))
        for k, place in enumerate(places):
            with m.If(index == k):
                m.d.comb += tenant.eq(self.tenants[place])
        cost = Signal(23)
        m.d.comb += cost.eq(head_field(w, gate.head, "msg_len") + 1)
        within = Signal()
        with m.If(found):
            m.d.comb += within.eq(1)
        for k, rate in enumerate(self.rates):
            if rate is None:
                continue
            bucket = m.submodules[f"t{k}_rate"] = TokenBucket(rate)
            m.d.comb += [bucket.cost.eq(Mux(cost > rate.burst, rate.burst, cost)),
                         bucket.take.eq(gate.accept & found & (tenant == k))]
            with m.If(tenant == k):
                m.d.comb += within.eq(found & bucket.ok)
        m.d.comb += gate.verdict.eq(Mux(within, Verdict.PASS, Verdict.DROP))
        with m.If(gate.accept):
            with m.If(~found):
                count(m, c.unknown_source)
            for k in range(len(self.rates)):
                passed, dropped = getattr(c, f"t{k}_passed"), getattr(c, f"t{k}_dropped")
                with m.If(found & (tenant == k) & within):
                    m.d.sync += passed.eq(passed + 1)
                with m.If(found & (tenant == k) & ~within):
                    m.d.sync += dropped.eq(dropped + 1)
        hop = self.next_hop
        m.submodules.rewrite = rewrite = HeaderRewriter(w, {
            "dst_x": hop.x, "dst_y": hop.y, "dst_fbits": hop.fbits})
        connect(m, gate=gate.o, rewrite=rewrite.i)
        connect(m, rewrite=rewrite.o, router=ports.forwarded)
        return m
