"""MemRequests (beehive/apps/mem_server.py) alone, at 64 and 512 bits: every request that fits
comes out whole, in order, its descriptor carrying its length and the metadata of its header
transfer; one longer than MAX_REQUEST is dropped and counted in ``overflow``; the input never
waits, even while nothing is taken out."""

import random

import pytest

from apiary.stream.testbench import recv_packet, simulate, stream_get
from beehive.apps.mem_server import MAX_REQUEST, MemRequests
from beehive.proto.messages import PACKET_META, MsgType
from receiver_feed import feed_message

UDP = MsgType.UDP_RX_SEGMENT.value


@pytest.mark.parametrize("width", [64, 512])
def test_requests_are_stored_whole_with_their_metadata(width):
    rng = random.Random(width)
    payloads = [b"", b"\x01\x00\x00\x08\x00\x00\x00\x10", bytes(range(200)),
                bytes(MAX_REQUEST + 1), bytes(rng.getrandbits(8) for _ in range(MAX_REQUEST))]
    messages = [(p, rng.getrandbits(PACKET_META.size)) for p in payloads]
    kept = [(p, meta) for p, meta in messages if len(p) <= MAX_REQUEST]
    dut = MemRequests(width)
    got, counts = [], {}

    async def source(ctx):
        for payload, meta in messages:
            await feed_message(ctx, dut.hdr, dut.i, width, payload, msg_type=UDP, meta=meta,
                               rng=rng, stall=0.3)

    async def sink(ctx):
        await ctx.tick().repeat(600)        # all of them stored before any is taken
        for _ in kept:
            desc = await stream_get(ctx, dut.o_desc, rng=rng, stall=0.3)
            data = await recv_packet(ctx, dut.o, width, rng=rng, stall=0.3)
            got.append((data, int(desc.info)))
            assert int(desc.bytes) == len(data)
        counts["overflow"] = ctx.get(dut.overflow)

    async def always_ready(ctx):
        async for _, _, hdr_ready, i_ready in ctx.tick().sample(dut.hdr.ready, dut.i.ready):
            assert hdr_ready and i_ready, "the store held its input"

    simulate(dut, sink, background=[source, always_ready], timeout=10_000)
    assert got == kept
    assert counts["overflow"] == 1
