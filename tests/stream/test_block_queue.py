"""BlockQueue (apiary/stream/block_queue.py) against Queue, cycle for cycle: the same random
offers and takes into both, and in every cycle the same ``i.ready``, ``o.valid`` and
``o.payload``, at depths that wrap and at a depth that is not a power of two."""

import random

import pytest
from amaranth import Module

from apiary.stream.block_queue import BLOCK_QUEUE_DEPTH, BlockQueue, deep_queue
from apiary.stream.queue import Queue
from apiary.stream.testbench import simulate


@pytest.mark.parametrize("depth,offer,take", [(4, 0.7, 0.5), (8, 0.9, 0.3), (16, 0.5, 0.9),
                                              (5, 0.6, 0.6), (64, 0.8, 0.8)])
def test_block_queue_matches_queue_cycle_for_cycle(depth, offer, take):
    rng = random.Random(depth * 7 + int(offer * 10))
    m = Module()
    m.submodules.ref = ref = Queue(12, depth)
    m.submodules.dut = dut = BlockQueue(12, depth)
    passed = []

    async def bench(ctx):
        value = 0
        for cycle in range(3000):
            # Long stretches of one kind fill it and empty it.
            phase = (cycle // 200) % 3
            p_offer = (offer, 1.0, 0.1)[phase]
            p_take = (take, 0.1, 1.0)[phase]
            valid, ready = rng.random() < p_offer, rng.random() < p_take
            for q in (ref, dut):
                ctx.set(q.i.valid, valid)
                ctx.set(q.i.payload, value)
                ctx.set(q.o.ready, ready)
            seen = [(ctx.get(q.i.ready), ctx.get(q.o.valid),
                     ctx.get(q.o.payload) if ctx.get(q.o.valid) else None) for q in (ref, dut)]
            assert seen[0] == seen[1], f"cycle {cycle}: Queue {seen[0]}, BlockQueue {seen[1]}"
            if valid and seen[0][0]:
                value = (value + 1) & 0xFFF
            if ready and seen[0][1]:
                passed.append(seen[0][2])
            await ctx.tick()

    simulate(m, bench, timeout=4000)
    assert passed == list(range(len(passed))) and len(passed) > 500


def test_depth_is_checked():
    with pytest.raises(ValueError, match="at least 2"):
        BlockQueue(8, 1)


def test_deep_queue_is_a_block_queue_from_512_up():
    assert isinstance(deep_queue(12, 256), Queue)
    assert isinstance(deep_queue(12, BLOCK_QUEUE_DEPTH), BlockQueue)
