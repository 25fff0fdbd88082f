"""SegmentStore (beehive/proto/tcp/rx.py) alone, at 64 and 512 bits: each store's STORE_MEM
descriptor (MEM_META and a payload of ``size`` bytes) to the receive buffer, and its segment's
words with the first ``cut`` bytes stripped, under random stalls; a full queue holds the
engine back."""

import random

import pytest

from apiary.noc.framing import MessageSender
from apiary.os.memory_tile import MEM_FORMAT, MEM_META, STORE_MEM
from apiary.stream.testbench import recv_packet, send_packet, simulate, stream_get, stream_put
from beehive.proto.tcp.rx import SegmentStore


@pytest.mark.parametrize("width,through", [(64, False), (512, False), (512, True)])
def test_stores_strip_their_segments_and_describe_what_is_left(width, through):
    rng = random.Random(width + through)
    dut = SegmentStore(width, dst=(3, 3, 0), src=(3, 0, 1),
                       descriptor=MessageSender.descriptor_layout(width,
                                                                  meta_bits=MEM_FORMAT.size),
                       through=through)
    cases = []
    for k in range(12):
        segment = rng.randbytes(rng.randrange(20, 300))
        cut = rng.randrange(20, len(segment) + 1)
        cases.append((segment, cut, 0x1000 * k))
    descs, words = [], []

    async def engine(ctx):          # as the engine does: a store only when there is room
        for segment, cut, addr in cases:
            while rng.random() < 0.3 or not ctx.get(dut.i.ready):
                await ctx.tick()
            await stream_put(ctx, dut.i, {"store": {"addr": addr, "size": len(segment) - cut,
                                                    "wrap": 12}, "cut": cut})

    async def segments(ctx):
        for segment, _, _ in cases:
            await send_packet(ctx, dut.words, segment, width, rng=rng, stall=0.2)

    async def sender(ctx):
        for _ in cases:
            d = await stream_get(ctx, dut.o_hdr, rng=rng, stall=0.4)
            meta = MEM_META.from_bits(d.meta)
            descs.append((d.msg_type, d.dst_x, d.dst_y, d.src_fbits, d.payload_bytes, meta.addr,
                          meta.size, meta.wrap))

    async def data(ctx):
        for _ in cases:
            words.append(await recv_packet(ctx, dut.o_data, width, rng=rng, stall=0.3))

    simulate(dut, sender, data, background=[engine, segments], timeout=20_000)
    assert descs == [(STORE_MEM, 3, 3, 1, len(s) - c, a, len(s) - c, 12) for s, c, a in cases]
    assert words == [s[c:] for s, c, _ in cases]


def test_a_full_queue_holds_the_engine_back():
    dut = SegmentStore(64, dst=(0, 0, 0), src=(0, 0, 1),
                       descriptor=MessageSender.descriptor_layout(64, meta_bits=MEM_FORMAT.size))

    async def bench(ctx):
        for k in range(4):
            await stream_put(ctx, dut.i, {"store": {"addr": k, "size": 1, "wrap": 12},
                                          "cut": 20})
        assert not ctx.get(dut.i.ready)

    simulate(dut, bench, timeout=50)


@pytest.mark.parametrize("through", [False, True])
def test_a_store_is_described_the_cycle_after_it_is_queued_or_in_it(through):
    """The descriptor of a store queued into an empty SegmentStore is offered the cycle after,
    or with ``through`` in that very cycle."""
    width = 512
    dut = SegmentStore(width, dst=(3, 3, 0), src=(3, 0, 1),
                       descriptor=MessageSender.descriptor_layout(width,
                                                                  meta_bits=MEM_FORMAT.size),
                       through=through)

    async def bench(ctx):
        ctx.set(dut.i.payload, {"store": {"addr": 0x40, "size": 5, "wrap": 12}, "cut": 40})
        ctx.set(dut.i.valid, 1)
        assert ctx.get(dut.i.ready) and ctx.get(dut.o_hdr.valid) == through
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert ctx.get(dut.o_hdr.valid)

    simulate(dut, bench, timeout=20)
