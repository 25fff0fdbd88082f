"""Generic tiles: ForwardTile rewrites only the routing and source fields; PortTile routes; a
wrapper of a control-plane tile passes that plane through."""

import random

import pytest

from apiary.noc import Message, NocHeader
from apiary.noc.testbench import recv_message, send_message
from apiary.stream.testbench import simulate
from apiary.tile import Endpoint, TileEnv
from apiary.tiles import ControlPortTile, ForwardTile, PortTile, TileWrapper


def sample_messages(rng, n):
    return [Message(NocHeader(dst_x=1, dst_y=0, src_x=9, src_y=9, msg_type=rng.randrange(256)),
                    meta=[rng.getrandbits(64)] * rng.randrange(2),
                    payload=bytes(rng.getrandbits(8) for _ in range(rng.randrange(100))))
            for _ in range(n)]


@pytest.mark.parametrize("width", [64, 512])
def test_forward_tile_rewrites_destination_and_source(width):
    env = TileEnv("fwd", x=1, y=0, width=width,
                  routes={"data": {None: [Endpoint("next", 2, 1, 0b1001)]}})
    dut = ForwardTile(env)
    rng = random.Random(width)
    msgs = sample_messages(rng, 20)

    async def source(ctx):
        for msg in msgs:
            await send_message(ctx, dut.noc_in, msg, width, rng=rng, stall=0.3)

    async def sink(ctx):
        for msg in msgs:
            got = await recv_message(ctx, dut.noc_out, width, rng=rng, stall=0.3)
            expect = Message.from_flits(msg.flits(width), width)
            expect.header.dst_x, expect.header.dst_y, expect.header.dst_fbits = 2, 1, 0b1001
            expect.header.src_x, expect.header.src_y = 1, 0
            assert got == expect

    simulate(dut, sink, background=[source])


def test_forward_tile_without_next_hop_drops_and_counts():
    dut = ForwardTile(TileEnv("sink", width=64))
    msgs = sample_messages(random.Random(1), 5)

    async def tb(ctx):
        for msg in msgs:
            await send_message(ctx, dut.noc_in, msg, 64)
        await ctx.tick()
        assert ctx.get(dut.counters.dropped) == 5
        assert ctx.get(dut.noc_out.valid) == 0

    simulate(dut, tb)


def test_port_tile_route_requires_one_next_hop():
    with pytest.raises(ValueError, match="route=True but not exactly one next hop"):
        PortTile(TileEnv("p", width=64), route=True)


@pytest.mark.parametrize("width", [64, 512])
def test_port_tile_routes_to_next_hop(width):
    env = TileEnv("p", x=0, y=2, width=width, routes={"data": {5: [Endpoint("ip", 3, 1)]}})
    dut = PortTile(env, route=True)
    msg = sample_messages(random.Random(2), 1)[0]

    async def tb(ctx):
        ctx.set(dut.noc_out.ready, 1)
        flits = msg.flits(width)
        out = []
        for data, last in flits:
            ctx.set(dut.tx.payload, {"data": data, "last": last})
            ctx.set(dut.tx.valid, 1)
            await ctx.delay(0)
            assert ctx.get(dut.noc_out.valid)
            out.append((ctx.get(dut.noc_out.payload.data), ctx.get(dut.noc_out.payload.last)))
            await ctx.tick()
        got = Message.from_flits(out, width)
        header = got.header
        assert (header.dst_x, header.dst_y, header.src_x, header.src_y) == (3, 1, 0, 2)
        assert got.payload == msg.payload

    simulate(dut, tb)


def test_wrapper_of_a_control_plane_tile_passes_that_plane_through():
    """``TileWrapper.of`` a tile on both planes declares raw control-plane ports beside the
    data plane's and joins them straight to the inner tile's."""
    cls = TileWrapper.of(ControlPortTile)
    assert [(p.name, p.plane, p.raw) for p in cls.inputs] == [
        ("to_tile", "data", True), ("ctl_to_tile", "ctl", True)]
    assert [(p.name, p.plane, p.raw) for p in cls.outputs] == [
        ("from_tile", "data", True), ("ctl_from_tile", "ctl", True)]
    assert all(p.plane == "data" for p in (*TileWrapper.inputs, *TileWrapper.outputs))
    dut = cls(TileEnv("ctl", width=64, ctl_width=64))

    async def tb(ctx):
        ctx.set(dut.ctl_in.payload, {"data": 0x1234, "last": 1})
        ctx.set(dut.ctl_in.valid, 1)
        ctx.set(dut.mac_tx.ready, 1)
        ctx.set(dut.mac_rx.payload, {"data": 0x5678, "nbytes": 8, "last": 1})
        ctx.set(dut.mac_rx.valid, 1)
        ctx.set(dut.ctl_out.ready, 1)
        await ctx.delay(0)
        assert ctx.get(dut.mac_tx.valid) and ctx.get(dut.mac_tx.payload.data) == 0x1234
        assert ctx.get(dut.ctl_in.ready)
        assert ctx.get(dut.ctl_out.valid) and ctx.get(dut.ctl_out.payload.data) == 0x5678
        assert ctx.get(dut.mac_rx.ready)
        assert ctx.get(dut.noc_in.ready) and not ctx.get(dut.noc_out.valid)

    simulate(dut, tb)
