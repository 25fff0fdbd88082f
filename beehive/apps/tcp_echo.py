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
``TCP_TX_MSG_RESP``         TX tile               room in the send ring for a job's bytes
(LOCAL0)
``LOAD_MEM_ACK`` (LOCAL1)   receive ring's memory a job's bytes
``STORE_MEM_ACK`` (LOCAL1)  send ring's memory    a job's bytes are written
==========================  ====================  =========================================

Out: engine requests (``src_fbits`` LOCAL0) to route ``"tcp_rx"`` (the RX tile's LOCAL2) or
``"tcp_tx"`` (the TX tile's LOCAL0), memory requests (``src_fbits`` LOCAL1) to the memory
tile the flow's notification named (LOCAL0).

Per connection, with ``n = min(length, chunk)`` for a response reporting ``length`` bytes, one
job per response::

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
its job in progress stops (after the memory ack it waits for, if any: no memory request is
ever abandoned; bytes loaded for it are discarded), nothing more is sent for it, and what
comes for it afterwards is dropped. A memory ack with ``error`` set gives the flow up
(``mem_errors``). Other flows' jobs go on meanwhile.

Structure: the input is never held (``streaming = False``); each message is handled the cycle
it is offered, with room guaranteed for whatever it leaves behind:

* per flow (indexed by the handle's slot): the generation of the connection it holds, whether
  it is live, its receive and send rings' memory tiles, and the latest ``TCP_RX_MSG_RESP``;
* a FIFO of flows whose notification arrived (their first ``TCP_RX_MSG_REQ`` goes out from it,
  whatever the jobs do) and a FIFO of flows with a response to serve: each flow is in each at
  most once (a bit per flow says so), so ``flows`` entries always suffice;
* up to ``jobs`` jobs at once, each on a different flow slot (the flow at the head of the
  FIFO waits while a job of its slot's previous connection, ended, still awaits a memory ack).
  A job is a record (flow, ``n``, both rings) and a step, with at most one request or answer
  outstanding: a flow waiting for room in its send ring holds only its own job (only when all
  ``jobs`` wait for room does everything wait). Engine requests leave on one sender, the
  jobs' in turn (round-robin); memory requests on another, the oldest loaded chunk's store
  before loads. A request once offered stays on offer until taken; a dead job's request not
  yet offered is withdrawn;
* answers are matched to the job awaiting them: ``TCP_TX_MSG_RESP`` by its flow handle,
  ``LOAD_MEM_ACK`` and ``STORE_MEM_ACK`` by the ``addr``, ``size`` and ``wrap`` of the job's
  request (each job is on its own flow slot, and each slot's ring has its own address). No
  order is assumed: acks may come back in any order, from any number of memory tiles, with
  any number of loads outstanding to each. Anything else is dropped and counted;
* loaded bytes go into a :class:`~apiary.stream.packet_buffer.PacketBuffer` of ``jobs``
  chunks: a job has at most one chunk loaded or on its way, so its room is reserved before
  its ``LOAD_MEM`` leaves. Chunks are stored in the order their acks came; the chunk of a job
  that died meanwhile is discarded.

Throughput: a job is its messages' round trips (engine, receive memory, send memory) plus 7
cycles of the tile's own: 3 from a ``TCP_RX_MSG_RESP`` to its ``TCP_TX_MSG_REQ`` (queue,
response read, check), 1 from a ``TCP_TX_MSG_RESP`` or a ``STORE_MEM_ACK`` to the request it
allows, 2 from a ``LOAD_MEM_ACK``'s last word to the ``STORE_MEM`` (the packet buffer); the
three requests after a store leave back to back. One job is latency-bound; ``jobs`` busy
flows overlap their round trips, a job ending every (round trips) / ``jobs`` cycles, until
the output port is the limit (a 64-byte job is 7 flits out at 512 bits, 34 at 64). Measured
with the tests' model (``tests/apps/tcp_model.py``) answering at once, four flows always
busy, 64-byte chunks, in cycles per job: at 512 bits 17.0 with ``jobs=1`` (21 before there
were jobs), 8.9 with 2, 7.0 with 4; with memory acks 20 cycles late 55, 27.6 and 14.3; at 64
bits 68, 45 and 39.5.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, enum
from amaranth.lib.wiring import connect

from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.queue import Queue

from ..proto.messages import MsgType
from ..proto.tcp.app import GEN_BITS, Status
from .tcp_app import MEM_LOC, FlowTable, TcpAppTile, app_outputs
from apiary.stream.counters import count


__all__ = ["TcpEchoTile"]


#: A job's view of one ring: the pointer and address of its first byte, and the ring.
_RING = data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6, "loc": MEM_LOC})


class _Step(enum.Enum, shape=4):
    """Where a job is: a request to send (``TX_REQ``, ``LOAD``, ``ADJ_TX``, ``ADJ_RX``,
    ``RX_REQ``, ``CLOSE``), an answer to await (``WAIT_*``), its chunk waiting in the buffer
    (``LOADED``)."""
    FREE = 0
    CHECK = 1           # its flow's response is being read
    TX_REQ = 2
    WAIT_TX = 3
    LOAD = 4
    WAIT_LOAD = 5
    LOADED = 6
    WAIT_STORE = 7
    ADJ_TX = 8
    ADJ_RX = 9
    RX_REQ = 10
    CLOSE = 11


#: The step after an engine request is taken.
_AFTER = {_Step.TX_REQ: _Step.WAIT_TX, _Step.ADJ_TX: _Step.ADJ_RX, _Step.ADJ_RX: _Step.RX_REQ,
          _Step.RX_REQ: _Step.FREE, _Step.CLOSE: _Step.FREE}


def _bits(n):
    """Bits of an index below ``n`` (at least 1)."""
    return max(1, (n - 1).bit_length())


def _first(m, wants, after=None):
    """``(any, index)``: whether one of ``wants`` is set, and the first that is (round-robin:
    the first after index ``after``, if given)."""
    n = len(wants)
    found, index = Signal(), Signal(_bits(n))
    m.d.comb += found.eq(Cat(*wants).any())

    def chain(order):
        for k in reversed(order):
            with m.If(wants[k]):
                m.d.comb += index.eq(k)
    if after is None:
        chain(range(n))
    else:
        with m.Switch(after):
            for last in range(n):
                with m.Case(last):
                    chain([(last + 1 + k) % n for k in range(n)])
    return found, index


def _select(m, shape, values, index):
    """``values[index]``, as a signal of ``shape``."""
    out = Signal(shape)
    with m.Switch(index):
        for k, value in enumerate(values):
            with m.Case(k):
                m.d.comb += out.eq(value)
    return out


def _one_of(step, steps):
    """Whether ``step`` is one of ``steps``."""
    return Cat(step == s for s in steps).any()


class TcpEchoTile(TcpAppTile):
    """Echo every connection's bytes back on it, then close; serve up to ``jobs`` connections
    at once (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` (fbits LOCAL0); ``"rx_mem"`` and
        ``"tx_mem"`` may be declared for the deadlock check.
    config : TcpConfig
        The engine's (``flows`` sizes the per-flow state).
    chunk : int or None
        Largest number of bytes echoed per job (default ``min(mss, tx_ring // 2)``).
    jobs : int
        Jobs under way at once, each on a different flow: 1 to 64 (default 4; with 1 the
        tile serves one response at a time).

    Cost: per flow 3 bits of registers, and in memories its generation (4 bits), its rings'
    memory tiles (32 bits) and its latest response (126 bits); two FIFOs of ``flows`` slots;
    per job about 240 bits of registers; a packet buffer of ``jobs`` chunks and a FIFO of
    ``jobs`` job numbers.
    """

    #: Two senders of engine requests (the receive side's, the send side's).
    outputs = app_outputs(2)

    def __init__(self, env=None, *, config=None, chunk=None, jobs=4):
        if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= 64:
            raise ValueError(f"jobs must be an integer from 1 to 64, not {jobs!r}")
        self.jobs = jobs
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
        flows, sb, nj = self.config.flows, self.slot_bits, self.jobs
        c = self.counters
        io = self.ports(m)
        job_tx, fresh_tx = io.app_tx
        a, mem = io.app, io.mem
        meta = a.meta

        # -- per-flow state --------------------------------------------------------------------
        table = FlowTable(m, flows, sb)
        live, fresh, queued = table.live, table.fresh, table.queued
        new_q, ready_q = table.new_q, table.ready_q
        gen_new, gen_chk = (table.gens.read_port(domain="comb") for _ in range(2))
        # Not transparent: a response written as its slot is dispatched is a newer
        # connection's (the slot is queued again for it); the job reads the one it was queued
        # for, now stale, and ends at once.
        ctx_r = table.ctx.read_port()
        rx_loc_r, tx_loc_r = table.rx_locs.read_port(), table.tx_locs.read_port()

        # -- the jobs: a record, a step and a `dead` bit each ----------------------------------
        record = data.StructLayout({"slot": sb, "gen": GEN_BITS, "n": range(self.chunk + 1),
                                    "rx": _RING, "tx": _RING})
        job = [Signal(record, name=f"job{k}") for k in range(nj)]
        step = [Signal(_Step, name=f"step{k}") for k in range(nj)]
        dead = [Signal(name=f"dead{k}") for k in range(nj)]  # its connection ended under it
        active = [s != _Step.FREE for s in step]
        jbits = _bits(nj)

        def events(name):
            return [Signal(name=f"{name}{k}") for k in range(nj)]
        sent, tx_ok, tx_fail = events("sent"), events("tx_ok"), events("tx_fail")
        load_sent, loaded, store_sent, drained, stored = (
            events("load_sent"), events("loaded"), events("store_sent"), events("drained"),
            events("stored"))

        # Loaded chunks, in the order their acks came, and which job each is for.
        words = -(-self.chunk // (self.env.width // 8))
        m.submodules.buf = buf = PacketBuffer(
            self.env.width, max_bytes=self.chunk, buffer_bytes=nj * words * self.env.width // 8,
            max_queued=nj, verdict=False)
        m.submodules.loaded_q = loaded_q = Queue(unsigned(jbits), nj)

        ended_in, ended_tx = Signal(), Signal()
        drop_app, drop_mem = Signal(), Signal()
        self.count_dropped(m, io, drop_app, drop_mem, table.drop)
        count(m, c.ended, (ended_in | ended_tx))

        # -- dispatch: a queued flow to a free job, then its response read (CHECK) -------------
        head = ready_q.o.payload
        free, free_k = _first(m, [~x for x in active])
        head_busy = Cat(act & (j.slot == head) for act, j in zip(active, job)).any()
        pop = Signal()
        chk_valid, chk_job, chk_slot = Signal(), Signal(jbits), Signal(sb)
        m.d.comb += [
            pop.eq(ready_q.o.valid & free & ~head_busy),
            ready_q.o.ready.eq(pop),
            ctx_r.addr.eq(head), rx_loc_r.addr.eq(head), tx_loc_r.addr.eq(head),
            gen_chk.addr.eq(chk_slot),
        ]
        m.d.sync += [chk_valid.eq(pop), chk_job.eq(free_k), chk_slot.eq(head)]
        with m.If(pop):
            m.d.sync += queued.bit_select(head, 1).eq(0)
        cx = ctx_r.data
        chk_next = Signal(_Step)
        with m.If(((cx.status != Status.OK) & (cx.status != Status.EOF))
                  | ~live.bit_select(chk_slot, 1) | (gen_chk.data != cx.gen)):
            m.d.comb += chk_next.eq(_Step.FREE)         # stale: the flow ended since
        with m.Elif(cx.length != 0):
            m.d.comb += chk_next.eq(_Step.TX_REQ)
        with m.Elif(cx.status == Status.EOF):
            m.d.comb += chk_next.eq(_Step.CLOSE)
        with m.Else():
            m.d.comb += chk_next.eq(_Step.RX_REQ)
        for k, j in enumerate(job):
            with m.If(pop & (free_k == k)):
                m.d.sync += [j.slot.eq(head), dead[k].eq(0)]
            with m.If(chk_valid & (chk_job == k)):
                m.d.sync += [
                    j.gen.eq(cx.gen), j.n.eq(self.step(cx.length)),
                    j.rx.ptr.eq(cx.ptr), j.rx.addr.eq(cx.addr), j.rx.wrap.eq(cx.size_log2),
                    j.rx.loc.eq(rx_loc_r.data), j.tx.loc.eq(tx_loc_r.data),
                ]

        # -- engine requests: one sender, the jobs in turn --------------------------------------
        # A request, once offered, stays on offer until taken (at 64 bits it is several
        # flits): a dead job's request is withdrawn only if it was not offered yet.
        requests = (_Step.TX_REQ, _Step.ADJ_TX, _Step.ADJ_RX, _Step.RX_REQ, _Step.CLOSE)
        eng_hold, eng_held, eng_last = Signal(), Signal(jbits), Signal(jbits)
        wants, want_k = _first(m, [_one_of(s, requests) & ~d for s, d in zip(step, dead)],
                               after=eng_last)
        eng_k = Mux(eng_hold, eng_held, want_k)
        eng_offer = eng_hold | wants
        ej = _select(m, record, job, eng_k)
        e_step = _select(m, _Step, step, eng_k)
        handle = self.handle(ej.slot, ej.gen)
        taken = Signal()
        m.d.comb += taken.eq(eng_offer & job_tx.i_hdr.ready)
        with m.If(eng_offer):
            with m.Switch(e_step):
                with m.Case(_Step.TX_REQ):
                    self.app_request(m, job_tx, MsgType.TCP_TX_MSG_REQ, self.tcp_tx,
                                     flow=handle, length=ej.n)
                with m.Case(_Step.ADJ_TX):
                    self.app_request(m, job_tx, MsgType.TCP_TX_ADJUST_PTR, self.tcp_tx,
                                     flow=handle, ptr=ej.tx.ptr + ej.n)
                    count(m, c.bytes, Mux(taken, ej.n, 0))
                with m.Case(_Step.ADJ_RX):
                    self.app_request(m, job_tx, MsgType.TCP_RX_ADJUST_PTR, self.tcp_rx,
                                     flow=handle, ptr=ej.rx.ptr + ej.n)
                with m.Case(_Step.RX_REQ):
                    self.app_request(m, job_tx, MsgType.TCP_RX_MSG_REQ, self.tcp_rx,
                                     flow=handle, length=1)
                with m.Case(_Step.CLOSE):
                    self.app_request(m, job_tx, MsgType.TCP_CLOSE_REQ, self.tcp_tx, flow=handle)
                    count(m, c.closed, taken)
        with m.If(taken):
            m.d.sync += [eng_hold.eq(0), eng_last.eq(eng_k)]
        with m.Elif(eng_offer):
            m.d.sync += [eng_hold.eq(1), eng_held.eq(eng_k)]
        for k in range(nj):
            m.d.comb += sent[k].eq(taken & (eng_k == k))

        # -- memory requests: the oldest loaded chunk's store first, then loads ----------------
        out_store, out_drain = Signal(), Signal()   # a chunk's words go to the store / away
        mem_hold, mem_held_store, mem_held = Signal(), Signal(), Signal(jbits)
        first = loaded_q.o.payload
        first_dead = _select(m, 1, dead, first)
        chunk_ready = loaded_q.o.valid & buf.o_desc.valid & ~out_store & ~out_drain
        store_wanted = mem_hold & mem_held_store
        loads, load_k = _first(m, [(s == _Step.LOAD) & ~d for s, d in zip(step, dead)])
        to_store = Mux(mem_hold, mem_held_store, chunk_ready & ~first_dead)
        load_kk = Mux(mem_hold, mem_held, load_k)
        mem_offer = mem_hold | (chunk_ready & ~first_dead) | loads
        sj = _select(m, record, job, first)
        lj = _select(m, record, job, load_kk)
        with m.If(to_store):
            self.mem_request(m, io.mem_tx, store=True, loc=sj.tx.loc, addr=sj.tx.addr,
                             size=sj.n, wrap=sj.tx.wrap)
        with m.Elif(mem_offer):
            self.mem_request(m, io.mem_tx, store=False, loc=lj.rx.loc, addr=lj.rx.addr,
                             size=lj.n, wrap=lj.rx.wrap)
        mem_taken = Signal()
        m.d.comb += mem_taken.eq(mem_offer & io.mem_tx.i_hdr.ready)
        with m.If(mem_taken):
            m.d.sync += mem_hold.eq(0)
        with m.Elif(mem_offer):
            m.d.sync += [mem_hold.eq(1), mem_held_store.eq(to_store), mem_held.eq(load_kk)]
        drain = chunk_ready & first_dead & ~store_wanted
        with m.If((mem_taken & to_store) | drain):
            m.d.comb += [buf.o_desc.ready.eq(1), loaded_q.o.ready.eq(1)]
            m.d.sync += [out_store.eq(~drain), out_drain.eq(drain)]
        for k in range(nj):
            m.d.comb += [
                load_sent[k].eq(mem_taken & ~to_store & (load_kk == k)),
                store_sent[k].eq(mem_taken & to_store & (first == k)),
                drained[k].eq(drain & (first == k)),
            ]
        # The chunk's words: to the store, or discarded for a dead job.
        with m.If(out_store):
            connect(m, buffer=buf.o, sender=io.mem_tx.i_data)
        with m.Elif(out_drain):
            m.d.comb += buf.o.ready.eq(1)
        with m.If(buf.o.valid & buf.o.ready & buf.o.payload.last):
            m.d.sync += [out_store.eq(0), out_drain.eq(0)]

        # -- memory acks (always taken), found by the request they answer ----------------------
        is_load, load_hit = _first(m, [
            self.mem_ack(mem, LOAD_MEM_ACK, s == _Step.WAIT_LOAD, j.rx.addr, j.n, j.rx.wrap)
            for s, j in zip(step, job)])
        is_store, store_hit = _first(m, [
            self.mem_ack(mem, STORE_MEM_ACK, s == _Step.WAIT_STORE, j.tx.addr, j.n, j.tx.wrap)
            for s, j in zip(step, job)])
        ack_k = Mux(is_load, load_hit, store_hit)
        ack_dead = _select(m, 1, dead, ack_k)
        ack_slot = _select(m, unsigned(sb), [j.slot for j in job], ack_k)
        to_buf = Signal()           # the payload coming is a job's loaded bytes
        for k in range(nj):
            m.d.comb += [loaded[k].eq(is_load & (load_hit == k)),
                         stored[k].eq(is_store & (store_hit == k))]
        with m.If(is_load | is_store):
            with m.If(mem.meta.error):
                # The flow is given up (a job whose connection has not ended holds it).
                count(m, c.mem_errors)
                with m.If(~ack_dead):
                    m.d.sync += live.bit_select(ack_slot, 1).eq(0)
            with m.Elif(is_load):
                m.d.comb += [loaded_q.i.valid.eq(1), loaded_q.i.payload.eq(load_hit)]
                m.d.sync += to_buf.eq(1)
        with m.Elif(mem.valid):
            m.d.comb += drop_mem.eq(1)
            m.d.sync += to_buf.eq(0)
        self.mem_data_to(m, mem, to_buf, buf.i)

        # -- each job's steps ------------------------------------------------------------------
        for k, s in enumerate(step):
            eng_mine = eng_hold & (eng_held == k)
            mem_mine = mem_hold & ~mem_held_store & (mem_held == k)
            with m.Switch(s):
                with m.Case(_Step.FREE):
                    with m.If(pop & (free_k == k)):
                        m.d.sync += s.eq(_Step.CHECK)
                with m.Case(_Step.CHECK):
                    m.d.sync += s.eq(chk_next)
                with m.Case(*requests):
                    with m.If(sent[k]):
                        with m.Switch(s):
                            for now, after in _AFTER.items():
                                with m.Case(now):
                                    m.d.sync += s.eq(after)
                    with m.Elif(dead[k] & ~eng_mine):
                        m.d.sync += s.eq(_Step.FREE)
                with m.Case(_Step.WAIT_TX):
                    with m.If(dead[k] | tx_fail[k]):    # the engine will not answer / said no
                        m.d.sync += s.eq(_Step.FREE)
                    with m.Elif(tx_ok[k]):
                        m.d.sync += s.eq(_Step.LOAD)
                with m.Case(_Step.LOAD):
                    with m.If(load_sent[k]):
                        m.d.sync += s.eq(_Step.WAIT_LOAD)
                    with m.Elif(dead[k] & ~mem_mine):
                        m.d.sync += s.eq(_Step.FREE)
                with m.Case(_Step.WAIT_LOAD):
                    with m.If(loaded[k] & mem.meta.error):
                        m.d.sync += s.eq(_Step.FREE)
                    with m.Elif(loaded[k]):
                        m.d.sync += s.eq(_Step.LOADED)
                with m.Case(_Step.LOADED):
                    with m.If(store_sent[k]):
                        m.d.sync += s.eq(_Step.WAIT_STORE)
                    with m.Elif(drained[k]):
                        m.d.sync += s.eq(_Step.FREE)
                with m.Case(_Step.WAIT_STORE):
                    with m.If(stored[k] & (mem.meta.error | dead[k])):
                        m.d.sync += s.eq(_Step.FREE)
                    with m.Elif(stored[k]):
                        m.d.sync += s.eq(_Step.ADJ_TX)

        # -- engine messages (always taken; after the jobs, so that a new connection's `live`
        # wins over a job forgetting the slot's previous one) ------------------------------------
        table.track(m, a)
        kill, announced = table.kill, table.announced   # the connection in a.slot is over
        m.d.comb += ended_in.eq(table.ended)
        m.d.sync += [c.flows.eq(c.flows + announced),
                     c.send_notifs.eq(c.send_notifs + table.send_ring)]
        for k, j in enumerate(job):
            with m.If(kill & active[k] & (j.slot == a.slot)):
                m.d.sync += dead[k].eq(1)
        tx_wait = [(s == _Step.WAIT_TX) & ~d & (meta.flow == self.handle(j.slot, j.gen))
                   for s, d, j in zip(step, dead, job)]
        with m.If(a.valid & ~table.handled):
            with m.Switch(a.type):
                with m.Case(MsgType.TCP_TX_MSG_RESP):
                    ok = meta.status == Status.OK
                    for k, j in enumerate(job):
                        m.d.comb += [tx_ok[k].eq(tx_wait[k] & ok),
                                     tx_fail[k].eq(tx_wait[k] & ~ok)]
                        with m.If(tx_wait[k]):
                            m.d.sync += [j.tx.ptr.eq(meta.ptr), j.tx.addr.eq(meta.addr),
                                         j.tx.wrap.eq(meta.size_log2)]
                    with m.If(~Cat(tx_wait).any()):
                        m.d.comb += drop_app.eq(1)
                    with m.Elif(~ok):           # the connection is over: forget it
                        m.d.comb += ended_tx.eq(1)
                        m.d.sync += live.bit_select(a.slot, 1).eq(0)
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
