"""PacketWriter alone (a PacketBuffer's receive side): the ring words it writes for kept packets,
the space it takes back from dropped ones, its byte counts, counters, and back-pressure when the
ring or the queue is full (or drops, with ``always_ready``)."""

import random

from apiary.stream.packet_buffer import PacketWriter
from apiary.stream.testbench import packet_words, simulate, stream_put


WIDTH = 64
NB = WIDTH // 8


def ring_watch(dut, ring, ends):
    """Background: apply each write to ``ring`` (a dict), and append ``(accepted, dropped,
    stored.valid, stored.payload)`` for each last word taken on ``i``."""
    async def tb(ctx):
        async for _, _, en, addr, data, valid, ready, last, acc, drop, sv, sp in ctx.tick().sample(
                dut.words.en, dut.words.addr, dut.words.data, dut.i.valid, dut.i.ready,
                dut.i.payload.last, dut.accepted, dut.i_dropped, dut.stored.valid,
                dut.stored.payload):
            if en:
                ring[int(addr)] = int(data)
            if valid and ready and last:
                ends.append((int(acc), int(drop), int(sv), int(sp)))
            else:
                assert not (acc or drop or sv), "a verdict on i without a last word taken"
    return tb


def test_kept_packets_fill_consecutive_words_and_dropped_ones_give_theirs_back():
    """Random garbage past ``nbytes`` is written as zeros; a dropped packet (too long, too
    short, malformed, aborted) leaves no trace: the next kept packet starts on the word it
    began at. ``stored`` carries each kept packet's byte count; the counters split the drops."""
    rng = random.Random(3)
    dut = PacketWriter(WIDTH, depth=32, max_bytes=40, min_bytes=2)
    full = (1 << WIDTH) - 1
    packets = [
        (bytes(range(20)), "kept"),
        (bytes(41), "overflow"),                                    # too long
        (b"x", "overflow"),                                         # too short
        (b"", "overflow"),
        ([{"data": full, "nbytes": 3, "last": 0},                   # malformed
          {"data": full, "nbytes": NB, "last": 1}], "overflow"),
        ([{"data": full, "nbytes": NB, "last": 0},                  # aborted
          {"data": full, "nbytes": NB + 1, "last": 1}], "aborted"),
        (bytes(range(100, 140)), "kept"),
        ([*packet_words(bytes(range(16)), WIDTH)[:1],               # ends without bytes
          {"data": full, "nbytes": NB, "last": 0}, {"data": full, "nbytes": 0, "last": 1}],
         "kept16"),
        (b"ab", "kept"),
    ]
    ring, ends = {}, []

    async def tb(ctx):
        ctx.set(dut.queue_room, 1)
        for packet, _ in packets:
            words = packet if isinstance(packet, list) else packet_words(packet, WIDTH, rng)
            for word in words:
                await stream_put(ctx, dut.i, word, rng=rng, stall=0.3)
        await ctx.tick()
        assert ctx.get(dut.overflow) == 4 and ctx.get(dut.aborted) == 1

    simulate(dut, tb, background=[ring_watch(dut, ring, ends)], timeout=2_000)
    assert [e[:3] for e in ends] == [(1, 0, 1) if fate.startswith("kept") else (0, 1, 0)
                                     for _, fate in packets]
    assert [e[3] for e in ends if e[0]] == [20, 40, 16, 2]
    kept = [bytes(range(20)), bytes(range(100, 140)), bytes(range(8)) + b"\xff" * NB, b"ab"]
    stream = b"".join(p + bytes(-len(p) % NB) for p in kept)
    assert [ring[a] for a in range(len(stream) // NB)] == [
        int.from_bytes(stream[a * NB:(a + 1) * NB], "little") for a in range(len(stream) // NB)]


def test_a_full_ring_or_queue_holds_i():
    """Without ``always_ready``: ``i.ready`` falls when the ring's 8 words are written ahead of
    ``rptr``, rises when ``rptr`` moves, and is low while ``queue_room`` is."""
    dut = PacketWriter(WIDTH, depth=8, max_bytes=64)

    async def tb(ctx):
        ctx.set(dut.queue_room, 1)
        for word in packet_words(bytes(6 * NB), WIDTH):
            await stream_put(ctx, dut.i, word)
        for word in packet_words(bytes(2 * NB), WIDTH):
            await stream_put(ctx, dut.i, word)
        assert not ctx.get(dut.i.ready)                 # 8 words written, none read
        ctx.set(dut.rptr, 6)
        assert ctx.get(dut.i.ready)
        ctx.set(dut.queue_room, 0)
        assert not ctx.get(dut.i.ready)
        ctx.set(dut.queue_room, 1)
        assert ctx.get(dut.overflow) == 0

    simulate(dut, tb, timeout=200)


def test_always_ready_drops_what_does_not_fit():
    """With ``always_ready``: a packet that runs out of ring words is dropped (``overflow``),
    one that ends while the queue has no room too; the next one that fits is kept at the
    start of the space the dropped ones gave back."""
    dut = PacketWriter(WIDTH, depth=8, max_bytes=64, always_ready=True)
    ring, ends = {}, []

    async def tb(ctx):
        ctx.set(dut.queue_room, 1)
        for packet in (bytes(5 * NB), bytes(4 * NB)):       # the second needs 9 words
            for word in packet_words(packet, WIDTH):
                await stream_put(ctx, dut.i, word)
        ctx.set(dut.queue_room, 0)
        for word in packet_words(b"abc", WIDTH):
            await stream_put(ctx, dut.i, word)
        ctx.set(dut.queue_room, 1)
        for word in packet_words(b"\x01" * 24, WIDTH):
            await stream_put(ctx, dut.i, word)
        await ctx.tick()
        assert ctx.get(dut.overflow) == 2

    simulate(dut, tb, background=[ring_watch(dut, ring, ends)], timeout=200)
    assert [e[:2] for e in ends] == [(1, 0), (0, 1), (0, 1), (1, 0)]
    assert [ring[a] for a in (5, 6, 7)] == [int.from_bytes(b"\x01" * NB, "little")] * 3
