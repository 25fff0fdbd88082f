"""LogTile alone: messages pass unchanged (but for destination and source), one entry per message
with the cycle its first flit left, its lengths, type and first bytes; the log keeps the first
entries and counts the rest; rearm empties it."""

import random

import pytest

from apiary.noc import Message, NocHeader
from apiary.noc.testbench import recv_flits, send_message
from apiary.stream.testbench import simulate, transfers
from apiary.tile import Endpoint, TileEnv
from apiary.tiles.log import LogEntry, LogTile, entry_width
from apiary.tiles.raw_port import message_frame


NEXT = Endpoint("next", 2, 1, 0b1001)


def sample_messages(rng, n, most=100):
    return [Message(NocHeader(dst_x=1, dst_y=0, src_x=9, src_y=9, msg_type=rng.randrange(256)),
                    meta=[rng.getrandbits(64)] * rng.randrange(2),
                    payload=bytes(rng.getrandbits(8) for _ in range(rng.randrange(most))))
            for _ in range(n)]


def forwarded(msg, width):
    """The flits of ``msg`` as the tile forwards it."""
    out = Message.from_flits(msg.flits(width), width)
    out.header.dst_x, out.header.dst_y, out.header.dst_fbits = NEXT.x, NEXT.y, NEXT.fbits
    out.header.src_x, out.header.src_y = 1, 0
    return out.flits(width)


async def read_table(ctx, dut, index):
    """A table read as the control agent does it: hold r_index two cycles, sample on the
    second."""
    ctx.set(dut.regs.log.r_index, index)
    await ctx.tick()
    await ctx.tick()
    return ctx.get(dut.regs.log.r_data)


def expected_entry(flits, cycles, width, snap):
    """The entry of the message ``flits`` that moved on ``cycles``."""
    msg = Message.from_flits(flits, width)
    frame = message_frame(flits, width)
    return LogEntry(cycle=cycles[0], payload_bytes=min(msg.header.payload_bytes, 0xFFFF),
                    flits=len(flits), span=cycles[-1] - cycles[0], msg_type=msg.header.msg_type,
                    snap=(frame + bytes(snap))[:snap])


@pytest.mark.parametrize("width", [64, 512])
def test_log_tile_passes_messages_and_logs_each_with_its_cycle(width):
    snap = 160
    env = TileEnv("log0", x=1, y=0, width=width, routes={"data": {None: [NEXT]}})
    dut = LogTile(env, entries=32, snap=snap)
    rng = random.Random(width)
    msgs = sample_messages(rng, 20)
    moved = []              # cycles of every flit transfer on noc_out
    got = []

    async def source(ctx):
        for msg in msgs:
            await send_message(ctx, dut.noc_in, msg, width, rng=rng, stall=0.3)

    async def sink(ctx):
        for _ in msgs:
            got.append(await recv_flits(ctx, dut.noc_out, rng=rng, stall=0.3))
        await ctx.tick().repeat(3)
        assert ctx.get(dut.counters.written) == len(msgs)
        assert ctx.get(dut.counters.lost) == 0
        flit_cycles = iter(moved)
        for i, flits in enumerate(got):
            assert flits == forwarded(msgs[i], width)
            cycles = [next(flit_cycles) for _ in flits]
            entry = LogEntry.decode(await read_table(ctx, dut, i), snap)
            assert entry == expected_entry(flits, cycles, width, snap)
            assert entry.whole(width) == (len(flits) * width // 8 <= snap)

    simulate(dut, sink, background=[source, transfers(dut.noc_out, moved)], timeout=20_000)


@pytest.mark.parametrize("width", [64, 512])
def test_log_keeps_the_first_entries_counts_the_rest_and_rearms(width):
    env = TileEnv("log0", x=1, y=0, width=width, routes={"data": {None: [NEXT]}})
    dut = LogTile(env, entries=4, snap=0)
    msgs = sample_messages(random.Random(3), 10, most=20)

    async def tb(ctx):
        ctx.set(dut.noc_out.ready, 1)
        for msg in msgs[:6]:                   # back to back: one flit a cycle
            for data, last in msg.flits(width):
                ctx.set(dut.noc_in.payload, {"data": data, "last": last})
                ctx.set(dut.noc_in.valid, 1)
                await ctx.tick()
        ctx.set(dut.noc_in.valid, 0)
        await ctx.tick().repeat(2)
        assert ctx.get(dut.counters.written) == 4
        assert ctx.get(dut.counters.lost) == 2
        types = [LogEntry.decode(await read_table(ctx, dut, i), 0).msg_type for i in range(4)]
        assert types == [m.header.msg_type for m in msgs[:4]]
        ctx.set(dut.regs.rearm, 1)
        await ctx.tick()
        assert ctx.get(dut.counters.written) == 0
        assert ctx.get(dut.counters.lost) == 0
        for data, last in msgs[6].flits(width):
            ctx.set(dut.noc_in.payload, {"data": data, "last": last})
            ctx.set(dut.noc_in.valid, 1)
            await ctx.tick()
        ctx.set(dut.noc_in.valid, 0)
        await ctx.tick().repeat(2)
        assert ctx.get(dut.counters.written) == 1
        entry = LogEntry.decode(await read_table(ctx, dut, 0), 0)
        assert entry.msg_type == msgs[6].header.msg_type
        assert entry.payload_bytes == len(msgs[6].payload)
        assert entry.span == entry.flits - 1 == len(msgs[6].flits(width)) - 1

    simulate(dut, tb, timeout=2000)


def test_log_tile_without_next_hop_logs_then_drops():
    dut = LogTile(TileEnv("log0", width=64), entries=8, snap=16)
    msgs = sample_messages(random.Random(4), 3, most=30)

    async def tb(ctx):
        for msg in msgs:
            await send_message(ctx, dut.noc_in, msg, 64)
        await ctx.tick().repeat(2)
        assert ctx.get(dut.counters.dropped) == 3
        assert ctx.get(dut.counters.written) == 3
        entry = LogEntry.decode(await read_table(ctx, dut, 2), 16)
        assert entry.snap == message_frame(msgs[2].flits(64), 64)[:16]
        assert ctx.get(dut.noc_out.valid) == 0

    simulate(dut, tb, timeout=2000)


def test_log_tile_refuses_bad_parameters():
    with pytest.raises(ValueError, match="power of two"):
        LogTile(entries=100)
    with pytest.raises(ValueError, match="snap must be 0 to 232 bytes"):
        LogTile(snap=233)
    with pytest.raises(ValueError, match="linktype must be one of"):
        LogTile(linktype=105)
    assert entry_width(232) == 1984


def test_entry_encodes_and_decodes():
    e = LogEntry(cycle=2**63 + 5, payload_bytes=1500, flits=3, span=7, msg_type=2,
                 snap=bytes(range(20)))
    assert LogEntry.decode(e.encode(), 20) == e
    assert e.whole(512) is False and e.message_bytes(512) == e.snap
    assert LogEntry(1, 1, 2, 1, 1, bytes(20)).message_bytes(64) == bytes(16)
