"""The MAC edge: byte enables (``keep`` and ``last_be``) ⇄ byte counts, zero-padding, FCS errors
turned into aborted frames, and the crossing into a MAC clock domain; at 64 and 512 bits, with
seeded random stalls on both sides."""

import random

import pytest
from amaranth import ClockDomain, Module
from amaranth.lib.wiring import connect
from amaranth.sim import Simulator

from apiary.stream.layout import abort_nbytes
from apiary.stream.mac import FrameStream, MacEdge, MacOptions, MacPort, mac_word_layout
from apiary.stream.testbench import (mac_frame_words, recv_mac_frame, recv_packet,
                                     send_packet, simulate, stream_get, stream_put)

WIDTHS = [64, 512]


@pytest.mark.parametrize("enables", ["keep", "last_be"])
@pytest.mark.parametrize("width", WIDTHS)
def test_receive_counts_bytes_and_aborts_bad_frames(width, enables):
    """Frames from the MAC leave as payload-stream packets; a frame with ``error`` on any word
    ends with the abort word (the rest of its words pass as they are), the next frame is
    whole again."""
    nb = width // 8
    rng = random.Random(width)
    dut = MacEdge(width, MacOptions(byte_enables=enables))
    frames = [(rng.randbytes(n), bad, where)
              for n, bad, where in [(1, False, None), (nb, False, None), (3 * nb + 5, True, None),
                                    (nb + 1, False, None), (2 * nb + 7, True, 0),
                                    (60, False, None), (nb * 4, True, None)]]
    got = []

    async def source(ctx):
        for frame, bad, where in frames:
            for word in mac_frame_words(frame, width, enables, error=bad, error_word=where):
                await stream_put(ctx, dut.mac.rx, word, rng=rng, stall=0.3)

    async def sink(ctx):
        for _ in frames:
            words = []
            while True:
                w = await stream_get(ctx, dut.rx, rng=rng, stall=0.3)
                words.append((int(w.data), int(w.nbytes), int(w.last)))
                if w.last:
                    break
            got.append(words)

    simulate(dut, sink, background=[source], timeout=5_000)
    for (frame, bad, _), words in zip(frames, got):
        *body, (data, nbytes, _) = words
        assert all(n == nb for _, n, _ in body)
        if bad:
            assert nbytes == abort_nbytes(width)
        else:
            sent = b"".join(d.to_bytes(nb, "little") for d, _, _ in body) + \
                data.to_bytes(nb, "little")[:nbytes]
            assert sent == frame


@pytest.mark.parametrize("enables", ["keep", "last_be"])
@pytest.mark.parametrize("width", WIDTHS)
def test_transmit_gives_byte_enables(width, enables):
    """Packets from the design leave with byte enables and no error, their bytes unchanged and
    unpadded (``pad_to`` 0)."""
    nb = width // 8
    rng = random.Random(width + 1)
    frames = [rng.randbytes(n) for n in (1, 42, nb, nb + 1, 3 * nb - 1, 60, 200)]
    dut = MacEdge(width, MacOptions(byte_enables=enables))
    got = []

    async def source(ctx):
        for frame in frames:
            await send_packet(ctx, dut.tx, frame, width, rng=rng, stall=0.3)

    async def sink(ctx):
        for _ in frames:
            got.append(await recv_mac_frame(ctx, dut.mac.tx, width, enables, rng=rng, stall=0.3))

    simulate(dut, sink, background=[source], timeout=5_000)
    assert got == frames


@pytest.mark.parametrize("width", WIDTHS)
def test_transmit_pads_short_frames_with_zeros(width):
    """With ``pad_to=60`` a shorter frame leaves as 60 bytes, zeros after its own (at 64 bits
    that takes extra words, during which the design's stream waits); longer frames are
    unchanged; the lanes the design left as garbage past ``nbytes`` never leak into padding."""
    nb = width // 8
    rng = random.Random(width + 2)
    frames = [b"", b"\x01", rng.randbytes(42), rng.randbytes(59), rng.randbytes(60),
              rng.randbytes(61), rng.randbytes(7), rng.randbytes(3 * nb)]
    dut = MacEdge(width, MacOptions(pad_to=60))
    got = []

    async def source(ctx):
        for frame in frames:
            # Lanes past nbytes hold random bytes: the edge must zero them in the padding.
            await send_packet(ctx, dut.tx, frame, width, rng=rng, stall=0.2)

    async def sink(ctx):
        for _ in frames:
            got.append(await recv_mac_frame(ctx, dut.mac.tx, width, "keep", rng=rng, stall=0.3))

    simulate(dut, sink, background=[source], timeout=5_000)
    assert got == [f.ljust(60, b"\0") for f in frames]


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_crossing_into_a_mac_clock_domain(width):
    """With ``domain="mac"`` (the MAC's clock 2.7 times the design's here) frames cross both
    ways intact and in order, through the FIFOs."""
    nb = width // 8
    rng = random.Random(width + 3)
    frames = [rng.randbytes(rng.randrange(1, 5 * nb)) for _ in range(12)]
    edge = MacEdge(width, MacOptions(domain="mac"))
    m = Module()
    m.domains.sync = ClockDomain("sync")
    m.domains.mac = ClockDomain("mac")
    m.submodules.edge = edge
    received, sent = [], []

    async def wire_side(ctx):            # the MAC: frames in on rx
        for frame in frames:
            for word in mac_frame_words(frame, width):
                ctx.set(edge.mac.rx.payload, word)
                ctx.set(edge.mac.rx.valid, 1)
                await ctx.tick("mac").until(edge.mac.rx.ready)
                ctx.set(edge.mac.rx.valid, 0)

    async def wire_sink(ctx):            # the MAC: frames out on tx
        ctx.set(edge.mac.tx.ready, 1)
        for _ in frames:
            out = b""
            while True:
                w, = await ctx.tick("mac").sample(edge.mac.tx.payload).until(edge.mac.tx.valid)
                out += int(w.data).to_bytes(nb, "little")[:int(w.keep).bit_length()]
                if w.last:
                    break
            sent.append(out)

    async def design(ctx):               # the design loops what it receives back
        for _ in frames:
            frame = await recv_packet(ctx, edge.rx, width, rng=rng, stall=0.2)
            received.append(frame)
            await send_packet(ctx, edge.tx, frame, width, rng=rng, stall=0.2)

    sim = Simulator(m)
    sim.add_clock(1e-8, domain="sync")
    sim.add_clock(1e-8 / 2.7, domain="mac")
    sim.add_testbench(wire_side, background=True)
    sim.add_testbench(design)
    sim.add_testbench(wire_sink)
    sim.run_until(1e-3)
    assert received == frames and sent == frames


def test_signatures_compare_by_parameters():
    assert MacPort(64) == MacPort(64) and MacPort(64) != MacPort(64, byte_enables="last_be")
    assert MacPort(64) != MacPort(512)
    assert FrameStream(64) == FrameStream(64) and FrameStream(64) != FrameStream(128)
    layout = mac_word_layout(64, "last_be")
    assert [name for name, _ in layout] == ["data", "last_be", "last", "error"]
    assert layout.size == 64 + 8 + 2


def test_frame_stream_connects_to_a_payload_stream():
    """A FrameStream is a payload stream by its members: ``connect`` joins it to the edge."""
    edge = MacEdge(64)

    class Box:
        pass
    box = Box()
    box.mac_rx = FrameStream(64).flip().create()
    m = Module()
    connect(m, edge=edge.rx, tile=box.mac_rx)


def test_bad_options_are_readable_errors():
    with pytest.raises(ValueError, match="byte_enables must be one of keep, last_be"):
        MacOptions(byte_enables="tkeep")
    with pytest.raises(ValueError, match="domain must be None or the name of a clock domain"):
        MacOptions(domain="sync")
    with pytest.raises(ValueError, match="fifo_depth must be a power of two"):
        MacOptions(domain="mac", fifo_depth=12)
    with pytest.raises(ValueError, match="pad_to must be a number of bytes"):
        MacOptions(pad_to=-1)
