"""Test helpers: give a component what a :class:`~apiary.noc.framing.MessageReceiver` gives for
each message (the UDP services' intakes and stores take a receiver's ``o_hdr`` and ``o_data``):
its header transfer, then its payload as one packet (an empty one for an empty payload, as with
``empty_packets``)."""

import random

from apiary.stream.testbench import (WithCycleCounter, packet_words, simulate, stream_get,
                                     stream_put)


async def feed_message(ctx, hdr, words, width, payload, *, msg_type, meta=0, rng=None,
                       stall=0.0):
    """One message: ``hdr`` gets ``msg_type``, ``payload_bytes`` and ``meta``; ``words`` the
    bytes ``payload`` (idle cycles with probability ``stall`` before each transfer, with
    ``rng``). Returns after the last word's transfer."""
    await stream_put(ctx, hdr, {"msg_type": msg_type, "payload_bytes": len(payload),
                                "meta": meta}, rng=rng, stall=stall)
    for word in packet_words(payload, width):       # lanes past nbytes zero, as received
        await stream_put(ctx, words, word, rng=rng, stall=stall)


def run_intake(dut, width, messages, *, counters, take=True, stall=0.0, seed=0):
    """Feed ``messages`` (``(payload, msg_type, meta)``) to an intake (``hdr``, ``i``, a queue
    on ``o``), asserting that it takes ``hdr`` and ``i`` in every cycle, and (with ``take``)
    take its ``o``. Returns ``(the payloads taken from o, {counter: value at the end}, cycles
    of each message's last word, cycles of each o transfer)``."""
    rng = random.Random(seed)
    top = WithCycleCounter(dut)
    got, ends, outs, counts = [], [], [], {}

    async def source(ctx):
        for payload, msg_type, meta in messages:
            await feed_message(ctx, dut.hdr, dut.i, width, payload, msg_type=msg_type,
                               meta=meta, rng=rng, stall=stall)
            ends.append(ctx.get(top.cycle) - 1)
        await ctx.tick().repeat(10)
        if take:
            while ctx.get(dut.o.valid):
                await ctx.tick()
        counts.update({name: ctx.get(getattr(dut, name)) for name in counters})

    async def sink(ctx):
        while True:
            got.append(await stream_get(ctx, dut.o, rng=rng, stall=stall))
            outs.append(ctx.get(top.cycle) - 1)

    async def always_ready(ctx):
        async for _, _, hdr_ready, i_ready in ctx.tick().sample(dut.hdr.ready, dut.i.ready):
            assert hdr_ready and i_ready, "the intake held its input"

    simulate(top, source, background=[always_ready] + ([sink] if take else []),
             timeout=5000)
    return got, counts, ends, outs
