"""NextHopTable: exact hits, misses, the default entry, round-robin among replicas."""

import pytest

from apiary.noc import Fbits
from apiary.stream.testbench import simulate
from apiary.noc.nexthop import NextHopTable
from apiary.tile import Endpoint


IP = Endpoint("ip", 1, 2, Fbits.LOCAL0)
V6 = [Endpoint("v6a", 3, 0), Endpoint("v6b", 3, 1, Fbits.LOCAL1), Endpoint("v6c", 255, 255)]
ANY = [Endpoint("log", 0, 7, Fbits.LOCAL2), Endpoint("log2", 0, 8, Fbits.LOCAL3)]


def where(ctx, dut):
    return (ctx.get(dut.hit), ctx.get(dut.dst_x), ctx.get(dut.dst_y), ctx.get(dut.dst_fbits))


def hop(ep):
    return (1, ep.x, ep.y, ep.fbits)


def test_hits_default_and_round_robin():
    dut = NextHopTable({0x0800: [IP], 0x86dd: V6, None: ANY}, 16)

    async def tb(ctx):
        ctx.set(dut.key, 0x0800)
        assert where(ctx, dut) == hop(IP)
        ctx.set(dut.lookup, 1)
        await ctx.tick()
        assert where(ctx, dut) == hop(IP)               # a single endpoint stays put

        ctx.set(dut.key, 0x86dd)
        seen = []
        for _ in range(7):                              # strobe every cycle: B, C, A, B, ...
            seen.append(where(ctx, dut))
            await ctx.tick()
        assert seen == [hop(V6[k % 3]) for k in range(7)]

        ctx.set(dut.lookup, 0)                          # no strobe, no advance
        first = where(ctx, dut)
        await ctx.tick().repeat(3)
        assert where(ctx, dut) == first == hop(V6[7 % 3])

        ctx.set(dut.key, 0x1234)                        # no exact key: the default entry
        assert where(ctx, dut) == hop(ANY[0])
        ctx.set(dut.lookup, 1)
        await ctx.tick()
        assert where(ctx, dut) == hop(ANY[1])
        await ctx.tick()
        assert where(ctx, dut) == hop(ANY[0])
        ctx.set(dut.lookup, 0)

        ctx.set(dut.key, 0x86dd)                        # the pointers are per entry
        assert where(ctx, dut) == first

    simulate(dut, tb)


def test_miss_without_default():
    dut = NextHopTable({5: [IP], 6: V6[:2]}, 4)

    async def tb(ctx):
        ctx.set(dut.key, 7)
        assert where(ctx, dut) == (0, 0, 0, 0)
        ctx.set(dut.lookup, 1)                          # a strobe on a miss changes nothing
        await ctx.tick()
        ctx.set(dut.lookup, 0)
        assert where(ctx, dut) == (0, 0, 0, 0)
        ctx.set(dut.key, 6)
        assert where(ctx, dut) == hop(V6[0])
        ctx.set(dut.key, 5)
        assert where(ctx, dut) == hop(IP)
        ctx.set(dut.key, 0)
        assert ctx.get(dut.hit) == 0

    simulate(dut, tb)


def test_default_only():
    dut = NextHopTable({None: [IP]}, 8)

    async def tb(ctx):
        for key in (0, 17, 255):
            ctx.set(dut.key, key)
            assert where(ctx, dut) == hop(IP)

    simulate(dut, tb)


@pytest.mark.parametrize("entries, width, message", [
    ({256: [IP]}, 8, "neither None nor an integer that fits in 8 bits"),
    ({-1: [IP]}, 8, "neither None nor an integer"),
    ({"udp": [IP]}, 8, "neither None nor an integer"),
    ({1: []}, 8, "key 1 has no endpoints"),
    ({None: []}, 8, "key None has no endpoints"),
    ({1: [(1, 2)]}, 8, "not an Endpoint"),
    ({1: [Endpoint("far", 256, 0)]}, 8, "'far' under key 1 has x=256, which does not fit in 8"),
    ({1: [Endpoint("neg", 0, -1)]}, 8, "has y=-1"),
    ({1: [Endpoint("sub", 0, 0, 16)]}, 8, "has fbits=16, which does not fit in 4 bits"),
    ({1: [IP]}, 0, "positive key width"),
])
def test_bad_entries(entries, width, message):
    with pytest.raises(ValueError, match=message):
        NextHopTable(entries, width)
