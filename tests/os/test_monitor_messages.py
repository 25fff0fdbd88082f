"""What a monitor reads and sends (apiary/os/monitor_messages.py), alone: HeadFormat's views of
a gate's head and back, and the flits it needs; RequestSender's messages, flit for flit, with
their latency and one request held at a time; merge_requests."""

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.lib import stream
from amaranth.sim import Simulator

from apiary.noc.header import Fbits
from apiary.noc.testbench import recv_flits
from apiary.os.memory_tile import LOAD_MEM, mem_message_flits
from apiary.os.monitor_messages import (REQUEST, HeadFormat, RequestSender, merge_requests,
                                        request, spare_lanes)
from apiary.os.uapi import KERNEL_META, KernelMeta, KernelMsgType as K, \
    decode_kernel_message, kernel_message_flits
from apiary.stream.testbench import simulate


WIDTHS = [64, 512]


def run_comb(dut, tb):
    """Run testbench ``tb`` on the combinational ``dut`` (no clock)."""
    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


def head_of(flits, width):
    """A gate's ``head`` holding the first flits of a message (flit j in bits j * width ..)."""
    n = HeadFormat(width).max_head
    return sum(data << (j * width) for j, (data, _) in enumerate(flits[:n]))


class Views(Elaboratable):
    """A head's fields through HeadFormat, its value turned back into flits, and ``need``."""

    def __init__(self, width):
        self.fmt = fmt = HeadFormat(width)
        self.head = Signal(width * fmt.max_head)
        self.first = Signal(width)
        self.msg_type, self.src_x, self.addr, self.km_root = (Signal(8), Signal(8), Signal(48),
                                                              Signal(16))
        self.back = Signal(width * fmt.max_head)
        self.need = Signal(range(fmt.max_head + 1))

    def elaborate(self, platform):
        m = Module()
        value, hdr, mm, km = self.fmt.views(self.head)
        m.d.comb += [self.msg_type.eq(hdr.msg_type), self.src_x.eq(hdr.src_x),
                     self.addr.eq(mm.addr), self.km_root.eq(km.root),
                     self.back.eq(self.fmt.flits_of(value)),
                     self.need.eq(self.fmt.need(self.first, (LOAD_MEM,), (K.CAP_FREE,)))]
        return m


@pytest.mark.parametrize("width", WIDTHS)
def test_head_views_and_back(width):
    dut = Views(width)
    fmt = dut.fmt
    mem = mem_message_flits(width, LOAD_MEM, 0x1234_5678, 64, src=(5, 6), dst=(1, 2))
    kern = kernel_message_flits(width, K.CAP_FREE, KernelMeta(root=0xbeef), src=(3, 4))
    other = kernel_message_flits(width, K.FAULT, KernelMeta(), src=(3, 4))
    assert fmt.mem_flits == len(mem) and fmt.kernel_flits == len(kern)

    async def tb(ctx):
        ctx.set(dut.head, head_of(mem, width))
        ctx.set(dut.first, mem[0][0])
        assert (ctx.get(dut.msg_type), ctx.get(dut.src_x)) == (LOAD_MEM, 5)
        assert ctx.get(dut.addr) == 0x1234_5678
        assert ctx.get(dut.back) == head_of(mem, width)
        assert ctx.get(dut.need) == fmt.mem_flits
        ctx.set(dut.head, head_of(kern, width))
        ctx.set(dut.first, kern[0][0])
        assert ctx.get(dut.msg_type) == K.CAP_FREE.value and ctx.get(dut.km_root) == 0xbeef
        assert ctx.get(dut.back) == head_of(kern, width)
        assert ctx.get(dut.need) == fmt.kernel_flits
        ctx.set(dut.first, other[0][0])
        assert ctx.get(dut.need) == fmt.header_flits

    run_comb(dut, tb)


@pytest.mark.parametrize("width", WIDTHS)
def test_request_sender_sends_one_message_per_request(width):
    dut = RequestSender(width, 1, 2)
    asks = [(K.CAP_RESULT, (1, 1, Fbits.LOCAL0), dict(status=2, handle=9, user=7)),
            (K.MM_FREE, (3, 0, Fbits.LOCAL1), dict(root=0x1234)),
            (K.FAULT, (3, 1, Fbits.LOCAL0), dict(op=4, addr=0xabc, peer_x=2))]
    taken, firsts = [], []

    async def source(ctx):
        cycle = 0
        for msg_type, dst, meta in asks:
            ctx.set(dut.i.payload, {"msg_type": msg_type.value, "dst_x": dst[0],
                                    "dst_y": dst[1], "dst_fbits": dst[2]})
            ctx.set(dut.i.payload.meta.as_value(), KernelMeta(**meta).pack())
            ctx.set(dut.i.valid, 1)
            while True:
                _, _, ready = await ctx.tick().sample(dut.i.ready)
                cycle += 1
                if ready:
                    break
            ctx.set(dut.i.valid, 0)
            taken.append(cycle)

    async def watch(ctx):
        cycle, at_first = 0, True
        async for _, _, valid, ready, payload in ctx.tick().sample(dut.o.valid, dut.o.ready,
                                                                   dut.o.payload):
            cycle += 1
            if valid and ready:
                if at_first:
                    firsts.append(cycle)
                at_first = bool(payload.last)

    async def sink(ctx):
        for msg_type, dst, meta in asks:
            flits = await recv_flits(ctx, dut.o)
            header, got = decode_kernel_message(flits, width)
            assert (header.msg_type, header.dst_x, header.dst_y, header.dst_fbits) == \
                (msg_type.value, *dst)
            assert (header.src_x, header.src_y, header.src_fbits) == (1, 2, Fbits.LOCAL0)
            assert got == KernelMeta(**meta)

    simulate(dut, sink, background=[source, watch], timeout=200)
    # The first flit leaves the cycle after its request was taken; the next request waits for
    # the message's last flit.
    assert [f - t for t, f in zip(taken, firsts)] == [1, 1, 1]
    nflits = len(kernel_message_flits(width, K.FAULT, KernelMeta()))
    assert [b - a for a, b in zip(taken, taken[1:])] == [nflits + 1] * 2


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_spare_lanes_carry_nothing_a_kernel_message_holds(width):
    """Where a kernel message is one flit (512 bits), its spare lanes are those neither its
    header nor its metadata use: whatever they hold, it decodes the same (the monitor's
    merges let them show the tile's or the NoC's flit)."""
    lanes = spare_lanes(width)
    if width < 512:
        assert lanes is None                # two flits or more: no lanes to spare
        return
    assert lanes == (192, 384)
    full = KernelMeta(**{name: (1 << field.width) - 1 for name, field in KERNEL_META})
    (data, last), = kernel_message_flits(width, K.MM_DERIVE, full)
    lo, hi = lanes
    spare = ((1 << (hi - lo)) - 1) << lo
    assert data & spare == 0                # nothing of the message is there
    assert decode_kernel_message([(data | spare, last)], width) == \
        decode_kernel_message([(data, last)], width)


class Merged(Elaboratable):
    def __init__(self):
        self.a = stream.Signature(REQUEST).create()
        self.b = stream.Signature(REQUEST).create()
        self.out = stream.Signature(REQUEST).flip().create()
        self.offer_a, self.offer_b = Signal(), Signal()

    def elaborate(self, platform):
        m = Module()
        with m.If(self.offer_a):
            m.d.comb += request(self.a, K.MM_FREE, (3, 0, 0), root=5)
        with m.If(self.offer_b):
            m.d.comb += request(self.b, K.FAULT, (3, 1, 0), op=2)
        merge_requests(m, self.out, self.a, self.b)
        return m


def test_merge_requests_takes_the_valid_one():
    dut = Merged()

    async def tb(ctx):
        ctx.set(dut.out.ready, 1)
        assert ctx.get(dut.out.valid) == 0
        ctx.set(dut.offer_a, 1)
        assert ctx.get(dut.out.valid) == 1 and ctx.get(dut.out.payload.msg_type) == K.MM_FREE.value
        assert ctx.get(dut.out.payload.meta.root) == 5 and ctx.get(dut.a.ready) == 1
        ctx.set(dut.offer_a, 0)
        ctx.set(dut.offer_b, 1)
        assert ctx.get(dut.out.payload.msg_type) == K.FAULT.value
        assert ctx.get(dut.out.payload.meta.root) == 0 and ctx.get(dut.out.payload.meta.op) == 2
        ctx.set(dut.out.ready, 0)
        assert ctx.get(dut.a.ready) == 0 and ctx.get(dut.b.ready) == 0

    run_comb(dut, tb)

