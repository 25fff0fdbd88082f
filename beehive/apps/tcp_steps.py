"""Steps the TCP applications share, as components, on top of
:class:`~beehive.apps.tcp_app.FlowTable` (which keeps their flows):

* :class:`TxAnswer`: the ``TCP_TX_MSG_RESP`` a request awaits, found among the engine's
  messages (the echo's jobs);
* :class:`HeldOffer`: a request, once offered, held until it is taken (the echo's engine and
  memory requests, the Reed-Solomon tile's memory requests);
* :class:`ChunkOut`: a buffered chunk's words to a store, or thrown away (the echo's loaded
  chunks, the Reed-Solomon tile's parity);
* :class:`AckWait`: the memory ack a request awaits (the sender's stores, the datagram tile's
  loads and stores, the Reed-Solomon tile's stores);
* :class:`FlowServer`: the base of a component that serves one flow at a time as a state
  machine (the datagram tile's records, the Reed-Solomon tile's front): it picks the next flow,
  takes a first look at its data, finds room in its send ring (leaving a flow that has none
  until the engine grants it, so that a peer that stops reading holds up no other flow), asks
  for more and closes it;
* :func:`ring_add`: an address moved on in a ring buffer.
"""

from typing import Any

from amaranth import Const, Module, Mux, Signal, Value
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.stream.layout import payload_signature

from ..proto.messages import MsgType
from ..proto.tcp.app import GEN_BITS, Status
from .tcp_app import (RX_CONTEXT, TABLE_MEMORIES, TX_GRANT, FlowTable, Requests,
                      engine_message, handle_of, read_port)


__all__ = ["ring_add", "TxAnswer", "HeldOffer", "ChunkOut", "AckWait", "FlowServer"]


#: A place in a send ring: the stream pointer, its address, the ring's ``2**wrap`` bytes.
_CURSOR = data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6})


def ring_add(addr: Any, plus: Any, wrap: Any) -> Any:
    """``addr + plus`` in the ring of ``2**wrap`` bytes that ``addr`` is in (``wrap`` 0: no
    ring)."""
    mask = ((Const(1, 49) << wrap) - 1)[:48]
    return Mux(wrap == 0, addr + plus, (addr & ~mask) | ((addr + plus) & mask))


class TxAnswer(wiring.Component):
    """The ``TCP_TX_MSG_RESP`` awaited by one of ``waiters`` requests for room in a send ring:
    waiter ``k`` awaits the answer for the flow ``handle[k]`` while ``wait[k]``.
    Combinational (the pulses come the cycle the message is on ``app``).

    Of the engine's messages the :class:`~beehive.apps.tcp_app.FlowTable` does not handle
    (``~handled``), the answer awaited pulses ``answered[k]`` and either ``ok[k]`` (status OK:
    ``meta.length`` bytes of room from ``meta.ptr``, at ``meta.addr`` in a ring of
    ``2**meta.size_log2`` bytes) or ``fail[k]`` and ``ended`` (another status: the connection is
    over, to be forgotten). Any other message pulses ``drop``. At most one waiter may await a
    flow (the first that does takes the answer).
    """

    def __init__(self, slot_bits: int, waiters: int = 1) -> None:
        self._waiters = waiters
        super().__init__({
            "app": In(engine_message(slot_bits)), "handled": In(1),
            "wait": In(waiters), "handle": In(data.ArrayLayout(unsigned(16), waiters)),
            "answered": Out(waiters), "ok": Out(waiters), "fail": Out(waiters),
            "ended": Out(1), "drop": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        a, meta = self.app, self.app.meta
        with m.If(a.valid & ~self.handled):
            with m.Switch(a.type):
                with m.Case(MsgType.TCP_TX_MSG_RESP):
                    ok = meta.status == Status.OK
                    for k in range(self._waiters):
                        with (m.If if k == 0 else m.Elif)(
                                self.wait[k] & (meta.flow == self.handle[k])):
                            m.d.comb += self.answered[k].eq(1)
                            with m.If(ok):
                                m.d.comb += self.ok[k].eq(1)
                            with m.Else():
                                m.d.comb += [self.fail[k].eq(1), self.ended.eq(1)]
                    with m.Else():
                        m.d.comb += self.drop.eq(1)
                with m.Default():
                    m.d.comb += self.drop.eq(1)
        return m


class HeldOffer(wiring.Component):
    """An offer that, once made, stays made until it is taken: a request on a NoC sender is
    several flits at narrow widths, so it may be neither changed nor withdrawn under way.

    ``choice`` (a dict of field names and shapes) says what is offered. While there is nothing
    held, ``offer`` is ``want`` and ``chosen`` is ``choice``; an offer not taken (``ready`` low)
    is held from the next cycle on (``hold``, ``held``): ``offer`` stays high and ``chosen``
    stays ``held`` until ``taken`` (``offer & ready``). Combinational from ``want``, ``choice``
    and ``ready``; one register per field of ``choice`` and ``hold``.
    """

    def __init__(self, choice: dict) -> None:
        self._choice = dict(choice)
        layout = data.StructLayout(self._choice)
        super().__init__({
            "want": In(1), "choice": In(layout), "ready": In(1),
            "offer": Out(1), "chosen": Out(layout), "taken": Out(1),
            "hold": Out(1), "held": Out(layout),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        held = {name: Signal(shape, name=f"held_{name}") for name, shape in self._choice.items()}
        for name, reg in held.items():
            m.d.comb += [getattr(self.held, name).eq(reg),
                         getattr(self.chosen, name).eq(Mux(self.hold, reg,
                                                           getattr(self.choice, name)))]
        m.d.comb += [self.offer.eq(self.hold | self.want),
                     self.taken.eq(self.offer & self.ready)]
        with m.If(self.taken):
            m.d.sync += self.hold.eq(0)
        with m.Elif(self.offer):
            m.d.sync += [self.hold.eq(1),
                         *(reg.eq(getattr(self.chosen, name)) for name, reg in held.items())]
        return m


class ChunkOut(wiring.Component):
    """A buffered chunk's words (``i``, a payload stream), from the cycle after a ``store``
    pulse to its last word, go to ``o`` (a store's payload; 0 cycles, at ``o``'s pace); from
    the cycle after a ``drain`` pulse to its last word they are taken and thrown away (a word a
    cycle). ``storing`` and ``draining`` say which is under way; ``done`` pulses as the last
    word goes. Pulse ``store`` or ``drain`` only between chunks.
    """

    def __init__(self, width: int) -> None:
        super().__init__({
            "i": In(payload_signature(width)), "o": Out(payload_signature(width)),
            "store": In(1), "drain": In(1),
            "storing": Out(1), "draining": Out(1), "done": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        with m.If(self.store):
            m.d.sync += self.storing.eq(1)
        with m.If(self.drain):
            m.d.sync += self.draining.eq(1)
        with m.If(self.storing):
            connect(m, chunk=flipped(self.i), store=flipped(self.o))
        with m.Elif(self.draining):
            m.d.comb += self.i.ready.eq(1)
        m.d.comb += self.done.eq(self.i.valid & self.i.ready & self.i.payload.last)
        with m.If(self.done):
            m.d.sync += [self.storing.eq(0), self.draining.eq(0)]
        return m


class AckWait(wiring.Component):
    """The memory ack one request awaits: ``issue`` (the request is taken) sets ``wait``;
    ``match`` (its ack is on offer, with ``error``) clears ``wait`` and sets ``got`` and
    ``err`` from the next cycle; ``clear`` (the ack seen) clears ``got``. Three registers, no
    logic; at most one of the pulses a cycle, and ``issue`` only once the last ack is
    cleared.
    """

    def __init__(self) -> None:
        super().__init__({"issue": In(1), "match": In(1), "error": In(1), "clear": In(1),
                          "wait": Out(1), "got": Out(1), "err": Out(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        with m.If(self.match):
            m.d.sync += [self.wait.eq(0), self.got.eq(1), self.err.eq(self.error)]
        with m.If(self.issue):
            m.d.sync += self.wait.eq(1)
        with m.If(self.clear):
            m.d.sync += self.got.eq(0)
        return m


class FlowServer(wiring.Component):
    """Base of a component that serves one flow at a time, as a state machine whose first
    states it builds; a subclass adds its own (:meth:`states`) and members (``members``).

    Parameters
    ----------
    requests : Requests
        How the tile addresses its engine requests (``app_tx``).
    flows, slot_bits : int
        The :class:`~beehive.apps.tcp_app.FlowTable`'s.
    need : int
        Bytes a response must report for the flow to be served (one request or record, or its
        first part).
    ask : int or Signal
        Bytes the state ``ASK`` asks for (``TCP_RX_MSG_REQ``).
    members : dict
        The subclass's members.
    room : bool
        The server finds room in a flow's send ring before it serves it further
        (:meth:`room`), from grants its table keeps (``FlowTable(tx_answers="keep")``):
        members ``grant`` (a ``"sync"`` read port of ``"grants"``, at the head of ``ready``),
        ``granted`` and ``take`` (the table's).

    Members (besides the subclass's): from the table, ``new``, ``ready`` (its queues),
    ``gen_cur`` (a ``"comb"`` read port of ``"gens"``, at ``slot``), ``ctx`` (a ``"sync"`` read
    port of ``"ctx"``, at the head of ``ready``: :data:`READS`), ``live``, ``kill`` and ``app``
    (the engine's messages); ``app_tx``, the engine requests out; ``slot``, the flow served;
    one-cycle ``forget`` (the tile closed the flow: forget it and count it) and ``truncated``
    (a partial request or record was left at the peer's FIN; a subclass may pulse it too).

    States:

    * ``IDLE``: the next flow into ``slot`` (a new connection first, else one with a
      response), ``dead`` cleared, :meth:`on_pop` done;
    * ``FRESH`` (a new connection): its generation into ``gen``; still live: ``ASK``, else
      ``IDLE``;
    * ``CHECK`` (``busy``; its latest response into ``rx``, its generation into ``gen``): stale
      (the slot's connection ended or is another one since, or the status is neither OK nor
      EOF) or ``dead``: ``IDLE``; ``need`` bytes or more ready: :meth:`whole` picks the next
      state; else at EOF (the peer closed) :attr:`closing`, pulsing ``truncated`` if bytes
      are left; else ``ASK`` (for more);
    * ``ASK`` (``busy``): ``TCP_RX_MSG_REQ`` for ``ask`` bytes, then ``IDLE``;
    * ``CLOSE`` (``busy``): ``TCP_CLOSE_REQ``; once it is taken, ``forget`` unless ``dead``
      (the connection ended meanwhile: the slot may hold a new one, which stays live), then
      :attr:`close_after`.
    * with ``room``, ``ROOM`` and ``TX_REQ``, which a subclass enters (:meth:`room`).

    ``dead`` is set when the table kills the connection of ``slot`` while ``busy`` (a state
    of the subclass sets ``busy`` while it serves the flow). A request on offer is never
    withdrawn (at 64 bits it is several flits), so ``dead`` is looked at before one is
    offered, not while. Each state takes at least a cycle; ``CHECK`` follows ``IDLE`` at once,
    the response read meanwhile.
    """

    #: The table's read ports it takes (``FlowTable(reads=...)``), and with ``room`` these
    #: too (``FlowTable(tx_answers="keep")``).
    READS = {"gen_cur": ("gens", "comb"), "ctx": ("ctx", "sync")}
    ROOM_READS = {"grant": ("grants", "sync")}
    #: The FSM's name.
    fsm_name = "fsm"
    #: The state ``CHECK`` closes the connection with at the peer's FIN (a subclass's that
    #: leads to ``CLOSE``, or ``CLOSE``).
    closing = "CLOSE"
    #: The state after ``CLOSE``.
    close_after = "IDLE"

    def __init__(self, requests: Requests, *, flows: int, slot_bits: int, need: int, ask: Any,
                 members: dict, room: bool = False) -> None:
        self._requests, self._sb, self._need, self._ask = requests, slot_bits, need, ask
        self._room = bool(room)
        own = {"app", "kill", "live", "new", "ready", "gen_cur", "ctx", "app_tx", "slot",
               "forget", "truncated", "gen", "dead", "busy", "rx", "handle", "grant",
               "granted", "take", "tx", "tx_left"}
        clash = set(members) & own
        if clash:
            raise ValueError(f"members {sorted(clash)} are FlowServer's own")
        room_members: dict[str, Any] = {}
        if self._room:
            room_members = {
                "grant": In(read_port(slot_bits, TX_GRANT)), "granted": In(flows),
                "take": Out(data.StructLayout({"en": 1, "slot": slot_bits})),
            }
        super().__init__({
            "app": In(engine_message(slot_bits)), "kill": In(1), "live": In(flows),
            "new": In(stream.Signature(unsigned(slot_bits))),
            "ready": In(stream.Signature(unsigned(slot_bits))),
            "gen_cur": In(read_port(slot_bits, TABLE_MEMORIES["gens"])),
            "ctx": In(read_port(slot_bits, RX_CONTEXT)),
            "app_tx": Out(requests.app_signature()),
            "slot": Out(slot_bits), "forget": Out(1), "truncated": Out(1),
            **room_members, **members,
        })
        self.gen = Signal(GEN_BITS)
        self.dead = Signal()            # the connection ended under it
        self.busy = Signal()            # it serves `slot`
        self.rx = Signal(RX_CONTEXT)    # the response being served
        self.handle = handle_of(self.slot, self.gen)
        if self._room:
            #: Where the next bytes written to the send ring of flow ``tx_for`` go, and the
            #: room left there (``tx_left`` bytes), while ``credit``.
            self.tx = Signal(_CURSOR)
            self.tx_left = Signal(32)
            self.credit = Signal()
            self.tx_for = Signal(16)
            self._granted = Signal()        # the flow's grant, read in CHECK, is unused
            self._grant = Signal(TX_GRANT)

    def whole(self, m: Module, cx: Any) -> None:
        """In ``CHECK``: the response ``cx`` reports ``need`` bytes or more; pick the next
        state."""
        raise NotImplementedError

    def on_pop(self) -> list:
        """Statements done (``sync``) as ``IDLE`` takes a flow."""
        return []

    def states(self, m: Module) -> None:
        """Build the subclass's states."""
        raise NotImplementedError

    def before(self, m: Module) -> None:
        """Build the subclass's logic that comes before the state machine."""

    def after(self, m: Module) -> None:
        """Build the subclass's logic that comes after the state machine (its assignments win
        over the states')."""

    def request(self, m: Module, msg_type: Any, **fields: Any) -> Any:
        """Offer an engine request for the flow served on ``app_tx``; returns its
        ``taken``."""
        return self._requests.engine(m, self.app_tx, msg_type, flow=self.handle, **fields)

    def join(self, m: Module, table: FlowTable) -> None:
        """Join the server to ``table`` in the module ``m`` that holds both: the table's queues,
        its read ports (:data:`READS`, by name; with ``room``, :data:`ROOM_READS` too), ``live``
        and ``kill``, and with ``room`` its grants."""
        reads = {**self.READS, **(self.ROOM_READS if self._room else {})}
        for name in ("new", "ready", *reads):
            connect(m, table=getattr(table, name), server=getattr(self, name))
        m.d.comb += [self.kill.eq(table.kill), self.live.eq(table.live)]
        if self._room:
            m.d.comb += [self.granted.eq(table.granted), table.take.eq(self.take)]

    def room(self, m: Module, need: Any, then: str, own: Any = 0) -> None:
        """With ``room``: the states ``ROOM`` and ``TX_REQ``, which find ``need`` bytes of
        room in the flow's send ring before it is served further (at ``then``), so that a
        flow whose peer stops reading waits without holding the others up.

        ``ROOM`` (``busy``) goes on at once with the room the server holds for the flow
        (``credit``, at ``tx``, ``tx_left`` bytes), or takes the flow's grant (read in
        ``CHECK``) if the table holds one; else, once the flow has no bytes written and not yet
        handed over (``own``, the subclass's: none of its earlier answers is still on its
        way, so that the engine's write pointer is ``tx``), ``TX_REQ`` asks the engine for
        ``need`` bytes and the flow is left (``IDLE``): the table queues it in ``ready`` again
        when the answer comes, and it is served from ``CHECK`` on, its response unconsumed.
        Use :meth:`reserve` as bytes are written."""
        handle, tx, grant = self.handle, self.tx, self._grant
        with m.State("ROOM"):
            m.d.comb += self.busy.eq(1)
            with m.If(self.dead):
                m.next = "IDLE"
            with m.Elif(self.credit & (self.tx_for == handle) & (self.tx_left >= need)):
                m.next = then
            with m.Elif(self._granted & (grant.length >= need)):
                m.d.comb += [self.take.en.eq(1), self.take.slot.eq(self.slot)]
                m.d.sync += [self.credit.eq(1), self.tx_for.eq(handle), tx.ptr.eq(grant.ptr),
                             tx.addr.eq(grant.addr), tx.wrap.eq(grant.size_log2),
                             self.tx_left.eq(grant.length), self._granted.eq(0)]
                m.next = then
            with m.Elif(~Value.cast(own)):
                m.next = "TX_REQ"
        with m.State("TX_REQ"):
            m.d.comb += self.busy.eq(1)
            with m.If(self.request(m, MsgType.TCP_TX_MSG_REQ, length=need)):
                m.next = "IDLE"

    def reserve(self, n: Any) -> list:
        """Statements (``sync``) that take ``n`` bytes of the room held (``tx`` moves on)."""
        tx = self.tx
        return [tx.ptr.eq(tx.ptr + n), tx.addr.eq(ring_add(tx.addr, n, tx.wrap)),
                self.tx_left.eq(self.tx_left - n)]

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.d.comb += [self.ctx.addr.eq(self.ready.payload), self.gen_cur.addr.eq(self.slot)]
        with m.If(self.kill & self.busy & (self.app.slot == self.slot)):
            m.d.sync += self.dead.eq(1)
        if self._room:
            m.d.comb += self.grant.addr.eq(self.ready.payload)
            with m.If(self.kill & (self.app.slot == self.tx_for[:self._sb])):
                m.d.sync += self.credit.eq(0)
        cx = self.ctx.data              # the response (in CHECK)
        gone, enough, eof = Signal(), Signal(), Signal()
        m.d.comb += [
            gone.eq(~self.live.bit_select(self.slot, 1) | (self.gen_cur.data != cx.gen)
                    | ((cx.status != Status.OK) & (cx.status != Status.EOF)) | self.dead),
            enough.eq(cx.length >= self._need), eof.eq(cx.status == Status.EOF)]
        self.before(m)
        with m.FSM(name=self.fsm_name):
            self._pick(m, gone, enough, eof)
            self.states(m)
            with m.State("ASK"):            # a new connection's first request, or the rest
                m.d.comb += self.busy.eq(1)
                with m.If(self.request(m, MsgType.TCP_RX_MSG_REQ, length=self._ask)):
                    m.next = "IDLE"
            with m.State("CLOSE"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.request(m, MsgType.TCP_CLOSE_REQ)):
                    m.d.comb += self.forget.eq(~self.dead)
                    m.next = self.close_after
        self.after(m)
        return m

    def _pick(self, m: Module, gone: Signal, enough: Signal, eof: Signal) -> None:
        """The states ``IDLE``, ``FRESH`` and ``CHECK`` (``gone``: the response is stale, or
        the connection ended meanwhile; ``enough``: ``need`` bytes are ready; ``eof``: the
        peer closed)."""
        slot, new, ready, live = self.slot, self.new, self.ready, self.live
        with m.State("IDLE"):
            with m.If(new.valid):
                m.d.comb += new.ready.eq(1)
                m.d.sync += [slot.eq(new.payload), self.dead.eq(0), *self.on_pop()]
                m.next = "FRESH"
            with m.Elif(ready.valid):
                m.d.comb += ready.ready.eq(1)
                m.d.sync += [slot.eq(ready.payload), self.dead.eq(0), *self.on_pop()]
                m.next = "CHECK"
        with m.State("FRESH"):
            m.d.sync += self.gen.eq(self.gen_cur.data)
            m.next = "IDLE"
            with m.If(live.bit_select(slot, 1)):
                m.next = "ASK"
        cx = self.ctx.data
        with m.State("CHECK"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += [self.rx.eq(cx), self.gen.eq(cx.gen)]
            if self._room:
                m.d.sync += [self._grant.eq(self.grant.data),
                             self._granted.eq(self.granted.bit_select(slot, 1))]
            with m.If(gone):            # stale, or ended meanwhile
                m.next = "IDLE"
            with m.Elif(enough):
                self.whole(m, cx)
            with m.Elif(eof):           # closed by the peer
                m.d.comb += self.truncated.eq(cx.length != 0)
                m.next = self.closing
            with m.Else():
                m.next = "ASK"
