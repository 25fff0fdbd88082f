"""PayloadPeek: random packets with stalls and delayed verdicts checked against Python slicing,
exact cycle timing of back-to-back packets against a model of the documented throughput, and
the latency from a packet's first word on ``i`` to its first word on ``o``."""

import random

import pytest
from amaranth import Elaboratable, Module

from apiary.stream.peek import PayloadPeek
from apiary.stream.testbench import (packet_words, recv_packet, send_packet, simulate, stream_put,
                                     transfers)


# -- helpers ---------------------------------------------------------------------------------------

def word_count(length, width):
    return max(1, -(-length // (width // 8)))


def head_of(packet, head_bytes):
    """What ``head`` must show: the first bytes, zero-padded, as an integer."""
    return int.from_bytes(packet[:head_bytes].ljust(head_bytes, b"\0"), "little")


def keep_rule(head, head_len):
    """The verdict the tests give: a function of every captured byte and of the length."""
    return (sum(head) + head_len) % 3 != 0


class CombVerdict(Elaboratable):
    """A tile that answers in the cycle ``head_valid`` rises: keep if the first byte is even
    (``keep_all``: always)."""

    def __init__(self, dut, keep_all=False):
        self.dut = dut
        self.keep_all = keep_all

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        m.d.comb += [
            dut.verdict.valid.eq(dut.head_valid),
            dut.verdict.payload.keep.eq(1 if self.keep_all else ~dut.head[0]),
        ]
        return m


def comb_keep(packet, keep_all):
    return keep_all or (packet[0] if packet else 0) % 2 == 0


# -- parameters ------------------------------------------------------------------------------------

def test_bad_parameters():
    with pytest.raises(ValueError, match="flit width must be one of"):
        PayloadPeek(100, 8)
    for bad in [0, -3, "8", 2.0, True]:
        with pytest.raises(ValueError, match="PayloadPeek needs head_bytes to be a positive"):
            PayloadPeek(64, bad)
    assert PayloadPeek(64, 60).depth == 10
    assert PayloadPeek(512, 60).depth == 3
    assert PayloadPeek(512, 60, slack=2).depth == 5
    for bad in [-1, "2", True]:
        with pytest.raises(ValueError, match="PayloadPeek needs slack to be a non-negative"):
            PayloadPeek(64, 8, slack=bad)
    assert len(PayloadPeek(256, 18).head) == 144


# -- random packets, stalls and delayed verdicts ---------------------------------------------------

@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("head_bytes", [8, 18, 60])
def test_random_with_stalls(width, head_bytes):
    """Random packets of 0..200 bytes (garbage in lanes past ``nbytes``), random stalls on
    ``i`` and ``o``, verdicts given 0..6 cycles after ``head_valid`` from the captured bytes:
    ``head`` and ``head_len`` are right and stable at verdict time, and ``o`` carries exactly
    the kept packets, in order."""
    rng = random.Random(width * 100 + head_bytes)
    packets = [rng.randbytes(rng.choice([0, 1, head_bytes - 1, head_bytes, head_bytes + 1,
                                         rng.randrange(201), rng.randrange(201)]))
               for _ in range(70)]
    kept = [p for p in packets if keep_rule(p[:head_bytes], min(len(p), head_bytes))]
    assert 10 < len(kept) < len(packets) - 10
    dut = PayloadPeek(width, head_bytes)
    received, log = [], {"verdicts": 0}

    async def source(ctx):
        r = random.Random(rng.random())
        for packet in packets:
            await send_packet(ctx, dut.i, packet, width, rng=r, stall=0.3)

    async def judge(ctx):
        r = random.Random(rng.random())
        for packet in packets:
            while not ctx.get(dut.head_valid):
                await ctx.tick()
            head, head_len = ctx.get(dut.head), ctx.get(dut.head_len)
            assert head == head_of(packet, head_bytes)
            assert head_len == min(len(packet), head_bytes)
            assert ctx.get(dut.pending) == 1
            assert ctx.get(dut.verdict.ready) == 1
            for _ in range(0 if r.random() < 0.4 else r.randrange(7)):
                await ctx.tick()
                assert ctx.get(dut.head_valid) == 1
                assert (ctx.get(dut.head), ctx.get(dut.head_len)) == (head, head_len)
            captured = head.to_bytes(head_bytes, "little")
            ctx.set(dut.verdict.payload, {"keep": keep_rule(captured, head_len)})
            ctx.set(dut.verdict.valid, 1)
            await ctx.tick()
            ctx.set(dut.verdict.valid, 0)
            log["verdicts"] += 1

    async def sink(ctx):
        r = random.Random(rng.random())
        for _ in kept:
            received.append(await recv_packet(ctx, dut.o, width, rng=r, stall=0.3))
        while log["verdicts"] < len(packets):               # dropped packets at the end
            await ctx.tick()
        await ctx.tick().repeat(20)
        assert ctx.get(dut.o.valid) == 0, "output after the last kept packet"
        assert ctx.get(dut.head_valid) == 0 and ctx.get(dut.pending) == 0

    simulate(dut, sink, source, judge, timeout=40_000)
    assert log["verdicts"] == len(packets)
    assert received == kept


# -- throughput ------------------------------------------------------------------------------------

def model_output_cycles(packets, width, head_bytes, keeps):
    """Cycles of the words on ``o`` as the docstring describes them, for input words on cycles
    0, 1, 2, ... and verdicts given in the cycle ``head_valid`` rises: every word leaves the
    FIFO (sent or discarded) one cycle per word, not before the cycle after it entered and not
    before its packet's verdict, the cycle after the word completing the head entered."""
    hw = -(-head_bytes // (width // 8))
    cycles, t_in, t_out = [], 0, -1
    for packet, keep in zip(packets, keeps):
        words = word_count(len(packet), width)
        verdict = t_in + min(hw, words)
        for k in range(words):
            t_out = max(t_out + 1, t_in + k + 1, verdict)
            if keep:
                cycles.append(t_out)
        t_in += words
    return cycles


def run_back_to_back(width, head_bytes, packets, keep_all):
    dut = PayloadPeek(width, head_bytes)
    top = CombVerdict(dut, keep_all)
    kept = [p for p in packets if comb_keep(p, keep_all)]
    received, log_i, log_o = [], [], []

    async def source(ctx):
        for packet in packets:
            for word in packet_words(packet, width):
                await stream_put(ctx, dut.i, word)

    async def sink(ctx):
        for _ in kept:
            received.append(await recv_packet(ctx, dut.o, width))

    simulate(top, sink, source, background=[transfers(dut.i, log_i), transfers(dut.o, log_o)],
             timeout=20_000)
    assert received == kept
    words = sum(word_count(len(p), width) for p in packets)
    assert log_i == list(range(log_i[0], log_i[0] + words)), "the input stalled"
    expected = model_output_cycles(packets, width, head_bytes,
                                   [comb_keep(p, keep_all) for p in packets])
    assert [c - log_i[0] for c in log_o] == expected
    return log_o


@pytest.mark.parametrize("width,head_bytes", [(512, 60), (512, 64), (64, 8)])
def test_throughput_head_in_one_word(width, head_bytes):
    """A head within the first word: no idle cycle on ``o`` at all when every packet is kept,
    one-word packets included (one packet per cycle), and the output follows the input one
    cycle behind."""
    rng = random.Random(width + head_bytes)
    packets = [rng.randbytes(rng.choice([0, 1, 7, 63, 64, 65, 130, 200])) for _ in range(80)]
    packets += [rng.randbytes(rng.randrange(1, 65)) for _ in range(30)]   # one word at 512
    log_o = run_back_to_back(width, head_bytes, packets, keep_all=True)
    assert log_o == list(range(log_o[0], log_o[0] + len(log_o)))
    if width == 512:
        assert log_o[-31:] == list(range(log_o[-31], log_o[-31] + 31))  # 30 packets in 30 cycles


@pytest.mark.parametrize("width,head_bytes", [(64, 18), (64, 60), (512, 8), (512, 100)])
def test_throughput_exact(width, head_bytes):
    """Back-to-back packets, half of them dropped, head spanning several words or not: ``i``
    never stalls and every word on ``o`` comes exactly in the cycle the documented model
    gives (idle while dropped words are discarded, and before a packet whose head needs more
    words than the output currently lags)."""
    rng = random.Random(width * 7 + head_bytes)
    packets = [rng.randbytes(rng.choice([0, 1, 8, 9, 17, 18, 40, 61, 200, rng.randrange(201)]))
               for _ in range(70)]
    run_back_to_back(width, head_bytes, packets, keep_all=False)


def test_throughput_lag_bubbles():
    """64 bits, 60-byte head (8 words): after a one-word packet, a long packet waits 7 cycles
    for its head; once the lag is 8 words, no idle cycle follows, short packets included."""
    packets = [b"\0", bytes(100)] + [bytes(n) for n in [0, 3, 8, 64, 9, 100, 1, 1, 70]]
    log_o = run_back_to_back(64, 60, packets, keep_all=True)
    assert log_o[:3] == [1, 9, 10]                     # 7 idle cycles before the long packet
    assert log_o[1:] == list(range(9, 9 + len(log_o) - 1))


# -- latency ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("width,head_bytes,length,latency", [
    (512, 60, 100, 1), (512, 60, 10, 1), (512, 64, 0, 1), (128, 16, 40, 1),
    (64, 18, 40, 3), (64, 60, 12, 2), (64, 60, 200, 8), (256, 60, 200, 2),
])
def test_latency(width, head_bytes, length, latency):
    """Cycles from a packet's first word on ``i`` to its first word on ``o``, with the verdict
    given in the cycle ``head_valid`` rises: ``min(ceil(head_bytes / (width/8)), words)``."""
    hw = -(-head_bytes // (width // 8))
    assert latency == min(hw, word_count(length, width))
    log_i, log_o = [], []
    dut = PayloadPeek(width, head_bytes)
    packet = bytes(range(length))

    async def source(ctx):
        await ctx.tick().repeat(3)
        await send_packet(ctx, dut.i, packet, width)

    async def sink(ctx):
        assert await recv_packet(ctx, dut.o, width) == packet

    simulate(CombVerdict(dut, keep_all=True), sink,
             background=[source, transfers(dut.i, log_i), transfers(dut.o, log_o)],
             timeout=1000)
    assert log_o[0] - log_i[0] == latency
    assert log_o[-1] - log_i[-1] == latency          # the lag stays for the whole packet


def test_latency_cycle_by_cycle():
    """512 bits, 60-byte head: the first word is taken in cycle 0; in cycle 1 the head is
    valid, the verdict is given, and the same word is on ``o``; ``pending`` covers cycle 1."""
    dut = PayloadPeek(512, 60)
    packet = bytes(range(1, 101))
    w0, w1 = packet_words(packet, 512)

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, w0)
        ctx.set(dut.i.valid, 1)
        assert ctx.get(dut.i.ready) == 1
        assert (ctx.get(dut.head_valid), ctx.get(dut.pending), ctx.get(dut.o.valid)) == (0, 0, 0)
        await ctx.tick()                                    # cycle 1
        ctx.set(dut.i.payload, w1)
        assert (ctx.get(dut.head_valid), ctx.get(dut.pending)) == (1, 1)
        assert ctx.get(dut.head) == head_of(packet, 60) and ctx.get(dut.head_len) == 60
        assert ctx.get(dut.o.valid) == 0                    # no verdict yet
        assert ctx.get(dut.i.ready) == 1                    # same packet: may enter
        ctx.set(dut.verdict.payload, {"keep": 1})
        ctx.set(dut.verdict.valid, 1)
        assert ctx.get(dut.o.valid) == 1
        assert ctx.get(dut.o.payload.data) == w0["data"] and ctx.get(dut.o.payload.last) == 0
        await ctx.tick()                                    # cycle 2
        ctx.set(dut.verdict.valid, 0)
        ctx.set(dut.i.valid, 0)
        assert (ctx.get(dut.head_valid), ctx.get(dut.pending)) == (0, 0)
        p = ctx.get(dut.o.payload)
        assert ctx.get(dut.o.valid) == 1
        assert (p.data, p.nbytes, p.last) == (w1["data"], w1["nbytes"], 1)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0

    simulate(dut, tb)


def test_next_packet_waits_for_verdict():
    """A one-word packet's head is valid; the next packet's first word is not taken until the
    verdict comes, then in that very cycle; a dropped packet never shows on ``o``."""
    dut = PayloadPeek(64, 4)
    a, b = packet_words(b"\x01abc", 64)[0], packet_words(b"\x02defgh", 64)[0]

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, a)
        ctx.set(dut.i.valid, 1)
        await ctx.tick()
        ctx.set(dut.i.payload, b)
        for _ in range(3):
            assert ctx.get(dut.head_valid) == 1 and ctx.get(dut.head_len) == 4
            assert ctx.get(dut.i.ready) == 0 and ctx.get(dut.o.valid) == 0
            await ctx.tick()
        ctx.set(dut.verdict.payload, {"keep": 0})
        ctx.set(dut.verdict.valid, 1)
        assert ctx.get(dut.i.ready) == 1 and ctx.get(dut.o.valid) == 0
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert ctx.get(dut.head_valid) == 1                 # b's head, captured at that edge
        assert ctx.get(dut.head) == int.from_bytes(b"\x02def", "little")
        assert ctx.get(dut.head_len) == 4
        ctx.set(dut.verdict.payload, {"keep": 1})
        assert ctx.get(dut.o.valid) == 1                    # a was discarded
        assert ctx.get(dut.o.payload.data) == b["data"]
        await ctx.tick()
        ctx.set(dut.verdict.valid, 0)
        assert ctx.get(dut.o.valid) == 0

    simulate(dut, tb)


@pytest.mark.parametrize("width,head_bytes", [(64, 60), (512, 8)])
def test_short_packets_slow_output(width, head_bytes):
    """Many empty and one-word packets behind an output that is mostly stalled, verdicts given
    at once: the FIFO fills with whole packets, each with a queued verdict, and none is lost."""
    rng = random.Random(width + head_bytes + 1)
    packets = [rng.randbytes(rng.choice([0, 1, 2, 5, 8])) for _ in range(60)]
    dut = PayloadPeek(width, head_bytes)
    kept = [p for p in packets if comb_keep(p, False)]
    received = []

    async def source(ctx):
        for packet in packets:
            await send_packet(ctx, dut.i, packet, width)

    async def sink(ctx):
        r = random.Random(rng.random())
        for _ in kept:
            received.append(await recv_packet(ctx, dut.o, width, rng=r, stall=0.9))

    simulate(CombVerdict(dut), sink, source, timeout=20_000)
    assert received == kept
