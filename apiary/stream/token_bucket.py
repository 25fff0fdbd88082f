"""A token bucket: a rate and a burst, as a component (shapers, policers, drain limits)."""

from dataclasses import dataclass
from typing import Any

from amaranth import Module, Signal, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["Rate", "TokenBucket"]


@dataclass(frozen=True)
class Rate:
    """``refill`` tokens every ``period`` cycles, at most ``burst`` held (the bucket starts
    full): a long-run rate of ``refill / period`` tokens per cycle."""
    burst: int
    refill: int = 1
    period: int = 1

    def __post_init__(self) -> None:
        for name in ("burst", "refill", "period"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value < 1 << 24:
                raise ValueError(f"Rate {name} must be an integer from 1 to 2**24 - 1, not "
                                 f"{value!r}")

    @property
    def per_cycle(self) -> float:
        return self.refill / self.period


class TokenBucket(wiring.Component):
    """Tokens for a :class:`Rate`: ``ok`` says whether ``cost`` tokens are held; ``take`` (in
    a cycle with ``ok``) spends them. Combinational ``ok``; the count updates each cycle.

    Members
    -------
    cost : In(range(burst + 1))
    ok : Out(1)
    take : In(1)
    tokens : Out(range(burst + 1))
    """

    def __init__(self, rate: Rate) -> None:
        if not isinstance(rate, Rate):
            raise TypeError(f"a TokenBucket needs a Rate, not {rate!r}")
        self.rate = rate
        super().__init__({
            "cost": In(range(rate.burst + 1)),
            "ok": Out(1),
            "take": In(1),
            "tokens": Out(range(rate.burst + 1), init=rate.burst),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        rate = self.rate
        tick = Signal(range(rate.period))
        refill = Signal()
        m.d.comb += [refill.eq(tick == rate.period - 1), self.ok.eq(self.tokens >= self.cost)]
        m.d.sync += tick.eq(Mux(refill, 0, tick + 1))
        after = Signal(range(rate.burst + rate.refill + 1))
        m.d.comb += after.eq(self.tokens - Mux(self.take & self.ok, self.cost, 0)
                             + Mux(refill, rate.refill, 0))
        m.d.sync += self.tokens.eq(Mux(after > rate.burst, rate.burst, after))
        return m
