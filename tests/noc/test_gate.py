"""MessageGate alone, at 64 and 512 bits, under an owner that reads its orders from each
message's first flit: PASS with the head rewritten, DROP (the whole message sunk, the next one
fine), WAIT holding everything, short messages, heads of 1 to ``max_head`` flits, random gaps on
``i`` and back-pressure on ``o``; the exact latency (0 cycles for a one-flit head, ``n`` for
``n`` flits) and ``accept``/``short``/``head`` as the owner sees them."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal, Cat

from apiary.noc.gate import MessageGate, Verdict
from apiary.noc.testbench import send_flits, split_messages
from apiary.stream.testbench import simulate, transfers


WIDTHS = [64, 512]
MAX_HEAD = 5
PASS, DROP = Verdict.PASS.value, Verdict.DROP.value


class Owner(Elaboratable):
    """The gate plus an owner: flit 0's bits 0-2 are ``need``, bits 3-4 the final verdict
    (``PASS`` or ``DROP``), bits 5-8 how many cycles of ``decide`` to answer ``WAIT`` first;
    the rewritten head is the head XOR ``mask`` (the same mask on every flit)."""

    def __init__(self, width, mask, max_head=MAX_HEAD, rewrites=None):
        self.gate = MessageGate(width, max_head, rewrites)
        self.max_head = max_head
        self.mask = mask
        self.waited = Signal(8)
        self.verdict = Signal(2)

    def elaborate(self, platform):
        m = Module()
        m.submodules.gate = g = self.gate
        w = len(g.first)
        if self.max_head > 1:
            m.d.comb += g.need.eq(g.first[0:3])
        final, wait = g.head[3:5], g.head[5:9]
        with m.If(g.decide):
            with m.If(self.waited < wait):
                m.d.comb += self.verdict.eq(Verdict.WAIT)
                m.d.sync += self.waited.eq(self.waited + 1)
            with m.Else():
                m.d.comb += self.verdict.eq(final)
        with m.If(g.accept):
            m.d.sync += self.waited.eq(0)
        m.d.comb += [
            g.verdict.eq(self.verdict),
            g.rewritten.eq(Cat(*(g.head[j * w:(j + 1) * w] ^ self.mask
                                 for j in range(self.max_head)))),
        ]
        return m


def message(rng, width, length, need, verdict, wait=0):
    flits = [rng.getrandbits(width) for _ in range(length)]
    flits[0] = flits[0] & ~0x1ff | need | verdict << 3 | wait << 5
    return [(f, int(k == length - 1)) for k, f in enumerate(flits)]


def expected(messages, mask):
    """What leaves ``o``: the passed messages, their first ``need`` flits XOR ``mask``."""
    out = []
    for msg in messages:
        first = msg[0][0]
        need, verdict = first & 7, first >> 3 & 3
        if verdict == PASS:
            out.append([(d ^ mask if k < need else d, last) for k, (d, last) in enumerate(msg)])
    return out


def collect(port, out, rng=None, stall=0.0):
    """A background testbench that takes every message from ``port`` into ``out`` (a list of
    flit lists), ``ready`` low at random with probability ``stall``."""
    async def tb(ctx):
        ctx.set(port.ready, 1)
        current = []
        async for _, _, valid, ready, payload in ctx.tick().sample(port.valid, port.ready,
                                                                  port.payload):
            if valid and ready:
                current.append((int(payload.data), int(payload.last)))
                if payload.last:
                    out.append(current)
                    current = []
            if stall:
                ctx.set(port.ready, int(rng.random() >= stall))
    return tb


def run(width, messages, *, seed=0, gaps=0.0, stall=0.0, mask=None, timeout=20_000,
        max_head=MAX_HEAD, rewrites=None, broken=None):
    """Send ``messages`` into the gate (random gaps on ``i``), receive ``o`` (random back-pressure);
    returns the messages out, the transfer cycles on ``i`` and ``o``, and each ``accept`` as
    ``(cycle, verdict, short, head flits)``."""
    rng = random.Random(seed)
    mask = rng.getrandbits(width) if mask is None else mask
    dut = Owner(width, mask, max_head, rewrites)
    g = dut.gate
    out, log_i, log_o, accepts = [], [], [], []
    total = sum(len(msg) for msg in messages)

    async def source(ctx):
        for msg in messages:
            await send_flits(ctx, g.i, msg, **({"rng": rng, "stall": gaps} if gaps else {}))
        while sum(len(msg) for msg in out) < sum(len(x) for x in expected(messages, mask)):
            await ctx.tick()
        await ctx.tick().repeat(10)

    sink = collect(g.o, out, random.Random(seed + 1), stall)

    async def watch(ctx):
        cycle = 0
        async for _, _, acc, verdict, short, head in ctx.tick().sample(
                g.accept, dut.verdict, g.short, g.head):
            if acc:
                accepts.append((cycle, verdict, short,
                                [head >> (j * width) & (1 << width) - 1
                                 for j in range(max_head)]))
            cycle += 1

    checks = [] if broken is None else [steady(g.o, broken)]
    simulate(dut, source, background=[sink, watch, transfers(g.i, log_i),
                                      transfers(g.o, log_o), *checks], timeout=timeout)
    assert len(log_i) == total
    return out, mask, log_i, log_o, accepts


@pytest.mark.parametrize("width", WIDTHS)
def test_one_flit_head_passes_rewritten_with_no_latency(width):
    """need = 1: every flit leaves in the cycle it arrives, the first one rewritten, one flit per
    cycle across messages; ``accept`` once per message, in the cycle its first flit leaves."""
    rng = random.Random(1)
    msgs = [message(rng, width, n, 1, PASS) for n in (1, 3, 1, 5, 2)]
    out, mask, log_i, log_o, accepts = run(width, msgs)
    assert out == expected(msgs, mask)
    assert log_o == log_i == list(range(12))
    firsts = [0, 1, 4, 5, 10]
    assert [a[0] for a in accepts] == firsts
    assert all(a[1] == PASS and not a[2] for a in accepts)
    assert [a[3][0] for a in accepts] == [m[0][0] for m in msgs]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("need", range(2, MAX_HEAD + 1))
def test_n_flit_head_costs_n_cycles(width, need):
    """A head of ``n`` flits: stored, the head flits shown to the owner in ``head`` at ``decide``
    (the last straight from ``i``), replayed rewritten starting 1 cycle after the last arrived;
    ``i`` waits ``n`` cycles; the body then flows straight through; every flit ``n`` cycles late."""
    rng = random.Random(need)
    length = need + 3
    msgs = [message(rng, width, length, need, PASS) for _ in range(2)]
    out, mask, log_i, log_o, accepts = run(width, msgs)
    assert out == expected(msgs, mask)
    one_i = list(range(need)) + [2 * need + k for k in range(length - need)]
    t2 = one_i[-1] + 1
    assert log_i == one_i + [t2 + t for t in one_i]
    # Flit k of a message leaves `need` cycles after it would without the gate (at k).
    assert log_o == [need + k for k in range(length)] + [t2 + need + k for k in range(length)]
    assert [a[0] for a in accepts] == [need - 1, t2 + need - 1]
    assert [a[3][:need] for a in accepts] == [[d for d, _ in m[:need]] for m in msgs]


@pytest.mark.parametrize("width", WIDTHS)
def test_drop_sinks_the_whole_message_and_the_next_one_is_fine(width):
    """DROP of heads of 1 to 5 flits, of messages longer than the head and exactly as long: nothing
    of them leaves, every flit is taken one per cycle, and the following message passes whole."""
    rng = random.Random(7)
    msgs = []
    for need in range(1, MAX_HEAD + 1):
        for length in (need, need + 4):
            msgs.append(message(rng, width, length, need, DROP))
            msgs.append(message(rng, width, 3, 1, PASS))
    out, mask, log_i, log_o, accepts = run(width, msgs)
    assert out == expected(msgs, mask)
    assert len(out) == len(msgs) // 2
    dropped = sum(len(m) for m in msgs[::2])
    assert log_i == list(range(len(log_i)))            # dropped flits: one per cycle, no gap
    assert len(log_o) == sum(len(m) for m in msgs) - dropped
    assert [a[1] for a in accepts] == [DROP, PASS] * (len(msgs) // 2)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("need", [1, 3])
def test_wait_holds_everything(width, need):
    """WAIT for ``k`` cycles: nothing taken from ``i``, nothing on ``o`` (and no ``accept``) until
    the owner decides; then the message goes exactly ``k`` cycles later than without the wait."""
    rng = random.Random(need)
    for final in (PASS, DROP):
        base = [message(rng, width, need + 2, need, final, 0)]
        waited = [[(base[0][0][0] | 6 << 5, base[0][0][1])] + base[0][1:]]
        _, _, li0, lo0, acc0 = run(width, base, mask=0)
        out, _, li, lo, acc = run(width, waited, mask=0)
        assert out == expected(waited, 0)
        assert li[:need - 1] == li0[:need - 1]
        assert li[need - 1:] == [t + 6 for t in li0[need - 1:]]
        assert lo == [t + 6 for t in lo0]
        assert [a[0] for a in acc] == [a[0] + 6 for a in acc0]


@pytest.mark.parametrize("width", WIDTHS)
def test_short_messages(width):
    """A message that ends before ``need`` flits: decided at its last flit with ``short`` high and
    the flits it has in ``head``; passed (rewritten, whole) or dropped; the gate then takes the
    next message normally."""
    rng = random.Random(3)
    msgs = []
    for need in range(2, MAX_HEAD + 1):
        for length in range(1, need):
            for verdict in (PASS, DROP):
                msgs.append(message(rng, width, length, need, verdict))
                msgs.append(message(rng, width, need + 1, need, PASS))
    out, mask, log_i, log_o, accepts = run(width, msgs)
    assert out == expected(msgs, mask)
    assert len(accepts) == len(msgs)
    for (_, verdict, short, head), msg in zip(accepts, msgs):
        need = msg[0][0] & 7
        assert short == (len(msg) < need)
        assert verdict == msg[0][0] >> 3 & 3
        assert head[:min(need, len(msg))] == [d for d, _ in msg[:need]]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", range(3))
def test_random_messages_with_gaps_and_backpressure(width, seed):
    """150 random messages (heads of 1 to 5 flits, short ones, PASS/DROP, WAITs) with random gaps
    on ``i`` and random back-pressure on ``o``: exactly the passed messages leave, whole, in
    order, heads rewritten."""
    rng = random.Random(100 + seed)
    msgs = []
    for _ in range(150):
        need = rng.randint(1, MAX_HEAD)
        length = rng.choice([rng.randint(1, need), need, rng.randint(need, need + 6)])
        msgs.append(message(rng, width, length, need, rng.choice([PASS, PASS, DROP]),
                            rng.choice([0, 0, 0, 1, 3])))
    out, mask, log_i, log_o, accepts = run(width, msgs, seed=seed, gaps=0.3, stall=0.3)
    assert out == expected(msgs, mask)
    assert split_messages([f for m in out for f in m]) == out
    assert len(accepts) == len(msgs)


def steady(port, log):
    """A background testbench that records, into ``log``, every cycle in which ``port`` broke
    the stream rules: a flit offered and not taken that changed or left by the next cycle."""
    async def tb(ctx):
        waiting = None
        async for _, _, valid, ready, payload in ctx.tick().sample(port.valid, port.ready,
                                                                  port.payload):
            now = (int(payload.data), int(payload.last)) if valid else None
            if waiting is not None and now != waiting:
                log.append((waiting, now))
            waiting = now if valid and not ready else None
    return tb


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", range(2))
def test_one_flit_gate_rewrites_only_its_mask(width, seed):
    """``max_head = 1`` with ``rewrites``: each passed head leaves with the owner's rewrite on the
    masked bits and its own bits elsewhere, under gaps, WAITs, DROPs and back-pressure; ``o``
    keeps a flit it offers until taken, though the gate stores only the masked bits."""
    rng = random.Random(50 + seed)
    rewrites = rng.getrandbits(width) & rng.getrandbits(width)
    msgs = [message(rng, width, rng.randint(1, 4), 1, rng.choice([PASS, PASS, DROP]),
                    rng.choice([0, 0, 2])) for _ in range(120)]
    broken = []
    out, mask, log_i, _, accepts = run(width, msgs, seed=seed, gaps=0.3, stall=0.5,
                                       max_head=1, rewrites=rewrites, broken=broken)
    assert out == expected(msgs, mask & rewrites)
    assert broken == []
    assert len(accepts) == len(msgs) and len(log_i) == sum(len(m) for m in msgs)


@pytest.mark.parametrize("width", WIDTHS)
def test_one_flit_gate_holds_what_it_judged(width):
    """A passed head that ``o`` does not take stays on ``i``: a sender that breaks the rules and
    changes it there changes the bits outside ``rewrites`` and ``last`` nowhere else; the
    judged bits leave as judged, and ``o`` is steady for the rule-keeping part."""
    rewrites = (1 << width // 2) - 1
    first, changed = (1 << width) - 1 & ~0x1ff | PASS << 3, 0x5a5a5a5a5a5a5a5a << (width - 64)
    dut = Owner(width, 0, 1, rewrites)
    g = dut.gate
    out, broken = [], []

    async def main(ctx):
        ctx.set(g.i.valid, 1)
        ctx.set(g.i.payload, {"data": first, "last": 1})
        await ctx.tick().repeat(3)                      # o not ready: held
        assert ctx.get(g.i.ready) == 0 and ctx.get(g.o.valid) == 1
        ctx.set(g.i.payload, {"data": changed, "last": 0})
        ctx.set(g.o.ready, 1)
        await ctx.tick()
        ctx.set(g.i.valid, 0)
        ctx.set(g.o.ready, 0)
        await ctx.tick().repeat(2)

    async def taken(ctx):
        async for _, _, valid, ready, payload in ctx.tick().sample(g.o.valid, g.o.ready,
                                                                  g.o.payload):
            if valid and ready:
                out.append((int(payload.data), int(payload.last)))

    simulate(dut, main, background=[taken, steady(g.i, broken)], timeout=100)
    assert out == [(first & rewrites | changed & ~rewrites, 1)]
    assert len(broken) == 1                             # the sender's, not the gate's


def test_bad_max_head():
    with pytest.raises(ValueError):
        MessageGate(64, 0)


@pytest.mark.parametrize("rewrites", [-1, 1 << 64, "all"])
def test_bad_rewrites(rewrites):
    with pytest.raises(ValueError, match="rewrites must be a mask of 64 bits"):
        MessageGate(64, 1, rewrites)
