"""ReplySender (beehive/apps/controller.py) alone, at 64 and 512 bits, over a slot memory the
test fills: ``start`` offers the reply's UDP_TX_SEGMENT descriptor (the request's metadata, the
UDP sum of the reply's bytes, 8 + 4 n bytes) and streams its rows from the slot, the first with
the reply's header in front, under random stalls; ``done`` pulses with the last row; a request
that came over TCP is answered on the TCP route."""

import random
import struct

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib.memory import Memory

from apiary.noc.framing import MessageSender
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import recv_packet, simulate, stream_get
from beehive.apps.controller import HEADER_BYTES, ReplySender, SlotGeometry
from beehive.proto.messages import PACKET_META, MsgType

UDP, TCP = (2, 1, 0), (1, 3, 2)


class Slot(Elaboratable):
    """The sender over one slot's rows, read as the engine reads them for it."""

    def __init__(self, width, rows):
        self.geometry = SlotGeometry(width, 1)
        self.dut = ReplySender(self.geometry, src=(3, 2, 0), dst=UDP, tcp_dst=TCP,
                               descriptor=MessageSender.descriptor_layout(
                                   width, meta_bits=PACKET_META.size))
        self.mem = Memory(shape=width, depth=1 << self.geometry.row_bits, init=rows)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut, m.submodules.mem = self.dut, self.mem
        rd = self.mem.read_port()
        m.d.comb += [rd.addr.eq(self.dut.engine.fetch_row), rd.en.eq(self.dut.engine.fetch),
                     self.dut.row.eq(rd.data)]
        return m


@pytest.mark.parametrize("width,words,protocol", [(64, 5, 17), (512, 20, 6), (64, 0, 17)])
def test_a_reply_streams_from_its_slot(width, words, protocol):
    rng = random.Random(width + words)
    request = bytes([1, 9, 4, 1, 0, 0x20, words, 0])
    values = [rng.getrandbits(32) for _ in range(words)]
    body = request + b"".join(struct.pack("!I", v) for v in values)
    nb = width // 8
    rows = [int.from_bytes(body[k:k + nb].ljust(nb, b"\0"), "little")
            for k in range(0, len(body), nb)]
    top = Slot(width, rows)
    dut = top.dut
    status = 0
    expect = request[:HEADER_BYTES - 1] + bytes([status]) + body[HEADER_BYTES:]
    got = {}

    async def engine(ctx):
        e = dut.engine
        ctx.set(e.request, int.from_bytes(request[:HEADER_BYTES - 1], "little"))
        ctx.set(e.status, status)
        ctx.set(e.meta, {"peer_ip": 0x0A00_0001, "protocol": protocol})
        ctx.set(e.total, sum(v >> 16 for v in values) + sum(v & 0xFFFF for v in values))
        ctx.set(e.start, 1)
        ctx.set(e.words, words)
        await ctx.tick()
        ctx.set(e.start, 0)
        await ctx.tick().until(e.done)
        got["done"] = True

    async def sender(ctx):
        d = await stream_get(ctx, dut.o_hdr, rng=rng, stall=0.3)
        meta = PACKET_META.unpack(int(d.meta))
        got["desc"] = ((d.dst_x, d.dst_y, d.dst_fbits), d.msg_type, d.payload_bytes,
                       meta["peer_ip"], meta["l4_sum"], meta["l4_sum_valid"])
        got["data"] = await recv_packet(ctx, dut.o_data, width, rng=rng, stall=0.3)

    simulate(top, engine, sender, timeout=1000)
    assert got["data"][:len(expect)] == expect and len(got["data"]) == -(-len(expect) // nb) * nb
    assert got["desc"] == ((TCP if protocol == 6 else UDP), MsgType.UDP_TX_SEGMENT.value,
                           len(expect), 0x0A00_0001, ones_complement_sum(expect), 1)
    assert got["done"]
