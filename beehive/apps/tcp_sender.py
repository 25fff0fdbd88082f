"""TCP sender: open a connection to a server, send it a known byte stream, close it.

An application of the TCP engine (:mod:`beehive.proto.tcp`) that opens the connection itself
(an active open), built on :class:`~beehive.apps.tcp_app.TcpAppTile` (routes, sub-ports,
framing). Byte ``k`` of the stream is ``k % 251`` (a prime, so a misplaced block shows),
generated straight into the ``STORE_MEM`` payload words: no memory holds it.

==========================  ====================  =========================================
in (``dst_fbits``)          from                  what the tile does
==========================  ====================  =========================================
``TCP_NEW_FLOW_NOTIF``      RX tile               the answer to its open (matched by peer
(LOCAL0)                                          address and ports): status OK with kind
                                                  RECEIVE (the flow's handle; the receive
                                                  side is never read) then SEND (the send
                                                  ring's memory tile); another status: the
                                                  open failed
``TCP_RX_MSG_RESP``         RX tile               RESET, TIMEOUT or CLOSED for its flow: the
(LOCAL0)                                          connection is over (``ended``)
``TCP_TX_MSG_RESP``         TX tile               room in the send ring
(LOCAL0)
``STORE_MEM_ACK`` (LOCAL1)  send ring's memory    the bytes are written
==========================  ====================  =========================================

Out: engine requests (``src_fbits`` LOCAL0) to route ``"tcp_rx"`` (the RX tile's LOCAL2) or
``"tcp_tx"`` (the TX tile's LOCAL0); ``STORE_MEM`` (``src_fbits`` LOCAL1) to the memory tile
the SEND notification named (LOCAL0). The sequence, with ``n = min(chunk, bytes left)``::

    (start cycles after reset) OPEN_REQ(peer_ip, peer_port, local_port)
        ◀─ NEW_FLOW_NOTIF(OK, RECEIVE, flow), NEW_FLOW_NOTIF(OK, SEND, flow, mem_x, mem_y)
    repeat until length bytes are written:
        TX_MSG_REQ(flow, n) ◀─ TX_MSG_RESP(OK, ptr q, addr b, size_log2 j)
        ─▶ STORE_MEM(b, n, wrap j, the next n stream bytes) ◀─ STORE_MEM_ACK
        ─▶ TX_ADJUST_PTR(flow, q + n)
    CLOSE_REQ(flow)

A notification with another status (UNREACHABLE, REFUSED, BUSY, TIMEOUT) is a failed open
(``failed``): after ``retry`` cycles the tile opens again, ``attempts`` opens in all at most. A
connection that ends before the close (a non-OK ``TCP_TX_MSG_RESP``, or a ``TCP_RX_MSG_RESP``
with RESET, TIMEOUT or CLOSED) stops the tile (``ended``; after the close it is only
counted), as does a ``STORE_MEM_ACK`` with ``error`` set (``mem_errors``).

The input is never held (``streaming = False``): each message is handled the cycle it is
offered; one request of each kind is outstanding at a time; messages that match nothing are
dropped and counted (``dropped``). Throughput: ``chunk`` bytes per round of TX request, store
and adjust (latency-bound; with an engine and memory that answer at once, 12 cycles per
100-byte chunk at 512 bits, 22 per 730 bytes, 44 and 123 at 64 bits); the stream is generated
at one word per cycle.
"""

import ipaddress

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data

from apiary.os.memory_tile import STORE_MEM_ACK
from apiary.stream.layout import payload_words

from ..proto.messages import MsgType
from ..proto.tcp.app import BufferKind, Status
from .tcp_app import MEM_LOC, TcpAppTile, int_in_range
from apiary.stream.counters import count


__all__ = ["TcpSenderTile", "STREAM_MODULUS", "stream_bytes"]


#: Byte ``k`` of the stream is ``k % STREAM_MODULUS``.
STREAM_MODULUS = 251


def stream_bytes(length: int, start: int = 0) -> bytes:
    """Bytes ``start`` to ``start + length`` of the stream the tile sends."""
    return bytes((start + k) % STREAM_MODULUS for k in range(length))


class TcpSenderTile(TcpAppTile):
    """Open a connection, send ``length`` bytes of the ``k % 251`` stream, close (see the
    module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` (fbits LOCAL0); ``"tx_mem"`` may be
        declared for the deadlock check.
    config : TcpConfig
        The engine's.
    peer_ip : str
        The server's IPv4 address, e.g. ``"10.0.0.1"``.
    peer_port : int
        The server's port.
    local_port : int
        This end's port (default 40000).
    length : int
        Bytes to send (default 1 MiB; below 2**32).
    start : int
        Cycles after reset before the first open (default 1000).
    retry : int
        Cycles to wait after a failed open before the next (default 1,000,000).
    attempts : int
        Opens at most (default 5).
    chunk : int or None
        Largest number of bytes written per step (default ``min(mss, tx_ring // 2)``).
    """

    def __init__(self, env=None, *, config=None, peer_ip="10.0.0.1", peer_port=80,
                 local_port=40000, length=1 << 20, start=1000, retry=1_000_000, attempts=5,
                 chunk=None):
        try:
            self.peer_ip = int(ipaddress.IPv4Address(peer_ip))
        except (ipaddress.AddressValueError, ValueError, TypeError):
            raise ValueError(f"peer_ip must be an IPv4 address such as '10.0.0.1', "
                             f"not {peer_ip!r}") from None
        self.peer_port = int_in_range(peer_port, "peer_port", 1, 0xFFFF)
        self.local_port = int_in_range(local_port, "local_port", 1, 0xFFFF)
        self.length = int_in_range(length, "length", 0, (1 << 32) - 1)
        self.start = int_in_range(start, "start", 0, (1 << 32) - 1)
        self.retry = int_in_range(retry, "retry", 0, (1 << 32) - 1)
        self.attempts = int_in_range(attempts, "attempts", 1, 255)
        super().__init__(env, config=config, chunk=chunk, counters={
            "opens": "open requests sent",
            "opened": "opens answered with both buffers (status OK)",
            "failed": "opens answered with another status",
            "bytes": "bytes written to the send ring and handed to the engine",
            "closed": "close requests sent (after the last byte)",
            "ended": "connections the engine reported reset, timed out or closed",
            "mem_errors": "store acks with error set (the tile stops)",
            "dropped": "messages that match nothing (stray, stale, unknown, malformed)",
        })

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        nb = width // 8
        c = self.counters
        io = self.ports(m)
        app_tx, = io.app_tx
        a, mem = io.app, io.mem
        meta = a.meta

        handle = Signal(16)
        got_rx, got_tx = Signal(), Signal()
        opening = Signal()          # an open request is unanswered
        open_failed = Signal()
        ended = Signal()
        tries = Signal(range(self.attempts + 1))
        timer = Signal(32)
        remaining = Signal(32, init=self.length)
        n = Signal(range(self.chunk + 1))
        tx = Signal(data.StructLayout({"status": 4, "ptr": 32, "addr": 48, "wrap": 6}))
        tx_loc = Signal(MEM_LOC)
        await_tx, tx_got = Signal(), Signal()
        await_store, store_got, store_err = Signal(), Signal(), Signal()
        ended_in, ended_job = Signal(), Signal()
        drop_app, drop_mem = Signal(), Signal()
        self.count_dropped(m, io, drop_app, drop_mem)
        count(m, c.ended, (ended_in | ended_job))

        # -- the stream, a word a cycle: byte j of a word is (base + j) % 251 ----------------------
        base = Signal(range(STREAM_MODULUS))    # the next byte's value
        left = Signal(range(-(-self.chunk // nb) + 1))
        tail = Signal(range(nb + 1))

        def mod(value):
            return Mux(value >= STREAM_MODULUS, value - STREAM_MODULUS, value)[:8]

        out = io.mem_tx.i_data
        step = Mux(left == 1, tail, nb)
        m.d.comb += [
            out.valid.eq(left != 0),
            out.payload.data.eq(Cat(mod(base + j) for j in range(nb))),
            out.payload.nbytes.eq(step),
            out.payload.last.eq(left == 1),
        ]
        with m.If(out.valid & out.ready):
            m.d.sync += [left.eq(left - 1), base.eq(mod(base + step))]

        with m.FSM(name="sender"):
            with m.State("START"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(timer >= self.start):
                    m.next = "OPEN"
            with m.State("OPEN"):
                with m.If(self.app_request(m, app_tx, MsgType.TCP_OPEN_REQ, self.tcp_rx,
                                           peer_ip=self.peer_ip, peer_port=self.peer_port,
                                           local_port=self.local_port)):
                    m.d.sync += [c.opens.eq(c.opens + 1), tries.eq(tries + 1), opening.eq(1),
                                 open_failed.eq(0), got_rx.eq(0), got_tx.eq(0)]
                    m.next = "WAIT_OPEN"
            with m.State("WAIT_OPEN"):
                with m.If(ended):           # reset between its two notifications
                    m.next = "DONE"
                with m.Elif(open_failed):
                    m.d.sync += timer.eq(0)
                    with m.If(tries == self.attempts):
                        m.next = "DONE"
                    with m.Else():
                        m.next = "RETRY"
                with m.Elif(got_tx):
                    count(m, c.opened)
                    m.next = "NEXT"
            with m.State("RETRY"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(timer >= self.retry):
                    m.next = "OPEN"
            with m.State("NEXT"):
                words, last_bytes = payload_words(self.step(remaining), width)
                m.d.sync += [n.eq(self.step(remaining)), left.eq(words), tail.eq(last_bytes)]
                with m.If(ended):
                    m.next = "DONE"
                with m.Elif(remaining == 0):
                    m.next = "CLOSE"
                with m.Else():
                    m.next = "TX_REQ"
            with m.State("TX_REQ"):
                with m.If(self.app_request(m, app_tx, MsgType.TCP_TX_MSG_REQ, self.tcp_tx,
                                           flow=handle, length=n)):
                    m.d.sync += await_tx.eq(1)
                    m.next = "WAIT_TX"
            with m.State("WAIT_TX"):
                with m.If(tx_got):
                    m.d.sync += tx_got.eq(0)
                    with m.If(ended):
                        m.next = "DONE"
                    with m.Elif(tx.status == Status.OK):
                        m.next = "STORE"
                    with m.Else():
                        m.d.comb += ended_job.eq(1)
                        m.d.sync += ended.eq(1)
                        m.next = "DONE"
                with m.Elif(ended):         # the engine will not answer: stop waiting
                    m.d.sync += await_tx.eq(0)
                    m.next = "DONE"
            with m.State("STORE"):
                with m.If(self.mem_request(m, io.mem_tx, store=True, loc=tx_loc, addr=tx.addr,
                                           size=n, wrap=tx.wrap)):
                    m.d.sync += await_store.eq(1)
                    m.next = "WAIT_STORE"
            with m.State("WAIT_STORE"):
                with m.If(store_got):
                    m.d.sync += store_got.eq(0)
                    with m.If(store_err):
                        count(m, c.mem_errors)
                        m.next = "DONE"
                    with m.Elif(ended):
                        m.next = "DONE"
                    with m.Else():
                        m.next = "ADJUST"
            with m.State("ADJUST"):
                with m.If(self.app_request(m, app_tx, MsgType.TCP_TX_ADJUST_PTR, self.tcp_tx,
                                           flow=handle, ptr=tx.ptr + n)):
                    m.d.sync += [c.bytes.eq(c.bytes + n), remaining.eq(remaining - n)]
                    m.next = "NEXT"
            with m.State("CLOSE"):
                with m.If(self.app_request(m, app_tx, MsgType.TCP_CLOSE_REQ, self.tcp_tx,
                                           flow=handle)):
                    count(m, c.closed)
                    m.next = "DONE"
            with m.State("DONE"):
                pass

        # -- store acks (always taken) -----------------------------------------------------------
        m.d.comb += mem.data.ready.eq(1)
        with m.If(self.mem_ack(mem, STORE_MEM_ACK, await_store, tx.addr, n, tx.wrap)):
            m.d.sync += [await_store.eq(0), store_got.eq(1), store_err.eq(mem.meta.error)]
        with m.Elif(mem.valid):
            m.d.comb += drop_mem.eq(1)

        # -- engine messages (always taken) ------------------------------------------------------
        answer = (opening & (meta.peer_ip == self.peer_ip) & (meta.peer_port == self.peer_port)
                  & (meta.local_port == self.local_port))
        ours = got_rx & (meta.flow == handle)
        with m.If(a.valid):
            with m.Switch(a.type):
                with m.Case(MsgType.TCP_NEW_FLOW_NOTIF):
                    with m.If(answer & (meta.status != Status.OK)):
                        m.d.sync += [opening.eq(0), open_failed.eq(1),
                                     c.failed.eq(c.failed + 1)]
                    with m.Elif(answer & (meta.kind == BufferKind.RECEIVE) & ~got_rx):
                        m.d.sync += [handle.eq(meta.flow), got_rx.eq(1)]
                    with m.Elif(answer & (meta.kind == BufferKind.SEND) & ours):
                        m.d.sync += [opening.eq(0), got_tx.eq(1), tx_loc.x.eq(meta.mem_x),
                                     tx_loc.y.eq(meta.mem_y)]
                    with m.Else():
                        m.d.comb += drop_app.eq(1)
                with m.Case(MsgType.TCP_RX_MSG_RESP):
                    with m.If(ours & ~a.ok & ~ended):
                        m.d.comb += ended_in.eq(1)
                        m.d.sync += [ended.eq(1), opening.eq(0)]
                    with m.Else():
                        m.d.comb += drop_app.eq(1)
                with m.Case(MsgType.TCP_TX_MSG_RESP):
                    with m.If(await_tx & ~ended & (meta.flow == handle)):
                        m.d.sync += [await_tx.eq(0), tx_got.eq(1), tx.status.eq(meta.status),
                                     tx.ptr.eq(meta.ptr), tx.addr.eq(meta.addr),
                                     tx.wrap.eq(meta.size_log2)]
                    with m.Else():
                        m.d.comb += drop_app.eq(1)
                with m.Default():
                    m.d.comb += drop_app.eq(1)
        return m
