"""What the TCP application tiles share: their NoC ports, routes, requests and acks.

An application of the TCP engine (:mod:`beehive.proto.tcp`; the messages are in
:mod:`beehive.proto.tcp.app`) talks to four tiles: the engine's RX tile, its TX tile, and the
memory tiles holding the receive and the send rings. Its NoC input is split by sub-port:

=========  ==================================================  =========  ======================
``fbits``  messages in                                         metadata   from
=========  ==================================================  =========  ======================
LOCAL0     ``TCP_NEW_FLOW_NOTIF``, ``TCP_RX_MSG_RESP``,        APP_META   the RX tile, the TX
           ``TCP_TX_MSG_RESP``                                            tile
LOCAL1     ``LOAD_MEM_ACK`` (with data), ``STORE_MEM_ACK``     MEM_META   the memory tiles
=========  ==================================================  =========  ======================

so it sends its engine requests with ``src_fbits = LOCAL0`` and its memory requests with
``src_fbits = LOCAL1``. Engine requests go to the endpoints of its routes ``"tcp_rx"`` (the RX
tile's LOCAL2: ``TCP_RX_MSG_REQ``, ``TCP_RX_ADJUST_PTR``, ``TCP_OPEN_REQ``) and ``"tcp_tx"``
(the TX tile's LOCAL0: ``TCP_TX_MSG_REQ``, ``TCP_TX_ADJUST_PTR``, ``TCP_CLOSE_REQ``); memory
requests go to the memory tile a flow's ``TCP_NEW_FLOW_NOTIF`` names (``mem_x``, ``mem_y``,
LOCAL0). Routes ``"rx_mem"`` and ``"tx_mem"`` may be declared for the deadlock check; they are
not used to address anything.

:class:`TcpAppTile` is the base of both applications (:class:`~beehive.apps.tcp_echo.TcpEchoTile`,
:class:`~beehive.apps.tcp_sender.TcpSenderTile`): it checks the configuration, finds the
engine's endpoints, and builds the framing (:meth:`TcpAppTile.ports`) and the request
descriptors (:meth:`TcpAppTile.app_request`, :meth:`TcpAppTile.mem_request`).
"""

from types import SimpleNamespace

from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import connect

from apiary.noc.framing import MessageReceiver, MessageSender
from apiary.noc.header import Fbits
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, MEM_FORMAT, MEM_META, STORE_MEM,
                                   MemMsgType)
from apiary.os.uapi import KERNEL_META, OFFSET_BITS, KernelMsgType, monitor_input
from apiary.stream.queue import Queue
from apiary.tile import Endpoint, Receive, Send, Tile, TileEnv

from ..proto.messages import MsgType
from ..proto.tcp.app import APP_META, GEN_BITS, SLOT_BITS, BufferKind, Status
from ..proto.tcp.config import TcpConfig, config_or_default
from ..proto.tcp.segments import GRANT_USER


__all__ = ["TcpAppTile", "FlowTable", "RX_CONTEXT", "KEY_TCP_RX", "KEY_TCP_TX", "KEY_RX_MEM",
           "KEY_TX_MEM", "ENGINE_FBITS", "MEMORY_FBITS", "RX_APP_FBITS", "TX_APP_FBITS", "MEM_LOC",
           "ENGINE_MESSAGES", "ENGINE_REQUESTS", "app_inputs", "app_outputs", "default_chunk",
           "int_in_range"]


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
ENGINE_MESSAGES = (MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP, MsgType.TCP_TX_MSG_RESP)
ENGINE_REQUESTS = (MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_ADJUST_PTR, MsgType.TCP_OPEN_REQ,
                   MsgType.TCP_TX_MSG_REQ, MsgType.TCP_TX_ADJUST_PTR, MsgType.TCP_CLOSE_REQ)


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


class FlowTable:
    """What an application keeps of the engine's connections, one entry per flow slot, and its
    handling of the messages that announce them and report their data
    (:meth:`track`).

    * ``live``, ``fresh``, ``queued`` (``flows`` bits): a connection the application serves
      holds the slot; the slot is in ``new_q``; the slot is in ``ready_q``;
    * memories ``gens`` (each slot's connection's generation), ``ctx`` (the latest
      ``TCP_RX_MSG_RESP``, as :data:`RX_CONTEXT`), ``rx_locs`` and ``tx_locs`` (where its
      rings are, :data:`MEM_LOC`), written here; the application adds the read ports it needs;
    * queues of slots: ``new_q`` (new connections, each slot at most once: a slot reused
      before it is taken is not queued again) and ``ready_q`` (slots with a response in
      ``ctx``, each at most once: a newer response overwrites the entry). The application pops
      them and clears the slot's ``fresh`` or ``queued`` bit as it does.

    :meth:`track` drives, for the cycle's engine message (``io.app`` of
    :meth:`TcpAppTile.ports`), the one-cycle signals ``announced`` (a new connection's receive
    buffer, status OK), ``send_ring`` (the current connection's send-buffer notification),
    ``ended`` (its connection reset, timed out or closed: a
    ``TCP_RX_MSG_RESP`` of another status than OK or EOF for the slot's current connection),
    ``kill`` (either: the slot's previous connection is over), ``drop`` (a notification or
    response that matches no current connection) and ``current`` (the message is about the
    slot's current connection); ``handled`` says the message is one of those two kinds.
    """

    def __init__(self, m: Module, flows: int, slot_bits: int) -> None:
        self.live, self.fresh, self.queued = Signal(flows), Signal(flows), Signal(flows)
        m.submodules.gens = self.gens = Memory(shape=unsigned(GEN_BITS), depth=flows, init=[])
        m.submodules.ctx = self.ctx = Memory(shape=RX_CONTEXT, depth=flows, init=[])
        m.submodules.rx_locs = self.rx_locs = Memory(shape=MEM_LOC, depth=flows, init=[])
        m.submodules.tx_locs = self.tx_locs = Memory(shape=MEM_LOC, depth=flows, init=[])
        m.submodules.new_q = self.new_q = Queue(unsigned(slot_bits), flows)
        m.submodules.ready_q = self.ready_q = Queue(unsigned(slot_bits), flows)
        self.announced, self.send_ring = Signal(), Signal()
        self.ended, self.kill = Signal(), Signal()
        self.drop, self.current, self.handled = Signal(), Signal(), Signal()

    def track(self, m: Module, a: SimpleNamespace) -> None:
        """Handle ``TCP_NEW_FLOW_NOTIF`` and ``TCP_RX_MSG_RESP`` (see the class docstring). Call
        it after any logic of the application's that clears ``live`` bits, so that a new
        connection's wins in the cycle both happen."""
        meta = a.meta
        gen_in = self.gens.read_port(domain="comb")
        gen_w, ctx_w = self.gens.write_port(), self.ctx.write_port()
        rx_loc_w, tx_loc_w = self.rx_locs.write_port(), self.tx_locs.write_port()
        live = self.live
        m.d.comb += [gen_in.addr.eq(a.slot),
                     self.current.eq(live.bit_select(a.slot, 1) & (gen_in.data == a.gen)),
                     self.kill.eq(self.announced | self.ended),
                     self.handled.eq((a.type == MsgType.TCP_NEW_FLOW_NOTIF)
                                     | (a.type == MsgType.TCP_RX_MSG_RESP))]
        with m.If(a.valid & (a.type == MsgType.TCP_NEW_FLOW_NOTIF)):
            with m.If((meta.status == Status.OK) & (meta.kind == BufferKind.RECEIVE)):
                m.d.comb += [
                    self.announced.eq(1),
                    gen_w.en.eq(1), gen_w.addr.eq(a.slot), gen_w.data.eq(a.gen),
                    rx_loc_w.en.eq(1), rx_loc_w.addr.eq(a.slot),
                    rx_loc_w.data.x.eq(meta.mem_x), rx_loc_w.data.y.eq(meta.mem_y),
                ]
                m.d.sync += live.bit_select(a.slot, 1).eq(1)
                with m.If(~self.fresh.bit_select(a.slot, 1)):
                    m.d.comb += [self.new_q.i.valid.eq(1), self.new_q.i.payload.eq(a.slot)]
                    m.d.sync += self.fresh.bit_select(a.slot, 1).eq(1)
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
                with m.If(~self.queued.bit_select(a.slot, 1)):
                    m.d.comb += [self.ready_q.i.valid.eq(1), self.ready_q.i.payload.eq(a.slot)]
                    m.d.sync += self.queued.bit_select(a.slot, 1).eq(1)
            with m.Else():
                m.d.comb += self.ended.eq(1)
                m.d.sync += live.bit_select(a.slot, 1).eq(0)


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
        super().__init__(env, counters=counters, registers=registers)
        if not self.env.trusted:
            # The monitor's answers arrive on the engine's sub-port, told apart by type.
            self.inputs = (monitor_input(ENGINE_FBITS), *self.inputs)
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
        return Cat(slot, Const(0, SLOT_BITS - len(slot)), gen)

    # -- framing -----------------------------------------------------------------------------------

    def ports(self, m: Module) -> SimpleNamespace:
        """Build the tile's framing from its declared ``inputs`` (:func:`app_inputs`) and
        ``outputs`` (:func:`app_outputs`) with :meth:`~apiary.tile.Tile.message_ports`, and
        return it:

        * ``app``: engine messages in, one a cycle at most, always taken: ``app.valid``,
          ``app.type`` (``msg_type``), ``app.meta`` (a view of :data:`APP_META`), ``app.slot``
          and ``app.gen`` (of ``meta.flow``), ``app.ok`` (``status`` is OK or EOF);
        * ``mem``: memory acks in, always taken: ``mem.valid``, ``mem.type``, ``mem.meta`` (a
          view of ``MEM_META``), ``mem.payload_bytes``; their data on ``mem.data``, which the
          caller must take;
        * ``app_tx``: the senders of engine requests (:meth:`app_request`), a list;
          ``mem_tx``: the sender of memory requests (:meth:`mem_request`), whose ``i_data``
          the caller drives for stores;
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
        sent = [p.name for p in self.outputs if p.plane == "data"]
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
            valid, msg_type, meta = self._context(m, app_rx, k_rx, meta)
        app = SimpleNamespace(valid=valid, type=msg_type, meta=meta,
                              slot=meta.flow[:sb], gen=meta.flow[SLOT_BITS:SLOT_BITS + GEN_BITS],
                              ok=(meta.status == Status.OK) | (meta.status == Status.EOF))
        mem = SimpleNamespace(valid=mem_rx.o_hdr.valid, type=mem_rx.o_hdr.payload.msg_type,
                              meta=data.View(MEM_META, mem_rx.o_hdr.payload.meta),
                              payload_bytes=mem_rx.o_hdr.payload.payload_bytes,
                              data=mem_rx.o_data)
        errors = sum(r.errors for r in receivers) + (0 if k_rx is None else k_rx.errors)
        return SimpleNamespace(app=app, mem=mem, app_tx=app_tx, mem_tx=mem_tx,
                               inputs=receivers[2:], senders=more_tx,
                               malformed=errors + io.dropped)

    def _context(self, m: Module, app_rx: MessageReceiver, k_rx: MessageReceiver,
                 meta_in: Any) -> tuple[Any, Any, Any]:
        """Under Apiary (the tile untrusted), the thesis's context module: the engine announces a
        connection's rings with ``CAP_SEND`` (:mod:`beehive.proto.tcp.segments`), so the
        monitor's ``CAP_NOTIFY`` arrive on LOCAL0 with the engine's messages. Each becomes the
        ``TCP_NEW_FLOW_NOTIF`` it stands for (``addr`` the segment's virtual address, no peer
        address or memory tile: the monitor steers loads and stores), the handle is kept per
        flow slot, and the ring offsets of the engine's responses become virtual addresses in
        it. Returns the engine messages' ``valid``, ``msg_type`` and metadata."""
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
        m.d.comb += notes.o.ready.eq(~engine)
        for kind, (rd, wr) in handles.items():
            m.d.comb += [rd.addr.eq(meta_in.flow[:sb]), wr.addr.eq(n.user.flow[:sb]),
                         wr.data.eq(n.handle),
                         wr.en.eq(~engine & notes.o.valid & (n.user.kind == kind))]
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
        return (engine | notes.o.valid,
                Mux(engine, app_rx.o_hdr.payload.msg_type, MsgType.TCP_NEW_FLOW_NOTIF), meta)

    # -- requests ----------------------------------------------------------------------------------

    def app_request(self, m: Module, sender: MessageSender, msg_type, dst: Endpoint,
                    **fields) -> Signal:
        """Offer an engine request on ``sender`` this cycle: ``msg_type`` to the engine tile
        ``dst`` (:attr:`tcp_rx` or :attr:`tcp_tx`) with the :data:`APP_META` ``fields`` given
        (the others zero). Call it from one place per cycle; returns the cycle's ``taken``."""
        d = sender.i_hdr.payload
        meta = data.View(APP_META.layout(), d.meta)
        m.d.comb += [
            sender.i_hdr.valid.eq(1),
            d.dst_x.eq(dst.x), d.dst_y.eq(dst.y), d.dst_fbits.eq(dst.fbits),
            d.src_x.eq(self.env.x), d.src_y.eq(self.env.y), d.src_fbits.eq(ENGINE_FBITS),
            d.msg_type.eq(msg_type), d.payload_bytes.eq(0),
        ]
        for name, value in fields.items():
            m.d.comb += getattr(meta, name).eq(value)
        return sender.i_hdr.ready

    def mem_request(self, m: Module, sender: MessageSender, *, store: bool, loc, addr, size,
                    wrap) -> Signal:
        """Offer ``LOAD_MEM`` (``store=False``) or ``STORE_MEM`` (its ``size`` bytes then come
        from ``sender.i_data``) to the memory tile at ``loc`` (a :data:`MEM_LOC`), answered on
        this tile's LOCAL1. Returns the cycle's ``taken``."""
        d = sender.i_hdr.payload
        meta = data.View(MEM_META, d.meta)
        m.d.comb += [
            sender.i_hdr.valid.eq(1),
            d.dst_x.eq(loc.x), d.dst_y.eq(loc.y), d.dst_fbits.eq(Fbits.LOCAL0),
            d.src_x.eq(self.env.x), d.src_y.eq(self.env.y), d.src_fbits.eq(MEMORY_FBITS),
            d.msg_type.eq(STORE_MEM if store else LOAD_MEM),
            d.payload_bytes.eq(size if store else 0),
            meta.addr.eq(addr), meta.size.eq(size), meta.wrap.eq(wrap),
        ]
        if store and self.fault_after is not None:
            m.d.comb += meta.addr.eq(addr + Mux(self._poison, Const(1, 48) << wrap, 0))
        return sender.i_hdr.ready

    @staticmethod
    def mem_ack(mem: SimpleNamespace, msg_type: int, expect, addr, size, wrap):
        """Whether the memory ack on offer is the one expected (``expect``): its type, the
        ``addr``, ``size`` and ``wrap`` of the request, and its payload (``size`` bytes for a
        ``LOAD_MEM_ACK`` without ``error``, none otherwise)."""
        meta = mem.meta
        payload = size if msg_type == LOAD_MEM_ACK else 0
        return (mem.valid & expect & (mem.type == msg_type) & (meta.addr == addr)
                & (meta.size == size) & (meta.wrap == wrap)
                & (mem.payload_bytes == Mux(meta.error, 0, payload)))

    @staticmethod
    def mem_data_to(m: Module, mem: SimpleNamespace, flag: Signal, sink: Any) -> None:
        """While ``flag`` is set, the memory acks' words (``mem.data``) go to ``sink`` (a stream),
        and ``flag`` clears after the last; otherwise they are taken and thrown away."""
        with m.If(flag):
            connect(m, receiver=mem.data, sink=sink)
            with m.If(mem.data.valid & mem.data.ready & mem.data.payload.last):
                m.d.sync += flag.eq(0)
        with m.Else():
            m.d.comb += mem.data.ready.eq(1)

    def count_dropped(self, m: Module, io: SimpleNamespace, *pulses) -> None:
        """Drive the ``dropped`` counter: the messages the tile's logic drops (one-cycle
        ``pulses``) and those its framing dropped or reframed."""
        strays = Signal(32)
        m.d.sync += strays.eq(strays + sum(pulses))
        m.d.comb += self.counters.dropped.eq(strays + io.malformed)

    def step(self, length):
        """``min(length, chunk)``."""
        return Mux(length > self.chunk, self.chunk, length)
