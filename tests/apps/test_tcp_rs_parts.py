"""The components of TcpRsTile (beehive/apps/tcp_rs.py), each alone in Amaranth's simulator:
the queue of the back's requests (_BackQueue), the front that loads them (_Front) and the back
that answers them (_Back)."""

from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.testbench import simulate
from beehive.apps.tcp_rs import _Back, _BackQueue, _Front
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import APP_META, Status
from test_tcp_echo_parts import offered, pulse
from test_tcp_steps import requests_for

WIDTH, REQ, ANS = 64, 64, 16


async def take(ctx, hdr):
    """The engine request on offer, taken: ``(msg_type, fields)``."""
    for _ in range(5):
        if ctx.get(hdr.valid):
            break
        await ctx.tick()
    msg, _, _, fields = offered(ctx, hdr, APP_META.layout())
    await pulse(ctx, (hdr.ready, 1))
    return msg, fields


def ack(ctx, mem, msg_type, addr, size, payload, error=0):
    """Offer a memory ack (until the caller takes it away)."""
    ctx.set(mem.valid, 1)
    ctx.set(mem.type, msg_type)
    ctx.set(mem.meta, {"addr": addr, "size": size, "wrap": 10 if size == REQ else 8,
                       "error": error})
    ctx.set(mem.payload_bytes, payload)


def test_back_queue_keeps_requests_in_order_and_looks_them_up():
    dut = _BackQueue(2)
    front, head = dut.front, dut.head

    async def bench(ctx):
        for slot, gen in ((1, 2), (2, 1)):
            await pulse(ctx, (front.push, 1), (front.job, {"slot": slot, "gen": gen}))
        assert ctx.get(head.valid) and ctx.get(head.job.slot) == 1
        ctx.set(front.slot, 1)
        ctx.set(front.gen, 2)
        assert ctx.get(front.slot_busy) and not ctx.get(front.slot_other)
        ctx.set(front.gen, 3)
        assert ctx.get(front.slot_other)
        ctx.set(front.slot, 3)
        assert not ctx.get(front.slot_busy)
        await pulse(ctx, (front.push, 1), (front.job, {"slot": 3, "gen": 1}), (head.done, 1))
        assert ctx.get(head.job.slot) == 2 and ctx.get(front.slot_busy)
        for slot in (2, 3):
            assert ctx.get(head.valid) and ctx.get(head.job.slot) == slot
            await pulse(ctx, (head.done, 1))
        assert not ctx.get(head.valid)

    simulate(dut, bench, timeout=50)


async def serve(ctx, dut, ctx_data, grant=None):
    """Give the front flow 1 from ``ready``, its response ``ctx_data`` and (if any) an unused
    ``grant``; returns after CHECK."""
    ctx.set(dut.ctx.data, ctx_data)
    ctx.set(dut.granted, 0 if grant is None else 0b0010)
    ctx.set(dut.grant.data, grant or {})
    await pulse(ctx, (dut.ready.valid, 1), (dut.ready.payload, 1))
    await ctx.tick()                                    # CHECK


def test_front_finds_room_then_loads_each_request_and_closes_on_an_error():
    dut = _Front(requests_for(WIDTH), flows=4, slot_bits=2, req=REQ, ans=ANS)
    q = dut.queue

    async def bench(ctx):
        ctx.set(dut.live, 0b0010)
        ctx.set(dut.gen_cur.data, 1)
        response = {"gen": 1, "status": Status.OK, "length": 3 * REQ, "ptr": 0, "addr": 0x100,
                    "size_log2": 10}
        await serve(ctx, dut, response)                 # three requests, no room held
        ctx.set(q.slot_other, 1)                        # SLOT: the slot's earlier connection's
        await ctx.tick()
        assert not ctx.get(dut.load_want)
        ctx.set(q.slot_other, 0)
        ctx.set(q.slot_busy, 1)                         # ROOM: its answers on their way first
        await ctx.tick()
        await ctx.tick()
        assert not ctx.get(dut.app_tx.valid) and not ctx.get(dut.load_want)
        ctx.set(q.slot_busy, 0)
        msg, fields = await take(ctx, dut.app_tx)       # TX_REQ, and the flow is left
        assert (msg, fields.flow, fields.length) == (MsgType.TCP_TX_MSG_REQ.value, 0x1001, ANS)
        for _ in range(3):
            assert not ctx.get(dut.load_want) and not ctx.get(dut.app_tx.valid)
            await ctx.tick()
        # The grant (room for two answers) brings the flow back: the same response.
        await serve(ctx, dut, response, {"ptr": 500, "addr": 0x3f8, "size_log2": 8,
                                         "length": 2 * ANS})
        await ctx.tick()                                # SLOT
        assert ctx.get(dut.take.en) and ctx.get(dut.take.slot) == 1
        await ctx.tick()
        assert ctx.get(dut.load_want) and ctx.get(dut.load.addr) == 0x100
        for k, (addr, tx_ptr, tx_addr, ask) in enumerate(((0x100, 500, 0x3f8, 0),
                                                          (0x140, 500 + ANS, 0x308, 1))):
            ctx.set(dut.pending, 3 if k else 0)        # LOAD: the encoder is behind
            await ctx.tick()
            assert ctx.get(dut.load.addr) == addr and ctx.get(dut.load_want) == (k == 0)
            ctx.set(dut.pending, 2)
            assert ctx.get(dut.load_want)
            await pulse(ctx, (dut.load_sent, 1))
            ack(ctx, dut.mem, LOAD_MEM_ACK, addr, REQ, REQ)
            assert ctx.get(dut.loaded) and ctx.get(q.push) and ctx.get(dut.start_enc)
            job = ctx.get(q.job)
            # the second answer takes the last of the room: the back asks for the rest
            assert (job.slot, job.gen, job.rx_ptr, job.ask) == (1, 1, k * REQ, ask)
            assert (job.tx_ptr, job.tx_addr, job.tx_wrap) == (tx_ptr, tx_addr, 8)
            await ctx.tick()
            ctx.set(dut.mem.valid, 0)
            if k == 0:
                ctx.set(dut.to_enc, 1)                  # NEXT: its words first
                await ctx.tick()
                assert not ctx.get(dut.load_want)
                ctx.set(dut.to_enc, 0)
        await ctx.tick()
        assert not ctx.get(dut.load_want) and not ctx.get(dut.app_tx.valid)     # IDLE
        # The rest of the response, room again, and a load that fails: the flow is closed.
        await serve(ctx, dut, {**response, "length": REQ, "ptr": 2 * REQ, "addr": 0x180},
                    {"ptr": 500 + 2 * ANS, "addr": 0x318, "size_log2": 8, "length": 4 * ANS})
        await ctx.tick()                                # SLOT
        await ctx.tick()                                # ROOM: the grant
        await ctx.tick()
        assert ctx.get(dut.load_want) and ctx.get(dut.load.addr) == 0x180
        await pulse(ctx, (dut.load_sent, 1))
        ack(ctx, dut.mem, LOAD_MEM_ACK, 0x180, REQ, 0, error=1)
        assert ctx.get(dut.mem_error) and not ctx.get(q.push)
        await ctx.tick()
        ctx.set(dut.mem.valid, 0)
        ctx.set(q.slot_busy, 1)                         # CLOSING: its answers out first
        await ctx.tick()
        assert not ctx.get(dut.app_tx.valid)
        ctx.set(q.slot_busy, 0)
        await ctx.tick()
        ctx.set(dut.app_tx.ready, 1)
        assert ctx.get(dut.forget)
        msg, fields = await take(ctx, dut.app_tx)
        assert (msg, fields.flow) == (MsgType.TCP_CLOSE_REQ.value, 0x1001)

    simulate(dut, bench, timeout=200)


def test_back_answers_in_order_where_the_front_found_room():
    dut = _Back(requests_for(WIDTH), flows=4, slot_bits=2, req=REQ, ans=ANS)
    q = dut.queue

    async def bench(ctx):
        ctx.set(dut.live, 0b0010)
        ctx.set(dut.gen_cur.data, 2)
        ctx.set(dut.tx_loc.data, {"x": 3, "y": 2})
        ctx.set(q.job, {"slot": 1, "gen": 2, "rx_ptr": 100, "ask": 1, "tx_ptr": 500,
                        "tx_addr": 0x300, "tx_wrap": 8})
        ctx.set(q.valid, 1)
        for _ in range(3):                              # ENCODED: nothing before the parity
            await ctx.tick()
            assert not ctx.get(dut.app_tx.valid) and not ctx.get(dut.store_want)
        ctx.set(dut.parity_valid, 1)
        assert ctx.get(dut.handle) == 0x2001
        msg, fields = await take(ctx, dut.app_tx)
        assert (msg, fields.ptr) == (MsgType.TCP_RX_ADJUST_PTR.value, 100 + REQ)
        msg, fields = await take(ctx, dut.app_tx)
        assert (msg, fields.length) == (MsgType.TCP_RX_MSG_REQ.value, REQ)
        tx = ctx.get(dut.tx)
        assert ctx.get(dut.store_want) and (tx.addr, tx.wrap, tx.loc.x) == (0x300, 8, 3)
        await pulse(ctx, (dut.store_issue, 1))
        ack(ctx, dut.mem, STORE_MEM_ACK, 0x300, ANS, 0)
        assert ctx.get(dut.stored)
        await ctx.tick()
        ctx.set(dut.mem.valid, 0)
        await ctx.tick()
        ctx.set(dut.app_tx.ready, 1)
        assert ctx.get(q.done) and ctx.get(dut.answered)
        msg, fields = await take(ctx, dut.app_tx)
        assert (msg, fields.ptr) == (MsgType.TCP_TX_ADJUST_PTR.value, 500 + ANS)
        # The next request's connection ends: its parity goes away.
        await ctx.tick()                                # IDLE -> ENCODED
        ctx.set(dut.parity_valid, 0)
        ctx.set(dut.app.slot, 1)
        await pulse(ctx, (dut.kill, 1))
        assert not ctx.get(dut.app_tx.valid)
        ctx.set(dut.parity_valid, 1)
        assert ctx.get(dut.drain)
        await ctx.tick()
        ctx.set(dut.draining, 1)
        await ctx.tick()
        assert not ctx.get(q.done)
        ctx.set(dut.draining, 0)
        assert ctx.get(q.done)

    simulate(dut, bench, timeout=100)
