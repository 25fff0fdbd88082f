"""PacketBuffer: random packets and verdicts with stalls everywhere, its own drops (too long,
malformed, too short, no room), latency and back-to-back throughput."""

import random

import pytest

from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.testbench import (packet_words, recv_packet, send_packet, simulate, stream_get,
                                     stream_put, take_either)


WIDTHS = [64, 512]


# -- helpers --------------------------------------------------------------------------------------

def recorder(signals, log):
    """A background testbench appending, every cycle, the values of ``signals`` (a dict of
    name: signal) as a dict; ``log[n]`` is cycle ``n`` when it starts at time 0."""
    names = list(signals)

    async def tb(ctx):
        async for _, _, *values in ctx.tick().sample(*signals.values()):
            log.append(dict(zip(names, (int(v) for v in values))))
    return tb


def watch(dut, stored, clock=None, early=False):
    """A background testbench that checks the stream rules around ``dut`` every cycle and
    appends, for each packet whose last word is taken on ``i``, whether it was stored; with
    ``clock`` (a list), ``clock[0]`` is the cycle number and ``clock[1:]`` the cycles of those
    last words.

    Checked: exactly one of ``accepted`` / ``i_dropped`` at each last word (and neither
    otherwise); ``o_desc`` and ``o`` hold their payloads until taken; no word is on ``o``
    before its packet's descriptor was taken, in an earlier cycle (``early``: or in the same
    one, as ``first_word_with_desc`` allows)."""
    o, desc = dut.o, dut.o_desc

    async def tb(ctx):
        descs = done = 0
        prev_o = prev_desc = None
        async for _, _, *v in ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload.last, dut.accepted, dut.i_dropped,
                desc.valid, desc.ready, desc.payload.as_value(),
                o.valid, o.ready, o.payload.as_value(), o.payload.last):
            ivalid, iready, ilast, accepted, dropped, dv, dr, dp, ov, orr, op, olast = \
                (int(x) for x in v)
            end = ivalid and iready and ilast
            assert accepted + dropped == end, "accepted / i_dropped disagree with i"
            if end:
                stored.append(bool(accepted))
                if clock is not None:
                    clock.append(clock[0])
            if clock is not None:
                clock[0] += 1
            if prev_desc is not None:
                assert dv and dp == prev_desc, "o_desc changed before it was taken"
            if prev_o is not None:
                assert ov and op == prev_o, "o changed before it was taken"
            prev_desc = dp if dv and not dr else None
            prev_o = op if ov and not orr else None
            if ov:
                assert descs + (early and dv and dr) > done, \
                    "a word on o before its descriptor was taken"
            descs += dv and dr
            done += ov and orr and olast
    return tb


async def collect(ctx, dut, width, got, total, **stall):
    """Take packets (a descriptor, then its words) from ``dut`` into ``got`` as ``(bytes,
    descriptor)`` until it holds ``total()`` of them, checking each descriptor's byte count."""
    while len(got) < total():
        if not ctx.get(dut.o_desc.valid):
            await ctx.tick()
            continue
        desc = await stream_get(ctx, dut.o_desc, **stall)
        packet = await recv_packet(ctx, dut.o, width, **stall)
        assert int(desc.bytes) == len(packet)
        got.append((packet, desc))


async def collect_together(ctx, dut, width, got, total, rng, stall):
    """As :func:`collect`, but ``o_desc.ready`` and ``o.ready`` are raised each cycle at
    random and apart, so that a descriptor and its first word are also taken in the same
    cycle (a ``first_word_with_desc`` consumer)."""
    nb = width // 8
    descs, words = [], b""
    while len(got) < total():
        desc, word = await take_either(ctx, dut.o_desc, dut.o, rng, stall)
        if desc is not None:
            descs.append(desc)
        if word is not None:
            assert descs, "a word on o before its descriptor was taken"
            words += int(word.data).to_bytes(nb, "little")[:int(word.nbytes)]
            if word.last:
                assert int(descs[0].bytes) == len(words)
                got.append((words, descs.pop(0)))
                words = b""


async def settle(ctx, dut, count, cycles=30):
    """Wait until ``dut.packets`` reaches ``count``, then ``cycles`` more (nothing else may
    come out)."""
    while ctx.get(dut.packets) < count:
        await ctx.tick()
    await ctx.tick().repeat(cycles)


# -- parameters -----------------------------------------------------------------------------------

def test_bad_parameters():
    with pytest.raises(ValueError, match="flit width must be one of"):
        PacketBuffer(32, max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
        PacketBuffer(64, max_bytes=0)
    with pytest.raises(ValueError, match=r"buffer_bytes must be an integer of at least "
                                         r"max_bytes \(100\), not 99"):
        PacketBuffer(64, max_bytes=100, buffer_bytes=99)
    with pytest.raises(ValueError, match="max_queued must be a positive integer"):
        PacketBuffer(64, max_bytes=100, max_queued=0)
    with pytest.raises(ValueError, match="info_width must be a non-negative integer"):
        PacketBuffer(64, max_bytes=100, info_width=-1)
    with pytest.raises(ValueError, match="min_bytes must be an integer from 0 to max_bytes"):
        PacketBuffer(64, max_bytes=100, min_bytes=101)
    with pytest.raises(ValueError, match="count_no_room needs always_ready=True"):
        PacketBuffer(64, max_bytes=64, count_no_room=True)
    with pytest.raises(ValueError, match="info_width needs verdict=True"):
        PacketBuffer(64, max_bytes=100, info_width=4, verdict=False)


def test_sizes_and_members():
    buf = PacketBuffer(64, max_bytes=100)                 # 200 bytes: 25 words, so 32
    assert (buf.buffer_words, buf.buffer_bytes) == (32, 256)
    assert PacketBuffer(512, max_bytes=1, buffer_bytes=1).buffer_words == 2
    assert PacketBuffer(512, max_bytes=128, buffer_bytes=128).buffer_words == 2
    assert "verdict" not in PacketBuffer(64, max_bytes=8, verdict=False).signature.members
    assert "info" not in {n for n, _ in buf.verdict.payload.shape()}
    assert "info" not in {n for n, _ in buf.o_desc.payload.shape()}
    assert PacketBuffer(64, max_bytes=100, info_width=7).o_desc.payload.info.shape().width == 7


# -- random traffic -------------------------------------------------------------------------------

@pytest.mark.parametrize("early", [False, True], ids=["", "first_word_with_desc"])
@pytest.mark.parametrize("always_ready", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
def test_random_packets_verdicts_and_stalls(width, always_ready, early):
    """Random packets (0 to 300 bytes, garbage past ``nbytes``), random verdicts given 0 to 20
    cycles after each last word, random ``info``, random stalls on every side: ``o`` carries
    exactly the stored packets judged ok, in order, with their byte counts and ``info``; with
    ``first_word_with_desc`` too, where the sink takes descriptors and words apart and
    together."""
    rng = random.Random(width + always_ready + 2 * early)
    count = 150 if width == 64 else 250
    packets = [rng.randbytes(rng.randrange(301)) for _ in range(count)]
    packets[1:4] = [b"", b"", bytes(range(width // 8))]
    judged = [(rng.random() < 0.7, rng.getrandbits(6), rng.randrange(21)) for _ in packets]
    dut = PacketBuffer(width, max_bytes=300, buffer_bytes=300 if always_ready else None,
                       max_queued=4, info_width=6, always_ready=always_ready,
                       first_word_with_desc=early)
    stored, got, expected, done, clock = [], [], [], [], [0]
    r_in, r_v, r_out = (random.Random(rng.random()) for _ in range(3))
    # With always_ready the source pauses less than the sink, and the buffer (512 bytes) fills.
    stall_in, stall_out = (0.2, 0.3) if always_ready else (0.3, 0.3)

    async def source(ctx):
        for packet in packets:
            await send_packet(ctx, dut.i, packet, width, rng=r_in, stall=stall_in)
        await ctx.tick().repeat(2)
        expected.extend((p, info) for p, s, (ok, info, _) in zip(packets, stored, judged)
                        if s and ok)
        done.append(True)
        await settle(ctx, dut, len(expected))
        assert [(p, int(d.info)) for p, d in got] == expected
        assert ctx.get(dut.packets) == len(expected)
        assert ctx.get(dut.rejected) == sum(s and not ok for s, (ok, _, _) in zip(stored, judged))
        assert ctx.get(dut.overflow) == stored.count(False)

    async def verdicts(ctx):
        for n, (ok, info, delay) in enumerate(judged):
            while len(stored) <= n:
                await ctx.tick()
            if stored[n]:
                while clock[0] < clock[1 + n] + delay:
                    await ctx.tick()
                await stream_put(ctx, dut.verdict, {"ok": ok, "info": info}, rng=r_v, stall=0.3)

    async def sink(ctx):
        total = lambda: len(expected) if done else count + 1      # noqa: E731
        if early:
            await collect_together(ctx, dut, width, got, total, r_out, stall_out)
        else:
            await collect(ctx, dut, width, got, total, rng=r_out, stall=stall_out)

    simulate(dut, source, verdicts, sink, background=[watch(dut, stored, clock, early)],
             timeout=40_000)
    if always_ready:        # some found no room, some did
        assert 0 < stored.count(False) < count
    else:
        assert all(stored)


# -- the buffer's own drops -----------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_oversize_packets_are_dropped_without_a_verdict(width):
    """Packets longer than ``max_bytes`` are discarded (and their space given back), counted in
    ``overflow``, get no verdict, and the packets after them pass."""
    sizes = [50, 150, 0, 100, 101, 30, 7, 400, 100]
    packets = [bytes(random.Random(n).randbytes(s)) for n, s in enumerate(sizes)]
    dut = PacketBuffer(width, max_bytes=100, buffer_bytes=100, info_width=8)
    stored, got = [], []

    async def source(ctx):
        for packet in packets:
            await send_packet(ctx, dut.i, packet, width, rng=random.Random(1), stall=0.2)
        await ctx.tick().repeat(2)
        assert stored == [s <= 100 for s in sizes]
        await settle(ctx, dut, 6)
        assert [(p, int(d.info)) for p, d in got] == [(p, n) for n, p in enumerate(packets)
                                                      if len(p) <= 100]
        assert ctx.get(dut.overflow) == 3 and ctx.get(dut.rejected) == 0

    async def verdicts(ctx):
        for n, _size in enumerate(sizes):
            while len(stored) <= n:
                await ctx.tick()
            if stored[n]:
                await stream_put(ctx, dut.verdict, {"ok": 1, "info": n})

    async def sink(ctx):
        await collect(ctx, dut, width, got, lambda: 6)

    simulate(dut, source, verdicts, sink, background=[watch(dut, stored)], timeout=5_000)


@pytest.mark.parametrize("width", WIDTHS)
def test_malformed_words_are_dropped_and_counted(width):
    """A word before the last that is not full, or ``nbytes`` above the width, drops the packet
    (its other words are discarded up to ``last``), counted in ``overflow``, except a last word
    with ``nbytes`` one above the width: an abort, counted in ``aborted``; a last word with
    ``nbytes == 0`` after full words ends a packet without adding bytes."""
    nb = width // 8
    full = (1 << width) - 1
    good = bytes(range(nb + 3))
    bad_packets = [
        [{"data": full, "nbytes": 4, "last": 0}, {"data": full, "nbytes": nb, "last": 1}],
        [{"data": full, "nbytes": nb + 1, "last": 1}],
        [{"data": full, "nbytes": nb, "last": 0}, {"data": full, "nbytes": nb + 1, "last": 0},
         {"data": full, "nbytes": nb, "last": 0}, {"data": full, "nbytes": 3, "last": 1}],
        [{"data": full, "nbytes": 0, "last": 0}, {"data": full, "nbytes": 0, "last": 1}],
    ]
    trailing = [{"data": full, "nbytes": nb, "last": 0}, {"data": full, "nbytes": nb, "last": 0},
                {"data": full, "nbytes": 0, "last": 1}]
    dut = PacketBuffer(width, max_bytes=4 * nb, verdict=False)
    stored, got = [], []

    async def source(ctx):
        for words in bad_packets[:2] + [packet_words(good, width)] + bad_packets[2:] + [trailing]:
            for word in words:
                await stream_put(ctx, dut.i, word)
        await send_packet(ctx, dut.i, good, width)
        await settle(ctx, dut, 3)
        assert stored == [False, False, True, False, False, True, True]
        assert [p for p, _ in got] == [good, b"\xff" * (2 * nb), good]
        assert ctx.get(dut.overflow) == 3
        assert ctx.get(dut.aborted) == 1

    async def sink(ctx):
        await collect(ctx, dut, width, got, lambda: 3)

    simulate(dut, source, sink, background=[watch(dut, stored)], timeout=2_000)


def test_min_bytes_drops_short_packets():
    dut = PacketBuffer(64, max_bytes=100, min_bytes=1, verdict=False)
    stored, got = [], []
    packets = [b"", b"x", b"", b"", bytes(9)]

    async def source(ctx):
        for packet in packets:
            await send_packet(ctx, dut.i, packet, 64)
        await settle(ctx, dut, 2)
        assert stored == [False, True, False, False, True]
        assert [p for p, _ in got] == [b"x", bytes(9)]
        assert ctx.get(dut.overflow) == 3

    async def sink(ctx):
        await collect(ctx, dut, 64, got, lambda: 2)

    simulate(dut, source, sink, background=[watch(dut, stored)], timeout=2_000)


@pytest.mark.parametrize("apart", [False, True], ids=["together", "no_room_apart"])
def test_always_ready_drops_when_full_and_recovers(apart):
    """With ``always_ready``, a packet that finds the buffer (16 words) full, or ``max_queued``
    packets waiting, is dropped and counted (in ``overflow``, or with ``count_no_room`` in
    ``no_room``, a packet too long for the buffer still in ``overflow``); once the consumer
    drains the buffer, packets pass again."""
    width = 64
    dut = PacketBuffer(width, max_bytes=64, buffer_bytes=128, max_queued=2, verdict=False,
                       always_ready=True, count_no_room=apart)

    def counts():
        """``(overflow, no_room)``: what the buffer counted, the two added up without
        ``count_no_room``."""
        return (ctx_.get(dut.overflow), ctx_.get(dut.no_room)) if apart else \
            (ctx_.get(dut.overflow), None)
    ctx_ = None
    stored = []
    first = [bytes([n]) * 40 for n in range(6)]          # 5 words each
    later = [bytes([0x40 + n]) * 33 for n in range(3)]

    async def receive(ctx, count):
        got = []
        for _ in range(count):
            desc = await stream_get(ctx, dut.o_desc)
            got.append(await recv_packet(ctx, dut.o, width))
            assert int(desc.bytes) == len(got[-1])
        return got

    async def tb(ctx):
        for packet in first:
            await send_packet(ctx, dut.i, packet, width)
        nonlocal ctx_
        ctx_ = ctx
        # Three fit (the read port already holds the first word of the first one), the fourth
        # runs out of room after two words, and the rest find the buffer full.
        assert stored == [True] * 3 + [False] * 3
        assert counts() == ((0, 3) if apart else (3, None))
        # A packet too long for any buffer, arriving while it is full, is refused at its first
        # word, for want of room: it counts there.
        await send_packet(ctx, dut.i, b"L" * 65, width)
        assert stored[6] is False
        assert counts() == ((0, 4) if apart else (4, None))
        assert await receive(ctx, 3) == first[:3]
        # With room, it is too long.
        await send_packet(ctx, dut.i, b"L" * 65, width)
        assert stored[7] is False
        assert counts() == ((1, 4) if apart else (5, None))
        # Empty packets: one is offered on o_desc, two wait in the queue (max_queued), the
        # fourth is dropped.
        for _ in range(4):
            await send_packet(ctx, dut.i, b"", width)
        assert stored[8:] == [True] * 3 + [False]
        assert await receive(ctx, 3) == [b""] * 3
        for packet in later:
            await send_packet(ctx, dut.i, packet, width)
            assert await receive(ctx, 1) == [packet]
        await ctx.tick().repeat(10)
        assert stored[12:] == [True] * 3
        assert counts() == ((1, 5) if apart else (6, None)) and ctx.get(dut.packets) == 9
        assert not ctx.get(dut.o_desc.valid) and not ctx.get(dut.o.valid)

    simulate(dut, tb, background=[watch(dut, stored)], timeout=3_000)


# -- latency and throughput -----------------------------------------------------------------------

LATENCY_DESC = 2        # cycles from the verdict taken to the descriptor valid on o_desc
LATENCY_WORD = 3        # ... to the first word valid on o (o_desc taken at once)


@pytest.mark.parametrize("early", [False, True], ids=["", "first_word_with_desc"])
@pytest.mark.parametrize("verdict", [True, False])
@pytest.mark.parametrize("width", WIDTHS)
def test_latency(width, verdict, early):
    """The verdict is taken in the very cycle of the last word (no packet waiting before it);
    the descriptor is valid 2 cycles later and the first word 3 cycles later (with
    ``first_word_with_desc``, 2: with the descriptor). A verdict given later is taken at once
    and followed the same way."""
    nb = width // 8
    dut = PacketBuffer(width, max_bytes=4 * nb, verdict=verdict, first_word_with_desc=early)
    log = []
    signals = {"i": dut.i.valid, "i_ready": dut.i.ready, "last": dut.i.payload.last,
               "desc": dut.o_desc.valid, "o": dut.o.valid}
    if verdict:
        signals.update(v=dut.verdict.valid, v_ready=dut.verdict.ready)

    async def tb(ctx):
        ctx.set(dut.o_desc.ready, 1)
        ctx.set(dut.o.ready, 1)
        for delay in (0, 5):
            for word in packet_words(bytes(3 * nb), width):
                ctx.set(dut.i.payload, word)
                ctx.set(dut.i.valid, 1)
                if verdict and word["last"] and delay == 0:
                    ctx.set(dut.verdict.payload.ok, 1)
                    ctx.set(dut.verdict.valid, 1)
                    assert ctx.get(dut.verdict.ready), "verdict not taken with the last word"
                await ctx.tick()
            ctx.set(dut.i.valid, 0)
            if verdict:
                if delay:
                    await ctx.tick().repeat(delay - 1)
                    ctx.set(dut.verdict.payload.ok, 1)
                    ctx.set(dut.verdict.valid, 1)
                    await ctx.tick()
                ctx.set(dut.verdict.valid, 0)
            await ctx.tick().repeat(12)

    simulate(dut, tb, background=[recorder(signals, log)], timeout=200)
    if verdict:
        judged = [n for n, c in enumerate(log) if c["v"] and c["v_ready"]]
        ends = [n for n, c in enumerate(log) if c["i"] and c["i_ready"] and c["last"]]
        assert judged[0] == ends[0] and judged[1] == ends[1] + 5
    else:
        judged = [n for n, c in enumerate(log) if c["i"] and c["i_ready"] and c["last"]]
    rises = lambda key: [n for n in range(1, len(log)) if log[n][key] and not log[n - 1][key]]
    assert rises("desc") == [n + LATENCY_DESC for n in judged]
    assert rises("o") == [n + (LATENCY_DESC if early else LATENCY_WORD) for n in judged]


@pytest.mark.parametrize("early", [False, True], ids=["", "first_word_with_desc"])
@pytest.mark.parametrize("width", WIDTHS)
def test_back_to_back_throughput(width, early):
    """Words enter one per cycle; once the consumer takes ``o_desc`` and ``o`` every cycle,
    stored packets of every size (empty and one-word ones too) leave without an idle cycle,
    each descriptor one cycle before its first word at the earliest (with
    ``first_word_with_desc``, the first packet's in the same cycle)."""
    nb = width // 8
    rng = random.Random(width)
    sizes = [0, 1, nb, nb + 1, 0, 0, 3 * nb, 1, 2, nb, 5] + [rng.randrange(3 * nb + 1)
                                                            for _ in range(29)]
    packets = [rng.randbytes(s) for s in sizes]
    words = sum(len(packet_words(p, width)) for p in packets)
    dut = PacketBuffer(width, max_bytes=3 * nb, buffer_bytes=words * nb, max_queued=len(sizes),
                       first_word_with_desc=early)
    log, got = [], []
    signals = {"i": dut.i.valid, "i_ready": dut.i.ready,
               "desc": dut.o_desc.valid, "desc_ready": dut.o_desc.ready,
               "o": dut.o.valid, "o_ready": dut.o.ready}

    async def source(ctx):
        ctx.set(dut.verdict.valid, 1)
        ctx.set(dut.verdict.payload.ok, 1)
        for packet in packets:
            await send_packet(ctx, dut.i, packet, width)
        await ctx.tick().repeat(3)
        ctx.set(dut.o_desc.ready, 1)
        ctx.set(dut.o.ready, 1)
        while len(got) < len(packets):
            got.append(await recv_packet(ctx, dut.o, width))
        assert got == packets

    simulate(dut, source, background=[recorder(signals, log)], timeout=1_000)
    taken_in = [n for n, c in enumerate(log) if c["i"] and c["i_ready"]]
    assert taken_in == list(range(taken_in[0], taken_in[0] + words))
    taken_out = [n for n, c in enumerate(log) if c["o"] and c["o_ready"]]
    assert taken_out == list(range(taken_out[0], taken_out[0] + words))
    desc_out = [n for n, c in enumerate(log) if c["desc"] and c["desc_ready"]]
    assert len(desc_out) == len(packets) and desc_out[0] == taken_out[0] - (not early)


@pytest.mark.parametrize("late", [False, True])
def test_late_verdicts_are_taken_from_the_cycle_after_accepted(late):
    """``verdict.ready`` rises with ``accepted`` by default, a cycle later with
    ``late_verdicts`` (a register's, not a path from ``i``); the packet goes through either way."""
    dut = PacketBuffer(64, max_bytes=64, late_verdicts=late)
    seen = []

    async def source(ctx):
        await send_packet(ctx, dut.i, b"late verdict", 64)

    async def judge(ctx):
        while True:
            _, _, accepted, ready = await ctx.tick().sample(dut.accepted, dut.verdict.ready)
            seen.append((int(accepted), int(ready)))
            if accepted:
                break
        _, _, ready = await ctx.tick().sample(dut.verdict.ready)
        seen.append((0, int(ready)))
        await stream_put(ctx, dut.verdict, {"ok": 1})
        desc = await stream_get(ctx, dut.o_desc)
        packet = await recv_packet(ctx, dut.o, 64)
        assert (int(desc.bytes), packet) == (12, b"late verdict")

    simulate(dut, source, judge, timeout=200)
    assert seen[-2:] == [(1, 0 if late else 1), (0, 1)]
