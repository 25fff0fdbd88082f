"""FlowTable (beehive/apps/tcp_app.py) alone in Amaranth's simulator: what the TCP applications
keep of the engine's connections, driven with the engine's messages one at a time."""

import pytest
from amaranth.hdl import unsigned

from apiary.stream.testbench import simulate
from beehive.apps.tcp_app import FlowTable
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import BufferKind, Status

NEW, RX_RESP, TX_RESP = (MsgType.TCP_NEW_FLOW_NOTIF.value, MsgType.TCP_RX_MSG_RESP.value,
                         MsgType.TCP_TX_MSG_RESP.value)
PULSES = ("announced", "send_ring", "ended", "kill", "drop", "current", "handled")


def table():
    return FlowTable(4, 2, forgets=1, reads={"gen": ("gens", "comb"), "ctx": ("ctx", "sync"),
                                             "rx_loc": ("rx_locs", "comb"),
                                             "tx_loc": ("tx_locs", "comb")})


async def message(ctx, dut, msg_type, slot, gen, **meta):
    """Offer one engine message for a cycle; returns the one-cycle outputs it drove."""
    status = meta.setdefault("status", Status.OK)
    ctx.set(dut.app.valid, 1)
    ctx.set(dut.app.type, msg_type)
    ctx.set(dut.app.slot, slot)
    ctx.set(dut.app.gen, gen)
    ctx.set(dut.app.ok, status in (Status.OK, Status.EOF))
    ctx.set(dut.app.meta, {"flow": slot | gen << 12, **meta})
    pulses = {name: ctx.get(getattr(dut, name)) for name in PULSES}
    await ctx.tick()
    ctx.set(dut.app.valid, 0)
    return {name: value for name, value in pulses.items() if value}


def test_connections_responses_and_ends_are_kept_per_slot():
    dut = table()

    async def bench(ctx):
        # A new connection: announced, live, its generation and ring kept, queued once.
        got = await message(ctx, dut, NEW, 2, 5, kind=BufferKind.RECEIVE, mem_x=7, mem_y=8)
        assert got == {"announced": 1, "kill": 1, "handled": 1}
        assert ctx.get(dut.live) == 0b0100
        ctx.set(dut.gen.addr, 2)
        ctx.set(dut.rx_loc.addr, 2)
        assert ctx.get(dut.gen.data) == 5 and ctx.get(dut.rx_loc.data.x) == 7
        assert await message(ctx, dut, NEW, 2, 6, kind=BufferKind.RECEIVE) == {
            "announced": 1, "kill": 1, "handled": 1}
        assert ctx.get(dut.new.valid) and ctx.get(dut.new.payload) == 2
        ctx.set(dut.new.ready, 1)
        await ctx.tick()
        ctx.set(dut.new.ready, 0)
        assert not ctx.get(dut.new.valid)           # queued once, though announced twice
        # Its send ring: kept for the current generation, dropped for another.
        assert await message(ctx, dut, NEW, 2, 6, kind=BufferKind.SEND, mem_x=3, mem_y=4) == {
            "send_ring": 1, "current": 1, "handled": 1}
        ctx.set(dut.tx_loc.addr, 2)
        assert ctx.get(dut.tx_loc.data.y) == 4
        assert "drop" in await message(ctx, dut, NEW, 2, 5, kind=BufferKind.SEND)
        # Responses: the newest kept, the slot queued once; a stale one dropped.
        await message(ctx, dut, RX_RESP, 2, 6, length=10, ptr=1)
        await message(ctx, dut, RX_RESP, 2, 6, length=20, ptr=1, status=Status.EOF)
        assert await message(ctx, dut, RX_RESP, 2, 5, length=30) == {"drop": 1, "handled": 1}
        assert ctx.get(dut.ready.valid) and ctx.get(dut.ready.payload) == 2
        ctx.set(dut.ctx.addr, 2)
        ctx.set(dut.ready.ready, 1)
        await ctx.tick()
        ctx.set(dut.ready.ready, 0)
        assert ctx.get(dut.ctx.data.length) == 20 and ctx.get(dut.ctx.data.status) == Status.EOF
        assert not ctx.get(dut.ready.valid)
        # The engine's TX answers are not the table's.
        assert await message(ctx, dut, TX_RESP, 2, 6) == {"current": 1}
        # A reset ends the current connection: live cleared.
        assert await message(ctx, dut, RX_RESP, 2, 6, status=Status.RESET) == {
            "ended": 1, "kill": 1, "current": 1, "handled": 1}
        assert ctx.get(dut.live) == 0

    simulate(dut, bench, timeout=100)


def test_forget_clears_live_unless_the_slot_is_announced_again():
    dut = table()

    async def bench(ctx):
        for slot in (1, 3):
            await message(ctx, dut, NEW, slot, 1, kind=BufferKind.RECEIVE)
        assert ctx.get(dut.live) == 0b1010
        ctx.set(dut.forget[0].en, 1)
        ctx.set(dut.forget[0].slot, 3)
        await ctx.tick()
        assert ctx.get(dut.live) == 0b0010
        ctx.set(dut.forget[0].slot, 1)          # and a new connection in slot 1, same cycle
        await message(ctx, dut, NEW, 1, 2, kind=BufferKind.RECEIVE)
        assert ctx.get(dut.live) == 0b0010

    simulate(dut, bench, timeout=100)


def test_grants_are_kept_per_slot_and_queue_the_flow_again():
    dut = FlowTable(4, 2, tx_answers="keep", reads={"grant": ("grants", "sync")})

    async def bench(ctx):
        await message(ctx, dut, NEW, 1, 3, kind=BufferKind.RECEIVE)
        await message(ctx, dut, NEW, 2, 1, kind=BufferKind.RECEIVE)
        # An OK answer for the current connection: kept, granted, the slot queued in ready.
        assert await message(ctx, dut, TX_RESP, 1, 3, ptr=70, addr=0x2f0, size_log2=8,
                             length=200) == {"current": 1, "handled": 1}
        assert ctx.get(dut.granted) == 0b0010
        assert ctx.get(dut.ready.valid) and ctx.get(dut.ready.payload) == 1
        ctx.set(dut.grant.addr, 1)
        ctx.set(dut.ready.ready, 1)
        await ctx.tick()
        ctx.set(dut.ready.ready, 0)
        grant = ctx.get(dut.grant.data)
        assert (grant.ptr, grant.addr, grant.size_log2, grant.length) == (70, 0x2f0, 8, 200)
        # Used: the bit cleared.
        await pulse_take(ctx, dut, 1)
        assert ctx.get(dut.granted) == 0
        # One for an older connection is dropped; another status ends the connection.
        assert await message(ctx, dut, TX_RESP, 1, 2, length=9) == {"drop": 1, "handled": 1}
        assert ctx.get(dut.granted) == 0 and not ctx.get(dut.ready.valid)
        assert await message(ctx, dut, TX_RESP, 2, 1, status=Status.CLOSED) == {
            "ended": 1, "kill": 1, "current": 1, "handled": 1}
        assert ctx.get(dut.live) == 0b0010
        # A grant left unused is cleared by the slot's next connection.
        await message(ctx, dut, TX_RESP, 1, 3, length=50)
        assert ctx.get(dut.granted) == 0b0010
        await message(ctx, dut, NEW, 1, 4, kind=BufferKind.RECEIVE)
        assert ctx.get(dut.granted) == 0

    simulate(dut, bench, timeout=100)


def test_requeue_answers_queue_the_flow_again_unless_claimed():
    dut = FlowTable(4, 2, tx_answers="requeue")
    assert "granted" not in dut.signature.members and "take" not in dut.signature.members

    async def bench(ctx):
        await message(ctx, dut, NEW, 1, 3, kind=BufferKind.RECEIVE)
        ctx.set(dut.claimed, 1)                 # a waiter's answer: not the table's
        assert await message(ctx, dut, TX_RESP, 1, 3, length=9) == {"current": 1,
                                                                     "handled": 1}
        assert not ctx.get(dut.ready.valid)
        ctx.set(dut.claimed, 0)                 # one whose waiter gave up: queued again
        await message(ctx, dut, TX_RESP, 1, 3, length=9)
        assert ctx.get(dut.ready.valid) and ctx.get(dut.ready.payload) == 1

    simulate(dut, bench, timeout=50)


async def pulse_take(ctx, dut, slot):
    ctx.set(dut.take.en, 1)
    ctx.set(dut.take.slot, slot)
    await ctx.tick()
    ctx.set(dut.take.en, 0)


def test_read_ports_are_checked():
    with pytest.raises(ValueError, match="read port 'x' must be a new name"):
        FlowTable(4, 2, reads={"x": ("nope", "comb")})
    with pytest.raises(ValueError, match="read port 'live' must be a new name"):
        FlowTable(4, 2, reads={"live": ("gens", "comb")})
    for answers in (None, "requeue"):                           # tables that keep no grants
        with pytest.raises(ValueError, match="read port 'g' must be a new name on one of"):
            FlowTable(4, 2, tx_answers=answers, reads={"g": ("grants", "sync")})
    with pytest.raises(ValueError, match="tx_answers is None, 'requeue' or 'keep', not 'yes'"):
        FlowTable(4, 2, tx_answers="yes")
    assert FlowTable(4, 2).new.payload.shape() == unsigned(2)
