"""PaddingInserter (platforms/litex_soc/padding.py) in Migen's simulator: every frame leaves
padded with zeros to 60 bytes, or unchanged when it has them, ending on the right byte
(``last_be``), back to back and under stalls on both sides, at 8 bits (the PHY's width on the
RGMII boards) and 64."""

import random

import pytest

from migen import passive, run_simulation

from platforms.litex_soc.liteeth_ref import _words
from platforms.litex_soc.padding import PaddingInserter


def _run(frames, dw, *, write_stall, read_stall, seed):
    dut = PaddingInserter(dw)
    rng = random.Random(seed)
    n = dw // 8
    got, current = [], bytearray()

    def writer():
        for frame in frames:
            for data, last_be, last in _words(frame, dw):
                while rng.random() < write_stall:
                    yield dut.sink.valid.eq(0)
                    yield
                yield dut.sink.data.eq(data)
                yield dut.sink.last.eq(last)
                yield dut.sink.last_be.eq(last_be)
                yield dut.sink.valid.eq(1)
                yield
                while not (yield dut.sink.ready):
                    yield
        yield dut.sink.valid.eq(0)
        for _ in range(100):
            yield

    @passive
    def reader():
        while True:
            ready = rng.random() >= read_stall
            yield dut.source.ready.eq(ready)
            yield
            if ready and (yield dut.source.valid):
                data = (yield dut.source.data).to_bytes(n, "little")
                if (yield dut.source.last):
                    last_be = yield dut.source.last_be
                    assert last_be and last_be & (last_be - 1) == 0, last_be   # one byte
                    current.extend(data[:last_be.bit_length()])
                    got.append(bytes(current))
                    current.clear()
                else:
                    current.extend(data)

    run_simulation(dut, [writer(), reader()])
    return got


def _padded(frame):
    return frame.ljust(60, b"\0")


@pytest.mark.parametrize("dw", [8, 64])
@pytest.mark.parametrize("write_stall,read_stall", [(0.0, 0.0), (0.3, 0.4)])
def test_every_frame_leaves_padded_to_60_bytes(dw, write_stall, read_stall):
    """Frames of 1 to 70 bytes and then 97 (past the minimum, its last word one byte: it stays
    97, where LiteEth's own inserter at 64 bits would widen it)."""
    rng = random.Random(dw)
    lengths = list(range(1, 71)) + [97, 14, 60, 61]
    frames = [bytes(rng.randrange(1, 256) for _ in range(k)) for k in lengths]
    got = _run(frames, dw, write_stall=write_stall, read_stall=read_stall, seed=3)
    assert got == [_padded(f) for f in frames]


def test_it_passes_a_word_a_cycle_without_stalls():
    """Back to back, with no stalls: a 14-byte frame at 8 bits takes 60 cycles, and a 100-byte
    one 100: the stage adds no cycles of its own."""
    dut = PaddingInserter(8)
    taken = []

    def bench():
        yield dut.source.ready.eq(1)
        cycle = 0
        for frame in (bytes(14), bytes(100)):
            for data, last_be, last in _words(frame, 8):
                yield dut.sink.data.eq(data)
                yield dut.sink.last.eq(last)
                yield dut.sink.last_be.eq(last_be)
                yield dut.sink.valid.eq(1)
                yield
                cycle += 1
                while not (yield dut.sink.ready):
                    yield
                    cycle += 1
        yield dut.sink.valid.eq(0)
        taken.append(cycle)

    @passive
    def count():
        cycle = 0
        while True:
            yield
            cycle += 1
            if (yield dut.source.valid) and (yield dut.source.last):
                taken.append(cycle)

    run_simulation(dut, [bench(), count()])
    assert taken[:2] == [60, 160]


def test_bad_widths_are_refused():
    with pytest.raises(ValueError, match="dw must be 8, 16, 32 or 64"):
        PaddingInserter(12)
