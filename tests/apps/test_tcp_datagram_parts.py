"""The components of TcpDatagramTile (beehive/apps/tcp_datagram.py), each alone in Amaranth's
simulator: the record's memory requests (_RecordMemory), the application's replies
(_Replies), the buffer of the record and its reply (_RecordBuffer), and the records' state
machine (_Records)."""

from apiary.noc.framing import MessageReceiver
from apiary.os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, MEM_META, STORE_MEM, STORE_MEM_ACK
from apiary.stream.testbench import simulate
from beehive.apps.tcp_datagram import _Records, _RecordBuffer, _RecordMemory, _Replies
from beehive.proto.messages import PACKET_META, MsgType
from beehive.proto.tcp.app import APP_META, Status
from test_tcp_echo_parts import offered, pulse
from test_tcp_steps import requests_for

WIDTH, MAX_RECORD = 64, 100


def word(data, nbytes=8, last=1):
    return {"data": data, "nbytes": nbytes, "last": last}


def test_record_memory_loads_a_length_then_a_body_and_stores():
    dut = _RecordMemory(requests_for(WIDTH), WIDTH)
    ctl, mem = dut.ctl, dut.mem

    async def bench(ctx):
        ctx.set(dut.rx_loc, {"x": 0, "y": 2})
        ctx.set(dut.tx_loc, {"x": 3, "y": 2})
        ctx.set(dut.req.ready, 1)

        async def request(store, length, addr, size):
            ctx.set(ctl.req, {"store": store, "length": length, "addr": addr, "size": size,
                              "wrap": 8})
            ctx.set(ctl.go, 1)
            got = offered(ctx, dut.req, MEM_META)
            assert ctx.get(ctl.taken)
            await ctx.tick()
            ctx.set(ctl.go, 0)
            return got[0], got[1], got[3].addr, got[3].size

        async def ack(msg_type, addr, size, payload, words=(), error=0):
            ctx.set(mem.valid, 1)
            ctx.set(mem.type, msg_type)
            ctx.set(mem.meta, {"addr": addr, "size": size, "wrap": 8, "error": error})
            ctx.set(mem.payload_bytes, payload)
            drop = ctx.get(dut.drop)
            await ctx.tick()
            ctx.set(mem.valid, 0)
            seen = []
            for w in words:
                ctx.set(dut.data.valid, 1)
                ctx.set(dut.data.payload, w)
                assert ctx.get(dut.data.ready)
                seen.append(ctx.get(dut.words.valid))
                await ctx.tick()
            ctx.set(dut.data.valid, 0)
            return drop, seen

        assert await request(0, 1, 0x100, 2) == (LOAD_MEM, 0, 0x100, 2)
        assert not ctx.get(ctl.done)
        assert await ack(LOAD_MEM_ACK, 0x100, 2, 2, [word(0x0500, 2)]) == (0, [0])
        assert ctx.get(ctl.n) == 5 and ctx.get(ctl.done) and not ctx.get(ctl.err)
        await pulse(ctx, (ctl.clear, 1))
        assert not ctx.get(ctl.done)
        assert await request(0, 0, 0x102, 5) == (LOAD_MEM, 0, 0x102, 5)
        assert await ack(LOAD_MEM_ACK, 0x102, 5, 5, [word(0x1234, 5)]) == (0, [1])
        assert ctx.get(ctl.done) and ctx.get(ctl.n) == 5
        await pulse(ctx, (ctl.clear, 1))
        assert await request(1, 0, 0x300, 2) == (STORE_MEM, 3, 0x300, 2)
        assert await ack(STORE_MEM_ACK, 0x308, 2, 0) == (1, [])       # not its ack: dropped
        assert not ctx.get(ctl.done)
        assert await ack(STORE_MEM_ACK, 0x300, 2, 0, error=1) == (0, [])
        assert ctx.get(ctl.done) and ctx.get(ctl.err)

    simulate(dut, bench, timeout=100)


def test_replies_take_the_one_awaited():
    dut = _Replies(MessageReceiver.header_layout(WIDTH, meta_bits=PACKET_META.size), WIDTH,
                   MAX_RECORD)
    ctl, hdr = dut.ctl, dut.hdr

    async def bench(ctx):
        async def reply(tag, length, msg_type=MsgType.UDP_TX_SEGMENT.value):
            ctx.set(hdr.valid, 1)
            ctx.set(hdr.payload, {"msg_type": msg_type, "payload_bytes": length,
                                  "meta": PACKET_META.layout().const(
                                      {"peer_mac": tag}).as_value().value})
            assert ctx.get(hdr.ready)
            drop = ctx.get(dut.drop)
            await ctx.tick()
            ctx.set(hdr.valid, 0)
            return drop

        ctx.set(ctl.tag, 0x10123)
        await pulse(ctx, (ctl.expect, 1))
        assert ctx.get(ctl.awaiting) and not ctx.get(ctl.got)
        assert await reply(0x10124, 3) == 1                     # another request's
        assert await reply(0x10123, 3) == 0
        assert not ctx.get(ctl.awaiting) and ctx.get(ctl.r) == 3 and not ctx.get(ctl.got)
        ctx.set(dut.data.valid, 1)
        ctx.set(dut.data.payload, word(0xABC, 3))
        assert ctx.get(dut.words.valid) and ctx.get(dut.words.payload.data) == 0xABC
        await ctx.tick()
        ctx.set(dut.data.valid, 0)
        assert ctx.get(ctl.got) and not ctx.get(ctl.bad)
        await pulse(ctx, (ctl.take, 1))
        assert not ctx.get(ctl.got)
        assert await reply(0x10123, 3) == 1                     # no longer awaited
        await pulse(ctx, (ctl.expect, 1))
        assert await reply(0x10123, MAX_RECORD + 1) == 0        # too long: got at once, bad
        assert ctx.get(ctl.got) and ctx.get(ctl.bad)
        ctx.set(dut.data.valid, 1)
        assert not ctx.get(dut.words.valid)
        ctx.set(dut.data.valid, 0)
        await pulse(ctx, (ctl.expect, 1))
        await pulse(ctx, (ctl.give_up, 1))
        assert not ctx.get(ctl.awaiting)

    simulate(dut, bench, timeout=100)


def test_record_buffer_sends_the_record_then_the_reply_with_its_length():
    dut = _RecordBuffer(WIDTH, MAX_RECORD)
    ctl = dut.ctl

    async def bench(ctx):
        for w in (word(0x11, 8, 0), word(0x22, 3)):
            await pulse(ctx, (dut.mem_words.valid, 1), (dut.mem_words.payload, w))
        assert ctx.get(ctl.valid) and not ctx.get(dut.app.valid)
        await pulse(ctx, (ctl.start_app, 1))
        ctx.set(dut.app.ready, 1)
        sent = []
        while ctx.get(ctl.to_app):
            if ctx.get(dut.app.valid):
                sent.append(ctx.get(dut.app.payload.data))
            await ctx.tick()
        assert sent == [0x11, 0x22] and not ctx.get(ctl.valid)
        await pulse(ctx, (dut.reply_words.valid, 1), (dut.reply_words.payload, word(0x33, 4)))
        ctx.set(dut.r, 0x0104)
        ctx.set(dut.store.ready, 1)
        await pulse(ctx, (ctl.start_prefix, 1), (ctl.start_store, 1))
        stored = []
        for _ in range(4):
            if ctx.get(dut.store.valid):
                stored.append((ctx.get(dut.store.payload.data), ctx.get(dut.store.payload.nbytes)))
            await ctx.tick()
        assert stored == [(0x0401, 2), (0x33, 4)] and not ctx.get(ctl.to_store)
        await pulse(ctx, (dut.mem_words.valid, 1), (dut.mem_words.payload, word(0x44)))
        ctx.set(ctl.flush, 1)
        assert ctx.get(ctl.valid)
        await ctx.tick()
        assert not ctx.get(ctl.valid)

    simulate(dut, bench, timeout=100)


def test_records_find_room_then_serve_a_record_from_its_length_to_the_next_request():
    dut = _Records(requests_for(WIDTH), flows=4, slot_bits=2, max_record=MAX_RECORD)
    mem, buf, reply = dut.mem, dut.buf, dut.reply

    async def take(ctx, hdr=dut.app_tx):
        """The engine request on offer (taken): msg_type and fields."""
        for _ in range(5):
            if ctx.get(hdr.valid):
                break
            await ctx.tick()
        _, _, _, fields = offered(ctx, hdr, APP_META.layout())
        msg = ctx.get(hdr.payload.msg_type)
        await pulse(ctx, (hdr.ready, 1))
        return msg, fields

    async def memory(ctx, store, addr, size, n=None):
        """The memory request offered, then its ack."""
        assert ctx.get(mem.go)
        req = ctx.get(mem.req)
        assert (req.store, req.addr, req.size) == (store, addr, size)
        if n is not None:
            ctx.set(mem.n, n)
        await pulse(ctx, (mem.taken, 1))
        ctx.set(mem.done, 1)
        assert ctx.get(mem.clear)
        events = ctx.get(dut.events)
        await ctx.tick()
        ctx.set(mem.done, 0)
        return events

    async def bench(ctx):
        ctx.set(dut.live, 0b0010)
        ctx.set(dut.gen_cur.data, 1)
        ctx.set(dut.timeout, 1000)
        ctx.set(dut.ctx.data, {"gen": 1, "status": Status.OK, "length": 6, "ptr": 40,
                               "addr": 0x100, "size_log2": 8})
        await pulse(ctx, (dut.ready.valid, 1), (dut.ready.payload, 1))
        await ctx.tick()                                        # CHECK; ROOM: none held
        msg, fields = await take(ctx)                           # and the flow is left
        assert (msg, fields.flow, fields.length) == (MsgType.TCP_TX_MSG_REQ.value, 0x1001,
                                                     2 + MAX_RECORD)
        for _ in range(3):
            assert not ctx.get(mem.go) and not ctx.get(dut.app_tx.valid)
            await ctx.tick()
        # The grant brings it back; ROOM takes it, then the length's load.
        ctx.set(dut.granted, 0b0010)
        ctx.set(dut.grant.data, {"ptr": 70, "addr": 0x2f0, "size_log2": 8, "length": 200})
        await pulse(ctx, (dut.ready.valid, 1), (dut.ready.payload, 1))
        await ctx.tick()                                        # CHECK
        assert ctx.get(dut.take.en) and ctx.get(dut.take.slot) == 1
        await ctx.tick()
        ctx.set(dut.granted, 0)
        await memory(ctx, 0, 0x100, 2, n=4)
        await memory(ctx, 0, 0x102, 4)                          # the body
        msg, fields = await take(ctx)
        assert (msg, fields.flow, fields.ptr) == (MsgType.TCP_RX_ADJUST_PTR.value, 0x1001, 46)
        assert ctx.get(dut.req_go) and ctx.get(reply.tag) == 0x1001 | 1 << 16
        ctx.set(dut.req_taken, 1)
        assert ctx.get(buf.start_app) and ctx.get(reply.expect)
        await ctx.tick()
        ctx.set(dut.req_taken, 0)
        ctx.set(reply.r, 3)
        await pulse(ctx, (reply.got, 1))                        # the reply: 3 bytes
        ctx.set(mem.taken, 1)
        assert ctx.get(buf.start_prefix) and ctx.get(mem.req.addr) == 0x2f0
        ctx.set(mem.taken, 0)
        await memory(ctx, 1, 0x2f0, 2)                          # the reply's length
        ctx.set(mem.taken, 1)
        assert ctx.get(buf.start_store)
        ctx.set(mem.taken, 0)
        await memory(ctx, 1, 0x2f2, 3)                          # its bytes, in the ring
        ctx.set(dut.app_tx.ready, 1)
        assert ctx.get(dut.events.records)
        ctx.set(dut.app_tx.ready, 0)
        msg, fields = await take(ctx)
        assert (msg, fields.ptr) == (MsgType.TCP_TX_ADJUST_PTR.value, 75)
        msg, fields = await take(ctx)                           # ASK: the next record
        assert (msg, fields.length) == (MsgType.TCP_RX_MSG_REQ.value, 2)
        # A record too long (the room left held: no TX_MSG_REQ): counted, the connection
        # closed (and forgotten), buf flushed.
        await pulse(ctx, (dut.ready.valid, 1), (dut.ready.payload, 1))
        await ctx.tick()                                        # CHECK
        await ctx.tick()                                        # ROOM
        assert not ctx.get(dut.take.en)
        assert (await memory(ctx, 0, 0x100, 2, n=MAX_RECORD + 1)).oversized
        await ctx.tick()
        ctx.set(dut.app_tx.ready, 1)
        assert ctx.get(dut.forget) and ctx.get(dut.app_tx.valid)
        await ctx.tick()
        ctx.set(dut.app_tx.ready, 0)
        assert ctx.get(buf.flush)

    simulate(dut, bench, timeout=200)
