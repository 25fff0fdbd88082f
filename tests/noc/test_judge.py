"""FirstFlitJudge: messages judged on their first flit pass whole and in order or vanish whole,
under random stalls on both sides, storing nothing."""

import random

import pytest
from amaranth import Elaboratable, Module, Mux

from apiary.noc import Message, NocHeader
from apiary.noc.gate import Verdict
from apiary.noc.header import field_location
from apiary.noc.judge import FirstFlitJudge
from apiary.noc.testbench import expect_messages, message_source
from apiary.stream.testbench import simulate


class OddTypesDropped(Elaboratable):
    def __init__(self, width):
        self.judge = FirstFlitJudge(width)
        self.width = width

    def elaborate(self, platform):
        m = Module()
        m.submodules.judge = j = self.judge
        _, lsb = field_location(self.width, "msg_type")
        m.d.comb += j.verdict.eq(Mux(j.head[lsb], Verdict.DROP, Verdict.PASS))
        return m


@pytest.mark.parametrize("width", [128, 512])
def test_passes_and_drops_whole_messages(width):
    dut = OddTypesDropped(width)
    rng = random.Random(width)
    msgs = [Message(NocHeader(msg_type=rng.randrange(256), dst_x=1),
                    payload=rng.randbytes(rng.randrange(0, 200))) for _ in range(40)]
    kept = [msg for msg in msgs if msg.header.msg_type % 2 == 0]
    accepts = []

    async def count(ctx):        # a plain await per cycle: nothing left suspended in a generator
        while True:
            _, _, accept = await ctx.tick().sample(dut.judge.accept)
            accepts.append(accept)

    async def sink(ctx):
        await expect_messages(dut.judge.o, kept, width, rng=rng, stall=0.3)(ctx)
        await ctx.tick().repeat(50)
        assert ctx.get(dut.judge.o.valid) == 0
        assert sum(accepts) == len(msgs)            # one accept per message, kept or dropped

    simulate(dut, sink, background=[message_source(dut.judge.i, msgs, width, rng=rng, stall=0.3),
                                    count], timeout=20_000)
