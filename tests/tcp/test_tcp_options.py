"""TcpOptions (beehive/proto/tcp/rx.py) alone: a SYN's MSS, window scale and SACK-permitted
read from its header bytes (scapy-built), one option a cycle, the scale capped at 14; a segment
without options is done at once with none, one that is no SYN gives none of the three; any
segment's SACK blocks read a block a cycle, the first beyond its ACK kept; a malformed option
ends the walk with what was found before it; ``clear`` starts over."""

import pytest
from scapy.layers.inet import TCP

from apiary.stream.testbench import simulate
from beehive.proto.tcp.header import MAX_HEADER_BYTES, MAX_WSCALE
from beehive.proto.tcp.rx import TcpOptions


def head_of(raw):
    """The header bytes as the peek shows them: byte k in bits 8k.., zero past the segment."""
    return int.from_bytes(bytes(raw)[:MAX_HEADER_BYTES].ljust(MAX_HEADER_BYTES, b"\0"), "little")


def walk(raw, sack=None, blocks=None, sacked=None):
    """``(cycles until done, mss or None, ws or None)`` for the segment ``raw``; ``sack``, a
    list, gets whether it offered SACK, ``blocks`` the SACK block taken and the blocks' last
    end (``(start, end, high)``), or None, ``sacked`` the bytes they hold beyond the ACK."""
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
        if blocks is not None:
            block = ctx.get(dut.sack)
            blocks.append((block.start, block.end, ctx.get(dut.sack_high))
                          if ctx.get(dut.sack_valid) else None)
        if sacked is not None:
            sacked.append(ctx.get(dut.sack_bytes))
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
    if "S" not in flags:       # a segment that is no SYN: its options are walked for SACK only
        assert walk(bytes(TCP(flags=flags, options=[("MSS", 1000), ("NOP", None),
                                                    ("WScale", 3)]))) == (2 + 3, None, None)


def sack_walk(ack, options):
    blocks = []
    cycles = walk(bytes(TCP(flags="A", ack=ack, options=options)), blocks=blocks)[0]
    return cycles, blocks[0]


def test_sack_blocks_are_read_one_a_cycle_and_the_first_beyond_the_ack_kept():
    """RFC 2018: up to four blocks, in any order (the most recent first); the one that starts
    first of those ending after the ACK is the first range the peer holds beyond it, the last
    end of them the highest byte it holds. A block at or below the ACK (a D-SACK, RFC 2883) is
    not one; sequence numbers wrap."""
    nops = [("NOP", None), ("NOP", None)]
    # NOP, NOP, SACK, then one cycle per block.
    assert sack_walk(1000, nops + [("SAck", (3000, 4000))]) == (2 + 3 + 1, (3000, 4000, 4000))
    assert sack_walk(1000, nops + [("SAck", (5000, 6000, 2000, 2500, 8000, 9000, 3000, 4000))]) \
        == (2 + 3 + 4, (2000, 2500, 9000))
    assert sack_walk(1000, nops + [("SAck", (500, 1000, 3000, 4000))])[1] == (3000, 4000, 4000)
    assert sack_walk(1000, nops + [("SAck", (500, 1000))])[1] is None
    wrap = 0xFFFF_FF00
    assert sack_walk(wrap, nops + [("SAck", (0x100, 0x200, wrap + 0x10, 0x50))])[1] == \
        (wrap + 0x10, 0x50, 0x200)
    # A SACK-permitted, MSS or window scale on a segment that is no SYN is not taken.
    sack = []
    assert walk(bytes(TCP(flags="A", options=[("SAckOK", b""), ("NOP", None), ("NOP", None)])),
                sack)[1:] == (None, None) and sack == [False]


def sacked_walk(ack, blocks):
    sacked, taken = [], []
    walk(bytes(TCP(flags="A", ack=ack, options=[("NOP", None), ("NOP", None),
                                                ("SAck", blocks)])), blocks=taken, sacked=sacked)
    return sacked[0], taken[0]


def test_the_bytes_sacked_beyond_the_ack_are_summed_without_a_duplicate_report():
    """RFC 6675's SACKed bytes: every block's bytes beyond the ACK (a block across it counted
    from it); a first block below the ACK, or inside the second (RFC 2883's D-SACK), is a
    report of a duplicate, not of bytes held, and the second is then the range taken."""
    assert sacked_walk(1000, (3000, 4000, 5000, 5500, 1500, 1600))[0] == 1600
    assert sacked_walk(1000, (500, 1000, 3000, 4000)) == (1000, (3000, 4000, 4000))
    assert sacked_walk(1000, (900, 1200, 3000, 3100)) == (300, (900, 1200, 3100))
    assert sacked_walk(1000, (3000, 3100, 3000, 4000, 6000, 6200)) == (1200, (3000, 4000, 6200))
    assert sacked_walk(1000, (3200, 3300, 3000, 4000)) == (1000, (3000, 4000, 4000))
    # Only the first block can be a D-SACK: a later block inside another is counted.
    assert sacked_walk(1000, (5000, 6000, 3000, 4000, 3000, 3500))[0] == 2500
    wrap = 0xFFFF_FF00
    assert sacked_walk(wrap, (wrap + 0x80, 0x80, 0x100, 0x180))[0] == 0x80 + 0x80 + 0x80


def test_a_misaligned_or_malformed_sack_option_gives_no_block():
    # Blocks that do not start on a 4-byte boundary of the header (no NOPs before the option).
    assert sack_walk(1000, [("SAck", (3000, 4000)), ("NOP", None), ("NOP", None)])[1] is None
    # A length that is no whole number of blocks, or past the header, ends the walk.
    raw = bytearray(bytes(TCP(flags="A", ack=1000, options=[("NOP", None), ("NOP", None),
                                                            ("SAck", (3000, 4000))])))
    raw[23] = 11
    blocks = []
    walk(bytes(raw), blocks=blocks)
    raw[23] = 18
    walk(bytes(raw), blocks=blocks)
    assert blocks == [None, None]


def test_a_malformed_option_ends_the_walk():
    raw = bytearray(bytes(TCP(flags="S", options=[("MSS", 1200), ("NOP", None), ("NOP", None),
                                                  ("NOP", None), ("NOP", None)])))
    raw[24] = 3                 # a window scale ...
    raw[25] = 1                 # ... whose length is under 2
    cycles, mss, ws = walk(raw)
    assert (mss, ws) == (1200, None) and cycles == 2 + 1      # the MSS, then the bad one
