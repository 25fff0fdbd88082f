"""Datagram applications over TCP: each length-prefixed record a connection carries goes to a
UDP application tile as a datagram, and the application's answer goes back on the connection.

A TCP application (:mod:`beehive.proto.tcp`, built on :class:`~beehive.apps.tcp_app.TcpAppTile`)
in front of any tile that answers ``UDP_RX_SEGMENT`` requests with ``UDP_TX_SEGMENT`` replies
carrying the request's ``PACKET_META`` (the internal controller,
:class:`~beehive.apps.controller.ControllerTile`; the kernel's control service), so that the
same request/response protocol is served over UDP and over TCP. On the byte stream each
request and each reply is a *record*: a 2-byte length in network byte order, then that many
bytes (the framing of DNS over TCP, RFC 1035 §4.2.2)::

    client ─▶ [len][request][len][request] ...     ◀─ [len][reply][len][reply] ...

Requests are answered in order, one reply per request. The tile serves one record at a time,
for all its connections in the order their records came in: a record is read once its
connection's send ring has room for the longest reply (``2 + max_record`` bytes), the request
goes to the application once it is whole, and the next is read once its reply is written to
the send ring. A connection without that room asks the engine for it and is left until the
answer comes, so a peer that stops reading holds up no other connection.

Messages of the tile:

==========================  ====================  ==========================================
in (``dst_fbits``)          from                  what the tile does
==========================  ====================  ==========================================
``TCP_NEW_FLOW_NOTIF``      RX tile               RECEIVE: a new connection (its peer and
(LOCAL0)                                          receive ring kept), ask for 2 bytes
                                                  (``TCP_RX_MSG_REQ``); SEND: its send ring
``TCP_RX_MSG_RESP``         RX tile               OK or EOF: bytes to read (the flow queued);
(LOCAL0)                                          RESET, TIMEOUT, CLOSED: the connection is
                                                  over, forgotten
``TCP_TX_MSG_RESP``         TX tile               room in the send ring for a reply
(LOCAL0)
``LOAD_MEM_ACK``,           the rings' memory     a record's length or body; a reply written
``STORE_MEM_ACK`` (LOCAL1)  tiles
``UDP_TX_SEGMENT``          the application       the reply: ``PACKET_META`` (its
(:data:`DATAGRAM_FBITS`,                          ``peer_mac`` must be the request's), the
LOCAL2)                                           reply's bytes
==========================  ====================  ==========================================

Out: engine and memory requests as every TCP application sends them, and to the application
(route key :data:`KEY_APP`) ``UDP_RX_SEGMENT`` with the record's body and a ``PACKET_META``
whose ``protocol`` is 6 (TCP), ``peer_ip``, ``peer_port`` and ``local_port`` are the
connection's, and ``peer_mac`` (meaningless over TCP) is the request's tag: the flow handle in
bits 0-15, a sequence number in bits 16-47. A reply is taken only if it carries the tag of the
request awaited; any other is dropped (``dropped``).

A record, from the receive ring to the send ring::

    RX_MSG_RESP(OK or EOF, ptr p, addr a, length L >= 2)
        [─▶ TX_MSG_REQ(2 + max_record), the connection left until
            ◀─ TX_MSG_RESP(OK, ptr q, addr b, length F) queues it again: unless that much
            room is left from an earlier answer]
        ─▶ LOAD_MEM(a, 2) ◀─ the length n     (n > max_record: close; L < 2 + n: ask for 2 + n)
        ─▶ LOAD_MEM(a + 2, n) ◀─ the body ─▶ RX_ADJUST_PTR(p + 2 + n)
        ─▶ UDP_RX_SEGMENT(body) to the application ◀─ UDP_TX_SEGMENT(reply, r bytes)
        ─▶ STORE_MEM(b, 2, r) ◀─ ack ─▶ STORE_MEM(b + 2, reply) ◀─ ack
        ─▶ TX_ADJUST_PTR(q + 2 + r) ─▶ RX_MSG_REQ(2)     (the next reply at q + 2 + r)
    RX_MSG_RESP(EOF, length 0) ─▶ CLOSE_REQ          (the client closed; all answered)

(``a + 2`` and ``b + 2`` wrap in their rings.) A connection is closed (``CLOSE_REQ``, then
forgotten) when the peer has closed and every record was answered, and on an error, each
counted: a record longer than ``max_record`` (``oversized``), a record cut short by the peer's
FIN (``truncated``), a reply not in ``reply_timeout`` cycles (``timeouts``; a reply that comes
later is dropped), a reply longer than ``max_record`` (``bad_replies``), a memory ack with
``error`` (``mem_errors``). A connection the engine ends under a record (reset, timed out) is
dropped once the memory and the application have answered what was asked of them.

The inputs never wait (``streaming = False``): engine messages, memory acks and replies are
each taken the cycle they come, and the record's bytes wait in one buffer of
``max_record`` bytes, so the deadlock check treats the tile as a sink and a source. Latency
(an idle tile, a record whose bytes are all in the ring, room held): the length's
``LOAD_MEM`` 3 cycles after the ``TCP_RX_MSG_RESP``, the request to the application 1 cycle
after the body's last word, the reply's length stored 1 cycle after the reply's last word.
Throughput: one record at a time, with 5 round trips to the engine and the memories per
record (6 when the room has to be asked for): a control protocol's rate, not a data path.

Structure: the connections are kept by a :class:`~beehive.apps.tcp_app.FlowTable`; the
records are served by :class:`_Records` (a :class:`~beehive.apps.tcp_steps.FlowServer`: the
sequence above, the room found with :meth:`~beehive.apps.tcp_steps.FlowServer.room` from the
grants the table keeps), with :class:`_RecordMemory` (its memory requests and acks),
:class:`_Replies` (the application's replies) and :class:`_RecordBuffer` (the record's bytes,
then its reply's).
"""

from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.stream import Signature as StreamSignature
from amaranth.lib.wiring import In, Out, connect

from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.layout import payload_layout, payload_signature
from apiary.stream.queue import Queue
from apiary.stream.registers import Register
from apiary.tile import Receive, Send, TileEnv

from ..proto.ipv4 import IpProtocol
from ..proto.messages import PACKET_META, MsgType
from ..proto.tcp.app import Status
from ..proto.tcp.config import TcpConfig, config_or_default
from .tcp_app import (MEM_LOC, FlowTable, Requests, TcpAppTile, app_inputs, app_outputs,
                      int_in_range, mem_ack, mem_acks)
from .tcp_steps import AckWait, FlowServer, ring_add


__all__ = ["TcpDatagramTile", "KEY_APP", "DATAGRAM_FBITS", "LENGTH_BYTES", "DEFAULT_MAX_RECORD",
           "record", "split_records"]


#: Route key of the application the records go to.
KEY_APP = "app"
#: The tile's sub-port for the application's replies (LOCAL0 and LOCAL1 are the engine's and
#: the memories').
DATAGRAM_FBITS = Fbits.LOCAL2
#: Bytes of a record's length prefix.
LENGTH_BYTES = 2
#: Longest record by default: room for the controller's longest request and reply (264 bytes).
DEFAULT_MAX_RECORD = 512

#: A connection's peer, as the requests to the application carry it.
_PEER = data.StructLayout({"ip": 32, "port": 16, "local_port": 16})


# -- Python helpers --------------------------------------------------------------------------------

def record(payload: bytes) -> bytes:
    """``payload`` as a record on the byte stream: its length (2 bytes, big-endian), then it."""
    payload = bytes(payload)
    if len(payload) >= 1 << 16:
        raise ValueError(f"a record holds at most 65535 bytes, not {len(payload)}")
    return len(payload).to_bytes(LENGTH_BYTES, "big") + payload


def split_records(stream: bytes) -> tuple[list[bytes], bytes]:
    """The whole records at the start of ``stream``, and the bytes after them (an incomplete
    record, or nothing)."""
    records, pos = [], 0
    while len(stream) - pos >= LENGTH_BYTES:
        n = int.from_bytes(stream[pos:pos + LENGTH_BYTES], "big")
        if len(stream) - pos - LENGTH_BYTES < n:
            break
        records.append(bytes(stream[pos + LENGTH_BYTES:pos + LENGTH_BYTES + n]))
        pos += LENGTH_BYTES + n
    return records, bytes(stream[pos:])


# -- the tile's components -------------------------------------------------------------------------

#: A memory request of the record being served (``length``: the load of a record's length
#: prefix, whose bytes go to ``n``, not to the buffer).
_MREQ = data.StructLayout({"store": 1, "length": 1, "addr": 48, "size": 16, "wrap": 6})


def _memory_control() -> wiring.Signature:
    """Between :class:`_Records` (the ``Out`` side) and :class:`_RecordMemory`: the request
    (``req``) to offer while ``go``; its ``taken``; its ack seen (``done``, with its words
    in), with ``err``; ``clear`` (the ack taken); ``n``, the last length prefix loaded."""
    return wiring.Signature({"req": Out(_MREQ), "go": Out(1), "taken": In(1), "done": In(1),
                             "err": In(1), "clear": Out(1), "n": In(16)})


def _buffer_control() -> wiring.Signature:
    """Between :class:`_Records` (the ``Out`` side) and :class:`_RecordBuffer`: pulses that
    start the buffer's draining (``start_app``: to the application; ``start_prefix``: the
    reply's length, then ``start_store``: its bytes, to the store; ``flush``: away) and its
    state (``to_app``, ``to_store``, ``valid``: a word in it)."""
    return wiring.Signature({"start_app": Out(1), "start_prefix": Out(1), "start_store": Out(1),
                             "flush": Out(1), "to_app": In(1), "to_store": In(1),
                             "valid": In(1)})


def _reply_control() -> wiring.Signature:
    """Between :class:`_Records` (the ``Out`` side) and :class:`_Replies`: ``expect`` (a
    request went out with ``tag``), ``give_up`` (its time is up), ``take`` (the reply seen);
    ``awaiting``, ``got`` (the reply is in: ``r`` bytes, ``bad`` if too long)."""
    return wiring.Signature({"expect": Out(1), "give_up": Out(1), "take": Out(1),
                             "tag": Out(48), "awaiting": In(1), "got": In(1), "bad": In(1),
                             "r": In(16)})


#: What :class:`_Records` counts, a pulse each.
_EVENTS = ("records", "oversized", "timeouts", "bad_replies", "mem_errors")


class _RecordMemory(wiring.Component):
    """The record's memory requests, one at a time (``ctl``: :func:`_memory_control`): the
    request offered on ``req`` while ``ctl.go`` (a load from the receive ring's memory tile
    ``rx_loc``, a store to the send ring's ``tx_loc``), its ack found among the memory acks
    (``mem``, always taken; a load's words on ``data``: a length prefix into ``ctl.n``, a body
    onto ``words``); ``ctl.done`` once the ack and its words are in. Any other ack pulses
    ``drop`` (its words thrown away)."""

    def __init__(self, requests: Requests, width: int) -> None:
        self._requests = requests
        super().__init__({
            "ctl": In(_memory_control()), "rx_loc": In(MEM_LOC), "tx_loc": In(MEM_LOC),
            "mem": In(mem_acks()), "data": In(payload_signature(width)),
            "req": Out(requests.mem_signature()), "words": Out(payload_signature(width)),
            "drop": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        ctl, mem, mreq = self.ctl, self.mem, self.ctl.req
        m.submodules.ack = ack = AckWait()
        loc = Signal(MEM_LOC)
        dest = Signal(2)            # where the ack's bytes go: 0 nowhere, 1 the length, 2 words
        m.d.comb += [
            loc.eq(Mux(mreq.store, self.tx_loc, self.rx_loc)),
            ack.match.eq(
                mem_ack(mem, LOAD_MEM_ACK, ack.wait & ~mreq.store, mreq.addr, mreq.size,
                        mreq.wrap)
                | mem_ack(mem, STORE_MEM_ACK, ack.wait & mreq.store, mreq.addr, mreq.size,
                          mreq.wrap)),
            ack.error.eq(mem.meta.error), ack.clear.eq(ctl.clear),
            ctl.err.eq(ack.err), ctl.done.eq(ack.got & (dest == 0)),
        ]
        with m.If(mem.valid):
            m.d.sync += dest.eq(0)
            with m.If(ack.match):
                with m.If(~mem.meta.error & ~mreq.store):
                    m.d.sync += dest.eq(Mux(mreq.length, 1, 2))
            with m.Else():
                m.d.comb += self.drop.eq(1)
        word = self.data
        m.d.comb += word.ready.eq(1)
        with m.If(word.valid):
            with m.If(dest == 1):
                m.d.sync += ctl.n.eq(Cat(word.payload.data[8:16], word.payload.data[0:8]))
            with m.If(dest == 2):
                m.d.comb += [self.words.valid.eq(1), self.words.payload.eq(word.payload)]
            with m.If(word.payload.last):
                m.d.sync += dest.eq(0)
        with m.If(ctl.go):
            for store in (False, True):
                with m.If(mreq.store == store):
                    self._requests.mem(m, self.req, store=store, loc=loc, addr=mreq.addr,
                                       size=mreq.size, wrap=mreq.wrap)
        m.d.comb += [ctl.taken.eq(ctl.go & self.req.ready), ack.issue.eq(ctl.taken)]
        return m


class _Replies(wiring.Component):
    """The application's replies (``hdr`` and ``data`` of a receiver, always taken): while
    ``ctl.awaiting`` (from ``ctl.expect`` to the reply or ``ctl.give_up``), a
    ``UDP_TX_SEGMENT`` whose ``peer_mac`` is ``ctl.tag`` is the reply: its length into
    ``ctl.r``, its bytes onto ``words`` (none if longer than ``max_record``: ``ctl.bad``), and
    ``ctl.got`` after its last word (at once if it has none or is too long), until
    ``ctl.take``. Any other message pulses ``drop``."""

    def __init__(self, hdr_layout: Any, width: int, max_record: int) -> None:
        self._max_record = max_record
        super().__init__({
            "ctl": In(_reply_control()), "hdr": In(StreamSignature(hdr_layout)),
            "data": In(payload_signature(width)), "words": Out(payload_signature(width)),
            "drop": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        ctl, reply = self.ctl, self.hdr.payload
        reply_meta = data.View(PACKET_META.layout(), reply.meta)
        dest = Signal()             # the reply's bytes go to words
        m.d.comb += [self.hdr.ready.eq(1), self.data.ready.eq(1)]
        with m.If(self.hdr.valid):
            ours = ctl.awaiting & (reply.msg_type == MsgType.UDP_TX_SEGMENT.value) \
                & (reply_meta.peer_mac == ctl.tag)
            with m.If(ours):
                fits = reply.payload_bytes <= self._max_record
                m.d.sync += [ctl.awaiting.eq(0), ctl.bad.eq(~fits), ctl.r.eq(reply.payload_bytes),
                             dest.eq(fits & (reply.payload_bytes != 0)),
                             ctl.got.eq(~fits | (reply.payload_bytes == 0))]
            with m.Else():
                m.d.comb += self.drop.eq(1)
        with m.If(self.data.valid & dest):
            m.d.comb += [self.words.valid.eq(1), self.words.payload.eq(self.data.payload)]
            with m.If(self.data.payload.last):
                m.d.sync += [dest.eq(0), ctl.got.eq(1)]
        with m.If(ctl.expect):
            m.d.sync += [ctl.awaiting.eq(1), ctl.got.eq(0)]
        with m.If(ctl.give_up):
            m.d.sync += ctl.awaiting.eq(0)
        with m.If(ctl.take):
            m.d.sync += ctl.got.eq(0)
        return m


class _RecordBuffer(wiring.Component):
    """The record's bytes (``mem_words``), then its reply's (``reply_words``), wait here: a
    queue of ``max_record`` bytes, never full (nothing waits to go in). From the cycle after
    ``ctl.start_app`` its words go to the application (``app``); after ``ctl.start_prefix``,
    the reply's 2-byte length ``r`` goes to the store (``store``), then after
    ``ctl.start_store`` its words; while ``ctl.flush`` they are thrown away."""

    def __init__(self, width: int, max_record: int) -> None:
        self._width, self._words = width, -(-max_record // (width // 8))
        super().__init__({
            "ctl": In(_buffer_control()), "r": In(16),
            "mem_words": In(payload_signature(width)), "reply_words": In(payload_signature(width)),
            "app": Out(payload_signature(width)), "store": Out(payload_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        ctl, r = self.ctl, self.r
        m.submodules.buf = buf = Queue(payload_layout(self._width), self._words + 1)
        for words in (self.mem_words, self.reply_words):
            m.d.comb += words.ready.eq(1)
            with m.If(words.valid):
                m.d.comb += [buf.i.valid.eq(1), buf.i.payload.eq(words.payload)]
        prefix = Signal()           # the reply's length is on store
        with m.If(ctl.start_app):
            m.d.sync += ctl.to_app.eq(1)
        with m.If(ctl.start_prefix):
            m.d.sync += prefix.eq(1)
        with m.If(ctl.start_store):
            m.d.sync += ctl.to_store.eq(1)
        with m.If(ctl.to_app):
            m.d.comb += [self.app.valid.eq(buf.o.valid), self.app.payload.eq(buf.o.payload),
                         buf.o.ready.eq(self.app.ready)]
        with m.If(buf.o.valid & buf.o.ready & buf.o.payload.last):
            m.d.sync += [ctl.to_app.eq(0), ctl.to_store.eq(0)]
        with m.If(prefix):
            m.d.comb += [self.store.valid.eq(1),
                         self.store.payload.data.eq(Cat(r[8:16], r[0:8])),
                         self.store.payload.nbytes.eq(LENGTH_BYTES),
                         self.store.payload.last.eq(1)]
            with m.If(self.store.ready):
                m.d.sync += prefix.eq(0)
        with m.Elif(ctl.to_store):
            m.d.comb += [self.store.valid.eq(buf.o.valid), self.store.payload.eq(buf.o.payload),
                         buf.o.ready.eq(self.store.ready)]
        with m.If(ctl.flush):
            m.d.comb += buf.o.ready.eq(1)
        m.d.comb += ctl.valid.eq(buf.o.valid)
        return m


class _Records(FlowServer):
    """The records of the tile's connections, one at a time (see the module docstring for the
    sequence), as a :class:`~beehive.apps.tcp_steps.FlowServer`: the record's memory requests
    through ``mem`` (:class:`_RecordMemory`), its bytes and its reply's through ``buf``
    (:class:`_RecordBuffer`), the request to the application offered on ``req_go`` (with
    ``ctl`` of ``reply``: :class:`_Replies`), room in the send ring found first
    (:meth:`~beehive.apps.tcp_steps.FlowServer.room`; the reply goes to ``tx``).
    ``events`` pulse what the tile counts (:data:`_EVENTS`). ``timeout``: cycles a request
    waits for its reply (taken as it is sent)."""

    fsm_name = "records"
    close_after = "FLUSH"

    def __init__(self, requests: Requests, *, flows: int, slot_bits: int,
                 max_record: int) -> None:
        self._max_record = max_record
        super().__init__(requests, flows=flows, slot_bits=slot_bits, need=LENGTH_BYTES,
                         ask=Signal(range(max_record + LENGTH_BYTES + 1), name="ask"),
                         room=True, members={
                             "mem": Out(_memory_control()), "buf": Out(_buffer_control()),
                             "reply": Out(_reply_control()),
                             "req_go": Out(1), "req_taken": In(1), "timeout": In(32),
                             "events": Out(data.StructLayout({e: 1 for e in _EVENTS})),
                         })
        self.seq = Signal(32)       # the request's tag, with the handle
        self.timer = Signal(32)

    def on_pop(self) -> list:
        return [self._ask.eq(LENGTH_BYTES)]

    def _memory(self, store: bool, addr: Any, size: Any, wrap: Any, length: bool = False) -> list:
        mreq = self.mem.req
        return [mreq.store.eq(store), mreq.length.eq(length), mreq.addr.eq(addr),
                mreq.size.eq(size), mreq.wrap.eq(wrap)]

    def whole(self, m: Module, cx: Any) -> None:
        m.d.sync += self._memory(False, cx.addr, LENGTH_BYTES, cx.size_log2, length=True)
        m.next = "ROOM"

    def _memory_states(self, m: Module, name: str, *, after: Any,
                       on_issue: Signal | None = None) -> None:
        """State ``name`` offers the memory request; ``WAIT_<name>`` takes its ack (and a
        load's bytes): an error closes the connection, a connection that ended meanwhile is
        dropped, and else ``after()`` picks the next state."""
        mem = self.mem
        with m.State(name):
            m.d.comb += [self.busy.eq(1), mem.go.eq(1)]
            with m.If(mem.taken):
                if on_issue is not None:
                    m.d.comb += on_issue.eq(1)
                m.next = f"WAIT_{name}"
        with m.State(f"WAIT_{name}"):
            m.d.comb += self.busy.eq(1)
            with m.If(mem.done):
                m.d.comb += mem.clear.eq(1)
                with m.If(mem.err):
                    m.d.comb += self.events.mem_errors.eq(1)
                    m.next = "CLOSE"
                with m.Elif(self.dead):
                    m.next = "FLUSH"
                with m.Else():
                    after()

    def _decide_length(self, m: Module) -> None:
        n, rx = self.mem.n, self.rx
        too_long, partial, eof, empty = self._length_checks
        with m.If(too_long):
            m.d.comb += self.events.oversized.eq(1)
            m.next = "CLOSE"
        with m.Elif(partial):
            with m.If(eof):
                m.d.comb += self.truncated.eq(1)
                m.next = "CLOSE"
            with m.Else():
                m.d.sync += self._ask.eq(n + LENGTH_BYTES)
                m.next = "ASK"
        with m.Elif(empty):
            m.next = "ADJUST_RX"
        with m.Else():
            m.d.sync += self._memory(False, ring_add(rx.addr, LENGTH_BYTES, rx.size_log2), n,
                                     rx.size_log2)
            m.next = "LOAD_BODY"

    def _store_reply(self, m: Module) -> None:
        r, tx = self.reply.r, self.tx
        with m.If(r == 0):
            m.next = "ADJUST_TX"
        with m.Else():
            m.d.sync += self._memory(True, ring_add(tx.addr, LENGTH_BYTES, tx.wrap), r, tx.wrap)
            m.next = "STORE_REPLY"

    def states(self, m: Module) -> None:
        def goto(state: str) -> Any:
            def go() -> None:
                m.next = state
            return go
        # Room for the longest reply before the record is read: a flow whose peer stops
        # reading waits there, parked, and holds nothing the other flows need.
        self.room(m, LENGTH_BYTES + self._max_record, "LOAD_LENGTH")
        self._memory_states(m, "LOAD_LENGTH", after=lambda: self._decide_length(m))
        self._memory_states(m, "LOAD_BODY", after=goto("ADJUST_RX"))    # (the body in buf)
        self._request_states(m)
        self._memory_states(m, "STORE_LENGTH", on_issue=self.buf.start_prefix,
                            after=lambda: self._store_reply(m))
        self._memory_states(m, "STORE_REPLY", on_issue=self.buf.start_store,
                            after=goto("ADJUST_TX"))
        r = self.reply.r
        with m.State("ADJUST_TX"):
            m.d.comb += self.busy.eq(1)
            with m.If(self.request(m, MsgType.TCP_TX_ADJUST_PTR,
                                   ptr=self.tx.ptr + LENGTH_BYTES + r)):
                m.d.comb += self.events.records.eq(1)
                m.d.sync += [self._ask.eq(LENGTH_BYTES), *self.reserve(LENGTH_BYTES + r)]
                m.next = "ASK"
        with m.State("FLUSH"):          # what the record left in buf is thrown away
            with m.If(~self.buf.to_app & ~self.buf.to_store):
                m.d.comb += self.buf.flush.eq(1)
                with m.If(~self.buf.valid):
                    m.next = "IDLE"

    def _request_states(self, m: Module) -> None:
        """From the record's body to its reply's length stored."""
        n, reply = self.mem.n, self.reply
        timed_out = self._timed_out
        with m.State("ADJUST_RX"):
            m.d.comb += self.busy.eq(1)
            with m.If(self.request(m, MsgType.TCP_RX_ADJUST_PTR,
                                   ptr=self.rx.ptr + LENGTH_BYTES + n)):
                m.d.sync += self.seq.eq(self.seq + 1)     # the request's tag
                m.next = "REQUEST"
        with m.State("REQUEST"):
            m.d.comb += [self.busy.eq(1), self.req_go.eq(1)]
            with m.If(self.req_taken):
                m.d.comb += [self.buf.start_app.eq(n != 0), reply.expect.eq(1)]
                m.d.sync += self.timer.eq(self.timeout)
                m.next = "WAIT_REPLY"
        with m.State("WAIT_REPLY"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += self.timer.eq(self.timer - 1)
            with m.If(reply.got):
                m.d.comb += reply.take.eq(1)
                with m.If(reply.bad):
                    m.d.comb += self.events.bad_replies.eq(1)
                    m.next = "CLOSE"
                with m.Elif(self.dead):
                    m.next = "FLUSH"
                with m.Else():
                    m.d.sync += self._memory(True, self.tx.addr, LENGTH_BYTES, self.tx.wrap)
                    m.next = "STORE_LENGTH"
            with m.Elif(timed_out):
                m.d.comb += [reply.give_up.eq(1), self.events.timeouts.eq(1)]
                m.next = "CLOSE"

    def before(self, m: Module) -> None:
        n, rx, reply = self.mem.n, self.rx, self.reply
        too_long, partial, eof, empty = Signal(), Signal(), Signal(), Signal()
        self._length_checks = too_long, partial, eof, empty
        self._timed_out = timed_out = Signal()
        m.d.comb += [too_long.eq(n > self._max_record),
                     partial.eq(rx.length - LENGTH_BYTES < n),     # not all in yet
                     eof.eq(rx.status == Status.EOF), empty.eq(n == 0),
                     reply.tag.eq(Cat(self.handle, self.seq)),
                     timed_out.eq(reply.awaiting & (self.timer == 0))]


# -- the tile --------------------------------------------------------------------------------------

class TcpDatagramTile(TcpAppTile):
    """Carry length-prefixed records of TCP connections to a datagram application and its
    replies back (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2), ``"tcp_tx"`` and :data:`KEY_APP` (the application,
        at the sub-port where it takes ``UDP_RX_SEGMENT``); the application's replies come to
        :data:`DATAGRAM_FBITS`. Standalone (no routes) all three are tile (0, 0).
    config : TcpConfig
        The engine's: ``flows`` sizes the per-flow state.
    max_record : int or None
        Longest request or reply, in bytes (1 to 65535, and 2 more must fit in each ring);
        the tile buffers one. Default :data:`DEFAULT_MAX_RECORD`, or less if the rings are
        smaller.
    reply_timeout : int
        Cycles a request waits for its reply before its connection is closed: the reset value
        of the register ``reply_timeout``, which the control plane may change at run time
        (each request takes the value it finds as it is sent).

    Raises
    ------
    ValueError
        If a parameter is out of range, or a route is missing.
    """

    # Besides an application's: the application's replies in, the requests out to it.
    inputs = app_inputs(Receive("rx0", MsgType.UDP_TX_SEGMENT, meta=PACKET_META,
                                fbits=DATAGRAM_FBITS))
    outputs = app_outputs(1, Send("tx0", MsgType.UDP_RX_SEGMENT, meta=PACKET_META,
                                  keys=[KEY_APP]))

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 max_record: int | None = None, reply_timeout: int = 1 << 20) -> None:
        config = config_or_default(config)
        ring = min(config.rx_ring, config.tx_ring)
        limit = min((1 << 16) - 1, ring - LENGTH_BYTES)
        max_record = min(DEFAULT_MAX_RECORD, limit) if max_record is None else max_record
        self.max_record = int_in_range(max_record, "max_record", 1, limit)
        self.reply_timeout = int_in_range(reply_timeout, "reply_timeout", 1, (1 << 32) - 1)
        super().__init__(env, config=config, counters={
            "flows": "connections announced (receive-buffer notifications)",
            "records": "requests answered (their replies written to the send ring)",
            "closed": "connections the tile closed (the peer's FIN, or an error below)",
            "ended": "connections the engine reported reset, timed out or closed under the tile",
            "oversized": "records longer than max_record (the connection is closed)",
            "truncated": "records cut short by the peer's FIN (the connection is closed)",
            "timeouts": "requests the application did not answer in time (closed)",
            "bad_replies": "replies longer than max_record (the connection is closed)",
            "mem_errors": "memory acks with error set (the connection is closed)",
            "dropped": "messages that match nothing (stray, stale, unknown, malformed)",
        }, registers={
            "reply_timeout": Register(32, "cycles a request waits for its reply before its "
                                          "connection is closed", reset=reply_timeout),
        })
        routes = self.env.next_hops("data")
        self.app_hop = first_hop(routes, KEY_APP)
        if routes and self.app_hop is None:
            raise ValueError(f"{type(self).__name__} {self.env.name!r} needs a route to its "
                             f"application with key {KEY_APP!r}; it has keys "
                             f"{sorted(map(str, routes))}")

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, flows, sb = self.env.width, self.config.flows, self.slot_bits
        io = self.ports(m)
        app_tx, = io.app_tx
        rep_rx, = io.inputs
        req_tx, = io.senders
        a = io.app
        m.submodules.table = table = FlowTable(flows, sb, forgets=1, tx_answers="keep", reads={
            **FlowServer.READS, **FlowServer.ROOM_READS, "rx_loc": ("rx_locs", "comb"),
            "tx_loc": ("tx_locs", "comb")})
        m.submodules.records = records = _Records(io.requests, flows=flows, slot_bits=sb,
                                                  max_record=self.max_record)
        m.submodules.memory = memory = _RecordMemory(io.requests, width)
        m.submodules.replies = replies = _Replies(rep_rx.o_hdr.payload.shape(), width,
                                                  self.max_record)
        m.submodules.buffer = buffer = _RecordBuffer(width, self.max_record)
        connect(m, app=a, table=table.app, records=records.app)
        records.join(m, table)
        connect(m, records=records.mem, memory=memory.ctl)
        connect(m, records=records.buf, buffer=buffer.ctl)
        connect(m, records=records.reply, replies=replies.ctl)
        connect(m, records=records.app_tx, sender=app_tx.i_hdr)
        connect(m, memory=memory.req, sender=io.mem_tx.i_hdr)
        connect(m, receiver=io.mem, memory=memory.mem)
        connect(m, receiver=io.mem.data, memory=memory.data)
        connect(m, memory=memory.words, buffer=buffer.mem_words)
        connect(m, receiver=rep_rx.o_hdr, replies=replies.hdr)
        connect(m, receiver=rep_rx.o_data, replies=replies.data)
        connect(m, replies=replies.words, buffer=buffer.reply_words)
        connect(m, buffer=buffer.app, sender=req_tx.i_data)
        connect(m, buffer=buffer.store, sender=io.mem_tx.i_data)
        m.d.comb += [
            records.timeout.eq(self.regs.reply_timeout),
            table.rx_loc.addr.eq(records.slot), table.tx_loc.addr.eq(records.slot),
            memory.rx_loc.eq(table.rx_loc.data), memory.tx_loc.eq(table.tx_loc.data),
            buffer.r.eq(records.reply.r),
            table.forget[0].en.eq(records.forget), table.forget[0].slot.eq(records.slot),
        ]
        m.d.comb += records.req_taken.eq(self._request(m, req_tx, table, records, memory.ctl.n))
        unknown = Signal()
        m.d.comb += unknown.eq(a.valid & ~table.handled)
        self.count_dropped(m, io, unknown, memory.drop, replies.drop, table.drop)
        self.count_flows(m, table)
        self.count_events(m, closed=records.forget, truncated=records.truncated,
                          **{name: getattr(records.events, name) for name in _EVENTS})
        return m

    def _request(self, m: Module, req_tx: Any, table: FlowTable, records: _Records,
                 n: Any) -> Any:
        """The request to the application (``UDP_RX_SEGMENT``, ``n`` bytes, tagged), offered
        while ``records.req_go``, with its connection's peer (kept per flow slot, written as
        ``table`` announces it). Returns its ``taken``."""
        meta = table.app.meta
        m.submodules.peers = peers = Memory(shape=_PEER, depth=self.config.flows, init=[])
        peer_w, peer_r = peers.write_port(), peers.read_port(domain="comb")
        with m.If(table.announced):
            m.d.comb += [peer_w.en.eq(1), peer_w.addr.eq(table.app.slot),
                         peer_w.data.ip.eq(meta.peer_ip), peer_w.data.port.eq(meta.peer_port),
                         peer_w.data.local_port.eq(meta.local_port)]
        req_meta = Signal(PACKET_META.layout())
        m.d.comb += [peer_r.addr.eq(records.slot),
                     req_meta.peer_mac.eq(records.reply.tag),
                     req_meta.protocol.eq(IpProtocol.TCP.value),
                     req_meta.peer_ip.eq(peer_r.data.ip), req_meta.peer_port.eq(peer_r.data.port),
                     req_meta.local_port.eq(peer_r.data.local_port)]
        return offer_message(
            m, req_tx, records.req_go, dst=address_of(self.app_hop),
            src=(self.env.x, self.env.y, DATAGRAM_FBITS), msg_type=MsgType.UDP_RX_SEGMENT.value,
            meta=req_meta, payload_bytes=n)
