"""HeldStages: register stages for logic whose inputs hold still, and a staged header sum."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal

from apiary.stream.checksum import ones_complement_sum, word_sum
from apiary.stream.hold import HeldStages
from apiary.stream.testbench import simulate


class StagedSum(Elaboratable):
    """The one's-complement sum of a 60-byte header's first ``words`` words, staged."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.head = Signal(8 * 60)
        self.words = Signal(range(31))
        self.valid = Signal()
        self.restart = Signal()
        self.sum = Signal(16)
        self.settled = Signal()
        self.depth = None
        self.cycle = Signal(16)        # gives the disabled case its clock

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.cycle.eq(self.cycle + 1)
        stages = HeldStages(m, enabled=self.enabled)
        total = word_sum(self.head, self.words, stage=stages.stage)
        total, = stages.outputs(total)
        self.depth = stages.depth
        m.d.comb += [self.sum.eq(total),
                     self.settled.eq(stages.settled(self.valid, self.restart))]
        return m


def _header(rng):
    return bytes(rng.randrange(256) for _ in range(60))


@pytest.mark.parametrize("enabled", [True, False])
def test_settles_after_its_depth_with_the_sum_of_the_inputs(enabled):
    rng = random.Random(3)
    dut = StagedSum(enabled)
    seen = []

    async def bench(ctx):
        for k in range(12):
            head, words = _header(rng), rng.randrange(5, 31)
            ctx.set(dut.head, int.from_bytes(head, "little"))
            ctx.set(dut.words, words)
            ctx.set(dut.valid, 1)
            ctx.set(dut.restart, 0)
            waited = 0
            while not ctx.get(dut.settled):
                await ctx.tick()
                waited += 1
            assert ctx.get(dut.sum) == ones_complement_sum(head[:2 * words])
            seen.append(waited)
            # Alternately: the next inputs after an idle cycle, or at once with a restart.
            if k % 2:
                ctx.set(dut.valid, 0)
            else:
                ctx.set(dut.restart, 1)
            await ctx.tick()

    simulate(dut, bench, timeout=500)
    # 30 words: registers after 2 and 4 levels of adders, then the last adder, fold, register.
    assert dut.depth == (3 if enabled else 0)
    assert seen == [dut.depth] * 12


def test_a_level_is_a_positive_integer():
    stages = HeldStages(Module())
    with pytest.raises(ValueError, match="a stage's level is a positive integer, not 0"):
        stages.stage(Signal(4), 0)
