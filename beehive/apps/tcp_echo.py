"""TCP echo: every byte a connection receives goes back on it, in order; the tile closes its
side once the peer has closed and everything was echoed.

An application of the TCP engine (:mod:`beehive.proto.tcp`), built on
:class:`~beehive.apps.tcp_app.TcpAppTile` (routes, sub-ports, framing). Messages, all with
:data:`~beehive.proto.tcp.app.APP_META` or ``MEM_META`` as metadata:

==========================  ====================  =========================================
in (``dst_fbits``)          from                  what the tile does
==========================  ====================  =========================================
``TCP_NEW_FLOW_NOTIF``      RX tile               kind RECEIVE, status OK: a new connection;
(LOCAL0)                                          remember its receive ring's memory tile,
                                                  ask for data (``TCP_RX_MSG_REQ``, length 1).
                                                  Kind SEND: remember the send ring's memory
                                                  tile (counted in ``send_notifs``)
``TCP_RX_MSG_RESP``         RX tile               OK or EOF: bytes to echo (kept per flow,
(LOCAL0)                                          the flow queued for a job); RESET, TIMEOUT,
                                                  CLOSED: the connection is over, forgotten
``TCP_TX_MSG_RESP``         TX tile               room in the send ring for the job's bytes
(LOCAL0)
``LOAD_MEM_ACK`` (LOCAL1)   receive ring's memory the job's bytes
``STORE_MEM_ACK`` (LOCAL1)  send ring's memory    the job's bytes are written
==========================  ====================  =========================================

Out: engine requests (``src_fbits`` LOCAL0) to route ``"tcp_rx"`` (the RX tile's LOCAL2) or
``"tcp_tx"`` (the TX tile's LOCAL0), memory requests (``src_fbits`` LOCAL1) to the memory
tile the flow's notification named (LOCAL0).

Per connection, with ``n = min(length, chunk)`` for a response reporting ``length`` bytes::

    NEW_FLOW_NOTIF(RECEIVE) ─▶ RX_MSG_REQ(flow, 1)
    RX_MSG_RESP(OK or EOF, ptr p, addr a, size_log2 k, length > 0)
        ─▶ TX_MSG_REQ(flow, n) ◀─ TX_MSG_RESP(OK, ptr q, addr b, size_log2 j)
        ─▶ LOAD_MEM(a, n, wrap k) ◀─ LOAD_MEM_ACK(n bytes)
        ─▶ STORE_MEM(b, n, wrap j, the same bytes) ◀─ STORE_MEM_ACK
        ─▶ TX_ADJUST_PTR(flow, q + n), RX_ADJUST_PTR(flow, p + n), RX_MSG_REQ(flow, 1)
    RX_MSG_RESP(EOF, length 0) ─▶ CLOSE_REQ(flow)

so a response of more than ``chunk`` bytes is served a chunk at a time (the engine answers the
next request at once). A non-OK ``TCP_TX_MSG_RESP``, or a ``TCP_RX_MSG_RESP`` with RESET,
TIMEOUT or CLOSED, ends the flow (counted once in ``ended``, also after the tile's own close):
the job in progress for it stops (after the memory ack it waits for, if any: no memory request
is ever abandoned; bytes loaded for it are discarded), nothing more is sent for it, and what
comes for it afterwards is dropped. A memory ack with ``error`` set gives the flow up
(``mem_errors``).

Structure: the input is never held (``streaming = False``); each message is handled the cycle
it is offered, with room guaranteed for whatever it leaves behind:

* per flow (indexed by the handle's slot): the generation of the connection it holds, whether
  it is live, its receive and send rings' memory tiles, and the latest ``TCP_RX_MSG_RESP``;
* a FIFO of flows whose notification arrived (their first ``TCP_RX_MSG_REQ`` goes out from it,
  whatever the job does) and a FIFO of flows with a response to serve: each flow is in each at
  most once (a bit per flow says so), so ``flows`` entries always suffice;
* one job at a time, so at most one ``TCP_TX_MSG_RESP``, one ``LOAD_MEM_ACK`` (whose data a
  :class:`~apiary.stream.packet_buffer.PacketBuffer` of ``chunk`` bytes always has room for)
  and one ``STORE_MEM_ACK`` are outstanding. Acks are matched to the job's request (type,
  ``addr``, ``size``, ``wrap``), responses to its handle; anything else is dropped and counted.

Throughput: one chunk per job; a job is its messages' round trips (engine, receive memory,
send memory) plus the chunk's words twice, so it is latency-bound: with an engine and memories
that answer at once, 24 cycles per 100-byte chunk at 512 bits (44 per 730 bytes), 88 at 64
bits (246). While a job waits for room in one flow's send ring (a peer that does not read), the
other flows wait too.
"""

from amaranth import Module, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import connect

from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.queue import Queue

from ..proto.messages import MsgType
from ..proto.tcp.app import GEN_BITS, BufferKind, Status
from .tcp_app import MEM_LOC, TcpAppTile


__all__ = ["TcpEchoTile"]


#: What the tile keeps of a flow's latest ``TCP_RX_MSG_RESP``.
_CTX = data.StructLayout({"gen": GEN_BITS, "status": 4, "length": 32, "ptr": 32, "addr": 48,
                          "size_log2": 6})
#: A job's view of one ring: the pointer and address of its first byte, and the ring.
_RING = data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6, "loc": MEM_LOC})


class TcpEchoTile(TcpAppTile):
    """Echo every connection's bytes back on it, then close (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` (fbits LOCAL0); ``"rx_mem"`` and
        ``"tx_mem"`` may be declared for the deadlock check.
    config : TcpConfig
        The engine's (``flows`` sizes the per-flow state).
    chunk : int or None
        Largest number of bytes echoed per job (default ``min(mss, tx_ring // 2)``).

    Cost: per flow 3 bits of registers, and in memories its generation (4 bits), its rings'
    memory tiles (32 bits) and its latest response (126 bits); two FIFOs of ``flows`` slots;
    a ``chunk``-byte packet buffer.
    """

    def __init__(self, env=None, *, config=None, chunk=None):
        super().__init__(env, config=config, chunk=chunk, counters={
            "flows": "connections announced (receive-buffer notifications)",
            "bytes": (48, "bytes echoed (written to a send ring and handed to the engine)"),
            "closed": "connections closed by the tile (CLOSE after the peer's FIN, all echoed)",
            "ended": "connections the engine reported reset, timed out or closed",
            "send_notifs": "send-buffer notifications (where the send ring is)",
            "mem_errors": "memory acks with error set (the flow is given up)",
            "dropped": "messages that match nothing (stray, stale, unknown, malformed)",
        })

    def elaborate(self, platform):
        m = Module()
        flows, sb = self.config.flows, self.slot_bits
        c = self.counters
        io = self.ports(m, app_senders=2)
        job_tx, fresh_tx = io.app_tx
        a, mem = io.app, io.mem
        meta = a.meta

        # -- per-flow state --------------------------------------------------------------------
        live = Signal(flows)        # a connection the tile serves holds the slot
        fresh = Signal(flows)       # the slot is in new_q
        queued = Signal(flows)      # the slot is in ready_q
        m.submodules.gens = gens = Memory(shape=unsigned(GEN_BITS), depth=flows, init=[])
        gen_w = gens.write_port()
        gen_in, gen_new, gen_job = (gens.read_port(domain="comb") for _ in range(3))
        m.submodules.ctx = ctx = Memory(shape=_CTX, depth=flows, init=[])
        ctx_w = ctx.write_port()
        ctx_r = ctx.read_port(transparent_for=(ctx_w,))
        m.submodules.rx_locs = rx_locs = Memory(shape=MEM_LOC, depth=flows, init=[])
        m.submodules.tx_locs = tx_locs = Memory(shape=MEM_LOC, depth=flows, init=[])
        rx_loc_w, tx_loc_w = rx_locs.write_port(), tx_locs.write_port()
        rx_loc_r, tx_loc_r = rx_locs.read_port(), tx_locs.read_port()
        m.submodules.new_q = new_q = Queue(unsigned(sb), flows)
        m.submodules.ready_q = ready_q = Queue(unsigned(sb), flows)

        # -- the job -----------------------------------------------------------------------------
        job_slot = Signal(sb)
        job_gen = Signal(GEN_BITS)
        job_active = Signal()
        job_dead = Signal()         # its connection ended: stop once no memory ack is awaited
        job_handle = self.handle(job_slot, job_gen)
        n = Signal(range(self.chunk + 1))
        rx = Signal(_RING)
        tx = Signal(_RING)
        tx_status = Signal(4)
        await_tx, tx_got = Signal(), Signal()
        await_load, load_err = Signal(), Signal()
        await_store, store_got, store_err = Signal(), Signal(), Signal()
        m.submodules.buf = buf = PacketBuffer(self.env.width, max_bytes=self.chunk,
                                              buffer_bytes=self.chunk, max_queued=1,
                                              verdict=False)
        draining = Signal()         # discarding a dead job's loaded bytes

        ended_job = Signal()
        ended_in = Signal()
        drop_app = Signal()
        drop_mem = Signal()
        self.count_dropped(m, io, drop_app, drop_mem)
        same = ended_job & ended_in & (a.slot == job_slot)     # one flow, told twice at once
        m.d.sync += c.ended.eq(c.ended + ended_job + (ended_in & ~same))

        slot_r = Signal(sb)
        m.d.comb += [
            slot_r.eq(job_slot), gen_job.addr.eq(job_slot),
            ctx_r.addr.eq(slot_r), rx_loc_r.addr.eq(slot_r), tx_loc_r.addr.eq(slot_r),
        ]
        job_live = live.bit_select(job_slot, 1) & (gen_job.data == job_gen)

        def forget(count_ended):
            with m.If(job_live):
                m.d.sync += live.bit_select(job_slot, 1).eq(0)
                if count_ended:
                    m.d.comb += ended_job.eq(1)

        # A request, once offered, stays on offer until taken (at 64 bits it is several
        # flits): whether to send it is decided before its state is entered.
        with m.FSM(name="job"):
            with m.State("IDLE"):
                m.d.comb += ready_q.o.ready.eq(1)
                with m.If(ready_q.o.valid):
                    m.d.comb += slot_r.eq(ready_q.o.payload)
                    m.d.sync += [
                        job_slot.eq(ready_q.o.payload), job_active.eq(1), job_dead.eq(0),
                        queued.bit_select(ready_q.o.payload, 1).eq(0),
                        tx_got.eq(0), load_err.eq(0), store_got.eq(0),
                    ]
                    m.next = "CHECK"
            with m.State("CHECK"):
                cx = ctx_r.data
                ok = ((cx.status == Status.OK) | (cx.status == Status.EOF)) & ~job_dead
                m.d.sync += [
                    job_gen.eq(cx.gen), n.eq(self.step(cx.length)),
                    rx.ptr.eq(cx.ptr), rx.addr.eq(cx.addr), rx.wrap.eq(cx.size_log2),
                    rx.loc.eq(rx_loc_r.data), tx.loc.eq(tx_loc_r.data),
                ]
                with m.If(~ok | ~live.bit_select(job_slot, 1) | (gen_job.data != cx.gen)):
                    m.next = "FINISH"       # stale: the flow ended since
                with m.Elif(cx.length != 0):
                    m.next = "TX_REQ"
                with m.Elif(cx.status == Status.EOF):
                    m.next = "CLOSE"
                with m.Else():
                    m.next = "RX_REQ"
            with m.State("TX_REQ"):
                with m.If(self.app_request(m, job_tx, MsgType.TCP_TX_MSG_REQ, self.tcp_tx,
                                           flow=job_handle, length=n)):
                    m.d.sync += await_tx.eq(1)
                    m.next = "WAIT_TX"
            with m.State("WAIT_TX"):
                with m.If(tx_got):
                    with m.If(job_dead):
                        m.next = "FINISH"
                    with m.Elif(tx_status == Status.OK):
                        m.next = "LOAD"
                    with m.Else():
                        forget(count_ended=True)
                        m.next = "FINISH"
                with m.Elif(job_dead):         # the engine will not answer: stop waiting
                    m.d.sync += await_tx.eq(0)
                    m.next = "FINISH"
            with m.State("LOAD"):
                with m.If(self.mem_request(m, io.mem_tx, store=False, loc=rx.loc, addr=rx.addr,
                                           size=n, wrap=rx.wrap)):
                    m.d.sync += await_load.eq(1)
                    m.next = "WAIT_LOAD"
            with m.State("WAIT_LOAD"):
                with m.If(load_err):
                    m.d.sync += c.mem_errors.eq(c.mem_errors + 1)
                    forget(count_ended=False)
                    m.next = "FINISH"
                with m.Elif(buf.o_desc.valid):
                    m.d.comb += buf.o_desc.ready.eq(1)
                    with m.If(job_dead):
                        m.d.sync += draining.eq(1)
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "STORE"
            with m.State("DRAIN"):
                with m.If(~draining):
                    m.next = "FINISH"
            with m.State("STORE"):
                with m.If(self.mem_request(m, io.mem_tx, store=True, loc=tx.loc, addr=tx.addr,
                                           size=n, wrap=tx.wrap)):
                    m.d.sync += await_store.eq(1)
                    m.next = "WAIT_STORE"
            with m.State("WAIT_STORE"):
                with m.If(store_got):
                    with m.If(store_err):
                        m.d.sync += c.mem_errors.eq(c.mem_errors + 1)
                        forget(count_ended=False)
                        m.next = "FINISH"
                    with m.Elif(job_dead):
                        m.next = "FINISH"
                    with m.Else():
                        m.next = "ADJ_TX"
            with m.State("ADJ_TX"):
                with m.If(self.app_request(m, job_tx, MsgType.TCP_TX_ADJUST_PTR, self.tcp_tx,
                                           flow=job_handle, ptr=tx.ptr + n)):
                    m.d.sync += c.bytes.eq(c.bytes + n)
                    with m.If(job_dead):
                        m.next = "FINISH"
                    with m.Else():
                        m.next = "ADJ_RX"
            with m.State("ADJ_RX"):
                with m.If(self.app_request(m, job_tx, MsgType.TCP_RX_ADJUST_PTR, self.tcp_rx,
                                           flow=job_handle, ptr=rx.ptr + n)):
                    with m.If(job_dead):
                        m.next = "FINISH"
                    with m.Else():
                        m.next = "RX_REQ"
            with m.State("RX_REQ"):
                with m.If(self.app_request(m, job_tx, MsgType.TCP_RX_MSG_REQ, self.tcp_rx,
                                           flow=job_handle, length=1)):
                    m.next = "FINISH"
            with m.State("CLOSE"):
                with m.If(self.app_request(m, job_tx, MsgType.TCP_CLOSE_REQ, self.tcp_tx,
                                           flow=job_handle)):
                    m.d.sync += c.closed.eq(c.closed + 1)
                    m.next = "FINISH"
            with m.State("FINISH"):
                m.d.sync += job_active.eq(0)
                m.next = "IDLE"

        # The loaded bytes: to the store, or discarded for a dead job.
        with m.If(draining):
            m.d.comb += buf.o.ready.eq(1)
            with m.If(buf.o.valid & buf.o.payload.last):
                m.d.sync += draining.eq(0)
        with m.Else():
            connect(m, buffer=buf.o, sender=io.mem_tx.i_data)

        # -- memory acks (always taken) ----------------------------------------------------------
        to_buf = Signal()           # the payload coming is the job's loaded bytes
        load_ack = self.mem_ack(mem, LOAD_MEM_ACK, await_load, rx.addr, n, rx.wrap)
        store_ack = self.mem_ack(mem, STORE_MEM_ACK, await_store, tx.addr, n, tx.wrap)
        with m.If(load_ack):
            m.d.sync += [await_load.eq(0), load_err.eq(mem.meta.error),
                         to_buf.eq(~mem.meta.error)]
        with m.Elif(store_ack):
            m.d.sync += [await_store.eq(0), store_got.eq(1), store_err.eq(mem.meta.error)]
        with m.Elif(mem.valid):
            m.d.comb += drop_mem.eq(1)
            m.d.sync += to_buf.eq(0)
        with m.If(to_buf):
            connect(m, receiver=mem.data, buffer=buf.i)
            with m.If(mem.data.valid & mem.data.ready & mem.data.payload.last):
                m.d.sync += to_buf.eq(0)
        with m.Else():
            m.d.comb += mem.data.ready.eq(1)

        # -- engine messages (always taken; after the job, so that a new connection's `live`
        # wins over the job forgetting the slot's previous one) --------------------------------
        m.d.comb += gen_in.addr.eq(a.slot)
        current = live.bit_select(a.slot, 1) & (gen_in.data == a.gen)
        on_job = job_active & (job_slot == a.slot)
        announced = Signal()        # a new connection's receive buffer, this cycle
        with m.If(a.valid):
            with m.Switch(a.type):
                with m.Case(MsgType.TCP_NEW_FLOW_NOTIF):
                    with m.If((meta.status == Status.OK) & (meta.kind == BufferKind.RECEIVE)):
                        m.d.comb += [
                            announced.eq(1),
                            gen_w.en.eq(1), gen_w.addr.eq(a.slot), gen_w.data.eq(a.gen),
                            rx_loc_w.en.eq(1), rx_loc_w.addr.eq(a.slot),
                            rx_loc_w.data.x.eq(meta.mem_x), rx_loc_w.data.y.eq(meta.mem_y),
                        ]
                        m.d.sync += [live.bit_select(a.slot, 1).eq(1),
                                     c.flows.eq(c.flows + 1)]
                        with m.If(~fresh.bit_select(a.slot, 1)):
                            m.d.comb += [new_q.i.valid.eq(1), new_q.i.payload.eq(a.slot)]
                            m.d.sync += fresh.bit_select(a.slot, 1).eq(1)
                        with m.If(on_job):
                            m.d.sync += job_dead.eq(1)
                    with m.Elif((meta.status == Status.OK) & (meta.kind == BufferKind.SEND)
                                & current):
                        m.d.comb += [
                            tx_loc_w.en.eq(1), tx_loc_w.addr.eq(a.slot),
                            tx_loc_w.data.x.eq(meta.mem_x), tx_loc_w.data.y.eq(meta.mem_y),
                        ]
                        m.d.sync += c.send_notifs.eq(c.send_notifs + 1)
                    with m.Else():
                        m.d.comb += drop_app.eq(1)
                with m.Case(MsgType.TCP_RX_MSG_RESP):
                    with m.If(~current):
                        m.d.comb += drop_app.eq(1)
                    with m.Elif(a.ok):
                        m.d.comb += [
                            ctx_w.en.eq(1), ctx_w.addr.eq(a.slot),
                            ctx_w.data.gen.eq(a.gen), ctx_w.data.status.eq(meta.status),
                            ctx_w.data.length.eq(meta.length), ctx_w.data.ptr.eq(meta.ptr),
                            ctx_w.data.addr.eq(meta.addr),
                            ctx_w.data.size_log2.eq(meta.size_log2),
                        ]
                        with m.If(~queued.bit_select(a.slot, 1)):
                            m.d.comb += [ready_q.i.valid.eq(1), ready_q.i.payload.eq(a.slot)]
                            m.d.sync += queued.bit_select(a.slot, 1).eq(1)
                    with m.Else():
                        m.d.comb += ended_in.eq(1)
                        m.d.sync += live.bit_select(a.slot, 1).eq(0)
                        with m.If(on_job):
                            m.d.sync += job_dead.eq(1)
                with m.Case(MsgType.TCP_TX_MSG_RESP):
                    with m.If(await_tx & ~job_dead & (meta.flow == job_handle)):
                        m.d.sync += [
                            await_tx.eq(0), tx_got.eq(1), tx_status.eq(meta.status),
                            tx.ptr.eq(meta.ptr), tx.addr.eq(meta.addr),
                            tx.wrap.eq(meta.size_log2),
                        ]
                    with m.Else():
                        m.d.comb += drop_app.eq(1)
                with m.Default():
                    m.d.comb += drop_app.eq(1)

        # -- first requests of new connections (their own sender: never behind a job) ------------
        fresh_valid = Signal()
        fresh_handle = Signal(16)
        new_slot = new_q.o.payload
        m.d.comb += gen_new.addr.eq(new_slot)
        with m.If(~fresh_valid & new_q.o.valid):
            m.d.comb += new_q.o.ready.eq(1)
            m.d.sync += fresh.bit_select(new_slot, 1).eq(0)
            with m.If(announced & (a.slot == new_slot)):       # its newest connection, now
                m.d.sync += [fresh_valid.eq(1), fresh_handle.eq(self.handle(new_slot, a.gen))]
            with m.Elif(live.bit_select(new_slot, 1)):
                m.d.sync += [fresh_valid.eq(1),
                             fresh_handle.eq(self.handle(new_slot, gen_new.data))]
        with m.If(fresh_valid):
            with m.If(self.app_request(m, fresh_tx, MsgType.TCP_RX_MSG_REQ, self.tcp_rx,
                                       flow=fresh_handle, length=1)):
                m.d.sync += fresh_valid.eq(0)
        return m
