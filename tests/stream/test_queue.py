"""Queue: a FIFO between two streams that ``connect`` wires."""

import random

import pytest
from amaranth import Module
from amaranth.hdl import unsigned
from amaranth.lib import stream
from amaranth.lib.wiring import connect

from apiary.stream.queue import Queue
from apiary.stream.testbench import simulate, stream_get, stream_put, transfers


def passes_in_order(dut, values, rng, unpack):
    """Every one of ``values`` through ``dut`` under random stalls at both ends; what came
    out (each transfer's payload through ``unpack``)."""
    got = []

    async def source(ctx):
        for v in values:
            await stream_put(ctx, dut.i, v, rng=rng, stall=0.4)

    async def sink(ctx):
        for _ in values:
            got.append(unpack(await stream_get(ctx, dut.o, rng=rng, stall=0.4)))

    simulate(dut, sink, background=[source], timeout=2_000)
    return got


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_everything_in_order_under_stalls(depth):
    rng = random.Random(depth)
    dut = Queue({"a": unsigned(8), "b": range(100)}, depth)
    values = [{"a": rng.randrange(256), "b": rng.randrange(100)} for _ in range(60)]
    assert passes_in_order(dut, values, rng, lambda p: {"a": int(p.a), "b": int(p.b)}) == values


def test_one_transfer_per_cycle_and_full_at_depth():
    dut = Queue(unsigned(16), 4)
    log = []  # cycles of the transfers on i

    async def source(ctx):
        for v in range(8):
            await stream_put(ctx, dut.i, v)

    async def check(ctx):
        await ctx.tick().repeat(12)          # nobody reads: four go in, then ready falls
        assert log == [0, 1, 2, 3] and not ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 1)
        await ctx.tick().repeat(10)
        # Reading one a cycle frees one a cycle: the other four go in on consecutive cycles.
        assert len(log) == 8 and log[4:] == list(range(log[4], log[4] + 4))

    simulate(dut, check, background=[source, transfers(dut.i, log)], timeout=100)


def test_connects_by_signature_and_refuses_a_bad_depth():
    q = Queue(unsigned(8))
    m = Module()
    connect(m, source=stream.Signature(unsigned(8)).create(), queue=q.i)
    with pytest.raises(ValueError, match="a Queue holds a positive number of transfers, not 0"):
        Queue(unsigned(8), 0)


@pytest.mark.parametrize("depth", [1, 2])
def test_register_queues_match_a_syncfifo_cycle_for_cycle(depth):
    """Up to 2 entries a Queue is registers, not a SyncFIFO's memory: under the same random
    valid and ready, both give the same ready, valid and (when valid) payload every cycle."""
    from amaranth.lib.fifo import SyncFIFO
    rng = random.Random(10 + depth)
    m = Module()
    m.submodules.queue = dut = Queue(unsigned(8), depth)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)
    m.d.comb += [ref.w_en.eq(dut.i.valid), ref.w_data.eq(dut.i.payload), ref.r_en.eq(dut.o.ready)]
    seen = []

    async def drive(ctx):
        for _ in range(400):
            ctx.set(dut.i.valid, rng.random() < 0.6)
            ctx.set(dut.i.payload, rng.randrange(256))
            ctx.set(dut.o.ready, rng.random() < 0.5)
            assert ctx.get(dut.i.ready) == ctx.get(ref.w_rdy)
            assert ctx.get(dut.o.valid) == ctx.get(ref.r_rdy)
            if ctx.get(dut.o.valid):
                assert ctx.get(dut.o.payload) == ctx.get(ref.r_data)
                seen.append(ctx.get(dut.o.ready))
            await ctx.tick()

    simulate(m, drive, timeout=1_000)
    assert sum(seen) > 100          # many transfers out were compared, not an idle queue


def test_register_stream_adds_one_cycle_or_nothing():
    """`register_stream` puts a 2-entry register Queue on a stream: each transfer comes out
    exactly a cycle after it went in, one per cycle; disabled, the stream is returned as is."""
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from apiary.stream.queue import register_stream

    class Stage(wiring.Component):
        i: In(stream.Signature(unsigned(8)))
        o: Out(stream.Signature(unsigned(8)))

        def elaborate(self, platform):
            m = Module()
            connect(m, staged=register_stream(m, "stage", wiring.flipped(self.i)),
                    out=wiring.flipped(self.o))
            assert isinstance(m.submodules["stage"], Queue)
            return m

    m = Module()
    source = stream.Signature(unsigned(8)).create()
    assert register_stream(m, "none", source, enabled=False) is source
    dut = Stage()
    ins, outs = [], []

    async def source_tb(ctx):
        for v in range(10):
            await stream_put(ctx, dut.i, v)

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        got = [int(await stream_get(ctx, dut.o)) for _ in range(10)]
        assert got == list(range(10))

    simulate(dut, sink, background=[source_tb, transfers(dut.i, ins), transfers(dut.o, outs)],
             timeout=100)
    assert outs[:10] == [c + 1 for c in ins[:10]] == list(range(ins[0] + 1, ins[0] + 11))


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_fall_through_passes_in_the_same_cycle_and_keeps_order(depth):
    """With ``fall_through`` an empty queue's input is on its output in the same cycle (taken
    there, it is never stored); under random stalls every transfer still arrives once, in
    order, registers (depth 1, 2) or memory (4) alike."""
    dut = Queue(unsigned(8), depth, fall_through=True)

    async def same_cycle(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 42)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 42
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert not ctx.get(dut.o.valid), "a transfer taken at once was also stored"

    simulate(dut, same_cycle, timeout=10)

    rng = random.Random(depth)
    values = [rng.randrange(256) for _ in range(80)]
    assert passes_in_order(Queue(unsigned(8), depth, fall_through=True), values, rng, int) == \
        values
