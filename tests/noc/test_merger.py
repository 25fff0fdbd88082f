"""MessageMerger: no interleaving, round-robin fairness, fixed priority, one flit per cycle."""

import random
from collections import Counter

import pytest

from apiary.noc.merger import MessageMerger
from apiary.noc.testbench import send_flits, split_messages
from apiary.stream.testbench import simulate, stream_get


WIDTHS = [64, 512]


def tagged(width, source, number, length):
    """Flits tagged (source, message number, flit index) in the top bits, random-free so that a
    message's origin can be read off any of its flits."""
    top = width - 24
    return [(((source << 16) | (number << 8) | k) << top | (k * 0x9e3779b97f4a7c15
                                                             & ((1 << top) - 1)),
             int(k == length - 1)) for k in range(length)]


def tag(flit, width):
    word = flit[0] >> (width - 24)
    return word >> 16, (word >> 8) & 0xff, word & 0xff


def run(width, n, streams, *, priority=False, rng=None, stall=0.0, cycles=None):
    """Send ``streams[k]`` (a list of flit lists) on input ``k`` and collect ``o``: every flit, or
    with ``cycles``, those of the first ``cycles`` cycles with ``o`` always ready (then the rest is
    drained unrecorded). Returns the recorded flits and, with ``cycles``, the idle cycles (each
    as the number of flits out before it)."""
    dut = MessageMerger(width, n, priority=priority)
    total = sum(len(msg) for msgs in streams for msg in msgs)
    out = []
    idle = []

    def source(k):
        async def tb(ctx):
            r = random.Random(k) if rng else None
            for msg in streams[k]:
                await send_flits(ctx, dut.i[k], msg, rng=r, stall=stall)
        return tb

    async def sink(ctx):
        if cycles is None:
            while len(out) < total:
                p = await stream_get(ctx, dut.o, rng=rng, stall=stall)
                out.append((int(p.data), int(p.last)))
            await ctx.tick().repeat(5)
            assert not ctx.get(dut.o.valid)
        else:
            ctx.set(dut.o.ready, 1)
            taken = 0
            for cycle in range(10 * total):
                _, _, valid, data, last = await ctx.tick().sample(
                    dut.o.valid, dut.o.payload.data, dut.o.payload.last)
                taken += valid
                if cycle >= cycles:             # let the sources finish, unrecorded
                    if taken == total:
                        break
                elif valid:
                    out.append((data, last))
                else:
                    idle.append(len(out))

    simulate(dut, sink, background=[source(k) for k in range(n)], timeout=20 * total + 100)
    return out, idle


def test_bad_parameters():
    with pytest.raises(ValueError, match="positive number of inputs"):
        MessageMerger(64, 0)
    with pytest.raises(ValueError, match="flit width must be one of"):
        MessageMerger(65, 2)


@pytest.mark.parametrize("priority", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
def test_never_interleaves(width, priority):
    """Random lengths and stalls everywhere: every message leaves whole and intact, each input's
    messages in order, nothing lost or duplicated."""
    rng = random.Random(width + priority)
    n = 3
    streams = [[tagged(width, k, j, rng.randrange(1, 7)) for j in range(25)] for k in range(n)]
    out, _ = run(width, n, streams, priority=priority, rng=rng, stall=0.4)
    messages = split_messages(out)
    for msg in messages:
        source, number, _ = tag(msg[0], width)
        assert msg == streams[source][number], "interleaved or corrupted message"
    for k in range(n):
        assert [tag(msg[0], width)[:2] for msg in messages if tag(msg[0], width)[0] == k] \
            == [(k, j) for j in range(len(streams[k]))]


@pytest.mark.parametrize("width", WIDTHS)
def test_round_robin_is_fair_and_has_no_bubbles(width):
    """Saturated inputs with different message lengths take turns, one message each, and ``o``
    carries a flit every cycle, also from one message to the next."""
    n, lengths = 3, [1, 2, 5]
    streams = [[tagged(width, k, j % 256, lengths[k]) for j in range(100)] for k in range(n)]
    out, idle = run(width, n, streams, cycles=240)
    assert idle == []
    order = [tag(msg[0], width)[0] for msg in split_messages(out)]
    assert order[:9] == [0, 1, 2] * 3
    assert all(order[j] == j % n for j in range(len(order)))
    shares = Counter(order)
    assert max(shares.values()) - min(shares.values()) <= 1


@pytest.mark.parametrize("width", WIDTHS)
def test_priority_serves_lowest_input_first(width):
    """With every input saturated, input 0 takes ``o`` for all its messages, then input 1, then
    input 2; in round-robin mode the same load interleaves."""
    n = 3
    streams = [[tagged(width, k, j, 3) for j in range(6)] for k in range(n)]
    out, idle = run(width, n, streams, priority=True, cycles=54)
    assert idle == []
    assert [tag(msg[0], width)[0] for msg in split_messages(out)] == [0] * 6 + [1] * 6 + [2] * 6
    out, _ = run(width, n, streams, priority=False, cycles=54)
    assert [tag(msg[0], width)[0] for msg in split_messages(out)] == [0, 1, 2] * 6


@pytest.mark.parametrize("priority", [False, True])
def test_holds_an_offered_flit(priority):
    """Zero latency, and the stream rule on ``o``: once a flit is offered it stays until taken,
    even if a higher-priority input becomes valid meanwhile."""
    dut = MessageMerger(64, 2, priority=priority)

    async def tb(ctx):
        ctx.set(dut.i[1].payload, {"data": 0x11, "last": 1})
        ctx.set(dut.i[1].valid, 1)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload.data) == 0x11
        await ctx.tick()
        ctx.set(dut.i[0].payload, {"data": 0x22, "last": 1})
        ctx.set(dut.i[0].valid, 1)
        assert ctx.get(dut.o.payload.data) == 0x11
        ctx.set(dut.o.ready, 1)
        assert ctx.get(dut.i[1].ready) and not ctx.get(dut.i[0].ready)
        await ctx.tick()
        ctx.set(dut.i[1].valid, 0)
        assert ctx.get(dut.o.payload.data) == 0x22 and ctx.get(dut.i[0].ready)

    simulate(dut, tb)
