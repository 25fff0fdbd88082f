"""AgentLink (beehive/apps/controller.py) alone: a word's CTL_READ or CTL_WRITE to the agent at
its position, tagged with the link's sequence number; only the CTL_ACK from that position with
that tag and address is taken (others counted as strays, late ones too); a wait without an ack
times out after ``reply_timeout`` cycles, and the next word's tag is new."""

from apiary.control.messages import AGENT_FBITS, CTL_FORMAT, CTL_META, CtlMsgType
from apiary.noc.framing import MessageReceiver, MessageSender
from apiary.stream.testbench import simulate
from beehive.apps.controller import AgentLink

TIMEOUT = 20
ME = (3, 2, 0)


def link():
    return AgentLink(reply_timeout=TIMEOUT, src=ME,
                     descriptor=MessageSender.descriptor_layout(64, meta_bits=CTL_FORMAT.size),
                     acks=MessageReceiver.header_layout(64, meta_bits=CTL_FORMAT.size))


def ack(x, y, tag, addr, data=0, status=0, msg_type=CtlMsgType.CTL_ACK.value):
    meta = CTL_META.const({"tag": tag, "addr": addr, "data": data, "status": status})
    return {"msg_type": msg_type, "src_x": x, "src_y": y, "meta": meta.as_value().value}


async def issue(ctx, dut, **word):
    """Offer the word until its message is taken; returns the descriptor."""
    for name, value in word.items():
        ctx.set(getattr(dut.word, name), value)
    ctx.set(dut.word.offer, 1)
    ctx.set(dut.o.ready, 1)
    assert ctx.get(dut.word.issued)
    desc = ctx.get(dut.o.payload)
    await ctx.tick()
    ctx.set(dut.word.offer, 0)
    ctx.set(dut.o.ready, 0)
    ctx.set(dut.word.waiting, 1)
    return desc


async def deliver(ctx, dut, msg):
    """One message on ``acks``; whether it was the awaited ack (and its value)."""
    ctx.set(dut.acks.payload, msg)
    ctx.set(dut.acks.valid, 1)
    taken = (ctx.get(dut.word.ack), ctx.get(dut.word.value))
    await ctx.tick()
    ctx.set(dut.acks.valid, 0)
    return taken


def test_acks_are_matched_and_strays_counted():
    dut = link()

    async def bench(ctx):
        d = await issue(ctx, dut, x=4, y=1, addr=0x20, read=1)
        assert (d.dst_x, d.dst_y, d.dst_fbits) == (4, 1, AGENT_FBITS)
        assert (d.src_x, d.src_y, d.src_fbits) == ME
        assert d.msg_type == CtlMsgType.CTL_READ.value
        meta = CTL_META.from_bits(d.meta)
        assert (meta.tag, meta.addr, meta.data) == (0, 0x20, 0)
        assert (await deliver(ctx, dut, ack(4, 1, 1, 0x20)))[0] == 0       # another tag
        assert (await deliver(ctx, dut, ack(5, 1, 0, 0x20)))[0] == 0       # another agent
        assert (await deliver(ctx, dut, ack(4, 1, 0, 0x21)))[0] == 0       # another address
        assert await deliver(ctx, dut, ack(4, 1, 0, 0x20, data=0xCAFE)) == (1, 0xCAFE)
        ctx.set(dut.word.waiting, 0)
        assert (await deliver(ctx, dut, ack(4, 1, 0, 0x20)))[0] == 0       # late
        # The next word, a WRITE, has the next tag.
        d = await issue(ctx, dut, x=4, y=1, addr=0x21, read=0, data=0x1234)
        meta = CTL_META.from_bits(d.meta)
        assert d.msg_type == CtlMsgType.CTL_WRITE.value
        assert (meta.tag, meta.addr, meta.data) == (1, 0x21, 0x1234)
        assert ctx.get(dut.stray) == 4

    simulate(dut, bench, timeout=200)


def test_a_word_without_an_ack_times_out():
    dut = link()

    async def bench(ctx):
        await issue(ctx, dut, x=7, y=7, addr=0, read=1)
        waited = 0
        while not ctx.get(dut.word.timed_out):
            await ctx.tick()
            waited += 1
        assert waited == TIMEOUT
        await ctx.tick()
        ctx.set(dut.word.waiting, 0)
        # The tag moved on: the late ack is a stray, the next word is tagged 1.
        assert (await deliver(ctx, dut, ack(7, 7, 0, 0)))[0] == 0
        d = await issue(ctx, dut, x=7, y=7, addr=0, read=1)
        assert CTL_META.from_bits(d.meta).tag == 1

    simulate(dut, bench, timeout=200)
