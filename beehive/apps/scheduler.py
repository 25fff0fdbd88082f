"""A round-robin scheduler of TCP connections over several copies of an application tile.

Beehive replicates a stateful TCP application (the Reed-Solomon encoder of the paper, four
copies) behind a scheduler tile: the TCP engine sees one application, the scheduler, and the
scheduler gives each new connection to the next copy (a *worker*) in turn, for the connection's
whole life. Data does not pass through it: a worker reads and writes the connection's rings in
memory itself and sends its requests straight to the engine; only the engine's messages about
the connection (its announcement and the answers to the worker's requests) come through the
scheduler, which forwards each to the connection's worker.

=========================  ==========================  ===========================================
in (LOCAL0)                from                        what the scheduler does
=========================  ==========================  ===========================================
``TCP_NEW_FLOW_NOTIF``     the engine's receive tile   status OK, the receive ring: the connection
                                                       goes to the next worker; then forwarded to
                                                       it (the send ring's too). Other statuses
                                                       (a connection dropped before it was
                                                       announced) are dropped and counted
``TCP_RX_MSG_RESP``,       the engine's tiles          forwarded to the connection's worker
``TCP_TX_MSG_RESP``,
``TCP_PEER_RESP``
``CAP_NOTIFY`` (Apiary)    the scheduler's monitor     a connection's ring (the engine's
                                                       ``CAP_SEND``, :mod:`beehive.proto.tcp.
                                                       segments`): the receive ring picks the
                                                       worker; the capability is sent on to it
                                                       (``CAP_SEND`` with the same ``user`` word,
                                                       size and permissions), and the
                                                       scheduler's own copy dropped (``CAP_FREE``)
=========================  ==========================  ===========================================

Routes: ``"worker"`` to each worker, in order (several routes with that key; a worker takes the
engine's messages on the sub-port of its route, LOCAL0 for a
:class:`~beehive.apps.tcp_app.TcpAppTile`). The engine routes the local port to the scheduler,
and each worker to the engine as usual (``examples/tcp_apiary.py``, ``scheduler=True``).

Throughput: one message a cycle; latency 2 cycles plus the framing. Its input never waits for
its output (``streaming = False``, so ``apiary check`` finds no cycle through it and the kernel's
memory tiles): messages wait in a queue of ``4 * flows``, more than the engine can have
outstanding to it (two announcements per connection, one answer per outstanding request of
each kind); one that finds it full would be dropped and counted in ``overflow``. Under Apiary
its monitor holds a ring's capability only from its ``CAP_NOTIFY`` to the ``CAP_FREE`` behind
the forwarding ``CAP_SEND``.
"""

from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from apiary.noc.framing import MessageReceiver, MessageSender, offer_message
from apiary.noc.header import Fbits
from apiary.os.uapi import KERNEL_FORMAT, KERNEL_META, KernelMsgType as K, Status as KStatus
from apiary.stream.queue import Queue
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import APP_META, BufferKind, Status
from ..proto.tcp.config import TcpConfig, config_or_default
from ..proto.tcp.segments import GRANT_USER
from ..proto.tcp.state import slot_bits
from apiary.stream.counters import count


__all__ = ["TcpSchedulerTile", "KEY_WORKER"]


#: Route key of the workers.
KEY_WORKER = "worker"

#: The engine's messages: in, and on to the workers.
_ENGINE = (MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP, MsgType.TCP_TX_MSG_RESP,
           MsgType.TCP_PEER_RESP)
_APP_RX = Receive("app_rx", *_ENGINE, meta=APP_META)
_APP_TX = Send("app_tx", *_ENGINE, meta=APP_META, keys=[KEY_WORKER])


class TcpSchedulerTile(Tile):
    """Round-robin scheduler of TCP connections over workers (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"worker"`` (1 to 16 of them); standalone (no routes), two workers at (0, 0).
    config : TcpConfig
        The engine's (``flows`` sizes the table of which worker has which connection).
    """

    streaming = False

    # Under Apiary the monitor's messages come in on the same sub-port (split by type: its
    # CAP_RESULT and CAP_NOTIFY, then the rest), and the CAP_SEND and CAP_FREE go to it, on no
    # route; a trusted scheduler has the engine's messages alone.
    inputs: tuple[Receive, ...] = (
        Receive("k_rx", K.CAP_RESULT, K.CAP_NOTIFY, meta=KERNEL_FORMAT), _APP_RX)
    outputs: tuple[Send, ...] = (
        _APP_TX, Send("k_tx", K.CAP_SEND, K.CAP_FREE, meta=KERNEL_FORMAT, keys=()))

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None) -> None:
        config = config_or_default(config)
        self.config = config
        counters = {
            "flows": "connections given to a worker",
            "forwarded": "engine messages forwarded to a worker",
            "dropped": "announcements of connections that ended unannounced, and messages the "
                       "framing dropped",
            "overflow": "messages dropped because the queue was full (never, by its size)",
        }
        if env is not None and not env.trusted:
            counters["grant_failed"] = "ring capabilities the monitor refused to send on"
        super().__init__(env, counters=counters)
        if self.env.trusted:
            self.inputs, self.outputs = (_APP_RX,), (_APP_TX,)
        routes = self.env.next_hops("data")
        workers = routes.get(KEY_WORKER) or []
        if routes and not 1 <= len(workers) <= 16:
            raise ValueError(f"TcpSchedulerTile {self.env.name!r} needs 1 to 16 routes with key "
                             f"{KEY_WORKER!r} (one per worker), not {len(workers)}")
        self.workers = [(w.x, w.y, w.fbits) for w in workers] or [(0, 0, Fbits.LOCAL0)] * 2

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n = len(self.workers)
        flows, sb = self.config.flows, slot_bits(self.config.flows)
        apiary = not self.env.trusted
        counters = self.counters
        here = (self.env.x, self.env.y, Fbits.LOCAL0)

        ports = self.message_ports(m)
        app_rx, app_tx = ports.app_rx, ports.app_tx
        errors = app_rx.errors
        if apiary:
            k_rx, k_tx = ports.k_rx, ports.k_tx
            errors += k_rx.errors

        # Which worker has each flow slot's connection; the next worker.
        index = range(max(n, 2))                # (a zero-width memory upsets Yosys)
        m.submodules.owner = owner = Memory(shape=index, depth=flows, init=[])
        owner_rd = owner.read_port(domain="comb")
        owner_wr = owner.write_port()
        turn = Signal(index)

        def assign(slot: Any) -> Any:
            """Give the connection in ``slot`` to the next worker; returns the worker."""
            m.d.comb += [owner_wr.en.eq(1), owner_wr.addr.eq(slot), owner_wr.data.eq(turn)]
            m.d.sync += [turn.eq(Mux(turn == n - 1, 0, turn + 1)),
                         counters.flows.eq(counters.flows + 1)]
            return turn

        def worker_field(index: Any, k: int) -> Any:
            value = self.workers[0][k]
            for i in range(1, n):
                value = Mux(index == i, self.workers[i][k], value)
            return value

        # -- engine messages: forwarded to their connection's worker -----------------------------
        fwd = data.StructLayout({"msg_type": 8, "worker": index, "meta": APP_META.layout()})
        m.submodules.fwd_q = fwd_q = Queue(fwd, 4 * flows)
        hdr = app_rx.o_hdr.payload
        meta = data.View(APP_META.layout(), hdr.meta)
        slot = meta.flow[:sb]
        dropped = Signal(32)
        m.d.comb += [app_rx.o_data.ready.eq(1), owner_rd.addr.eq(slot),
                     fwd_q.i.payload.msg_type.eq(hdr.msg_type), fwd_q.i.payload.meta.eq(hdr.meta),
                     fwd_q.i.payload.worker.eq(owner_rd.data)]
        announce = (hdr.msg_type == MsgType.TCP_NEW_FLOW_NOTIF)
        bad = announce & (meta.status != Status.OK)
        overflow = Signal(32)
        m.d.comb += [app_rx.o_hdr.ready.eq(1), fwd_q.i.valid.eq(app_rx.o_hdr.valid & ~bad)]
        with m.If(app_rx.o_hdr.valid & bad):
            m.d.sync += dropped.eq(dropped + 1)
        with m.If(fwd_q.i.valid & ~fwd_q.i.ready):
            m.d.sync += overflow.eq(overflow + 1)
        with m.If(app_rx.o_hdr.valid & fwd_q.i.ready & announce & ~bad
                  & (meta.kind == BufferKind.RECEIVE)):
            m.d.comb += fwd_q.i.payload.worker.eq(assign(slot))
        out = fwd_q.o.payload
        m.d.comb += fwd_q.o.ready.eq(offer_message(
            m, app_tx, fwd_q.o.valid,
            dst=tuple(worker_field(out.worker, k) for k in range(3)), src=here,
            msg_type=out.msg_type, meta=out.meta))
        with m.If(fwd_q.o.valid & fwd_q.o.ready):
            count(m, counters.forwarded)
        if apiary:
            overflow = overflow + self._grants(m, k_rx, k_tx, assign, worker_field, owner, sb,
                                               here)
        m.d.comb += [counters.dropped.eq(dropped + errors), counters.overflow.eq(overflow)]
        return m

    def _grants(self, m: Module, k_rx: MessageReceiver, k_tx: MessageSender, assign: Any,
                worker_field: Any, owner: Memory, sb: int, here: tuple) -> Signal:
        """Under Apiary: each ring's capability on to the connection's worker, then dropped.
        Returns the count of notifications the full queue dropped."""
        n = len(self.workers)
        grant = data.StructLayout({"handle": 8, "size": 40, "perm": 2, "user": 32,
                                   "worker": range(max(n, 2))})
        m.submodules.grant_q = grant_q = Queue(grant, 2 * self.config.flows)
        k_hdr = k_rx.o_hdr.payload
        k_meta = data.View(KERNEL_META, k_hdr.meta)
        user = data.View(GRANT_USER, k_meta.user[:GRANT_USER.size])
        notify = k_hdr.msg_type == K.CAP_NOTIFY.value
        g = grant_q.i.payload
        m.d.comb += [
            k_rx.o_data.ready.eq(1),
            k_rx.o_hdr.ready.eq(1),
            grant_q.i.valid.eq(k_rx.o_hdr.valid & notify),
            g.handle.eq(k_meta.handle), g.size.eq(k_meta.size), g.perm.eq(k_meta.perm),
            g.user.eq(k_meta.user),
        ]
        owner_rd = owner.read_port(domain="comb")
        m.d.comb += [owner_rd.addr.eq(user.flow[:sb]), g.worker.eq(owner_rd.data)]
        with m.If(k_rx.o_hdr.valid & notify & grant_q.i.ready
                  & (user.kind == BufferKind.RECEIVE)):
            m.d.comb += g.worker.eq(assign(user.flow[:sb]))
        overflow = Signal(32)
        with m.If(grant_q.i.valid & ~grant_q.i.ready):
            m.d.sync += overflow.eq(overflow + 1)
        failed = Signal(32)
        with m.If(k_rx.o_hdr.valid & ~notify & (k_meta.status != KStatus.OK)):
            m.d.sync += failed.eq(failed + 1)
        m.d.comb += self.counters.grant_failed.eq(failed)

        # Two messages per ring: CAP_SEND to the worker, CAP_FREE of the scheduler's copy.
        freeing = Signal()
        o = grant_q.o.payload
        meta = Signal(KERNEL_META)
        m.d.comb += [meta.handle.eq(o.handle), meta.user.eq(o.user)]
        with m.If(~freeing):
            m.d.comb += [meta.size.eq(o.size), meta.perm.eq(o.perm),
                         meta.peer_x.eq(worker_field(o.worker, 0)),
                         meta.peer_y.eq(worker_field(o.worker, 1)),
                         meta.peer_fbits.eq(worker_field(o.worker, 2))]
        taken = offer_message(m, k_tx, grant_q.o.valid, dst=here, src=here,
                              msg_type=Mux(freeing, K.CAP_FREE.value, K.CAP_SEND.value),
                              meta=meta)
        with m.If(grant_q.o.valid & taken):
            m.d.sync += freeing.eq(~freeing)
            m.d.comb += grant_q.o.ready.eq(freeing)
        return overflow
