"""ControllerEngine (beehive/apps/controller.py) alone, over a slot memory the test fills, the
agents and the reply sender played by the testbench: a READ asks its words one at a time and
writes each into its place in the slot (the reply built in place) before starting the reply
with their count and sum; a WRITE reads each word from the slot before it is sent; a failing
status ends a READ with its remaining words zeroed; a malformed request is answered at once
(status 0xFF); the slot is released with the reply's last row."""

import struct

from amaranth import Elaboratable, Module
from amaranth.lib.memory import Memory

from apiary.stream.testbench import simulate
from beehive.apps.controller import (STATUS_BAD_REQUEST, STATUS_OK, ControllerEngine,
                                     SlotGeometry, read_request, write_request)

WIDTH = 64
GEOMETRY = SlotGeometry(WIDTH, 2)


class Slots(Elaboratable):
    """The engine over a slot memory as RequestSlots has it (the test plays the rest)."""

    def __init__(self, request):
        nb = WIDTH // 8
        rows = [int.from_bytes(request[k:k + nb].ljust(nb, b"\0"), "little")
                for k in range(0, len(request), nb)]
        self.dut = ControllerEngine(GEOMETRY)
        self.mem = Memory(shape=WIDTH, depth=2 << GEOMETRY.row_bits, init=rows)
        self.length = len(request)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut, m.submodules.mem = self.dut, self.mem
        r = self.dut.requests
        rd, wr = self.mem.read_port(), self.mem.write_port(granularity=32)
        m.d.comb += [rd.addr.eq(r.read.addr), rd.en.eq(r.read.en), r.read.data.eq(rd.data),
                     wr.addr.eq(r.reply.addr), wr.data.eq(r.reply.data), wr.en.eq(r.reply.en),
                     r.length.eq(self.length)]
        return m


def serve(request, answer):
    """Run ``request`` (in slot 0) to its reply; ``answer(word)`` gives each word's ack
    ``(status, value)``. Returns the words asked (x, y, addr, read, data) and a dict of the
    reply's (status, words), its total, the counters and the slot's bytes after it."""
    top = Slots(request)
    dut = top.dut
    asked, result = [], {}

    async def bench(ctx):
        r, agent, reply = dut.requests, dut.agent, dut.reply
        ctx.set(r.pending, 1)
        while True:
            if ctx.get(agent.offer):
                word = tuple(ctx.get(getattr(agent, n)) for n in ("x", "y", "addr", "read"))
                word += (0 if word[3] else ctx.get(agent.data),)     # a READ sends no data
                asked.append(word)
                ctx.set(agent.issued, 1)
                await ctx.tick()
                ctx.set(agent.issued, 0)
                await ctx.tick().repeat(2)              # the round trip
                status, value = answer(word)
                ctx.set(agent.ack, 1)
                ctx.set(agent.status, status)
                ctx.set(agent.value, value)
            start, words = ctx.get(reply.start), ctx.get(reply.words)
            await ctx.tick()
            ctx.set(agent.ack, 0)
            if start:
                break
        # The reply starts with the status (registered) and the count of words.
        result["reply"] = (ctx.get(reply.status), words)
        result["total"] = ctx.get(reply.total)
        # The sender asks for the reply's rows, then is done: the slot is released.
        ctx.set(reply.done, 1)
        assert ctx.get(r.release)
        ctx.set(r.pending, 0)
        await ctx.tick()
        ctx.set(reply.done, 0)
        result["counters"] = {n: ctx.get(getattr(dut.counters, n))
                              for n in ("requests", "reads", "writes", "bad_request")}
        result["slot"] = b"".join(int(ctx.get(top.mem.data[k])).to_bytes(WIDTH // 8, "little")
                                  for k in range(1 << GEOMETRY.row_bits))

    simulate(top, bench, timeout=500)
    return asked, result


def test_a_read_builds_its_reply_in_the_slot():
    values = {0x40: 0x01020304, 0x41: 0xA0B0C0D0, 0x42: 0xFFFF0001}
    request = read_request(4, 1, 0x40, 3)
    asked, result = serve(request, lambda w: (STATUS_OK, values[w[2]]))
    assert asked == [(4, 1, a, 1, 0) for a in (0x40, 0x41, 0x42)]
    assert result["reply"] == (STATUS_OK, 3)
    assert result["total"] == sum(v >> 16 for v in values.values()) + sum(
        v & 0xFFFF for v in values.values())
    assert result["counters"] == {"requests": 1, "reads": 1, "writes": 0, "bad_request": 0}
    # The words, in network order after the request's 8 bytes: the reply's body.
    assert result["slot"][:20] == request + b"".join(struct.pack("!I", v)
                                                     for v in values.values())


def test_a_write_sends_the_words_of_its_slot():
    words = [0x11111111, 0x22222222]
    asked, result = serve(write_request(2, 3, 0x10, words), lambda w: (STATUS_OK, 0))
    assert asked == [(2, 3, 0x10, 0, words[0]), (2, 3, 0x11, 0, words[1])]
    assert result["reply"] == (STATUS_OK, 0)
    assert result["counters"]["writes"] == 1


def test_a_failing_word_ends_the_read_and_a_bad_request_is_answered_at_once():
    asked, result = serve(read_request(4, 1, 0x40, 4),
                             lambda w: (2 if w[2] == 0x41 else STATUS_OK, 7))
    assert [w[2] for w in asked] == [0x40, 0x41] and result["reply"] == (2, 4)
    bad = struct.pack("!BBBBHBB", 3, 0, 4, 1, 0, 1, 0)          # op 3
    asked, result = serve(bad, lambda w: (STATUS_OK, 0))
    assert not asked and result["reply"] == (STATUS_BAD_REQUEST, 0)
    assert result["counters"]["bad_request"] == 1
