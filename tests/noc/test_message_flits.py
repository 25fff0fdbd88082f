"""MessageFlits alone (a MessageSender's header and metadata flits): each flit by ``index``
against the Python model of the message, ``final`` on the last one, the payload word and flit
counts and the head bytes by message type."""

import random

import pytest
from amaranth.sim import Simulator

from apiary.noc.framing import DESCRIPTOR_FIELDS, MessageFlits, meta_message_flits
from apiary.noc.header import Message, NocHeader, header_flits, spare_bytes


def random_header(rng, msg_type):
    return NocHeader(dst_x=rng.randrange(256), dst_y=rng.randrange(256),
                     dst_fbits=rng.randrange(16), msg_type=msg_type, src_x=rng.randrange(256),
                     src_y=rng.randrange(256), src_fbits=rng.randrange(16))


def check(dut, width, cases):
    """``cases``: ``(descriptor, golden flits, words, out_words, head)``; each flit of the
    golden message's header and metadata flits shown by ``index``, ``final`` on the last."""
    async def tb(ctx):
        for desc, golden, words, out_words, head in cases:
            ctx.set(dut.desc, desc)
            got, n = [], 0
            while True:
                ctx.set(dut.index, n)
                got.append(ctx.get(dut.flit))
                if ctx.get(dut.final):
                    break
                n += 1
            assert got == golden
            assert (ctx.get(dut.words), ctx.get(dut.out_words)) == (words, out_words)
            if head is not None:
                assert ctx.get(dut.head) == head
    sim = Simulator(dut)            # combinational: no clock
    sim.add_testbench(tb)
    sim.run()


def desc_of(header, payload_bytes, meta=None, **extra):
    desc = {n: int(getattr(header, n)) for n in DESCRIPTOR_FIELDS}
    desc["payload_bytes"] = payload_bytes
    if meta is not None:
        desc["meta"] = meta
    return {**desc, **extra}


@pytest.mark.parametrize("width", [64, 128, 512])
def test_meta_words_and_short_meta(width):
    """Metadata as whole flits; with ``short_meta`` each message carries its own count."""
    rng = random.Random(width)
    nb = width // 8
    for short in (False, True):
        dut = MessageFlits(width, 3, short_meta=short)
        cases = []
        for _ in range(12):
            n = rng.choice([0, 1, nb, rng.randrange(5 * nb)])
            sent = rng.randrange(4) if short else 3
            meta = [rng.getrandbits(width) for _ in range(3)]
            msg = Message(random_header(rng, rng.randrange(256)), meta[:sent], bytes(n))
            golden = [d for d, _ in msg.flits(width)[:header_flits(width) + sent]]
            value = sum(w << (width * k) for k, w in enumerate(meta))
            extra = {"meta_flits": sent} if short else {}
            words = -(-n // nb)
            cases.append((desc_of(msg.header, n, value, **extra), golden, words, words, None))
        check(dut, width, cases)


@pytest.mark.parametrize("width", [64, 512])
def test_meta_bits_inline_or_in_flits(width):
    """93 bits of metadata: inline in the 512-bit header flit, in two flits at 64 bits."""
    rng = random.Random(3)
    dut = MessageFlits(width, meta_bits=93)
    cases = []
    for _ in range(12):
        n, meta = rng.randrange(300), rng.getrandbits(93)
        hdr = random_header(rng, rng.randrange(256))
        flits = meta_message_flits(width, hdr, meta, 93, bytes(n))
        golden = [d for d, _ in flits[:len(flits) - -(-n // (width // 8))]]
        words = -(-n // (width // 8))
        cases.append((desc_of(hdr, n, meta), golden, words, words, None))
    check(dut, width, cases)


def test_head_bytes_by_type_leave_their_lanes_empty():
    """At 512 bits with 40 bits of inline metadata and head bytes by type (10 for type 5, 30
    for type 7, none for others): the header flit is the model's with the head lanes zero,
    ``out_words`` counts the payload flits after the head bytes."""
    width, nb, spare = 512, 64, spare_bytes(512)
    heads = {5: 10, 7: 30}
    dut = MessageFlits(width, meta_bits=40, head=heads)
    rng = random.Random(5)
    cases = []
    for msg_type in (5, 7, 9, 5, 7, 9, 7):
        n = rng.choice([0, 3, 30, 31, 94, 200])
        k = heads.get(msg_type, 0)
        hdr = random_header(rng, msg_type)
        meta = rng.getrandbits(40)
        payload = rng.randbytes(n)
        flit, _ = meta_message_flits(width, hdr, meta, 40, payload, k)[0]
        lanes = ((1 << 8 * k) - 1) << 8 * (spare - k)
        out_words = -(-max(n - k, 0) // nb)
        cases.append((desc_of(hdr, n, meta), [flit & ~lanes], -(-n // nb), out_words, k))
    check(dut, width, cases)
