"""The set-associative TLB (apiary/os/tlb.py) against its Python model: on seeded random access
traces every lookup's hit or miss, and a hit's translation, equal the model's (so fills and
round-robin replacement match); lookups take 1 cycle and fills 2; a flush forgets every
translation in one cycle per set; bad geometries are refused with a sentence."""

import random

import pytest

from apiary.os.tlb import COYOTE_2M, COYOTE_4K, Tlb, TlbConfig, TlbModel
from apiary.stream.testbench import simulate


def frame_of(vpage: int) -> int:
    """A physical base for a page (any function will do, as long as the test knows it)."""
    return ((vpage * 7919) % 4096) << 12


def trace(rng: random.Random, n: int, pages: int, page_bits: int) -> list[int]:
    """``n`` addresses over ``pages`` pages, with locality: mostly the recent pages."""
    out, recent = [], []
    for _ in range(n):
        if recent and rng.random() < 0.6:
            vpage = rng.choice(recent[-4:])
        else:
            vpage = rng.randrange(pages)
        recent.append(vpage)
        out.append(vpage << page_bits | rng.randrange(1 << page_bits))
    return out


def run_trace(config: TlbConfig, addresses: list[int],
              flushes: frozenset[int] = frozenset()) -> tuple[list, dict]:
    """Drive ``addresses`` through a Tlb, filling each miss from :func:`frame_of` and flushing
    before each lookup whose index is in ``flushes``; return what each lookup gave (``None`` or
    ``(base, mem_x, mem_y, perm)``) and cycle counts."""
    dut = Tlb(config)
    seen: list = []
    cycles: dict[str, set] = {"lookup": set(), "fill": set(), "flush": set()}

    async def tb(ctx):
        for i, vaddr in enumerate(addresses):
            if i in flushes:
                ctx.set(dut.flush, 1)
                await ctx.tick()
                ctx.set(dut.flush, 0)
                took = 1
                while ctx.get(dut.busy):
                    await ctx.tick()
                    took += 1
                cycles["flush"].add(took)
            ctx.set(dut.lookup, vaddr)
            await ctx.tick()
            waited = 1
            while not ctx.get(dut.result.valid):
                await ctx.tick()
                waited += 1
            cycles["lookup"].add(waited)
            res = ctx.get(dut.result)
            assert res.vpage == vaddr >> config.page_bits
            if res.hit:
                seen.append((res.base, res.mem_x, res.mem_y, res.perm))
                continue
            seen.append(None)
            vpage = vaddr >> config.page_bits
            ctx.set(dut.fill.payload, {"vaddr": vaddr, "base": frame_of(vpage),
                                       "mem_x": vpage & 7, "mem_y": 1, "perm": vpage & 3})
            ctx.set(dut.fill.valid, 1)
            await ctx.tick().until(dut.fill.ready)
            ctx.set(dut.fill.valid, 0)
            took = 1
            while not ctx.get(dut.fill.ready):
                await ctx.tick()
                took += 1
            cycles["fill"].add(took)     # the accepting cycle and the write
    simulate(dut, tb, timeout=20 * len(addresses) + 100)
    return seen, cycles


def model_trace(config: TlbConfig, addresses: list[int],
                flushes: frozenset[int] = frozenset()) -> list:
    model, out = TlbModel(config), []
    for i, vaddr in enumerate(addresses):
        if i in flushes:
            model.flush()
        entry = model.lookup(vaddr)
        if entry is None:
            vpage = vaddr >> config.page_bits
            out.append(None)
            model.fill(vaddr, frame_of(vpage), vpage & 7, 1, vpage & 3)
        else:
            out.append((entry.base, entry.mem_x, entry.mem_y, entry.perm))
    return out


@pytest.mark.parametrize("config,pages,seed", [
    (TlbConfig(sets=4, ways=2), 24, 1),
    (TlbConfig(sets=8, ways=4), 64, 2),
    (TlbConfig(sets=1, ways=4, page_bits=21), 9, 3),
    (TlbConfig(sets=16, ways=1), 40, 4),
])
def test_random_trace_matches_the_model(config, pages, seed):
    rng = random.Random(seed)
    addresses = trace(rng, 300, pages, config.page_bits)
    seen, cycles = run_trace(config, addresses)
    expected = model_trace(config, addresses)
    assert seen == expected
    hits = sum(1 for s in seen if s is not None)
    # The trace revisits pages and overflows the TLB, so it has hits, misses and replacements.
    assert 0 < hits < len(seen)
    assert pages > config.entries
    assert cycles == {"lookup": {1}, "fill": {2}, "flush": set()}


@pytest.mark.parametrize("config", [TlbConfig(sets=4, ways=2), TlbConfig(sets=1, ways=4)])
def test_a_flush_forgets_every_translation(config):
    rng = random.Random(5)
    addresses = trace(rng, 200, 12, config.page_bits)
    flushes = frozenset(range(40, 200, 40))
    seen, cycles = run_trace(config, addresses, flushes)
    assert seen == model_trace(config, addresses, flushes)
    # Right after each flush the page looked up misses, though it was just used.
    assert all(seen[i] is None for i in flushes)
    assert cycles["flush"] == {config.sets + 1}        # the strobe, then a set per cycle


def test_full_set_replaces_round_robin():
    config = TlbConfig(sets=2, ways=2)
    page = config.page_bytes
    # Pages 0, 2, 4, 6 all map to set 0: fill 0 and 2, then 4 replaces 0, 6 replaces 2.
    addresses = [0, 2 * page, 0, 4 * page, 0, 2 * page, 6 * page, 4 * page]
    seen, _ = run_trace(config, addresses)
    hit = [s is not None for s in seen]
    assert hit == [False, False, True, False, False, False, False, False]
    assert seen == model_trace(config, addresses)


def test_coyote_geometries_and_bad_configs():
    assert (COYOTE_4K.sets, COYOTE_4K.ways, COYOTE_4K.page_bytes) == (1024, 4, 4096)
    assert (COYOTE_2M.sets, COYOTE_2M.ways, COYOTE_2M.page_bytes) == (64, 2, 2 << 20)
    with pytest.raises(ValueError, match="sets must be a power of two"):
        TlbConfig(sets=12)
    with pytest.raises(ValueError, match="ways must be 1 to 8"):
        TlbConfig(ways=0)
    with pytest.raises(ValueError, match="page_bits must be 12"):
        TlbConfig(page_bits=8)
    with pytest.raises(ValueError, match="needs a TlbConfig"):
        Tlb("4k")
