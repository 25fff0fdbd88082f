"""FbitsSplitter: routing by dst_fbits, whole-message holding, dropping unknown fbits."""

import random

import pytest

from apiary.noc import Fbits, Message, NocHeader
from apiary.noc.splitter import FbitsSplitter
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.testbench import simulate


WIDTHS = [64, 512]
OUTPUTS = [Fbits.LOCAL0, Fbits.LOCAL1, Fbits.LOCAL3]
UNKNOWN = [0b0000, Fbits.LOCAL2, 0b1111]


def message(rng, width, fbits):
    """A message to ``fbits`` whose payload words look like headers to other sub-ports, so a
    splitter that decoded anything but the first flit would misroute them."""
    decoys = b"".join(NocHeader(dst_fbits=rng.choice(OUTPUTS)).pack(width)[0]
                      .to_bytes(width // 8, "little") for _ in range(rng.randrange(4)))
    payload = decoys + rng.randbytes(rng.randrange(100))
    return Message(NocHeader(dst_fbits=fbits, dst_x=rng.randrange(256), msg_type=3), [], payload)


def test_bad_parameters():
    with pytest.raises(ValueError, match="at least one fbits value"):
        FbitsSplitter(64, [])
    with pytest.raises(ValueError, match="names an output twice"):
        FbitsSplitter(64, [8, 9, 8])
    with pytest.raises(ValueError, match="from 0 to 15"):
        FbitsSplitter(64, [16])
    with pytest.raises(ValueError, match="flit width must be one of"):
        FbitsSplitter(48, [8])


@pytest.mark.parametrize("width", WIDTHS)
def test_routes_whole_messages_and_drops_unknown(width):
    rng = random.Random(width)
    messages = [message(rng, width, rng.choice(OUTPUTS + UNKNOWN)) for _ in range(60)]
    # An unknown one right before a good one, and two unknown ones in a row.
    messages[:0] = [message(rng, width, 0b1111), message(rng, width, Fbits.LOCAL0),
                    message(rng, width, 0), message(rng, width, 0b0111),
                    message(rng, width, Fbits.LOCAL3)]
    expected = [[msg.flits(width) for msg in messages if msg.header.dst_fbits == f]
                for f in OUTPUTS]
    unknown = sum(msg.header.dst_fbits not in OUTPUTS for msg in messages)
    assert unknown >= 3

    dut = FbitsSplitter(width, OUTPUTS)
    got = [[] for _ in OUTPUTS]

    async def source(ctx):
        for msg in messages:
            await send_flits(ctx, dut.i, msg.flits(width), rng=rng, stall=0.3)

    def sink(k):
        async def tb(ctx):
            r = random.Random(k)
            for _ in expected[k]:
                got[k].append(await recv_flits(ctx, dut.o[k], rng=r, stall=0.5))
        return tb

    async def check(ctx):
        while any(len(g) < len(e) for g, e in zip(got, expected)):
            await ctx.tick()
        await ctx.tick().repeat(10)
        assert ctx.get(dut.dropped) == unknown
        assert not any(ctx.get(o.valid) for o in dut.o)

    simulate(dut, source, *(sink(k) for k in range(len(OUTPUTS))), check, timeout=50_000)
    assert got == expected


@pytest.mark.parametrize("width", WIDTHS)
def test_cut_through_zero_latency(width):
    """The first flit is on its output in the cycle it arrives; only that output is valid, and
    the input waits for that output's ready alone."""
    flits = Message(NocHeader(dst_fbits=Fbits.LOCAL1), [], b"z" * 20).flits(width)
    dut = FbitsSplitter(width, OUTPUTS)

    async def tb(ctx):
        ctx.set(dut.i.payload, {"data": flits[0][0], "last": 0})
        ctx.set(dut.i.valid, 1)
        assert [ctx.get(o.valid) for o in dut.o] == [0, 1, 0]
        assert ctx.get(dut.i.ready) == 0
        ctx.set(dut.o[0].ready, 1)
        ctx.set(dut.o[2].ready, 1)
        assert ctx.get(dut.i.ready) == 0
        ctx.set(dut.o[1].ready, 1)
        assert ctx.get(dut.i.ready) == 1
        assert ctx.get(dut.o[1].payload.data) == flits[0][0]

    simulate(dut, tb)
