"""send_words and network_bytes (apiary/stream/emit.py): a message held in a wide value goes out
a word per cycle from the cycle after ``start``, its last word cut to ``final_nbytes``, whatever
the stalls; ``start`` again sends it again from its first word."""

import random

import pytest
from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from apiary.stream.emit import network_bytes, send_words
from apiary.stream.layout import payload_signature
from apiary.stream.testbench import recv_packet, simulate


class Emitter(wiring.Component):
    def __init__(self, width, message, final_nbytes):
        self._message, self._final_nbytes = message, final_nbytes
        super().__init__({"o": Out(payload_signature(width))})
        self.start = Signal()

    def elaborate(self, platform):
        m = Module()
        message = Const(int.from_bytes(self._message, "little"), 8 * len(self._message))
        nb = len(self.o.payload.data) // 8
        words = -(-len(self._message) // nb)
        send_words(m, self.o, self.start, message, final=words - 1,
                   final_nbytes=self._final_nbytes)
        return m


@pytest.mark.parametrize("width,length", [(64, 13), (64, 16), (128, 300), (512, 36)])
def test_a_message_goes_out_whole_twice(width, length):
    rng = random.Random(length)
    message = bytes(rng.randrange(256) for _ in range(length))
    nb = width // 8
    dut = Emitter(width, message, length - (-(-length // nb) - 1) * nb)
    got = []

    async def bench(ctx):
        for _ in range(2):
            ctx.set(dut.start, 1)
            assert not ctx.get(dut.o.valid)
            await ctx.tick()
            ctx.set(dut.start, 0)
            got.append(await recv_packet(ctx, dut.o, width, rng=rng, stall=0.4))
            assert not ctx.get(dut.o.valid)

    simulate(dut, bench, timeout=5000)
    assert got == [message, message]


def test_network_bytes_are_most_significant_first():
    value = Const(0x0A0B0C, 24)
    packed = Cat(*network_bytes(value, 4))
    assert len(network_bytes(value, 4)) == 4 and len(packed) == 32
    assert Const.cast(packed).value.to_bytes(4, "little") == bytes([0, 0x0A, 0x0B, 0x0C])
