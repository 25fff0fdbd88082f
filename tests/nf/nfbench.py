"""One network-function tile on its own, in Amaranth's simulator: what the NF tests share.

Built on ``tests/proto/tilebench.py`` (the tile at :data:`HERE` with the design's addresses,
messages in with seeded random gaps, out with seeded random back-pressure), plus the control
plane's side of the rule table: :func:`run` can write table entries at random cycles while the
packets flow, as the control plane would.
"""

import pathlib
import random
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "proto"))

from apiary.noc.testbench import recv_flits, send_flits  # noqa: E402
from apiary.stream.testbench import simulate  # noqa: E402
from tilebench import (HERE, IPV4, MAC, PEER_IP, PEER_MAC, SEEDS, WIDTHS, Run,  # noqa: E402,F401
                       counters_of, decode, make_tile, packet_flits)

NEXT = (2, 1)                   # the tile's single next hop


def make_nf(cls, width, routes=None, **params):
    """``cls`` at :data:`HERE` with one next hop (:data:`NEXT`), or ``routes``."""
    return make_tile(cls, width, routes if routes is not None else {None: NEXT}, **params)


def run(tile, width, inputs, expect, *, seed=1, stall=0.3, gaps=0.3, settle=300,
        writes=(), write_prob=0.02, timeout=400_000):
    """Send ``inputs`` (``(payload, meta, msg_type)``) into ``tile``, collect ``expect`` decoded
    messages, check it sends nothing more for ``settle`` cycles, read its counters.

    ``writes`` is a cycle of ``(index, value)`` table writes: while the outputs are awaited,
    each cycle with probability ``write_prob`` the next one is written to the tile's rule table
    (``w_valid`` for one cycle). ``Run.writes`` counts the writes made."""
    rng = random.Random(seed)
    wrng = random.Random(seed + 1000)
    result = Run()
    result.writes = 0
    done = []

    async def source(ctx):
        for payload, meta, msg_type in inputs:
            await send_flits(ctx, tile.noc_in, packet_flits(width, payload, meta,
                                                            msg_type=msg_type),
                             rng=rng, stall=gaps)

    async def writer(ctx):
        if not writes:
            return
        port = getattr(tile.regs, tile.table_name)
        k = 0
        while writes and not done:
            if wrng.random() < write_prob:
                index, value = writes[k % len(writes)]
                ctx.set(port.w_valid, 1)
                ctx.set(port.w_index, index)
                ctx.set(port.w_data, value)
                k += 1
                result.writes = k
            await ctx.tick()
            ctx.set(port.w_valid, 0)

    async def sink(ctx):
        for _ in range(expect):
            flits = await recv_flits(ctx, tile.noc_out, rng=rng, stall=stall)
            result.out.append(decode(flits, width))
        done.append(True)
        ctx.set(tile.noc_out.ready, 1)
        for _ in range(settle):
            assert not ctx.get(tile.noc_out.valid), f"more than the {expect} outputs expected"
            await ctx.tick()
        for name in counters_of(tile):
            result.counters[name] = ctx.get(getattr(tile.counters, name))

    simulate(tile, sink, background=[source, writer], timeout=timeout)
    return result


def read_entry(tile, index):
    """Entry ``index`` of the tile's rule table as the control plane reads it (``r_index``,
    then ``r_data``)."""
    got = []

    async def tb(ctx):
        port = getattr(tile.regs, tile.table_name)
        ctx.set(port.r_index, index)
        await ctx.tick()
        got.append(ctx.get(port.r_data))

    simulate(tile, tb, timeout=100)
    return got[0]
