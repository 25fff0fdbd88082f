"""PacketReader alone (a PacketBuffer's send side) over a ring ``Memory`` filled beforehand:
descriptors then words, rejected packets skipped, ``rptr``, its latency and back-to-back
throughput."""

import random

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from apiary.stream.packet_buffer import PacketReader
from apiary.stream.testbench import recv_packet, simulate, stream_get, stream_put, transfers


WIDTH = 64
NB = WIDTH // 8
DEPTH = 32


def reader_over(packets, *, verdict=True):
    """A reader on a ring holding ``packets`` one after another (each from a word boundary, an
    empty one taking a word)."""
    words = []
    for p in packets:
        chunk = p + bytes(-len(p) % NB) if p else bytes(NB)
        words += [int.from_bytes(chunk[k:k + NB], "little") for k in range(0, len(chunk), NB)]
    m = Module()
    m.submodules.ring = ring = Memory(shape=WIDTH, depth=DEPTH, init=words)
    m.submodules.reader = dut = PacketReader(WIDTH, depth=DEPTH, max_bytes=100,
                                             info_width=3 if verdict else 0, verdict=verdict)
    wiring.connect(m, reader=dut.words, memory=ring.read_port(transparent_for=()))
    return m, dut


def test_sends_ok_packets_and_skips_rejected_ones_with_stalls():
    rng = random.Random(7)
    packets = [bytes(range(n, 2 * n)) for n in (13, 0, 8, 30, 1, 17, 0, 24)]
    oks = [1, 1, 0, 1, 0, 1, 1, 1]
    m, dut = reader_over(packets)
    got = []

    async def head(ctx):
        for n, (p, ok) in enumerate(zip(packets, oks)):
            await stream_put(ctx, dut.head, {"bytes": len(p), "ok": ok, "info": n % 8},
                             rng=rng, stall=0.3)

    async def sink(ctx):
        for _ in range(sum(oks)):
            desc = await stream_get(ctx, dut.o_desc, rng=rng, stall=0.3)
            got.append((await recv_packet(ctx, dut.o, WIDTH, rng=rng, stall=0.3),
                        int(desc.bytes), int(desc.info)))
        await ctx.tick().repeat(5)
        assert ctx.get(dut.packets) == sum(oks)
        used = sum(max(1, -(-len(p) // NB)) for p in packets)
        assert ctx.get(dut.rptr) == used

    simulate(m, sink, background=[head], timeout=2_000)
    assert got == [(p, len(p), n % 8) for n, (p, ok) in enumerate(zip(packets, oks)) if ok]


def test_latency_and_back_to_back_packets():
    """A packet on ``head`` at cycle 0: its descriptor valid at 1, its first word at 2 (the
    descriptor taken at once); with everything ready, the words of later packets follow
    without a gap, one- and zero-byte packets included."""
    packets = [bytes(20), b"x", b"", bytes(range(16))]
    m, dut = reader_over(packets, verdict=False)
    desc_log, o_log = [], []

    async def tb(ctx):
        ctx.set(dut.o_desc.ready, 1)
        ctx.set(dut.o.ready, 1)
        for p in packets:
            await stream_put(ctx, dut.head, {"bytes": len(p)})
        await ctx.tick().repeat(10)

    simulate(m, tb, background=[transfers(dut.o_desc, desc_log), transfers(dut.o, o_log)],
             timeout=200)
    assert desc_log[0] == 1 and o_log[0] == 2
    assert o_log == list(range(2, 2 + 3 + 1 + 1 + 2))
