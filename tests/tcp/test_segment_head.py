"""SegmentHead (beehive/proto/tcp/rx.py) alone, at 64 and 512 bits: each segment's metadata,
header bytes and SYN options offered together until the engine's verdict; a kept segment's
words go on whole, a dropped one's are discarded; the next segment's metadata waits for the
verdict; ``taken`` pulses once per segment."""

import random

import pytest
from scapy.layers.inet import TCP

from apiary.stream.testbench import recv_packet, send_packet, simulate, stream_put
from beehive.proto.tcp.header import MAX_HEADER_BYTES
from beehive.proto.tcp.rx import SegmentHead


def segments(rng):
    syn = bytes(TCP(sport=1000, dport=7, flags="S", options=[("MSS", 1300), ("NOP", None),
                                                            ("WScale", 5)]))
    data = bytes(TCP(sport=1000, dport=7, flags="PA") / rng.randbytes(100))
    short = bytes(TCP(flags="A"))[:12]      # shorter than a header: head_len says so
    return [(syn, True), (data, False), (short, True), (data, True)]


@pytest.mark.parametrize("width", [64, 512])
def test_segments_are_held_until_their_verdict(width):
    rng = random.Random(width)
    dut = SegmentHead(width)
    cases = segments(rng)
    seen, out, taken = [], [], []

    async def source(ctx):
        for k, (raw, _) in enumerate(cases):
            await stream_put(ctx, dut.hdr, {"length": len(raw), "meta": {"peer_ip": k}})
            await send_packet(ctx, dut.data, raw, width, rng=rng, stall=0.2)

    async def engine(ctx):
        for _, keep in cases:
            while not ctx.get(dut.segment.valid):
                await ctx.tick()
            s = ctx.get(dut.segment.payload)
            assert not ctx.get(dut.hdr.ready)       # the next one waits for the verdict
            head = int(s.head).to_bytes(MAX_HEADER_BYTES, "little")[:int(s.head_len)]
            seen.append((int(s.packet.length), int(s.packet.meta.peer_ip), head,
                         int(s.mss) if s.has_mss else None, int(s.ws) if s.has_ws else None))
            ctx.set(dut.keep, keep)
            ctx.set(dut.segment.ready, 1)
            await ctx.tick()
            ctx.set(dut.segment.ready, 0)

    async def sink(ctx):
        for _, keep in cases:
            if keep:
                out.append(await recv_packet(ctx, dut.words, width, rng=rng, stall=0.2))

    async def count(ctx):
        async for _, _, pulse in ctx.tick().sample(dut.taken):
            if pulse:
                taken.append(1)

    simulate(dut, engine, sink, background=[source, count], timeout=5000)
    assert seen == [(len(raw), k, raw[:MAX_HEADER_BYTES], *opts)
                    for k, ((raw, _), opts) in enumerate(zip(cases, [(1300, 5), (None, None),
                                                                     (None, None),
                                                                     (None, None)]))]
    assert out == [raw for raw, keep in cases if keep]
    assert len(taken) == len(cases)


def test_latency_of_a_one_word_segment_at_512_bits():
    """Metadata and the only word in cycle 0: the peek has the head in cycle 1, the options
    are done (no SYN) and the segment is offered in cycle 2."""
    dut = SegmentHead(512)
    raw = bytes(TCP(flags="A"))
    valid = []

    async def bench(ctx):
        ctx.set(dut.hdr.valid, 1)
        ctx.set(dut.hdr.payload, {"length": len(raw), "meta": {}})
        ctx.set(dut.data.valid, 1)
        ctx.set(dut.data.payload, {"data": int.from_bytes(raw, "little"), "nbytes": len(raw),
                                   "last": 1})
        for _ in range(4):
            valid.append(ctx.get(dut.segment.valid))
            await ctx.tick()
            ctx.set(dut.hdr.valid, 0)
            ctx.set(dut.data.valid, 0)

    simulate(dut, bench, timeout=50)
    assert valid == [0, 0, 1, 1]
