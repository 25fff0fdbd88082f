"""StreamStrip and StreamInsert against Python slicing: random packets and byte counts with
stalls at 64, 128 and 512 bits, too-short packets, latency and full-rate throughput."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from apiary.stream.realign import StreamInsert, StreamStrip
from apiary.stream.header import byte_reverse
from apiary.stream.testbench import (packet_words, recv_packet, simulate, stream_get, stream_put,
                                     transfers)


TYPICAL = [14, 18, 34, 42, 46]          # Ethernet, +VLAN, +IPv4, +UDP, VLAN+IPv4+UDP


# -- helpers ---------------------------------------------------------------------------------------

def word_count(length, width):
    return max(1, -(-length // (width // 8)))


def run_stream(dut, width, sources, expected_count, *, rng, stall, cycles=30_000,
               recv=recv_packet):
    """Run ``sources`` (async functions of ctx) in the background, receive ``expected_count``
    packets from ``dut.o`` with ``recv``; returns (packets, counters, transfer cycles on i and
    o)."""
    received, result, log_i, log_o = [], {}, [], []

    async def sink(ctx):
        for _ in range(expected_count):
            received.append(await recv(ctx, dut.o, width, rng=rng, stall=stall))
        await ctx.tick().repeat(10)
        assert ctx.get(dut.o.valid) == 0, "output after the last expected packet"
        if isinstance(dut, StreamStrip):
            result["too_short"] = ctx.get(dut.too_short)

    background = [*sources, transfers(dut.i, log_i), transfers(dut.o, log_o)]
    if isinstance(dut, StreamStrip):
        async def pulses(ctx):
            result["dropped"] = 0
            async for _, _, dropped in ctx.tick().sample(dut.dropped):
                result["dropped"] += dropped
        background.append(pulses)
    simulate(dut, sink, background=background, timeout=cycles)
    return received, result, log_i, log_o


def head_receiver(k):
    """``recv`` for a strip with ``head=k``: ``(head, rest)``, the head word's bytes (checked to
    sit in its top ``k`` lanes, zero around them) and the packet after it, if any."""
    async def recv(ctx, port, width, **stall):
        nb = width // 8
        p = await stream_get(ctx, port, **stall)
        n, value = int(p.nbytes), int(p.data)
        assert 0 <= n <= k, f"a head word of {n} bytes"
        assert value & ((1 << 8 * (nb - k)) - 1) == 0, "lanes below the head are not zero"
        head = value >> 8 * (nb - k)
        assert head >> 8 * n == 0, "lanes past the head's bytes are not zero"
        assert p.last or n == k, "a head word before the rest is not full"
        rest = b"" if p.last else await recv_packet(ctx, port, width, **stall)
        assert rest or p.last, "an empty packet after the head"
        return head.to_bytes(k, "little")[:n], rest
    return recv


def run_strip(width, max_bytes, packets, counts, *, fixed=False, seed=0, stall=0.3,
              allowed=None, head=0):
    dut = StreamStrip(width, max_bytes, fixed=fixed, counts=allowed, head=head)
    rng = random.Random(seed)
    stalls = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}

    async def data_source(ctx):
        for packet in packets:
            for word in packet_words(packet, width, rng):
                await stream_put(ctx, dut.i, word, **stalls)

    async def n_source(ctx):
        for n in counts:
            await stream_put(ctx, dut.n, n, **stalls)

    sources = [data_source] if fixed else [data_source, n_source]
    good = sum(len(p) >= n for p, n in zip(packets, counts))
    recv = head_receiver(head) if head else recv_packet
    return run_stream(dut, width, sources, good, rng=rng, stall=stall, recv=recv)


def run_insert(width, max_bytes, packets, headers, *, fixed=False, seed=0, stall=0.3,
               allowed=None):
    dut = StreamInsert(width, max_bytes, fixed=fixed, counts=allowed)
    rng = random.Random(seed)
    stalls = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}

    async def data_source(ctx):
        for packet in packets:
            for word in packet_words(packet, width, rng):
                await stream_put(ctx, dut.i, word, **stalls)

    async def hdr_source(ctx):
        for header in headers:
            # Bytes past the header's length are random: the insert must not send them.
            garbage = rng.getrandbits(8 * (max_bytes - len(header))) << (8 * len(header))
            value = {"data": int.from_bytes(header, "little") | garbage}
            if not fixed:
                value["nbytes"] = len(header)
            await stream_put(ctx, dut.hdr, value, **stalls)

    return run_stream(dut, width, [data_source, hdr_source], len(packets), rng=rng, stall=stall)


def random_length(rng):
    """Mostly short packets (so that headers and tails dominate), some up to 1600 bytes."""
    return rng.randrange(1601) if rng.random() < 0.15 else rng.randrange(120)


# -- parameters ------------------------------------------------------------------------------------

def test_bad_parameters():
    with pytest.raises(ValueError, match="flit width must be one of"):
        StreamStrip(100, 14)
    with pytest.raises(ValueError, match="head is a byte count below a word's 8"):
        StreamStrip(64, 14, head=8)
    with pytest.raises(ValueError, match="StreamStrip needs max_bytes to be a positive number"):
        StreamStrip(64, 0)
    with pytest.raises(ValueError, match="StreamInsert needs max_bytes to be a positive number"):
        StreamInsert(64, "14")
    with pytest.raises(ValueError, match="whole number of bytes, not 12 bits"):
        byte_reverse(Signal(12))
    assert "n" not in StreamStrip(64, 14, fixed=True).signature.members
    assert "nbytes" not in {n for n, _ in StreamInsert(64, 14, fixed=True).hdr.payload.shape()}


def test_byte_reverse():
    sig = Signal(24)

    async def tb(ctx):
        ctx.set(sig, 0x123456)
        assert ctx.get(byte_reverse(sig)) == 0x563412

    sim = Simulator(Module())
    sim.add_testbench(tb)
    sim.run()


# -- strip -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [64, 128, 512])
def test_strip_random_with_stalls(width):
    """Random packets and byte counts (beyond one word at 64 bits, typical header sizes, and
    packets shorter than N in between) with stalls on all three streams: the output is
    ``packet[N:]`` and every too-short packet is dropped and counted."""
    rng = random.Random(width)
    max_bytes = 70
    packets, counts = [], []
    for k in range(80):
        n = rng.choice(TYPICAL) if k % 2 else rng.randrange(max_bytes + 1)
        length = random_length(rng)
        if k % 9 == 4:
            length = rng.randrange(n + 1)           # too short, or exactly N
        packets.append(rng.randbytes(length))
        counts.append(n)
    short = sum(len(p) < n for p, n in zip(packets, counts))
    assert short >= 3
    got, result, _, _ = run_strip(width, max_bytes, packets, counts, seed=width)
    assert got == [p[n:] for p, n in zip(packets, counts) if len(p) >= n]
    assert result == {"too_short": short, "dropped": short}


@pytest.mark.parametrize("width", [64, 512])
def test_strip_fixed(width):
    rng = random.Random(3)
    packets = [rng.randbytes(random_length(rng)) for _ in range(20)] + [b"x" * 14, b""]
    got, result, _, _ = run_strip(width, 14, packets, [14] * len(packets), fixed=True, seed=3)
    assert got == [p[14:] for p in packets if len(p) >= 14]
    assert result["too_short"] == sum(len(p) < 14 for p in packets)


@pytest.mark.parametrize("width", [64, 512])
def test_strip_drops_short_packet_and_passes_next(width):
    """A packet that ends inside its header, whether in a discarded word, in the word where
    the payload would start, or as an empty packet, is dropped whole and counted; the packets
    around it pass intact."""
    nb = width // 8
    n = nb + 6 if width == 64 else 46
    rng = random.Random(5)
    ends_early = nb if nb < n else n - 10          # in a discarded word at 64 bits
    packets = [rng.randbytes(100), rng.randbytes(n - 1), rng.randbytes(ends_early), b"",
               rng.randbytes(n), rng.randbytes(n + 1), rng.randbytes(3 * nb + 1)]
    got, result, _, _ = run_strip(width, n, packets, [n] * len(packets), seed=5)
    assert got == [packets[0][n:], b"", packets[5][n:], packets[6][n:]]
    assert result == {"too_short": 3, "dropped": 3}


def expected_strip_stalls(packets, counts, width):
    """Input stall cycles the docstring allows: a packet ending with a flush word followed by
    one whose first output word comes from its first input word."""
    nb = width // 8
    stalls = 0
    for k in range(1, len(packets)):
        (prev, pn), (cur, cn) = (packets[k - 1], counts[k - 1]), (packets[k], counts[k])
        last_index = word_count(len(prev), width) - 1
        flush = (len(prev) >= pn and pn > 0 and last_index > (pn - 1) // nb
                 and (-pn) % nb + len(prev) - last_index * nb > nb)
        direct = cn == 0 or (cn <= nb and len(cur) <= nb and len(cur) >= cn)
        stalls += flush and direct
    return stalls


@pytest.mark.parametrize("width", [64, 512])
def test_strip_throughput(width):
    """Back-to-back packets, source and sink never stalling: one input word per cycle with no
    idle cycle, except exactly the stalls the docstring allows (none at 64 bits with header
    sizes of one word or more)."""
    rng = random.Random(width + 7)
    counts = [rng.choice(TYPICAL + [0, 5]) for _ in range(60)]
    if width == 64:
        counts = [rng.choice(TYPICAL) for _ in range(60)]
    packets = [rng.randbytes(n + rng.choice([0, 1, 7, 30, 64, 65, 200])) for n in counts]
    got, _, log_i, log_o = run_strip(width, 64, packets, counts, stall=0)
    assert got == [p[n:] for p, n in zip(packets, counts)]
    words = sum(word_count(len(p), width) for p in packets)
    stalls = expected_strip_stalls(packets, counts, width)
    assert len(log_i) == words
    assert log_i[-1] - log_i[0] + 1 == words + stalls
    if width == 64:
        assert stalls == 0
    else:
        assert 0 < stalls < len(packets) // 4
    # Output words: one per output word of each packet, sent no later than one cycle after the
    # last input word.
    assert len(log_o) == sum(word_count(len(p) - n, width) for p, n in zip(packets, counts))
    assert log_o[-1] <= log_i[-1] + 1


def test_strip_latency():
    """N = 0 passes words combinationally; N = 8 at 64 bits sends word 1 in the cycle it
    arrives; N = 3 sends a one-word packet in the cycle it arrives, and a packet whose last word
    overflows ends with a flush word one cycle later."""
    dut = StreamStrip(64, 8)

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.n.valid, 1)
        for n, words, outputs in [
            (0, [(0x1122, 2, 1)], [(0x1122, 2, 1)]),
            (8, [(0xAA, 8, 0), (0x0807060504030201, 8, 1)], [None, (0x0807060504030201, 8, 1)]),
            (3, [(0x0504030201, 5, 1)], [(0x0504, 2, 1)]),
            (3, [(0x0807060504030201, 8, 0), (0x1211100F0E0D0C0B, 8, 1)],
             [None, (0x0D0C0B0807060504, 8, 0)]),
        ]:
            ctx.set(dut.n.payload, n)
            for (value, nbytes, last), expected in zip(words, outputs):
                ctx.set(dut.i.payload, {"data": value, "nbytes": nbytes, "last": last})
                ctx.set(dut.i.valid, 1)
                if expected is None:
                    assert ctx.get(dut.o.valid) == 0
                else:
                    assert ctx.get(dut.o.valid) == 1
                    p = ctx.get(dut.o.payload)
                    assert (p.data, p.nbytes, p.last) == expected
                assert ctx.get(dut.i.ready) == 1
                await ctx.tick()
            ctx.set(dut.i.valid, 0)
            if n == 3 and len(words) == 2:
                assert ctx.get(dut.o.valid) == 1
                p = ctx.get(dut.o.payload)
                assert (p.data, p.nbytes, p.last) == (0x1211100F0E, 5, 1)
                await ctx.tick()
            assert ctx.get(dut.o.valid) == 0

    simulate(dut, tb)


# -- insert ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [64, 128, 512])
def test_insert_random_with_stalls(width):
    """Random packets and header lengths (0 to several words, typical sizes, headers ending on
    a word boundary before an empty packet) with stalls on all three streams: the output is
    ``header + packet``."""
    rng = random.Random(width + 1)
    max_bytes = 70
    packets, headers = [], []
    for k in range(80):
        n = rng.choice(TYPICAL) if k % 2 else rng.randrange(max_bytes + 1)
        if k % 7 == 3:
            n = (width // 8) * rng.randrange(1, max_bytes // (width // 8) + 1)
        packets.append(rng.randbytes(0 if k % 5 == 2 else random_length(rng)))
        headers.append(rng.randbytes(n))
    got, _, _, _ = run_insert(width, max_bytes, packets, headers, seed=width)
    assert got == [h + p for h, p in zip(headers, packets)]


@pytest.mark.parametrize("width", [64, 512])
def test_insert_fixed(width):
    rng = random.Random(4)
    packets = [rng.randbytes(random_length(rng)) for _ in range(20)] + [b""]
    headers = [rng.randbytes(42) for _ in packets]
    got, _, _, _ = run_insert(width, 42, packets, headers, fixed=True, seed=4)
    assert got == [h + p for h, p in zip(headers, packets)]


@pytest.mark.parametrize("width", [64, 512])
def test_insert_throughput(width):
    """Back-to-back packets, sources and sink never stalling: the output sends one word per
    cycle from the first word to the last, exactly ``ceil((N + L) / (width/8))`` per packet."""
    rng = random.Random(width + 9)
    headers = [rng.randbytes(rng.choice(TYPICAL + [0, 8, 64])) for _ in range(60)]
    packets = [rng.randbytes(rng.choice([0, 1, 7, 30, 64, 65, 200])) for _ in headers]
    got, _, _, log_o = run_insert(width, 64, packets, headers, stall=0)
    assert got == [h + p for h, p in zip(headers, packets)]
    words = sum(word_count(len(h) + len(p), width) for h, p in zip(headers, packets))
    assert len(log_o) == words
    assert log_o[-1] - log_o[0] + 1 == words


def test_insert_latency():
    """A header of at least one word is sent in the cycle ``hdr`` becomes valid, before any
    payload; the payload's first word follows in the cycle it arrives."""
    dut = StreamInsert(64, 16)

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        header = bytes(range(1, 11))
        ctx.set(dut.hdr.payload, {"data": int.from_bytes(header, "little"), "nbytes": 10})
        ctx.set(dut.hdr.valid, 1)
        assert ctx.get(dut.o.valid) == 1
        assert ctx.get(dut.o.payload.data) == int.from_bytes(header[:8], "little")
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0                   # waiting for the payload
        ctx.set(dut.i.payload, {"data": int.from_bytes(b"abcdefgh", "little"), "nbytes": 8,
                                "last": 1})
        ctx.set(dut.i.valid, 1)
        assert ctx.get(dut.o.valid) == 1 and ctx.get(dut.hdr.ready) == 1
        assert ctx.get(dut.o.payload.data) == int.from_bytes(header[8:] + b"abcdef", "little")
        assert ctx.get(dut.o.payload.last) == 0
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.hdr.valid, 0)
        p = ctx.get(dut.o.payload)
        assert ctx.get(dut.o.valid) == 1                   # the flush word
        assert (p.data, p.nbytes, p.last) == (int.from_bytes(b"gh", "little"), 2, 1)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0

    simulate(dut, tb)


def test_insert_header_on_word_boundary_waits_for_payload():
    """A header that ends on a word boundary is held until the payload's first word shows
    whether the packet is empty: then the header word itself is the last."""
    dut = StreamInsert(64, 16)

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.hdr.payload, {"data": int.from_bytes(bytes(range(1, 17)), "little"),
                                  "nbytes": 16})
        ctx.set(dut.hdr.valid, 1)
        await ctx.tick()                                    # first header word sent
        for _ in range(3):
            assert ctx.get(dut.o.valid) == 0
            await ctx.tick()
        ctx.set(dut.i.payload, {"data": 0xFFFF, "nbytes": 0, "last": 1})
        ctx.set(dut.i.valid, 1)
        p = ctx.get(dut.o.payload)
        assert ctx.get(dut.o.valid) == 1
        assert (p.data, p.nbytes, p.last) == (int.from_bytes(bytes(range(9, 17)), "little"), 8, 1)
        assert ctx.get(dut.i.ready) == 1 and ctx.get(dut.hdr.ready) == 1
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.hdr.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0

    simulate(dut, tb)


@pytest.mark.parametrize("counts", [[14, 18], list(range(20, 61, 4))],
                         ids=["ethernet", "ipv4"])
@pytest.mark.parametrize("width", [64, 512])
def test_strip_and_insert_with_a_few_counts(width, counts):
    """``counts``: the same results as the general blocks when every count is one of them;
    two counts (Ethernet's) choose between two fixed rotations, IPv4's eleven header lengths
    rotate in one stage per bit in which they differ."""
    rng = random.Random(width + 11)
    top = max(counts)
    packets = [rng.randbytes(rng.randrange(top, 200)) for _ in range(40)]
    ns = [rng.choice(counts) for _ in packets]
    got, _, _, _ = run_strip(width, top, packets, ns, seed=5, allowed=counts)
    assert got == [p[n:] for p, n in zip(packets, ns)]
    headers = [rng.randbytes(n) for n in ns]
    got, _, _, _ = run_insert(width, top, packets, headers, seed=6, allowed=counts)
    assert got == [h + p for h, p in zip(headers, packets)]
    with pytest.raises(ValueError, match="needs counts to be byte counts"):
        StreamStrip(width, top, counts=[top + 1])


@pytest.mark.parametrize("fixed", [False, True], ids=["variable", "fixed"])
@pytest.mark.parametrize("width,k", [(64, 5), (64, 7), (512, 28), (512, 37)])
def test_strip_with_head(width, k, fixed):
    """``head=k``: each packet comes out as a head word of ``packet[N:N+k]`` in its top lanes,
    then ``packet[N+k:]`` realigned, for every cut (inside a word, on a word boundary, the head
    across two words), packets ending before, inside or just past the head, and too-short ones
    dropped and counted; with IPv4's eleven header lengths as ``counts`` too."""
    rng = random.Random(width + k)
    nb = width // 8
    counts = list(range(20, 61, 4))
    packets, ns = [], []
    for i in range(90):
        n = 60 if fixed else rng.choice(counts)
        edge = [n - 1, n, n + 1, n + k - 1, n + k, n + k + 1, nb * (-(-(n + k) // nb)),
                nb * ((n + k) // nb) + 1, n + k + nb]
        length = rng.choice(edge) if i % 2 else rng.choice([rng.randrange(n + k + 3 * nb),
                                                            rng.randrange(400)])
        packets.append(rng.randbytes(max(0, length)))
        ns.append(n)
    short = sum(len(p) < n for p, n in zip(packets, ns))
    assert short >= 3
    expected = [(p[n:n + k], p[n + k:]) for p, n in zip(packets, ns) if len(p) >= n]
    for allowed in ([None, counts] if not fixed else [None]):
        got, result, _, _ = run_strip(width, 60, packets, ns, fixed=fixed, seed=k,
                                      allowed=allowed, head=k)
        assert got == expected
        assert result == {"too_short": short, "dropped": short}


def test_strip_head_word_count_and_rate():
    """At 512 bits a one-word IPv4 packet gives one word (its head, ``last``), and a 92-byte
    one (a 64-byte UDP payload) two, one word a cycle with no stall: what the IPv4 tile needs
    for its 2 cycles per packet."""
    width, k = 512, 28
    rng = random.Random(2)
    packets = [rng.randbytes(46), rng.randbytes(92)] * 4
    got, _, log_i, log_o = run_strip(width, 60, packets, [20] * 8, stall=0, head=k,
                                     allowed=list(range(20, 61, 4)))
    assert got == [(p[20:48], p[48:]) for p in packets]
    assert len(log_o) == len(log_i) == 12
    assert log_o[-1] - log_o[0] == 11
