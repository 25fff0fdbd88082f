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
at one word per cycle. (The sequence is :class:`_Steps`, the connection as the engine reports
it :class:`_Connection`, the stream's words :class:`_Stream`.)
"""

import ipaddress
from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out, connect

from apiary.os.memory_tile import STORE_MEM_ACK
from apiary.stream.counters import count
from apiary.stream.layout import payload_signature, payload_words

from ..proto.messages import MsgType
from ..proto.tcp.app import BufferKind, Status
from .tcp_app import MEM_LOC, Requests, TcpAppTile, engine_message, int_in_range, mem_ack, mem_acks
from .tcp_steps import AckWait


__all__ = ["TcpSenderTile", "STREAM_MODULUS", "stream_bytes"]


#: Byte ``k`` of the stream is ``k % STREAM_MODULUS``.
STREAM_MODULUS = 251


def stream_bytes(length: int, start: int = 0) -> bytes:
    """Bytes ``start`` to ``start + length`` of the stream the tile sends."""
    return bytes((start + k) % STREAM_MODULUS for k in range(length))


def _stream_control(chunk: int, width: int) -> wiring.Signature:
    """Between :class:`_Steps` (the ``Out`` side) and :class:`_Stream`: ``start`` the next
    chunk of the stream, ``size`` bytes in ``words`` words, ``tail`` bytes in the last; ``n``,
    the size of the chunk started last."""
    nb = width // 8
    return wiring.Signature({"start": Out(1), "size": Out(range(chunk + 1)),
                             "words": Out(range(-(-chunk // nb) + 1)),
                             "tail": Out(range(nb + 1)), "n": In(range(chunk + 1))})


#: The room granted in the send ring: the answer's status, pointer, address and ring size.
_TX = data.StructLayout({"status": 4, "ptr": 32, "addr": 48, "wrap": 6})


def _connection_control() -> wiring.Signature:
    """Between :class:`_Steps` (the ``Out`` side) and :class:`_Connection`: pulses ``open`` (an
    open request taken), ``ask`` (a ``TCP_TX_MSG_REQ`` taken), ``take`` (its answer seen),
    ``fail`` (the answer refused room: the connection is over), ``stop`` (no answer will come);
    the connection's state: its ``handle``, ``ended``, ``open_failed``, ``got_tx`` (both
    notifications in: open), ``tx_got`` (the answer to ``ask`` is in ``tx``), ``tx_loc`` (its
    send ring's memory tile)."""
    return wiring.Signature({"open": Out(1), "ask": Out(1), "take": Out(1), "fail": Out(1),
                             "stop": Out(1), "handle": In(16), "ended": In(1),
                             "open_failed": In(1), "got_tx": In(1), "tx_got": In(1),
                             "tx": In(_TX), "tx_loc": In(MEM_LOC)})


#: What :class:`_Steps` counts, a pulse each (``sent``: ``bytes`` handed to the engine).
_EVENTS = ("opens", "opened", "closed", "mem_errors", "sent", "ended")


class _Stream(wiring.Component):
    """The stream's bytes, a word a cycle on ``o`` (byte ``k`` is ``k % 251``, counted from
    the first byte sent): ``ctl.start`` (:func:`_stream_control`) queues a chunk of
    ``ctl.size`` bytes (kept in ``ctl.n``), ``ctl.words`` words with ``ctl.tail`` bytes in the
    last, from the next cycle on. Pulse it only once the words before are out."""

    def __init__(self, chunk: int, width: int) -> None:
        self._chunk, self._width = chunk, width
        super().__init__({"ctl": In(_stream_control(chunk, width)),
                          "o": Out(payload_signature(width))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        base = Signal(range(STREAM_MODULUS))    # the next byte's value
        left = Signal(range(-(-self._chunk // nb) + 1))
        tail = Signal(range(nb + 1))

        def mod(value: Any) -> Any:
            return Mux(value >= STREAM_MODULUS, value - STREAM_MODULUS, value)[:8]

        out = self.o
        step = Mux(left == 1, tail, nb)
        m.d.comb += [
            out.valid.eq(left != 0),
            out.payload.data.eq(Cat(mod(base + j) for j in range(nb))),
            out.payload.nbytes.eq(step),
            out.payload.last.eq(left == 1),
        ]
        with m.If(out.valid & out.ready):
            m.d.sync += [left.eq(left - 1), base.eq(mod(base + step))]
        with m.If(self.ctl.start):
            m.d.sync += [self.ctl.n.eq(self.ctl.size), left.eq(self.ctl.words),
                         tail.eq(self.ctl.tail)]
        return m


class _Connection(wiring.Component):
    """The sender's connection as the engine's messages (``app``, always taken) report it,
    and as :class:`_Steps` drives it (``ctl``: :func:`_connection_control`). While an open is
    unanswered, a ``TCP_NEW_FLOW_NOTIF`` for ``peer`` (IPv4 address, port, local port) is its
    answer: another status than OK fails it (``failed`` pulses; ``open_failed``), RECEIVE
    gives the ``handle``, then SEND the send ring (``got_tx``: open). A ``TCP_RX_MSG_RESP``
    ending the flow sets ``ended`` (``ended_in`` pulses); the ``TCP_TX_MSG_RESP`` awaited
    (after ``ctl.ask``, not ended) is kept in ``tx`` (``tx_got``). Anything else pulses
    ``drop``. Registers: each message takes effect at the next clock edge."""

    def __init__(self, slot_bits: int, peer: tuple[int, int, int]) -> None:
        self._peer = peer
        super().__init__({"app": In(engine_message(slot_bits)), "ctl": In(_connection_control()),
                          "failed": Out(1), "ended_in": Out(1), "drop": Out(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        ctl, a, meta = self.ctl, self.app, self.app.meta
        peer_ip, peer_port, local_port = self._peer
        got_rx, opening, await_tx = Signal(), Signal(), Signal()
        with m.If(ctl.open):
            m.d.sync += [opening.eq(1), ctl.open_failed.eq(0), got_rx.eq(0), ctl.got_tx.eq(0)]
        with m.If(ctl.ask):
            m.d.sync += await_tx.eq(1)
        with m.If(ctl.take):
            m.d.sync += ctl.tx_got.eq(0)
        with m.If(ctl.fail):
            m.d.sync += ctl.ended.eq(1)
        with m.If(ctl.stop):
            m.d.sync += await_tx.eq(0)
        answer = (opening & (meta.peer_ip == peer_ip) & (meta.peer_port == peer_port)
                  & (meta.local_port == local_port))
        ours = got_rx & (meta.flow == ctl.handle)
        with m.If(a.valid):
            with m.Switch(a.type):
                with m.Case(MsgType.TCP_NEW_FLOW_NOTIF):
                    with m.If(answer & (meta.status != Status.OK)):
                        m.d.comb += self.failed.eq(1)
                        m.d.sync += [opening.eq(0), ctl.open_failed.eq(1)]
                    with m.Elif(answer & (meta.kind == BufferKind.RECEIVE) & ~got_rx):
                        m.d.sync += [ctl.handle.eq(meta.flow), got_rx.eq(1)]
                    with m.Elif(answer & (meta.kind == BufferKind.SEND) & ours):
                        m.d.sync += [opening.eq(0), ctl.got_tx.eq(1), ctl.tx_loc.x.eq(meta.mem_x),
                                     ctl.tx_loc.y.eq(meta.mem_y)]
                    with m.Else():
                        m.d.comb += self.drop.eq(1)
                with m.Case(MsgType.TCP_RX_MSG_RESP):
                    with m.If(ours & ~a.ok & ~ctl.ended):
                        m.d.comb += self.ended_in.eq(1)
                        m.d.sync += [ctl.ended.eq(1), opening.eq(0)]
                    with m.Else():
                        m.d.comb += self.drop.eq(1)
                with m.Case(MsgType.TCP_TX_MSG_RESP):
                    with m.If(await_tx & ~ctl.ended & (meta.flow == ctl.handle)):
                        m.d.sync += [await_tx.eq(0), ctl.tx_got.eq(1),
                                     ctl.tx.status.eq(meta.status), ctl.tx.ptr.eq(meta.ptr),
                                     ctl.tx.addr.eq(meta.addr), ctl.tx.wrap.eq(meta.size_log2)]
                    with m.Else():
                        m.d.comb += self.drop.eq(1)
                with m.Default():
                    m.d.comb += self.drop.eq(1)
        return m


class _Steps(wiring.Component):
    """The sender's sequence (see the module docstring): ``start`` cycles after reset the open
    (``TCP_OPEN_REQ`` on ``app_tx`` for ``peer``), again ``retry`` cycles after a failed one,
    ``attempts`` opens at most; once open, ``length`` bytes a chunk (``chunk`` at most) at a
    time: room in the send ring, the store (``STORE_MEM`` on ``mem_tx``, its bytes from
    :class:`_Stream` through ``stream``, its ack found in ``mem``) and the pointer moved; then
    ``TCP_CLOSE_REQ``. The connection is kept by :class:`_Connection` (``conn``). ``events``
    pulse what the tile counts (:data:`_EVENTS`; ``bytes``, the chunk's, for ``sent``);
    ``drop`` a memory ack that is not the one awaited."""

    def __init__(self, requests: Requests, *, width: int, chunk: int,
                 peer: tuple[int, int, int], length: int, start: int, retry: int,
                 attempts: int) -> None:
        self._requests, self._width, self._chunk, self._peer = requests, width, chunk, peer
        self._length, self._start, self._retry, self._attempts = length, start, retry, attempts
        super().__init__({
            "app_tx": Out(requests.app_signature()), "mem_tx": Out(requests.mem_signature()),
            "conn": Out(_connection_control()), "stream": Out(_stream_control(chunk, width)),
            "mem": In(mem_acks()), "drop": Out(1),
            "events": Out(data.StructLayout({e: 1 for e in _EVENTS})),
            "bytes": Out(range(chunk + 1)),
        })
        self.timer = Signal(32)

    def _step(self, length: Any) -> Any:
        return Mux(length > self._chunk, self._chunk, length)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.store = store = AckWait()
        tx = self.conn.tx
        m.d.comb += [store.match.eq(mem_ack(self.mem, STORE_MEM_ACK, store.wait, tx.addr,
                                            self.stream.n, tx.wrap)),
                     store.error.eq(self.mem.meta.error), self.drop.eq(self.mem.valid)]
        with m.If(store.match):
            m.d.comb += self.drop.eq(0)
        with m.FSM(name="sender"):
            self._open_states(m)
            self._send_states(m, store)
            with m.State("DONE"):
                pass
        return m

    def _open_states(self, m: Module) -> None:
        """From reset to the connection open (or given up)."""
        conn, ev, timer, r = self.conn, self.events, self.timer, self._requests
        tries = Signal(range(self._attempts + 1))
        with m.State("START"):
            m.d.sync += timer.eq(timer + 1)
            with m.If(timer >= self._start):
                m.next = "OPEN"
        with m.State("OPEN"):
            peer_ip, peer_port, local_port = self._peer
            with m.If(r.engine(m, self.app_tx, MsgType.TCP_OPEN_REQ, peer_ip=peer_ip,
                               peer_port=peer_port, local_port=local_port)):
                m.d.comb += [ev.opens.eq(1), conn.open.eq(1)]
                m.d.sync += tries.eq(tries + 1)
                m.next = "WAIT_OPEN"
        with m.State("WAIT_OPEN"):
            with m.If(conn.ended):           # reset between its two notifications
                m.next = "DONE"
            with m.Elif(conn.open_failed):
                m.d.sync += timer.eq(0)
                with m.If(tries == self._attempts):
                    m.next = "DONE"
                with m.Else():
                    m.next = "RETRY"
            with m.Elif(conn.got_tx):
                m.d.comb += ev.opened.eq(1)
                m.next = "NEXT"
        with m.State("RETRY"):
            m.d.sync += timer.eq(timer + 1)
            with m.If(timer >= self._retry):
                m.next = "OPEN"

    def _send_states(self, m: Module, store: AckWait) -> None:
        """From the connection open to its close."""
        conn, ev, n, r = self.conn, self.events, self.stream.n, self._requests
        tx, handle, ended = conn.tx, conn.handle, conn.ended
        m.d.comb += self.bytes.eq(n)
        remaining = Signal(32, init=self._length)
        with m.State("NEXT"):
            words, last_bytes = payload_words(self._step(remaining), self._width)
            m.d.comb += [self.stream.start.eq(1), self.stream.size.eq(self._step(remaining)),
                         self.stream.words.eq(words), self.stream.tail.eq(last_bytes)]
            with m.If(ended):
                m.next = "DONE"
            with m.Elif(remaining == 0):
                m.next = "CLOSE"
            with m.Else():
                m.next = "TX_REQ"
        with m.State("TX_REQ"):
            with m.If(r.engine(m, self.app_tx, MsgType.TCP_TX_MSG_REQ, flow=handle, length=n)):
                m.d.comb += conn.ask.eq(1)
                m.next = "WAIT_TX"
        with m.State("WAIT_TX"):
            with m.If(conn.tx_got):
                m.d.comb += conn.take.eq(1)
                with m.If(ended):
                    m.next = "DONE"
                with m.Elif(tx.status == Status.OK):
                    m.next = "STORE"
                with m.Else():
                    m.d.comb += [ev.ended.eq(1), conn.fail.eq(1)]
                    m.next = "DONE"
            with m.Elif(ended):         # the engine will not answer: stop waiting
                m.d.comb += conn.stop.eq(1)
                m.next = "DONE"
        with m.State("STORE"):
            with m.If(r.mem(m, self.mem_tx, store=True, loc=conn.tx_loc, addr=tx.addr, size=n,
                            wrap=tx.wrap)):
                m.d.comb += store.issue.eq(1)
                m.next = "WAIT_STORE"
        with m.State("WAIT_STORE"):
            with m.If(store.got):
                m.d.comb += store.clear.eq(1)
                with m.If(store.err):
                    m.d.comb += ev.mem_errors.eq(1)
                    m.next = "DONE"
                with m.Elif(ended):
                    m.next = "DONE"
                with m.Else():
                    m.next = "ADJUST"
        with m.State("ADJUST"):
            with m.If(r.engine(m, self.app_tx, MsgType.TCP_TX_ADJUST_PTR, flow=handle,
                               ptr=tx.ptr + n)):
                m.d.comb += ev.sent.eq(1)
                m.d.sync += remaining.eq(remaining - n)
                m.next = "NEXT"
        with m.State("CLOSE"):
            with m.If(r.engine(m, self.app_tx, MsgType.TCP_CLOSE_REQ, flow=handle)):
                m.d.comb += ev.closed.eq(1)
                m.next = "DONE"


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
        c = self.counters
        io = self.ports(m)
        app_tx, = io.app_tx
        peer = (self.peer_ip, self.peer_port, self.local_port)
        m.submodules.steps = steps = _Steps(
            io.requests, width=self.env.width, chunk=self.chunk, peer=peer, length=self.length,
            start=self.start, retry=self.retry, attempts=self.attempts)
        m.submodules.connection = connection = _Connection(self.slot_bits, peer)
        m.submodules.stream = stream = _Stream(self.chunk, self.env.width)
        connect(m, steps=steps.app_tx, sender=app_tx.i_hdr)
        connect(m, steps=steps.mem_tx, sender=io.mem_tx.i_hdr)
        connect(m, steps=steps.conn, connection=connection.ctl)
        connect(m, steps=steps.stream, stream=stream.ctl)
        connect(m, stream=stream.o, sender=io.mem_tx.i_data)
        connect(m, receiver=io.app, connection=connection.app)
        connect(m, receiver=io.mem, steps=steps.mem)
        m.d.comb += io.mem.data.ready.eq(1)
        self.count_dropped(m, io, connection.drop, steps.drop)
        count(m, c.ended, connection.ended_in | steps.events.ended)
        with m.If(steps.events.sent):
            count(m, c.bytes, steps.bytes)
        self.count_events(m, failed=connection.failed,
                          **{name: getattr(steps.events, name) for name in _EVENTS[:-2]})
        return m
