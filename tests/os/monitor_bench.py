"""A test bench for one Monitor: the tile at (1, 1), messages in from both sides, everything that
comes out recorded with its cycle."""

import random

from amaranth.lib.wiring import Component

from apiary.noc.header import Fbits, Message, NocHeader
from apiary.noc.testbench import send_flits
from apiary.os.memory_tile import decode_mem_message, mem_message_flits
from apiary.os.monitor import Monitor, MonitorConfig
from apiary.os.uapi import KernelMeta, KernelMsgType as K, decode_kernel_message, \
    kernel_message_flits
from apiary.stream.testbench import WithCycleCounter, simulate, transfers
from apiary.tile import TileEnv


TILE = (1, 1)
PEER = (2, 1)           # the tile may send here (any port)
SOURCE = (0, 1)         # and hear from here on LOCAL0
MANAGER = (3, 0)
ERRORS = (3, 1)
MEMORY = (0, 3)
KERNEL_TYPES = {t.value for t in K}


def ipc_message(width, dst, payload=b"x", *, src=TILE, msg_type=12, dst_fbits=Fbits.LOCAL0):
    hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], dst_fbits=dst_fbits, src_x=src[0], src_y=src[1],
                    msg_type=msg_type)
    return Message(hdr, [], payload).flits(width)


def kernel(width, msg_type, *, src=MANAGER, dst=TILE, **fields):
    return kernel_message_flits(width, msg_type, KernelMeta(**fields), src=src, dst=dst)


def mem(width, msg_type, addr, size, payload=b"", *, src=TILE, dst=(9, 9), tag=0, error=0):
    return mem_message_flits(width, msg_type, addr, size, payload, src=src, dst=dst, tag=tag,
                             error=error)


def decode(flits, width):
    """A readable tuple of a message that came out: ``("kernel", type, header, meta)``,
    ``("mem", type, header, meta dict, payload)`` or ``("msg", type, Message)``."""
    msg = Message.from_flits(flits, width)
    t = msg.header.msg_type
    if t in KERNEL_TYPES:
        header, meta = decode_kernel_message(flits, width)
        return ("kernel", K(t), header, meta)
    if t in (19, 20, 24, 25):
        header, meta, payload = decode_mem_message(flits, width)
        return ("mem", t, header, meta, payload)
    return ("msg", t, msg)


def collector(port, out, rng=None, stall=0.0):
    """A background testbench that appends ``(cycle, flits)`` to ``out`` for every message taken
    from ``port`` (``cycle``: its last flit's transfer, counted as :func:`transfers` counts), with
    ``ready`` low at random with probability ``stall``."""
    async def tb(ctx):
        ctx.set(port.ready, 1)
        cycle, current = 0, []
        async for _, _, valid, ready, payload in ctx.tick().sample(port.valid, port.ready,
                                                                  port.payload):
            if valid and ready:
                current.append((int(payload.data), int(payload.last)))
                if payload.last:
                    out.append((cycle, current))
                    current = []
            if stall:
                ctx.set(port.ready, int(rng.random() >= stall))
            cycle += 1
    return tb


class MonitorBench:
    """Run ``script(bench, ctx)`` (and any further scripts, alongside) against a fresh monitor;
    ``noc`` and ``tile`` collect ``(cycle, flits)`` of every message out of each side, ``log``
    the cycle of every transfer on each port, ``resets`` the cycles ``tile_reset`` was high,
    ``counters`` the counters at the end. With ``stall``, ``noc_out`` and ``tile_in`` are
    back-pressured at random (seeded by ``seed``)."""

    def __init__(self, width, config=None, *, ipc_out=((*PEER, None),),
                 ipc_in=((*SOURCE, Fbits.LOCAL0),), stall=0.0, seed=0):
        self.width = width
        env = TileEnv(width=width, x=TILE[0], y=TILE[1])
        self.monitor = Monitor(env, config or MonitorConfig(),
                               ipc_out=ipc_out, ipc_in=ipc_in, kernel=[MANAGER, ERRORS, MEMORY],
                               manager=MANAGER, errors=ERRORS)
        self.dut = WithCycleCounter(self.monitor)
        self.noc, self.tile = [], []
        self.counters = {}
        self.log = {"tile_out": [], "noc_out": [], "noc_in": [], "tile_in": []}
        self.resets = []
        self.stall, self.seed = stall, seed

    async def from_tile(self, ctx, flits, **stall):
        await send_flits(ctx, self.monitor.tile_out, flits, **stall)

    async def from_noc(self, ctx, flits, **stall):
        await send_flits(ctx, self.monitor.noc_in, flits, **stall)

    async def wait_out(self, ctx, noc=0, tile=0, *, limit=500):
        """Tick until at least ``noc`` messages have come out to the NoC and ``tile`` to the tile
        (in all), at most ``limit`` cycles."""
        for _ in range(limit):
            if len(self.noc) >= noc and len(self.tile) >= tile:
                return
            await ctx.tick()
        raise AssertionError(f"waited {limit} cycles for {noc}/{tile} messages out, have "
                             f"{len(self.noc)}/{len(self.tile)}")

    def counter(self, ctx, name):
        return ctx.get(getattr(self.monitor.counters, name))

    def noc_messages(self):
        return [decode(f, self.width) for _, f in self.noc]

    def tile_messages(self):
        return [decode(f, self.width) for _, f in self.tile]

    def run(self, script, *others, settle=60, timeout=20_000):
        mon = self.monitor
        pending = [1 + len(others)]

        def done(tb):
            async def wrapped(ctx):
                await tb(self, ctx)
                pending[0] -= 1
            return wrapped

        async def resets(ctx):
            cycle = 0
            async for _, _, value in ctx.tick().sample(mon.tile_reset):
                if value:
                    self.resets.append(cycle)
                cycle += 1

        async def main(ctx):
            await done(script)(ctx)
            while pending[0]:
                await ctx.tick()
            await ctx.tick().repeat(settle)
            for name in mon.counters.signature.members:
                self.counters[name] = ctx.get(getattr(mon.counters, name))

        rng = random.Random(self.seed)
        background = [collector(mon.noc_out, self.noc, rng, self.stall),
                      collector(mon.tile_in, self.tile, rng, self.stall), resets]
        background += [transfers(getattr(mon, port), log) for port, log in self.log.items()]
        simulate(self.dut, main, *(done(tb) for tb in others), background=background,
                 timeout=timeout)
        return self


__all__ = ["MonitorBench", "TILE", "PEER", "SOURCE", "MANAGER", "ERRORS", "MEMORY",
           "ipc_message", "kernel", "mem", "decode", "collector", "Component"]
