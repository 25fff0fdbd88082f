"""MessageSender and MessageReceiver: golden flits, loopback with stalls, latency, throughput,
and what each does with messages whose lengths disagree with their headers."""

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring

from apiary.noc import Message, NocHeader, header_flits, noc_header
from apiary.noc.framing import (DESCRIPTOR_FIELDS, MessageReceiver, MessageSender, PayloadFramer,
                                length_bits, payload_words)
from apiary.stream.testbench import (recv_packet, send_packet, simulate, stream_get, stream_put,
                                     take_either)
from apiary.noc.testbench import send_flits, split_messages


WIDTHS = [64, 512]


# -- golden-model helpers -------------------------------------------------------------------------

def random_message(rng, width, meta_words, max_bytes=300):
    hdr = NocHeader(dst_x=rng.randrange(256), dst_y=rng.randrange(256),
                    dst_fbits=rng.randrange(16), msg_type=rng.randrange(256),
                    src_x=rng.randrange(256), src_y=rng.randrange(256),
                    src_fbits=rng.randrange(16))
    meta = [rng.getrandbits(width) for _ in range(meta_words)]
    return Message(hdr, meta, rng.randbytes(rng.randrange(max_bytes + 1)))


def descriptor(msg, width):
    """The sender descriptor of ``msg`` (a dict for ``ctx.set``)."""
    desc = {n: int(getattr(msg.header, n)) for n in DESCRIPTOR_FIELDS}
    desc["payload_bytes"] = len(msg.payload)
    if msg.meta:
        desc["meta"] = sum(int(w) << (width * k) for k, w in enumerate(msg.meta))
    return desc


def payload_stream(payload, width, rng, *, garbage=True):
    """Payload-stream words for ``payload``; with ``garbage``, lanes past ``nbytes`` of the final
    word hold random bytes (the sender must not send them)."""
    nb = width // 8
    words = []
    for off in range(0, len(payload), nb):
        chunk = payload[off:off + nb]
        value = int.from_bytes(chunk, "little")
        if garbage and len(chunk) < nb:
            value |= rng.getrandbits(8 * (nb - len(chunk))) << (8 * len(chunk))
        words.append({"data": value, "nbytes": len(chunk), "last": int(off + nb >= len(payload))})
    return words


def payload_feeder(sender, payloads, width, seed, *, empty_packets=False, stall=0.3):
    """A background testbench putting each of ``payloads`` on ``sender.i_data``, with random
    stalls and garbage in the lanes past each one's last byte (which no flit may carry); an
    empty payload is an empty packet with ``empty_packets``, else nothing."""
    async def tb(ctx):
        r = random.Random(seed)
        for payload in payloads:
            if payload:
                for word in payload_stream(payload, width, r):
                    await stream_put(ctx, sender.i_data, word, rng=r, stall=stall)
            elif empty_packets:
                await send_packet(ctx, sender.i_data, payload, width, rng=r, stall=stall)
    return tb


def one_by_one(tx, payloads, width):
    """Background testbenches giving ``tx`` one descriptor (to ``dst_x`` 1) and one packet per
    payload of ``payloads``, without stalls."""
    async def descriptors(ctx):
        for payload in payloads:
            await stream_put(ctx, tx.i_hdr, {"dst_x": 1, "payload_bytes": len(payload)})

    async def data(ctx):
        for payload in payloads:
            await send_packet(ctx, tx.i_data, payload, width)
    return [descriptors, data]


def linked(tx, rx):
    """``(m, tx, rx)``: a module with sender ``tx``'s flits going straight to receiver ``rx``."""
    m = Module()
    m.submodules.tx, m.submodules.rx = tx, rx
    wiring.connect(m, tx=tx.o, rx=rx.i)
    return m, tx, rx


def monitor(link, log):
    """A background testbench recording every transfer on ``link`` as ``(data, last)``."""
    async def tb(ctx):
        async for _, _, valid, ready, data, last in ctx.tick().sample(
                link.valid, link.ready, link.payload.data, link.payload.last):
            if valid and ready:
                log.append((int(data), int(last)))
    return tb


def check_header(view, expected, width, meta_words):
    """``view`` (an ``o_hdr`` payload) holds every field of ``expected`` (a Message)."""
    golden = Message.from_flits(expected.flits(width), width).header
    for name in noc_header(width).names:
        assert int(getattr(view, name)) == getattr(golden, name), name
    if meta_words:
        assert int(view.meta) == sum(int(w) << (width * k) for k, w in enumerate(expected.meta))


async def recv_payload(ctx, port, **stall):
    """Receive payload words up to ``last``; returns (bytes, list of nbytes)."""
    out, counts = b"", []
    nb = len(port.payload.data) // 8
    while True:
        p = await stream_get(ctx, port, **stall)
        n = int(p.nbytes)
        counts.append(n)
        out += int(p.data).to_bytes(nb, "little")[:n]
        assert int(p.data) >> (8 * n) == 0, "lanes past nbytes are not zero"
        if p.last:
            return out, counts


def expected_nbytes(length, width):
    words, tail = payload_words(length, width)
    return [width // 8] * (words - 1) + [tail] if words else []


# -- parameters -----------------------------------------------------------------------------------

def test_payload_words():
    assert payload_words(0, 64)[0] == 0
    assert payload_words(1, 64) == (1, 1)
    assert payload_words(8, 64) == (1, 8)
    assert payload_words(9, 64) == (2, 1)
    assert payload_words(300, 512) == (5, 44)


def test_bad_parameters():
    with pytest.raises(ValueError, match="between 0 and 255 metadata words"):
        MessageSender(64, meta_words=256)
    with pytest.raises(ValueError, match="between 0 and 255 metadata words"):
        MessageReceiver(64, meta_words=-1)
    with pytest.raises(ValueError, match="flit width must be one of"):
        MessageSender(100)
    with pytest.raises(ValueError, match="flit width must be one of"):
        MessageReceiver(32)


def test_descriptor_layout():
    layout = MessageSender.descriptor_layout(64, 2)
    assert {name for name, _ in layout} == set(DESCRIPTOR_FIELDS) | {"meta"}
    assert layout.size == 8 + 8 + 4 + 8 + 8 + 8 + 4 + 22 + 128
    assert "meta" not in {name for name, _ in MessageSender.descriptor_layout(512)}
    hdr = MessageReceiver.header_layout(512, 1)
    assert hdr.size == 1024 and hdr["meta"].offset == 512
    assert hdr["dst_fbits"].offset == noc_header(512).offset("dst_fbits")


# -- loopback -------------------------------------------------------------------------------------

@pytest.mark.parametrize("meta_words,empty_packets", [(0, False), (1, False), (2, False),
                                                      (1, True)])
@pytest.mark.parametrize("width", WIDTHS)
def test_loopback_with_stalls(width, meta_words, empty_packets):
    """Sender → receiver with random stalls at all four ends: the link carries exactly
    ``Message.flits`` and the receiver gives back every descriptor, metadata word and byte.
    With ``empty_packets`` both ends carry one (empty) packet for each header-only message."""
    rng = random.Random(width * 10 + meta_words)
    count = 50
    messages = [random_message(rng, width, meta_words) for _ in range(count)]
    messages[1].payload = b""                               # header-only ones, back to back
    messages[2].payload = b""
    messages[3].payload = bytes(range(width // 8))          # exactly one full word

    loopback(width, messages, meta_words, empty_packets=empty_packets,
             stall=dict(rng=random.Random(rng.random()), stall=0.3))


def loopback(width, messages, meta_words, *, stall, empty_packets=False, **framing):
    """``messages`` through a sender and a receiver (``framing``: more arguments of both),
    with ``stall`` at all four ends: the link carries exactly ``Message.flits`` and the
    receiver gives back every descriptor, metadata word and byte, with no error counted."""
    m, tx, rx = linked(MessageSender(width, meta_words, empty_packets=empty_packets, **framing),
                       MessageReceiver(width, meta_words, empty_packets=empty_packets, **framing))
    link = []

    async def descriptors(ctx):
        for msg in messages:
            await stream_put(ctx, tx.i_hdr, descriptor(msg, width), **stall)

    async def payloads(ctx):
        r = random.Random(7)
        for msg in messages:
            if empty_packets and not msg.payload:
                await send_packet(ctx, tx.i_data, b"", width, rng=r)
            for word in payload_stream(msg.payload, width, r):
                await stream_put(ctx, tx.i_data, word, **stall)

    async def consumer(ctx):
        for msg in messages:
            hdr = await stream_get(ctx, rx.o_hdr, **stall)
            check_header(hdr, msg, width, meta_words)
            if msg.payload:
                data, counts = await recv_payload(ctx, rx.o_data, **stall)
                assert data == msg.payload
                assert counts == expected_nbytes(len(msg.payload), width)
            elif empty_packets:
                assert await recv_packet(ctx, rx.o_data, width, **stall) == b""
        await ctx.tick().repeat(5)
        assert ctx.get(rx.o_hdr.valid) == 0 and ctx.get(rx.o_data.valid) == 0
        assert ctx.get(tx.length_errors) == 0
        assert ctx.get(rx.errors) == 0

    simulate(m, consumer, background=[descriptors, payloads, monitor(tx.o, link)], timeout=100_000)

    got = split_messages(link)
    assert len(got) == len(messages)
    for flits, msg in zip(got, messages):
        assert flits == msg.flits(width)


# -- latency and throughput ------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_sender_latency_is_zero_cycles(width):
    """The first header flit is on ``o`` in the cycle the descriptor becomes valid, before any
    payload is offered."""
    msg = random_message(random.Random(1), width, 1)
    msg.payload = b"x" * 100
    dut = MessageSender(width, 1)

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0
        ctx.set(dut.i_hdr.payload, descriptor(msg, width))
        ctx.set(dut.i_hdr.valid, 1)
        assert ctx.get(dut.o.valid) == 1
        assert (ctx.get(dut.o.payload.data), ctx.get(dut.o.payload.last)) == msg.flits(width)[0]

    simulate(dut, tb)


@pytest.mark.parametrize("width", WIDTHS)
def test_sender_throughput_one_flit_per_cycle(width):
    """With sources and sink never stalling, back-to-back messages (header-only ones included)
    leave at one flit per cycle, without a single idle cycle."""
    rng = random.Random(width)
    messages = [random_message(rng, width, 1, max_bytes=200) for _ in range(20)]
    for k in (4, 5, 11):
        messages[k].payload = b""
    golden = [f for msg in messages for f in msg.flits(width)]
    dut = MessageSender(width, 1)

    async def descriptors(ctx):
        for msg in messages:
            await stream_put(ctx, dut.i_hdr, descriptor(msg, width))

    async def payloads(ctx):
        for msg in messages:
            for word in payload_stream(msg.payload, width, rng):
                await stream_put(ctx, dut.i_data, word)

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        flits, cycles = [], 0
        while len(flits) < len(golden):
            _, _, valid, data, last = await ctx.tick().sample(
                dut.o.valid, dut.o.payload.data, dut.o.payload.last)
            cycles += 1
            assert valid, f"idle cycle after {len(flits)} flits"
            flits.append((data, last))
        assert flits == golden and cycles == len(golden)

    simulate(dut, sink, background=[descriptors, payloads], timeout=20_000)


@pytest.mark.parametrize("width", WIDTHS)
def test_receiver_latency_and_throughput(width):
    """``o_hdr`` is valid in the cycle the last header/metadata flit arrives, payload words pass
    in the same cycle, and back-to-back messages are taken at one flit per cycle."""
    rng = random.Random(width + 1)
    messages = [random_message(rng, width, 1, max_bytes=200) for _ in range(20)]
    for k in (0, 6, 7):
        messages[k].payload = b""
    dut = MessageReceiver(width, 1)
    count = header_flits(width) + 1

    async def latency(ctx):
        first = random_message(rng, width, 1)
        first.payload = b"abc"
        flits = first.flits(width)
        ctx.set(dut.o_hdr.ready, 1)
        ctx.set(dut.o_data.ready, 1)
        for data, last in flits[:count - 1]:
            await stream_put(ctx, dut.i, {"data": data, "last": last})
            assert ctx.get(dut.o_hdr.valid) == 0
        ctx.set(dut.i.payload, {"data": flits[count - 1][0], "last": 0})
        ctx.set(dut.i.valid, 1)
        assert ctx.get(dut.o_hdr.valid) == 1 and ctx.get(dut.i.ready) == 1
        check_header(ctx.get(dut.o_hdr.payload), first, width, 1)
        await ctx.tick()
        ctx.set(dut.i.payload, {"data": flits[count][0], "last": 1})
        assert ctx.get(dut.o_data.valid) == 1
        assert ctx.get(dut.o_data.payload.nbytes) == 3
        assert ctx.get(dut.o_data.payload.data) == int.from_bytes(b"abc", "little")
        await ctx.tick()
        ctx.set(dut.i.valid, 0)

        flits = [f for msg in messages for f in msg.flits(width)]
        stalls = 0
        for data, last in flits:
            ctx.set(dut.i.payload, {"data": data, "last": last})
            ctx.set(dut.i.valid, 1)
            _, _, ready = await ctx.tick().sample(dut.i.ready)
            while not ready:
                stalls += 1
                _, _, ready = await ctx.tick().sample(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        assert stalls == 0
        await ctx.tick().repeat(3)
        assert ctx.get(dut.errors) == 0
        assert seen["headers"] == len(messages) + 1
        assert seen["payloads"] == sum(1 for msg in messages if msg.payload) + 1

    seen = {"headers": 0, "payloads": 0}

    async def count_outputs(ctx):
        async for _, _, hv, dv, dl in ctx.tick().sample(dut.o_hdr.valid, dut.o_data.valid,
                                                       dut.o_data.payload.last):
            seen["headers"] += hv
            seen["payloads"] += dv & dl

    simulate(dut, latency, background=[count_outputs], timeout=20_000)


# -- length errors ---------------------------------------------------------------------------------

def run_sender(width, jobs):
    """``jobs`` is a list of (Message, payload words); returns the output flits and
    ``length_errors``."""
    dut = MessageSender(width)
    rng = random.Random(3)
    link = []
    total = sum(len(msg.flits(width)) for msg, _ in jobs)
    result = {}

    async def descriptors(ctx):
        for msg, _ in jobs:
            await stream_put(ctx, dut.i_hdr, descriptor(msg, width), rng=rng, stall=0.3)

    async def payloads(ctx):
        for _, words in jobs:
            for word in words:
                await stream_put(ctx, dut.i_data, word, rng=rng, stall=0.3)

    async def sink(ctx):
        while len(link) < total:
            p = await stream_get(ctx, dut.o, rng=rng, stall=0.3)
            link.append((int(p.data), int(p.last)))
        await ctx.tick().repeat(20)
        result["errors"] = ctx.get(dut.length_errors)
        result["idle"] = ctx.get(dut.i_data.ready) == 0 and ctx.get(dut.o.valid) == 0

    simulate(dut, sink, background=[descriptors, payloads], timeout=20_000)
    return link, result


@pytest.mark.parametrize("width", WIDTHS)
def test_sender_short_payload_is_padded_with_zeros(width):
    """``i_data`` ends early: the message is completed with zero words, counted once, and the
    next message (whose words follow at once on ``i_data``) is intact."""
    rng = random.Random(11)
    nb = width // 8
    short, good = random_message(rng, width, 0), random_message(rng, width, 0)
    short.payload = rng.randbytes(4 * nb + 5)
    good.payload = rng.randbytes(2 * nb + 1)
    given = short.payload[:nb + 3]                          # two words, the second partial
    words = payload_stream(given, width, rng, garbage=False)
    link, result = run_sender(width, [(short, words), (good, payload_stream(good.payload,
                                                                            width, rng))])
    padded = Message(short.header, [], given + bytes(len(short.payload) - len(given)))
    assert link == padded.flits(width) + good.flits(width)
    assert result["errors"] == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_sender_long_payload_is_cut(width):
    """``i_data`` runs past ``payload_bytes``: the message ends where ``payload_bytes`` says, the
    extra words are discarded, counted once, and the next message is intact."""
    rng = random.Random(12)
    nb = width // 8
    long, good = random_message(rng, width, 0), random_message(rng, width, 0)
    long.payload = rng.randbytes(nb + 2)
    given = long.payload + rng.randbytes(3 * nb)
    words = payload_stream(given, width, rng)
    link, result = run_sender(width, [(long, words), (good, payload_stream(good.payload,
                                                                           width, rng))])
    assert link == long.flits(width) + good.flits(width)
    assert result["errors"] == 1
    assert result["idle"]


def run_receiver(width, meta_words, flit_lists, deliveries, **kwargs):
    """Feed raw messages to a receiver (with stalls) and take ``deliveries`` o_hdr transfers, each
    with the payload that follows; returns them as (header fields, meta, bytes), and ``errors``.
    ``kwargs`` go to the receiver."""
    dut = MessageReceiver(width, meta_words, **kwargs)
    rng = random.Random(5)
    delivered = []
    result = {}
    names = noc_header(width).names

    async def source(ctx):
        for flits in flit_lists:
            await send_flits(ctx, dut.i, flits, rng=rng, stall=0.3)
        await ctx.tick().repeat(20)
        result["errors"] = ctx.get(dut.errors)

    async def sink(ctx):
        for _ in range(deliveries):
            hdr = await stream_get(ctx, dut.o_hdr, rng=rng, stall=0.3)
            fields = {n: int(getattr(hdr, n)) for n in names}
            meta = int(hdr.meta) if meta_words else None
            data = b""
            if fields["payload_bytes"]:
                data, counts = await recv_payload(ctx, dut.o_data, rng=rng, stall=0.3)
                assert counts == expected_nbytes(fields["payload_bytes"], width)
            delivered.append((fields, meta, data))
        await ctx.tick().repeat(20)
        assert ctx.get(dut.o_hdr.valid) == 0, "more deliveries than expected"

    flits = sum(len(f) for f in flit_lists)
    simulate(dut, source, sink, timeout=20 * flits + 100)
    return delivered, result["errors"]


@pytest.mark.parametrize("width", WIDTHS)
def test_receiver_errors_do_not_wedge(width):
    """Each kind of malformed message, followed by a good one: the malformed message is dropped
    or reframed as documented, counted once, and the good one comes through intact."""
    rng = random.Random(21)
    nb = width // 8
    nh = header_flits(width)

    def msg(nbytes, meta_words=1):
        m = random_message(rng, width, meta_words)
        m.payload = rng.randbytes(nbytes)
        return m

    def cut(flits, n):
        """The first ``n`` flits, the last of them marked ``last``."""
        return flits[:n - 1] + [(flits[n - 1][0], 1)]

    def with_last_moved(flits, extra):
        return flits[:-1] + [(flits[-1][0], 0)] + [(w, 0) for w in extra[:-1]] + [(extra[-1], 1)]

    goods = [msg(rng.randrange(1, 200)) for _ in range(8)]
    short, long, hdr_only = msg(3 * nb + 1), msg(nb + 4), msg(0)
    cases = [
        ("header cut short", cut(msg(50).flits(width), 1), None),
        ("no metadata flit", msg(50, meta_words=0).flits(width), None),
        ("ends in metadata", cut(msg(50).flits(width), nh), None),
        ("ends on metadata, payload due", cut(msg(50).flits(width), nh + 1), None),
        ("payload short", cut(short.flits(width), nh + 1 + 2),
         (short, short.payload[:2 * nb] + bytes(len(short.payload) - 2 * nb))),
        ("payload long", with_last_moved(long.flits(width), [rng.getrandbits(width)] * 3),
         (long, long.payload)),
        ("header-only with payload", with_last_moved(hdr_only.flits(width), [1, 2]),
         (hdr_only, b"")),
    ]
    stream, expected = [], []
    for (_, flits, outcome), good in zip(cases, goods):
        stream += [flits, good.flits(width)]
        if outcome is not None:
            expected.append(outcome)
        expected.append((good, good.payload))
    stream.append(goods[-1].flits(width))
    expected.append((goods[-1], goods[-1].payload))

    delivered, errors = run_receiver(width, 1, stream, len(expected))
    assert errors == len(cases)
    assert len(delivered) == len(expected)
    for (fields, meta, data), (m, payload) in zip(delivered, expected):
        golden = Message.from_flits(m.flits(width), width).header
        assert fields == {n: getattr(golden, n) for n in fields}
        assert meta == m.meta[0]
        assert data == payload


def test_framer_pads_and_drains():
    """The shared framer on its own: exact framing from ``load_bytes`` in both error cases."""
    dut = PayloadFramer(64)
    out = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        for nbytes, words in [(20, 1), (10, 4), (12, 2)]:      # short, long, exact
            ctx.set(dut.load_bytes, nbytes)
            ctx.set(dut.load, 1)
            await ctx.tick()
            ctx.set(dut.load, 0)
            for k in range(words):
                await stream_put(ctx, dut.i, {"data": 0x1111111111111111 * (k + 1),
                                              "last": int(k == words - 1)})
            while ctx.get(dut.busy):
                await ctx.tick()

    async def sink(ctx):
        async for _, _, valid, data, nbytes, last, error in ctx.tick().sample(
                dut.o.valid, dut.o.payload.data, dut.o.payload.nbytes, dut.o.payload.last,
                dut.error):
            if valid:
                out.append((int(data), int(nbytes), int(last)))
            if error:
                out.append("error")

    simulate(dut, tb, background=[sink], timeout=1000)
    ones = 0x1111111111111111
    assert out == [
        (ones, 8, 0), "error", (0, 8, 0), (0, 4, 1),            # 20 bytes from one word
        (ones, 8, 0), (ones * 2 & 0xffff, 2, 1), "error",       # 10 bytes from four words
        (ones, 8, 0), (ones * 2 & 0xffffffff, 4, 1),            # 12 bytes from two words
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_metadata_bits_inline_at_512_and_in_flits_below(width):
    """With ``meta_bits`` the metadata rides in the header flit's 256 spare bits at 512 bits
    (no metadata flit) and in flits after the header at 64; either way it arrives intact."""
    from apiary.noc.framing import meta_plan
    bits = 202
    flits, inline, _ = meta_plan(width, meta_bits=bits)
    assert (flits, inline) == ((0, bits) if width == 512 else (4, 0))
    with pytest.raises(ValueError, match="not both"):
        meta_plan(width, 1, meta_bits=bits)
    rng = random.Random(width)
    jobs = [(rng.getrandbits(bits), rng.randbytes(rng.randrange(0, 200))) for _ in range(20)]
    jobs[3] = (jobs[3][0], b"")

    m, tx, rx = linked(MessageSender(width, meta_bits=bits, empty_packets=True),
                       MessageReceiver(width, meta_bits=bits, empty_packets=True))
    link = []
    stall = dict(rng=random.Random(3), stall=0.3)

    async def descriptors(ctx):
        for meta, payload in jobs:
            await stream_put(ctx, tx.i_hdr, {"dst_x": 1, "payload_bytes": len(payload),
                                             "meta": meta}, **stall)

    async def payloads(ctx):
        for _, payload in jobs:
            await send_packet(ctx, tx.i_data, payload, width, **stall)

    async def consumer(ctx):
        for meta, payload in jobs:
            hdr = await stream_get(ctx, rx.o_hdr, **stall)
            assert int(hdr.meta) == meta and int(hdr.metadata_flits) == flits
            assert await recv_packet(ctx, rx.o_data, width, **stall) == payload
        assert ctx.get(rx.errors) == 0 and ctx.get(tx.length_errors) == 0

    simulate(m, consumer, background=[descriptors, payloads, monitor(tx.o, link)],
             timeout=50_000)
    for (_meta, payload), message in zip(jobs, split_messages(link)):
        words = -(-len(payload) // (width // 8))
        assert len(message) == header_flits(width) + flits + words


@pytest.mark.parametrize("width", [64, 128, 512])
def test_short_metadata_each_message_its_own_flit_count(width):
    """With ``short_meta`` a sender sends each message the metadata flits its descriptor says
    (the first ones) and a receiver takes any count up to its own, the words not carried
    reading as zero; a message with more metadata flits than the receiver's is dropped and
    counted, and the next one goes through. Inline metadata (512 bits) is unaffected."""
    from apiary.noc.framing import meta_plan
    bits = 202
    most, _, _ = meta_plan(width, meta_bits=bits)
    rng = random.Random(width + 1)
    jobs = []
    for k in range(30):
        sent = k % (most + 1)
        meta = rng.getrandbits(bits) & ((1 << (sent * width)) - 1 if most else (1 << bits) - 1)
        jobs.append((sent, meta, rng.randbytes(rng.randrange(0, 150))))

    m, tx, rx = linked(MessageSender(width, meta_bits=bits, short_meta=True),
                       MessageReceiver(width, meta_bits=bits, short_meta=True))
    link = []
    stall = dict(rng=random.Random(5), stall=0.3)

    async def descriptors(ctx):
        for sent, meta, payload in jobs:
            # Bits above the flits sent are not sent: set them, and expect zeros.
            noise = rng.getrandbits(bits) & ~((1 << (sent * width)) - 1) if most else 0
            await stream_put(ctx, tx.i_hdr, {"dst_x": 2, "payload_bytes": len(payload),
                                             "meta": meta | noise, "meta_flits": sent},
                             **stall)

    async def payloads(ctx):
        for _, _, payload in jobs:
            if payload:
                await send_packet(ctx, tx.i_data, payload, width, **stall)

    async def consumer(ctx):
        for sent, meta, payload in jobs:
            hdr = await stream_get(ctx, rx.o_hdr, **stall)
            assert int(hdr.meta) == meta and int(hdr.metadata_flits) == sent
            if payload:
                assert await recv_packet(ctx, rx.o_data, width, **stall) == payload
        assert ctx.get(rx.errors) == 0 and ctx.get(tx.length_errors) == 0

    simulate(m, consumer, background=[descriptors, payloads, monitor(tx.o, link)],
             timeout=50_000)
    for (sent, meta, payload), flits in zip(jobs, split_messages(link)):
        words = [meta >> (width * k) & ((1 << width) - 1) for k in range(sent)]
        header = NocHeader(dst_x=2, dst_fbits=0, src_fbits=0, payload_bytes=len(payload))
        if most:
            assert flits == Message(header, words, payload).flits(width)
        else:
            assert len(flits) == header_flits(width) + -(-len(payload) // (width // 8))


@pytest.mark.parametrize("width", [64, 128])
def test_short_metadata_receiver_drops_longer_metadata(width):
    """A ``short_meta`` receiver of 2 metadata flits drops a message that carries 3, counts
    it, and takes the next message (1 flit) whole."""
    m = Module()
    m.submodules.rx = rx = MessageReceiver(width, 2, short_meta=True)
    long = Message(NocHeader(dst_x=1, payload_bytes=3), [7, 8, 9], b"abc")
    short = Message(NocHeader(dst_x=2, payload_bytes=2), [5], b"xy")

    async def bench(ctx):
        await send_flits(ctx, rx.i, long.flits(width) + short.flits(width))

    async def consumer(ctx):
        hdr = await stream_get(ctx, rx.o_hdr)
        assert int(hdr.dst_x) == 2 and int(hdr.meta) == 5 and int(hdr.metadata_flits) == 1
        assert await recv_packet(ctx, rx.o_data, width) == b"xy"
        assert ctx.get(rx.errors) == 1

    simulate(m, consumer, background=[bench], timeout=5_000)


# -- head payload bytes ------------------------------------------------------------------------

async def take_apart_and_together(ctx, rx, width, count, rng, stall=0.3):
    """``count`` messages from ``rx`` as ``(header, payload or None)``, ``o_hdr.ready`` and
    ``o_data.ready`` raised each cycle at random and apart, so that a header and its packet's
    first word are also taken in the same cycle (a ``packet_with_header`` consumer); a word
    is never taken before its message's header."""
    nb = width // 8
    headers, words, got = [], b"", []
    while len(got) < count:
        hdr, word = await take_either(ctx, rx.o_hdr, rx.o_data, rng, stall)
        if hdr is not None:
            headers.append(hdr)
        header_only(headers, got)
        if word is not None:
            assert headers, "a payload word before its message's header"
            words += int(word.data).to_bytes(nb, "little")[:int(word.nbytes)]
            if word.last:
                got.append((headers.pop(0), words))
                words = b""
        header_only(headers, got)
    return got


def header_only(headers, got):
    """Move the header-only messages at the front of ``headers`` to ``got``: they are
    complete, and come in order with the rest."""
    while headers and int(headers[0].payload_bytes) == 0:
        got.append((headers.pop(0), None))


@pytest.mark.parametrize("width,bits,head,empty_packets,together", [
    (512, 81, 37, False, False), (512, 202, {5: 22, 6: 9}, True, False),
    (256, 81, 5, True, False), (512, 81, 37, False, True), (256, 81, 5, False, True),
])
def test_head_payload_bytes_ride_in_the_header_flit(width, bits, head, empty_packets, together):
    """With ``head`` the first payload bytes of a message ride in its header flit, below the
    header's fields and above the inline metadata, and the payload flits carry the rest: the
    link carries exactly ``meta_message_flits(..., head=)``, the receiver gives back every
    byte and metadata bit, with random stalls at all four ends; payloads shorter than the head
    bytes, empty ones and ones ending on a word boundary included, the unused lanes of their
    last words full of garbage. A mapping gives the count by ``msg_type`` (type 7: none).
    ``together``: the receiver has ``packet_with_header`` and its consumer takes headers and
    words apart and in the same cycle."""
    from apiary.noc.framing import head_room, meta_message_flits
    nb = width // 8
    heads = head if isinstance(head, dict) else {t: head for t in (5, 6, 7)}
    assert max(heads.values()) <= head_room(width, bits)
    rng = random.Random(width + bits)
    jobs = []
    for n in range(60):
        t = (5, 6, 7)[n % 3]
        k = heads.get(t, 0)
        size = rng.choice([0, 1, k, k + 1, nb - 1, nb, nb + k, 2 * nb + k - 1,
                           rng.randrange(300)])
        jobs.append((t, rng.getrandbits(bits), rng.randbytes(max(size, 0))))

    framing = dict(meta_bits=bits, head=head, empty_packets=empty_packets)
    m, tx, rx = linked(MessageSender(width, **framing),
                       MessageReceiver(width, **framing, packet_with_header=together))
    link = []
    stall = dict(rng=random.Random(9), stall=0.3)

    async def descriptors(ctx):
        for t, meta, payload in jobs:
            await stream_put(ctx, tx.i_hdr, {"dst_x": 3, "msg_type": t, "meta": meta,
                                             "payload_bytes": len(payload)}, **stall)

    payloads = payload_feeder(tx, [p for _, _, p in jobs], width, 4,
                              empty_packets=empty_packets)

    async def consumer(ctx):
        if together:
            got = await take_apart_and_together(ctx, rx, width, len(jobs), random.Random(9))
            assert [(int(h.msg_type), int(h.meta), p or b"") for h, p in got] == jobs
        for t, meta, payload in [] if together else jobs:
            hdr = await stream_get(ctx, rx.o_hdr, **stall)
            assert (int(hdr.msg_type), int(hdr.meta)) == (t, meta)
            if payload or empty_packets:
                assert await recv_packet(ctx, rx.o_data, width, **stall) == payload
        await ctx.tick().repeat(5)
        assert ctx.get(rx.o_data.valid) == 0
        assert ctx.get(rx.errors) == 0 and ctx.get(tx.length_errors) == 0

    simulate(m, consumer, background=[descriptors, payloads, monitor(tx.o, link)],
             timeout=100_000)
    got = split_messages(link)
    assert len(got) == len(jobs)
    for flits, (t, meta, payload) in zip(got, jobs):
        header = NocHeader(dst_x=3, msg_type=t, dst_fbits=0, src_fbits=0)
        k = heads.get(t, 0)
        assert flits == meta_message_flits(width, header, meta, bits, payload, head=k)
        assert len(flits) == 1 + -(-max(len(payload) - k, 0) // nb)


@pytest.mark.parametrize("ready", [True, False], ids=["taken", "not_ready"])
def test_a_packet_with_its_header_comes_in_the_header_cycle(ready):
    """``packet_with_header``: a message whose payload fits in its header flit offers its
    packet in the cycle its header is taken (not taken then, it stays on offer, the same
    word); a two-flit message's first word comes with its payload flit, as without."""
    width, bits, head = 512, 81, 37
    m, tx, rx = linked(MessageSender(width, meta_bits=bits, head=head),
                       MessageReceiver(width, meta_bits=bits, head=head,
                                       packet_with_header=True))
    payloads = [bytes(range(1, 30)), bytes(range(100))]

    async def consumer(ctx):
        for payload in payloads:
            ctx.set(rx.o_hdr.ready, 1)
            ctx.set(rx.o_data.ready, ready)
            while not ctx.get(rx.o_hdr.valid):
                await ctx.tick()
            one_flit = len(payload) <= head
            assert ctx.get(rx.o_data.valid) == one_flit
            word = ctx.get(rx.o_data.payload.data)
            await ctx.tick()
            ctx.set(rx.o_hdr.ready, 0)
            ctx.set(rx.o_data.ready, 1)
            if one_flit:
                assert ctx.get(rx.o_data.valid) == (not ready), "the packet twice, or never"
                assert ready or ctx.get(rx.o_data.payload.data) == word
                assert int(word).to_bytes(64, "little")[:len(payload)] == payload
                if not ready:
                    await ctx.tick()                # taken now
            else:
                assert await recv_packet(ctx, rx.o_data, width) == payload
        await ctx.tick().repeat(3)
        assert not ctx.get(rx.o_data.valid) and ctx.get(rx.errors) == 0

    simulate(m, consumer, background=one_by_one(tx, payloads, width), timeout=500)


def test_head_payload_bytes_keep_one_flit_per_cycle():
    """Back-to-back messages with head bytes leave the sender at one flit per cycle and pass
    the receiver without an idle cycle: a 92-byte payload with 37 head bytes is two flits, so
    two cycles per message."""
    width, bits, head = 512, 81, 37
    rng = random.Random(2)
    payloads = [rng.randbytes(92) for _ in range(12)]
    m, tx, rx = linked(MessageSender(width, meta_bits=bits, head=head),
                       MessageReceiver(width, meta_bits=bits, head=head))

    async def consumer(ctx):
        ctx.set(rx.o_hdr.ready, 1)
        ctx.set(rx.o_data.ready, 1)
        got, cycles, started = b"", 0, False
        while len(got) < 92 * len(payloads):
            _, _, valid, word, nbytes = await ctx.tick().sample(
                rx.o_data.valid, rx.o_data.payload.data, rx.o_data.payload.nbytes)
            started = started or valid
            cycles += started
            if valid:
                got += int(word).to_bytes(64, "little")[:int(nbytes)]
        assert got == b"".join(payloads)
        assert cycles == 2 * len(payloads)

    simulate(m, consumer, background=one_by_one(tx, payloads, width), timeout=5_000)


def test_a_sender_of_one_type_frames_every_message_with_its_count():
    """``head_types_only``: a sender whose mapping lists the one type it sends (what a
    ``Send`` port of one type asks for, ``framing_args``) frames each of its messages with
    that type's count without reading ``msg_type``, exactly as the model does, and a receiver
    of that type takes them back; a type's count may use the lanes of the longer metadata its
    messages do not carry."""
    from apiary.noc.framing import meta_message_flits
    from apiary.noc.ports import Send
    width, bits, k = 512, 202, 22           # room for 22 head bytes beside 202 bits (26 bytes)
    assert Send("out", 5, meta=None).framing_args(width, {"head": {5: k}}) == \
        {"head": {5: k}, "head_types_only": True}
    rng = random.Random(11)
    jobs = [(rng.getrandbits(bits), rng.randbytes(n)) for n in (1, k, k + 1, 64, 64 + k, 150)]
    m, tx, rx = linked(MessageSender(width, meta_bits=bits, head={5: k}, head_types_only=True),
                       MessageReceiver(width, meta_bits=bits, head=k))
    link = []

    async def descriptors(ctx):
        for meta, payload in jobs:
            await stream_put(ctx, tx.i_hdr, {"dst_x": 3, "msg_type": 5, "meta": meta,
                                             "payload_bytes": len(payload)})

    async def payloads(ctx):
        for _, payload in jobs:
            for word in payload_stream(payload, width, rng):
                await stream_put(ctx, tx.i_data, word)

    async def consumer(ctx):
        ctx.set(rx.o_data.ready, 1)
        for meta, payload in jobs:
            hdr = await stream_get(ctx, rx.o_hdr)
            assert int(hdr.meta) == meta
            assert await recv_packet(ctx, rx.o_data, width) == payload
        assert ctx.get(rx.errors) == 0 and ctx.get(tx.length_errors) == 0

    simulate(m, consumer, background=[descriptors, payloads, monitor(tx.o, link)],
             timeout=10_000)
    header = NocHeader(dst_x=3, msg_type=5, dst_fbits=0, src_fbits=0)
    assert split_messages(link) == [meta_message_flits(width, header, meta, bits, payload, k)
                                    for meta, payload in jobs]


@pytest.mark.parametrize("h,empty_packets", [(8, True), (20, False), (36, True)])
def test_a_prefix_from_the_descriptor_leads_the_payload(h, empty_packets):
    """``prefix_bytes``: a transmit layer's header comes in the descriptor and the payload
    after it on ``i_data``; the link carries exactly the model's flits of prefix + payload
    (head lanes from both, payload flits shifted by what the prefix leaves of the head),
    with random stalls, garbage past each payload's last byte, payloads of nothing, of less
    than the head's room and of a whole number of words; the receiver gives back every
    byte."""
    from apiary.noc.framing import meta_message_flits
    width, bits, k = 512, 81, 37
    nb = width // 8
    rng = random.Random(h)
    sizes = [0, 1, k - h - 1, k - h, k - h + 1, nb, nb + k - h, 2 * nb, 300]
    jobs = [(rng.getrandbits(bits), rng.randbytes(h), rng.randbytes(n))
            for n in sizes + [rng.randrange(200) for _ in range(8)]]
    m, tx, rx = linked(MessageSender(width, meta_bits=bits, head=k, prefix_bytes=h,
                                     empty_packets=empty_packets),
                       MessageReceiver(width, meta_bits=bits, head=k))
    link = []
    stall = dict(rng=random.Random(3), stall=0.3)

    async def descriptors(ctx):
        for meta, prefix, payload in jobs:
            await stream_put(ctx, tx.i_hdr, {
                "dst_x": 2, "meta": meta, "payload_bytes": h + len(payload),
                "prefix": int.from_bytes(prefix, "little")}, **stall)

    payloads = payload_feeder(tx, [p for _, _, p in jobs], width, 5,
                              empty_packets=empty_packets)

    async def consumer(ctx):
        for meta, prefix, payload in jobs:
            hdr = await stream_get(ctx, rx.o_hdr, **stall)
            assert int(hdr.meta) == meta
            assert await recv_packet(ctx, rx.o_data, width, **stall) == prefix + payload
        assert ctx.get(rx.errors) == 0 and ctx.get(tx.length_errors) == 0

    simulate(m, consumer, background=[descriptors, payloads, monitor(tx.o, link)],
             timeout=50_000)
    header = NocHeader(dst_x=2, dst_fbits=0, src_fbits=0)
    assert split_messages(link) == [
        meta_message_flits(width, header, meta, bits, prefix + payload, k)
        for meta, prefix, payload in jobs]


def test_a_sender_of_its_prefix_alone_sends_header_flits_only():
    """``prefix_only``: each message is the descriptor's prefix (up to the head count, shorter
    ones zeroed past their length), in the header flit alone, one flit per cycle, and
    ``i_data`` is never taken."""
    from apiary.noc.framing import meta_message_flits
    width, bits, k = 512, 81, 37
    rng = random.Random(21)
    jobs = [(rng.getrandbits(bits), rng.randbytes(28), n) for n in (28, 1, 27, 0, 28, 28)]
    m = Module()
    m.submodules.tx = tx = MessageSender(width, meta_bits=bits, head=k, prefix_bytes=28,
                                         prefix_only=True)
    link = []

    async def bench(ctx):
        ctx.set(tx.o.ready, 1)
        ctx.set(tx.i_data.valid, 1)
        for meta, prefix, n in jobs:
            ctx.set(tx.i_hdr.payload, {"dst_x": 4, "meta": meta, "payload_bytes": n,
                                       "prefix": int.from_bytes(prefix, "little")})
            ctx.set(tx.i_hdr.valid, 1)
            assert ctx.get(tx.i_hdr.ready) == 1 and ctx.get(tx.i_data.ready) == 0
            await ctx.tick()
        ctx.set(tx.i_hdr.valid, 0)
        await ctx.tick().repeat(2)

    simulate(m, bench, background=[monitor(tx.o, link)], timeout=1_000)
    header = NocHeader(dst_x=4, dst_fbits=0, src_fbits=0)
    assert split_messages(link) == [meta_message_flits(width, header, meta, bits, prefix[:n], k)
                                    for meta, prefix, n in jobs]


def test_a_sender_with_clean_tails_sends_what_it_is_given():
    """``clean_tail`` saves the sender's own zeroing: clean payloads give the model's flits,
    and garbage past a payload's end (which a clean source never has) reaches the link,
    the proof that the masks are gone."""
    width, bits, k = 512, 81, 37
    payload = bytes(range(1, 101))
    flits = {}
    for clean in (False, True):
        m = Module()
        m.submodules.tx = tx = MessageSender(width, meta_bits=bits, head=k, clean_tail=clean)
        link = []

        async def descriptors(ctx, tx=tx):
            await stream_put(ctx, tx.i_hdr, {"dst_x": 1, "payload_bytes": len(payload)})

        async def data(ctx, tx=tx):
            for word in payload_stream(payload, width, random.Random(1)):
                await stream_put(ctx, tx.i_data, word)

        async def wait(ctx, link=link, tx=tx):
            ctx.set(tx.o.ready, 1)
            while not link or not link[-1][1]:
                await ctx.tick()

        simulate(m, wait, background=[descriptors, data, monitor(tx.o, link)], timeout=1_000)
        flits[clean] = link
    from apiary.noc.framing import meta_message_flits
    expected = meta_message_flits(width, NocHeader(dst_x=1, dst_fbits=0, src_fbits=0), 0, bits,
                                  payload, k)
    assert [(int(d), int(last)) for d, last in flits[False]] == expected
    assert flits[True][0] == expected[0] and flits[True][-1] != expected[-1]
    # Only lanes past the payload's end differ.
    nbytes = (len(payload) - k) % (width // 8)
    assert flits[True][-1][0] & ((1 << 8 * nbytes) - 1) == expected[-1][0]


def test_a_prefix_needs_one_head_count_larger_than_it():
    with pytest.raises(ValueError, match="a prefix of 37 bytes needs one head count"):
        MessageSender(512, meta_bits=81, head=37, prefix_bytes=37)
    with pytest.raises(ValueError, match="a prefix of 8 bytes needs one head count"):
        MessageSender(512, meta_bits=81, head={5: 37, 6: 20}, prefix_bytes=8)


def test_head_payload_bytes_beyond_the_room_are_refused():
    with pytest.raises(ValueError, match="room for 0 to 37 head payload bytes"):
        MessageSender(512, meta_bits=81, head=38)
    with pytest.raises(ValueError, match="room for 0 to 0 head payload bytes"):
        MessageReceiver(64, meta_bits=81, head=1)


# -- narrow lengths (the design setting max_message_bytes) -----------------------------------------

def test_length_bits_follow_the_largest_message():
    assert length_bits(64) == noc_header(64).width("payload_bytes") == 22
    assert length_bits(64, 2047) == 11
    assert length_bits(512, 2048) == 12
    for bad in (0, 1 << 22, 2.5, True):
        with pytest.raises(ValueError, match="max_message_bytes must be an integer"):
            length_bits(64, bad)


@pytest.mark.parametrize("width", WIDTHS)
def test_narrow_lengths_carry_messages_up_to_their_limit(width):
    """Sender and receiver counting in 11 bits: messages of 0 to 2,047 bytes go through
    exactly as with the full field (the same flits on the link), with stalls."""
    rng = random.Random(width + 11)
    messages = [random_message(rng, width, 1, max_bytes=60) for _ in range(6)]
    for msg, size in zip(messages, (2047, 0, 1, 2047, 1500, width // 8)):
        msg.payload = rng.randbytes(size)
    loopback(width, messages, 1, stall=dict(rng=random.Random(3), stall=0.2), length_bits=11)


@pytest.mark.parametrize("width", WIDTHS)
def test_narrow_lengths_refuse_a_longer_message(width):
    """A receiver counting in 11 bits drops a message that announces 2,048 bytes or more
    (also one whose low 11 bits are zero), counts each once, and delivers the next one."""
    rng = random.Random(width + 12)

    def msg(nbytes):
        m = random_message(rng, width, 1)
        m.payload = rng.randbytes(nbytes)
        return m

    goods = [msg(2047), msg(10), msg(0)]
    stream = [msg(2048).flits(width), goods[0].flits(width), msg(4096).flits(width),
              goods[1].flits(width), goods[2].flits(width)]
    delivered, errors = run_receiver(width, 1, stream, len(goods), length_bits=11)
    assert errors == 2
    for (fields, meta, data), good in zip(delivered, goods):
        assert fields["payload_bytes"] == len(good.payload)
        assert meta == good.meta[0]
        assert data == good.payload


@pytest.mark.parametrize("k", [9, 28, 37])
def test_a_pre_split_payload_needs_no_realignment(k):
    """``pre_split``: each payload comes as a head word (its first ``k`` bytes in the top
    lanes, as ``StreamStrip(head=k)`` sends it) and the rest from lane 0; the link carries
    exactly the model's flits, with random stalls, payloads of nothing, of less than, exactly
    and just past the head, on word boundaries, and packets that run on past a header-only
    message (Ethernet padding: discarded). A packet that ends in its head word while the
    descriptor says more (one payload flit more, or two) is padded with zeros and counted
    once, and the next message is whole."""
    from apiary.noc.framing import meta_message_flits
    width, bits = 512, 81
    nb = width // 8
    rng = random.Random(k)
    # (meta, payload_bytes, bytes on i_data, payload the link must carry)
    messages = []
    for n, extra in ([(n, 0) for n in (0, 1, k - 1, k, k + 1, nb, nb + k, 2 * nb + k, 300)]
                     + [(3, 10), (k, 1), (k - 5, nb + 3)]
                     + [(rng.randrange(200), 0) for _ in range(6)]):
        data = rng.randbytes(n + extra)
        messages.append((rng.getrandbits(bits), n, data, data[:n]))
    # Packets that end in their head word where the descriptor says 10 or 70 bytes more: one
    # payload flit of zeros (the framer's own count sees no error there) or two.
    for more in (10, 70):
        early = rng.randbytes(k - 2)
        messages.append((rng.getrandbits(bits), k + more, early, early + bytes(more + 2)))
        messages.append(messages[0])                # and the next message is whole
    m, tx, rx = linked(MessageSender(width, meta_bits=bits, head=k, pre_split=True),
                       MessageReceiver(width, meta_bits=bits, head=k))
    link = []
    stall = dict(rng=random.Random(3), stall=0.3)

    async def descriptors(ctx):
        for meta, length, _, _ in messages:
            await stream_put(ctx, tx.i_hdr, {"dst_x": 2, "meta": meta,
                                             "payload_bytes": length}, **stall)

    async def data_source(ctx):
        r = random.Random(4)
        for _, _, data, _ in messages:
            head = data[:k]
            await stream_put(ctx, tx.i_data, {
                "data": int.from_bytes(head, "little") << 8 * (nb - k),
                "nbytes": len(head), "last": int(len(data) <= k)}, **stall)
            if len(data) > k:
                await send_packet(ctx, tx.i_data, data[k:], width, rng=r, stall=0.3)

    async def consumer(ctx):
        for _, _, _, payload in messages:
            await stream_get(ctx, rx.o_hdr, **stall)
            if payload:
                assert await recv_packet(ctx, rx.o_data, width, **stall) == payload
        await ctx.tick().repeat(5)
        assert ctx.get(rx.errors) == 0 and ctx.get(tx.length_errors) == 2

    simulate(m, consumer, background=[descriptors, data_source, monitor(tx.o, link)],
             timeout=50_000)
    header = NocHeader(dst_x=2, dst_fbits=0, src_fbits=0)
    assert split_messages(link) == [meta_message_flits(width, header, meta, bits, payload, k)
                                    for meta, _, _, payload in messages]


def test_pre_split_needs_one_head_count():
    with pytest.raises(ValueError, match="pre_split needs one head count"):
        MessageSender(512, meta_bits=81, head={5: 9, 6: 20}, pre_split=True)
