"""The buddy allocator: its Python model on its own, then the gateware against the model (random
alloc/free sequences, exact latencies, room and lookup outputs, double and misaligned frees,
exhaustion and full coalescing)."""

import random

import pytest

from apiary.os.buddy import BuddyAllocator, BuddyModel, BuddyOp
from apiary.stream.testbench import simulate, stream_get, stream_put, transfers


# -- the model -------------------------------------------------------------------------------------

def test_model_splits_lowest_first_and_coalesces_back():
    b = BuddyModel(8)
    assert [b.alloc(0), b.alloc(0), b.alloc(1), b.alloc(0)] == [0, 1, 2, 4]
    assert b.steps == 2                                 # 4-7 split twice: 5 and 6-7 free
    assert b.alloc(2) is None and b.room(1) and not b.room(2)
    assert b.level_of(2) == 1 and b.level_of(3) is None
    assert not b.free(2, 0) and not b.free(3, 1)        # wrong level, misaligned
    for index, level in [(0, 0), (1, 0), (2, 1), (4, 0)]:
        assert b.free(index, level)
    assert b.steps == 3 and b.free_nodes[3] == {0} and b.free_leaves() == 8
    assert not b.free(4, 0)                             # double free


# -- the gateware against the model ----------------------------------------------------------------

def run_ops(leaves, ops, *, stall=0.0, seed=0):
    """Apply ``ops`` (``("alloc", level)`` / ``("free", index, level)``) to a BuddyAllocator
    and to a BuddyModel side by side, asserting after each that the response, its latency
    (from the request's transfer to the response's first valid cycle), ``room``, the lookup
    port and ``bad_frees`` agree with the model. Returns the model."""
    dut = BuddyAllocator(leaves)
    model = BuddyModel(leaves)
    top = model.top
    rng = random.Random(seed)
    took, answered = [], []

    async def tb(ctx):
        bad = 0
        for op in ops:
            if op[0] == "alloc":
                level = op[1]
                want = model.alloc(level)
                await stream_put(ctx, dut.req, {"op": BuddyOp.ALLOC, "level": level, "index": 0},
                                 rng=rng, stall=stall)
                latency = 2 + model.steps
                expect = (want is not None, want or 0)
            else:
                index, level = op[1], op[2]
                ok = model.free(index, level)
                bad += not ok
                await stream_put(ctx, dut.req, {"op": BuddyOp.FREE, "level": level,
                                                "index": index}, rng=rng, stall=stall)
                latency = 3 + model.steps if ok else 2
                expect = (ok, 0)
            resp = await stream_get(ctx, dut.resp, rng=rng, stall=stall)
            assert (int(resp.ok), int(resp.index)) == expect, op
            if not stall:
                assert answered[-1] - took[-1] == latency, op
            assert ctx.get(dut.room) == sum(model.room(k) << k for k in range(top + 1))
            assert ctx.get(dut.bad_frees) == bad
            for index in rng.sample(range(leaves), min(leaves, 4)):
                ctx.set(dut.query_index, index)
                level = model.level_of(index)
                assert ctx.get(dut.query_found) == (level is not None), index
                if level is not None:
                    assert ctx.get(dut.query_level) == level

    simulate(dut, tb, background=[transfers(dut.req, took), transfers(dut.resp, answered)],
             timeout=100 * len(ops) + 100)
    return model


def random_ops(rng, leaves, count):
    """A random mix of allocations (every level, some above the top) and frees (mostly of
    live blocks, some double, misaligned or of the wrong level)."""
    top = leaves.bit_length() - 1
    model = BuddyModel(leaves)
    live, freed, ops = [], [], []
    for _ in range(count):
        r = rng.random()
        if r < 0.5 or not live:
            level = rng.choice([*range(top + 1), *range(min(2, top + 1)), top + 1])
            ops.append(("alloc", level))
            index = model.alloc(level)
            if index is not None:
                live.append((index, level))
        elif r < 0.9:
            index, level = live.pop(rng.randrange(len(live)))
            ops.append(("free", index, level))
            model.free(index, level)
            freed.append((index, level))
        else:                                       # a bad free of some kind
            index, level = rng.choice(freed or live)
            ops.append(rng.choice([("free", index, level), ("free", index | 1, max(level, 1)),
                                   ("free", index, min(level + 1, top + 1))]))
            model.free(*ops[-1][1:])
            live = [b for b in live if model.level_of(b[0]) == b[1]]
    return ops


@pytest.mark.parametrize("leaves, seed", [(16, 1), (32, 2), (64, 3)])
def test_random_allocs_and_frees_match_the_model(leaves, seed):
    """Three hundred random operations: every response, latency, room vector and lookup as
    the model says."""
    rng = random.Random(seed)
    run_ops(leaves, random_ops(rng, leaves, 300), seed=seed)


def test_random_ops_with_stalls_on_both_streams():
    rng = random.Random(9)
    run_ops(16, random_ops(rng, 16, 200), stall=0.4, seed=9)


def test_exhaust_then_free_everything_coalesces_to_one_block():
    """Allocate every leaf one by one (the first splits L times: the worst-case latency),
    then one more fails; free them all in a shuffled order (one free merges L times): the
    whole range is one block again and a top-level allocation succeeds."""
    leaves = 16
    order = list(range(leaves))
    random.Random(4).shuffle(order)
    ops = [("alloc", 0)] * (leaves + 1) + [("free", i, 0) for i in order] + [("alloc", 4)]
    model = run_ops(leaves, ops)
    assert model.free_nodes[4] == set() and model.used == {(4, 0)}


def test_double_free_is_ignored_and_flagged():
    """Freeing a block twice, at the wrong level, misaligned, or above the top level: ``ok``
    is 0, ``bad_frees`` counts each, and nothing changes (the next allocations are as the
    model says)."""
    ops = [("alloc", 1), ("alloc", 0), ("free", 0, 1), ("free", 0, 1), ("free", 2, 1),
           ("free", 2, 0), ("free", 3, 0), ("free", 0, 5), ("alloc", 2), ("alloc", 1),
           ("free", 2, 0), ("free", 2, 0), ("alloc", 0)]
    run_ops(8, ops)


def test_a_single_leaf():
    run_ops(1, [("alloc", 0), ("alloc", 0), ("free", 0, 0), ("free", 0, 0), ("alloc", 1),
                ("alloc", 0)])


def test_leaves_must_be_a_power_of_two():
    for leaves in (0, 3, 12, 2.0, True):
        with pytest.raises(ValueError, match="power of two"):
            BuddyAllocator(leaves)
