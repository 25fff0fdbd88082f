"""TCP sink: read every connection's bytes and throw them away, counting them; close each
connection once its peer has closed (what an iperf server does).

An application of the TCP engine (:mod:`beehive.proto.tcp`) that serves the connections the
engine announces (a passive open: the RX tile routes the local port to it, as for
:class:`~beehive.apps.tcp_echo.TcpEchoTile`), built on
:class:`~beehive.apps.tcp_app.TcpAppTile` (routes, sub-ports, framing). Messages, all with
:data:`~beehive.proto.tcp.app.APP_META` or ``MEM_META`` as metadata:

==========================  ====================  =========================================
in (``dst_fbits``)          from                  what the tile does
==========================  ====================  =========================================
``TCP_NEW_FLOW_NOTIF``      RX tile               kind RECEIVE, status OK: a new connection
(LOCAL0)                                          (``connections``); remember its receive
                                                  ring's memory tile, ask for data
                                                  (``TCP_RX_MSG_REQ``, length 1). Kind SEND:
                                                  ignored (the send ring is never written)
``TCP_RX_MSG_RESP``         RX tile               OK or EOF: bytes to read (kept per flow,
(LOCAL0)                                          the flow queued for a job; or taken at
                                                  once by the job serving the flow); RESET,
                                                  TIMEOUT, CLOSED: the connection is over
                                                  (``ended``)
``LOAD_MEM_ACK`` (LOCAL1)   receive ring's memory a job's bytes: counted (``bytes``) and
                                                  thrown away
==========================  ====================  =========================================

Out: engine requests (``src_fbits`` LOCAL0) to route ``"tcp_rx"`` (the RX tile's LOCAL2:
``TCP_RX_MSG_REQ``, ``TCP_RX_ADJUST_PTR``) or ``"tcp_tx"`` (the TX tile's LOCAL0:
``TCP_CLOSE_REQ``); ``LOAD_MEM`` (``src_fbits`` LOCAL1) to the memory tile the flow's
notification named (LOCAL0). Per connection, ``issued`` being the stream pointer up to which
loads have been sent::

    NEW_FLOW_NOTIF(RECEIVE) ─▶ RX_MSG_REQ(flow, 1)
    RX_MSG_RESP(OK or EOF, ptr p, addr a, size_log2 k, length L > 0)
        ─▶ LOAD_MEM(ring_add(a, q - p, k), n, wrap k), q = max(issued, p),
           n = min(chunk, p + L - q), issued = q + n; again while fewer than depth loads
           are out and bytes reported remain
    LOAD_MEM_ACK of the oldest load out, once its words are in (n bytes: counted, thrown
    away; the acks may come in any order, an adjust waits for the loads before it)
        ─▶ RX_ADJUST_PTR(flow, end of that load), then RX_MSG_REQ(flow, 1) if none is out
    RX_MSG_RESP(EOF, length 0) ─▶ CLOSE_REQ(flow), the flow forgotten

so up to ``depth`` loads of a flow are out at once, and the pointer moves behind them a load
at a time. The engine answers an ``RX_MSG_REQ`` at once while a byte is readable from the
pointer (the bytes already being loaded count), else when data arrives; its answer reports
the bytes from its pointer on, of which those already loaded are not loaded again (a response
that reports no more than ``issued`` sends nothing). At most one ``RX_MSG_REQ`` is out for a
flow: one asked for while one is out waits for its answer, and goes after it if an adjust
came since. Asking for one byte only, the request can be answered whatever the pointer's
later moves. A ``TCP_RX_MSG_RESP`` with RESET, TIMEOUT or CLOSED ends the flow (``ended``):
its loads out finish (each ack awaited, its words taken and counted: no memory request is
ever abandoned), then nothing more is sent for it. A ``LOAD_MEM_ACK`` with ``error`` set gives
the flow up (``mem_errors``: forgotten, its other loads finished as for an ended flow, nothing
more sent for it, not closed). Messages that match nothing are dropped (``dropped``): another
memory ack (its words thrown away), a ``TCP_TX_MSG_RESP``, a response for no current
connection.

Structure: the input is never held (``streaming = False``); each message is handled the cycle
it is offered. The connections are kept by a :class:`~beehive.apps.tcp_app.FlowTable` (per
flow slot: its generation, its receive ring's memory tile, its latest response; FIFOs of new
connections and of flows with a response, each flow in each at most once, served in turn).
Up to ``jobs`` flows are served at once, each by a :class:`_Reader` (a
:class:`~beehive.apps.tcp_steps.FlowServer`) on a flow slot no other job holds; its loads
out are kept by a :class:`_Loads`. A job holds its flow while the flow has loads out, an
adjust to send, or a request out that was asked before its latest adjust; while it holds it,
it takes the flow's responses itself (the table does not see them). Once all its loads are
in and adjusted and its request is out (asked after the last adjust), it leaves the flow
(the answer then comes through the table, to any job). A job leaves a flow after ``depth``
loads, too, if another flow waits for a job (it sends no more loads, lets those out finish,
asks and leaves), so that one busy flow does not keep a job from the others. A job whose
connection ended under its loads keeps the slot until their acks are in, and a job for the
slot's new connection loads only after it. Their requests share the tile's two senders
(:class:`_Merge`: round-robin, a request once offered stays on offer until taken); memory
acks are matched to the load they answer by ``addr``, ``size`` and ``wrap`` (each job's flow
slot has its own ring, and a flow's loads out are at distinct places in it), in any order,
and every ack word is taken the cycle it comes (``mem.data.ready`` is always high).

Throughput: a job keeps up to ``depth`` loads (``chunk`` bytes each, by default 4,096) of one
flow out, so that the memory's words come back to back while the round trips of responses,
loads, acks, adjusts and requests overlap them; with a ring larger than ``depth`` loads the
responses report more than is out, and each load done is followed by the next at once. The
tile's own cycles: from a ``TCP_RX_MSG_RESP`` to its first ``LOAD_MEM`` offered, 3 for a flow
no job holds (the flow queued, its response read), 1 for the flow a job holds; from a
``LOAD_MEM_ACK``'s last word to its ``TCP_RX_ADJUST_PTR`` offered, 1, and the
``TCP_RX_MSG_REQ`` the cycle after it is taken. Measured with the tests' model
(``tests/apps/tcp_model.py``) answering at once, one connection whose 64 KiB ring (the
design's at 512 bits) is always full, ``depth`` 4: at 512 bits 65.4 cycles a load of 64
words, with the memory's acks at once, 20 or 100 cycles late (the ack's header flit and the
odd response on the input besides the words: 98 % of the input); at 64 bits 518.4 cycles a
load of 512 words. A load at a time (``depth`` 1) takes 68 cycles at 512 bits with the acks
at once and 87 with them 20 cycles late. With a ring of just ``depth`` loads (16 KiB) a
response that waits behind acks on the input holds up the next load: 66.2, 69.0 and 81
cycles a load with the acks at once, 20 and 100 cycles late. Several busy flows are served
by several jobs (``jobs``) at once: four with 4 KiB rings (a load out per flow, whatever
``depth``) and the acks 100 cycles late are read in 2,761 cycles by one job, 1,446 by two and
1,373 by four. One job serving two busy flows with 64 KiB rings in turn reads them at 72
cycles a load (a flow's first loads wait for the last acks of the one before).
"""

from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.os.memory_tile import LOAD_MEM_ACK
from apiary.stream.counters import count
from apiary.stream.layout import payload_signature
from apiary.tile import TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import Status
from ..proto.tcp.config import TcpConfig, config_or_default
from .tcp_app import (MEM_LOC, FlowTable, Requests, TcpAppTile, int_in_range, mem_ack, mem_acks,
                      read_port)
from .tcp_steps import FlowServer, HeldOffer, ring_add


__all__ = ["TcpSinkTile", "MAX_LOAD", "MAX_JOBS", "MAX_DEPTH", "DEFAULT_CHUNK"]


#: The most bytes one ``LOAD_MEM`` may ask for: what one message carries (4 MiB - 1).
MAX_LOAD = (1 << 22) - 1
#: The most jobs a sink may have.
MAX_JOBS = 16
#: The most loads a job may have out for its flow.
MAX_DEPTH = 8
#: Bytes a load asks for unless told (at most the receive ring).
DEFAULT_CHUNK = 4096

#: What a :class:`_Reader` reports, a pulse each: ``loads`` (a ``LOAD_MEM`` taken),
#: ``closed`` (a ``TCP_CLOSE_REQ`` taken), ``mem_errors`` (an ack of its with ``error`` set),
#: ``read`` (a word of one of its acks, ``nbytes`` bytes).
_EVENTS = ("loads", "closed", "mem_errors", "read")


class _Merge(wiring.Component):
    """The requests of ``n`` producers (``i[k]``, each held on offer until taken) onto one
    sender's descriptors (``o``): the first producer offering after the one served last
    (round-robin), kept from the cycle its request is on offer until it is taken, so that an
    offer on ``o`` is never changed or withdrawn. Combinational (0 cycles); one register for
    the producer served last, one for the producer kept."""

    def __init__(self, layout: Any, n: int) -> None:
        self._n = n
        super().__init__({"i": In(stream.Signature(layout)).array(n),
                          "o": Out(stream.Signature(layout))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n, o = self._n, self.o
        if n == 1:
            connect(m, producer=flipped(self.i[0]), sender=flipped(o))
            return m
        last, kept, keep = Signal(range(n)), Signal(range(n)), Signal()
        pick = Signal(range(n))
        with m.Switch(last):
            for after in range(n):
                with m.Case(after):
                    for k in reversed([(after + 1 + j) % n for j in range(n)]):
                        with m.If(self.i[k].valid):     # the first in turn wins
                            m.d.comb += pick.eq(k)
        chosen = Mux(keep, kept, pick)
        for k in range(n):
            with m.If(chosen == k):
                m.d.comb += [o.valid.eq(self.i[k].valid), o.payload.eq(self.i[k].payload),
                             self.i[k].ready.eq(o.ready)]
        with m.If(o.valid & o.ready):
            m.d.sync += [keep.eq(0), last.eq(chosen)]
        with m.Elif(o.valid):
            m.d.sync += [keep.eq(1), kept.eq(chosen)]
        return m


class _Loads(wiring.Component):
    """The loads one job has out, oldest first: up to ``depth``, each ``LOAD_MEM`` of ``size``
    bytes (a ``size_shape``) at ``addr`` in a ring of ``2**wrap`` bytes, ending at the stream
    pointer ``end``.

    ``push.en`` (a one-cycle pulse, only while ``count < depth``) adds one: the load just
    taken by the sender. Every memory ack on ``mem`` is compared with each load whose ack is
    awaited (combinationally: ``matched`` the same cycle): its type, ``addr``, ``size``,
    ``wrap`` and payload (``size`` bytes, none with ``error``). The acks may come in any order;
    an ack matches at most one load (the loads out are all the job's flow's, at distinct
    places in its ring).
    The words of a matched ack, from the cycle after its header to its last, pulse ``read``
    with their ``nbytes`` (the caller takes every word of ``words``: its ``ready`` is not
    driven); an ack with ``error`` pulses ``error`` and has no words. A load is done from the
    cycle after its last word (or its ack with ``error``); the oldest load, once done, is on
    ``head`` (``valid``, its ``end``) until ``pop`` (one cycle, only while ``head.valid``)
    removes it. ``count``: loads pushed and not popped.

    Throughput: a push, a matched ack, a word and a pop each cycle. Cost: per load 48 + 32
    bits of registers and its size, two state bits, and an ack comparator.
    """

    def __init__(self, depth: int, size_shape: Any, width: int) -> None:
        self._depth, self._size = depth, size_shape
        super().__init__({
            "push": In(data.StructLayout({"en": 1, "addr": 48, "size": size_shape, "end": 32})),
            "wrap": In(6), "mem": In(mem_acks()), "words": In(payload_signature(width)),
            "pop": In(1),
            "matched": Out(1), "error": Out(1), "read": Out(1),
            "nbytes": Out(unsigned((width // 8).bit_length())),
            "count": Out(range(depth + 1)),
            "head": Out(data.StructLayout({"valid": 1, "end": 32})),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        d, push, words = self._depth, self.push, self.words
        addr = [Signal(48, name=f"addr{i}") for i in range(d)]
        size = [Signal(self._size, name=f"size{i}") for i in range(d)]
        end = [Signal(32, name=f"end{i}") for i in range(d)]
        out = [Signal(name=f"out{i}") for i in range(d)]        # its ack awaited
        done = [Signal(name=f"done{i}") for i in range(d)]      # its words all in
        wp, rp = Signal(range(d)), Signal(range(d))             # where the next goes, oldest
        reading, ridx = Signal(), Signal(range(d))              # an ack's words coming, whose

        def inc(p: Signal) -> Any:
            return Mux(p == d - 1, 0, p + 1)

        with m.If(push.en):
            m.d.sync += wp.eq(inc(wp))
            for i in range(d):
                with m.If(wp == i):
                    m.d.sync += [addr[i].eq(push.addr), size[i].eq(push.size),
                                 end[i].eq(push.end), out[i].eq(1), done[i].eq(0)]
        with m.If(reading & words.valid):
            m.d.comb += [self.read.eq(1), self.nbytes.eq(words.payload.nbytes)]
            with m.If(words.payload.last):
                m.d.sync += reading.eq(0)
                for i in range(d):
                    with m.If(ridx == i):
                        m.d.sync += done[i].eq(1)
        for i in range(d):          # after the words: an ack's header wins over a last word
            hit = Signal(name=f"hit{i}")
            m.d.comb += hit.eq(mem_ack(self.mem, LOAD_MEM_ACK, out[i], addr[i], size[i],
                                       self.wrap))
            with m.If(hit):
                m.d.comb += self.matched.eq(1)
                m.d.sync += out[i].eq(0)
                with m.If(self.mem.meta.error):
                    m.d.comb += self.error.eq(1)
                    m.d.sync += done[i].eq(1)
                with m.Else():
                    m.d.sync += [reading.eq(1), ridx.eq(i)]
        for i in range(d):
            with m.If(rp == i):
                m.d.comb += [self.head.valid.eq(done[i]), self.head.end.eq(end[i])]
                with m.If(self.pop):
                    m.d.sync += done[i].eq(0)
        with m.If(self.pop):
            m.d.sync += rp.eq(inc(rp))
        m.d.sync += self.count.eq(self.count + push.en - self.pop)
        return m


class _Reader(FlowServer):
    """One job of the sink: the tile's flows, one at a time (see the module docstring for the
    sequence), as a :class:`~beehive.apps.tcp_steps.FlowServer` (``need`` 1 byte, ``ask`` 1
    byte) whose ``CHECK`` leads a response with bytes to ``STREAM`` (or first ``SLOT``, while
    another job holds the slot: ``other``), the flow's ring memory tile read from ``rx_loc``.

    In ``STREAM`` (``busy``) the job holds the flow: ``issued`` (where the next load starts,
    at ``at`` in the ring), ``end`` (the end of the bytes last reported), its loads out
    (:class:`_Loads`) and its request (``asking``: one is out; ``owe``: an adjust was sent
    since the last one). Each cycle, as far as the two senders take them (each offer held
    until taken, :class:`~beehive.apps.tcp_steps.HeldOffer`):

    * a ``LOAD_MEM`` (on ``mem_tx``) of the next ``min(chunk, end - issued)`` bytes while
      fewer than ``depth`` are out, unless the job yields (it has sent ``depth`` loads since
      it took the flow and another flow ``waiting`` for a job);
    * on ``app_tx``, the oldest load done (all its words in): ``TCP_RX_ADJUST_PTR`` to its end;
      else a ``TCP_RX_MSG_REQ`` for 1 byte, if none is out and an adjust came since the last
      (or nothing is out and nothing is left to load);
    * a ``TCP_RX_MSG_RESP`` of the flow's (OK or EOF, on ``app``) is taken (``mine``, the
      cycle it comes: the table must not see it): ``end`` moves on to its ``ptr + length``
      (never back: what was reported stays readable until adjusted over).

    The job leaves ``STREAM`` with nothing on offer and no load out: for ``CLOSE`` on an EOF
    with no bytes; for ``IDLE`` with a request out asked after its last adjust (its answer
    then comes through the table) once nothing is left to load or it yields; for ``IDLE`` once
    the connection ended (``dead``, or a kill of ``slot`` this cycle: nothing more is offered,
    the loads out finish unadjusted). An ack with ``error`` gives the flow up (``forget``,
    unless it ended; then as for an ended flow). ``serving``: the job holds ``slot``.
    ``events`` pulse what the tile counts (:data:`_EVENTS`).
    """

    fsm_name = "reader"

    def __init__(self, requests: Requests, *, flows: int, slot_bits: int, chunk: int,
                 depth: int, width: int) -> None:
        self._chunk, self._depth, self._width = chunk, depth, width
        super().__init__(requests, flows=flows, slot_bits=slot_bits, need=1, ask=1, members={
            "rx_loc": In(read_port(slot_bits, MEM_LOC)),
            "mem_tx": Out(requests.mem_signature()),
            "mem": In(mem_acks()), "data": In(payload_signature(width)),
            "matched": Out(1), "other": In(1), "waiting": In(1), "serving": Out(1),
            "mine": Out(1),
            "events": Out(data.StructLayout({e: 1 for e in _EVENTS})),
            "nbytes": Out(unsigned((width // 8).bit_length())),
        })
        self._size = unsigned(chunk.bit_length())
        self.issued = Signal(32)                # loads are sent up to this stream pointer
        self.at = Signal(48)                    # where byte `issued` is
        self.end = Signal(32)                   # the end of the bytes last reported
        self.loc = Signal(MEM_LOC)              # the ring's memory tile
        self.asking = Signal()                  # a TCP_RX_MSG_REQ is out
        self.owe = Signal()                     # an adjust was sent since it was asked
        self.eof0 = Signal()                    # the last response: EOF, no bytes
        self.turn = Signal(range(depth + 1))    # loads sent since the flow was taken (to depth)
        self._ending = Signal()                 # the connection served ends this cycle
        self._streaming = Signal()              # in STREAM

    def whole(self, m: Module, cx: Any) -> None:
        m.d.sync += [self.issued.eq(cx.ptr), self.at.eq(cx.addr),
                     self.end.eq(cx.ptr + cx.length), self.loc.eq(self.rx_loc.data),
                     self.asking.eq(0), self.owe.eq(0), self.eof0.eq(0), self.turn.eq(0)]
        with m.If(self._ending):
            m.next = "IDLE"
        with m.Elif(self.other):
            m.next = "SLOT"
        with m.Else():
            m.next = "STREAM"

    def before(self, m: Module) -> None:
        a, ev = self.app, self.events
        m.submodules.loads = loads = self._loads = _Loads(self._depth, self._size, self._width)
        m.submodules.load_offer = self._load_offer = HeldOffer({"addr": 48, "size": self._size})
        m.submodules.app_offer = self._app_offer = HeldOffer({"req": 1, "ptr": 32})
        connect(m, flipped(self.mem), loads.mem)
        m.d.comb += [self.rx_loc.addr.eq(self.slot),
                     self._ending.eq(self.dead | (self.kill & (a.slot == self.slot))),
                     loads.wrap.eq(self.rx.size_log2),
                     loads.words.valid.eq(self.data.valid),
                     loads.words.payload.eq(self.data.payload),
                     self.matched.eq(loads.matched), ev.read.eq(loads.read),
                     self.nbytes.eq(loads.nbytes)]
        with m.If(loads.error):
            m.d.comb += [ev.mem_errors.eq(1), self.forget.eq(~self.dead)]
            m.d.sync += self.dead.eq(1)
        m.d.comb += self.mine.eq(self._streaming & ~self.dead & a.valid
                                 & (a.type == MsgType.TCP_RX_MSG_RESP) & a.ok
                                 & (a.meta.flow == self.handle))
        reported = Signal(32)
        m.d.comb += reported.eq(a.meta.ptr + a.meta.length)
        with m.If(self.mine):
            m.d.sync += [self.asking.eq(0),
                         self.eof0.eq((a.meta.status == Status.EOF) & (a.meta.length == 0))]
            with m.If((reported - self.end)[:32].as_signed() > 0):  # what was reported stays
                m.d.sync += self.end.eq(reported)

    def states(self, m: Module) -> None:
        with m.State("SLOT"):               # another job holds the slot (an ended connection's)
            m.d.comb += self.busy.eq(1)
            with m.If(self._ending):
                m.next = "IDLE"
            with m.Elif(~self.other):
                m.next = "STREAM"
        with m.State("STREAM"):
            m.d.comb += [self.busy.eq(1), self._streaming.eq(1)]
            self._stream(m)

    def _stream(self, m: Module) -> None:
        """The state ``STREAM`` (see the class docstring)."""
        loads, lo, ao = self._loads, self._load_offer, self._app_offer
        chunk, depth, ending = self._chunk, self._depth, self._ending
        wrap = self.rx.size_log2
        left, more, yielding, stalled = Signal(32), Signal(), Signal(), Signal()
        m.d.comb += [left.eq(self.end - self.issued), more.eq((left != 0) & ~left[31]),
                     yielding.eq((self.turn == depth) & self.waiting),
                     stalled.eq((loads.count == 0) & ~lo.hold & (~more | yielding))]
        # The next load.
        m.d.comb += [lo.want.eq(~ending & more & (loads.count < depth) & ~yielding),
                     lo.choice.addr.eq(self.at),
                     lo.choice.size.eq(Mux(left > chunk, chunk, left))]
        with m.If(lo.offer):
            m.d.comb += lo.ready.eq(self._requests.mem(
                m, self.mem_tx, store=False, loc=self.loc, addr=lo.chosen.addr,
                size=lo.chosen.size, wrap=wrap))
        with m.If(lo.taken):
            n = lo.chosen.size
            m.d.comb += [loads.push.en.eq(1), loads.push.addr.eq(lo.chosen.addr),
                         loads.push.size.eq(n), loads.push.end.eq(self.issued + n),
                         self.events.loads.eq(1)]
            m.d.sync += [self.issued.eq(self.issued + n), self.at.eq(ring_add(lo.chosen.addr,
                                                                              n, wrap)),
                         self.turn.eq(Mux(self.turn == depth, depth, self.turn + 1))]
        # The oldest load's adjust, else a request.
        head = loads.head
        m.d.comb += [ao.want.eq(~ending & (head.valid | (~self.asking & ~self.eof0
                                                         & (self.owe | stalled)))),
                     ao.choice.req.eq(~head.valid), ao.choice.ptr.eq(head.end)]
        with m.If(ao.offer):
            with m.If(ao.chosen.req):
                m.d.comb += ao.ready.eq(self.request(m, MsgType.TCP_RX_MSG_REQ, length=1))
            with m.Else():
                m.d.comb += ao.ready.eq(self.request(m, MsgType.TCP_RX_ADJUST_PTR,
                                                     ptr=ao.chosen.ptr))
        with m.If(ao.taken):
            with m.If(ao.chosen.req):
                m.d.sync += [self.asking.eq(1), self.owe.eq(0)]
            with m.Else():
                m.d.comb += loads.pop.eq(1)
                m.d.sync += self.owe.eq(1)
        with m.If(ending & head.valid & ~ao.offer):
            m.d.comb += loads.pop.eq(1)         # an ended flow's loads: no adjust
        # Leaving the flow.
        quiet = (loads.count == 0) & ~lo.offer & ~ao.offer
        with m.If(ending):
            with m.If((loads.count == 0) & ~lo.hold & ~ao.hold):
                m.next = "IDLE"
        with m.Elif(quiet & self.eof0 & ~self.mine):
            m.next = "CLOSE"
        with m.Elif(quiet & self.asking & ~self.owe & (~more | yielding) & ~self.mine):
            m.next = "IDLE"

    def after(self, m: Module) -> None:
        tx = self.app_tx
        m.d.comb += [self.serving.eq(self.busy),
                     self.events.closed.eq(tx.valid & tx.ready
                                           & (tx.payload.msg_type == MsgType.TCP_CLOSE_REQ))]


class TcpSinkTile(TcpAppTile):
    """Read every connection the engine announces to its end, count its bytes and throw them
    away, close it after its peer does; serve up to ``jobs`` connections at once, with up to
    ``depth`` loads of each out at once (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` (fbits LOCAL0); ``"rx_mem"`` may
        be declared for the deadlock check. Standalone (no routes) both are tile (0, 0).
    config : TcpConfig
        The engine's (``flows`` sizes the per-flow state, ``rx_ring`` bounds a load).
    chunk : int or None
        Largest number of bytes read per load (one ``LOAD_MEM``): 1 to ``min(rx_ring,
        MAX_LOAD)``; default :data:`DEFAULT_CHUNK` (4,096), at most the receive ring.
    depth : int
        Loads a job may have out for its flow at once: 1 to :data:`MAX_DEPTH` (default 4).
    jobs : int
        Flows served at once: 1 to :data:`MAX_JOBS` (default 1: one flow at a time, in turn).

    Counters: ``connections``, ``bytes`` (48 bits), ``loads``, ``closed``, ``ended``,
    ``mem_errors``, ``dropped``.

    Cost: what :class:`~beehive.apps.tcp_app.FlowTable` keeps per flow (its generation, its
    rings' memory tiles, its latest response, in memories; two FIFOs of ``flows`` slots), with
    a read port of the generations, responses and receive rings' memory tiles per job; per
    job about 360 bits of registers (the response served, the flow's pointers, its offers)
    and per load it may have out about 100 (:class:`_Loads`) and an ack comparator.

    Raises
    ------
    ValueError
        If ``chunk``, ``depth`` or ``jobs`` is out of range, or a route is missing.
    """

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 chunk: int | None = None, depth: int = 4, jobs: int = 1) -> None:
        config = config_or_default(config)
        limit = min(config.rx_ring, MAX_LOAD)
        chunk = int_in_range(min(DEFAULT_CHUNK, limit) if chunk is None else chunk,
                             "chunk (bytes per load, up to the receive ring and what one "
                             "message carries)", 1, limit)
        self.depth = int_in_range(depth, "depth (loads out per flow)", 1, MAX_DEPTH)
        self.jobs = int_in_range(jobs, "jobs", 1, MAX_JOBS)
        super().__init__(env, config=config, counters={
            "connections": "connections announced (receive-buffer notifications)",
            "bytes": (48, "bytes read from the receive rings (and thrown away)"),
            "loads": "LOAD_MEM requests sent",
            "closed": "close requests sent (after the peer's FIN, every byte read)",
            "ended": "connections the engine reported reset, timed out or closed",
            "mem_errors": "load acks with error set (the flow is given up)",
            "dropped": "messages that match nothing (stray, stale, unknown, malformed)",
        })
        # TcpAppTile bounds its chunk by the send ring; a sink's is a load from the receive ring.
        self.chunk = chunk

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        flows, sb, nj = self.config.flows, self.slot_bits, self.jobs
        c = self.counters
        io = self.ports(m)
        app_tx, = io.app_tx
        a, mem = io.app, io.mem
        reads = {}
        for k in range(nj):
            reads.update({f"gen_cur{k}": ("gens", "comb"), f"ctx{k}": ("ctx", "sync"),
                          f"rx_loc{k}": ("rx_locs", "comb")})
        m.submodules.table = table = FlowTable(flows, sb, forgets=nj, reads=reads)
        m.submodules.app_merge = app_merge = _Merge(io.requests.app_layout, nj)
        m.submodules.mem_merge = mem_merge = _Merge(io.requests.mem_layout, nj)
        connect(m, merge=app_merge.o, sender=app_tx.i_hdr)
        connect(m, merge=mem_merge.o, sender=io.mem_tx.i_hdr)
        readers = []
        for k in range(nj):
            r = m.submodules[f"reader{k}"] = _Reader(
                io.requests, flows=flows, slot_bits=sb, chunk=self.chunk, depth=self.depth,
                width=self.env.width)
            readers.append(r)
            connect(m, app=a, reader=r.app)
            connect(m, receiver=mem, reader=r.mem)
            connect(m, table=getattr(table, f"gen_cur{k}"), reader=r.gen_cur)
            connect(m, table=getattr(table, f"ctx{k}"), reader=r.ctx)
            connect(m, table=getattr(table, f"rx_loc{k}"), reader=r.rx_loc)
            connect(m, reader=r.app_tx, merge=app_merge.i[k])
            connect(m, reader=r.mem_tx, merge=mem_merge.i[k])
            m.d.comb += [r.kill.eq(table.kill), r.live.eq(table.live),
                         r.data.valid.eq(mem.data.valid), r.data.payload.eq(mem.data.payload),
                         table.forget[k].en.eq(r.forget), table.forget[k].slot.eq(r.slot)]
        # The table sees every engine message but the responses a job takes itself.
        mine = Cat(r.mine for r in readers).any()
        t = table.app
        m.d.comb += [t.valid.eq(a.valid & ~mine), t.type.eq(a.type), t.meta.eq(a.meta),
                     t.slot.eq(a.slot), t.gen.eq(a.gen), t.ok.eq(a.ok)]
        m.d.comb += mem.data.ready.eq(1)        # every word taken: each job takes its own
        waiting = self._queues(m, table, readers)
        for r in readers:
            m.d.comb += [r.waiting.eq(waiting),
                         r.other.eq(Cat(Const(0), *(o.serving & (o.slot == r.slot)
                                                    for o in readers if o is not r)).any())]
        ev = [r.events for r in readers]
        stray, unknown = Signal(), Signal()
        m.d.comb += [stray.eq(mem.valid & ~Cat(r.matched for r in readers).any()),
                     unknown.eq(a.valid & ~table.handled)]
        self.count_dropped(m, io, unknown, table.drop, stray)
        count(m, c.bytes, sum(r.nbytes for r in readers))       # 0 but from the job reading
        for name in ("loads", "closed", "mem_errors"):
            count(m, getattr(c, name), sum(getattr(e, name) for e in ev))
        self.count_events(m, connections=table.announced, ended=table.ended)
        return m

    @staticmethod
    def _queues(m: Module, table: FlowTable, readers: list) -> Signal:
        """The table's queues to the jobs: a slot to the first job that takes it (a job takes
        the head of each queue only if no job before it does). Returns ``waiting``: a flow at
        the head of a queue that no job takes this cycle."""
        waiting = Signal()
        for name in ("new", "ready"):
            queue = getattr(table, name)
            taken: Any = 0
            for r in readers:
                mine = getattr(r, name)
                m.d.comb += [mine.valid.eq(queue.valid & ~taken), mine.payload.eq(queue.payload)]
                taken = taken | mine.ready
            m.d.comb += queue.ready.eq(taken)
            with m.If(queue.valid & ~taken):
                m.d.comb += waiting.eq(1)
        return waiting
