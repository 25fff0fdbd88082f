"""CommitQueue (beehive/proto/tcp/rx.py) alone: commits leave in order, each one that waits
for a store only once an acknowledgement is counted for it (acknowledgements that come early
are kept), a commit without a store at once, a cycle after it is queued."""

from apiary.stream.testbench import simulate, stream_get, stream_put
from beehive.proto.tcp.rx import CommitQueue


def commit(slot, store):
    return {"slot": slot, "gen": 1, "advance": 1, "end": 100 * slot, "fin": 0, "store": store}


def test_commits_wait_for_their_store_acknowledgements():
    dut = CommitQueue()
    got = []

    async def bench(ctx):
        await stream_put(ctx, dut.i, commit(1, 1))
        await stream_put(ctx, dut.i, commit(2, 0))
        await stream_put(ctx, dut.i, commit(3, 1))
        await ctx.tick().repeat(5)
        assert not ctx.get(dut.o.valid)             # the first waits for its store
        ctx.set(dut.acked, 1)                       # two acknowledgements, back to back
        await ctx.tick().repeat(2)
        ctx.set(dut.acked, 0)
        for _ in range(3):
            p = await stream_get(ctx, dut.o)
            got.append((p.slot, p.store))
        # Both acknowledgements were used up: a fourth store waits again.
        await stream_put(ctx, dut.i, commit(4, 1))
        await ctx.tick().repeat(3)
        assert not ctx.get(dut.o.valid)
        ctx.set(dut.acked, 1)
        await ctx.tick()
        ctx.set(dut.acked, 0)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload.slot) == 4

    simulate(dut, bench, timeout=200)
    assert got == [(1, 1), (2, 0), (3, 1)]


def test_a_commit_without_a_store_leaves_the_cycle_after():
    dut = CommitQueue()

    async def bench(ctx):
        await stream_put(ctx, dut.i, commit(5, 0))      # returns after the queueing edge
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload.slot) == 5

    simulate(dut, bench, timeout=50)


def test_at_once_a_commit_is_offered_in_its_acknowledgement_cycle():
    """``at_once``: the commit waiting for its store is offered in the cycle the
    acknowledgement comes (not the cycle after) and takes it up; taken or not, no second
    commit is let through by the same acknowledgement."""
    dut = CommitQueue(at_once=True)

    async def bench(ctx):
        await stream_put(ctx, dut.i, commit(1, 1))
        await stream_put(ctx, dut.i, commit(2, 1))
        await ctx.tick().repeat(3)
        assert not ctx.get(dut.o.valid)
        ctx.set(dut.acked, 1)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload.slot) == 1
        ctx.set(dut.o.ready, 1)
        await ctx.tick()                            # commit 1 taken with its acknowledgement
        ctx.set(dut.acked, 0)
        assert not ctx.get(dut.o.valid)             # commit 2 waits for its own
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.acked, 1)
        await ctx.tick()                            # counted, not taken
        ctx.set(dut.acked, 0)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload.slot) == 2
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        assert not ctx.get(dut.o.valid)

    simulate(dut, bench, timeout=100)
