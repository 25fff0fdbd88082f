"""MemSegment (beehive/apps/mem_server.py) alone: while asked, the CAP_ALLOC for the segment
(to the tile's own monitor, its size, read-write) is offered; the CAP_RESULT answering a
CAP_ALLOC is taken (``answered``, its handle kept from the next cycle), any other is ignored;
results are always taken."""

from apiary.noc.header import Fbits
from apiary.os.uapi import KernelMeta, KernelMsgType, Perm, Status
from apiary.stream.testbench import simulate
from beehive.apps.mem_server import MemSegment

X, Y, SIZE = 3, 1, 4096


def test_the_segment_is_asked_for_and_its_handle_kept():
    dut = MemSegment(64, SIZE, X, Y)

    async def tb(ctx):
        assert not ctx.get(dut.request.valid)
        ctx.set(dut.ask, 1)
        assert ctx.get(dut.request.valid)
        d = ctx.get(dut.request.payload)
        assert (d.dst_x, d.dst_y, d.dst_fbits) == (X, Y, Fbits.LOCAL0)
        assert (d.src_x, d.src_y, d.src_fbits) == (X, Y, Fbits.LOCAL0)
        assert d.msg_type == KernelMsgType.CAP_ALLOC.value
        meta = KernelMeta.unpack(ctx.get(dut.request.payload.meta))
        assert meta == KernelMeta(size=SIZE, perm=Perm.RW)
        ctx.set(dut.ask, 0)
        assert not ctx.get(dut.request.valid)
        # a CAP_RESULT answering something else: ignored
        ctx.set(dut.result.payload, {"meta": KernelMeta(op=KernelMsgType.CAP_FREE.value,
                                                        handle=9).pack()})
        ctx.set(dut.result.valid, 1)
        assert ctx.get(dut.result.ready) and not ctx.get(dut.answered)
        await ctx.tick()
        assert ctx.get(dut.handle) == 0
        # the answer to the CAP_ALLOC
        ctx.set(dut.result.payload, {"meta": KernelMeta(op=KernelMsgType.CAP_ALLOC.value,
                                                        handle=42, status=Status.OK).pack()})
        assert ctx.get(dut.answered) and ctx.get(dut.handle) == 0
        await ctx.tick()
        ctx.set(dut.result.valid, 0)
        assert not ctx.get(dut.answered)
        assert (ctx.get(dut.handle), ctx.get(dut.granted)) == (42, 1)

    simulate(dut, tb, timeout=100)
