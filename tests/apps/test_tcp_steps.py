"""The steps the TCP applications share (beehive/apps/tcp_steps.py), each alone in Amaranth's
simulator: TxAnswer, HeldOffer, ChunkOut, AckWait, and FlowServer through a small subclass."""

from amaranth.lib import data

from apiary.noc.framing import MessageSender
from apiary.noc.header import Fbits
from apiary.os.memory_tile import MEM_META
from apiary.stream.testbench import WithCycleCounter, simulate
from apiary.tile import Endpoint
from beehive.apps.tcp_app import Requests
from beehive.apps.tcp_steps import AckWait, ChunkOut, FlowServer, HeldOffer, TxAnswer
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import APP_META, Status

TX_RESP = MsgType.TCP_TX_MSG_RESP.value


def requests_for(width):
    """A tile at (1, 1) with the engine's RX tile at (2, 1) and its TX tile at (3, 1)."""
    return Requests(1, 1, Endpoint("tcp_rx", 2, 1, Fbits.LOCAL2), Endpoint("tcp_tx", 3, 1),
                    MessageSender.descriptor_layout(width, meta_bits=APP_META.size),
                    MessageSender.descriptor_layout(width, meta_bits=MEM_META.size))


def test_tx_answer_finds_the_waiter_of_the_flow():
    dut = TxAnswer(2, waiters=2)

    async def bench(ctx):
        ctx.set(dut.wait, 0b11)
        ctx.set(dut.handle, [0x1001, 0x2002])
        ctx.set(dut.app.valid, 1)
        ctx.set(dut.app.type, TX_RESP)
        outputs = ("answered", "ok", "fail", "ended", "drop")
        cases = [   # flow, status, handled, wait -> answered, ok, fail, ended, drop
            (0x2002, Status.OK, 0, 0b11, (0b10, 0b10, 0, 0, 0)),
            (0x1001, Status.RESET, 0, 0b11, (0b01, 0, 0b01, 1, 0)),
            (0x1001, Status.OK, 0, 0b10, (0, 0, 0, 0, 1)),      # not awaited (any more)
            (0x3003, Status.OK, 0, 0b11, (0, 0, 0, 0, 1)),      # nobody's
            (0x1001, Status.OK, 1, 0b11, (0, 0, 0, 0, 0)),      # the table's message
        ]
        for flow, status, handled, wait, expect in cases:
            ctx.set(dut.app.meta, {"flow": flow, "status": status})
            ctx.set(dut.handled, handled)
            ctx.set(dut.wait, wait)
            assert tuple(ctx.get(getattr(dut, name)) for name in outputs) == expect, flow
        ctx.set(dut.handled, 0)
        ctx.set(dut.app.type, MsgType.TCP_NEW_FLOW_NOTIF.value)
        assert ctx.get(dut.drop) == 1                   # another type, not the table's
        ctx.set(dut.app.valid, 0)
        assert ctx.get(dut.drop) == 0

    simulate(WithCycleCounter(dut), bench, timeout=20)      # (combinational: a clock added)


def test_held_offer_keeps_its_choice_until_taken():
    dut = HeldOffer({"store": 1, "k": 2})

    async def bench(ctx):
        ctx.set(dut.want, 1)
        ctx.set(dut.choice, {"store": 0, "k": 1})
        assert ctx.get(dut.offer) and ctx.get(dut.chosen.k) == 1 and not ctx.get(dut.taken)
        await ctx.tick()                            # not taken: held
        ctx.set(dut.want, 0)
        ctx.set(dut.choice, {"store": 1, "k": 2})
        assert ctx.get(dut.hold) and ctx.get(dut.offer)
        assert (ctx.get(dut.chosen.store), ctx.get(dut.chosen.k)) == (0, 1)
        await ctx.tick()
        ctx.set(dut.ready, 1)
        assert ctx.get(dut.taken) and ctx.get(dut.chosen.k) == 1
        await ctx.tick()                            # taken: nothing held, nothing wanted
        assert not ctx.get(dut.hold) and not ctx.get(dut.offer)
        ctx.set(dut.want, 1)                        # taken the cycle it is offered
        assert ctx.get(dut.taken) and ctx.get(dut.chosen.k) == 2
        await ctx.tick()
        assert not ctx.get(dut.hold)

    simulate(dut, bench, timeout=20)


def test_chunk_out_stores_then_drains_a_chunk_at_a_time():
    dut = ChunkOut(64)

    async def bench(ctx):
        words = [{"data": 0x1111 * (k + 1), "nbytes": 8, "last": k == 2} for k in range(3)]
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, words[0])
        ctx.set(dut.o.ready, 1)
        assert not ctx.get(dut.i.ready) and not ctx.get(dut.o.valid)     # neither yet
        ctx.set(dut.store, 1)
        await ctx.tick()
        ctx.set(dut.store, 0)
        stored = []
        for word in words:
            ctx.set(dut.i.payload, word)
            assert ctx.get(dut.storing) and ctx.get(dut.o.valid) and ctx.get(dut.i.ready)
            stored.append(ctx.get(dut.o.payload.data))
            assert ctx.get(dut.done) == word["last"]
            await ctx.tick()
        assert stored == [w["data"] for w in words] and not ctx.get(dut.storing)
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.drain, 1)
        await ctx.tick()
        ctx.set(dut.drain, 0)
        for word in words:
            ctx.set(dut.i.payload, word)
            assert ctx.get(dut.draining) and ctx.get(dut.i.ready) and not ctx.get(dut.o.valid)
            await ctx.tick()
        assert not ctx.get(dut.draining) and not ctx.get(dut.i.ready)

    simulate(dut, bench, timeout=50)


def test_ack_wait_follows_its_request():
    dut = AckWait()

    async def bench(ctx):
        async def pulse(name, **more):
            ctx.set(getattr(dut, name), 1)
            for key, value in more.items():
                ctx.set(getattr(dut, key), value)
            await ctx.tick()
            ctx.set(getattr(dut, name), 0)
            return ctx.get(dut.wait), ctx.get(dut.got), ctx.get(dut.err)
        assert await pulse("issue") == (1, 0, 0)
        assert await pulse("match", error=1) == (0, 1, 1)
        assert await pulse("clear") == (0, 0, 1)
        assert await pulse("issue") == (1, 0, 1)               # (err: the last ack's)
        assert await pulse("match", error=0) == (0, 1, 0)

    simulate(dut, bench, timeout=20)


class _Probe(FlowServer):
    """A FlowServer whose flows need 4 bytes; serving one is a single busy state."""

    def __init__(self):
        super().__init__(requests_for(64), flows=4, slot_bits=2, need=4, ask=4, members={})

    def whole(self, m, cx):
        m.next = "SERVE"

    def states(self, m):
        with m.State("SERVE"):
            m.d.comb += self.busy.eq(1)
            with m.If(self.dead):
                m.next = "IDLE"


def test_flow_server_picks_checks_asks_and_closes():
    dut = _Probe()

    async def offer(ctx, stream, slot):
        ctx.set(stream.valid, 1)
        ctx.set(stream.payload, slot)
        popped = ctx.get(stream.ready)
        await ctx.tick()
        ctx.set(stream.valid, 0)
        return popped

    async def request(ctx):
        """The engine request on offer, taken; ``(msg_type, dst_x, meta)``."""
        while not ctx.get(dut.app_tx.valid):
            await ctx.tick()
        ctx.set(dut.app_tx.ready, 1)
        payload = ctx.get(dut.app_tx.payload)
        meta = data.Const(APP_META.layout(), payload.meta)
        forget = ctx.get(dut.forget)
        await ctx.tick()
        ctx.set(dut.app_tx.ready, 0)
        return payload.msg_type, payload.dst_x, meta.flow, meta.length, forget

    async def bench(ctx):
        ctx.set(dut.live, 0b0110)
        ctx.set(dut.gen_cur.data, 3)
        # A new connection in slot 2: FRESH, then ASK for `ask` bytes, to the RX tile.
        assert await offer(ctx, dut.new, 2)
        assert await request(ctx) == (MsgType.TCP_RX_MSG_REQ.value, 2, 0x3002, 4, 0)
        # A response for slot 1 with 5 bytes: served (busy), until its connection is killed.
        assert await offer(ctx, dut.ready, 1)
        ctx.set(dut.ctx.data, {"gen": 3, "status": Status.OK, "length": 5})
        await ctx.tick()                            # CHECK
        assert ctx.get(dut.busy)
        ctx.set(dut.kill, 1)
        ctx.set(dut.app.slot, 1)
        await ctx.tick()
        ctx.set(dut.kill, 0)
        assert ctx.get(dut.dead)
        await ctx.tick()                            # SERVE saw dead: IDLE
        # At EOF with 3 bytes left: truncated, closed (to the TX tile) and forgotten.
        ctx.set(dut.ctx.data, {"gen": 3, "status": Status.EOF, "length": 3})
        assert await offer(ctx, dut.ready, 1)
        assert ctx.get(dut.truncated) == 1
        assert await request(ctx) == (MsgType.TCP_CLOSE_REQ.value, 3, 0x3001, 0, 1)
        # A stale response (another generation): nothing.
        ctx.set(dut.ctx.data, {"gen": 2, "status": Status.OK, "length": 9})
        assert await offer(ctx, dut.ready, 1)
        await ctx.tick()
        assert not ctx.get(dut.app_tx.valid) and not ctx.get(dut.busy)

    simulate(dut, bench, timeout=100)
