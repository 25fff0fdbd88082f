"""A monitor's quarantine and release (apiary/os/monitor_release.py), alone: a fault
quarantines, a RELEASE of a tile not quarantined is a kill (it quarantines and releases it),
a release walks every row once
(one per cycle its queue is ready), gives back the owned rows' memory, clears every row, and
lifts the quarantine together with the reset, entries + 1 cycles after it began."""

import random

import pytest

from apiary.os.monitor_release import Release
from apiary.os.uapi import KernelMsgType as K
from apiary.stream.testbench import simulate


ENTRIES = 8
MANAGER = (3, 0)
ROWS = [dict(valid=v, owner=o, root=0x100 + i)
        for i, (v, o) in enumerate([(1, 1), (0, 1), (1, 0), (1, 1), (0, 0), (0, 0), (1, 1),
                                    (1, 0)])]


@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_release_walks_the_table_then_lifts_the_quarantine(stall):
    dut = Release(ENTRIES, MANAGER)
    rng = random.Random(1)

    async def tb(ctx):
        ctx.set(dut.start, 1)                       # not quarantined: a kill
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert ctx.get(dut.releasing) and ctx.get(dut.quarantined)
        ctx.set(dut.to_kernel.ready, 1)
        while ctx.get(dut.releasing):               # (an empty table)
            await ctx.tick()
        assert not ctx.get(dut.quarantined)
        ctx.set(dut.fault, 1)
        await ctx.tick()
        ctx.set(dut.fault, 0)
        assert ctx.get(dut.quarantined) and not ctx.get(dut.releasing)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.quarantined)             # it stays until released
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        freed, cleared, cycles = [], [], 0
        while ctx.get(dut.releasing):
            assert ctx.get(dut.quarantined)
            ready = int(rng.random() >= stall)
            ctx.set(dut.to_kernel.ready, ready)
            slot = ctx.get(dut.walk.slot)
            ctx.set(dut.walk.entry, ROWS[slot] if len(cleared) < ENTRIES else {})
            if ctx.get(dut.to_kernel.valid):
                assert ready
                p = ctx.get(dut.to_kernel.payload)
                assert (p.msg_type, p.dst_x, p.dst_y) == (K.MM_FREE.value, *MANAGER)
                freed.append(p.meta.root)
            if ctx.get(dut.clear.en):
                assert ready
                cleared.append(ctx.get(dut.clear.slot))
            await ctx.tick()
            cycles += 1
        assert not ctx.get(dut.quarantined)
        assert cleared == list(range(ENTRIES))
        assert freed == [r["root"] for r in ROWS if r["valid"] and r["owner"]]
        if not stall:
            assert cycles == ENTRIES + 1

    simulate(dut, tb, timeout=500)


def test_a_fault_while_releasing_does_not_outlast_the_release():
    """The release ends the quarantine even if a fault comes in its last cycle."""
    dut = Release(2, MANAGER)

    async def tb(ctx):
        ctx.set(dut.to_kernel.ready, 1)
        ctx.set(dut.fault, 1)
        await ctx.tick()
        ctx.set(dut.fault, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().repeat(2)
        ctx.set(dut.fault, 1)                       # the cycle the walk ends
        await ctx.tick()
        ctx.set(dut.fault, 0)
        assert not ctx.get(dut.releasing) and not ctx.get(dut.quarantined)

    simulate(dut, tb, timeout=50)
