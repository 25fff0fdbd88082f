"""CtlAnswers (beehive/apps/kernel_ctl.py) alone: the FAULT_ENTRY a read waits for is taken
(``answer`` in its header's cycle, ``entry`` its metadata); one that comes while nothing waits,
and any other kernel message, is counted in ``stray``; the input is always ready."""

from apiary.os.uapi import KernelMeta, KernelMsgType, Status
from apiary.stream.testbench import simulate
from beehive.apps.kernel_ctl import CtlAnswers

FAULT_ENTRY, CAP_RESULT = KernelMsgType.FAULT_ENTRY.value, KernelMsgType.CAP_RESULT.value


def test_the_awaited_answer_is_taken_and_the_rest_counted():
    dut = CtlAnswers(64)
    entry = KernelMeta(root=3, status=Status.OK, handle=7, addr=0x1234, mem_x=1, mem_y=2)
    # (msg_type, waiting): answer expected?
    steps = [(FAULT_ENTRY, 1, True), (FAULT_ENTRY, 0, False), (CAP_RESULT, 1, False),
             (CAP_RESULT, 0, False), (FAULT_ENTRY, 1, True)]

    async def tb(ctx):
        strays = 0
        for msg_type, waiting, taken in steps:
            ctx.set(dut.hdr.payload, {"msg_type": msg_type, "meta": entry.pack()})
            ctx.set(dut.hdr.valid, 1)
            ctx.set(dut.waiting, waiting)
            assert ctx.get(dut.hdr.ready) and ctx.get(dut.i.ready)
            assert ctx.get(dut.answer) == (msg_type == FAULT_ENTRY)
            if taken:
                assert KernelMeta.unpack(ctx.get(dut.entry.as_value())) == entry
            await ctx.tick()
            strays += not taken
            assert ctx.get(dut.stray) == strays
            ctx.set(dut.hdr.valid, 0)
            await ctx.tick()                # no message: nothing counted
            assert ctx.get(dut.stray) == strays
            assert not ctx.get(dut.answer)

    simulate(dut, tb, timeout=100)
