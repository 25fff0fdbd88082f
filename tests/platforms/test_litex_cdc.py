"""RegisteredReadCrossing (platforms/litex_soc/cdc.py) in Migen's simulator: every word crosses,
in order, with its first, last and payload, whatever the two clocks and the stalls on both
sides; it keeps up with one word per read cycle; and it holds ``depth`` words (+1 in its output
register) when the reader stops."""

import random

import pytest

from migen import ClockDomain, Module, passive, run_simulation
from liteeth.common import eth_phy_description

from platforms.litex_soc.cdc import RegisteredReadCrossing


class _Harness(Module):
    def __init__(self, depth=16):
        self.clock_domains.cd_eth_tx = ClockDomain()
        self.submodules.dut = RegisteredReadCrossing(eth_phy_description(32), "sys", "eth_tx",
                                                     depth=depth)


def _words(rng, n):
    return [dict(data=rng.getrandbits(32), last_be=rng.getrandbits(4), error=rng.getrandbits(4),
                 first=rng.getrandbits(1), last=rng.getrandbits(1)) for _ in range(n)]


def _run(words, *, clocks, write_stall, read_stall, seed, read_start=0):
    h = _Harness()
    rng = random.Random(seed)
    got = []

    def writer():
        sink = h.dut.sink
        for w in words:
            while rng.random() < write_stall:
                yield
            for name, value in w.items():
                yield getattr(sink, name).eq(value)
            yield sink.valid.eq(1)
            yield
            while not (yield sink.ready):
                yield
            yield sink.valid.eq(0)
        for _ in range(200):
            yield

    @passive
    def reader():
        source = h.dut.source
        for _ in range(read_start):
            yield
        while True:
            ready = rng.random() >= read_stall
            yield source.ready.eq(ready)
            yield
            if ready and (yield source.valid):
                w = {}
                for name in ("data", "last_be", "error", "first", "last"):
                    w[name] = yield getattr(source, name)
                got.append(w)

    run_simulation(h, {"sys": [writer()], "eth_tx": [reader()]}, clocks=clocks)
    return got


@pytest.mark.parametrize("clocks,write_stall,read_stall", [
    ({"sys": 20, "eth_tx": 8}, 0.3, 0.3),       # a slow writer (50 and 125 MHz, say)
    ({"sys": 8, "eth_tx": 20}, 0.0, 0.5),       # a fast writer filling it
    ({"sys": 10, "eth_tx": 10}, 0.5, 0.1),
])
def test_every_word_crosses_in_order(clocks, write_stall, read_stall):
    words = _words(random.Random(1), 300)
    assert _run(words, clocks=clocks, write_stall=write_stall, read_stall=read_stall,
                seed=2) == words


def test_it_gives_a_word_every_read_cycle():
    """Sixteen words written while the reader waits come out one per cycle once it reads."""
    h = _Harness()
    seen = []

    def writer():
        for k in range(16):
            yield h.dut.sink.data.eq(k)
            yield h.dut.sink.valid.eq(1)
            yield
        yield h.dut.sink.valid.eq(0)

    def reader():
        for _ in range(60):
            yield
        yield h.dut.source.ready.eq(1)
        for cycle in range(40):
            yield
            if (yield h.dut.source.valid):
                seen.append((cycle, (yield h.dut.source.data)))

    run_simulation(h, {"sys": [writer()], "eth_tx": [reader()]},
                   clocks={"sys": 10, "eth_tx": 10})
    assert [d for _, d in seen] == list(range(16))
    assert seen[-1][0] - seen[0][0] == 15           # back to back


def test_it_holds_depth_words_and_one_more():
    """With the reader stopped, the writer fills 16 words of RAM and the output register and
    then waits (``sink.ready`` low)."""
    h = _Harness()
    taken = []

    def writer():
        yield h.dut.sink.valid.eq(1)
        for _ in range(100):
            yield
            if (yield h.dut.sink.ready):
                taken.append(1)

    run_simulation(h, {"sys": [writer()]}, clocks={"sys": 10, "eth_tx": 10})
    assert len(taken) == 17


def test_depth_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        RegisteredReadCrossing(eth_phy_description(32), depth=12)
