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
        [─▶ TX_MSG_REQ(P), the flow left until ◀─ TX_MSG_RESP(OK, ptr q, addr b, length F)
            queues it again: unless room for P is held from an earlier answer]
        ─▶ LOAD_MEM(a, R) ◀─ LOAD_MEM_ACK(R bytes ─▶ encoder ─▶ parity buffer)
        (L >= 2R and room for another P: the next request at p + R straight away, once
        these bytes are in, its answer at q + P)
    back:  ─▶ RX_ADJUST_PTR(p + R) [─▶ RX_MSG_REQ(R), after the last request served]
        ─▶ STORE_MEM(b, P, the parity) ◀─ STORE_MEM_ACK ─▶ TX_ADJUST_PTR(q + P)
    RX_MSG_RESP(EOF, length < R) ─▶ CLOSE_REQ          (length > 0: counted in truncated)

The front finds room for a request's answer before it loads the request, and loads one
request at a time, every whole request a response reported while the room lasts; it hands
each to the back once its load is answered, with the place of its answer in the send ring. A
flow without room asks the engine for it and is left: the front serves the other flows
meanwhile, and the :class:`~beehive.apps.tcp_app.FlowTable` queues the flow again when the
engine's answer comes (it asks only once its earlier answers are all handed over, so that the
engine's write pointer is where its next answer goes). The back finishes requests in order and
never waits for a peer, so one request's parity is stored (and its pointers moved) while the
next ones' bytes are loaded and encoded, and a connection whose peer stops reading holds up
no other. (The front
is :class:`_Front`, a :class:`~beehive.apps.tcp_steps.FlowServer`; the back :class:`_Back`,
the requests between them in :class:`_BackQueue`; the connections are kept by a
:class:`~beehive.apps.tcp_app.FlowTable`.)

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
request's bytes all in the ring): ``TCP_TX_MSG_REQ`` for the answer's room 4 cycles after the
``TCP_RX_MSG_RESP`` (queue, response read, slot check) unless room is held, ``LOAD_MEM`` once
its answer has queued the flow again, the parity's first word 2 cycles after the load's last
word (the encoder's), then ``RX_ADJUST_PTR``, ``RX_MSG_REQ`` and ``STORE_MEM`` back to back;
measured
for a lone 4 KiB request, from the ``TCP_RX_MSG_RESP`` in to the store's last flit out: 100
cycles at 512 bits, 689 at 64 bits (92 and 676 when the room was asked for beside the
encoding, before 2026-12-02).

What it drops, each counted: the bytes of a partial request at the peer's FIN
(``truncated``); the request under way of a connection the engine ends (``ended``: its
parity discarded once the memory has answered); on a memory ack with ``error`` set
(``mem_errors``) a load's connection is closed, a store's forgotten; messages that match
nothing (``dropped``).
"""

from typing import Any

from amaranth import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out, connect

from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.layout import payload_layout
from apiary.stream.queue import Queue
from apiary.tile import TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import GEN_BITS
from ..proto.tcp.config import TcpConfig
from .reed_solomon import RsEncoder, check_shard_bytes, encode_shards
from .tcp_app import (MEM_LOC, TABLE_MEMORIES, FlowTable, Requests, TcpAppTile, app_outputs,
                      engine_message, handle_of, mem_ack, mem_acks, read_port)
from .tcp_steps import AckWait, ChunkOut, FlowServer, HeldOffer, ring_add


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


#: A request the back holds: its flow, where it starts in the receive ring, whether the
#: connection's next request is to be asked for once its pointer is moved, and where its
#: answer goes in the send ring (room the front found for it).
def _job_layout(slot_bits: int) -> data.StructLayout:
    return data.StructLayout({"slot": slot_bits, "gen": GEN_BITS, "rx_ptr": 32, "ask": 1,
                              "tx_ptr": 32, "tx_addr": 48, "tx_wrap": 6})


def _queue_push(slot_bits: int) -> wiring.Signature:
    """From :class:`_Front` (the ``Out`` side) to :class:`_BackQueue`: ``push`` a request
    (``job``); whether a request of flow slot ``slot`` is held (``slot_busy``), one of that slot
    of another generation than ``gen`` (``slot_other``: a connection before the current one)."""
    return wiring.Signature({"push": Out(1), "job": Out(_job_layout(slot_bits)),
                             "slot": Out(slot_bits), "gen": Out(GEN_BITS),
                             "slot_busy": In(1), "slot_other": In(1)})


def _queue_head(slot_bits: int) -> wiring.Signature:
    """From :class:`_BackQueue` (the ``Out`` side) to :class:`_Back`: the oldest request
    (``job``, while ``valid``), taken away with ``done``."""
    return wiring.Signature({"job": Out(_job_layout(slot_bits)), "valid": Out(1),
                             "done": In(1)})


class _BackQueue(wiring.Component):
    """The back's requests, oldest first (at most ``_JOBS``; never more are pushed): ``front``
    (:func:`_queue_push`) adds one from the next cycle, ``head.done`` (:func:`_queue_head`)
    takes ``head.job`` away (both may come together); ``front.slot_busy`` and
    ``front.slot_other`` look up the requests held. Registers, and combinational lookups."""

    def __init__(self, slot_bits: int) -> None:
        super().__init__({"front": In(_queue_push(slot_bits)), "head": Out(_queue_head(slot_bits))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        front, head = self.front, self.head
        layout = front.job.shape()
        jobs = [Signal(layout, name=f"job{k}") for k in range(_JOBS)]
        job_v = [Signal(name=f"job{k}_valid") for k in range(_JOBS)]
        with m.If(head.done):
            m.d.sync += [dst.eq(src) for dst, src in zip(jobs, jobs[1:])]
            m.d.sync += [dst.eq(src) for dst, src in zip(job_v, [*job_v[1:], 0])]
        with m.If(front.push):
            index = sum(job_v) - head.done
            for k in range(_JOBS):
                with m.If(index == k):
                    m.d.sync += [jobs[k].eq(front.job), job_v[k].eq(1)]

        def slot_jobs(other_gen: Any = None) -> Any:
            return Cat(v & (j.slot == front.slot)
                       & (1 if other_gen is None else j.gen != other_gen)
                       for v, j in zip(job_v, jobs)).any()
        m.d.comb += [head.job.eq(jobs[0]), head.valid.eq(job_v[0]),
                     front.slot_busy.eq(slot_jobs()), front.slot_other.eq(slot_jobs(front.gen))]
        return m


class _Front(FlowServer):
    """The front: the requests a response reported, one ``LOAD_MEM`` each, as a
    :class:`~beehive.apps.tcp_steps.FlowServer` (``need`` a whole request). ``SLOT`` waits
    until the back holds no request of the slot's earlier connection; ``LOAD`` asks for the
    load (``load_want``, at ``load``) once the encoder can take it without stalling
    (``pending`` answers at most ``_ANSWERS``; a load already on offer, ``hold`` and not
    ``held_store``, stays); ``WAIT_LOAD`` takes its ack (``loaded``, from ``mem``): an error
    closes the connection (``mem_error``), else the request goes to the back (``queue``), its
    words to the encoder (``start_enc``; ``to_enc`` while they come) and, if the response
    reported another, ``NEXT`` loads it once these words are in; ``CLOSING`` waits until the
    back holds no request of the flow (``queue``), then ``CLOSE``."""

    fsm_name = "front"
    closing = "CLOSING"

    def __init__(self, requests: Requests, *, flows: int, slot_bits: int, req: int,
                 ans: int) -> None:
        super().__init__(requests, flows=flows, slot_bits=slot_bits, need=req, ask=req,
                         room=True, members={
            "mem": In(mem_acks()), "pending": In(range(_ANSWERS + 2)),
            "hold": In(1), "held_store": In(1), "load_sent": In(1),
            "load_want": Out(1), "load": Out(data.StructLayout({"addr": 48, "wrap": 6})),
            "loaded": Out(1), "mem_error": Out(1),
            "to_enc": In(1), "start_enc": Out(1), "queue": Out(_queue_push(slot_bits)),
        })
        self._req, self._ans = req, ans
        self.l_wait = Signal()      # the load is awaiting its ack

    def whole(self, m: Module, cx: Any) -> None:
        m.next = "SLOT"

    def before(self, m: Module) -> None:
        rx = self.rx
        m.d.comb += [self.queue.slot.eq(self.slot), self.queue.gen.eq(self.gen),
                     self.load.addr.eq(rx.addr), self.load.wrap.eq(rx.size_log2),
                     self.loaded.eq(mem_ack(self.mem, LOAD_MEM_ACK, self.l_wait, rx.addr,
                                            self._req, rx.size_log2))]

    def states(self, m: Module) -> None:
        dead, busy = self.dead, self.busy
        with m.State("SLOT"):           # the slot's earlier connection is done with first
            m.d.comb += busy.eq(1)
            with m.If(dead):
                m.next = "IDLE"
            with m.Elif(~self.queue.slot_other):
                m.next = "ROOM"
        # Room for the answer before the load: a flow whose peer stops reading waits here,
        # parked, and holds nothing the other flows need.
        self.room(m, self._ans, "LOAD", own=self.queue.slot_busy)
        with m.State("LOAD"):           # once the encoder can take it without stalling
            m.d.comb += busy.eq(1)
            with m.If(self.hold & ~self.held_store):
                m.d.comb += self.load_want.eq(1)
            with m.Elif(dead):
                m.next = "IDLE"
            with m.Elif(self.pending <= _ANSWERS):
                m.d.comb += self.load_want.eq(1)
            with m.If(self.load_sent):
                m.d.sync += self.l_wait.eq(1)
                m.next = "WAIT_LOAD"
        self._wait_load(m)
        with m.State("NEXT"):           # the flow's next load once this one's words are in
            m.d.comb += busy.eq(1)
            with m.If(dead):
                m.next = "IDLE"
            with m.Elif(~self.to_enc):
                m.next = "LOAD"
        with m.State("CLOSING"):        # every answer of the flow's out first
            m.d.comb += busy.eq(1)
            with m.If(dead):
                m.next = "IDLE"
            with m.Elif(~self.queue.slot_busy):
                m.next = "CLOSE"

    def _wait_load(self, m: Module) -> None:
        """``WAIT_LOAD``: the ack comes even if the connection ended."""
        rx, req, ans, dead, new, tx = self.rx, self._req, self._ans, self.dead, self.queue.job, \
            self.tx
        with m.State("WAIT_LOAD"):
            m.d.comb += self.busy.eq(1)
            # The response reported another request, and the room held takes its answer too
            # (else the back asks for the rest, and the flow finds room again).
            more = (rx.length >= 2 * req) & (self.tx_left >= 2 * ans)
            with m.If(self.loaded):
                m.d.sync += self.l_wait.eq(0)
                m.next = "IDLE"
                with m.If(self.mem.meta.error):
                    m.d.comb += self.mem_error.eq(1)
                    with m.If(~dead):
                        m.next = "CLOSING"
                with m.Else():
                    m.d.comb += [self.queue.push.eq(1), new.slot.eq(self.slot),
                                 new.gen.eq(self.gen),
                                 new.rx_ptr.eq(rx.ptr), new.ask.eq(~more), self.start_enc.eq(1),
                                 new.tx_ptr.eq(tx.ptr), new.tx_addr.eq(tx.addr),
                                 new.tx_wrap.eq(tx.wrap)]
                    m.d.sync += [rx.ptr.eq(rx.ptr + req),
                                 rx.addr.eq(ring_add(rx.addr, req, rx.size_log2)),
                                 rx.length.eq(rx.length - req), *self.reserve(ans)]
                    with m.If(more & ~dead):
                        m.next = "NEXT"


class _Back(wiring.Component):
    """The back: the requests of ``queue`` (:func:`_queue_head`), one at a time and in order,
    each finished with ``queue.done``. Each comes with the room the front found for its
    answer, so the back never waits for a peer: once its parity is there (``parity_valid``),
    ``RX_ADJUST_PTR`` (and ``RX_MSG_REQ`` after the last request a response held), the store
    (``store_want``, to ``tx``; ``store_issue`` as it is taken; its ack found in ``mem``,
    ``stored``) and ``TX_ADJUST_PTR`` (``answered``). The parity of a connection that ended
    goes away (``drain``, until ``draining`` is over); a store's error gives the flow up
    (``forget``, ``mem_error``)."""

    def __init__(self, requests: Requests, *, flows: int, slot_bits: int, req: int,
                 ans: int) -> None:
        self._requests, self._req, self._ans = requests, req, ans
        super().__init__({
            "app": In(engine_message(slot_bits)), "kill": In(1), "live": In(flows),
            "gen_cur": In(read_port(slot_bits, TABLE_MEMORIES["gens"])),
            "tx_loc": In(read_port(slot_bits, MEM_LOC)),
            "queue": In(_queue_head(slot_bits)),
            "app_tx": Out(requests.app_signature()), "handle": Out(16),
            "parity_valid": In(1), "drain": Out(1), "draining": In(1),
            "store_want": Out(1), "store_issue": In(1), "tx": Out(_RING),
            "mem": In(mem_acks()), "stored": Out(1),
            "forget": Out(1), "mem_error": Out(1), "answered": Out(1),
        })

    #: An engine request for the job's flow (``handle``) on ``app_tx``.
    request = FlowServer.request

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        job, tx, ans = self.queue.job, self.tx, self._ans
        m.submodules.store = store = AckWait()
        dead, busy = Signal(), Signal()
        current = Signal()          # the job's connection is still the slot's, and live
        m.d.comb += [
            self.handle.eq(handle_of(job.slot, job.gen)),
            self.gen_cur.addr.eq(job.slot), self.tx_loc.addr.eq(job.slot),
            tx.ptr.eq(job.tx_ptr), tx.addr.eq(job.tx_addr), tx.wrap.eq(job.tx_wrap),
            tx.loc.eq(self.tx_loc.data),
            self.stored.eq(mem_ack(self.mem, STORE_MEM_ACK, store.wait, tx.addr, ans, tx.wrap)),
            store.match.eq(self.stored), store.error.eq(self.mem.meta.error),
            store.issue.eq(self.store_issue),
            current.eq(self.live.bit_select(job.slot, 1) & (self.gen_cur.data == job.gen)
                       & ~dead),
        ]
        with m.FSM(name="back"):
            with m.State("IDLE"):
                with m.If(self.queue.valid):
                    m.d.sync += dead.eq(0)
                    m.next = "ENCODED"
            with m.State("ENCODED"):        # its bytes are all read once its parity comes
                m.d.comb += busy.eq(1)
                with m.If(self.parity_valid):
                    with m.If(current):
                        m.next = "ADJUST_RX"
                    with m.Else():
                        m.d.comb += self.drain.eq(1)
                        m.next = "DRAIN"
            self._store_states(m, busy, current, store)
            with m.State("DRAIN"):          # the parity of a connection that ended: away
                with m.If(~self.draining):
                    m.d.comb += self.queue.done.eq(1)
                    m.next = "IDLE"
        with m.If(self.kill & busy & (self.app.slot == job.slot)):
            m.d.sync += dead.eq(1)
        return m

    def _store_states(self, m: Module, busy: Signal, current: Signal, store: AckWait) -> None:
        """From the receive pointer moved to the send pointer moved."""
        job, req, ans = self.queue.job, self._req, self._ans
        with m.State("ADJUST_RX"):
            m.d.comb += busy.eq(1)
            with m.If(self.request(m, MsgType.TCP_RX_ADJUST_PTR, ptr=job.rx_ptr + req)):
                m.next = "STORE"
                with m.If(job.ask):
                    m.next = "ASK"
        with m.State("ASK"):            # the connection's next request
            m.d.comb += busy.eq(1)
            with m.If(self.request(m, MsgType.TCP_RX_MSG_REQ, length=req)):
                m.next = "STORE"
        with m.State("STORE"):
            m.d.comb += [busy.eq(1), self.store_want.eq(1)]
            with m.If(self.store_issue):
                m.next = "WAIT_STORE"
        with m.State("WAIT_STORE"):
            m.d.comb += busy.eq(1)
            with m.If(store.got):
                m.d.comb += store.clear.eq(1)
                m.next = "IDLE"
                with m.If(store.err):
                    m.d.comb += self.mem_error.eq(1)
                    with m.If(current):       # the flow is given up
                        m.d.comb += self.forget.eq(1)
                    m.d.comb += self.queue.done.eq(1)
                with m.Elif(current):
                    m.next = "ADJUST_TX"
                with m.Else():
                    m.d.comb += self.queue.done.eq(1)
        with m.State("ADJUST_TX"):
            m.d.comb += busy.eq(1)
            with m.If(self.request(m, MsgType.TCP_TX_ADJUST_PTR, ptr=job.tx_ptr + ans)):
                m.d.comb += [self.queue.done.eq(1), self.answered.eq(1)]
                m.next = "IDLE"


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
        io = self.ports(m)
        front_tx, back_tx = io.app_tx
        a, mem = io.app, io.mem
        m.submodules.table = table = FlowTable(flows, sb, forgets=2, tx_answers="keep", reads={
            **FlowServer.READS, **FlowServer.ROOM_READS, "gen_back": ("gens", "comb"),
            "rx_loc": ("rx_locs", "comb"), "tx_loc": ("tx_locs", "comb")})
        m.submodules.front = front = _Front(io.requests, flows=flows, slot_bits=sb, req=req,
                                            ans=ans)
        m.submodules.jobs = jobs = _BackQueue(sb)
        m.submodules.back = back = _Back(io.requests, flows=flows, slot_bits=sb, req=req,
                                         ans=ans)
        m.submodules.encoder = enc = RsEncoder(width, self.shard_bytes, data=DATA_SHARDS,
                                               parity=PARITY_SHARDS)
        m.submodules.parity = parity = Queue(payload_layout(width),
                                             _ANSWERS * enc.shard_words * PARITY_SHARDS)
        m.submodules.chunk = chunk = ChunkOut(width)
        connect(m, app=a, table=table.app, front=front.app, back=back.app)
        connect(m, mem=mem, front=front.mem, back=back.mem)
        front.join(m, table)
        connect(m, table=table.gen_back, back=back.gen_cur)
        connect(m, table=table.tx_loc, back=back.tx_loc)
        connect(m, front=front.app_tx, sender=front_tx.i_hdr)
        connect(m, back=back.app_tx, sender=back_tx.i_hdr)
        connect(m, encoder=enc.o, parity=parity.i)
        connect(m, parity=parity.o, chunk=chunk.i)
        connect(m, chunk=chunk.o, sender=io.mem_tx.i_data)
        connect(m, front=front.queue, jobs=jobs.front)
        connect(m, jobs=jobs.head, back=back.queue)
        m.d.comb += [
            back.kill.eq(table.kill), back.live.eq(table.live),
            table.rx_loc.addr.eq(front.slot),
            back.parity_valid.eq(parity.o.valid), back.draining.eq(chunk.draining),
            chunk.drain.eq(back.drain),
            table.forget[0].en.eq(front.forget), table.forget[0].slot.eq(front.slot),
            table.forget[1].en.eq(back.forget), table.forget[1].slot.eq(back.queue.job.slot),
        ]
        self._memory(m, io, table, front, back, chunk, enc)

        drop_mem, unknown = Signal(), Signal()
        m.d.comb += [drop_mem.eq(mem.valid & ~front.loaded & ~back.stored),
                     unknown.eq(a.valid & ~table.handled)]
        self.count_dropped(m, io, unknown, drop_mem, table.drop)
        self.count_flows(m, table)
        self.count_events(m, closed=front.forget, truncated=front.truncated,
                          requests=back.answered, mem_errors=front.mem_error)
        self.count_events(m, mem_errors=back.mem_error)     # (never both in a cycle)
        return m

    def _memory(self, m: Module, io: Any, table: FlowTable, front: _Front, back: _Back,
                chunk: ChunkOut, enc: RsEncoder) -> None:
        """The memory requests, on one sender, the front's loads before the back's stores (a
        request once offered held until taken); the loads' words into the encoder, and the
        answers it owes (``pending``: loads whose answer is not out of the parity buffer)."""
        mem, req, ans = io.mem, self.request_bytes, self.answer_bytes
        m.submodules.requests = r = HeldOffer({"store": 1})
        store_issue = Signal()
        m.d.comb += [r.want.eq(front.load_want | back.store_want),
                     r.choice.store.eq(back.store_want & ~front.load_want),
                     r.ready.eq(io.mem_tx.i_hdr.ready),
                     front.hold.eq(r.hold), front.held_store.eq(r.held.store),
                     front.load_sent.eq(r.taken & ~r.chosen.store),
                     store_issue.eq(r.taken & r.chosen.store), back.store_issue.eq(store_issue),
                     chunk.store.eq(store_issue)]
        with m.If(front.load_want & ~r.chosen.store):
            self.mem_request(m, io.mem_tx.i_hdr, store=False, loc=table.rx_loc.data,
                             addr=front.load.addr, size=req, wrap=front.load.wrap)
        with m.If(r.chosen.store):
            self.mem_request(m, io.mem_tx.i_hdr, store=True, loc=back.tx.loc,
                             addr=back.tx.addr, size=ans, wrap=back.tx.wrap)
        to_enc = Signal()           # the words coming are the front's load's
        pending = Signal(range(_ANSWERS + 2))
        # An error ack carries no words: its answer will never be.
        m.d.sync += pending.eq(pending + front.load_sent
                               - (chunk.done | (front.loaded & mem.meta.error)))
        m.d.comb += [front.pending.eq(pending), front.to_enc.eq(to_enc)]
        with m.If(front.start_enc):
            m.d.sync += to_enc.eq(1)
        with m.If(mem.valid & ~front.loaded):
            m.d.sync += to_enc.eq(0)
        self.mem_data_to(m, mem.data, to_enc, enc.i)
