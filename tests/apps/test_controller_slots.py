"""RequestSlots (beehive/apps/controller.py) alone, at 64 and 512 bits: requests are written
into their slots as their words come (the engine reads them back), pending from the cycle after
their last word, oldest first, with their metadata and length; a message of another type is
counted in ``stray``, one that finds every slot taken in ``overflow``; ``release`` frees the
oldest; the engine's reply words land in their lanes of the reply rows (``reply_row``),
leaving the request's rows as they came."""

import random

import pytest
from apiary.noc.framing import MessageReceiver
from apiary.stream.testbench import packet_words, simulate
from beehive.apps.controller import RequestSlots, SlotGeometry
from beehive.proto.messages import PACKET_META, MsgType


def slots(width, n=3):
    geometry = SlotGeometry(width, n)
    return geometry, RequestSlots(geometry,
                                  MessageReceiver.header_layout(width, meta_bits=PACKET_META.size))


async def message(ctx, dut, width, payload, msg_type=MsgType.UDP_RX_SEGMENT.value, meta=0):
    """A message as the receiver gives it: its header one cycle, then its words."""
    ctx.set(dut.hdr.payload, {"msg_type": msg_type, "payload_bytes": len(payload), "meta": meta})
    ctx.set(dut.hdr.valid, 1)
    await ctx.tick()
    ctx.set(dut.hdr.valid, 0)
    for word in packet_words(payload, width):
        ctx.set(dut.data.payload, word)
        ctx.set(dut.data.valid, 1)
        await ctx.tick()
    ctx.set(dut.data.valid, 0)


async def read_row(ctx, dut, geometry, slot, row, *, reply=False):
    """A row of a slot: of the request, or (``reply``) of its reply."""
    r = dut.requests.read
    ctx.set(r.addr, row | slot << geometry.row_bits)
    ctx.set(r.en, 1)
    await ctx.tick()
    ctx.set(r.en, 0)
    return ctx.get(dut.requests.reply_row if reply else r.data)


@pytest.mark.parametrize("width", [64, 512])
def test_requests_fill_their_slots_in_order(width):
    rng = random.Random(width)
    geometry, dut = slots(width)
    requests = [rng.randbytes(n) for n in (8, 100, 264)]
    r = dut.requests

    async def bench(ctx):
        assert not ctx.get(r.pending)
        for k, payload in enumerate(requests):
            await message(ctx, dut, width, payload, meta=k + 1)
            assert ctx.get(r.pending)           # from the cycle after its last word
        await message(ctx, dut, width, b"late")             # every slot taken
        await message(ctx, dut, width, b"other", msg_type=MsgType.UDP_TX_SEGMENT.value)
        assert (ctx.get(dut.overflow), ctx.get(dut.stray)) == (1, 1)
        nb = width // 8
        for k, payload in enumerate(requests):
            assert ctx.get(r.head) == k and ctx.get(r.pending)
            assert (ctx.get(r.meta), ctx.get(r.length)) == (k + 1, len(payload))
            stored = b""
            for row in range(-(-len(payload) // nb)):
                stored += int(await read_row(ctx, dut, geometry, k, row)).to_bytes(nb, "little")
            assert stored[:len(payload)] == payload
            ctx.set(r.release, 1)
            await ctx.tick()
            ctx.set(r.release, 0)
        assert not ctx.get(r.pending)

    simulate(dut, bench, timeout=2000)


def test_reply_words_go_into_their_lanes():
    geometry, dut = slots(128)
    r = dut.requests
    request = bytes(range(1, 17))

    async def bench(ctx):
        for _ in range(2):                  # slot 2
            await message(ctx, dut, 128, b"\0" * 8)
        await message(ctx, dut, 128, request)
        # Lane 1 of row 0 of slot 2, then lane 3: the others keep what was there (zero).
        for lane, value in ((1, 0x11223344), (3, 0x55667788)):
            ctx.set(r.reply.addr, 2 << geometry.row_bits)
            ctx.set(r.reply.data, sum(value << 32 * k for k in range(geometry.lanes)))
            ctx.set(r.reply.en, 1 << lane)
            await ctx.tick()
        ctx.set(r.reply.en, 0)
        row = int(await read_row(ctx, dut, geometry, 2, 0, reply=True))
        assert [row >> 32 * k & 0xFFFF_FFFF for k in range(4)] == [0, 0x11223344, 0,
                                                                    0x55667788]
        row = int(await read_row(ctx, dut, geometry, 2, 0))
        assert row.to_bytes(16, "little") == request

    simulate(dut, bench, timeout=100)
