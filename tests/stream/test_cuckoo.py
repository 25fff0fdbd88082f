"""The cuckoo hash table with a stash (apiary/stream/cuckoo.py), FlexDriver's descriptor
translation: every answer as a Python dict gives it under random churn at load ½, entries in
one of their places or the stash, a full stash stalling insertions until a removal, and a
command every 3 cycles."""

import random

import pytest

from apiary.stream.cuckoo import CuckooOp, CuckooTable, bank_hashes, cuckoo_places
from apiary.stream.testbench import simulate, stream_get, stream_put

KEY_BITS, VALUE_BITS = 20, 12


async def command(ctx, dut, op, key, value=0):
    await stream_put(ctx, dut.command, {"op": op, "key": key, "value": value})
    answer = await stream_get(ctx, dut.answer)
    return bool(answer.found), int(answer.value)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_churn_at_load_one_half_answers_as_a_dict_does(seed):
    depth, banks = 16, 4                            # 64 places, at most 32 keys held
    dut = CuckooTable(KEY_BITS, VALUE_BITS, depth, banks=banks)
    rng = random.Random(seed)
    stats = {"ops": 0, "stash_peak": 0}

    async def watch(ctx):
        async for _, _, used in ctx.tick().sample(dut.stash_used):
            stats["stash_peak"] = max(stats["stash_peak"], used)

    async def bench(ctx):
        held: dict[int, int] = {}
        for _ in range(500):
            roll = rng.random()
            if roll < 0.45 and len(held) < depth * banks // 2:
                key = rng.getrandbits(KEY_BITS) if rng.random() < 0.8 or not held \
                    else rng.choice(list(held))
                value = rng.getrandbits(VALUE_BITS)
                found, _ = await command(ctx, dut, CuckooOp.INSERT, key, value)
                assert found == (key in held)
                held[key] = value
            elif roll < 0.7 and held:
                key = rng.choice(list(held)) if rng.random() < 0.8 else rng.getrandbits(KEY_BITS)
                found, _ = await command(ctx, dut, CuckooOp.REMOVE, key)
                assert found == (key in held)
                held.pop(key, None)
            else:
                key = rng.choice(list(held)) if held and rng.random() < 0.7 \
                    else rng.getrandbits(KEY_BITS)
                found, value = await command(ctx, dut, CuckooOp.LOOKUP, key)
                assert (found, value if found else None) == (key in held, held.get(key))
            stats["ops"] += 1
        for key, value in held.items():                  # everything is still there
            assert await command(ctx, dut, CuckooOp.LOOKUP, key) == (True, value)
        stats["evictions"] = ctx.get(dut.evictions)

    simulate(dut, bench, background=[watch], timeout=100_000)
    assert stats["ops"] == 500
    assert stats["evictions"] > 0                         # collisions happened and were moved
    assert stats["stash_peak"] < 4                        # ... and the stash never filled


def test_a_full_stash_stalls_insertions_until_an_entry_is_removed():
    depth, banks, stash = 2, 2, 4                          # 4 places and 4 stash entries
    dut = CuckooTable(KEY_BITS, VALUE_BITS, depth, banks=banks, stash=stash)
    keys = list(range(100, 108))                           # 8 entries: every place, every slot

    async def bench(ctx):
        for i, key in enumerate(keys):
            assert await command(ctx, dut, CuckooOp.INSERT, key, i) == (False, 0)
        await ctx.tick().repeat(20)
        assert ctx.get(dut.stash_used) == stash
        # A ninth key waits: the command is not taken while the stash is full.
        ctx.set(dut.command.payload, {"op": CuckooOp.INSERT, "key": 200, "value": 9})
        ctx.set(dut.command.valid, 1)
        for _ in range(50):
            await ctx.tick()
            assert not ctx.get(dut.command.ready)
        ctx.set(dut.command.valid, 0)
        # A key already there is replaced though, and lookups go on.
        assert await command(ctx, dut, CuckooOp.INSERT, keys[3], 33) == (True, 3)
        assert await command(ctx, dut, CuckooOp.LOOKUP, keys[3]) == (True, 33)
        # A removal makes room; the ninth goes in and every entry answers.
        assert await command(ctx, dut, CuckooOp.REMOVE, keys[0]) == (True, 0)
        assert await command(ctx, dut, CuckooOp.INSERT, 200, 9) == (False, 0)
        expected = {k: i for i, k in enumerate(keys)} | {keys[3]: 33, 200: 9}
        del expected[keys[0]]
        for key, value in expected.items():
            assert await command(ctx, dut, CuckooOp.LOOKUP, key) == (True, value)
        assert await command(ctx, dut, CuckooOp.LOOKUP, keys[0]) == (False, 0)

    simulate(dut, bench, timeout=20_000)


def test_a_command_every_three_cycles_and_the_hashes_python_uses():
    dut = CuckooTable(KEY_BITS, VALUE_BITS, 8)
    masks = bank_hashes(KEY_BITS, 3, 4)
    assert dut.masks == masks and len({tuple(cuckoo_places(k, masks)) for k in range(64)}) > 32

    async def bench(ctx):
        ctx.set(dut.answer.ready, 1)
        taken, answered = [], []
        k = 0
        for cycle in range(30):
            ctx.set(dut.command.payload, {"op": CuckooOp.INSERT, "key": k, "value": k})
            ctx.set(dut.command.valid, 1)
            if ctx.get(dut.command.ready):
                taken.append(cycle)
                k += 1
            if ctx.get(dut.answer.valid):
                answered.append(cycle)
            await ctx.tick()
        ctx.set(dut.command.valid, 0)
        assert taken == list(range(0, 30, 3))                # one command each 3 cycles
        assert answered == [c + 2 for c in taken if c + 2 < 30]   # answered 2 cycles later

    simulate(dut, bench, timeout=2_000)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="power of two"):
        CuckooTable(8, 8, 12)
    with pytest.raises(ValueError, match="2 or more banks"):
        CuckooTable(8, 8, 8, banks=1)
