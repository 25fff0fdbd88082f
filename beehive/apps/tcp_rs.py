"""Reed-Solomon (8,2) encoding over TCP: a client sends the 8 data shards of a request, the
tile answers with the 2 parity shards, on the same connection.

An application of the TCP engine (:mod:`beehive.proto.tcp`), built on
:class:`~beehive.apps.tcp_app.TcpAppTile`, in front of the streaming encoder
:class:`~beehive.apps.reed_solomon.RsEncoder`. On the byte stream there is no header: with
*S* = ``shard_bytes``, a request is exactly ``8 * S`` bytes (data shards 0 to 7 back to back)
and its answer exactly ``2 * S`` bytes (parity shards 0 and 1)::

    client ─▶ [shard_0 .. shard_7][shard_0 .. shard_7] ...    (8 * S bytes each)
           ◀─ [parity_0 parity_1][parity_0 parity_1] ...      (2 * S bytes each)

Byte *k* of the parity shards is ``reedsolo.RSCodec(2).encode(column)[8:]`` of the column
``(shard_0[k], ..., shard_7[k])`` (:func:`~beehive.apps.reed_solomon.encode_shards`). Requests
are answered in order on each connection; several connections are served in the order the
engine reports their bytes (every whole request of a report in a row). A connection whose
peer closes (EOF) is closed once every whole request is answered; the bytes of a partial
request left at EOF are dropped (``truncated``).

Messages of the tile (all with :data:`~beehive.proto.tcp.app.APP_META` or ``MEM_META``):

==========================  ====================  ==========================================
in (``dst_fbits``)          from                  what the tile does
==========================  ====================  ==========================================
``TCP_NEW_FLOW_NOTIF``      RX tile               RECEIVE: a new connection, ask for a
(LOCAL0)                                          request (``TCP_RX_MSG_REQ``, ``8 * S``);
                                                  SEND: its send ring
``TCP_RX_MSG_RESP``         RX tile               OK or EOF: bytes to read (the flow
(LOCAL0)                                          queued); RESET, TIMEOUT, CLOSED: the
                                                  connection is over, forgotten
``TCP_TX_MSG_RESP``         TX tile               room in the send ring for an answer
(LOCAL0)
``LOAD_MEM_ACK`` (LOCAL1)   receive ring's memory a request's bytes: straight into the encoder
``STORE_MEM_ACK`` (LOCAL1)  send ring's memory    an answer is written
==========================  ====================  ==========================================

Per request (*R* = ``8 * S``, *P* = ``2 * S``), in two stages::

    front: RX_MSG_RESP(OK or EOF, ptr p, addr a, length L >= R)
        ─▶ LOAD_MEM(a, R) ◀─ LOAD_MEM_ACK(R bytes ─▶ encoder ─▶ parity buffer)
        (L >= 2R: the next request at p + R straight away, once these bytes are in)
    back:  ─▶ TX_MSG_REQ(P) ◀─ TX_MSG_RESP(OK, ptr q, addr b, length F)
        (F >= 2P: the connection's next answer goes to q + P without asking again)
        ─▶ RX_ADJUST_PTR(p + R) [─▶ RX_MSG_REQ(R), after the last request L held]
        ─▶ STORE_MEM(b, P, the parity) ◀─ STORE_MEM_ACK ─▶ TX_ADJUST_PTR(q + P)
    RX_MSG_RESP(EOF, length < R) ─▶ CLOSE_REQ          (length > 0: counted in truncated)

The front loads one request at a time, every whole request a response reported, and hands
each to the back once its load is answered; the back finishes requests in order, asking for
room in the send ring while the parity is still being computed, so one request's parity is
stored (and its pointers moved) while the next ones' bytes are loaded and encoded.

The inputs never wait (``streaming = False``): engine messages and memory acks are taken the
cycle they come, and a load's words go straight into the encoder at one word a cycle. That
holds because a load is sent only while at most two earlier answers are not yet out of the
tile: the encoder's answer then always has room in the buffer of two answers (``4 * S``
bytes) before the load's final shard arrives. **Throughput**: the encoder takes ``width // 8``
bytes a cycle (64 B/cycle at 512 bits), so a request costs at least ``8 * S / (width // 8)``
cycles; the round trips to the engine and the memories overlap with encoding. Measured against
the tests' engine model (``tests/apps/tcp_model.py``, memory acks at once, no stalls), 4 KiB
requests (``S`` = 512) back to back: 68 cycles each at 512 bits (64 words of encoding: 60
B/cycle), 522 at 64 bits (512 words), on one connection or several; with memory acks 20
cycles late, 87 and 541 (see ``docs/reed-solomon.md``). **Latency** (an idle tile, a
request's bytes all in the ring): ``LOAD_MEM`` 4 cycles after the ``TCP_RX_MSG_RESP`` (queue,
response read, slot check), the parity's first word 2 cycles after the load's last word (the
encoder's), then ``RX_ADJUST_PTR``, ``RX_MSG_REQ`` and ``STORE_MEM`` back to back, the room
in the send ring asked for meanwhile; measured for a lone 4 KiB request, from the
``TCP_RX_MSG_RESP`` in to the store's last flit out: 92 cycles at 512 bits, 676 at 64 bits.

What it drops, each counted: the bytes of a partial request at the peer's FIN
(``truncated``); the request under way of a connection the engine ends (``ended``: its
parity discarded once the memory has answered); on a memory ack with ``error`` set
(``mem_errors``) a load's connection is closed, a store's forgotten; messages that match
nothing (``dropped``). **Limit**: a connection whose peer stops reading holds the back while it
waits for room in its send ring, and with it the tile's other connections, until the engine
ends it (as :class:`~beehive.apps.tcp_datagram.TcpDatagramTile` serves one record at a time).
"""

from typing import Any

from amaranth import Cat, Module, Signal
from amaranth.lib import data
from amaranth.lib.wiring import connect

from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.layout import payload_layout
from apiary.stream.queue import Queue
from apiary.tile import TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import GEN_BITS
from ..proto.tcp.config import TcpConfig
from .reed_solomon import RsEncoder, check_shard_bytes, encode_shards
from .tcp_app import MEM_LOC, RX_CONTEXT, FlowTable, TcpAppTile, app_outputs
from .tcp_steps import FlowPicker, close_state, ring_add, take_tx_answer
from apiary.stream.counters import count


__all__ = ["TcpRsTile", "DATA_SHARDS", "PARITY_SHARDS", "DEFAULT_SHARD_BYTES", "answer_stream"]


#: Shards of a request and of its answer.
DATA_SHARDS, PARITY_SHARDS = 8, 2
#: Bytes per shard by default: a 4 KiB request.
DEFAULT_SHARD_BYTES = 512


def answer_stream(stream: bytes, shard_bytes: int = DEFAULT_SHARD_BYTES) -> bytes:
    """What the tile sends back for the bytes ``stream`` of a connection: the parity shards of
    each whole request in it, back to back (:func:`~beehive.apps.reed_solomon.encode_shards`);
    bytes after the last whole request have no answer."""
    size = DATA_SHARDS * shard_bytes
    out: list[bytes] = []
    for start in range(0, len(stream) - size + 1, size):
        request = stream[start:start + size]
        out += encode_shards([request[i:i + shard_bytes] for i in range(0, size, shard_bytes)])
    return b"".join(out)


#: Answers the tile buffers between the encoder and the stores.
_ANSWERS = 2
#: Requests the back holds at most: those of the loads in `pending` (``_ANSWERS + 1``), and
#: one whose answer is out but not yet acknowledged.
_JOBS = _ANSWERS + 2

#: Where a request's answer goes: the send ring's pointer and address of its first byte.
_RING = data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6, "loc": MEM_LOC})


class TcpRsTile(TcpAppTile):
    """Answer each ``8 * shard_bytes``-byte request of a TCP connection with its two
    Reed-Solomon parity shards (see the module docstring for the protocol and timing).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` (fbits LOCAL0); ``"rx_mem"`` and
        ``"tx_mem"`` may be declared for the deadlock check.
    config : TcpConfig
        The engine's: ``flows`` sizes the per-flow state; a request must fit in a receive
        ring and its answer in a send ring.
    shard_bytes : int
        Bytes per shard *S*: a positive multiple of ``width // 8`` (default 512).
    fault_after : int or None
        Inject a fault for fault-isolation experiments (:class:`~beehive.apps.tcp_app.
        TcpAppTile`): answer number ``fault_after`` (0 the first) is stored out of its ring.

    Cost: the encoder (:class:`~beehive.apps.reed_solomon.RsEncoder`: ``8 * S`` bytes of
    memories) and a buffer of two answers (``4 * S`` bytes); what
    :class:`~beehive.apps.tcp_app.FlowTable` keeps per flow; four requests' records for the back
    (about 90 bits each) and the current one's (about 200 bits).

    Raises
    ------
    ValueError
        If ``shard_bytes`` is not a multiple of a word, or a request or answer does not fit in
        its ring.
    """

    #: Two senders of engine requests (the receive side's, the send side's).
    outputs = app_outputs(2)

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 shard_bytes: int = DEFAULT_SHARD_BYTES, fault_after: int | None = None) -> None:
        super().__init__(env, config=config, fault_after=fault_after, counters={
            "flows": "connections announced (receive-buffer notifications)",
            "requests": "requests answered (parity written to the send ring)",
            "closed": "connections the tile closed (after the peer's FIN, or a load's error)",
            "ended": "connections the engine reported reset, timed out or closed",
            "truncated": "partial requests dropped at the peer's FIN",
            "mem_errors": "memory acks with error set",
            "dropped": "messages that match nothing (stray, stale, unknown, malformed)",
        })
        check_shard_bytes(self.env.width, shard_bytes, f"TcpRsTile {self.env.name!r}")
        cfg = self.config
        if DATA_SHARDS * shard_bytes > cfg.rx_ring or PARITY_SHARDS * shard_bytes > cfg.tx_ring:
            raise ValueError(f"a request of {DATA_SHARDS} x {shard_bytes} bytes must fit in a "
                             f"receive ring ({cfg.rx_ring}) and its {PARITY_SHARDS} parity "
                             f"shards in a send ring ({cfg.tx_ring})")
        self.shard_bytes = shard_bytes
        #: Bytes of a request and of its answer.
        self.request_bytes = DATA_SHARDS * shard_bytes
        self.answer_bytes = PARITY_SHARDS * shard_bytes

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, flows, sb = self.env.width, self.config.flows, self.slot_bits
        req, ans = self.request_bytes, self.answer_bytes
        c = self.counters
        io = self.ports(m)
        front_tx, back_tx = io.app_tx
        a, mem = io.app, io.mem

        # -- per-flow state ----------------------------------------------------------------------
        table = FlowTable(m, flows, sb)
        live = table.live
        gen_back = table.gens.read_port(domain="comb")
        rx_loc_r = table.rx_locs.read_port(domain="comb")
        tx_loc_r = table.tx_locs.read_port(domain="comb")
        drop_app, drop_mem, ended_tx = Signal(), Signal(), Signal()
        self.count_dropped(m, io, drop_app, drop_mem, table.drop)
        m.d.sync += [c.ended.eq(c.ended + (table.ended | ended_tx)),
                     c.flows.eq(c.flows + table.announced)]

        # -- the encoder and the buffer of its answers -------------------------------------------
        m.submodules.encoder = enc = RsEncoder(width, self.shard_bytes, data=DATA_SHARDS,
                                               parity=PARITY_SHARDS)
        m.submodules.parity = parity = Queue(payload_layout(width),
                                                _ANSWERS * enc.shard_words * PARITY_SHARDS)
        connect(m, encoder=enc.o, parity=parity.i)
        pending = Signal(range(_ANSWERS + 2))  # loads whose answer is not out of `parity`
        load_sent, answer_gone = Signal(), Signal()
        m.d.sync += pending.eq(pending + load_sent - answer_gone)

        # -- memory requests: one sender, loads before stores --------------------------------------
        load_want, store_want = Signal(), Signal()
        hold, held_store = Signal(), Signal()
        is_store = Signal()
        m.d.comb += is_store.eq(hold & held_store | ~hold & store_want & ~load_want)
        mem_offer = hold | load_want | store_want
        mem_taken = mem_offer & io.mem_tx.i_hdr.ready
        with m.If(mem_taken):
            m.d.sync += hold.eq(0)
        with m.Elif(mem_offer):
            m.d.sync += [hold.eq(1), held_store.eq(is_store)]
        m.d.comb += load_sent.eq(mem_taken & ~is_store)

        # -- the back's requests, oldest first: one per answer in `pending`, and the oldest's
        # whose answer is out but not yet acknowledged -------------------------------------------
        job_layout = data.StructLayout({"slot": sb, "gen": GEN_BITS, "rx_ptr": 32, "ask": 1})
        jobs = [Signal(job_layout, name=f"job{k}") for k in range(_JOBS)]
        job_v = [Signal(name=f"job{k}_valid") for k in range(_JOBS)]
        push, done = Signal(), Signal()
        new_job = Signal(job_layout)
        with m.If(done):
            m.d.sync += [dst.eq(src) for dst, src in zip(jobs, jobs[1:])]
            m.d.sync += [dst.eq(src) for dst, src in zip(job_v, [*job_v[1:], 0])]
        with m.If(push):
            index = sum(job_v) - done
            for k in range(_JOBS):
                with m.If(index == k):
                    m.d.sync += [jobs[k].eq(new_job), job_v[k].eq(1)]

        def slot_jobs(slot: Any, other_gen: Any = None) -> Any:
            """Whether the back holds a request of ``slot`` (of a generation other than
            ``other_gen``, if given)."""
            return Cat(v & (j.slot == slot) & (1 if other_gen is None else j.gen != other_gen)
                       for v, j in zip(job_v, jobs)).any()

        # ======== front: the requests a response reported, one load each ========================
        slot = Signal(sb)
        gen = Signal(GEN_BITS)
        handle = self.handle(slot, gen)
        dead = Signal()             # the front's connection ended under it
        front_busy = Signal()
        rx = Signal(RX_CONTEXT)
        l_wait = Signal()           # the front's load is awaiting its ack
        to_enc = Signal()           # the words coming are the load's
        picker = FlowPicker(m, table, slot)
        m.d.comb += rx_loc_r.addr.eq(slot)
        with m.If(table.kill & front_busy & (a.slot == slot)):
            m.d.sync += dead.eq(1)
        loaded = self.mem_ack(mem, LOAD_MEM_ACK, l_wait, rx.addr, req, rx.size_log2)
        drop_front = Signal()       # the front's flow is forgotten
        with m.If(drop_front):
            m.d.sync += live.bit_select(slot, 1).eq(0)

        def whole(cx: Any) -> None:
            m.next = "SLOT"

        with m.FSM(name="front"):
            picker.states(m, gen=gen, dead=dead, busy=front_busy, rx=rx, need=req, whole=whole,
                          ask="ASK", close="CLOSING", truncated=c.truncated)
            # (a request on offer is never withdrawn: at 64 bits it is several flits, so `dead`
            # is looked at before one is offered, not while)
            with m.State("SLOT"):           # the slot's earlier connection is done with first
                m.d.comb += front_busy.eq(1)
                with m.If(dead):
                    m.next = "IDLE"
                with m.Elif(~slot_jobs(slot, gen)):
                    m.next = "LOAD"
            with m.State("LOAD"):           # once the encoder can take it without stalling
                m.d.comb += front_busy.eq(1)
                with m.If(hold & ~held_store):
                    m.d.comb += load_want.eq(1)
                with m.Elif(dead):
                    m.next = "IDLE"
                with m.Elif(pending <= _ANSWERS):
                    m.d.comb += load_want.eq(1)
                with m.If(load_sent):
                    m.d.sync += l_wait.eq(1)
                    m.next = "WAIT_LOAD"
            with m.State("WAIT_LOAD"):      # (the ack comes even if the connection ended)
                m.d.comb += front_busy.eq(1)
                more = rx.length >= 2 * req         # the response reported another request
                with m.If(loaded):
                    m.d.sync += l_wait.eq(0)
                    m.next = "IDLE"
                    with m.If(mem.meta.error):
                        count(m, c.mem_errors)
                        with m.If(~dead):
                            m.next = "CLOSING"
                    with m.Else():
                        m.d.comb += [push.eq(1), new_job.slot.eq(slot), new_job.gen.eq(gen),
                                     new_job.rx_ptr.eq(rx.ptr), new_job.ask.eq(~more)]
                        m.d.sync += [to_enc.eq(1), rx.ptr.eq(rx.ptr + req),
                                     rx.addr.eq(ring_add(rx.addr, req, rx.size_log2)),
                                     rx.length.eq(rx.length - req)]
                        with m.If(more & ~dead):
                            m.next = "NEXT"
            with m.State("NEXT"):           # the flow's next load once this one's words are in
                m.d.comb += front_busy.eq(1)
                with m.If(dead):
                    m.next = "IDLE"
                with m.Elif(~to_enc):
                    m.next = "LOAD"
            with m.State("ASK"):            # a new connection's first request, or the rest
                m.d.comb += front_busy.eq(1)
                with m.If(self.app_request(m, front_tx, MsgType.TCP_RX_MSG_REQ, self.tcp_rx,
                                           flow=handle, length=req)):
                    m.next = "IDLE"
            with m.State("CLOSING"):        # every answer of the flow's out first
                m.d.comb += front_busy.eq(1)
                with m.If(dead):
                    m.next = "IDLE"
                with m.Elif(~slot_jobs(slot)):
                    m.next = "CLOSE"
            close_state(m, self, front_tx, handle=handle, dead=dead, busy=front_busy,
                        forget=drop_front, closed=c.closed, after="IDLE")
        with m.If(load_want & ~is_store):
            self.mem_request(m, io.mem_tx, store=False, loc=rx_loc_r.data, addr=rx.addr,
                             size=req, wrap=rx.size_log2)
        # An error ack carries no words: its answer will never be.
        m.d.comb += answer_gone.eq((parity.o.valid & parity.o.ready & parity.o.payload.last)
                                   | (loaded & mem.meta.error))

        # The load's words go to the encoder; any other ack's are thrown away.
        with m.If(mem.valid & ~loaded):
            m.d.sync += to_enc.eq(0)
        self.mem_data_to(m, mem, to_enc, enc.i)

        # ======== back: pointers, room, the parity stored, request by request ====================
        job = jobs[0]
        b_dead = Signal()           # its connection ended under it
        b_busy = Signal()
        tx = Signal(_RING)
        tx_wait, tx_got = Signal(), Signal()
        credit = Signal()           # tx is where the next answer of flow tx_for goes, and
        tx_for = Signal(16)         # tx_left bytes of room are granted from there
        tx_left = Signal(32)
        s_wait, s_got, s_err = Signal(), Signal(), Signal()
        out_store, out_drain = Signal(), Signal()
        b_handle = self.handle(job.slot, job.gen)
        m.d.comb += [gen_back.addr.eq(job.slot), tx_loc_r.addr.eq(job.slot)]
        with m.If(out_store):
            connect(m, parity=parity.o, sender=io.mem_tx.i_data)
        with m.Elif(out_drain):
            m.d.comb += parity.o.ready.eq(1)
        with m.If(parity.o.valid & parity.o.ready & parity.o.payload.last):
            m.d.sync += [out_store.eq(0), out_drain.eq(0)]
        store_ack = self.mem_ack(mem, STORE_MEM_ACK, s_wait, tx.addr, ans, tx.wrap)
        with m.If(store_ack):
            m.d.sync += [s_wait.eq(0), s_got.eq(1), s_err.eq(mem.meta.error)]
        with m.If(mem.valid & ~loaded & ~store_ack):
            m.d.comb += drop_mem.eq(1)
        b_current = live.bit_select(job.slot, 1) & (gen_back.data == job.gen) & ~b_dead

        with m.FSM(name="back"):
            with m.State("IDLE"):
                with m.If(job_v[0]):
                    m.d.sync += b_dead.eq(0)
                    m.next = "TX_REQ"
                    with m.If(credit & (tx_for == b_handle) & (tx_left >= ans)):
                        m.next = "ENCODED"          # room left from the last response
            with m.State("TX_REQ"):         # room for the answer, asked before it is there
                m.d.comb += b_busy.eq(1)
                with m.If(self.app_request(m, back_tx, MsgType.TCP_TX_MSG_REQ, self.tcp_tx,
                                           flow=b_handle, length=ans)):
                    m.d.sync += tx_wait.eq(1)
                    m.next = "WAIT_TX"
            with m.State("WAIT_TX"):
                m.d.comb += b_busy.eq(1)
                with m.If(b_dead | (~tx_wait & ~tx_got)):  # ended, or answered not OK
                    m.d.sync += [tx_wait.eq(0), tx_got.eq(0), out_drain.eq(1)]
                    m.next = "DRAIN"
                with m.Elif(tx_got):
                    m.d.sync += [tx_got.eq(0), tx.loc.eq(tx_loc_r.data), credit.eq(1),
                                 tx_for.eq(b_handle)]
                    m.next = "ENCODED"
            with m.State("ENCODED"):        # its bytes are all read once its parity comes
                m.d.comb += b_busy.eq(1)
                with m.If(parity.o.valid):
                    with m.If(b_current):
                        m.next = "ADJUST_RX"
                    with m.Else():
                        m.d.sync += out_drain.eq(1)
                        m.next = "DRAIN"
            with m.State("ADJUST_RX"):
                m.d.comb += b_busy.eq(1)
                with m.If(self.app_request(m, back_tx, MsgType.TCP_RX_ADJUST_PTR, self.tcp_rx,
                                           flow=b_handle, ptr=job.rx_ptr + req)):
                    m.next = "STORE"
                    with m.If(job.ask):
                        m.next = "ASK"
            with m.State("ASK"):            # the connection's next request
                m.d.comb += b_busy.eq(1)
                with m.If(self.app_request(m, back_tx, MsgType.TCP_RX_MSG_REQ, self.tcp_rx,
                                           flow=b_handle, length=req)):
                    m.next = "STORE"
            with m.State("STORE"):
                m.d.comb += [b_busy.eq(1), store_want.eq(1)]
                with m.If(mem_taken & is_store):
                    m.d.sync += [out_store.eq(1), s_wait.eq(1), s_got.eq(0)]
                    m.next = "WAIT_STORE"
            with m.State("WAIT_STORE"):
                m.d.comb += b_busy.eq(1)
                with m.If(s_got):
                    m.d.sync += s_got.eq(0)
                    m.next = "IDLE"
                    with m.If(s_err):
                        m.d.sync += [c.mem_errors.eq(c.mem_errors + 1), credit.eq(0)]
                        with m.If(b_current):       # the flow is given up
                            m.d.sync += live.bit_select(job.slot, 1).eq(0)
                        m.d.comb += done.eq(1)
                    with m.Elif(b_current):
                        m.next = "ADJUST_TX"
                    with m.Else():
                        m.d.comb += done.eq(1)
            with m.State("ADJUST_TX"):
                m.d.comb += b_busy.eq(1)
                with m.If(self.app_request(m, back_tx, MsgType.TCP_TX_ADJUST_PTR, self.tcp_tx,
                                           flow=b_handle, ptr=tx.ptr + ans)):
                    m.d.comb += done.eq(1)
                    m.d.sync += [tx.ptr.eq(tx.ptr + ans), tx_left.eq(tx_left - ans),
                                 tx.addr.eq(ring_add(tx.addr, ans, tx.wrap))]
                    count(m, c.requests)
                    m.next = "IDLE"
            with m.State("DRAIN"):          # the parity of a connection that ended: away
                with m.If(~out_drain):
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"
        with m.If(is_store):
            self.mem_request(m, io.mem_tx, store=True, loc=tx.loc, addr=tx.addr, size=ans,
                             wrap=tx.wrap)
        with m.If(table.kill & b_busy & (a.slot == job.slot)):
            m.d.sync += b_dead.eq(1)
        with m.If(table.kill & (a.slot == tx_for[:sb])):
            m.d.sync += credit.eq(0)

        # -- engine messages, after the stages: a new connection's `live` wins over the old one
        # being forgotten ----------------------------------------------------------------------
        table.track(m, a)
        take_tx_answer(m, a, table, wait=tx_wait, got=tx_got, handle=b_handle, ring=tx,
                       ended=ended_tx, drop=drop_app, left=tx_left)
        return m
