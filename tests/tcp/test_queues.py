"""The TCP engine's shared queues (beehive/proto/tcp/queues.py) alone: an Outbox offers its
requests in order as message descriptors, a cycle after each is queued, and holds them while the
sender stalls; memory_requests fills MEM_META (and a store's payload size); a FlowQueue holds
each flow slot once, in the order first asked, and takes a slot again once it has been taken."""

import random

import pytest
from amaranth.hdl import unsigned

from apiary.noc.framing import MessageSender
from apiary.os.memory_tile import MEM_FORMAT, MEM_META, LOAD_MEM, STORE_MEM
from apiary.stream.testbench import simulate, stream_get, stream_put, transfers
from beehive.proto.tcp.queues import FlowQueue, Outbox, memory_requests

WIDTH = 64
DESC = MessageSender.descriptor_layout(WIDTH, meta_bits=MEM_FORMAT.size)


def to_dst(m, value):
    return dict(dst=(value[:8], value[8:16], 2), src=(3, 4, 1), msg_type=0x21,
                payload_bytes=value[16:24])


@pytest.mark.parametrize("fall_through", [False, True])
def test_outbox_offers_in_order_a_cycle_after_and_holds_under_stalls(fall_through):
    """In order under stalls on both sides; the first request is offered the cycle after it
    is queued, or with ``fall_through`` in that very cycle."""
    rng = random.Random(1)
    dut = Outbox(unsigned(24), 4, MessageSender.descriptor_layout(WIDTH), to_dst,
                 fall_through=fall_through)
    values = [rng.getrandbits(24) for _ in range(40)]
    got, put, offered = [], [], []

    async def source(ctx):
        for v in values:
            await stream_put(ctx, dut.i, v, rng=rng, stall=0.3)

    async def sink(ctx):
        for _ in values:
            d = await stream_get(ctx, dut.o, rng=rng, stall=0.5)
            got.append((d.dst_x, d.dst_y, d.dst_fbits, d.src_x, d.src_y, d.src_fbits,
                        d.msg_type, d.payload_bytes))

    async def first(ctx):       # the first request: offered the cycle after it is queued
        cycle = 0
        async for _, _, valid in ctx.tick().sample(dut.o.valid):
            if valid:
                offered.append(cycle)
                return
            cycle += 1

    simulate(dut, sink, background=[source, transfers(dut.i, put), first], timeout=5000)
    assert got == [(v & 0xFF, v >> 8 & 0xFF, 2, 3, 4, 1, 0x21, v >> 16) for v in values]
    assert offered == [put[0] + (not fall_through)]


@pytest.mark.parametrize("stores,msg_type", [(True, STORE_MEM), (False, LOAD_MEM)])
def test_memory_requests_carry_the_request_in_mem_meta(stores, msg_type):
    dut = memory_requests(DESC, msg_type=msg_type, dst=(5, 6, 0), src=(7, 8, 1), stores=stores)
    request = {"addr": 0x1234_5678_9A, "size": 1460, "wrap": 12}

    async def bench(ctx):
        await stream_put(ctx, dut.i, request)
        d = await stream_get(ctx, dut.o)
        meta = MEM_META.from_bits(d.meta)
        assert (d.dst_x, d.dst_y, d.src_x, d.src_y, d.src_fbits) == (5, 6, 7, 8, 1)
        assert d.msg_type == msg_type
        assert (meta.addr, meta.size, meta.wrap) == (0x1234_5678_9A, 1460, 12)
        assert d.payload_bytes == (1460 if stores else 0)

    simulate(dut, bench, timeout=100)


def test_flow_queue_holds_each_slot_once_in_order():
    dut = FlowQueue(8)
    got = []

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        for slot in (3, 5, 3, 1, 5, 3):      # the repeats merge into the waiting ones
            ctx.set(dut.i.payload, slot)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert ctx.get(dut.i.ready)
        for _ in range(3):
            got.append(int(await stream_get(ctx, dut.o)))
        assert not ctx.get(dut.o.valid)
        # A slot taken may ask again, and comes out again.
        await stream_put(ctx, dut.i, 5)
        got.append(int(await stream_get(ctx, dut.o)))

    simulate(dut, bench, timeout=200)
    assert got == [3, 5, 1, 5]


@pytest.mark.parametrize("flows", [4, 16, 512])      # 512: in block RAM
def test_flow_queue_matches_a_model_under_random_offers_and_takes(flows):
    """Random offers and takes against a model: a slot is queued when offered unless it waits
    (an offer in the cycle it is taken too: that offer is merged into it); takes come in the
    order slots were queued; the queue, ``flows`` deep, never refuses an offer."""
    rng = random.Random(7)
    dut = FlowQueue(flows)
    taken = []

    async def bench(ctx):
        fifo = []
        for _ in range(400):
            slot = rng.randrange(flows)
            assert bool(ctx.get(dut.o.valid)) == bool(fifo)
            take = bool(fifo) and rng.random() < 0.5
            if fifo:
                assert ctx.get(dut.o.payload) == fifo[0]
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, slot)
            ctx.set(dut.o.ready, take)
            assert ctx.get(dut.i.ready)
            await ctx.tick()
            queue_it = slot not in fifo
            if take:
                taken.append(fifo.pop(0))
            if queue_it:
                fifo.append(slot)

    simulate(dut, bench, timeout=1000)
    assert len(taken) > 100
