"""TcpOptions (beehive/proto/tcp/rx.py) alone: a SYN's MSS, window scale and SACK-permitted
read from its header bytes (scapy-built), one option a cycle, the scale capped at 14; a segment
that is no SYN is done at once with none; a malformed option ends the walk with what was found
before it; ``clear`` starts over."""

import pytest
from scapy.layers.inet import TCP

from apiary.stream.testbench import simulate
from beehive.proto.tcp.header import MAX_HEADER_BYTES, MAX_WSCALE
from beehive.proto.tcp.rx import TcpOptions


def head_of(raw):
    """The header bytes as the peek shows them: byte k in bits 8k.., zero past the segment."""
    return int.from_bytes(bytes(raw)[:MAX_HEADER_BYTES].ljust(MAX_HEADER_BYTES, b"\0"), "little")


def walk(raw, sack=None):
    """``(cycles until done, mss or None, ws or None)`` for the segment ``raw``; ``sack``, a
    list, gets whether it offered SACK."""
    dut = TcpOptions()
    result = []

    async def bench(ctx):
        ctx.set(dut.head, head_of(raw))
        ctx.set(dut.head_valid, 1)
        cycles = 0
        while not ctx.get(dut.done):
            await ctx.tick()
            cycles += 1
        result.extend([cycles, ctx.get(dut.mss) if ctx.get(dut.has_mss) else None,
                       ctx.get(dut.ws) if ctx.get(dut.has_ws) else None])
        if sack is not None:
            sack.append(bool(ctx.get(dut.has_sack)))
        # The verdict clears it; the next segment's walk starts over.
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        assert not ctx.get(dut.done)

    simulate(dut, bench, timeout=200)
    return tuple(result)


def test_a_syn_walks_its_options_one_a_cycle():
    raw = bytes(TCP(flags="S", options=[("MSS", 1400), ("NOP", None), ("WScale", 9)]))
    sack = []
    assert walk(raw, sack) == (2 + 3, 1400, 9) and sack == [False]
    # SACK-permitted is taken, timestamps are skipped; the scale is capped.
    raw = bytes(TCP(flags="S", options=[("MSS", 536), ("SAckOK", b""), ("Timestamp", (1, 0)),
                                        ("NOP", None), ("WScale", 15)]))
    assert walk(raw, sack)[1:] == (536, MAX_WSCALE) and sack == [False, True]
    # A SACK-permitted of another length is not one.
    raw = bytearray(bytes(TCP(flags="S", options=[("SAckOK", b""), ("NOP", None),
                                                  ("NOP", None)])))
    raw[21] = 3
    assert walk(raw, sack)[1:] == (None, None) and sack[-1] is False


@pytest.mark.parametrize("flags", ["A", "SA", "PA"])
def test_only_a_syn_with_options_is_walked(flags):
    plain = bytes(TCP(flags=flags))
    sack = []
    assert walk(plain, sack) == (1, None, None) and sack == [False]
    if "S" not in flags:       # options on a segment that is no SYN are not read
        assert walk(bytes(TCP(flags=flags, options=[("MSS", 1000)]))) == (1, None, None)


def test_a_malformed_option_ends_the_walk():
    raw = bytearray(bytes(TCP(flags="S", options=[("MSS", 1200), ("NOP", None), ("NOP", None),
                                                  ("NOP", None), ("NOP", None)])))
    raw[24] = 3                 # a window scale ...
    raw[25] = 1                 # ... whose length is under 2
    cycles, mss, ws = walk(raw)
    assert (mss, ws) == (1200, None) and cycles == 2 + 1      # the MSS, then the bad one
