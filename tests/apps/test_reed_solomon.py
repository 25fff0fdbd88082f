"""The RS(8,2) erasure-code encoder (beehive/apps/reed_solomon.py): its GF(2^8) model against
``reedsolo``, and the streaming core against the model on Amaranth's simulator at 64, 128 and
512 bits: random data, shards of 1, 2 and 5 words, bad-length packets among the requests,
random gaps on the input and stalls on the output, and the cycle counts of the docstring."""

import random

import pytest
import reedsolo

from amaranth import Const, Module, Signal
from amaranth.sim import Simulator

from apiary.stream.testbench import (packet_words, recv_packet, simulate, stream_put,
                                     transfers)
from beehive.apps.reed_solomon import (RsEncoder, encode_shards, generator_polynomial, gf_mul,
                                       gf_mul_const, parity_coefficients)


# -- the model ------------------------------------------------------------------------------------

def test_gf_mul_matches_reedsolo():
    reedsolo.init_tables(0x11D)
    for a in range(256):
        for b in range(256):
            assert gf_mul(a, b) == reedsolo.gf_mul(a, b), (a, b)


@pytest.mark.parametrize("parity", [1, 2, 3, 4, 7])
def test_generator_polynomial_matches_reedsolo(parity):
    reedsolo.init_tables(0x11D)
    assert generator_polynomial(parity) == list(reedsolo.rs_generator_poly(parity))


@pytest.mark.parametrize("data, parity", [(8, 2), (4, 3), (10, 4), (1, 1), (250, 5)])
def test_parity_coefficients_match_reedsolo(data, parity):
    codec = reedsolo.RSCodec(parity)
    c = parity_coefficients(data, parity)
    assert len(c) == parity and all(len(row) == data for row in c)
    for i in range(data):
        unit = bytes(int(s == i) for s in range(data))
        assert list(codec.encode(unit)[data:]) == [row[i] for row in c]


def test_encode_shards_matches_reedsolo_on_random_columns():
    rng = random.Random(16)
    codec = reedsolo.RSCodec(2)
    shards = [rng.randbytes(300) for _ in range(8)]
    shards[3] = bytes(300)                          # a zero shard and extreme bytes too
    shards[5] = b"\xff" * 300
    parity = encode_shards(shards)
    assert [len(p) for p in parity] == [300, 300]
    for k in range(300):
        column = bytes(s[k] for s in shards)
        assert bytes(codec.encode(column)[8:]) == bytes(p[k] for p in parity)


def test_encode_shards_other_codes():
    rng = random.Random(3)
    for data, parity in [(4, 3), (12, 4)]:
        codec = reedsolo.RSCodec(parity)
        shards = [rng.randbytes(20) for _ in range(data)]
        out = encode_shards(shards, parity)
        for k in range(20):
            column = bytes(s[k] for s in shards)
            assert bytes(codec.encode(column)[data:]) == bytes(p[k] for p in out)


def test_model_rejects_bad_codes():
    with pytest.raises(ValueError, match="shards must be of one length"):
        encode_shards([b"ab", b"a"])
    with pytest.raises(ValueError, match="data must be a positive integer"):
        parity_coefficients(0, 2)
    with pytest.raises(ValueError, match="at most 255"):
        parity_coefficients(250, 6)


def test_gf_mul_const_is_gf_mul_per_lane():
    """The word-wide constant multiplier against gf_mul, every byte value in every lane."""
    width, rng = 128, random.Random(5)
    value = Signal(width)
    constants = [0, 1, 2, 3, 0x1D, 0x80, 0xE2, 0xFF]
    products = [Signal(width, name=f"x{c}") for c in constants]
    m = Module()
    m.d.comb += [s.eq(gf_mul_const(value, c, width)) for s, c in zip(products, constants)]
    words = [int.from_bytes(bytes(range(b, b + 16)), "little") for b in range(0, 256, 16)]
    words += [rng.getrandbits(width) for _ in range(8)]

    async def tb(ctx):
        for w in words:
            ctx.set(value, w)
            lanes = w.to_bytes(16, "little")
            for s, c in zip(products, constants):
                assert ctx.get(s) == int.from_bytes(bytes(gf_mul(c, b) for b in lanes),
                                                    "little"), (hex(w), c)
    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    with pytest.raises(ValueError):
        gf_mul_const(Const(0, 64), 256, 64)


# -- the core -------------------------------------------------------------------------------------

def test_encoder_rejects_bad_parameters():
    with pytest.raises(ValueError, match="must be one of"):
        RsEncoder(96, 12)
    with pytest.raises(ValueError, match="positive multiple of 8 "):
        RsEncoder(64, 12)
    with pytest.raises(ValueError, match="positive multiple of 64 "):
        RsEncoder(512, 0)
    with pytest.raises(ValueError, match="parity must be a positive integer"):
        RsEncoder(64, 8, parity=0)


def request(rng, shard_bytes, data=8, parity=2):
    shards = [rng.randbytes(shard_bytes) for _ in range(data)]
    return b"".join(shards), b"".join(encode_shards(shards, parity))


def bad_packets(shard_bytes, nb, rng):
    """Packets the core must drop: short by a word, long by a word, a byte short, a byte long,
    empty, one shard."""
    good = 8 * shard_bytes
    return [rng.randbytes(n) for n in (good - nb, good + nb, good - 1, good + 1, 0, shard_bytes)]


async def send_words(ctx, port, words, rng=None, stall=0.0):
    """send_packet for words given as they are (malformed ones included)."""
    for word in words:
        await stream_put(ctx, port, word, rng=rng, stall=stall)


def holds_until_taken(port):
    """A background testbench: a word offered on ``port`` and not taken is offered again, the
    same, in the next cycle (the stream rule the consumer relies on)."""
    async def tb(ctx):
        waiting = None
        async for _, _, valid, ready, payload in ctx.tick().sample(
                port.valid, port.ready, port.payload.as_value()):
            if waiting is not None:
                assert valid and int(payload) == waiting, "o dropped or changed a waiting word"
            waiting = int(payload) if valid and not ready else None
    return tb


def run_core(width, shard_words, script, *, in_stall=0.0, out_stall=0.0, seed=0, logs=None,
             **code):
    """Send ``script`` (a list of ``(words, expected answer or None)``) to an RsEncoder; check
    every answer and the counters; return the DUT."""
    nb = width // 8
    dut = RsEncoder(width, shard_words * nb, **code)
    answers = [a for _, a in script if a is not None]
    rng_in, rng_out = random.Random(seed), random.Random(seed + 1)
    got = []

    async def producer(ctx):
        for words, _ in script:
            await send_words(ctx, dut.i, words, rng=rng_in if in_stall else None, stall=in_stall)

    async def consumer(ctx):
        for _ in answers:
            got.append(await recv_packet(ctx, dut.o, width,
                                         rng=rng_out if out_stall else None, stall=out_stall))
        assert ctx.get(dut.counters.requests) == len(answers)
        assert ctx.get(dut.counters.bad_length) == len(script) - len(answers)

    background = [holds_until_taken(dut.o)]
    if logs is not None:
        background += [transfers(dut.i, logs[0]), transfers(dut.o, logs[1])]
    simulate(dut, producer, consumer, background=background, timeout=20_000)
    assert got == answers
    return dut


CORE_CASES = [(64, 1), (64, 2), (64, 5), (128, 2), (256, 3), (512, 1), (512, 2), (512, 5)]


@pytest.mark.parametrize("width, shard_words", CORE_CASES)
@pytest.mark.parametrize("in_stall, out_stall", [(0.0, 0.0), (0.3, 0.4), (0.1, 0.85)])
def test_encoder_random_requests(width, shard_words, in_stall, out_stall):
    """Good requests back to back and bad-length packets among them, with gaps and stalls:
    every answer is encode_shards' and every bad packet is dropped and counted. Heavy output
    stalls make requests wait for the previous answer to leave."""
    nb = width // 8
    rng = random.Random(width * 100 + shard_words)
    script = []
    for _ in range(3):
        data, answer = request(rng, shard_words * nb)
        script.append((packet_words(data, width), answer))
    bads = bad_packets(shard_words * nb, nb, rng)
    aborted = packet_words(rng.randbytes(8 * shard_words * nb), width)
    aborted[-1]["nbytes"] = nb + 1
    middle = packet_words(rng.randbytes(8 * shard_words * nb), width)
    middle[len(middle) // 2]["nbytes"] = nb - 1     # a word before the last not full
    bad_words = [packet_words(b, width, rng) for b in bads] + [aborted, middle]
    rng.shuffle(bad_words)
    for words in bad_words[:4 if in_stall or out_stall else len(bad_words)]:
        script.insert(rng.randrange(1, len(script) + 1), (words, None))
    data, answer = request(rng, shard_words * nb)
    script.append((packet_words(data, width), answer))  # a good one last, after any bad one
    run_core(width, shard_words, script, in_stall=in_stall, out_stall=out_stall,
             seed=shard_words)


@pytest.mark.parametrize("width, shard_words", [(64, 1), (64, 5), (512, 1), (512, 2)])
def test_encoder_cycle_counts(width, shard_words):
    """No gaps, no stalls: requests are taken back to back, one word per cycle with no idle
    cycle between them (8 * n cycles each), and each answer's words leave 2 cycles after its
    request's last word, one per cycle; first data word to last parity word: 10 * n cycles."""
    nb, n, requests = width // 8, shard_words, 3
    rng = random.Random(7)
    script = []
    for _ in range(requests):
        data, answer = request(rng, n * nb)
        script.append((packet_words(data, width), answer))
    i_log, o_log = [], []
    dut = run_core(width, n, script, logs=(i_log, o_log))
    assert dut.latency == 2 and dut.request_cycles == 8 * n
    assert i_log == list(range(i_log[0], i_log[0] + requests * 8 * n))
    for r in range(requests):
        last_in = i_log[(r + 1) * 8 * n - 1]
        assert o_log[r * 2 * n:(r + 1) * 2 * n] == [last_in + 2 + t for t in range(2 * n)]
    assert o_log[2 * n - 1] - i_log[0] == 10 * n                 # an isolated request
    assert len(o_log) == requests * 2 * n


@pytest.mark.parametrize("data, parity, shard_words, cycles", [
    (3, 2, 2, 7), (4, 3, 1, 5), (1, 2, 2, 7), (12, 4, 1, 12), (8, 2, 3, 24)])
def test_encoder_other_codes(data, parity, shard_words, cycles):
    """Other codes than RS(8,2) (reedsolo's RSCodec(parity) per column): answers, and back to
    back requests max(data * n, (parity + 1) * n + 1) cycles apart, which exceeds data * n when
    the next request's final shard must wait for the previous answer to leave."""
    width, requests = 64, 4
    rng = random.Random(data * 10 + parity)
    script = []
    for _ in range(requests):
        words, answer = request(rng, shard_words * 8, data, parity)
        script.append((packet_words(words, width), answer))
    i_log, o_log = [], []
    dut = run_core(width, shard_words, script, logs=(i_log, o_log), data=data, parity=parity)
    assert dut.request_cycles == cycles
    n = data * shard_words
    lasts = [i_log[(r + 1) * n - 1] for r in range(requests)]
    assert [b - a for a, b in zip(lasts, lasts[1:])] == [cycles] * (requests - 1)
    assert o_log[0] == lasts[0] + 2
    assert o_log[parity * shard_words - 1] - i_log[0] == (data + parity) * shard_words
