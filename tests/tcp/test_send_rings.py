"""SendRings (beehive/proto/tcp/tx.py) alone: a CAP_NOTIFY writes its handle and the
connection's generation into the entry of the flow named in its grant, readable the next cycle;
any other message on the same input is ignored."""

from apiary.noc.framing import MessageReceiver
from apiary.os.uapi import KERNEL_META, KernelMsgType
from apiary.stream.testbench import simulate
from beehive.proto.tcp.app import SLOT_BITS
from beehive.proto.tcp.segments import GRANT_USER
from beehive.proto.tcp.tx import SendRings

HDR = MessageReceiver.header_layout(64, meta_bits=KERNEL_META.size)


def notify(msg_type, slot, gen, handle):
    user = GRANT_USER.const({"flow": slot | gen << SLOT_BITS, "kind": 1, "size_log2": 12})
    meta = KERNEL_META.const({"handle": handle, "user": user.as_value().value})
    return {"msg_type": msg_type, "meta": meta.as_value().value}


def test_notifications_fill_the_flows_entries():
    dut = SendRings(8, HDR)

    async def bench(ctx):
        assert ctx.get(dut.notify.ready)
        for msg in (notify(KernelMsgType.CAP_NOTIFY.value, 3, 2, 0x41),
                    notify(KernelMsgType.CAP_RESULT.value, 4, 1, 0x55)):
            ctx.set(dut.notify.payload, msg)
            ctx.set(dut.notify.valid, 1)
            await ctx.tick()
        ctx.set(dut.notify.valid, 0)
        ctx.set(dut.addr, 3)
        assert ctx.get(dut.ring.valid) and ctx.get(dut.ring.handle) == 0x41
        assert ctx.get(dut.ring.gen) == 2
        ctx.set(dut.addr, 4)                   # not a CAP_NOTIFY: nothing written
        assert not ctx.get(dut.ring.valid)

    simulate(dut, bench, timeout=50)
