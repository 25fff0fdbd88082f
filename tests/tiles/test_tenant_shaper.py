"""Per-tenant shaping: FlexDriver's two-flow experiment scaled to simulation, and tenant tags
that an untrusted tile cannot forge (its monitor stamps its source)."""

import random

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib.wiring import connect

from apiary.noc import Message, NocHeader
from apiary.noc.message_buffer import MessageBuffer
from apiary.os.monitor import Monitor
from apiary.stream.testbench import simulate
from apiary.stream.token_bucket import Rate
from apiary.tile import Endpoint, TileEnv
from apiary.tiles import TenantShaperTile
from flit_drivers import collect_messages, put_message

WIDTH = 128                     # a one-flit header: the shaper passes heads combinationally
A, B = (0, 1), (1, 1)           # the two flows' source tiles: tenants 0 and 1
SERVICE = (2, 0)
PAYLOAD = bytes(16)             # a header flit and a payload flit
FLITS = 2


def shaper(rates, width=WIDTH):
    env = TileEnv("shaper", x=1, y=0, width=width,
                  routes={"data": {None: [Endpoint("service", *SERVICE, 0b1000)]}})
    return TenantShaperTile(env, tenants={A: 0, B: 1}, rates=rates)


class SharedService(Elaboratable):
    """The shaper, then the shared service's input: a 16-flit buffer that never stalls (the
    no-backpressure contract) and drops what does not fit."""

    def __init__(self, rates, width):
        self.shaper = shaper(rates, width)
        self.buffer = MessageBuffer(width, buffer_flits=16, max_flits=FLITS, always_ready=True)

    def elaborate(self, platform):
        m = Module()
        m.submodules.shaper, m.submodules.buffer = self.shaper, self.buffer
        connect(m, shaper=self.shaper.noc_out, buffer=self.buffer.i)
        return m


def two_flows(rates, cycles=3000, seed=1, width=WIDTH):
    """Offered load 8 (A) : 16 (B), the input link full (one flit a cycle); the service takes
    one flit every other cycle (capacity 12 of the 24 offered). Returns flits delivered per
    flow, and the shaper's counters."""
    dut = SharedService(rates, width)
    rng = random.Random(seed)
    delivered = {A: 0, B: 0}
    counters = {}

    async def offer(ctx):
        while True:
            src = A if rng.random() < 1 / 3 else B
            await put_message(ctx, dut.shaper.noc_in, Message(
                NocHeader(dst_x=1, dst_y=0, src_x=src[0], src_y=src[1]), payload=PAYLOAD), width)

    out: list[Message] = []

    async def service(ctx):             # takes a flit every other cycle
        await collect_messages(ctx, dut.buffer.o, width, out, ready=lambda cycle: cycle % 2)

    async def main(ctx):
        await ctx.tick().repeat(cycles)
        for msg in out:
            delivered[(msg.header.src_x, msg.header.src_y)] += FLITS
        for name in ("t0_passed", "t0_dropped", "t1_passed", "t1_dropped"):
            counters[name] = ctx.get(getattr(dut.shaper.counters, name))

    simulate(dut, main, background=[offer, service])
    return delivered, counters


@pytest.mark.parametrize("width", [128, 512])
def test_unshaped_flows_share_in_proportion_to_offered_load(width):
    """No limits: the service admits each flow in proportion to its load, about 1 : 2 (the
    paper: 4.15 vs 8.35 Gb/s of 12)."""
    delivered, counters = two_flows([None, None], width=width)
    total = delivered[A] + delivered[B]
    assert total == pytest.approx(1500, rel=0.02)               # capacity: 1 flit / 2 cycles
    assert delivered[A] / delivered[B] == pytest.approx(0.5, abs=0.1)
    # Unshaped, the shaper passes everything: its counts are the offered load, and the
    # service's split follows it within 15 %.
    offered = counters["t0_passed"] / counters["t1_passed"]
    assert delivered[A] / delivered[B] == pytest.approx(offered, rel=0.15)
    assert counters["t0_dropped"] == counters["t1_dropped"] == 0


@pytest.mark.parametrize("width", [128, 512])
def test_shaped_flows_stay_within_their_limits(width):
    """6 of 12 each: flow B cannot exceed its limit, so flow A reaches its share (the paper:
    "flow B cannot exceed its limit and thus allows flow A to reach its allocated bandwidth")."""
    limit = Rate(burst=8, refill=1, period=4)                   # 1/4 flit a cycle: 6 of 24
    cycles = 3000
    delivered, counters = two_flows([limit, limit], cycles=cycles, width=width)
    bound = cycles * limit.per_cycle + limit.burst
    assert delivered[A] <= bound and delivered[B] <= bound
    assert delivered[A] >= 0.9 * cycles * limit.per_cycle     # A gets (nearly) all of its 6
    assert delivered[B] >= 0.9 * cycles * limit.per_cycle
    assert counters["t1_dropped"] > counters["t0_dropped"] > 0


def forged_run(behind_monitor: bool):
    """A tile at A forges B's source (and sends as fast as it can); tenant 0 (A) may pass 8
    flits only, tenant 1 (B) is unlimited."""
    sh = shaper([Rate(burst=8, refill=1, period=100_000), None])
    msgs = [Message(NocHeader(dst_x=1, dst_y=0, src_x=B[0], src_y=B[1]), payload=PAYLOAD)
            for _ in range(6)]
    out, counters = [], {}
    if behind_monitor:
        monitor = Monitor(TileEnv("forger", x=A[0], y=A[1], width=WIDTH), ipc_out=[(1, 0, None)])

        class Chain(Elaboratable):
            def elaborate(self, platform):
                m = Module()
                m.submodules.monitor, m.submodules.shaper = monitor, sh
                connect(m, monitor=monitor.noc_out, shaper=sh.noc_in)
                return m
        dut, port = Chain(), monitor.tile_out
    else:
        dut, port = sh, sh.noc_in

    async def forger(ctx):
        for msg in msgs:
            await put_message(ctx, port, msg, WIDTH)

    async def sink(ctx):
        await collect_messages(ctx, sh.noc_out, WIDTH, out)

    async def main(ctx):
        await ctx.tick().repeat(100)
        counters.update({name: ctx.get(getattr(sh.counters, name)) for name in
                         ("t0_passed", "t0_dropped", "t1_passed", "t1_dropped")})

    simulate(dut, main, background=[forger, sink])
    return out, counters


def test_forged_source_is_charged_to_its_own_tenant():
    out, counters = forged_run(behind_monitor=True)
    # The monitor wrote the tile's own place; the shaper charged tenant 0: four 2-flit
    # messages fit its 8 flits, the other two are dropped, and tenant 1's budget is untouched.
    assert counters == {"t0_passed": 4, "t0_dropped": 2, "t1_passed": 0, "t1_dropped": 0}
    assert [(m.header.src_x, m.header.src_y) for m in out] == [A] * 4
    assert all((m.header.dst_x, m.header.dst_y) == SERVICE for m in out)


def test_without_a_monitor_the_forgery_would_work():
    """The same tile trusted (no monitor): its forged source is believed. This is why the
    tenant comes from the monitor-stamped source and nothing the tile writes."""
    out, counters = forged_run(behind_monitor=False)
    assert counters == {"t0_passed": 0, "t0_dropped": 0, "t1_passed": 6, "t1_dropped": 0}
    assert len(out) == 6


def test_tenants_by_tile_name():
    from apiary.design import Design
    from apiary.tiles import PortTile, tenant_places
    d = Design("t", cols=3, rows=2, width=WIDTH)
    d.add("a", PortTile, at=A)
    d.add("b", PortTile, at=B)
    assert tenant_places(d, {"a": 0, "b": 1}) == {A: 0, B: 1}
    with pytest.raises(ValueError, match="no tile 'c'"):
        tenant_places(d, {"c": 0})


def test_shaper_errors():
    with pytest.raises(ValueError, match="tenants are 0 to 1"):
        TenantShaperTile(TileEnv(routes={"data": {None: [Endpoint("s", 1, 1, 8)]}}),
                         tenants={A: 2}, rates=[None, None])
    with pytest.raises(ValueError, match="exactly one next hop"):
        TenantShaperTile(tenants={A: 0}, rates=[None])
    with pytest.raises(ValueError, match="rates must be a list of Rate"):
        TenantShaperTile(tenants={A: 0}, rates=[3])
