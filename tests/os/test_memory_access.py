"""MemoryLoad and MemoryStore alone (the memory tile's data paths): a load over a memory model
with any offset, tail and ring, its read buffer's credit and throughput; a store's words and
byte enables against a Python memory with a stalling memory port, and a discarded packet."""

import random

import pytest
from amaranth import Module

from apiary.os.memory import MemoryModel
from apiary.os.memory_access import MemoryLoad, MemoryStore
from apiary.stream.testbench import recv_packet, send_packet, simulate, transfers


WIDTH = 64
NB = WIDTH // 8
AW = 6                                      # 64 words


def load_over_model(latency, read_buffer, init):
    m = Module()
    m.submodules.model = model = MemoryModel(WIDTH, AW, depth_words=1 << AW, latency=latency,
                                                  init=init)
    m.submodules.load = load = MemoryLoad(WIDTH, addr_width=AW, read_buffer=read_buffer)
    port = model.port
    m.d.comb += [
        port.cmd.valid.eq(load.read_cmd),
        port.cmd.payload.addr.eq(load.read_addr),
        load.cmd_ready.eq(port.cmd.ready),
        load.rdata.valid.eq(port.rdata.valid),
        load.rdata.payload.eq(port.rdata.payload),
        port.rdata.ready.eq(load.rdata.ready),
    ]
    return m, load


async def start(ctx, dut, **values):
    for name, value in values.items():
        ctx.set(getattr(dut, name), value)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    if hasattr(dut, "read"):
        ctx.set(dut.read, 0)


def expected_load(memory, first, words, off, tail, wmask):
    """The bytes a load sends: ``words`` words from ``first`` (wrapping by ``wmask``), less
    ``off`` bytes at the start and ``NB - tail`` at the end."""
    addr, data = first, b""
    for _ in range(words):
        data += memory[addr].to_bytes(NB, "little")
        addr = (addr + 1) & wmask | addr & ~wmask
    return data[off:len(data) - (NB - tail)]


@pytest.mark.parametrize("latency, read_buffer", [(1, 2), (6, 2), (3, 16)])
def test_loads_any_run_of_words(latency, read_buffer):
    """Loads with offsets, tails and rings (a 4-word ring wrapping, a run starting mid-ring),
    the packet on ``o`` stalled at random: exactly the bytes of the range."""
    rng = random.Random(latency)
    memory = [rng.getrandbits(WIDTH) for _ in range(1 << AW)]
    m, dut = load_over_model(latency, read_buffer, memory)
    full = (1 << AW) - 1
    loads = [(0, 1, 0, NB, full), (5, 3, 3, 2, full), (62, 4, 7, 1, full),
             (9, 6, 1, 5, 0b11), (20, 1, 2, 4, full), (33, 10, 0, NB, 0b111)]
    got = []

    async def tb(ctx):
        for first, words, off, tail, wmask in loads:
            await start(ctx, dut, addr=first, words=words, off=off, tail=tail, wmask=wmask,
                        read=1)
            got.append(await recv_packet(ctx, dut.o, WIDTH, rng=rng, stall=0.3))
        assert not ctx.get(dut.read_cmd)

    simulate(m, tb, timeout=2_000)
    assert got == [expected_load(memory, *load) for load in loads]


def test_start_without_read_issues_nothing():
    m, dut = load_over_model(1, 4, [])

    async def tb(ctx):
        await start(ctx, dut, addr=3, words=5, off=0, tail=NB, wmask=(1 << AW) - 1)
        for _ in range(10):
            assert not ctx.get(dut.read_cmd) and not ctx.get(dut.o.valid)
            await ctx.tick()

    simulate(m, tb, timeout=100)


def test_a_long_load_runs_at_one_word_per_cycle():
    """32 words with a read latency of 6 and a 8-word read buffer: one word per cycle on
    ``o`` (the reads are issued ahead), no more than 8 reads in flight."""
    m, dut = load_over_model(6, 8, list(range(64)))
    out = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        await start(ctx, dut, addr=0, words=32, off=0, tail=NB, wmask=(1 << AW) - 1, read=1)
        await ctx.tick().repeat(60)

    simulate(m, tb, background=[transfers(dut.o, out)], timeout=200)
    assert len(out) == 32 and out == list(range(out[0], out[0] + 32))


def store_watch(dut, memory, rng, ready):
    """Background: a memory port that takes commands and data at random (``ready``: the
    chance per cycle) and applies each write, with its byte enables, to ``memory``."""
    async def tb(ctx):
        cmds, datas = [], []
        while True:
            ctx.set(dut.cmd_ready, int(rng.random() < ready))
            ctx.set(dut.wdata.ready, int(rng.random() < ready))
            _, _, cmd, cr, addr, wv, wr, data, we = await ctx.tick().sample(
                dut.write_cmd, dut.cmd_ready, dut.write_addr, dut.wdata.valid,
                dut.wdata.ready, dut.wdata.payload.data, dut.wdata.payload.we)
            if cmd and cr:
                cmds.append(int(addr))
            if wv and wr:
                datas.append((int(data), int(we)))
            while cmds and datas:
                a, (d, e) = cmds.pop(0), datas.pop(0)
                for lane in range(NB):
                    if e >> lane & 1:
                        memory[a * NB + lane] = d >> (8 * lane) & 0xFF
    return tb


@pytest.mark.parametrize("ready", [1.0, 0.5])
def test_stores_land_at_their_offset_and_touch_nothing_else(ready):
    """Stores at unaligned offsets, one wrapping in a 4-word ring, one empty, one discarded
    instead (``drain``): the Python memory holds exactly the stored bytes; ``done`` rises
    after the last word's data went out; ``idle`` between packets."""
    rng = random.Random(int(ready * 10))
    memory = bytearray(NB << AW)
    reference = bytearray(NB << AW)
    m = Module()
    m.submodules.store = dut = MemoryStore(WIDTH, addr_width=AW)
    full = (1 << AW) - 1
    stores = [(3, 5, full, 20, True), (10, 0, full, 8, True), (13, 6, 0b11, 29, True),
              (40, 2, full, 0, True), (50, 1, full, 16, False), (60, 7, full, 9, True)]

    async def tb(ctx):
        for first, off, wmask, size, keep in stores:
            payload = bytes(rng.randrange(1, 256) for _ in range(size))
            assert ctx.get(dut.idle)
            ctx.set(dut.store if keep else dut.drain, 1)
            await start(ctx, dut, addr=first, off=off, wmask=wmask)
            ctx.set(dut.store, 0)
            ctx.set(dut.drain, 0)
            await send_packet(ctx, dut.i, payload, WIDTH, rng=rng, stall=0.3)
            if keep:
                while not ctx.get(dut.done):
                    await ctx.tick()
                for n, byte in enumerate(payload):
                    word = (first + (off + n) // NB) & wmask | first & ~wmask
                    reference[word * NB + (off + n) % NB] = byte
            await ctx.tick()
        await ctx.tick().repeat(5)
        assert memory == reference

    simulate(m, tb, background=[store_watch(dut, memory, rng, ready)], timeout=3_000)
