"""Steps shared by the TCP applications that serve one flow at a time
(:class:`~beehive.apps.tcp_datagram.TcpDatagramTile`, :class:`~beehive.apps.tcp_rs.TcpRsTile`),
on top of :class:`~beehive.apps.tcp_app.FlowTable`:

* :func:`ring_add`: an address moved on in a ring buffer;
* :class:`FlowPicker`: the next flow to serve and the first look at it, as the states ``IDLE``,
  ``FRESH`` and ``CHECK`` of the tile's FSM;
* :func:`close_state`: the state that closes the connection served;
* :func:`take_tx_answer`: the ``TCP_TX_MSG_RESP`` the tile awaits, taken from the engine's
  messages.
"""

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from amaranth import Const, Module, Mux, Signal

from ..proto.messages import MsgType
from ..proto.tcp.app import Status
from apiary.noc.framing import MessageSender

from .tcp_app import FlowTable, TcpAppTile


__all__ = ["ring_add", "FlowPicker", "close_state", "take_tx_answer"]


def ring_add(addr: Any, plus: Any, wrap: Any) -> Any:
    """``addr + plus`` in the ring of ``2**wrap`` bytes that ``addr`` is in (``wrap`` 0: no
    ring)."""
    mask = ((Const(1, 49) << wrap) - 1)[:48]
    return Mux(wrap == 0, addr + plus, (addr & ~mask) | ((addr + plus) & mask))


class FlowPicker:
    """Pick the flow a one-flow-at-a-time application serves next from ``table``: a new
    connection (``new_q``) first, else one with a response (``ready_q``), clearing its
    ``fresh`` or ``queued`` bit.

    It adds read ports: ``gen_cur`` (the generation of ``slot``'s connection, combinational;
    the tile may read it in any state) and the ``ctx`` port read at the head of ``ready_q``.
    :meth:`states` builds the states that use them.
    """

    def __init__(self, m: Module, table: FlowTable, slot: Signal) -> None:
        self.table, self.slot = table, slot
        self.gen_cur = table.gens.read_port(domain="comb")
        self.ctx_r = table.ctx.read_port()
        self.pop_fresh, self.pop_ready = Signal(), Signal()
        new_q, ready_q = table.new_q, table.ready_q
        m.d.comb += [new_q.o.ready.eq(self.pop_fresh), ready_q.o.ready.eq(self.pop_ready),
                     self.ctx_r.addr.eq(ready_q.o.payload), self.gen_cur.addr.eq(slot)]
        with m.If(self.pop_fresh):
            m.d.sync += table.fresh.bit_select(new_q.o.payload, 1).eq(0)
        with m.If(self.pop_ready):
            m.d.sync += table.queued.bit_select(ready_q.o.payload, 1).eq(0)

    def states(self, m: Module, *, gen: Signal, dead: Signal, busy: Signal, rx: Signal,
               need: Any, whole: Callable[[Any], None], ask: str, close: str,
               truncated: Signal, on_pop: tuple = ()) -> None:
        """In the tile's FSM (``IDLE`` its first state):

        * ``IDLE``: pop the next flow into ``slot`` (``dead`` cleared, ``on_pop`` done);
        * ``FRESH`` (a new connection): ``gen`` is its generation; still live: go to ``ask``
          (its first ``TCP_RX_MSG_REQ``), else back to ``IDLE``;
        * ``CHECK`` (``busy``; its latest response into ``rx``, its generation into
          ``gen``): stale (the slot's connection ended or is another one since, or the
          status is neither OK nor EOF) or ``dead``: ``IDLE``; ``need`` bytes or more ready:
          ``whole(response)`` picks the next state; else at EOF (the peer closed) ``close``,
          counting a partial request or record left in ``truncated``; else ``ask`` (for
          more).
        """
        table, slot, new_q, ready_q = self.table, self.slot, self.table.new_q, self.table.ready_q
        with m.State("IDLE"):
            with m.If(new_q.o.valid):
                m.d.comb += self.pop_fresh.eq(1)
                m.d.sync += [slot.eq(new_q.o.payload), dead.eq(0), *on_pop]
                m.next = "FRESH"
            with m.Elif(ready_q.o.valid):
                m.d.comb += self.pop_ready.eq(1)
                m.d.sync += [slot.eq(ready_q.o.payload), dead.eq(0), *on_pop]
                m.next = "CHECK"
        with m.State("FRESH"):
            m.d.sync += gen.eq(self.gen_cur.data)
            m.next = "IDLE"
            with m.If(table.live.bit_select(slot, 1)):
                m.next = ask
        with m.State("CHECK"):          # the response is on ctx_r.data
            m.d.comb += busy.eq(1)
            cx = self.ctx_r.data
            m.d.sync += [rx.eq(cx), gen.eq(cx.gen)]
            stale = ~table.live.bit_select(slot, 1) | (self.gen_cur.data != cx.gen) | \
                ((cx.status != Status.OK) & (cx.status != Status.EOF))
            with m.If(stale | dead):
                m.next = "IDLE"
            with m.Elif(cx.length >= need):
                whole(cx)
            with m.Elif(cx.status == Status.EOF):     # closed by the peer
                m.d.sync += truncated.eq(truncated + (cx.length != 0))
                m.next = close
            with m.Else():
                m.next = ask


def close_state(m: Module, tile: TcpAppTile, sender: MessageSender, *, handle: Any,
                dead: Signal, busy: Signal, forget: Signal, closed: Signal, after: str) -> None:
    """State ``CLOSE`` of the tile's FSM (``busy``): ``TCP_CLOSE_REQ`` for the flow ``handle``
    on ``sender``; once it is taken, the connection is forgotten (``forget`` pulses) and counted
    in ``closed``, unless ``dead`` (it ended meanwhile: the slot may hold a new connection,
    which stays live), and the FSM goes to ``after``."""
    with m.State("CLOSE"):
        m.d.comb += busy.eq(1)
        with m.If(tile.app_request(m, sender, MsgType.TCP_CLOSE_REQ, tile.tcp_tx, flow=handle)):
            m.d.comb += forget.eq(~dead)
            m.d.sync += closed.eq(closed + ~dead)
            m.next = after


def take_tx_answer(m: Module, a: SimpleNamespace, table: FlowTable, *, wait: Signal,
                   got: Signal, handle: Any, ring: Any, ended: Signal, drop: Signal,
                   left: Signal | None = None) -> None:
    """Take the cycle's engine message (``a``, of :meth:`~beehive.apps.tcp_app.TcpAppTile.ports`)
    that ``table`` does not handle: the ``TCP_TX_MSG_RESP`` awaited (``wait``, for the flow
    ``handle``) clears ``wait``; OK sets ``got`` and ``ring.ptr``, ``ring.addr``,
    ``ring.wrap`` (and ``left``, the room, if given); another status pulses ``ended`` and
    forgets the connection. Anything else pulses ``drop``."""
    meta = a.meta
    with m.If(a.valid & ~table.handled):
        with m.Switch(a.type):
            with m.Case(MsgType.TCP_TX_MSG_RESP):
                with m.If(wait & (meta.flow == handle)):
                    m.d.sync += wait.eq(0)
                    with m.If(meta.status == Status.OK):
                        m.d.sync += [got.eq(1), ring.ptr.eq(meta.ptr), ring.addr.eq(meta.addr),
                                     ring.wrap.eq(meta.size_log2)]
                        if left is not None:
                            m.d.sync += left.eq(meta.length)
                    with m.Else():      # the connection is over: forget it
                        m.d.comb += ended.eq(1)
                        m.d.sync += table.live.bit_select(a.slot, 1).eq(0)
                with m.Else():
                    m.d.comb += drop.eq(1)
            with m.Default():
                m.d.comb += drop.eq(1)
