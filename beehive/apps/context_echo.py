"""TCP echo as a worker of the context scheduler: a copy that keeps no connection between turns.

:class:`TcpContextEchoTile` is resumed by a :class:`~beehive.apps.contexts.TcpContextSchedulerTile`
with one engine message of a connection and that connection's context block, handles the
message, and yields the block back; any copy may take the connection's next turn. What the
block holds between turns is what a chunk's echo needs from the receive side
(:data:`ECHO_CONTEXT`: where the chunk is in the receive ring, and how long it is), so a turn
is one of:

=======================================  ===========================================================
resumed with                             the turn
=======================================  ===========================================================
``TCP_NEW_FLOW_NOTIF`` (receive ring)    ``TCP_RX_MSG_REQ`` (1 byte): tell me when there is data
``TCP_NEW_FLOW_NOTIF`` (send ring)       nothing
``TCP_RX_MSG_RESP`` OK or EOF, *L* > 0   keep where the chunk is (``n = min(L, chunk)`` bytes),
                                         ``TCP_TX_MSG_REQ`` (*n*): tell me when there is room
``TCP_RX_MSG_RESP`` EOF, nothing left    ``TCP_CLOSE_REQ`` (once)
``TCP_TX_MSG_RESP`` OK                   ``LOAD_MEM`` of the chunk into the tile's chunk
                                         buffer, then ``STORE_MEM`` of it at the send ring's
                                         pointer; on the store's ack ``TCP_TX_ADJUST_PTR``,
                                         ``TCP_RX_ADJUST_PTR`` and ``TCP_RX_MSG_REQ`` (1 byte)
anything else (a connection that ended)  nothing
=======================================  ===========================================================

and ends with ``CTX_YIELD``. A turn holds no other connection up but its own: the worker waits
only on the rings' memories, never on the engine (whose answer is the connection's next turn).
A chunk is loaded whole before it is stored (a buffer of ``chunk`` bytes), so that one memory
tile can hold both rings: a store streamed while the load's answer still comes would wait on
the memory that sends that answer.
Counters: ``turns``, ``bytes`` (echoed), ``closed`` (``TCP_CLOSE_REQ`` sent), ``mem_errors``
(a load or store refused: the chunk is not echoed, and the connection gets no more turns).
Routes: ``"tcp_rx"`` (fbits LOCAL2) and ``"tcp_tx"`` as any application's, ``"rx_mem"`` and
``"tx_mem"`` (for the layout check; a chunk's memory is the one its engine message names), and
``"sched"`` (fbits LOCAL1) to the scheduler.
"""

from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import connect

from apiary.noc.header import Fbits
from apiary.noc.nexthop import Endpoint
from apiary.os.memory_tile import LOAD_MEM_ACK, MEM_FORMAT, STORE_MEM_ACK
from apiary.os.uapi import KERNEL_META, OFFSET_BITS, KernelMsgType as K, monitor_input
from apiary.stream.counters import count
from apiary.stream.layout import payload_layout, payload_words
from apiary.stream.queue import Queue
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import APP_META, GEN_BITS, SLOT_BITS, BufferKind, Status
from ..proto.tcp.config import TcpConfig, config_or_default
from ..proto.tcp.segments import GRANT_USER
from ..proto.tcp.state import slot_bits
from .contexts import RESUME_FORMAT, YIELD_FORMAT, ContextMsgType, block_in, block_out
from .tcp_app import (ENGINE_FBITS, KEY_TCP_RX, KEY_TCP_TX, MEM_LOC, MEMORY_FBITS, RX_APP_FBITS,
                      TX_APP_FBITS, app_outputs, app_request, mem_request)


__all__ = ["TcpContextEchoTile", "ECHO_CONTEXT", "KEY_SCHED"]


#: Route key of the scheduler.
KEY_SCHED = "sched"

#: A connection's context block: the chunk its last turn asked room for (receive-ring pointer,
#: where that byte is, the ring's size and memory, and its length), and whether it was closed
#: (the engine reports the peer's FIN again for each copy of it that arrives).
ECHO_CONTEXT = data.StructLayout({"rx_ptr": 32, "rx_addr": 48, "rx_log2": 6, "rx_mem": MEM_LOC,
                                  "n": 32, "closed": 1})


class TcpContextEchoTile(Tile):
    """TCP echo, one engine message a turn, its state in the context block (see the module
    docstring).

    Parameters
    ----------
    env : TileEnv
        Routes ``"tcp_rx"``, ``"tcp_tx"``, ``"sched"``; standalone, all at (0, 0).
    config : TcpConfig
        The engine's (a chunk is at most half its send ring).
    ctx_bytes : int
        The scheduler's context block size (at least 32).
    chunk : int
        Bytes echoed a turn at most.
    """

    streaming = False
    inputs: tuple[Receive, ...] = (
        Receive("resume_rx", ContextMsgType.CTX_RESUME, meta=RESUME_FORMAT, fbits=ENGINE_FBITS),
        Receive("mem_rx", LOAD_MEM_ACK, STORE_MEM_ACK, meta=MEM_FORMAT, fbits=MEMORY_FBITS),
    )
    outputs: tuple[Send, ...] = app_outputs(
        1, Send("yield_tx", ContextMsgType.CTX_YIELD, meta=YIELD_FORMAT, keys=[KEY_SCHED]))

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 ctx_bytes: int = 32, chunk: int = 1024) -> None:
        self.config = config_or_default(config)
        if ctx_bytes * 8 < ECHO_CONTEXT.size:
            raise ValueError(f"ctx_bytes must hold the echo's context ({ECHO_CONTEXT.size} "
                             f"bits), not {ctx_bytes!r}")
        self.ctx_bytes = ctx_bytes
        self.chunk = min(chunk, self.config.tx_ring // 2)
        self.apiary = env is not None and not env.trusted
        if self.apiary:                     # the monitor's CAP_NOTIFYs: the rings' handles
            self.inputs = (monitor_input(ENGINE_FBITS), *self.inputs)
        super().__init__(env, counters={
            "turns": "turns taken (one engine message each)",
            "bytes": "bytes echoed",
            "closed": "connections closed (TCP_CLOSE_REQ) after their peer's FIN",
            "mem_errors": "loads or stores the memory refused",
        })
        routes = self.env.next_hops("data")

        def hop(key: str, fbits: int) -> Endpoint:
            hops = routes.get(key) or [Endpoint(key, 0, 0, fbits)]
            if routes and key not in routes:
                raise ValueError(f"TcpContextEchoTile {self.env.name!r} needs a route with key "
                                 f"{key!r}")
            return hops[0]

        self.tcp_rx = hop(KEY_TCP_RX, RX_APP_FBITS)
        self.tcp_tx = hop(KEY_TCP_TX, TX_APP_FBITS)
        self.sched = hop(KEY_SCHED, Fbits.LOCAL1)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self.env.width
        here = (self.env.x, self.env.y)
        counters = self.counters
        ports = self.message_ports(m)
        resume_rx, mem_rx = ports.resume_rx, ports.mem_rx
        req, mem_tx, yield_tx = ports.app_tx0, ports.mem_tx, ports.yield_tx
        words, _ = payload_words(self.ctx_bytes, width)

        block = Signal(words * width)
        ctx = data.View(ECHO_CONTEXT, block[:ECHO_CONTEXT.size])
        event = Signal(8)
        app = Signal(APP_META.layout())
        k = Signal(range(words + 1))
        n = Signal(32)
        tx = Signal(APP_META.layout())          # the send ring's answer, while its chunk moves
        r_hdr = resume_rx.o_hdr.payload
        r_meta = data.View(RESUME_FORMAT.layout(), r_hdr.meta)
        mem = data.View(MEM_FORMAT.layout(), mem_rx.o_hdr.payload.meta)
        flow = app.flow

        rings = self._rings(m, ports.monitor, flow) if self.apiary else None
        m.submodules.chunk = buffer = Queue(payload_layout(width),
                                            payload_words(self.chunk, width)[0] + 1)

        def ring_addr(kind: BufferKind, addr: Any) -> tuple[Any, Any]:
            """A ring's address for a load or store, and whether it can go: under Apiary the
            offset in the ring's segment (the worker's own handle for the connection, once its
            capability has come)."""
            if rings is None:
                return addr, 1
            handle, here_now = rings[kind]
            return Cat(addr[:OFFSET_BITS], handle), here_now

        def request(msg_type: Any, dst: Endpoint, then: str, **fields: Any) -> None:
            with m.If(app_request(m, req.i_hdr, msg_type, dst, here, flow=flow, **fields)):
                m.next = then

        def acked(then: str) -> Any:
            """Take the memory's ack: on to ``then``, or if refused, the chunk dropped and the
            turn over. Returns the cycle's "acknowledged"."""
            m.d.comb += mem_rx.o_hdr.ready.eq(1)
            with m.If(mem_rx.o_hdr.valid & mem.error):
                count(m, counters.mem_errors)
                m.d.sync += ctx.n.eq(0)
                m.next = "YIELD"
            with m.Elif(mem_rx.o_hdr.valid):
                m.next = then
            return mem_rx.o_hdr.valid & ~mem.error

        def pass_words(source: Any, sink: Any, then: str) -> None:
            """A chunk's words from ``source`` to ``sink``, then on to ``then``."""
            connect(m, source=source, sink=sink)
            with m.If(source.valid & sink.ready & source.payload.last):
                m.next = then

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += resume_rx.o_hdr.ready.eq(1)
                with m.If(resume_rx.o_hdr.valid):
                    m.d.sync += [event.eq(r_meta.event), app.eq(r_meta.app), k.eq(0),
                                 block.eq(0)]
                    count(m, counters.turns)
                    m.next = "BLOCK"
            with m.State("BLOCK"):
                with m.If(block_in(m, resume_rx.o_data, block, k, width)):
                    m.next = "TURN"
            with m.State("TURN"):
                ok = (app.status == Status.OK) | (app.status == Status.EOF)
                m.next = "YIELD"
                with m.Switch(event):
                    with m.Case(MsgType.TCP_NEW_FLOW_NOTIF):
                        with m.If((app.status == Status.OK) & (app.kind == BufferKind.RECEIVE)):
                            m.next = "RX_REQ"
                    with m.Case(MsgType.TCP_RX_MSG_RESP):
                        with m.If(ok & (app.length != 0)):
                            chunk = Mux(app.length > self.chunk, self.chunk, app.length)
                            m.d.sync += [ctx.rx_ptr.eq(app.ptr), ctx.rx_addr.eq(app.addr),
                                         ctx.rx_log2.eq(app.size_log2), ctx.rx_mem.x.eq(app.mem_x),
                                         ctx.rx_mem.y.eq(app.mem_y), ctx.n.eq(chunk)]
                            m.next = "TX_REQ"
                        with m.Elif((app.status == Status.EOF) & ~ctx.closed):
                            m.d.sync += ctx.closed.eq(1)
                            m.next = "CLOSE"
                    with m.Case(MsgType.TCP_TX_MSG_RESP):
                        with m.If((app.status == Status.OK) & (ctx.n != 0)):
                            m.d.sync += [tx.eq(app), n.eq(ctx.n)]
                            m.next = "LOAD"
            with m.State("RX_REQ"):
                request(MsgType.TCP_RX_MSG_REQ, self.tcp_rx, "YIELD", length=1)
            with m.State("TX_REQ"):
                request(MsgType.TCP_TX_MSG_REQ, self.tcp_tx, "YIELD", length=ctx.n)
            with m.State("CLOSE"):
                with m.If(app_request(m, req.i_hdr, MsgType.TCP_CLOSE_REQ, self.tcp_tx, here,
                                      flow=flow)):
                    count(m, counters.closed)
                    m.next = "YIELD"
            with m.State("LOAD"):
                addr, go = ring_addr(BufferKind.RECEIVE, ctx.rx_addr)
                with m.If(go & mem_request(m, mem_tx.i_hdr, here, store=False, loc=ctx.rx_mem,
                                           addr=addr, size=n, wrap=ctx.rx_log2)):
                    m.next = "LOADED"
            with m.State("LOADED"):
                acked("LOAD_DATA")
            with m.State("LOAD_DATA"):
                pass_words(mem_rx.o_data, buffer.i, "STORE")
            with m.State("STORE"):
                loc = Signal(MEM_LOC)
                m.d.comb += [loc.x.eq(tx.mem_x), loc.y.eq(tx.mem_y)]
                addr, go = ring_addr(BufferKind.SEND, tx.addr)
                with m.If(go & mem_request(m, mem_tx.i_hdr, here, store=True, loc=loc, addr=addr,
                                           size=n, wrap=tx.size_log2)):
                    m.next = "STORE_DATA"
            with m.State("STORE_DATA"):
                pass_words(buffer.o, mem_tx.i_data, "STORED")
            with m.State("STORED"):
                with m.If(acked("TX_ADJUST")):
                    count(m, counters.bytes, n)
            with m.State("TX_ADJUST"):
                request(MsgType.TCP_TX_ADJUST_PTR, self.tcp_tx, "RX_ADJUST", ptr=tx.ptr + n)
            with m.State("RX_ADJUST"):
                with m.If(app_request(m, req.i_hdr, MsgType.TCP_RX_ADJUST_PTR, self.tcp_rx, here,
                                      flow=flow, ptr=ctx.rx_ptr + n)):
                    m.d.sync += ctx.n.eq(0)
                    m.next = "RX_REQ"
            with m.State("YIELD"):
                y_meta = Signal(YIELD_FORMAT.layout())
                m.d.comb += y_meta.flow.eq(flow)
                d = yield_tx.i_hdr.payload
                m.d.comb += [
                    yield_tx.i_hdr.valid.eq(1),
                    d.dst_x.eq(self.sched.x), d.dst_y.eq(self.sched.y),
                    d.dst_fbits.eq(self.sched.fbits), d.src_x.eq(here[0]), d.src_y.eq(here[1]),
                    d.src_fbits.eq(ENGINE_FBITS),
                    d.msg_type.eq(ContextMsgType.CTX_YIELD.value),
                    d.payload_bytes.eq(self.ctx_bytes), d.meta.eq(y_meta),
                ]
                with m.If(yield_tx.i_hdr.ready):
                    m.d.sync += k.eq(0)
                    m.next = "YIELD_DATA"
            with m.State("YIELD_DATA"):
                with m.If(block_out(m, yield_tx.i_data, block, k, width, self.ctx_bytes)):
                    m.next = "IDLE"
        return m

    def _rings(self, m: Module, monitor: Any, flow: Any) -> dict:
        """Under Apiary: the handle of each connection's rings at this worker, from the
        ``CAP_NOTIFY`` of each ring the scheduler sent on (its ``user`` word: the flow handle,
        which ring), kept per flow slot with the connection's generation. Returns, per
        :class:`BufferKind`, the handle for ``flow`` and whether it is that connection's."""
        sb = slot_bits(self.config.flows)
        entry = data.StructLayout({"handle": 8, "gen": GEN_BITS})
        k_meta = data.View(KERNEL_META, monitor.o_hdr.payload.meta)
        user = data.View(GRANT_USER, k_meta.user[:GRANT_USER.size])
        notify = monitor.o_hdr.valid & (monitor.o_hdr.payload.msg_type == K.CAP_NOTIFY.value)
        m.d.comb += [monitor.o_hdr.ready.eq(1), monitor.o_data.ready.eq(1)]
        rings = {}
        for kind in BufferKind:
            table = m.submodules[f"{kind.name.lower()}_rings"] = Memory(
                shape=entry, depth=self.config.flows, init=[])
            wr, rd = table.write_port(), table.read_port(domain="comb")
            m.d.comb += [wr.en.eq(notify & (user.kind == kind)), wr.addr.eq(user.flow[:sb]),
                         wr.data.handle.eq(k_meta.handle),
                         wr.data.gen.eq(user.flow[SLOT_BITS:]), rd.addr.eq(flow[:sb])]
            rings[kind] = (rd.data.handle, rd.data.gen == flow[SLOT_BITS:])
        return rings
