"""What the TCP application tiles share: their NoC ports, routes, requests and acks.

An application of the TCP engine (:mod:`beehive.proto.tcp`; the messages are in
:mod:`beehive.proto.tcp.app`) talks to four tiles: the engine's RX tile, its TX tile, and the
memory tiles holding the receive and the send rings. Its NoC input is split by sub-port:

=========  ==================================================  =========  ======================
``fbits``  messages in                                         metadata   from
=========  ==================================================  =========  ======================
LOCAL0     ``TCP_NEW_FLOW_NOTIF``, ``TCP_RX_MSG_RESP``,        APP_META   the RX tile, the TX
           ``TCP_TX_MSG_RESP`` (``TCP_PEER_RESP`` under                   tile
           Apiary, to the context module)
LOCAL1     ``LOAD_MEM_ACK`` (with data), ``STORE_MEM_ACK``     MEM_META   the memory tiles
=========  ==================================================  =========  ======================

so it sends its engine requests with ``src_fbits = LOCAL0`` and its memory requests with
``src_fbits = LOCAL1``. Engine requests go to the endpoints of its routes ``"tcp_rx"`` (the RX
tile's LOCAL2: ``TCP_RX_MSG_REQ``, ``TCP_RX_ADJUST_PTR``, ``TCP_OPEN_REQ``) and ``"tcp_tx"``
(the TX tile's LOCAL0: ``TCP_TX_MSG_REQ``, ``TCP_TX_ADJUST_PTR``, ``TCP_CLOSE_REQ``); memory
requests go to the memory tile a flow's ``TCP_NEW_FLOW_NOTIF`` names (``mem_x``, ``mem_y``,
LOCAL0); under Apiary the context module (:meth:`TcpAppTile._context`) sends ``TCP_PEER_REQ``
to ``"tcp_rx"`` too. Routes ``"rx_mem"`` and ``"tx_mem"`` may be declared for the deadlock
check; they are not used to address anything.

:class:`TcpAppTile` is the base of the applications (:class:`~beehive.apps.tcp_echo.TcpEchoTile`,
:class:`~beehive.apps.tcp_sender.TcpSenderTile`, :class:`~beehive.apps.tcp_datagram.
TcpDatagramTile`, :class:`~beehive.apps.tcp_rs.TcpRsTile`): it checks the configuration, finds
the engine's endpoints, and builds the framing (:meth:`TcpAppTile.ports`: the engine's
messages and the memory acks as interfaces, :func:`engine_message` and :func:`mem_acks`, that
the tile's components take) and the request descriptors (:func:`app_request`,
:func:`mem_request`; :class:`Requests` for a component). :class:`FlowTable` is the component
that keeps the connections the engine announces, one entry per flow slot; the steps the
applications share on top of it are in :mod:`beehive.apps.tcp_steps`.
"""

import functools
import operator
from dataclasses import dataclass
from types import SimpleNamespace

from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.framing import MessageReceiver, MessageSender
from apiary.noc.header import Fbits, noc_header
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, MEM_FORMAT, MEM_META, STORE_MEM,
                                   MemMsgType)
from apiary.os.uapi import KERNEL_META, OFFSET_BITS, KernelMsgType, monitor_input
from apiary.stream.counters import count
from apiary.stream.queue import Queue
from apiary.tile import Endpoint, Receive, Send, Tile, TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import APP_META, GEN_BITS, SLOT_BITS, BufferKind, Status
from ..proto.tcp.config import TcpConfig, config_or_default
from ..proto.tcp.queues import FlowQueue
from ..proto.tcp.segments import GRANT_USER


__all__ = ["TcpAppTile", "FlowTable", "Requests", "RX_CONTEXT", "TABLE_MEMORIES", "KEY_TCP_RX",
           "KEY_TCP_TX", "KEY_RX_MEM", "KEY_TX_MEM", "ENGINE_FBITS", "MEMORY_FBITS",
           "RX_APP_FBITS", "TX_APP_FBITS", "MEM_LOC", "ENGINE_MESSAGES", "ENGINE_REQUESTS",
           "app_inputs", "app_outputs", "default_chunk", "int_in_range", "engine_message",
           "mem_acks", "read_port", "TX_GRANT", "app_request", "mem_request", "mem_ack",
           "mem_data_to", "handle_of", "TO_RX", "PEER_TIMEOUT"]


#: Route keys of an application: the engine's RX and TX tiles, and (for the deadlock check
#: only) the memory tiles of the receive and the send rings.
KEY_TCP_RX, KEY_TCP_TX, KEY_RX_MEM, KEY_TX_MEM = "tcp_rx", "tcp_tx", "rx_mem", "tx_mem"
#: The application's sub-ports: engine messages, memory acks.
ENGINE_FBITS, MEMORY_FBITS = Fbits.LOCAL0, Fbits.LOCAL1
#: The engine's sub-ports for application requests (RX tile, TX tile).
RX_APP_FBITS, TX_APP_FBITS = Fbits.LOCAL2, Fbits.LOCAL0
#: Where a ring is: a memory tile's coordinates.
MEM_LOC = data.StructLayout({"x": 8, "y": 8})
#: The engine's messages to an application, and an application's requests to the engine.
ENGINE_MESSAGES = (MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP, MsgType.TCP_TX_MSG_RESP,
                   MsgType.TCP_PEER_RESP)
ENGINE_REQUESTS = (MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_ADJUST_PTR, MsgType.TCP_OPEN_REQ,
                   MsgType.TCP_TX_MSG_REQ, MsgType.TCP_TX_ADJUST_PTR, MsgType.TCP_CLOSE_REQ)
#: The engine requests the RX tile takes (the others go to the TX tile).
TO_RX = ENGINE_REQUESTS[:3]


#: The peer of a connection, as the context module learns it (:meth:`TcpAppTile._peer`).
_PEER = data.StructLayout({"flow": 16, "ip": 32, "port": 16, "local_port": 16})
#: Cycles the context module waits for the engine's ``TCP_PEER_RESP``.
PEER_TIMEOUT = 4096
#: The context module's sender of ``TCP_PEER_REQ`` (an untrusted application's last output).
_PEER_TX = Send("peer_tx", MsgType.TCP_PEER_REQ, meta=APP_META, keys=[KEY_TCP_RX])


def app_inputs(*more: Receive) -> tuple[Receive, ...]:
    """The inputs of an application tile (its ``inputs``): the engine's messages on
    :data:`ENGINE_FBITS` (``app_rx``), the memory acks on :data:`MEMORY_FBITS` (``mem_rx``), then
    ``more``, the tile's own, each on a sub-port of its own (``fbits``)."""
    return (Receive("app_rx", *ENGINE_MESSAGES, meta=APP_META, fbits=ENGINE_FBITS),
            Receive("mem_rx", MemMsgType.LOAD_MEM_ACK, MemMsgType.STORE_MEM_ACK, meta=MEM_FORMAT,
                    fbits=MEMORY_FBITS), *more)


def app_outputs(app_senders: int = 1, *more: Send) -> tuple[Send, ...]:
    """The outputs of an application tile (its ``outputs``): ``app_senders`` senders of engine
    requests (``app_tx0``, ...), the sender of memory requests (``mem_tx``), then ``more``, the
    tile's own; merged a whole message at a time, round-robin, in this order."""
    return (*(Send(f"app_tx{k}", *ENGINE_REQUESTS, meta=APP_META, keys=[KEY_TCP_RX, KEY_TCP_TX])
              for k in range(app_senders)),
            Send("mem_tx", MemMsgType.LOAD_MEM, MemMsgType.STORE_MEM, meta=MEM_FORMAT,
                 keys=[KEY_RX_MEM, KEY_TX_MEM]), *more)


#: What a ``TCP_RX_MSG_RESP`` said of a flow: kept per flow slot until the application serves it.
RX_CONTEXT = data.StructLayout({"gen": GEN_BITS, "status": 4, "length": 32, "ptr": 32,
                                "addr": 48, "size_log2": 6})
#: What a ``TCP_TX_MSG_RESP`` granted a flow: ``length`` bytes of room in its send ring from
#: the stream pointer ``ptr``, at ``addr`` in a ring of ``2**size_log2`` bytes.
TX_GRANT = data.StructLayout({"ptr": 32, "addr": 48, "size_log2": 6, "length": 32})
#: The memories of a :class:`FlowTable`, one entry per flow slot, and what each holds
#: (``grants`` only in a table that takes the send rings' grants).
TABLE_MEMORIES = {"gens": unsigned(GEN_BITS), "ctx": RX_CONTEXT, "rx_locs": MEM_LOC,
                  "tx_locs": MEM_LOC, "grants": TX_GRANT}
_MSG_TYPE_BITS = noc_header(64).width("msg_type")
_PAYLOAD_BITS = noc_header(64).width("payload_bytes")


def engine_message(slot_bits: int) -> wiring.Signature:
    """The engine's messages as an application's components take them (the producer's side,
    all ``Out``; ``io.app`` of :meth:`TcpAppTile.ports`): ``valid`` (one this cycle, always
    taken), ``type`` (its ``msg_type``), ``meta`` (:data:`APP_META`), ``slot`` and ``gen`` (of
    ``meta.flow``, ``slot_bits`` bits of slot) and ``ok`` (``status`` is OK or EOF)."""
    return wiring.Signature({"valid": Out(1), "type": Out(_MSG_TYPE_BITS),
                             "meta": Out(APP_META.layout()), "slot": Out(slot_bits),
                             "gen": Out(GEN_BITS), "ok": Out(1)})


def mem_acks() -> wiring.Signature:
    """The memory acks' headers as an application's components take them (the producer's side,
    all ``Out``; ``io.mem`` of :meth:`TcpAppTile.ports`, whose words are on ``io.mem.data``):
    ``valid``, ``type``, ``meta`` (``MEM_META``), ``payload_bytes``."""
    return wiring.Signature({"valid": Out(1), "type": Out(_MSG_TYPE_BITS), "meta": Out(MEM_META),
                             "payload_bytes": Out(_PAYLOAD_BITS)})


def read_port(slot_bits: int, shape: Any) -> wiring.Signature:
    """A read port of one of a :class:`FlowTable`'s memories, as the table sees it: the slot
    to read in (``addr``), its entry out (``data``)."""
    return wiring.Signature({"addr": In(unsigned(slot_bits)), "data": Out(shape)})


class FlowTable(wiring.Component):
    """What an application keeps of the engine's connections, one entry per flow slot, and its
    handling of the messages that announce them and report their data.

    Parameters
    ----------
    flows : int
        Flow slots (the engine's ``flows``).
    slot_bits : int
        Bits of a slot number.
    reads : dict
        The read ports the application wants, ``{name: (memory, domain)}``: a member ``name``
        (:func:`read_port`) on one of :data:`TABLE_MEMORIES` (``"gens"``, each slot's
        connection's generation; ``"ctx"``, its latest ``TCP_RX_MSG_RESP`` as
        :data:`RX_CONTEXT`; ``"rx_locs"`` and ``"tx_locs"``, where its rings are, as
        :data:`MEM_LOC`), ``"comb"`` (the entry the same cycle) or ``"sync"`` (the next
        cycle; not transparent: a write the same cycle is not seen).
    forgets : int
        Places that forget connections: ``forget[k]`` (``en``, ``slot``) clears that slot's
        ``live`` bit (the application is done with it, or the engine ended it).
    tx_answers : None, "requeue" or "keep"
        With either, the table also takes the answers to the application's
        ``TCP_TX_MSG_REQ`` (one outstanding per flow at most) that no waiter of the
        application's ``claimed``: an OK answer for the slot's current connection queues the
        slot in ``ready`` (a flow that waited for room is served again; with ``"requeue"`` it
        asks again, and is answered at once); another status ends the connection
        (``ended``). With ``"keep"`` the OK answer is also kept in ``grants``
        (:data:`TX_GRANT`) and sets the slot's ``granted`` bit; ``take`` (``en``, ``slot``)
        clears the bit (the grant is used), and a new connection in the slot clears it too.

    Members
    -------
    app : In(:func:`engine_message`)
        The engine's messages, each handled the cycle it comes (below).
    live : Out(flows)
        A connection the application serves holds the slot.
    new, ready : Out(stream of a slot)
        Queues of slots: ``new`` the new connections, ``ready`` those with a response in
        ``ctx``; each slot is in each at most once (a slot announced again before it is taken
        is not queued again; a newer response overwrites the entry), so ``flows`` entries
        always suffice. Taking a slot makes it queueable again.
    granted : Out(flows)
        With ``tx_answers="keep"``: the slot's entry in ``grants`` is an answer not yet used.
    take : In(en, slot)
        With ``tx_answers="keep"``: the grant of ``slot`` is used.
    claimed : In(1)
        With ``tx_answers``: the cycle's ``TCP_TX_MSG_RESP`` is a waiter's, not the table's
        (0 if the application has no waiters of its own).

    For the cycle's engine message, one-cycle signals: ``announced`` (a new connection's
    receive buffer, status OK: ``live``, its generation and receive ring kept, the slot queued
    in ``new``), ``send_ring`` (the current connection's send-buffer notification: its send
    ring kept), ``ended`` (its connection reset, timed out or closed: a ``TCP_RX_MSG_RESP`` of
    another status than OK or EOF for the slot's current connection; ``live`` cleared),
    ``kill`` (either: the slot's previous connection is over), ``drop`` (a notification or
    response that matches no current connection), ``current`` (the message is about the
    slot's current connection) and ``handled`` (a ``TCP_NEW_FLOW_NOTIF`` or
    ``TCP_RX_MSG_RESP``, and with ``tx_answers`` a ``TCP_TX_MSG_RESP``: the message is the
    table's). A ``TCP_RX_MSG_RESP`` of status OK or EOF for the current connection is kept in
    ``ctx`` and the slot queued in ``ready``.
    Everything takes effect at the next clock edge; a new connection's ``live`` wins over a
    ``forget`` of the same slot in the same cycle.
    """

    def __init__(self, flows: int, slot_bits: int, *, reads: dict | None = None,
                 forgets: int = 0, tx_answers: str | None = None) -> None:
        self._flows, self._slot_bits, self._forgets = flows, slot_bits, forgets
        self._reads = dict(reads or {})
        if tx_answers not in (None, "requeue", "keep"):
            raise ValueError(f"tx_answers is None, 'requeue' or 'keep', not {tx_answers!r}")
        self._tx_answers = tx_answers
        self._keep = tx_answers == "keep"
        slot_en = data.StructLayout({"en": 1, "slot": slot_bits})
        members: dict[str, Any] = {
            "app": In(engine_message(slot_bits)),
            "live": Out(flows),
            "new": Out(stream.Signature(unsigned(slot_bits))),
            "ready": Out(stream.Signature(unsigned(slot_bits))),
            "forget": In(data.ArrayLayout(slot_en, forgets)),
        }
        if tx_answers:
            members["claimed"] = In(1)
        if self._keep:
            members.update(granted=Out(flows), take=In(slot_en))
        for name in ("announced", "send_ring", "ended", "kill", "drop", "current", "handled"):
            members[name] = Out(1)
        memories = [k for k in TABLE_MEMORIES if self._keep or k != "grants"]
        for name, (memory, domain) in self._reads.items():
            if memory not in memories or domain not in ("comb", "sync") or name in members:
                raise ValueError(f"read port {name!r} must be a new name on one of "
                                 f"{sorted(memories)}, 'comb' or 'sync', not "
                                 f"{(memory, domain)!r}")
            members[name] = Out(read_port(slot_bits, TABLE_MEMORIES[memory]))
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        flows = self._flows
        mems = {}
        for name, shape in TABLE_MEMORIES.items():
            if self._keep or name != "grants":
                mems[name] = m.submodules[name] = Memory(shape=shape, depth=flows, init=[])
        for name, (memory, domain) in self._reads.items():
            port, mine = mems[memory].read_port(domain=domain), getattr(self, name)
            m.d.comb += [port.addr.eq(mine.addr), mine.data.eq(port.data)]
        # Each slot at most once in each queue: an offer of a slot already there merges into it.
        m.submodules.new_q = new_q = FlowQueue(flows)
        m.submodules.ready_q = ready_q = FlowQueue(flows)
        connect(m, new_q=new_q.o, table=flipped(self.new))
        connect(m, ready_q=ready_q.o, table=flipped(self.ready))
        m.d.comb += [new_q.i.payload.eq(self.app.slot), ready_q.i.payload.eq(self.app.slot)]
        for k in range(self._forgets):
            with m.If(self.forget[k].en):
                m.d.sync += self.live.bit_select(self.forget[k].slot, 1).eq(0)
        self._track(m, mems, new_q, ready_q)
        return m

    def _tx_answer(self, m: Module, mems: dict, ready_q: FlowQueue) -> None:
        """With ``tx_answers``: a ``TCP_TX_MSG_RESP`` for the current connection (kept, with
        ``"keep"``), or its end; after ``take`` and a new connection's clearing, so that a
        grant wins."""
        a, meta = self.app, self.app.meta
        if self._keep:
            with m.If(self.take.en):
                m.d.sync += self.granted.bit_select(self.take.slot, 1).eq(0)
            with m.If(self.announced):
                m.d.sync += self.granted.bit_select(a.slot, 1).eq(0)
            grant_w = mems["grants"].write_port()
        with m.If(a.valid & (a.type == MsgType.TCP_TX_MSG_RESP) & ~self.claimed):
            with m.If(~self.current):
                m.d.comb += self.drop.eq(1)
            with m.Elif(meta.status == Status.OK):
                if self._keep:
                    m.d.comb += [
                        grant_w.en.eq(1), grant_w.addr.eq(a.slot),
                        grant_w.data.ptr.eq(meta.ptr), grant_w.data.addr.eq(meta.addr),
                        grant_w.data.size_log2.eq(meta.size_log2),
                        grant_w.data.length.eq(meta.length),
                    ]
                    m.d.sync += self.granted.bit_select(a.slot, 1).eq(1)
                m.d.comb += ready_q.i.valid.eq(1)
            with m.Else():
                m.d.comb += self.ended.eq(1)
                m.d.sync += self.live.bit_select(a.slot, 1).eq(0)

    def _track(self, m: Module, mems: dict, new_q: FlowQueue, ready_q: FlowQueue) -> None:
        """Handle ``TCP_NEW_FLOW_NOTIF`` and ``TCP_RX_MSG_RESP`` (see the class docstring),
        after the ``forget`` ports, so that a new connection's wins in the cycle both happen."""
        a = self.app
        meta = a.meta
        gen_in = mems["gens"].read_port(domain="comb")
        gen_w, ctx_w = mems["gens"].write_port(), mems["ctx"].write_port()
        rx_loc_w, tx_loc_w = mems["rx_locs"].write_port(), mems["tx_locs"].write_port()
        live = self.live
        m.d.comb += [gen_in.addr.eq(a.slot),
                     self.current.eq(live.bit_select(a.slot, 1) & (gen_in.data == a.gen)),
                     self.kill.eq(self.announced | self.ended),
                     self.handled.eq(a.type.matches(*self._types()))]
        with m.If(a.valid & (a.type == MsgType.TCP_NEW_FLOW_NOTIF)):
            with m.If((meta.status == Status.OK) & (meta.kind == BufferKind.RECEIVE)):
                m.d.comb += [
                    self.announced.eq(1),
                    gen_w.en.eq(1), gen_w.addr.eq(a.slot), gen_w.data.eq(a.gen),
                    rx_loc_w.en.eq(1), rx_loc_w.addr.eq(a.slot),
                    rx_loc_w.data.x.eq(meta.mem_x), rx_loc_w.data.y.eq(meta.mem_y),
                ]
                m.d.sync += live.bit_select(a.slot, 1).eq(1)
                m.d.comb += new_q.i.valid.eq(1)
            with m.Elif((meta.status == Status.OK) & (meta.kind == BufferKind.SEND)
                        & self.current):
                m.d.comb += [
                    self.send_ring.eq(1), tx_loc_w.en.eq(1), tx_loc_w.addr.eq(a.slot),
                    tx_loc_w.data.x.eq(meta.mem_x), tx_loc_w.data.y.eq(meta.mem_y),
                ]
            with m.Else():
                m.d.comb += self.drop.eq(1)
        with m.If(a.valid & (a.type == MsgType.TCP_RX_MSG_RESP)):
            with m.If(~self.current):
                m.d.comb += self.drop.eq(1)
            with m.Elif(a.ok):
                m.d.comb += [
                    ctx_w.en.eq(1), ctx_w.addr.eq(a.slot),
                    ctx_w.data.gen.eq(a.gen), ctx_w.data.status.eq(meta.status),
                    ctx_w.data.length.eq(meta.length), ctx_w.data.ptr.eq(meta.ptr),
                    ctx_w.data.addr.eq(meta.addr), ctx_w.data.size_log2.eq(meta.size_log2),
                ]
                m.d.comb += ready_q.i.valid.eq(1)
            with m.Else():
                m.d.comb += self.ended.eq(1)
                m.d.sync += live.bit_select(a.slot, 1).eq(0)
        if self._tx_answers:
            self._tx_answer(m, mems, ready_q)

    def _types(self) -> list[int]:
        """The engine messages the table handles."""
        types = [MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP]
        if self._tx_answers:
            types.append(MsgType.TCP_TX_MSG_RESP)
        return [t.value for t in types]


def int_in_range(value: Any, what: str, low: int, high: int) -> int:
    """``value``, once checked to be an integer from ``low`` to ``high`` (a ``ValueError``
    naming ``what`` otherwise)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer from {low} to {high}, not {value!r}")
    return value


def default_chunk(config: TcpConfig) -> int:
    """The largest step an application moves by default: a segment, at most half the send
    ring."""
    return min(config.mss, config.tx_ring // 2)


def handle_of(slot: Any, gen: Any) -> Any:
    """The 16-bit flow handle of a flow slot and generation (Amaranth values)."""
    return Cat(slot, Const(0, SLOT_BITS - len(slot)), gen)


def app_request(m: Module, hdr: Any, msg_type: Any, dst: Endpoint, src: tuple[int, int],
                **fields: Any) -> Any:
    """Offer an engine request on ``hdr`` (a stream of a sender's descriptors) this cycle:
    ``msg_type`` to the engine tile ``dst`` from the tile at ``src`` (its ``(x, y)``, answers
    to :data:`ENGINE_FBITS`), with the :data:`APP_META` ``fields`` given (the others zero).
    Call it from one place per cycle; returns the cycle's ``taken``."""
    d = hdr.payload
    meta = data.View(APP_META.layout(), d.meta)
    m.d.comb += [
        hdr.valid.eq(1),
        d.dst_x.eq(dst.x), d.dst_y.eq(dst.y), d.dst_fbits.eq(dst.fbits),
        d.src_x.eq(src[0]), d.src_y.eq(src[1]), d.src_fbits.eq(ENGINE_FBITS),
        d.msg_type.eq(msg_type), d.payload_bytes.eq(0),
    ]
    for name, value in fields.items():
        m.d.comb += getattr(meta, name).eq(value)
    return hdr.ready


def mem_request(m: Module, hdr: Any, src: tuple[int, int], *, store: bool, loc: Any, addr: Any,
                size: Any, wrap: Any) -> Any:
    """Offer ``LOAD_MEM`` (``store=False``) or ``STORE_MEM`` (its ``size`` bytes then go on the
    sender's data) on ``hdr`` to the memory tile at ``loc`` (a :data:`MEM_LOC`), from the tile
    at ``src``, answered on its :data:`MEMORY_FBITS`. Returns the cycle's ``taken``."""
    d = hdr.payload
    meta = data.View(MEM_META, d.meta)
    m.d.comb += [
        hdr.valid.eq(1),
        d.dst_x.eq(loc.x), d.dst_y.eq(loc.y), d.dst_fbits.eq(Fbits.LOCAL0),
        d.src_x.eq(src[0]), d.src_y.eq(src[1]), d.src_fbits.eq(MEMORY_FBITS),
        d.msg_type.eq(STORE_MEM if store else LOAD_MEM),
        d.payload_bytes.eq(size if store else 0),
        meta.addr.eq(addr), meta.size.eq(size), meta.wrap.eq(wrap),
    ]
    return hdr.ready


def mem_ack(mem: Any, msg_type: int, expect: Any, addr: Any, size: Any, wrap: Any) -> Any:
    """Whether the memory ack on offer (``mem``: :func:`mem_acks`) is the one expected
    (``expect``): its type, the ``addr``, ``size`` and ``wrap`` of the request, and its payload
    (``size`` bytes for a ``LOAD_MEM_ACK`` without ``error``, none otherwise)."""
    meta = mem.meta
    payload = size if msg_type == LOAD_MEM_ACK else 0
    return (mem.valid & expect & (mem.type == msg_type) & (meta.addr == addr)
            & (meta.size == size) & (meta.wrap == wrap)
            & (mem.payload_bytes == Mux(meta.error, 0, payload)))


def mem_data_to(m: Module, words: Any, flag: Signal, sink: Any) -> None:
    """While ``flag`` is set, the memory acks' words (``words``: ``mem.data``) go to ``sink``
    (a stream), and ``flag`` clears after the last; otherwise they are taken and thrown
    away."""
    with m.If(flag):
        connect(m, receiver=words, sink=sink)
        with m.If(words.valid & words.ready & words.payload.last):
            m.d.sync += flag.eq(0)
    with m.Else():
        m.d.comb += words.ready.eq(1)


@dataclass(frozen=True)
class Requests:
    """How an application's components address their requests (``io.requests`` of
    :meth:`TcpAppTile.ports`): the tile's coordinates, the engine's tiles, and the descriptor
    layouts of its senders of engine requests and of memory requests."""
    x: int
    y: int
    tcp_rx: Endpoint
    tcp_tx: Endpoint
    app_layout: Any
    mem_layout: Any

    def app_signature(self) -> stream.Signature:
        """A stream of engine requests (an ``Out`` member, joined to a sender's ``i_hdr``)."""
        return stream.Signature(self.app_layout)

    def mem_signature(self) -> stream.Signature:
        """A stream of memory requests (an ``Out`` member, joined to a sender's ``i_hdr``)."""
        return stream.Signature(self.mem_layout)

    def engine(self, m: Module, hdr: Any, msg_type: Any, **fields: Any) -> Any:
        """:func:`app_request` from this tile, to the engine's tile that takes ``msg_type``
        (:data:`TO_RX`: the RX tile; the others: the TX tile)."""
        dst = self.tcp_rx if msg_type in TO_RX else self.tcp_tx
        return app_request(m, hdr, msg_type, dst, (self.x, self.y), **fields)

    def mem(self, m: Module, hdr: Any, **request: Any) -> Any:
        """:func:`mem_request` from this tile."""
        return mem_request(m, hdr, (self.x, self.y), **request)


class TcpAppTile(Tile):
    """Base of an application tile of the TCP engine (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` (fbits LOCAL0); standalone (no
        routes at all) both are tile (0, 0).
    config : TcpConfig
        The engine's: ``flows`` sizes per-flow state (a handle's low bits index it).
    chunk : int or None
        Largest number of bytes moved per step (one ``TCP_TX_MSG_REQ``, one memory request):
        1 to ``min(tx_ring, 65536)``; default :func:`default_chunk`.
    counters : dict
        The tile's counters.
    registers : dict or None
        The tile's control registers and tables (:class:`~apiary.tile.Tile`).
    fault_after : int or None
        A fault to inject, for experiments on fault isolation (the Apiary thesis's Fig. 3.3):
        the tile's store number ``fault_after`` (0 is the first) goes one ring size past the
        address it should, out of the ring (under Apiary, out of its segment: a violation).
    """

    #: The input never waits for the output: every message is taken within a cycle.
    streaming = False

    #: A subclass with more senders of engine requests, or inputs and outputs of its own,
    #: declares them with :func:`app_inputs` and :func:`app_outputs`.
    inputs = app_inputs()
    outputs = app_outputs()

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 chunk: int | None = None, counters: dict | None = None,
                 registers: dict | None = None, fault_after: int | None = None) -> None:
        config = config_or_default(config)
        self.config = config
        chunk = default_chunk(config) if chunk is None else chunk
        limit = min(config.tx_ring, 1 << 16)
        if not isinstance(chunk, int) or isinstance(chunk, bool) or not 1 <= chunk <= limit:
            raise ValueError(f"chunk must be a number of bytes from 1 to {limit} (the send "
                             f"ring, at most 64 KiB), not {chunk!r}")
        self.chunk = chunk
        self.fault_after = (None if fault_after is None
                            else int_in_range(fault_after, "fault_after", 0, (1 << 32) - 2))
        self._poison = Signal()
        if env is not None and not env.trusted:
            counters = {**(counters or {}), "peer_timeouts": "connections announced with no "
                        "peer: the engine did not answer the context module's TCP_PEER_REQ"}
        super().__init__(env, counters=counters, registers=registers)
        if not self.env.trusted:
            # The monitor's answers arrive on the engine's sub-port, told apart by type; the
            # context module asks the engine for each new connection's peer.
            self.inputs = (monitor_input(ENGINE_FBITS), *self.inputs)
            self.outputs = (*self.outputs, _PEER_TX)
        routes = self.env.next_hops("data")
        self.tcp_rx = self._engine(routes, KEY_TCP_RX, RX_APP_FBITS)
        self.tcp_tx = self._engine(routes, KEY_TCP_TX, TX_APP_FBITS)

    def _engine(self, routes: dict, key: str, fbits: int) -> Endpoint:
        hops = routes.get(key) or []
        if not routes:
            return Endpoint(key, 0, 0, fbits)
        if not hops:
            raise ValueError(f"{type(self).__name__} {self.env.name!r} needs a route to the TCP "
                             f"engine with key {key!r}; it has keys {sorted(map(str, routes))}")
        if hops[0].fbits != fbits:
            raise ValueError(f"{type(self).__name__} {self.env.name!r}: the route {key!r} must "
                             f"have fbits={Fbits(fbits).name} (where that tile takes application "
                             f"requests), not {hops[0].fbits!r}")
        return hops[0]

    @property
    def slot_bits(self) -> int:
        """Bits of a handle that index the per-flow state."""
        return max(1, (self.config.flows - 1).bit_length())

    def handle(self, slot, gen):
        """The 16-bit flow handle of a slot and generation."""
        return handle_of(slot, gen)

    # -- framing -----------------------------------------------------------------------------------

    def ports(self, m: Module) -> SimpleNamespace:
        """Build the tile's framing from its declared ``inputs`` (:func:`app_inputs`) and
        ``outputs`` (:func:`app_outputs`) with :meth:`~apiary.tile.Tile.message_ports`, and
        return it:

        * ``app``: engine messages in, one a cycle at most, always taken: an interface of
          :func:`engine_message` (``app.valid``, ``app.type``, ``app.meta``, ``app.slot``,
          ``app.gen``, ``app.ok``), which may be connected to several components;
        * ``mem``: memory acks in, always taken: an interface of :func:`mem_acks`
          (``mem.valid``, ``mem.type``, ``mem.meta``, ``mem.payload_bytes``); their data on
          ``mem.data``, which the caller must take;
        * ``app_tx``: the senders of engine requests (:meth:`app_request`), a list;
          ``mem_tx``: the sender of memory requests (:meth:`mem_request`), whose ``i_data``
          the caller drives for stores; ``requests``: how the tile's components address
          requests (:class:`Requests`);
        * ``inputs``: the :class:`~apiary.noc.framing.MessageReceiver` of each further input
          declared, in order, whose ``o_hdr`` and ``o_data`` the caller takes; ``senders``: the
          :class:`~apiary.noc.framing.MessageSender` of each further output;
        * ``malformed``: messages the framing dropped or reframed (a count).

        Outputs are merged a whole message at a time (round-robin). Under Apiary (the tile
        untrusted) the monitor's messages on :data:`ENGINE_FBITS` are told from the engine's
        (:func:`~apiary.os.uapi.monitor_input`, :meth:`_context`).
        """
        io = self.message_ports(m)
        app_rx, mem_rx, mem_tx = io.app_rx, io.mem_rx, io.mem_tx
        receivers = [getattr(io, p.name) for p in self.inputs
                     if p.plane == "data" and p.name != "monitor"]
        sent = [p.name for p in self.outputs if p.plane == "data" and p is not _PEER_TX]
        app_tx = [getattr(io, name) for name in sent[:sent.index("mem_tx")]]
        more_tx = [getattr(io, name) for name in sent[sent.index("mem_tx") + 1:]]
        k_rx = None if self.env.trusted else io.monitor
        if self.fault_after is not None:
            stores = Signal(32)
            hdr_in = mem_tx.i_hdr
            with m.If(hdr_in.valid & hdr_in.ready & (hdr_in.payload.msg_type == STORE_MEM)):
                m.d.sync += stores.eq(stores + 1)
            m.d.comb += self._poison.eq(stores == self.fault_after)

        hdr = app_rx.o_hdr.payload
        meta = data.View(APP_META.layout(), hdr.meta)
        m.d.comb += [app_rx.o_hdr.ready.eq(1), app_rx.o_data.ready.eq(1),
                     mem_rx.o_hdr.ready.eq(1)]
        sb = self.slot_bits
        valid, msg_type = app_rx.o_hdr.valid, hdr.msg_type
        if k_rx is not None:
            valid, msg_type, meta = self._context(m, app_rx, k_rx, meta, io.peer_tx)
        app = engine_message(sb).create(path=("app",))
        m.d.comb += [app.valid.eq(valid), app.type.eq(msg_type), app.meta.eq(meta),
                     app.slot.eq(meta.flow[:sb]),
                     app.gen.eq(meta.flow[SLOT_BITS:SLOT_BITS + GEN_BITS]),
                     app.ok.eq((meta.status == Status.OK) | (meta.status == Status.EOF))]
        mem = mem_acks().create(path=("mem",))
        ack = mem_rx.o_hdr.payload
        m.d.comb += [mem.valid.eq(mem_rx.o_hdr.valid), mem.type.eq(ack.msg_type),
                     mem.meta.eq(ack.meta), mem.payload_bytes.eq(ack.payload_bytes)]
        mem.data = mem_rx.o_data
        errors = sum(r.errors for r in receivers) + (0 if k_rx is None else k_rx.errors)
        requests = Requests(self.env.x, self.env.y, self.tcp_rx, self.tcp_tx,
                            app_tx[0].i_hdr.payload.shape(), mem_tx.i_hdr.payload.shape())
        return SimpleNamespace(app=app, mem=mem, app_tx=app_tx, mem_tx=mem_tx,
                               inputs=receivers[2:], senders=more_tx,
                               malformed=errors + io.dropped, requests=requests)

    def _context(self, m: Module, app_rx: MessageReceiver, k_rx: MessageReceiver,
                 meta_in: Any, peer_tx: MessageSender) -> tuple[Any, Any, Any]:
        """Under Apiary (the tile untrusted), the thesis's context module: the engine announces a
        connection's rings with ``CAP_SEND`` (:mod:`beehive.proto.tcp.segments`), so the
        monitor's ``CAP_NOTIFY`` arrive on LOCAL0 with the engine's messages. Each becomes the
        ``TCP_NEW_FLOW_NOTIF`` it stands for (``addr`` the segment's virtual address, no memory
        tile: the monitor steers loads and stores), the handle is kept per flow slot, and the
        ring offsets of the engine's responses become virtual addresses in it.

        The capability carries no peer, so the receive ring's notification waits while the
        module asks the engine (``TCP_PEER_REQ`` on ``peer_tx``); the answer
        (``TCP_PEER_RESP``, not passed on) fills ``peer_ip``, ``peer_port`` and ``local_port``
        of both of the connection's notifications, as the engine's own notification has them.
        That costs a round trip to the receive tile per connection; an answer that does not
        come in :data:`PEER_TIMEOUT` cycles (the engine dropped a ``CLOSED`` reply for want
        of room) lets the notification go with a zero peer (counted: ``peer_timeouts``).
        Returns the engine messages' ``valid``, ``msg_type`` and metadata."""
        sb, flows = self.slot_bits, self.config.flows
        note = data.StructLayout({"handle": 8, "user": GRANT_USER})
        m.submodules.notes = notes = Queue(note, 4)
        k_hdr = k_rx.o_hdr.payload
        k_meta = data.View(KERNEL_META, k_hdr.meta)
        m.d.comb += [
            k_rx.o_data.ready.eq(1),
            k_rx.o_hdr.ready.eq(notes.i.ready | (k_hdr.msg_type != KernelMsgType.CAP_NOTIFY)),
            notes.i.valid.eq(k_rx.o_hdr.valid & (k_hdr.msg_type == KernelMsgType.CAP_NOTIFY)),
            notes.i.payload.handle.eq(k_meta.handle),
            notes.i.payload.user.eq(k_meta.user[:GRANT_USER.size]),
        ]
        handles = {}
        for kind in BufferKind:
            mem = m.submodules[f"{kind.name.lower()}_handles"] = Memory(
                shape=unsigned(8), depth=flows, init=[])
            handles[kind] = (mem.read_port(domain="comb"), mem.write_port())
        engine = app_rx.o_hdr.valid
        n = notes.o.payload
        meta = Signal(APP_META.layout())
        is_peer = app_rx.o_hdr.payload.msg_type == MsgType.TCP_PEER_RESP
        peer, release = self._peer(m, peer_tx, n, notes.o.valid & ~engine, engine & is_peer,
                                   meta_in)
        m.d.comb += notes.o.ready.eq(release)
        for kind, (rd, wr) in handles.items():
            m.d.comb += [rd.addr.eq(meta_in.flow[:sb]), wr.addr.eq(n.user.flow[:sb]),
                         wr.data.eq(n.handle), wr.en.eq(release & (n.user.kind == kind))]
        resp = {MsgType.TCP_RX_MSG_RESP: BufferKind.RECEIVE,
                MsgType.TCP_TX_MSG_RESP: BufferKind.SEND}
        with m.If(engine):
            m.d.comb += meta.eq(meta_in)
            for msg_type, kind in resp.items():
                with m.If(app_rx.o_hdr.payload.msg_type == msg_type):
                    m.d.comb += meta.addr.eq(Cat(meta_in.addr[:OFFSET_BITS],
                                                 handles[kind][0].data))
        with m.Else():
            m.d.comb += [meta.flow.eq(n.user.flow), meta.kind.eq(n.user.kind),
                         meta.status.eq(Status.OK), meta.size_log2.eq(n.user.size_log2),
                         meta.addr.eq(Cat(Const(0, OFFSET_BITS), n.handle))]
            with m.If(peer.flow == n.user.flow):
                m.d.comb += [meta.peer_ip.eq(peer.ip), meta.peer_port.eq(peer.port),
                             meta.local_port.eq(peer.local_port)]
        return ((engine & ~is_peer) | release,
                Mux(engine, app_rx.o_hdr.payload.msg_type, MsgType.TCP_NEW_FLOW_NOTIF), meta)

    def _peer(self, m: Module, peer_tx: MessageSender, note: Any, offered: Any, answer: Any,
              meta_in: Any) -> tuple[Any, Any]:
        """The context module's question (:meth:`_context`): for the receive ring's ``note``
        at the head of the notes (``offered``: it may go this cycle), ask the engine once, and
        hold it until ``answer`` (a ``TCP_PEER_RESP``, ``meta_in``) for its flow or the
        timeout. Returns the peer last learnt (``flow``, ``ip``, ``port``, ``local_port``)
        and the cycle's ``release`` of the note."""
        peer = Signal(_PEER)
        asked, known = Signal(), Signal()
        waited = Signal(range(PEER_TIMEOUT + 1))
        receive = note.user.kind == BufferKind.RECEIVE
        with m.If(offered & receive & ~asked):
            with m.If(self.app_request(m, peer_tx.i_hdr, MsgType.TCP_PEER_REQ, self.tcp_rx,
                                       flow=note.user.flow)):
                m.d.sync += [asked.eq(1), waited.eq(0)]
        with m.If(asked & ~known):
            m.d.sync += waited.eq(waited + 1)
            with m.If(answer & (meta_in.flow == note.user.flow)):
                m.d.sync += [known.eq(1), peer.flow.eq(note.user.flow),
                             peer.ip.eq(meta_in.peer_ip), peer.port.eq(meta_in.peer_port),
                             peer.local_port.eq(meta_in.local_port)]
            with m.Elif(waited == PEER_TIMEOUT):
                m.d.sync += [known.eq(1), peer.eq(0), peer.flow.eq(note.user.flow)]
                count(m, self.counters.peer_timeouts)
        release = Signal()
        m.d.comb += release.eq(offered & (~receive | known))
        with m.If(release & receive):
            m.d.sync += [asked.eq(0), known.eq(0)]
        return peer, release

    # -- requests ----------------------------------------------------------------------------------

    def app_request(self, m: Module, hdr: Any, msg_type, dst: Endpoint, **fields) -> Any:
        """Offer an engine request on ``hdr`` (a sender's ``i_hdr``) this cycle:
        :func:`app_request` from this tile."""
        return app_request(m, hdr, msg_type, dst, (self.env.x, self.env.y), **fields)

    def mem_request(self, m: Module, hdr: Any, *, store: bool, loc, addr, size, wrap) -> Any:
        """Offer a memory request on ``hdr`` (a sender's ``i_hdr``) this cycle:
        :func:`mem_request` from this tile; a store goes astray if the tile's fault is due
        (``fault_after``)."""
        ready = mem_request(m, hdr, (self.env.x, self.env.y), store=store, loc=loc, addr=addr,
                            size=size, wrap=wrap)
        if store and self.fault_after is not None:
            meta = data.View(MEM_META, hdr.payload.meta)
            m.d.comb += meta.addr.eq(addr + Mux(self._poison, Const(1, 48) << wrap, 0))
        return ready

    mem_ack = staticmethod(mem_ack)
    mem_data_to = staticmethod(mem_data_to)

    def count_flows(self, m: Module, table: FlowTable, *ended: Any) -> None:
        """Count ``flows`` (connections announced: ``table.announced``) and ``ended`` (those the
        engine ended: ``table.ended``, or one of the one-cycle pulses ``ended``)."""
        c = self.counters
        count(m, c.ended, functools.reduce(operator.or_, ended, table.ended))
        count(m, c.flows, table.announced)

    def count_events(self, m: Module, **pulses: Any) -> None:
        """Count each one-cycle pulse in its counter (``name=pulse``): one event each, the
        counter's register enabled by its pulse."""
        for name, pulse in pulses.items():
            with m.If(pulse):
                count(m, getattr(self.counters, name))

    def count_dropped(self, m: Module, io: SimpleNamespace, *pulses) -> None:
        """Drive the ``dropped`` counter: the messages the tile's logic drops (one-cycle
        ``pulses``) and those its framing dropped or reframed."""
        strays = Signal(32)
        m.d.sync += strays.eq(strays + sum(pulses))
        m.d.comb += self.counters.dropped.eq(strays + io.malformed)

    def step(self, length):
        """``min(length, chunk)``."""
        return Mux(length > self.chunk, self.chunk, length)
