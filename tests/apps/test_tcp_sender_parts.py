"""The components of TcpSenderTile (beehive/apps/tcp_sender.py), each alone in Amaranth's
simulator: the stream's words (_Stream), the connection as the engine reports it
(_Connection) and the sequence of opens, chunks and the close (_Steps)."""

from apiary.os.memory_tile import MEM_META, STORE_MEM, STORE_MEM_ACK
from apiary.stream.testbench import simulate
from beehive.apps.tcp_sender import _Connection, _Stream, _Steps, stream_bytes
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import APP_META, BufferKind, Status
from test_tcp_echo_parts import offered, pulse
from test_tcp_steps import requests_for

WIDTH = 64
PEER = (0x0A000001, 80, 40000)
PEER_FIELDS = {"peer_ip": PEER[0], "peer_port": PEER[1], "local_port": PEER[2]}


def test_stream_words_carry_the_byte_sequence():
    dut = _Stream(300, WIDTH)

    async def bench(ctx):
        got = b""
        ctx.set(dut.o.ready, 1)
        for size, words, tail in ((11, 2, 3), (256, 32, 8), (1, 1, 1)):   # past 251
            assert not ctx.get(dut.o.valid)
            await pulse(ctx, (dut.ctl.start, 1), (dut.ctl.size, size), (dut.ctl.words, words),
                        (dut.ctl.tail, tail))
            assert ctx.get(dut.ctl.n) == size
            for k in range(words):
                payload = ctx.get(dut.o.payload)
                assert ctx.get(dut.o.valid) and payload.last == (k == words - 1)
                got += payload.data.to_bytes(8, "little")[:payload.nbytes]
                await ctx.tick()
        assert got == stream_bytes(11 + 256 + 1)

    simulate(dut, bench, timeout=100)


def test_connection_follows_its_open_and_its_flow():
    dut = _Connection(2, PEER)
    ctl, a = dut.ctl, dut.app

    async def message(msg_type, status=Status.OK, ok=1, **meta):
        ctx = message.ctx
        ctx.set(a.valid, 1)
        ctx.set(a.type, msg_type.value)
        ctx.set(a.ok, ok)
        ctx.set(a.meta, {"status": status, **meta})
        seen = {name: ctx.get(getattr(dut, name)) for name in ("failed", "ended_in", "drop")}
        await ctx.tick()
        ctx.set(a.valid, 0)
        return {name: value for name, value in seen.items() if value}

    async def bench(ctx):
        message.ctx = ctx
        new = MsgType.TCP_NEW_FLOW_NOTIF
        assert await message(new, kind=BufferKind.RECEIVE, **PEER_FIELDS) == {"drop": 1}
        await pulse(ctx, (ctl.open, 1))
        assert await message(new, status=Status.BUSY, **PEER_FIELDS) == {"failed": 1}
        assert ctx.get(ctl.open_failed)
        await pulse(ctx, (ctl.open, 1))
        assert not ctx.get(ctl.open_failed)
        assert await message(new, kind=BufferKind.RECEIVE, flow=0x1002, **PEER_FIELDS) == {}
        assert await message(new, kind=BufferKind.SEND, flow=0x1002, mem_x=3,
                             **{**PEER_FIELDS, "peer_port": 81}) == {"drop": 1}
        assert await message(new, kind=BufferKind.SEND, flow=0x1002, mem_x=3,
                             **PEER_FIELDS) == {}
        assert ctx.get(ctl.got_tx) and ctx.get(ctl.handle) == 0x1002
        assert ctx.get(ctl.tx_loc.x) == 3
        tx_resp = MsgType.TCP_TX_MSG_RESP
        assert await message(tx_resp, flow=0x1002, ptr=9) == {"drop": 1}     # not asked
        await pulse(ctx, (ctl.ask, 1))
        assert await message(tx_resp, flow=0x1002, ptr=9, addr=0x40) == {}
        assert ctx.get(ctl.tx_got) and ctx.get(ctl.tx.addr) == 0x40
        await pulse(ctx, (ctl.take, 1))
        assert not ctx.get(ctl.tx_got)
        rx_resp = MsgType.TCP_RX_MSG_RESP
        assert await message(rx_resp, flow=0x1002, status=Status.RESET, ok=0) == {
            "ended_in": 1}
        assert ctx.get(ctl.ended)
        assert await message(rx_resp, flow=0x1002, status=Status.RESET, ok=0) == {"drop": 1}

    simulate(dut, bench, timeout=100)


def test_steps_open_retry_send_a_chunk_and_close():
    dut = _Steps(requests_for(WIDTH), width=WIDTH, chunk=100, peer=PEER, length=100, start=2,
                 retry=3, attempts=2)
    conn, ev = dut.conn, dut.events

    async def take(ctx, hdr, layout):
        for _ in range(10):
            if ctx.get(hdr.valid):
                break
            await ctx.tick()
        msg, _, _, fields = offered(ctx, hdr, layout)
        ctx.set(hdr.ready, 1)
        seen = (ctx.get(ev), ctx.get(conn.open), ctx.get(conn.ask), ctx.get(dut.bytes))
        await ctx.tick()
        ctx.set(hdr.ready, 0)
        return msg, fields, seen

    async def bench(ctx):
        app_meta = APP_META.layout()
        msg, fields, (events, opened, _, _) = await take(ctx, dut.app_tx, app_meta)
        assert (msg, fields.peer_ip, fields.local_port) == (MsgType.TCP_OPEN_REQ.value,
                                                           *PEER[::2])
        assert events.opens and opened
        await pulse(ctx, (conn.open_failed, 1))           # RETRY, then the second open
        msg, _, (events, opened, _, _) = await take(ctx, dut.app_tx, app_meta)
        assert msg == MsgType.TCP_OPEN_REQ.value and opened
        ctx.set(conn.handle, 0x1002)
        ctx.set(conn.got_tx, 1)
        assert ctx.get(ev.opened)
        await ctx.tick()                                  # NEXT: the chunk's words queued
        assert ctx.get(dut.stream.start) and ctx.get(dut.stream.size) == 100
        assert ctx.get(dut.stream.words) == 13 and ctx.get(dut.stream.tail) == 4
        ctx.set(dut.stream.n, 100)                        # (the stream keeps the size)
        msg, fields, (_, _, asked, _) = await take(ctx, dut.app_tx, app_meta)
        assert (msg, fields.flow, fields.length, asked) == (MsgType.TCP_TX_MSG_REQ.value,
                                                            0x1002, 100, 1)
        ctx.set(conn.tx, {"status": Status.OK, "ptr": 7, "addr": 0x200, "wrap": 8})
        ctx.set(conn.tx_got, 1)
        assert ctx.get(conn.take)
        await ctx.tick()
        ctx.set(conn.tx_got, 0)
        msg, fields, _ = await take(ctx, dut.mem_tx, MEM_META)
        assert (msg, fields.addr, fields.size) == (STORE_MEM, 0x200, 100)
        ctx.set(dut.mem.valid, 1)
        ctx.set(dut.mem.type, STORE_MEM_ACK)
        ctx.set(dut.mem.meta, {"addr": 0x208, "size": 100, "wrap": 8})
        assert ctx.get(dut.drop)                          # not the store's
        ctx.set(dut.mem.meta, {"addr": 0x200, "size": 100, "wrap": 8})
        assert not ctx.get(dut.drop)
        await ctx.tick()
        ctx.set(dut.mem.valid, 0)
        msg, fields, (events, _, _, sent) = await take(ctx, dut.app_tx, app_meta)
        assert (msg, fields.ptr, sent, events.sent) == (MsgType.TCP_TX_ADJUST_PTR.value, 107,
                                                        100, 1)
        msg, fields, (events, _, _, _) = await take(ctx, dut.app_tx, app_meta)
        assert msg == MsgType.TCP_CLOSE_REQ.value and events.closed
        for _ in range(5):
            await ctx.tick()
            assert not ctx.get(dut.app_tx.valid)

    simulate(dut, bench, timeout=200)


def test_steps_give_up_after_their_attempts():
    dut = _Steps(requests_for(WIDTH), width=WIDTH, chunk=100, peer=PEER, length=100, start=0,
                 retry=0, attempts=2)

    async def bench(ctx):
        ctx.set(dut.conn.open_failed, 1)
        ctx.set(dut.app_tx.ready, 1)
        opens = 0
        for _ in range(20):
            opens += ctx.get(dut.events.opens)
            await ctx.tick()
        assert opens == 2

    simulate(dut, bench, timeout=100)
