"""PacketQueue alone (a PacketBuffer's queue of stored packets): byte counts and verdicts in
order on ``head``, ``room``, the rules for ``verdict.ready``, ``rejected``."""

import pytest

from apiary.stream.packet_buffer import PacketQueue
from apiary.stream.testbench import simulate, stream_get


async def push(ctx, dut, nbytes, *, accepted=True):
    """One packet pushed (with the writer's ``accepted`` pulse in the same cycle)."""
    ctx.set(dut.push.valid, 1)
    ctx.set(dut.push.payload, nbytes)
    ctx.set(dut.accepted, int(accepted))
    await ctx.tick()
    ctx.set(dut.push.valid, 0)
    ctx.set(dut.accepted, 0)


async def judge(ctx, dut, ok, info=None):
    ctx.set(dut.verdict.valid, 1)
    ctx.set(dut.verdict.payload, {"ok": ok} if info is None else {"ok": ok, "info": info})
    assert ctx.get(dut.verdict.ready)
    await ctx.tick()
    ctx.set(dut.verdict.valid, 0)


def test_head_offers_judged_packets_in_order_and_room_counts_the_queue():
    dut = PacketQueue(max_bytes=200, max_queued=3, info_width=4)

    async def tb(ctx):
        assert ctx.get(dut.room) and not ctx.get(dut.head.valid)
        assert not ctx.get(dut.verdict.ready)               # nothing waits for a verdict
        for n in (10, 0, 200):
            await push(ctx, dut, n)
        assert not ctx.get(dut.room)                        # max_queued packets
        assert not ctx.get(dut.head.valid)                  # none judged yet
        await judge(ctx, dut, 1, 5)
        assert ctx.get(dut.head.valid)                      # the cycle after its verdict
        await judge(ctx, dut, 0, 6)
        await judge(ctx, dut, 1, 7)
        assert not ctx.get(dut.verdict.ready)
        heads = [await stream_get(ctx, dut.head) for _ in range(3)]
        assert [(int(h.bytes), int(h.ok), int(h.info)) for h in heads] == [
            (10, 1, 5), (0, 0, 6), (200, 1, 7)]
        assert ctx.get(dut.room) and not ctx.get(dut.head.valid)
        assert ctx.get(dut.rejected) == 1

    simulate(dut, tb, timeout=200)


@pytest.mark.parametrize("late", [False, True])
def test_a_verdict_may_come_with_the_push_unless_late(late):
    """``verdict.ready`` rises with ``accepted`` in the cycle of the push; with
    ``late_verdicts`` only the cycle after."""
    dut = PacketQueue(max_bytes=50, max_queued=2, late_verdicts=late)

    async def tb(ctx):
        ctx.set(dut.accepted, 1)
        assert ctx.get(dut.verdict.ready) == (not late)
        ctx.set(dut.accepted, 0)
        await push(ctx, dut, 7)
        assert ctx.get(dut.verdict.ready)
        await judge(ctx, dut, 1)
        head = await stream_get(ctx, dut.head)
        assert (int(head.bytes), int(head.ok)) == (7, 1)

    simulate(dut, tb, timeout=100)


def test_without_verdicts_a_push_is_on_head_the_next_cycle():
    dut = PacketQueue(max_bytes=30, max_queued=1, verdict=False)
    assert "verdict" not in dut.signature.members
    assert "ok" not in {n for n, _ in dut.head.payload.shape()}

    async def tb(ctx):
        await push(ctx, dut, 30)
        assert ctx.get(dut.head.valid) and not ctx.get(dut.room)
        assert int((await stream_get(ctx, dut.head)).bytes) == 30
        assert ctx.get(dut.room) and not ctx.get(dut.head.valid)

    simulate(dut, tb, timeout=100)
