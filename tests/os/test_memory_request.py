"""MemRequest alone (the memory tile's request decoder and register): what it makes of the
request on offer (type, errors, word range) and the ack descriptor it holds once taken."""

import pytest

from apiary.noc.header import Fbits
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK, MemRequest,
                                   mem_meta, unpack_mem_meta)
from apiary.stream.testbench import simulate


SIZE = 4096


def header(msg_type, addr, size, *, wrap=0, tag=0, payload_bytes=0, src=(3, 4, 1)):
    return {"msg_type": msg_type, "payload_bytes": payload_bytes, "src_x": src[0],
            "src_y": src[1], "src_fbits": src[2],
            "meta": mem_meta(addr, size, wrap=wrap, tag=tag)}


@pytest.mark.parametrize("width", [64, 512])
def test_decodes_the_request_on_offer(width):
    """``(header, flags, first word, words, off, tail)`` for loads and stores, good and bad."""
    nb = width // 8
    aw = (SIZE // nb - 1).bit_length()
    dut = MemRequest(width, size_bytes=SIZE, addr_width=aw, src=(1, 0))
    flags = ("is_load", "is_store", "bad_wrap", "out_of_range", "bad_length", "error", "reads")
    cases = [
        # a load of 20 bytes at 13: words 1 and 2 (64 bits), tail (13 + 20) % 8 = 1
        (header(LOAD_MEM, 13, 20), dict(is_load=1, reads=1)),
        (header(LOAD_MEM, 100, 0), dict(is_load=1)),                         # nothing to read
        (header(STORE_MEM, 8, 30, payload_bytes=30), dict(is_store=1, reads=1)),
        (header(STORE_MEM, 8, 30, payload_bytes=29), dict(is_store=1, bad_length=1, error=1)),
        (header(LOAD_MEM, SIZE - 4, 5), dict(is_load=1, out_of_range=1, error=1)),
        (header(LOAD_MEM, 70, 60, wrap=6), dict(is_load=1, reads=1)),        # a 64-byte ring
        (header(LOAD_MEM, 70, 65, wrap=6), dict(is_load=1, bad_wrap=1, error=1)),
        (header(LOAD_MEM, 0, 8, wrap=2), dict(is_load=1, bad_wrap=1, error=1)),  # below a word
        (header(12, 0, 8), dict(reads=1)),                # reads: no error, size > 0
    ]

    async def tb(ctx):
        for hdr, want in cases:
            ctx.set(dut.hdr, hdr)
            await ctx.tick()
            assert {f: ctx.get(getattr(dut, f)) for f in flags} == {f: want.get(f, 0)
                                                                    for f in flags}
            meta = unpack_mem_meta(hdr["meta"])
            addr, size = meta["addr"], meta["size"]
            assert ctx.get(dut.first_word) == (addr // nb) % (1 << aw)
            assert ctx.get(dut.words) == -(-(addr % nb + size) // nb)

    simulate(dut, tb, timeout=100)


def test_holds_the_request_taken_and_its_ack():
    """On ``take``: ``wmask``, ``off`` and ``tail`` of the request, and the ack's descriptor
    (to its source, from ``src``, its type's ack, its metadata with ``error``; a payload of
    ``size`` bytes only with ``with_data``)."""
    width, nb = 64, 8
    dut = MemRequest(width, size_bytes=SIZE, addr_width=9, src=(5, 6))

    async def tb(ctx):
        ctx.set(dut.hdr, header(LOAD_MEM, 70, 60, wrap=6, tag=0xAB, src=(2, 3, Fbits.LOCAL1)))
        ctx.set(dut.take, 1)
        await ctx.tick()
        ctx.set(dut.take, 0)
        ctx.set(dut.hdr, header(STORE_MEM, 0, 1, payload_bytes=2))       # not taken
        await ctx.tick()
        assert (ctx.get(dut.wmask), ctx.get(dut.off), ctx.get(dut.tail)) == (
            0b111, 70 % nb, (70 % nb + 60) % nb or nb)
        ack = ctx.get(dut.ack)
        assert (ack.dst_x, ack.dst_y, ack.dst_fbits, ack.src_x, ack.src_y, ack.src_fbits,
                ack.msg_type, ack.payload_bytes) == (2, 3, Fbits.LOCAL1, 5, 6, Fbits.LOCAL0,
                                                     LOAD_MEM_ACK, 0)
        assert unpack_mem_meta(int(ack.meta)) == {"addr": 70, "size": 60, "error": 0,
                                                  "wrap": 6, "tag": 0xAB}
        ctx.set(dut.with_data, 1)
        assert ctx.get(dut.ack.payload_bytes) == 60
        ctx.set(dut.take, 1)                                            # the bad store
        await ctx.tick()
        ack = ctx.get(dut.ack)
        assert ack.msg_type == STORE_MEM_ACK
        assert unpack_mem_meta(int(ack.meta))["error"] == 1

    simulate(dut, tb, timeout=100)
