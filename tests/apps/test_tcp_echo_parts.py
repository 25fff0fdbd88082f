"""The components of TcpEchoTile (beehive/apps/tcp_echo.py), each alone in Amaranth's
simulator: the jobs (_Jobs), the dispatch of flows to them (_Dispatch), their engine requests
(_EngineRequests), their memory requests (_MemRequests) and acks (_MemAcks), and the first
requests of new connections (_FirstRequests)."""

from amaranth.lib import data

from apiary.os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, MEM_META, STORE_MEM, STORE_MEM_ACK
from apiary.stream.testbench import simulate
from beehive.apps.tcp_echo import (_Dispatch, _EngineRequests, _FirstRequests, _Jobs,
                                   _MemAcks, _MemRequests, _Step, _fill, _record)
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import APP_META, Status
from test_tcp_steps import requests_for

JOBS, SLOT_BITS, FLOWS, CHUNK, WIDTH = 2, 2, 4, 100, 64
RECORD, FILL = _record(SLOT_BITS, CHUNK), _fill(CHUNK)


def offered(ctx, hdr, meta_layout):
    """``(msg_type, dst_x, dst_y, meta)`` of the request on offer on ``hdr``, or ``None``."""
    if not ctx.get(hdr.valid):
        return None
    payload = ctx.get(hdr.payload)
    return (payload.msg_type, payload.dst_x, payload.dst_y,
            data.Const(meta_layout, payload.meta))


async def pulse(ctx, *settings):
    """Set ``(signal, value)`` pairs for a cycle, then the numbers back to 0."""
    for signal, value in settings:
        ctx.set(signal, value)
    await ctx.tick()
    for signal, value in settings:
        if isinstance(value, int):
            ctx.set(signal, 0)


def test_jobs_step_through_an_echo_and_die_with_their_connection():
    dut = _Jobs(JOBS, SLOT_BITS, RECORD, FILL)
    d, v = dut.dispatch, dut.view

    async def bench(ctx):
        def step(k):
            return ctx.get(v.step[k])
        await pulse(ctx, (d.pop, 1), (d.free_k, 1), (d.head, 3))
        assert step(1) == _Step.CHECK and ctx.get(v.job[1].slot) == 3
        assert ctx.get(v.active) == 0b10
        await pulse(ctx, (d.chk_valid, 1), (d.chk_job, 1), (d.chk_next, _Step.TX_REQ),
                    (d.fill, {"gen": 5, "n": 40, "rx": {"ptr": 7, "addr": 0x107}}))
        assert step(1) == _Step.TX_REQ and ctx.get(v.job[1].n) == 40
        assert ctx.get(dut.handle[1]) == 0x5003 and ctx.get(v.job[1].rx.addr) == 0x107
        await pulse(ctx, (dut.engine.sent, 0b10))
        assert step(1) == _Step.WAIT_TX and ctx.get(dut.tx_wait) == 0b10
        ctx.set(dut.app.meta, {"ptr": 11, "addr": 0x211, "size_log2": 8})
        await pulse(ctx, (dut.tx_answered, 0b10), (dut.tx_ok, 0b10))
        assert step(1) == _Step.LOAD and ctx.get(v.job[1].tx.addr) == 0x211
        for events, event, after in [(dut.memory, "load_sent", _Step.WAIT_LOAD),
                                     (dut.acks, "loaded", _Step.LOADED),
                                     (dut.memory, "store_sent", _Step.WAIT_STORE),
                                     (dut.acks, "stored", _Step.ADJ_TX),
                                     (dut.engine, "sent", _Step.ADJ_RX),
                                     (dut.engine, "sent", _Step.RX_REQ),
                                     (dut.engine, "sent", _Step.FREE)]:
            await pulse(ctx, (getattr(events, event), 0b10))
            assert step(1) == after, event
        # Job 0 on slot 2, waiting to ask for more; its connection ends: it is dead, and
        # frees itself unless its request is on offer (then once that is sent).
        await pulse(ctx, (d.pop, 1), (d.free_k, 0), (d.head, 2))
        await pulse(ctx, (d.chk_valid, 1), (d.chk_job, 0), (d.chk_next, _Step.RX_REQ))
        ctx.set(dut.engine.mine, 0b01)
        ctx.set(dut.app.slot, 2)
        await pulse(ctx, (dut.kill, 1))
        assert ctx.get(v.dead) == 0b01 and step(0) == _Step.RX_REQ
        await ctx.tick()
        assert step(0) == _Step.RX_REQ             # still on offer
        ctx.set(dut.engine.mine, 0)
        await ctx.tick()
        assert step(0) == _Step.FREE

    simulate(dut, bench, timeout=100)


def test_dispatch_gives_a_free_job_its_flow_and_checks_the_response():
    dut = _Dispatch(JOBS, SLOT_BITS, FLOWS, CHUNK, RECORD, FILL)
    out = dut.out

    async def bench(ctx):
        ctx.set(dut.jobs.active, 0b01)
        ctx.set(dut.jobs.job, [{"slot": 2}, {"slot": 0}])
        ctx.set(dut.ready.valid, 1)
        ctx.set(dut.ready.payload, 2)
        assert not ctx.get(out.pop)                 # job 0 still holds slot 2
        ctx.set(dut.ready.payload, 1)
        assert ctx.get(out.pop) and ctx.get(dut.ready.ready) and ctx.get(out.free_k) == 1
        assert ctx.get(dut.ctx.addr) == 1
        await ctx.tick()
        ctx.set(dut.ready.valid, 0)
        assert ctx.get(out.chk_valid) and ctx.get(out.chk_job) == 1
        assert ctx.get(dut.gen_chk.addr) == 1
        ctx.set(dut.live, 0b0010)
        ctx.set(dut.gen_chk.data, 3)
        ctx.set(dut.rx_loc.data, {"x": 4, "y": 5})
        cases = [   # gen, status, length, live -> next step
            (3, Status.OK, 150, 0b0010, _Step.TX_REQ),
            (3, Status.EOF, 0, 0b0010, _Step.CLOSE),
            (3, Status.OK, 0, 0b0010, _Step.RX_REQ),
            (2, Status.OK, 150, 0b0010, _Step.FREE),      # another connection's
            (3, Status.RESET, 150, 0b0010, _Step.FREE),
            (3, Status.OK, 150, 0b0000, _Step.FREE),      # ended since
        ]
        for gen, status, length, live, after in cases:
            ctx.set(dut.ctx.data, {"gen": gen, "status": status, "length": length,
                                   "ptr": 9, "addr": 0x109, "size_log2": 8})
            ctx.set(dut.live, live)
            assert ctx.get(out.chk_next) == after, (gen, status, length, live)
        ctx.set(dut.ctx.data, {"gen": 3, "length": 150, "ptr": 9, "addr": 0x109})
        fill = ctx.get(out.fill)
        assert (fill.n, fill.gen, fill.rx.ptr, fill.rx.addr, fill.rx.loc.y) == (CHUNK, 3, 9,
                                                                               0x109, 5)

    simulate(dut, bench, timeout=20)


def test_dispatch_goes_straight_to_the_load_when_the_flows_credit_covers_its_bytes():
    """A flow with room left from its last grant (its ``credited`` bit set at the pop) skips
    ``TX_REQ`` if the room covers the job's bytes, and the job starts with the credit's ring;
    otherwise it asks, as without a credit."""
    dut = _Dispatch(JOBS, SLOT_BITS, FLOWS, CHUNK, RECORD, FILL)
    out = dut.out

    async def bench(ctx):
        ctx.set(dut.live, 0b0010)
        ctx.set(dut.gen_chk.data, 3)
        ctx.set(dut.credit.data, {"ptr": 500, "addr": 0x2F4, "wrap": 8, "room": 100})
        ctx.set(dut.tx_loc.data, {"x": 2, "y": 3})
        for credited, length, after in [(0b0010, 150, _Step.LOAD),     # 100 bytes: covered
                                        (0b0010, 60, _Step.LOAD),
                                        (0b0000, 60, _Step.TX_REQ),    # no credit
                                        (0b0100, 60, _Step.TX_REQ)]:   # another slot's
            ctx.set(dut.credited, credited)
            ctx.set(dut.ready.valid, 1)
            ctx.set(dut.ready.payload, 1)
            assert ctx.get(out.pop) and ctx.get(dut.credit.addr) == 1
            await ctx.tick()
            ctx.set(dut.ready.valid, 0)
            ctx.set(dut.credited, 0)                # read at the pop, not after
            ctx.set(dut.ctx.data, {"gen": 3, "status": Status.OK, "length": length})
            assert ctx.get(out.chk_next) == after, (credited, length)
        ctx.set(dut.credit.data, {"room": 59})
        assert ctx.get(out.chk_next) == _Step.TX_REQ            # 59 bytes do not cover 60
        ctx.set(dut.credit.data, {"ptr": 500, "addr": 0x2F4, "wrap": 8, "room": 100})
        fill = ctx.get(out.fill)
        assert (fill.tx.ptr, fill.tx.addr, fill.tx.wrap, fill.tx.loc.x, fill.room) == (
            500, 0x2F4, 8, 2, 100)

    simulate(dut, bench, timeout=40)


def test_engine_requests_serve_the_jobs_in_turn_and_hold_an_offer():
    dut = _EngineRequests(requests_for(WIDTH), JOBS, RECORD, CHUNK)
    hdr, ev = dut.app_tx, dut.events
    meta = APP_META.layout()

    async def bench(ctx):
        ctx.set(dut.jobs.job, [{"slot": 1, "gen": 2, "n": 40, "room": 100,
                                "tx": {"ptr": 100, "addr": 0x1F0, "wrap": 8}},
                               {"slot": 3, "gen": 1}])
        ctx.set(dut.jobs.step, [_Step.ADJ_TX, _Step.CLOSE])
        msg, x, _, fields = offered(ctx, hdr, meta)     # the turn after job 0's: job 1's
        assert (msg, x, fields.flow) == (MsgType.TCP_CLOSE_REQ.value, 3, 0x1003)
        await ctx.tick()                            # not taken: held, though job 1 died
        ctx.set(dut.jobs.dead, 0b10)
        assert offered(ctx, hdr, meta)[0] == MsgType.TCP_CLOSE_REQ.value
        assert ctx.get(ev.mine) == 0b10 and not ctx.get(dut.closed)
        ctx.set(hdr.ready, 1)
        assert ctx.get(ev.sent) == 0b10 and ctx.get(dut.closed)
        await ctx.tick()
        ctx.set(dut.jobs.dead, 0)
        # Round-robin: job 0's next, though job 1 wants too; its bytes are counted.
        msg, x, _, fields = offered(ctx, hdr, meta)
        assert (msg, fields.flow, fields.ptr, ctx.get(dut.bytes), ctx.get(ev.sent)) == (
            MsgType.TCP_TX_ADJUST_PTR.value, 0x2001, 140, 40, 0b01)
        # What the flow has left of its room, from the end of the job's bytes, its address
        # wrapped in its 256-byte ring: 0x1F0 + 40 -> 0x118.
        credit = ctx.get(dut.credit)
        assert ctx.get(dut.spent) and ctx.get(dut.slot) == 1
        assert (credit.ptr, credit.addr, credit.wrap, credit.room) == (140, 0x118, 8, 60)
        await ctx.tick()
        ctx.set(dut.jobs.step, [_Step.TX_REQ, _Step.FREE])
        msg, x, _, fields = offered(ctx, hdr, meta)
        assert (msg, fields.length) == (MsgType.TCP_TX_MSG_REQ.value, 40)
        ctx.set(dut.jobs.dead, 0b01)                # a dead job's request, not yet offered
        await ctx.tick()
        ctx.set(dut.jobs.step, [_Step.RX_REQ, _Step.FREE])
        assert offered(ctx, hdr, meta) is None

    simulate(dut, bench, timeout=20)


def test_a_dead_jobs_adjust_leaves_its_flow_no_credit():
    """A job that died while its ``TCP_TX_ADJUST_PTR`` was on offer still sends it (a request
    offered is never withdrawn), but its flow's slot may hold a new connection: no credit."""
    dut = _EngineRequests(requests_for(WIDTH), JOBS, RECORD, CHUNK)

    async def bench(ctx):
        ctx.set(dut.jobs.job, [{"slot": 1, "gen": 2, "n": 40, "room": 100}, {}])
        ctx.set(dut.jobs.step, [_Step.ADJ_TX, _Step.FREE])
        assert ctx.get(dut.app_tx.valid)
        await ctx.tick()                            # offered, not taken: held
        ctx.set(dut.jobs.dead, 0b01)
        ctx.set(dut.app_tx.ready, 1)
        assert ctx.get(dut.events.sent) == 0b01 and ctx.get(dut.adjusted)
        assert not ctx.get(dut.spent)
        ctx.set(dut.jobs.dead, 0)
        assert ctx.get(dut.spent)

    simulate(dut, bench, timeout=20)


def test_memory_requests_store_the_oldest_chunk_before_loads():
    dut = _MemRequests(requests_for(WIDTH), JOBS, RECORD, WIDTH)
    hdr, ev = dut.mem_tx, dut.events

    async def bench(ctx):
        ctx.set(dut.jobs.job, [
            {"n": 40, "rx": {"addr": 0x100, "wrap": 8, "loc": {"x": 0, "y": 2}}},
            {"n": 16, "tx": {"addr": 0x300, "wrap": 8, "loc": {"x": 3, "y": 2}}}])
        ctx.set(dut.jobs.step, [_Step.LOAD, _Step.LOADED])
        ctx.set(dut.loaded.valid, 1)
        ctx.set(dut.loaded.payload, 1)
        # Its load's ack has come but none of its words yet: the load goes first.
        msg, x, y, meta = offered(ctx, hdr, MEM_META)
        assert (msg, x, meta.addr, meta.size) == (LOAD_MEM, 0, 0x100, 40)
        ctx.set(dut.jobs.step, [_Step.WAIT_LOAD, _Step.LOADED])
        ctx.set(hdr.ready, 1)
        await ctx.tick()
        ctx.set(hdr.ready, 0)
        assert offered(ctx, hdr, MEM_META) is None
        # Cut through: the store is offered with its first word, before the chunk is all in.
        ctx.set(dut.chunk.valid, 1)
        ctx.set(dut.chunk.payload, {"data": 0xAB, "nbytes": 8, "last": 0})
        msg, x, y, meta = offered(ctx, hdr, MEM_META)
        assert (msg, x, y, meta.addr, meta.size) == (STORE_MEM, 3, 2, 0x300, 16)
        ctx.set(hdr.ready, 1)
        assert ctx.get(ev.store_sent) == 0b10 and ctx.get(dut.loaded.ready)
        await ctx.tick()
        ctx.set(dut.loaded.valid, 0)
        # The chunk's words go to the store as they come.
        ctx.set(dut.data.ready, 1)
        ctx.set(dut.jobs.step, [_Step.LOAD, _Step.WAIT_STORE])
        assert ctx.get(dut.data.valid) and ctx.get(dut.data.payload.data) == 0xAB
        msg, x, y, meta = offered(ctx, hdr, MEM_META)
        assert (msg, x, meta.addr, meta.size, ctx.get(ev.load_sent)) == (LOAD_MEM, 0, 0x100,
                                                                        40, 0b01)
        await ctx.tick()
        # A gap in the ack's words is a gap in the store's: the store is still under way.
        ctx.set(dut.jobs.step, [_Step.WAIT_LOAD, _Step.WAIT_STORE])
        ctx.set(dut.chunk.valid, 0)
        ctx.set(dut.loaded.valid, 1)
        ctx.set(dut.loaded.payload, 1)
        assert not ctx.get(dut.data.valid) and offered(ctx, hdr, MEM_META) is None
        await ctx.tick()
        ctx.set(dut.loaded.valid, 0)
        ctx.set(dut.chunk.valid, 1)
        ctx.set(dut.chunk.payload, {"data": 0xCD, "nbytes": 8, "last": 1})
        assert ctx.get(dut.data.valid) and ctx.get(dut.data.payload.last)
        await ctx.tick()
        ctx.set(dut.chunk.valid, 0)
        # A dead job's chunk is thrown away, not stored.
        ctx.set(dut.jobs.step, [_Step.WAIT_LOAD, _Step.LOADED])
        ctx.set(dut.jobs.dead, 0b10)
        ctx.set(dut.loaded.valid, 1)
        ctx.set(dut.chunk.valid, 1)
        ctx.set(dut.chunk.payload, {"data": 0xEF, "nbytes": 8, "last": 0})
        assert offered(ctx, hdr, MEM_META) is None
        assert ctx.get(ev.drained) == 0 and not ctx.get(dut.loaded.ready)
        await ctx.tick()
        ctx.set(dut.data.ready, 0)
        assert ctx.get(dut.chunk.ready) and not ctx.get(dut.data.valid)
        assert ctx.get(ev.drained) == 0 and not ctx.get(dut.loaded.ready)
        await ctx.tick()
        # Its job is done with it (and the chunk no longer first) once its last word goes.
        ctx.set(dut.chunk.valid, 0)
        assert ctx.get(ev.drained) == 0 and offered(ctx, hdr, MEM_META) is None
        await ctx.tick()
        ctx.set(dut.chunk.valid, 1)
        ctx.set(dut.chunk.payload, {"data": 0x12, "nbytes": 8, "last": 1})
        assert ctx.get(dut.chunk.ready) and not ctx.get(dut.data.valid)
        assert ctx.get(ev.drained) == 0b10 and ctx.get(dut.loaded.ready)
        await ctx.tick()
        ctx.set(dut.chunk.valid, 0)
        ctx.set(dut.loaded.valid, 0)
        assert ctx.get(ev.drained) == 0

    simulate(dut, bench, timeout=20)


def test_memory_acks_are_found_by_the_request_they_answer():
    dut = _MemAcks(JOBS, SLOT_BITS, RECORD, WIDTH)
    mem, ev = dut.mem, dut.events

    async def bench(ctx):
        ctx.set(dut.jobs.job, [{"slot": 1, "n": 16, "rx": {"addr": 0x100, "wrap": 8}},
                               {"slot": 3, "n": 8, "tx": {"addr": 0x300, "wrap": 8}}])
        ctx.set(dut.jobs.step, [_Step.WAIT_LOAD, _Step.WAIT_STORE])
        ctx.set(dut.chunk.ready, 1)

        def ack(msg_type, addr, size, payload, error=0):
            ctx.set(mem.valid, 1)
            ctx.set(mem.type, msg_type)
            ctx.set(mem.meta, {"addr": addr, "size": size, "wrap": 8, "error": error})
            ctx.set(mem.payload_bytes, payload)
        ack(LOAD_MEM_ACK, 0x100, 16, 16)
        assert ctx.get(ev.loaded) == 0b01 and ctx.get(dut.loaded.valid)
        assert ctx.get(dut.loaded.payload) == 0
        await ctx.tick()
        ctx.set(mem.valid, 0)
        ctx.set(dut.data.valid, 1)                  # its words: into the buffer
        ctx.set(dut.data.payload, {"data": 0x77, "nbytes": 8, "last": 1})
        assert ctx.get(dut.chunk.valid) and ctx.get(dut.chunk.payload.data) == 0x77
        await ctx.tick()
        ctx.set(dut.data.valid, 0)
        ack(STORE_MEM_ACK, 0x300, 8, 0)
        assert ctx.get(ev.stored) == 0b10 and not ctx.get(dut.drop)
        ack(STORE_MEM_ACK, 0x300, 8, 0, error=1)
        assert (ctx.get(dut.mem_error), ctx.get(dut.forget), ctx.get(dut.forget_slot)) == (
            1, 1, 3)
        ctx.set(dut.jobs.dead, 0b10)                # its connection ended: nothing to forget
        assert ctx.get(dut.mem_error) and not ctx.get(dut.forget)
        ack(STORE_MEM_ACK, 0x308, 8, 0)
        assert ctx.get(dut.drop) and not ctx.get(ev.stored)
        await ctx.tick()
        ctx.set(mem.valid, 0)
        ctx.set(dut.data.valid, 1)                  # a stray ack's words: thrown away
        assert ctx.get(dut.data.ready) and not ctx.get(dut.chunk.valid)

    simulate(dut, bench, timeout=20)


def test_first_requests_ask_each_new_connection_for_a_byte():
    dut = _FirstRequests(requests_for(WIDTH), SLOT_BITS, FLOWS)
    hdr, meta = dut.app_tx, APP_META.layout()

    async def bench(ctx):
        ctx.set(dut.live, 0b0100)
        ctx.set(dut.gen_new.data, 5)
        ctx.set(dut.new.valid, 1)
        ctx.set(dut.new.payload, 2)
        assert ctx.get(dut.new.ready) and ctx.get(dut.gen_new.addr) == 2
        await ctx.tick()
        ctx.set(dut.new.payload, 1)                 # announced this very cycle, generation 7
        ctx.set(dut.announced, 1)
        ctx.set(dut.app.slot, 1)
        ctx.set(dut.app.gen, 7)
        assert not ctx.get(dut.new.ready)           # one at a time
        msg, x, _, fields = offered(ctx, hdr, meta)
        assert (msg, x, fields.flow, fields.length) == (MsgType.TCP_RX_MSG_REQ.value, 2, 0x5002, 1)
        await ctx.tick()
        assert offered(ctx, hdr, meta)[3].flow == 0x5002      # held until taken
        ctx.set(hdr.ready, 1)
        await ctx.tick()
        ctx.set(hdr.ready, 0)
        assert ctx.get(dut.new.ready)
        await ctx.tick()
        ctx.set(dut.announced, 0)
        ctx.set(dut.new.payload, 0)                 # neither live nor announced: dropped
        assert offered(ctx, hdr, meta)[3].flow == 0x7001
        ctx.set(hdr.ready, 1)
        await ctx.tick()
        assert ctx.get(dut.new.ready)
        await ctx.tick()
        ctx.set(dut.new.valid, 0)
        assert offered(ctx, hdr, meta) is None

    simulate(dut, bench, timeout=20)
