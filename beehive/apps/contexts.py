"""Contexts: TCP connections served by whichever copy of an application is free, each
connection's state kept in memory between its turns (the Apiary thesis's Table 3.1 and its
cooperative scheduling, §3.3.2: "we expect contexts to yield voluntarily ... [and] request
Apiary provide it the next connection with a waiting request and the corresponding context
block, with Apiary automatically handling the fetching and storing of state").

:class:`TcpContextSchedulerTile` stands where :class:`~beehive.apps.scheduler.TcpSchedulerTile`
does, between the TCP engine and several copies of an application (*workers*), but gives no
connection to a worker for its life: it holds every engine message about a connection until a
worker is free, then *resumes* the connection there, sending the message together with the
connection's **context block** (``ctx_bytes`` of the application's own state, read from the
context memory). The worker handles that one message (its requests go straight to the engine,
its loads and stores straight to the rings' memory, as with the round-robin scheduler), and
*yields*: it sends the context block back, which the scheduler writes to the context memory
before the connection may be resumed again, on any worker. So a design serves more
connections than it has copies, and a copy holds no state of a connection between turns.

Messages of the scheduler (``APP_META``: :mod:`beehive.proto.tcp.app`; ``MEM_META``:
:mod:`apiary.os.memory_tile`):

=====================  ===================  ===========================  ======================
message                from → to            metadata                     payload
=====================  ===================  ===========================  ======================
``TCP_NEW_FLOW_NOTIF``  engine → scheduler   APP_META                     none
``TCP_RX_MSG_RESP``,    (LOCAL0)
``TCP_TX_MSG_RESP``
``CTX_RESUME`` (52)    scheduler → worker   :data:`RESUME_FORMAT`: the   the context block
                       (route ``"worker"``) engine message's type
                                            (``event``) and APP_META
``CTX_YIELD`` (53)     worker → scheduler   :data:`YIELD_FORMAT`:        the context block
                       (LOCAL1)             ``flow``                     (``ctx_bytes``)
``LOAD_MEM``,          scheduler → context  the block's address,         the block (a store)
``STORE_MEM``          memory (``"ctx_mem"``) ``ctx_bytes``
``LOAD_MEM_ACK``,      context memory →     MEM_META                     the block (a load)
``STORE_MEM_ACK``      scheduler (LOCAL1)
=====================  ===================  ===========================  ======================

A connection's block is at ``ctx_base + slot * ctx_bytes`` of the context memory (``slot``:
its flow slot, the handle's low bits). The resume of a new connection (its receive ring's
``TCP_NEW_FLOW_NOTIF``) carries a block of zeros, not what the slot's previous connection left.

Rules the scheduler keeps:

* a connection runs on at most one worker at a time, and a worker runs at most one connection:
  messages about a connection that is running wait until it yields;
* a connection's messages are resumed in the order the engine sent them, one per turn;
* connections wait for a worker in the order they became ready (a FIFO of flow slots);
* a yield comes from the worker the connection runs on, else it is dropped and counted
  (``bad_yield``) and the connection stays where it is.

Cost and speed: one resume or yield at a time, each a memory round trip (the resume of a new
connection needs none); up to ``PENDING`` (4) messages waiting per connection (the engine has at
most two announcements and one answer of each kind outstanding to a synchronous application),
one more is dropped and counted (``overflow``). Engine messages are taken one a cycle, except in
the cycle a resume or yield takes effect. Announcements of connections that ended unannounced
(a status other than OK) are dropped and counted (``dropped``), as the round-robin scheduler
does. This version addresses the context memory directly (a trusted tile).
"""

from typing import Any

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum
from amaranth.lib.memory import Memory

from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.noc.msgtype import register_msg_types
from apiary.noc.spec import register_formats
from apiary.os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, MEM_FORMAT, STORE_MEM, STORE_MEM_ACK
from apiary.os.uapi import (KERNEL_FORMAT, KERNEL_META, OFFSET_BITS, KernelMsgType as K, Perm,
                            Status as KStatus, monitor_input)
from apiary.stream.counters import count
from apiary.stream.format import Field, Format
from apiary.stream.layout import payload_words
from apiary.stream.queue import Queue
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import APP_META, BufferKind, Status
from ..proto.tcp.config import TcpConfig, config_or_default
from ..proto.tcp.segments import GRANT_USER, RETRY_CYCLES
from ..proto.tcp.state import slot_bits
from .scheduler import KEY_WORKER


__all__ = ["ContextMsgType", "RESUME_FORMAT", "YIELD_FORMAT", "TcpContextSchedulerTile",
           "KEY_WORKER", "KEY_CTX_MEM", "PENDING", "block_in", "block_out"]


@register_msg_types
class ContextMsgType(enum.Enum, shape=8):
    """The messages between a context scheduler and its workers."""
    CTX_RESUME = 52
    CTX_YIELD  = 53


#: The metadata of ``CTX_RESUME``: the engine's message, type and fields.
RESUME_FORMAT = Format("ctx_resume_meta", [
    Field("app", APP_META.size, "the engine message's APP_META, as the engine sent it"),
    Field("event", 8, "the engine message's type (TCP_NEW_FLOW_NOTIF, TCP_RX_MSG_RESP, ...)"),
], order="lsb", doc="A connection resumed on a worker: the message it waited with.")

#: The metadata of ``CTX_YIELD``.
YIELD_FORMAT = Format("ctx_yield_meta", [
    Field("flow", 16, "the connection's flow handle, as its resume gave it"),
], order="lsb", doc="A worker gives a connection back, with its context block as payload.")

register_formats([ContextMsgType.CTX_RESUME], RESUME_FORMAT)
register_formats([ContextMsgType.CTX_YIELD], YIELD_FORMAT)

#: Route key of the context memory.
KEY_CTX_MEM = "ctx_mem"
#: Engine messages a connection may have waiting.
PENDING = 4

_ENGINE = (MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP, MsgType.TCP_TX_MSG_RESP)


def block_in(m: Module, port: Any, block: Any, k: Signal, width: int) -> Any:
    """Take the payload words on ``port`` (a receiver's ``o_data``) into ``block``, word ``k``
    next (0 at the start; words past the block are dropped). Returns the cycle's "its last word
    was taken"; ``k`` is 0 again after it."""
    words = len(block) // width
    m.d.comb += port.ready.eq(1)
    with m.If(port.valid & (k < words)):
        m.d.sync += [block.word_select(k, width).eq(port.payload.data), k.eq(k + 1)]
    last = port.valid & port.payload.last
    with m.If(last):
        m.d.sync += k.eq(0)
    return last


def block_out(m: Module, port: Any, block: Any, k: Signal, width: int, nbytes: int) -> Any:
    """Offer the first ``nbytes`` of ``block`` on ``port`` (a sender's ``i_data``), word ``k``
    next (0 at the start). Returns the cycle's "its last word was taken"; ``k`` is 0 again
    after it."""
    words, tail = payload_words(nbytes, width)
    final = k == words - 1
    m.d.comb += [port.valid.eq(1), port.payload.data.eq(block.word_select(k, width)),
                 port.payload.last.eq(final),
                 port.payload.nbytes.eq(Mux(final, tail, width // 8))]
    with m.If(port.ready):
        m.d.sync += k.eq(Mux(final, 0, k + 1))
    return port.ready & final


class TcpContextSchedulerTile(Tile):
    """Connections resumed on any free worker with their context blocks (see the module
    docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"worker"`` (1 to 16) and ``"ctx_mem"`` (the context memory); standalone (no
        routes), two workers at (0, 0) and the memory at (0, 0).
    config : TcpConfig
        The engine's (``flows``: the connections, and the context blocks, there can be).
    ctx_bytes : int
        Bytes of a context block: a power of two from 8 to 256.
    ctx_base : int
        Where the first block is in the context memory (a multiple of ``ctx_bytes``).

    Counters: ``resumes``, ``yields``, ``migrations`` (resumes on another worker than the
    connection's previous turn), ``dropped``, ``overflow``, ``bad_yield``, ``mem_errors``
    (context loads or stores the memory refused; a refused load resumes a block of zeros).
    """

    streaming = False

    inputs: tuple[Receive, ...] = (
        Receive("app_rx", *_ENGINE, meta=APP_META, fbits=Fbits.LOCAL0),
        Receive("yield_rx", ContextMsgType.CTX_YIELD, meta=YIELD_FORMAT, fbits=Fbits.LOCAL1),
        Receive("mem_rx", LOAD_MEM_ACK, STORE_MEM_ACK, meta=MEM_FORMAT, fbits=Fbits.LOCAL1),
    )
    outputs: tuple[Send, ...] = (
        Send("resume_tx", ContextMsgType.CTX_RESUME, meta=RESUME_FORMAT, keys=[KEY_WORKER]),
        Send("mem_tx", LOAD_MEM, STORE_MEM, meta=MEM_FORMAT, keys=[KEY_CTX_MEM]),
    )

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 ctx_bytes: int = 32, ctx_base: int = 0) -> None:
        self.config = config_or_default(config)
        if ctx_bytes not in [1 << k for k in range(3, 9)]:
            raise ValueError(f"ctx_bytes must be a power of two from 8 to 256, not {ctx_bytes!r}")
        if not isinstance(ctx_base, int) or ctx_base < 0 or ctx_base % ctx_bytes:
            raise ValueError(f"ctx_base must be a multiple of ctx_bytes ({ctx_bytes}), not "
                             f"{ctx_base!r}")
        self.ctx_bytes, self.ctx_base = ctx_bytes, ctx_base
        self.apiary = env is not None and not env.trusted
        counters = {
            "resumes": "connections resumed on a worker (one engine message each)",
            "yields": "context blocks given back and stored",
            "migrations": "resumes on another worker than the connection's previous turn",
            "dropped": "announcements of connections that ended unannounced, and messages the "
                       "framing dropped",
            "overflow": f"engine messages dropped: {PENDING} of the connection were waiting",
            "bad_yield": "yields from a worker the connection was not running on, dropped",
            "mem_errors": "context loads and stores the memory refused",
        }
        if self.apiary:
            counters |= {
                "alloc_failed": "allocations of the context segment refused (asked again later)",
                "grant_failed": "ring capabilities the monitor refused to send on or free",
            }
            self.inputs = (monitor_input(Fbits.LOCAL0), *self.inputs)
            self.outputs = (*self.outputs, Send("k_tx", K.CAP_ALLOC, K.CAP_SEND, K.CAP_FREE,
                                                meta=KERNEL_FORMAT, keys=()))
        super().__init__(env, counters=counters)
        routes = self.env.next_hops("data")
        workers = routes.get(KEY_WORKER) or []
        if routes and not 1 <= len(workers) <= 16:
            raise ValueError(f"TcpContextSchedulerTile {self.env.name!r} needs 1 to 16 routes "
                             f"with key {KEY_WORKER!r} (one per worker), not {len(workers)}")
        if routes and not self.apiary and len(routes.get(KEY_CTX_MEM) or []) != 1:
            raise ValueError(f"TcpContextSchedulerTile {self.env.name!r} needs one route with "
                             f"key {KEY_CTX_MEM!r} (its context memory)")
        self.workers = [(w.x, w.y, w.fbits) for w in workers] or [(0, 0, Fbits.LOCAL0)] * 2
        mem = (routes.get(KEY_CTX_MEM) or [None])[0]
        self.ctx_mem = (mem.x, mem.y, mem.fbits) if mem else (0, 0, Fbits.LOCAL0)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, n, flows = self.env.width, len(self.workers), self.config.flows
        sb = slot_bits(flows)
        counters = self.counters
        ports = self.message_ports(m)
        app_rx, yield_rx, mem_rx = ports.app_rx, ports.yield_rx, ports.mem_rx
        resume_tx, mem_tx = ports.resume_tx, ports.mem_tx
        words, _ = payload_words(self.ctx_bytes, width)
        dropped, overflow = Signal(32), Signal(32)
        errors = app_rx.errors + yield_rx.errors + mem_rx.errors
        if self.apiary:
            errors = errors + ports.monitor.errors
        m.d.comb += [counters.dropped.eq(dropped + errors),
                     counters.overflow.eq(overflow)]

        # Per connection: the messages waiting (a ring of PENDING in `pending`, from `head`,
        # `count` of them), whether it is running or waiting for a worker, the worker of its
        # last turn. Exactly one of the intake, a resume and a yield writes `state` in a cycle.
        event = data.StructLayout({"msg_type": 8, "meta": APP_META.layout()})
        m.submodules.pending = pending = Memory(shape=event, depth=flows * PENDING, init=[])
        pb = PENDING.bit_length() - 1
        flow_state = data.StructLayout({"head": pb, "count": range(PENDING + 1), "running": 1,
                                        "queued": 1, "seen": 1, "owner": range(max(n, 2))})
        m.submodules.state = state = Memory(shape=flow_state, depth=flows, init=[])
        st_w = state.write_port()
        busy = Signal(n)
        m.submodules.ready = ready = Queue(range(max(flows, 2)), flows)
        commit = Signal()                       # a resume or yield takes effect: intake waits

        ctx_handle, have_ctx = self._intake(m, ports, event, state, st_w, pending, ready, commit,
                                            dropped, overflow)

        yields = self._yield_queue(m, yield_rx, words, sb, overflow)

        # -- one resume or yield at a time ------------------------------------------------------
        block = Signal(words * width)
        f = Signal(range(max(flows, 2)))        # the connection being resumed or yielded
        w = Signal(range(max(n, 2)))            # its worker
        ev = Signal(event)                      # the message it is resumed with
        k = Signal(range(words + 1))            # block word
        rd = pending.read_port(domain="comb")
        head = ready.o.payload
        st_head, st_y, st_f = (state.read_port(domain="comb") for _ in range(3))
        s_head, s_y, s_f = st_head.data, st_y.data, st_f.data
        m.d.comb += [st_head.addr.eq(head), rd.addr.eq(Cat(s_head.head, head))]
        first_free = Signal(range(max(n, 2)))
        for i in reversed(range(n)):
            with m.If(~busy[i]):
                m.d.comb += first_free.eq(i)
        here = (self.env.x, self.env.y, Fbits.LOCAL1)
        y = yields.o.payload
        y_slot = y.slot
        m.d.comb += [st_y.addr.eq(y_slot), st_f.addr.eq(f)]
        from_owner = Signal()
        for i, (x, yy, fb) in enumerate(self.workers):
            with m.If(s_y.owner == i):
                m.d.comb += from_owner.eq((y.x == x) & (y.y == yy) & (y.fbits == fb))
        mem = data.View(MEM_FORMAT.layout(), mem_rx.o_hdr.payload.meta)
        request = Signal(MEM_FORMAT.layout())
        offset = self.ctx_base + (f << (self.ctx_bytes.bit_length() - 1))
        if self.apiary:                     # in the context segment, through the monitor
            offset = Cat(offset[:OFFSET_BITS], ctx_handle)
        m.d.comb += [request.addr.eq(offset), request.size.eq(self.ctx_bytes)]

        def send_block(sender: Any, then: str) -> None:
            """Stream ``block`` as the payload of the message just offered, then go to
            ``then``."""
            with m.If(block_out(m, sender.i_data, block, k, width, self.ctx_bytes)):
                m.next = then

        with m.FSM():
            with m.State("IDLE"):
                with m.If(yields.o.valid):
                    m.d.comb += yields.o.ready.eq(1)
                    with m.If(s_y.running & from_owner):
                        m.d.sync += [f.eq(y_slot), w.eq(s_y.owner), block.eq(y.block)]
                        m.next = "STORE"
                    with m.Else():
                        count(m, counters.bad_yield)
                with m.Elif(ready.o.valid & ~busy.all() & have_ctx):
                    # Claim the connection and a worker; take its first message.
                    m.d.comb += [commit.eq(1), ready.o.ready.eq(1)]
                    fresh = ((rd.data.msg_type == MsgType.TCP_NEW_FLOW_NOTIF)
                             & (rd.data.meta.kind == BufferKind.RECEIVE))
                    m.d.sync += [f.eq(head), w.eq(first_free), ev.eq(rd.data),
                                 busy.bit_select(first_free, 1).eq(1)]
                    m.d.comb += [st_w.en.eq(1), st_w.addr.eq(head), st_w.data.eq(s_head),
                                 st_w.data.head.eq(s_head.head + 1),
                                 st_w.data.count.eq(s_head.count - 1),
                                 st_w.data.running.eq(1), st_w.data.queued.eq(0),
                                 st_w.data.seen.eq(1), st_w.data.owner.eq(first_free)]
                    with m.If(s_head.seen & ~fresh & (s_head.owner != first_free)):
                        count(m, counters.migrations)
                    with m.If(fresh):
                        m.d.sync += block.eq(0)
                        m.next = "RESUME"
                    with m.Else():
                        m.next = "LOAD"
            with m.State("STORE"):
                with m.If(offer_message(m, mem_tx, 1, dst=self.ctx_mem, src=here,
                                        msg_type=STORE_MEM, payload_bytes=self.ctx_bytes,
                                        meta=request)):
                    m.next = "STORE_DATA"
            with m.State("STORE_DATA"):
                send_block(mem_tx, "STORED")
            with m.State("STORED"):
                m.d.comb += [mem_rx.o_hdr.ready.eq(1), mem_rx.o_data.ready.eq(1)]
                with m.If(mem_rx.o_hdr.valid):
                    with m.If(mem.error):
                        count(m, counters.mem_errors)
                    # The connection may run again, anywhere; its worker is free.
                    again = s_f.count != 0
                    m.d.comb += [commit.eq(1), st_w.en.eq(1), st_w.addr.eq(f), st_w.data.eq(s_f),
                                 st_w.data.running.eq(0), st_w.data.queued.eq(again),
                                 ready.i.valid.eq(again), ready.i.payload.eq(f)]
                    m.d.sync += busy.bit_select(w, 1).eq(0)
                    count(m, counters.yields)
                    m.next = "IDLE"
            with m.State("LOAD"):
                with m.If(offer_message(m, mem_tx, 1, dst=self.ctx_mem, src=here,
                                        msg_type=LOAD_MEM, meta=request)):
                    m.next = "LOADED"
            with m.State("LOADED"):
                m.d.comb += mem_rx.o_hdr.ready.eq(1)
                with m.If(mem_rx.o_hdr.valid):
                    with m.If(mem.error | (mem_rx.o_hdr.payload.payload_bytes == 0)):
                        count(m, counters.mem_errors)
                        m.d.sync += block.eq(0)
                        m.next = "RESUME"
                    with m.Else():
                        m.next = "LOAD_DATA"
            with m.State("LOAD_DATA"):
                with m.If(block_in(m, mem_rx.o_data, block, k, width)):
                    m.next = "RESUME"
            with m.State("RESUME"):
                worker = self._worker(w)
                resume = Signal(RESUME_FORMAT.layout())
                m.d.comb += [resume.app.eq(ev.meta), resume.event.eq(ev.msg_type)]
                with m.If(offer_message(m, resume_tx, 1, dst=worker,
                                        src=(self.env.x, self.env.y, Fbits.LOCAL0),
                                        msg_type=ContextMsgType.CTX_RESUME.value,
                                        payload_bytes=self.ctx_bytes, meta=resume)):
                    count(m, counters.resumes)
                    m.next = "RESUME_DATA"
            with m.State("RESUME_DATA"):
                send_block(resume_tx, "IDLE")
        return m

    def _worker(self, index: Any) -> tuple[Any, Any, Any]:
        """The ``(x, y, fbits)`` of worker ``index`` (an Amaranth value)."""
        return tuple(Array(Const(wk[i]) for wk in self.workers)[index] for i in range(3))

    def _intake(self, m: Module, ports: Any, event: Any, state: Memory, st_w: Any,
                pending: Memory, ready: Queue, commit: Signal, dropped: Signal,
                overflow: Signal) -> tuple[Any, Any]:
        """Engine messages into their connection's ring of waiting messages, one a cycle but in
        the cycle a resume or yield takes effect (``commit``); a connection neither running nor
        waiting goes into ``ready``. Returns the context segment's handle and whether it is
        allocated (under Apiary; else constants)."""
        app_rx = ports.app_rx
        sb, pb = slot_bits(self.config.flows), PENDING.bit_length() - 1
        # (Under Apiary the engine announces a connection's rings by sending them: the kernel
        # side below forwards them to every worker and gives the intake the announcement each
        # stands for, ahead of the engine's messages.)
        incoming = Signal(event)
        meta = incoming.meta
        in_valid = Signal()
        m.d.comb += [in_valid.eq(app_rx.o_hdr.valid),
                     incoming.msg_type.eq(app_rx.o_hdr.payload.msg_type),
                     incoming.meta.eq(app_rx.o_hdr.payload.meta), app_rx.o_data.ready.eq(1)]
        engine_ready = ~commit
        ctx_handle, have_ctx = Const(0, 8), Const(1)
        if self.apiary:
            notes, ctx_handle, have_ctx = self._kernel(m, ports.monitor, ports.k_tx, overflow)
            m.d.comb += notes.ready.eq(~commit)
            engine_ready = ~commit & ~notes.valid
            with m.If(notes.valid):
                m.d.comb += [in_valid.eq(1), incoming.eq(0),
                             incoming.msg_type.eq(MsgType.TCP_NEW_FLOW_NOTIF),
                             meta.flow.eq(notes.payload.flow), meta.kind.eq(notes.payload.kind),
                             meta.size_log2.eq(notes.payload.size_log2)]
        slot = meta.flow[:sb]
        st_in = state.read_port(domain="comb")
        s_in = st_in.data
        bad = (incoming.msg_type == MsgType.TCP_NEW_FLOW_NOTIF) & (meta.status != Status.OK)
        take = in_valid & ~commit
        wr = pending.write_port()
        m.d.comb += [
            app_rx.o_hdr.ready.eq(engine_ready), st_in.addr.eq(slot),
            wr.addr.eq(Cat((s_in.head + s_in.count)[:pb], slot)), wr.data.eq(incoming),
        ]
        with m.If(take & bad):
            count(m, dropped)
        with m.Elif(take & (s_in.count == PENDING)):
            count(m, overflow)
        with m.Elif(take):
            wake = ~s_in.running & ~s_in.queued
            m.d.comb += [wr.en.eq(1), st_w.en.eq(1), st_w.addr.eq(slot), st_w.data.eq(s_in),
                         st_w.data.count.eq(s_in.count + 1),
                         st_w.data.queued.eq(s_in.queued | wake),
                         ready.i.valid.eq(wake), ready.i.payload.eq(slot)]
        return ctx_handle, have_ctx

    def _yield_queue(self, m: Module, yield_rx: Any, words: int, sb: int,
                     overflow: Signal) -> Queue:
        """Yields, each with its sender and block, in a queue of one per worker: taken as they
        come, so that a yield never holds up the memory's answers behind it on the input. One
        that finds the queue full (a worker that yields more than it was resumed) is dropped
        and counted in ``overflow``."""
        width = self.env.width
        entry = data.StructLayout({"slot": sb, "x": 8, "y": 8, "fbits": 4,
                                   "block": words * width})
        m.submodules.yields = q = Queue(entry, len(self.workers))
        hdr = yield_rx.o_hdr.payload
        flow = data.View(YIELD_FORMAT.layout(), hdr.meta).flow
        k = Signal(range(words + 1))
        got = Signal(entry)
        with m.FSM(name="yield_in"):
            with m.State("HEAD"):
                m.d.comb += yield_rx.o_hdr.ready.eq(1)
                with m.If(yield_rx.o_hdr.valid):
                    m.d.sync += [got.slot.eq(flow[:sb]), got.x.eq(hdr.src_x),
                                 got.y.eq(hdr.src_y), got.fbits.eq(hdr.src_fbits),
                                 got.block.eq(0), k.eq(0)]
                    with m.If(hdr.payload_bytes != 0):
                        m.next = "BLOCK"
                    with m.Else():
                        m.next = "PUSH"
            with m.State("BLOCK"):
                with m.If(block_in(m, yield_rx.o_data, got.block, k, width)):
                    m.next = "PUSH"
            with m.State("PUSH"):
                m.d.comb += [q.i.valid.eq(1), q.i.payload.eq(got)]
                with m.If(~q.i.ready):
                    count(m, overflow)
                m.next = "HEAD"
        return q

    def _kernel(self, m: Module, k_rx: Any, k_tx: Any,
                overflow: Signal) -> tuple[Any, Signal, Signal]:
        """Under Apiary: the context segment, allocated once out of reset (``CAP_ALLOC`` of
        ``flows * ctx_bytes``, asked again after a refusal), and each connection ring the
        engine sends sent on to every worker (``CAP_SEND``, the same ``user`` word, size and
        permissions), the scheduler's own copy freed (``CAP_FREE``), then announced to the
        intake (a notification that finds the queue of ``2 * flows`` full is counted in
        ``overflow``). Returns the announcements (a stream of :data:`GRANT_USER`), the segment's
        handle, and whether it is allocated."""
        counters, n = self.counters, len(self.workers)
        here = (self.env.x, self.env.y, Fbits.LOCAL0)
        grant = data.StructLayout({"handle": 8, "size": 40, "perm": 2, "user": GRANT_USER})
        m.submodules.grants = grants = Queue(grant, 2 * self.config.flows)
        m.submodules.notes = notes = Queue(GRANT_USER, 2)
        ctx_handle, have_ctx, asking = Signal(8), Signal(), Signal()
        wait = Signal(range(RETRY_CYCLES + 1))
        failed, refused = Signal(32), Signal(32)
        m.d.comb += [counters.alloc_failed.eq(failed), counters.grant_failed.eq(refused)]
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)

        res = data.View(KERNEL_META, k_rx.o_hdr.payload.meta)
        result = k_rx.o_hdr.valid & (k_rx.o_hdr.payload.msg_type == K.CAP_RESULT.value)
        notify = k_rx.o_hdr.valid & (k_rx.o_hdr.payload.msg_type == K.CAP_NOTIFY.value)
        g = grants.i.payload
        m.d.comb += [k_rx.o_hdr.ready.eq(1), k_rx.o_data.ready.eq(1),
                     grants.i.valid.eq(notify), g.handle.eq(res.handle), g.size.eq(res.size),
                     g.perm.eq(res.perm), g.user.eq(res.user[:GRANT_USER.size])]
        with m.If(notify & ~grants.i.ready):
            count(m, overflow)
        with m.If(result & (res.op == K.CAP_ALLOC.value)):
            m.d.sync += asking.eq(0)
            with m.If(res.status == KStatus.OK):
                m.d.sync += [ctx_handle.eq(res.handle), have_ctx.eq(1)]
            with m.Else():
                m.d.sync += wait.eq(RETRY_CYCLES)
                count(m, failed)
        with m.Elif(result & (res.status != KStatus.OK)):
            count(m, refused)

        # One kernel request at a time: the allocation, else the head grant's steps (a send to
        # each worker, the free, the announcement).
        step = Signal(range(n + 2))
        head = grants.o.payload
        kmeta = Signal(KERNEL_META)
        worker = self._worker(step)
        k_valid, k_type = Signal(), Signal(8)
        with m.If(~have_ctx):
            m.d.comb += [k_valid.eq(~asking & (wait == 0)), k_type.eq(K.CAP_ALLOC.value),
                         kmeta.size.eq(self.config.flows * self.ctx_bytes), kmeta.perm.eq(Perm.RW)]
            with m.If(k_valid & k_tx.i_hdr.ready):
                m.d.sync += asking.eq(1)
        with m.Elif(grants.o.valid & (step < n)):
            m.d.comb += [k_valid.eq(1), k_type.eq(K.CAP_SEND.value), kmeta.handle.eq(head.handle),
                         kmeta.size.eq(head.size), kmeta.perm.eq(head.perm),
                         kmeta.user.eq(head.user), kmeta.peer_x.eq(worker[0]),
                         kmeta.peer_y.eq(worker[1]), kmeta.peer_fbits.eq(worker[2])]
        with m.Elif(grants.o.valid & (step == n)):
            m.d.comb += [k_valid.eq(1), k_type.eq(K.CAP_FREE.value), kmeta.handle.eq(head.handle)]
        with m.Elif(grants.o.valid):
            m.d.comb += [notes.i.valid.eq(1), notes.i.payload.eq(head.user)]
            with m.If(notes.i.ready):
                m.d.comb += grants.o.ready.eq(1)
                m.d.sync += step.eq(0)
        with m.If(offer_message(m, k_tx, k_valid, dst=here, src=here, msg_type=k_type,
                                meta=kmeta) & k_valid & have_ctx):
            m.d.sync += step.eq(step + 1)
        return notes.o, ctx_handle, have_ctx
