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
for all its connections in the order their records came in: a request goes to the application
once it is whole, and the next is read once its reply is written to the send ring.

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
        ─▶ LOAD_MEM(a, 2) ◀─ the length n     (n > max_record: close; L < 2 + n: ask for 2 + n)
        ─▶ LOAD_MEM(a + 2, n) ◀─ the body ─▶ RX_ADJUST_PTR(p + 2 + n)
        ─▶ UDP_RX_SEGMENT(body) to the application ◀─ UDP_TX_SEGMENT(reply, r bytes)
        ─▶ TX_MSG_REQ(2 + r) ◀─ TX_MSG_RESP(OK, ptr q, addr b)
        ─▶ STORE_MEM(b, 2, r) ◀─ ack ─▶ STORE_MEM(b + 2, reply) ◀─ ack
        ─▶ TX_ADJUST_PTR(q + 2 + r) ─▶ RX_MSG_REQ(2)
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
(an idle tile, a record whose bytes are all in the ring): the length's ``LOAD_MEM`` 2 cycles
after the ``TCP_RX_MSG_RESP``, the request to the application 1 cycle after the body's last
word; the ``TCP_TX_MSG_REQ`` 1 cycle after the reply's last word. Throughput: one record at a
time, with 6 round trips to the engine and the memories per record: a control protocol's rate,
not a data path.
"""

from collections.abc import Callable
from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK
from apiary.stream.layout import payload_layout
from apiary.stream.queue import Queue
from apiary.stream.registers import Register
from apiary.tile import Receive, Send, TileEnv

from ..proto.ipv4 import IpProtocol
from ..proto.messages import PACKET_META, MsgType
from ..proto.tcp.app import GEN_BITS, Status
from ..proto.tcp.config import TcpConfig, config_or_default
from .tcp_app import (MEM_LOC, RX_CONTEXT, FlowTable, TcpAppTile, app_inputs, app_outputs,
                      int_in_range)
from .tcp_steps import FlowPicker, close_state, ring_add, take_tx_answer
from apiary.stream.counters import count


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
        width, flows = self.env.width, self.config.flows
        nb = width // 8
        c = self.counters
        io = self.ports(m)
        app_tx, = io.app_tx
        rep_rx, = io.inputs
        req_tx, = io.senders
        a, mem = io.app, io.mem
        meta = a.meta

        # -- per-flow state ----------------------------------------------------------------------
        sb = self.slot_bits
        table = FlowTable(m, flows, sb)
        live = table.live
        rx_loc_r = table.rx_locs.read_port(domain="comb")
        tx_loc_r = table.tx_locs.read_port(domain="comb")
        m.submodules.peers = peers = Memory(shape=_PEER, depth=flows, init=[])
        peer_w, peer_r = peers.write_port(), peers.read_port(domain="comb")

        # -- the record being served -------------------------------------------------------------
        slot = Signal(sb)
        gen = Signal(GEN_BITS)
        handle = self.handle(slot, gen)
        dead = Signal()             # its connection ended under it
        rx = Signal(RX_CONTEXT)     # the response being served
        n = Signal(16)              # the request's length
        r = Signal(16)              # the reply's length
        ask = Signal(range(self.max_record + LENGTH_BYTES + 1))    # bytes the next RX_MSG_REQ
        tx = Signal(data.StructLayout({"ptr": 32, "addr": 48, "wrap": 6}))
        seq = Signal(32)
        tag = Cat(handle, seq)
        timer = Signal(32)
        picker = FlowPicker(m, table, slot)
        m.d.comb += [peer_r.addr.eq(slot), rx_loc_r.addr.eq(slot),
                     tx_loc_r.addr.eq(slot)]

        # The record's bytes, then its reply's, wait here.
        words = -(-self.max_record // nb)
        m.submodules.buf = buf = Queue(payload_layout(width), words + 1)
        to_app, to_store = Signal(), Signal()       # the buffer drains into a message
        with m.If(to_app):
            m.d.comb += [req_tx.i_data.valid.eq(buf.o.valid),
                         req_tx.i_data.payload.eq(buf.o.payload),
                         buf.o.ready.eq(req_tx.i_data.ready)]
        drained = buf.o.valid & buf.o.ready & buf.o.payload.last
        with m.If(drained):
            m.d.sync += [to_app.eq(0), to_store.eq(0)]

        # -- memory requests and acks (one outstanding) ------------------------------------------
        # (`length`: the load of a record's length prefix, whose bytes go to n, not to buf)
        mreq = Signal(data.StructLayout({"store": 1, "length": 1, "addr": 48, "size": 16,
                                         "wrap": 6}))
        mreq_loc = Signal(MEM_LOC)
        m.d.comb += mreq_loc.eq(Mux(mreq.store, tx_loc_r.data, rx_loc_r.data))
        m_wait = Signal()           # its ack is awaited
        m_got, m_err = Signal(), Signal()
        m_dest = Signal(2)          # where the ack's bytes go: 0 nowhere, 1 the length, 2 buf
        prefix = Signal()           # the 2-byte length of the reply is on mem_tx.i_data
        with m.If(prefix):
            m.d.comb += [io.mem_tx.i_data.valid.eq(1),
                         io.mem_tx.i_data.payload.data.eq(Cat(r[8:16], r[0:8])),
                         io.mem_tx.i_data.payload.nbytes.eq(LENGTH_BYTES),
                         io.mem_tx.i_data.payload.last.eq(1)]
            with m.If(io.mem_tx.i_data.ready):
                m.d.sync += prefix.eq(0)
        with m.Elif(to_store):
            m.d.comb += [io.mem_tx.i_data.valid.eq(buf.o.valid),
                         io.mem_tx.i_data.payload.eq(buf.o.payload),
                         buf.o.ready.eq(io.mem_tx.i_data.ready)]
        expected = Signal()
        m.d.comb += expected.eq(
            self.mem_ack(mem, LOAD_MEM_ACK, m_wait & ~mreq.store, mreq.addr, mreq.size,
                         mreq.wrap)
            | self.mem_ack(mem, STORE_MEM_ACK, m_wait & mreq.store, mreq.addr, mreq.size,
                           mreq.wrap))
        drop_mem = Signal()
        with m.If(mem.valid):
            m.d.sync += m_dest.eq(0)
            with m.If(expected):
                m.d.sync += [m_wait.eq(0), m_got.eq(1), m_err.eq(mem.meta.error)]
                with m.If(~mem.meta.error & ~mreq.store):
                    m.d.sync += m_dest.eq(Mux(mreq.length, 1, 2))
            with m.Else():
                m.d.comb += drop_mem.eq(1)
        word = mem.data
        m.d.comb += word.ready.eq(1)
        with m.If(word.valid):
            with m.If(m_dest == 1):
                m.d.sync += n.eq(Cat(word.payload.data[8:16], word.payload.data[0:8]))
            with m.If(m_dest == 2):
                m.d.comb += [buf.i.valid.eq(1), buf.i.payload.eq(word.payload)]
            with m.If(word.payload.last):
                m.d.sync += m_dest.eq(0)
        mem_go = Signal()           # offer mreq
        with m.If(mem_go):
            for store in (False, True):
                with m.If(mreq.store == store):
                    self.mem_request(m, io.mem_tx, store=store, loc=mreq_loc, addr=mreq.addr,
                                     size=mreq.size, wrap=mreq.wrap)
        mem_taken = mem_go & io.mem_tx.i_hdr.ready
        with m.If(mem_taken):
            m.d.sync += [m_wait.eq(1), m_got.eq(0)]

        def memory(store: bool, addr: Any, size: Any, wrap: Any, length: bool = False) -> list:
            return [mreq.store.eq(store), mreq.length.eq(length), mreq.addr.eq(addr),
                    mreq.size.eq(size), mreq.wrap.eq(wrap)]

        # -- the application's replies (always taken) --------------------------------------------
        reply = rep_rx.o_hdr.payload
        reply_meta = data.View(PACKET_META.layout(), reply.meta)
        awaiting = Signal()
        r_got, r_bad = Signal(), Signal()
        r_dest = Signal()           # the reply's bytes go to buf
        drop_reply = Signal()
        m.d.comb += [rep_rx.o_hdr.ready.eq(1), rep_rx.o_data.ready.eq(1)]
        with m.If(rep_rx.o_hdr.valid):
            ours = awaiting & (reply.msg_type == MsgType.UDP_TX_SEGMENT.value) \
                & (reply_meta.peer_mac == tag)
            with m.If(ours):
                fits = reply.payload_bytes <= self.max_record
                m.d.sync += [awaiting.eq(0), r_bad.eq(~fits), r.eq(reply.payload_bytes),
                             r_dest.eq(fits & (reply.payload_bytes != 0)),
                             r_got.eq(~fits | (reply.payload_bytes == 0))]
            with m.Else():
                m.d.comb += drop_reply.eq(1)
        with m.If(rep_rx.o_data.valid & r_dest):
            m.d.comb += [buf.i.valid.eq(1), buf.i.payload.eq(rep_rx.o_data.payload)]
            with m.If(rep_rx.o_data.payload.last):
                m.d.sync += [r_dest.eq(0), r_got.eq(1)]

        # -- requests to the application ---------------------------------------------------------
        req_meta = Signal(PACKET_META.layout())
        m.d.comb += [req_meta.peer_mac.eq(tag), req_meta.protocol.eq(IpProtocol.TCP.value),
                     req_meta.peer_ip.eq(peer_r.data.ip), req_meta.peer_port.eq(peer_r.data.port),
                     req_meta.local_port.eq(peer_r.data.local_port)]
        req_go = Signal()
        req_taken = offer_message(
            m, req_tx, req_go, dst=address_of(self.app_hop), src=(self.env.x, self.env.y,
                                                                   DATAGRAM_FBITS),
            msg_type=MsgType.UDP_RX_SEGMENT.value, meta=req_meta, payload_bytes=n)

        # -- engine messages (always taken) ------------------------------------------------------
        tx_wait, tx_got = Signal(), Signal()
        ended_tx = Signal()
        drop_app = Signal()
        self.count_dropped(m, io, drop_app, drop_mem, drop_reply, table.drop)
        m.d.sync += [c.ended.eq(c.ended + (table.ended | ended_tx)),
                     c.flows.eq(c.flows + table.announced)]
        busy = Signal()             # the engine serves `slot`
        with m.If(table.kill & busy & (a.slot == slot)):
            m.d.sync += dead.eq(1)
        forget = Signal()           # the engine is done with the record's connection
        with m.If(forget):
            m.d.sync += live.bit_select(slot, 1).eq(0)

        # -- the engine ----------------------------------------------------------------------------
        def goto(state: str) -> Callable[[], None]:
            def go() -> None:
                m.next = state
            return go

        def memory_states(name: str, *, after: Callable[[], None], on_issue: tuple = ()) -> None:
            """State ``name`` offers ``mreq``; ``WAIT_<name>`` takes its ack (and a load's
            bytes): an error closes the connection, a connection that ended meanwhile is
            dropped, and else ``after()`` picks the next state."""
            with m.State(name):
                m.d.comb += [busy.eq(1), mem_go.eq(1)]
                with m.If(mem_taken):
                    m.d.sync += list(on_issue)
                    m.next = f"WAIT_{name}"
            with m.State(f"WAIT_{name}"):
                m.d.comb += busy.eq(1)
                with m.If(m_got & (m_dest == 0)):
                    m.d.sync += m_got.eq(0)
                    with m.If(m_err):
                        count(m, c.mem_errors)
                        m.next = "CLOSE"
                    with m.Elif(dead):
                        m.next = "FLUSH"
                    with m.Else():
                        after()

        def decide_length() -> None:
            with m.If(n > self.max_record):
                count(m, c.oversized)
                m.next = "CLOSE"
            with m.Elif(rx.length - LENGTH_BYTES < n):          # not all in yet
                with m.If(rx.status == Status.EOF):
                    count(m, c.truncated)
                    m.next = "CLOSE"
                with m.Else():
                    m.d.sync += ask.eq(n + LENGTH_BYTES)
                    m.next = "ASK"
            with m.Elif(n == 0):
                m.next = "ADJUST_RX"
            with m.Else():
                m.d.sync += memory(False, ring_add(rx.addr, LENGTH_BYTES, rx.size_log2), n,
                                   rx.size_log2)
                m.next = "LOAD_BODY"

        def store_reply() -> None:
            with m.If(r == 0):
                m.next = "ADJUST_TX"
            with m.Else():
                m.d.sync += memory(True, ring_add(tx.addr, LENGTH_BYTES, tx.wrap), r, tx.wrap)
                m.next = "STORE_REPLY"

        def load_length(cx: Any) -> None:
            m.d.sync += memory(False, cx.addr, LENGTH_BYTES, cx.size_log2, length=True)
            m.next = "LOAD_LENGTH"

        with m.FSM(name="records"):
            picker.states(m, gen=gen, dead=dead, busy=busy, rx=rx, need=LENGTH_BYTES,
                          whole=load_length, ask="ASK", close="CLOSE", truncated=c.truncated,
                          on_pop=(ask.eq(LENGTH_BYTES),))
            memory_states("LOAD_LENGTH", after=decide_length)       # (the length is in n)
            memory_states("LOAD_BODY", after=goto("ADJUST_RX"))   # (the body is in buf)
            with m.State("ADJUST_RX"):
                m.d.comb += busy.eq(1)
                with m.If(self.app_request(m, app_tx, MsgType.TCP_RX_ADJUST_PTR, self.tcp_rx,
                                           flow=handle, ptr=rx.ptr + LENGTH_BYTES + n)):
                    m.d.sync += seq.eq(seq + 1)     # the request's tag
                    m.next = "REQUEST"
            with m.State("REQUEST"):
                m.d.comb += [busy.eq(1), req_go.eq(1)]
                with m.If(req_taken):
                    m.d.sync += [to_app.eq(n != 0), awaiting.eq(1), r_got.eq(0),
                                 timer.eq(self.regs.reply_timeout)]
                    m.next = "WAIT_REPLY"
            with m.State("WAIT_REPLY"):
                m.d.comb += busy.eq(1)
                m.d.sync += timer.eq(timer - 1)
                with m.If(r_got):
                    m.d.sync += r_got.eq(0)
                    with m.If(r_bad):
                        count(m, c.bad_replies)
                        m.next = "CLOSE"
                    with m.Elif(dead):
                        m.next = "FLUSH"
                    with m.Else():
                        m.next = "TX_REQ"
                with m.Elif(awaiting & (timer == 0)):
                    m.d.sync += [awaiting.eq(0), c.timeouts.eq(c.timeouts + 1)]
                    m.next = "CLOSE"
            # (a request on offer is never withdrawn: at 64 bits it is several flits, so `dead`
            # is looked at before one is offered, not while)
            with m.State("TX_REQ"):
                m.d.comb += busy.eq(1)
                with m.If(self.app_request(m, app_tx, MsgType.TCP_TX_MSG_REQ, self.tcp_tx,
                                           flow=handle, length=r + LENGTH_BYTES)):
                    m.d.sync += tx_wait.eq(1)
                    m.next = "WAIT_TX"
            with m.State("WAIT_TX"):
                m.d.comb += busy.eq(1)
                with m.If(dead | (~tx_wait & ~tx_got)):    # ended, or answered not OK
                    m.d.sync += [tx_wait.eq(0), tx_got.eq(0)]
                    m.next = "FLUSH"
                with m.Elif(tx_got):
                    m.d.sync += tx_got.eq(0)
                    m.d.sync += memory(True, tx.addr, LENGTH_BYTES, tx.wrap)
                    m.next = "STORE_LENGTH"
            memory_states("STORE_LENGTH", on_issue=(prefix.eq(1),), after=store_reply)
            memory_states("STORE_REPLY", on_issue=(to_store.eq(1),), after=goto("ADJUST_TX"))
            with m.State("ADJUST_TX"):
                m.d.comb += busy.eq(1)
                with m.If(self.app_request(m, app_tx, MsgType.TCP_TX_ADJUST_PTR, self.tcp_tx,
                                           flow=handle, ptr=tx.ptr + LENGTH_BYTES + r)):
                    m.d.sync += [c.records.eq(c.records + 1), ask.eq(LENGTH_BYTES)]
                    m.next = "ASK"
            with m.State("ASK"):            # the next record (or the rest of this one)
                m.d.comb += busy.eq(1)
                with m.If(self.app_request(m, app_tx, MsgType.TCP_RX_MSG_REQ, self.tcp_rx,
                                           flow=handle, length=ask)):
                    m.next = "IDLE"
            close_state(m, self, app_tx, handle=handle, dead=dead, busy=busy, forget=forget,
                        closed=c.closed, after="FLUSH")
            with m.State("FLUSH"):          # what the record left in buf is thrown away
                with m.If(~to_app & ~to_store):
                    m.d.comb += buf.o.ready.eq(1)
                    with m.If(~buf.o.valid):
                        m.next = "IDLE"

        # -- engine messages, after the engine: a new connection's `live` wins over the old one
        # being forgotten ----------------------------------------------------------------------
        table.track(m, a)
        with m.If(table.announced):
            m.d.comb += [peer_w.en.eq(1), peer_w.addr.eq(a.slot), peer_w.data.ip.eq(meta.peer_ip),
                         peer_w.data.port.eq(meta.peer_port),
                         peer_w.data.local_port.eq(meta.local_port)]
        take_tx_answer(m, a, table, wait=tx_wait, got=tx_got, handle=handle, ring=tx,
                       ended=ended_tx, drop=drop_app)
        return m
