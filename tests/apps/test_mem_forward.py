"""MemForward (beehive/apps/mem_server.py) alone, at 64 and 512 bits, with stalls on both
sides: a request kept at ``start`` comes out less its first 8 bytes (an empty packet if that is
all it had), one not kept is discarded whole at one word per cycle; ``busy`` spans the request,
and nothing is taken while idle."""

import random

import pytest

from apiary.stream.testbench import packet_words, recv_packet, simulate, stream_put
from beehive.apps.mem_server import MemForward


@pytest.mark.parametrize("width", [64, 512])
def test_requests_are_passed_on_less_their_header_or_discarded(width):
    rng = random.Random(width)
    requests = [(bytes(range(8)), True), (bytes(range(3)), False), (bytes(range(100)), True),
                (bytes(range(200)), False), (bytes(rng.getrandbits(8) for _ in range(65)), True),
                (b"", False), (bytes(range(9)), True)]
    dut = MemForward(width)
    got = []

    async def source(ctx):
        for payload, keep in requests:
            for _ in range(3):              # idle: nothing taken
                assert not ctx.get(dut.i.ready) and not ctx.get(dut.busy)
                await ctx.tick()
            ctx.set(dut.start, 1)
            ctx.set(dut.keep, keep)
            await ctx.tick()
            ctx.set(dut.start, 0)
            assert ctx.get(dut.busy)
            words = packet_words(payload, width)
            for word in words:
                if keep:
                    await stream_put(ctx, dut.i, word, rng=rng, stall=0.3)
                else:                       # discarded: taken at once, one per cycle
                    ctx.set(dut.i.payload, word)
                    ctx.set(dut.i.valid, 1)
                    assert ctx.get(dut.i.ready) and not ctx.get(dut.o.valid)
                    await ctx.tick()
                    ctx.set(dut.i.valid, 0)
            while ctx.get(dut.busy):        # the kept one's last word may wait for o
                await ctx.tick()
        while len(got) < sum(keep for _, keep in requests):
            await ctx.tick()

    async def sink(ctx):
        while True:
            got.append(await recv_packet(ctx, dut.o, width, rng=rng, stall=0.3))

    simulate(dut, source, background=[sink], timeout=10_000)
    assert got == [payload[8:] for payload, keep in requests if keep]
