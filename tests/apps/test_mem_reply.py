"""MemReply (beehive/apps/mem_server.py) alone, at 64 and 512 bits with a stalling consumer:
each reply is exactly what the Python model sends (:func:`mem_reply`: the 8-byte header, then
the ack's data for a read), with its length and UDP sum; a refused request's reply has status 2
and no data; the header goes out once per reply however long it is offered."""

import random

import pytest

from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import packet_words, recv_packet, simulate, stream_put
from beehive.apps.mem_server import (OP_READ, OP_WRITE, STATUS_BAD_REQUEST,
                                     STATUS_MEMORY_ERROR, STATUS_OK, MemReply, mem_reply)

MAX_READ = 200


@pytest.mark.parametrize("width", [64, 512])
def test_replies_are_what_the_model_sends(width):
    rng = random.Random(width)
    cases = []                  # (op, length, addr, how, data, error)
    for _ in range(3):
        n = rng.choice([1, 8, 64, 65, MAX_READ])
        data = bytes(rng.getrandbits(8) for _ in range(n))
        cases += [(OP_READ, n, rng.getrandbits(32), "ack", data, 0),
                  (OP_WRITE, rng.getrandbits(16), rng.getrandbits(32), "ack", b"", 0),
                  (OP_READ, n, rng.getrandbits(32), "ack", b"", 1),
                  (rng.getrandbits(8), rng.getrandbits(16), rng.getrandbits(32), "refuse", b"",
                   0)]
    dut = MemReply(width, MAX_READ)
    pending = []                # the acks' data, for the feeder

    async def feeder(ctx):
        while True:
            if pending:
                for word in packet_words(pending.pop(0), width):
                    await stream_put(ctx, dut.i, word, rng=rng, stall=0.2)
            else:
                await ctx.tick()

    async def tb(ctx):
        for op, length, addr, how, data, error in cases:
            ctx.set(dut.head, {"op": op, "length": length, "addr": addr,
                               "write": op == OP_WRITE})
            ctx.set(dut.ack, {"bytes": len(data),
                              "info": ones_complement_sum(data) | error << 16})
            ctx.set(dut.start, 1)
            ctx.set(dut.refuse if how == "refuse" else dut.take_ack, 1)
            await ctx.tick()
            for strobe in (dut.start, dut.refuse, dut.take_ack):
                ctx.set(strobe, 0)
            status = (STATUS_BAD_REQUEST if how == "refuse" else
                      STATUS_MEMORY_ERROR if error else STATUS_OK)
            reply = mem_reply(op, status, length, addr, data)
            assert ctx.get(dut.payload_bytes) == len(reply)
            assert ctx.get(dut.l4_sum) == ones_complement_sum(reply)
            ctx.set(dut.offer, 1)
            if how == "ack":
                pending.append(data)
            assert await recv_packet(ctx, dut.o, width, rng=rng, stall=0.3) == reply
            ctx.set(dut.done, 1)
            await ctx.tick()
            ctx.set(dut.done, 0)
            for _ in range(4):              # still offered: the header does not go again
                assert not ctx.get(dut.o.valid)
                await ctx.tick()
            ctx.set(dut.offer, 0)

    simulate(dut, tb, background=[feeder], timeout=20_000)
