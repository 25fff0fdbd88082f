"""TimerScan (beehive/proto/tcp/tx.py) alone, over a timer memory the testbench writes: ``now``
ticks every ``tick`` cycles; every armed timer whose deadline has come is found by the scanner
(within a round of the flows) and queued once, not again until taken; a disarmed or future
timer never is."""

from amaranth import Elaboratable, Module
from amaranth.lib.memory import Memory

from apiary.stream.testbench import simulate
from beehive.proto.tcp.state import TIMER, TimerKind
from beehive.proto.tcp.tx import TimerScan

FLOWS, TICK = 8, 4


class Timers(Elaboratable):
    """The scanner over a timer memory as the engine has it (a read port of its own)."""

    def __init__(self):
        self.scan = TimerScan(FLOWS, TICK)
        self.mem = Memory(shape=TIMER, depth=FLOWS, init=[])
        self.wr = self.mem.write_port()

    def elaborate(self, platform):
        m = Module()
        m.submodules.scan, m.submodules.mem = self.scan, self.mem
        rd = self.mem.read_port(transparent_for=())
        m.d.comb += [rd.addr.eq(self.scan.timer_addr), self.scan.timer.eq(rd.data)]
        return m


def test_due_timers_are_queued_once_each():
    dut = Timers()
    scan = dut.scan
    got = []

    async def write(ctx, slot, **timer):
        ctx.set(dut.wr.addr, slot)
        ctx.set(dut.wr.data, timer)
        ctx.set(dut.wr.en, 1)
        await ctx.tick()
        ctx.set(dut.wr.en, 0)

    async def bench(ctx):
        await write(ctx, 2, armed=1, kind=TimerKind.RETRANSMIT, deadline=3)
        await write(ctx, 5, armed=1, kind=TimerKind.LINGER, deadline=0)
        await write(ctx, 6, armed=0, kind=TimerKind.RETRANSMIT, deadline=0)
        await write(ctx, 7, armed=1, kind=TimerKind.PERSIST, deadline=1000)
        start = ctx.get(scan.now)
        await ctx.tick().repeat(4 * TICK + FLOWS + 2)       # now reaches 3, a round after
        assert ctx.get(scan.now) >= start + 4
        # Both due timers are queued, once each however many rounds pass.
        await ctx.tick().repeat(3 * FLOWS)
        ctx.set(scan.expiries.ready, 1)
        while ctx.get(scan.expiries.valid):
            got.append(ctx.get(scan.expiries.payload.slot))
            await ctx.tick()
        ctx.set(scan.expiries.ready, 0)
        assert sorted(got) == [2, 5]
        # Taken, a slot still due is queued again on the next round.
        await ctx.tick().repeat(FLOWS + 2)
        assert ctx.get(scan.expiries.valid)

    simulate(dut, bench, timeout=500)


def test_now_counts_ticks():
    scan = TimerScan(FLOWS, TICK)

    async def bench(ctx):
        await ctx.tick().repeat(10 * TICK)
        assert ctx.get(scan.now) == 10

    simulate(scan, bench, timeout=100)
