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
next request at once). The room a ``TCP_TX_MSG_RESP`` grants is more than ``n`` bytes when the
send ring has it: what a job leaves of it (from ``q + n`` on) is its flow's *credit*, and the
flow's next job whose ``n`` it covers skips the ``TCP_TX_MSG_REQ`` round trip, its
``LOAD_MEM`` leaving as its response is checked (the engine's own check of
``TCP_TX_ADJUST_PTR`` stays the guard; a new connection in the slot clears the credit).

A non-OK ``TCP_TX_MSG_RESP``, or a ``TCP_RX_MSG_RESP`` with RESET, TIMEOUT or CLOSED, ends the
flow (counted once in ``ended``, also after the tile's own close): its job in progress stops
(after the memory ack it waits for, if any: no memory request is ever abandoned; bytes loaded
for it are discarded), nothing more is sent for it, and what comes for it afterwards is
dropped. A memory ack with ``error`` set gives the flow up
(``mem_errors``). Other flows' jobs go on meanwhile.

Structure: the input is never held (``streaming = False``); each message is handled the cycle
it is offered, with room guaranteed for whatever it leaves behind:

* per flow (indexed by the handle's slot; :class:`~beehive.apps.tcp_app.FlowTable`): the
  generation of the connection it holds, whether it is live, its receive and send rings'
  memory tiles, and the latest ``TCP_RX_MSG_RESP``;
* a FIFO of flows whose notification arrived (their first ``TCP_RX_MSG_REQ`` goes out from it,
  whatever the jobs do: :class:`_FirstRequests`) and a FIFO of flows with a response to serve
  (:class:`_Dispatch`): each flow is in each at most once (a bit per flow says so), so
  ``flows`` entries always suffice;
* up to ``jobs`` jobs at once, each on a different flow slot (the flow at the head of the
  FIFO waits while a job of its slot's previous connection, ended, still awaits a memory ack).
  A job is a record (flow, ``n``, both rings) and a step, with at most one request or answer
  outstanding: a flow waiting for room in its send ring holds only its own job, and gives it
  up once it has waited ``room_grace`` cycles if another flow waits for a job and none is
  free; the engine's answer, when it comes, is taken by the flow table, which queues the
  flow again, and its next job asks for the room again (answered at once: the room is there)
  (:class:`_Jobs`). So a peer that stops reading holds up no other connection, even with
  ``jobs=1``. Engine requests leave on one sender, the jobs' in turn (round-robin:
  :class:`_EngineRequests`); memory requests on
  another, the oldest loaded chunk's store before loads (:class:`_MemRequests`). A request once
  offered stays on offer until taken; a dead job's request not yet offered is withdrawn;
* answers are matched to the job awaiting them: ``TCP_TX_MSG_RESP`` by its flow handle,
  ``LOAD_MEM_ACK`` and ``STORE_MEM_ACK`` by the ``addr``, ``size`` and ``wrap`` of the job's
  request (each job is on its own flow slot, and each slot's ring has its own address). No
  order is assumed: acks may come back in any order, from any number of memory tiles, with
  any number of loads outstanding to each (:class:`~beehive.apps.tcp_steps.TxAnswer`,
  :class:`_MemAcks`). Anything else is dropped and counted;
* loaded words go into a FIFO of ``jobs`` chunks: a job has at most one chunk loaded or on
  its way, so its room is reserved before its ``LOAD_MEM`` leaves. Chunks are stored in the
  order their acks came, each cut through: its ``STORE_MEM`` is offered as the ack's first
  word is out of the FIFO, and its words follow as they arrive (a step of ``n`` bytes takes
  about ``n`` / (bytes per word) cycles of words, not twice that); the chunk of a job that
  died meanwhile is discarded.

Throughput: a job is its messages' round trips (engine, unless its credit covers it; receive
memory, send memory) plus 7
cycles of the tile's own: 3 from a ``TCP_RX_MSG_RESP`` to its ``TCP_TX_MSG_REQ`` (queue,
response read, check), 1 from a ``TCP_TX_MSG_RESP`` or a ``STORE_MEM_ACK`` to the request it
allows, 2 from a ``LOAD_MEM_ACK``'s first word to the ``STORE_MEM`` (the FIFO), its other
words following as they come; the three requests after a store leave back to back. One job is
latency-bound; ``jobs`` busy flows overlap their round trips, a job ending every (round trips)
/ ``jobs`` cycles, until the output port is the limit (a 64-byte job is 7 flits out at 512
bits, 34 at 64). Measured with the tests' model (``tests/apps/tcp_model.py``) answering at
once, four flows always busy, 64-byte chunks, in cycles per job (2026-12-03): at 512 bits 17.0
with ``jobs=1`` (21 before there were jobs), 8.88 with 2, 6.97 with 4; with memory acks 20
cycles late 55, 27.56 and 14.25 (a 64-byte chunk is one word: cutting through gains nothing
there); at 64 bits 61, 41.88 and 39.8, with acks 20 cycles late 99, 53.39 and 39.08 (68, 45.32
and 39.46 at once, 106, 56.83 and 39.46 late, when each chunk was stored whole first).
"""

from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.counters import count
from apiary.stream.layout import payload_layout, payload_signature
from apiary.stream.queue import Queue

from ..proto.messages import MsgType
from ..proto.tcp.app import GEN_BITS, Status
from .tcp_app import (MEM_LOC, RX_CONTEXT, TABLE_MEMORIES, FlowTable, Requests, TcpAppTile,
                      app_outputs, engine_message, handle_of, int_in_range, mem_ack, mem_acks,
                      mem_data_to, read_port)
from .tcp_steps import ChunkOut, HeldOffer, TxAnswer, ring_add


__all__ = ["TcpEchoTile", "ROOM_GRACE"]


#: A job's view of one ring: the pointer and address of its first byte, and the ring.
_RING = data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6, "loc": MEM_LOC})

#: What a flow has left of the room the engine last granted it in its send ring, after the
#: job that used some of it: the pointer and address it starts at, the ring, and its bytes.
_CREDIT = data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6, "room": 32})


class _Step(enum.Enum, shape=4):
    """Where a job is: a request to send (``TX_REQ``, ``LOAD``, ``ADJ_TX``, ``ADJ_RX``,
    ``RX_REQ``, ``CLOSE``), an answer to await (``WAIT_*``), its chunk arriving or in the
    FIFO, its store not yet offered (``LOADED``)."""
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


#: Cycles a job awaits room in its send ring, by default, before it may give itself up to
#: another flow (``room_grace``).
ROOM_GRACE = 1024

#: The steps that send an engine request.
_REQUESTS = (_Step.TX_REQ, _Step.ADJ_TX, _Step.ADJ_RX, _Step.RX_REQ, _Step.CLOSE)
#: The step after an engine request is taken.
_AFTER = {_Step.TX_REQ: _Step.WAIT_TX, _Step.ADJ_TX: _Step.ADJ_RX, _Step.ADJ_RX: _Step.RX_REQ,
          _Step.RX_REQ: _Step.FREE, _Step.CLOSE: _Step.FREE}


def _fill(chunk: int) -> data.StructLayout:
    """What a job takes of its flow's response: its generation, the bytes to echo, its
    receive ring, its send ring (where the flow's credit says its room starts, if the job
    goes straight to its load) and that room's bytes."""
    return data.StructLayout({"gen": GEN_BITS, "n": range(chunk + 1), "rx": _RING,
                              "tx": _RING, "room": 32})


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


def _record(slot_bits: int, chunk: int) -> data.StructLayout:
    """A job: its flow, the bytes it echoes, both rings, and the room it may write in its
    send ring from ``tx.ptr`` on."""
    return data.StructLayout({"slot": slot_bits, "gen": GEN_BITS, "n": range(chunk + 1),
                              "rx": _RING, "tx": _RING, "room": 32})


def _jobs_view(jobs: int, record: data.StructLayout) -> wiring.Signature:
    """The jobs as :class:`_Jobs` shows them (the ``Out`` side): each one's record, step,
    ``dead`` bit (its connection ended under it) and ``active`` bit (not ``FREE``)."""
    return wiring.Signature({"job": Out(data.ArrayLayout(record, jobs)),
                             "step": Out(data.ArrayLayout(_Step, jobs)),
                             "dead": Out(jobs), "active": Out(jobs)})


def _dispatch_signature(jobs: int, slot_bits: int, fill: data.StructLayout) -> wiring.Signature:
    """From :class:`_Dispatch` (the ``Out`` side) to :class:`_Jobs`: ``pop`` the flow slot
    ``head`` into the free job ``free_k``; a cycle later (``chk_valid``) job ``chk_job`` gets
    its response (``fill``) and its next step (``chk_next``); ``contended``: a flow waits for
    a job and none is free."""
    return wiring.Signature({"pop": Out(1), "free_k": Out(_bits(jobs)), "head": Out(slot_bits),
                             "chk_valid": Out(1), "chk_job": Out(_bits(jobs)),
                             "chk_next": Out(_Step), "fill": Out(fill), "contended": Out(1)})


def _request_events(jobs: int) -> wiring.Signature:
    """From a sender of the jobs' requests (the ``Out`` side) to :class:`_Jobs`, a bit per
    job: ``mine`` (its request is on offer, held until taken) and the pulses of its
    requests taken (``sent``: an engine request; ``load_sent``, ``store_sent``; ``drained``:
    the last word of its chunk thrown away, its connection having ended)."""
    return wiring.Signature({"mine": Out(jobs), "sent": Out(jobs), "load_sent": Out(jobs),
                             "store_sent": Out(jobs), "drained": Out(jobs)})


def _ack_events(jobs: int) -> wiring.Signature:
    """From :class:`_MemAcks` (the ``Out`` side) to :class:`_Jobs`: a pulse per job as its
    load or its store is acknowledged, and the ack's ``error``."""
    return wiring.Signature({"loaded": Out(jobs), "stored": Out(jobs), "error": Out(1)})


class _Jobs(wiring.Component):
    """The jobs: each one's record, step and ``dead`` bit (``view``), and their steps (see
    :class:`_Step` and the module docstring): a free job takes the flow ``dispatch`` pops and
    is filled a cycle later; a request step moves on once ``engine.sent`` (or
    ``memory.load_sent``, ``store_sent``) says its request was taken, the waits on the answer
    (``tx_ok``, ``tx_fail`` of :class:`~beehive.apps.tcp_steps.TxAnswer`, which also fill in
    the send ring; ``acks``). A job whose connection the table kills (``kill`` of ``app.slot``)
    is ``dead``: it ends at its next step, or once what it awaits comes back (a request on
    offer is never withdrawn). ``tx_wait`` and ``handle`` say which jobs await a
    ``TCP_TX_MSG_RESP`` and for which flow. While ``dispatch.contended``, the first job that
    has awaited one ``grace`` cycles or more and has not got it this cycle gives its job
    up (``FREE``): the answer then goes to the table, which queues the flow again (its next
    job asks for the room again, answered at once). Registers: every event takes effect at the
    next clock edge."""

    def __init__(self, jobs: int, slot_bits: int, record: data.StructLayout,
                 fill: data.StructLayout, grace: int = ROOM_GRACE) -> None:
        self._jobs, self._grace = jobs, grace
        super().__init__({
            "view": Out(_jobs_view(jobs, record)),
            "tx_wait": Out(jobs), "handle": Out(data.ArrayLayout(unsigned(16), jobs)),
            "app": In(engine_message(slot_bits)), "kill": In(1),
            "dispatch": In(_dispatch_signature(jobs, slot_bits, fill)),
            "engine": In(_request_events(jobs)), "memory": In(_request_events(jobs)),
            "acks": In(_ack_events(jobs)),
            "tx_answered": In(jobs), "tx_ok": In(jobs), "tx_fail": In(jobs),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        d, a, view = self.dispatch, self.app, self.view
        job, step, dead = view.job, view.step, view.dead
        # Cycles each job has awaited its TX answer, up to grace.
        grace = self._grace
        waited = [Signal(range(grace + 1), name=f"waited{k}") for k in range(self._jobs)]
        for k in range(self._jobs):
            with m.If(step[k] != _Step.WAIT_TX):
                m.d.sync += waited[k].eq(0)
            with m.Elif(waited[k] != grace):
                m.d.sync += waited[k].eq(waited[k] + 1)
        waiting = [(step[k] == _Step.WAIT_TX) & ~dead[k] & ~self.tx_answered[k]
                   & (waited[k] == grace) for k in range(self._jobs)]
        found, first = _first(m, waiting)
        self._give_up = [d.contended & found & (first == k) for k in range(self._jobs)]
        for k in range(self._jobs):
            j = job[k]
            m.d.comb += [view.active[k].eq(step[k] != _Step.FREE),
                         self.tx_wait[k].eq((step[k] == _Step.WAIT_TX) & ~dead[k]),
                         self.handle[k].eq(handle_of(j.slot, j.gen))]
            with m.If(d.pop & (d.free_k == k)):
                m.d.sync += [j.slot.eq(d.head), dead[k].eq(0)]
            with m.If(d.chk_valid & (d.chk_job == k)):
                m.d.sync += [j.gen.eq(d.fill.gen), j.n.eq(d.fill.n), j.rx.eq(d.fill.rx),
                             j.tx.eq(d.fill.tx), j.room.eq(d.fill.room)]
            self._steps(m, k)
            with m.If(self.kill & view.active[k] & (j.slot == a.slot)):
                m.d.sync += dead[k].eq(1)
            with m.If(self.tx_answered[k]):
                m.d.sync += [j.tx.ptr.eq(a.meta.ptr), j.tx.addr.eq(a.meta.addr),
                             j.tx.wrap.eq(a.meta.size_log2), j.room.eq(a.meta.length)]
        return m

    def _steps(self, m: Module, k: int) -> None:
        """Job ``k``'s step."""
        d, eng, mem, acks = self.dispatch, self.engine, self.memory, self.acks
        s, dead = self.view.step[k], self.view.dead[k]
        with m.Switch(s):
            with m.Case(_Step.FREE):
                with m.If(d.pop & (d.free_k == k)):
                    m.d.sync += s.eq(_Step.CHECK)
            with m.Case(_Step.CHECK):
                m.d.sync += s.eq(d.chk_next)
            with m.Case(*_REQUESTS):
                with m.If(eng.sent[k]):
                    with m.Switch(s):
                        for now, after in _AFTER.items():
                            with m.Case(now):
                                m.d.sync += s.eq(after)
                with m.Elif(dead & ~eng.mine[k]):
                    m.d.sync += s.eq(_Step.FREE)
            with m.Case(_Step.WAIT_TX):
                with m.If(dead | self.tx_fail[k]):    # the engine will not answer / said no
                    m.d.sync += s.eq(_Step.FREE)
                with m.Elif(self.tx_ok[k]):
                    m.d.sync += s.eq(_Step.LOAD)
                with m.Elif(self._give_up[k]):      # another flow waits: the room may not come
                    m.d.sync += s.eq(_Step.FREE)
            with m.Case(_Step.LOAD):
                with m.If(mem.load_sent[k]):
                    m.d.sync += s.eq(_Step.WAIT_LOAD)
                with m.Elif(dead & ~mem.mine[k]):
                    m.d.sync += s.eq(_Step.FREE)
            with m.Case(_Step.WAIT_LOAD):
                with m.If(acks.loaded[k] & acks.error):
                    m.d.sync += s.eq(_Step.FREE)
                with m.Elif(acks.loaded[k]):
                    m.d.sync += s.eq(_Step.LOADED)
            with m.Case(_Step.LOADED):
                with m.If(mem.store_sent[k]):
                    m.d.sync += s.eq(_Step.WAIT_STORE)
                with m.Elif(mem.drained[k]):
                    m.d.sync += s.eq(_Step.FREE)
            with m.Case(_Step.WAIT_STORE):
                with m.If(acks.stored[k] & (acks.error | dead)):
                    m.d.sync += s.eq(_Step.FREE)
                with m.Elif(acks.stored[k]):
                    m.d.sync += s.eq(_Step.ADJ_TX)


class _Dispatch(wiring.Component):
    """A flow with a response (``ready``, the table's queue) to a free job, unless a job of
    its slot is still active (the slot's previous connection, ended, awaiting a memory ack):
    ``pop`` (``out``) and, the next cycle, the response read (``ctx``, with its rings'
    memory tiles ``rx_loc``, ``tx_loc``; not transparent: a response written as its slot is
    popped is a newer connection's, queued again for it) and checked: stale (another status
    than OK or EOF, or the slot's connection ended or is another one) ``FREE``, bytes to echo
    (``min(length, chunk)`` of them) ``LOAD`` if the flow's credit (``credit``, read with
    the response; valid if its bit in ``credited`` was set at the pop) covers them, else
    ``TX_REQ``; none at EOF ``CLOSE``, else ``RX_REQ``. ``contended``: a flow waits and no
    job is free."""

    def __init__(self, jobs: int, slot_bits: int, flows: int, chunk: int,
                 record: data.StructLayout, fill: data.StructLayout) -> None:
        self._chunk = chunk
        super().__init__({
            "jobs": In(_jobs_view(jobs, record)), "out": Out(_dispatch_signature(jobs, slot_bits,
                                                                                fill)),
            "ready": In(stream.Signature(unsigned(slot_bits))), "live": In(flows),
            "ctx": In(read_port(slot_bits, RX_CONTEXT)),
            "rx_loc": In(read_port(slot_bits, MEM_LOC)),
            "tx_loc": In(read_port(slot_bits, MEM_LOC)),
            "gen_chk": In(read_port(slot_bits, TABLE_MEMORIES["gens"])),
            "credit": In(read_port(slot_bits, _CREDIT)), "credited": In(flows),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        jobs, out, ready = self.jobs, self.out, self.ready
        n = len(jobs.active)
        head = ready.payload
        free, free_k = _first(m, [~jobs.active[k] for k in range(n)])
        head_busy = Cat(jobs.active[k] & (jobs.job[k].slot == head) for k in range(n)).any()
        chk_slot = Signal.like(head)
        m.d.comb += [
            out.pop.eq(ready.valid & free & ~head_busy), ready.ready.eq(out.pop),
            out.contended.eq(ready.valid & ~free & ~head_busy),
            out.free_k.eq(free_k), out.head.eq(head),
            self.ctx.addr.eq(head), self.rx_loc.addr.eq(head), self.tx_loc.addr.eq(head),
            self.credit.addr.eq(head), self.gen_chk.addr.eq(chk_slot),
        ]
        credited = Signal()
        m.d.sync += [out.chk_valid.eq(out.pop), out.chk_job.eq(free_k), chk_slot.eq(head),
                     credited.eq(self.credited.bit_select(head, 1))]
        cx, fill, credit = self.ctx.data, out.fill, self.credit.data
        with m.If(((cx.status != Status.OK) & (cx.status != Status.EOF))
                  | ~self.live.bit_select(chk_slot, 1) | (self.gen_chk.data != cx.gen)):
            m.d.comb += out.chk_next.eq(_Step.FREE)         # stale: the flow ended since
        with m.Elif((cx.length != 0) & credited & (credit.room >= fill.n)):
            m.d.comb += out.chk_next.eq(_Step.LOAD)         # room left from the last grant
        with m.Elif(cx.length != 0):
            m.d.comb += out.chk_next.eq(_Step.TX_REQ)
        with m.Elif(cx.status == Status.EOF):
            m.d.comb += out.chk_next.eq(_Step.CLOSE)
        with m.Else():
            m.d.comb += out.chk_next.eq(_Step.RX_REQ)
        m.d.comb += [
            fill.gen.eq(cx.gen), fill.n.eq(Mux(cx.length > self._chunk, self._chunk, cx.length)),
            fill.rx.ptr.eq(cx.ptr), fill.rx.addr.eq(cx.addr), fill.rx.wrap.eq(cx.size_log2),
            fill.rx.loc.eq(self.rx_loc.data), fill.tx.loc.eq(self.tx_loc.data),
            fill.tx.ptr.eq(credit.ptr), fill.tx.addr.eq(credit.addr),
            fill.tx.wrap.eq(credit.wrap), fill.room.eq(credit.room),
        ]
        return m


class _EngineRequests(wiring.Component):
    """The jobs' engine requests, on one sender (``app_tx``), the jobs in turn (round-robin
    from the last served): the request of a job's step (:data:`_REQUESTS`), for its flow. A
    request, once offered, stays on offer until taken (``events.mine``: at 64 bits it is
    several flits); a dead job's request is withdrawn only if it was not offered yet.
    ``events.sent`` pulses as a job's is taken; ``adjusted`` (a ``TCP_TX_ADJUST_PTR`` taken,
    handing ``bytes`` to the engine) and ``closed`` (a ``TCP_CLOSE_REQ`` taken) are to
    count. As a live job's ``TCP_TX_ADJUST_PTR`` is taken, ``spent`` pulses with what its
    flow has left of its room (``credit``: from the end of its bytes on, the address wrapped
    in the ring) for ``slot``."""

    def __init__(self, requests: Requests, jobs: int, record: data.StructLayout,
                 chunk: int) -> None:
        self._requests, self._jobs, self._record = requests, jobs, record
        super().__init__({
            "jobs": In(_jobs_view(jobs, record)), "events": Out(_request_events(jobs)),
            "app_tx": Out(requests.app_signature()),
            "adjusted": Out(1), "bytes": Out(range(chunk + 1)), "closed": Out(1),
            "spent": Out(1), "slot": Out(record.members["slot"]), "credit": Out(_CREDIT),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        r, nj, jobs, ev = self._requests, self._jobs, self.jobs, self.events
        m.submodules.hold = hold = HeldOffer({"k": unsigned(_bits(nj))})
        last = Signal(_bits(nj))
        steps = [jobs.step[k] for k in range(nj)]
        wants, want_k = _first(m, [_one_of(steps[k], _REQUESTS) & ~jobs.dead[k]
                                   for k in range(nj)], after=last)
        m.d.comb += [hold.want.eq(wants), hold.choice.k.eq(want_k),
                     hold.ready.eq(self.app_tx.ready)]
        k = hold.chosen.k
        ej = _select(m, self._record, [jobs.job[i] for i in range(nj)], k)
        e_step = _select(m, _Step, steps, k)
        e_dead = _select(m, 1, [jobs.dead[i] for i in range(nj)], k)
        handle = handle_of(ej.slot, ej.gen)
        taken = hold.taken
        m.d.comb += [
            self.slot.eq(ej.slot),
            self.credit.ptr.eq(ej.tx.ptr + ej.n), self.credit.wrap.eq(ej.tx.wrap),
            self.credit.addr.eq(ring_add(ej.tx.addr, ej.n, ej.tx.wrap)),
            self.credit.room.eq(ej.room - ej.n),
        ]
        with m.If(hold.offer):
            with m.Switch(e_step):
                with m.Case(_Step.TX_REQ):
                    r.engine(m, self.app_tx, MsgType.TCP_TX_MSG_REQ, flow=handle, length=ej.n)
                with m.Case(_Step.ADJ_TX):
                    r.engine(m, self.app_tx, MsgType.TCP_TX_ADJUST_PTR, flow=handle,
                             ptr=self.credit.ptr)
                    m.d.comb += [self.adjusted.eq(taken), self.bytes.eq(ej.n),
                                 self.spent.eq(taken & ~e_dead)]
                with m.Case(_Step.ADJ_RX):
                    r.engine(m, self.app_tx, MsgType.TCP_RX_ADJUST_PTR, flow=handle,
                             ptr=ej.rx.ptr + ej.n)
                with m.Case(_Step.RX_REQ):
                    r.engine(m, self.app_tx, MsgType.TCP_RX_MSG_REQ, flow=handle, length=1)
                with m.Case(_Step.CLOSE):
                    r.engine(m, self.app_tx, MsgType.TCP_CLOSE_REQ, flow=handle)
                    m.d.comb += self.closed.eq(taken)
        with m.If(taken):
            m.d.sync += last.eq(k)
        for i in range(nj):
            m.d.comb += [ev.sent[i].eq(taken & (k == i)),
                         ev.mine[i].eq(hold.hold & (hold.held.k == i))]
        return m


class _MemRequests(wiring.Component):
    """The jobs' memory requests, on one sender (``mem_tx``): the store of the oldest chunk
    whose load ack has come (``loaded``, the jobs' numbers in the order their acks came;
    ``chunk``, the chunks' words as they arrive) before the loads of the jobs at ``LOAD``.
    A store leaves as soon as the first of its words is in, the rest following as they come
    (cut through: its length is the job's ``n``, and the ack, whose head is in, brings them
    without waiting on anything). A request, once
    offered, stays on offer until taken (``events.mine``); the chunk of a job that died
    meanwhile is thrown away instead of stored (``events.drained`` pulses as its last word
    goes: until then its words hold their room, and it stays first). ``events.load_sent`` and
    ``store_sent`` pulse as a job's request is taken; a store's words go on ``data``."""

    def __init__(self, requests: Requests, jobs: int, record: data.StructLayout,
                 width: int) -> None:
        self._requests, self._jobs, self._record, self._width = requests, jobs, record, width
        super().__init__({
            "jobs": In(_jobs_view(jobs, record)), "events": Out(_request_events(jobs)),
            "loaded": In(stream.Signature(unsigned(_bits(jobs)))),
            "chunk": In(payload_signature(width)),
            "mem_tx": Out(requests.mem_signature()), "data": Out(payload_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        r, nj, jobs, ev = self._requests, self._jobs, self.jobs, self.events
        m.submodules.hold = hold = HeldOffer({"store": 1, "k": unsigned(_bits(nj))})
        m.submodules.out = out = ChunkOut(self._width)
        connect(m, chunk=flipped(self.chunk), out=out.i)
        connect(m, out=out.o, sender=flipped(self.data))
        first = self.loaded.payload
        first_dead = _select(m, 1, [jobs.dead[k] for k in range(nj)], first)
        # Between chunks, the word on offer is the first of the oldest chunk's: its store
        # leaves with it (the sender is not held by a store with no word to give).
        chunk_ready = self.loaded.valid & self.chunk.valid & ~out.storing & ~out.draining
        loads, load_k = _first(m, [(jobs.step[k] == _Step.LOAD) & ~jobs.dead[k]
                                   for k in range(nj)])
        m.d.comb += [hold.choice.store.eq(chunk_ready & ~first_dead), hold.choice.k.eq(load_k),
                     hold.want.eq(hold.choice.store | loads), hold.ready.eq(self.mem_tx.ready)]
        to_store, load_kk, taken = hold.chosen.store, hold.chosen.k, hold.taken
        sj = _select(m, self._record, [jobs.job[k] for k in range(nj)], first)
        lj = _select(m, self._record, [jobs.job[k] for k in range(nj)], load_kk)
        with m.If(to_store):
            r.mem(m, self.mem_tx, store=True, loc=sj.tx.loc, addr=sj.tx.addr, size=sj.n,
                  wrap=sj.tx.wrap)
        with m.Elif(hold.offer):
            r.mem(m, self.mem_tx, store=False, loc=lj.rx.loc, addr=lj.rx.addr, size=lj.n,
                  wrap=lj.rx.wrap)
        drain = chunk_ready & first_dead & ~(hold.hold & hold.held.store)
        # A drained chunk's job is done with its room once the last of its words, which may
        # still be on their way, is thrown away.
        drained = out.draining & out.done
        m.d.comb += [out.store.eq(taken & to_store), out.drain.eq(drain)]
        with m.If(out.store | drained):
            m.d.comb += self.loaded.ready.eq(1)
        for k in range(nj):
            m.d.comb += [
                ev.load_sent[k].eq(taken & ~to_store & (load_kk == k)),
                ev.store_sent[k].eq(taken & to_store & (first == k)),
                ev.drained[k].eq(drained & (first == k)),
                ev.mine[k].eq(hold.hold & ~hold.held.store & (hold.held.k == k)),
            ]
        return m


class _MemAcks(wiring.Component):
    """The memory acks (``mem``, always taken), each found by the request it answers: a job
    awaiting its load's or its store's ack with the ``addr``, ``size`` and ``wrap`` it asked
    for (``events``). A load's words go to the buffer (``chunk``) and its job's number to
    ``loaded``; an ack with ``error`` gives the job's flow up (``forget``, unless the job is
    dead; counted in ``mem_error``). Any other ack pulses ``drop`` (its words thrown away)."""

    def __init__(self, jobs: int, slot_bits: int, record: data.StructLayout,
                 width: int) -> None:
        self._jobs = jobs
        super().__init__({
            "jobs": In(_jobs_view(jobs, record)), "events": Out(_ack_events(jobs)),
            "mem": In(mem_acks()), "data": In(payload_signature(width)),
            "chunk": Out(payload_signature(width)),
            "loaded": Out(stream.Signature(unsigned(_bits(jobs)))),
            "forget": Out(1), "forget_slot": Out(slot_bits), "mem_error": Out(1), "drop": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nj, jobs, ev, mem = self._jobs, self.jobs, self.events, self.mem
        steps, job = [jobs.step[k] for k in range(nj)], [jobs.job[k] for k in range(nj)]
        is_load, load_hit = _first(m, [
            mem_ack(mem, LOAD_MEM_ACK, s == _Step.WAIT_LOAD, j.rx.addr, j.n, j.rx.wrap)
            for s, j in zip(steps, job)])
        is_store, store_hit = _first(m, [
            mem_ack(mem, STORE_MEM_ACK, s == _Step.WAIT_STORE, j.tx.addr, j.n, j.tx.wrap)
            for s, j in zip(steps, job)])
        ack_k = Mux(is_load, load_hit, store_hit)
        ack_dead = _select(m, 1, [jobs.dead[k] for k in range(nj)], ack_k)
        m.d.comb += [self.forget_slot.eq(_select(m, self.forget_slot.shape(),
                                                 [j.slot for j in job], ack_k)),
                     ev.error.eq(mem.meta.error)]
        to_buf = Signal()           # the payload coming is a job's loaded bytes
        for k in range(nj):
            m.d.comb += [ev.loaded[k].eq(is_load & (load_hit == k)),
                         ev.stored[k].eq(is_store & (store_hit == k))]
        with m.If(is_load | is_store):
            with m.If(mem.meta.error):
                # The flow is given up (a job whose connection has not ended holds it).
                m.d.comb += self.mem_error.eq(1)
                with m.If(~ack_dead):
                    m.d.comb += self.forget.eq(1)
            with m.Elif(is_load):
                m.d.comb += [self.loaded.valid.eq(1), self.loaded.payload.eq(load_hit)]
                m.d.sync += to_buf.eq(1)
        with m.Elif(mem.valid):
            m.d.comb += self.drop.eq(1)
            m.d.sync += to_buf.eq(0)
        mem_data_to(m, flipped(self.data), to_buf, flipped(self.chunk))
        return m


class _FirstRequests(wiring.Component):
    """The first ``TCP_RX_MSG_REQ`` (1 byte) of each new connection (``new``, the table's
    queue), on a sender of its own (``app_tx``), never behind a job: a connection announced
    the cycle its slot is taken is asked for at once (``announced``, ``app``), one whose slot
    is still live with the generation it holds (``gen_new``); one at a time, held until
    taken."""

    def __init__(self, requests: Requests, slot_bits: int, flows: int) -> None:
        self._requests = requests
        super().__init__({
            "new": In(stream.Signature(unsigned(slot_bits))), "live": In(flows),
            "app": In(engine_message(slot_bits)), "announced": In(1),
            "gen_new": In(read_port(slot_bits, TABLE_MEMORIES["gens"])),
            "app_tx": Out(requests.app_signature()),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        r, new, a = self._requests, self.new, self.app
        fresh_valid = Signal()
        fresh_handle = Signal(16)
        new_slot = new.payload
        m.d.comb += self.gen_new.addr.eq(new_slot)
        with m.If(~fresh_valid & new.valid):
            m.d.comb += new.ready.eq(1)
            with m.If(self.announced & (a.slot == new_slot)):   # its newest connection, now
                m.d.sync += [fresh_valid.eq(1), fresh_handle.eq(handle_of(new_slot, a.gen))]
            with m.Elif(self.live.bit_select(new_slot, 1)):
                m.d.sync += [fresh_valid.eq(1),
                             fresh_handle.eq(handle_of(new_slot, self.gen_new.data))]
        with m.If(fresh_valid):
            with m.If(r.engine(m, self.app_tx, MsgType.TCP_RX_MSG_REQ, flow=fresh_handle,
                               length=1)):
                m.d.sync += fresh_valid.eq(0)
        return m


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
    room_grace : int
        Cycles a job awaits room in its send ring before it gives itself up to a flow that
        waits for a job (1 to 65535; default :data:`ROOM_GRACE`, 1,024: longer than room
        takes to come back when the peer reads, as the TCP echo benchmark's bulk runs show:
        with 64, eight connections at 64 bits moved 5-15 % fewer bytes per cycle, each flow
        given up asking again; with 1,024 every figure is the same as never giving up). A peer
        that stops reading holds a job this long, once.

    Cost: per flow 4 bits of registers, and in memories its generation (4 bits), its rings'
    memory tiles (32 bits), its latest response (126 bits) and its credit (118 bits); two
    FIFOs of ``flows`` slots; per job about 270 bits of registers; a FIFO of ``jobs`` chunks'
    words (block RAM, read through a register) and one of ``jobs`` job numbers.
    """

    #: Two senders of engine requests (the receive side's, the send side's).
    outputs = app_outputs(2)

    def __init__(self, env=None, *, config=None, chunk=None, jobs=4, room_grace=ROOM_GRACE):
        if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= 64:
            raise ValueError(f"jobs must be an integer from 1 to 64, not {jobs!r}")
        self.jobs = jobs
        self.room_grace = int_in_range(room_grace, "room_grace", 1, (1 << 16) - 1)
        super().__init__(env, config=config, chunk=chunk, counters={
            "flows": "connections announced (receive-buffer notifications)",
            "bytes": (48, "bytes echoed (written to a send ring and handed to the engine)"),
            "closed": "connections closed by the tile (CLOSE after the peer's FIN, all echoed)",
            "ended": "connections the engine reported reset, timed out or closed",
            "send_notifs": "send-buffer notifications (where the send ring is)",
            "mem_errors": "memory acks with error set (the flow is given up)",
            "dropped": "messages that match nothing (stray, stale, unknown, malformed)",
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        flows, sb, nj, width = self.config.flows, self.slot_bits, self.jobs, self.env.width
        c = self.counters
        io = self.ports(m)
        job_tx, fresh_tx = io.app_tx
        a = io.app
        record, fill = _record(sb, self.chunk), _fill(self.chunk)
        m.submodules.table = table = FlowTable(flows, sb, forgets=2, tx_answers="requeue", reads={
            "gen_new": ("gens", "comb"), "gen_chk": ("gens", "comb"), "ctx": ("ctx", "sync"),
            "rx_loc": ("rx_locs", "sync"), "tx_loc": ("tx_locs", "sync")})
        m.submodules.jobs = jobs = _Jobs(nj, sb, record, fill, self.room_grace)
        m.submodules.dispatch = dispatch = _Dispatch(nj, sb, flows, self.chunk, record, fill)
        m.submodules.engine = engine = _EngineRequests(io.requests, nj, record, self.chunk)
        m.submodules.tx_answer = tx_answer = TxAnswer(sb, nj)
        m.submodules.first = first = _FirstRequests(io.requests, sb, flows)
        # Loaded chunks, in the order their acks came, and which job each is for.
        words = -(-self.chunk // (width // 8))
        # Read through a register (block RAM, however deep the chunks make it).
        m.submodules.buf = buf = fifo.SyncFIFOBuffered(width=payload_layout(width).size,
                                                       depth=max(2, nj * words))
        m.submodules.loaded_q = loaded_q = Queue(unsigned(_bits(nj)), nj)
        m.submodules.memory = memory = _MemRequests(io.requests, nj, record, width)
        m.submodules.acks = acks = _MemAcks(nj, sb, record, width)

        connect(m, app=a, table=table.app, jobs=jobs.app, tx_answer=tx_answer.app,
                first=first.app)
        connect(m, jobs=jobs.view, dispatch=dispatch.jobs, engine=engine.jobs,
                memory=memory.jobs, acks=acks.jobs)
        connect(m, dispatch=dispatch.out, jobs=jobs.dispatch)
        connect(m, engine=engine.events, jobs=jobs.engine)
        connect(m, memory=memory.events, jobs=jobs.memory)
        connect(m, acks=acks.events, jobs=jobs.acks)
        for name in ("ready", "ctx", "rx_loc", "tx_loc", "gen_chk"):
            connect(m, table=getattr(table, name), dispatch=getattr(dispatch, name))
        # Each flow's credit: written as a job hands its bytes to the engine, valid until a
        # new connection takes the slot (which wins in the cycle both happen).
        m.submodules.credits = credits = Memory(shape=_CREDIT, depth=flows, init=[])
        credit_w, credit_r = credits.write_port(), credits.read_port(transparent_for=())
        credited = Signal(flows)
        m.d.comb += [credit_w.en.eq(engine.spent), credit_w.addr.eq(engine.slot),
                     credit_w.data.eq(engine.credit),
                     credit_r.addr.eq(dispatch.credit.addr),
                     dispatch.credit.data.eq(credit_r.data), dispatch.credited.eq(credited)]
        with m.If(engine.spent):
            m.d.sync += credited.bit_select(engine.slot, 1).eq(1)
        with m.If(table.announced):
            m.d.sync += credited.bit_select(a.slot, 1).eq(0)
        connect(m, table=table.new, first=first.new)
        connect(m, table=table.gen_new, first=first.gen_new)
        connect(m, engine=engine.app_tx, sender=job_tx.i_hdr)
        connect(m, first=first.app_tx, sender=fresh_tx.i_hdr)
        connect(m, memory=memory.mem_tx, sender=io.mem_tx.i_hdr)
        connect(m, memory=memory.data, sender=io.mem_tx.i_data)
        connect(m, loaded_q=loaded_q.o, memory=memory.loaded)
        connect(m, receiver=io.mem, acks=acks.mem)
        connect(m, receiver=io.mem.data, acks=acks.data)
        m.d.comb += [
            buf.w_en.eq(acks.chunk.valid), buf.w_data.eq(acks.chunk.payload),
            acks.chunk.ready.eq(buf.w_rdy),
            memory.chunk.valid.eq(buf.r_rdy), memory.chunk.payload.eq(buf.r_data),
            buf.r_en.eq(memory.chunk.ready),
        ]
        connect(m, acks=acks.loaded, loaded_q=loaded_q.i)
        m.d.comb += [
            jobs.kill.eq(table.kill), dispatch.live.eq(table.live),
            first.live.eq(table.live), first.announced.eq(table.announced),
            table.forget[0].en.eq(acks.forget), table.forget[0].slot.eq(acks.forget_slot),
            table.forget[1].en.eq(tx_answer.ended), table.forget[1].slot.eq(a.slot),
            # A job's TX answer is its own; the table re-queues the flow of one given up.
            tx_answer.handled.eq(table.handled & (a.type != MsgType.TCP_TX_MSG_RESP)),
            tx_answer.wait.eq(jobs.tx_wait), tx_answer.handle.eq(jobs.handle),
            table.claimed.eq(tx_answer.answered.any()), jobs.tx_answered.eq(tx_answer.answered),
            jobs.tx_ok.eq(tx_answer.ok), jobs.tx_fail.eq(tx_answer.fail),
        ]
        unknown = Signal()
        m.d.comb += unknown.eq(a.valid & ~table.handled)
        self.count_dropped(m, io, unknown, acks.drop, table.drop)
        self.count_flows(m, table, tx_answer.ended)
        count(m, c.send_notifs, table.send_ring)
        with m.If(engine.adjusted):
            count(m, c.bytes, engine.bytes)
        self.count_events(m, closed=engine.closed, mem_errors=acks.mem_error)
        return m
