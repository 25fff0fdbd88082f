"""Async testbench helpers for streams (Amaranth 0.5 ``sim.add_testbench``).

Used by the project's tests and by anyone testing a tile: put and get single transfers, send and
receive whole NoC messages, with optional seeded random stalls on either side.
"""

from .header import Message


__all__ = ["stream_put", "stream_get", "send_flits", "recv_flits", "send_message", "recv_message",
           "watchdog"]


async def _stall(ctx, rng, stall):
    if rng is not None:
        while rng.random() < stall:
            await ctx.tick()


async def stream_put(ctx, stream, payload, *, rng=None, stall=0.0):
    """Offer ``payload`` on ``stream`` until it is taken; with ``rng``, idle first with
    probability ``stall`` per cycle. Returns after the transfer's clock edge."""
    await _stall(ctx, rng, stall)
    ctx.set(stream.payload, payload)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream, *, rng=None, stall=0.0):
    """Take one transfer from ``stream`` and return its payload (a ``data.Const`` for layouts)."""
    await _stall(ctx, rng, stall)
    ctx.set(stream.ready, 1)
    payload, = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


async def send_flits(ctx, port, flits, **stall):
    """Send ``(data, last)`` pairs on a flit stream."""
    for data, last in flits:
        await stream_put(ctx, port, {"data": data, "last": last}, **stall)


async def recv_flits(ctx, port, **stall):
    """Receive flits up to and including the one with ``last`` set; a list of ``(data, last)``."""
    flits = []
    while True:
        p = await stream_get(ctx, port, **stall)
        flits.append((int(p.data), int(p.last)))
        if p.last:
            return flits


async def send_message(ctx, port, message, width, **stall):
    await send_flits(ctx, port, message.flits(width), **stall)


async def recv_message(ctx, port, width, **stall):
    return Message.from_flits(await recv_flits(ctx, port, **stall), width)


def watchdog(cycles):
    """A background testbench that fails the test if the simulation still runs after ``cycles``
    cycles, so that a wedged design fails instead of hanging::

        sim.add_testbench(watchdog(10_000), background=True)
    """
    async def tb(ctx):
        for _ in range(cycles):
            await ctx.tick()
        raise AssertionError(f"the simulation still runs after {cycles} cycles")
    return tb
