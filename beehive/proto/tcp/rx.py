"""The TCP receive tile: segments in, data into the receive rings, connection state, the
application's receive side.

Messages
--------
Into the tile, by destination sub-port (``dst_fbits``):

=======  ==========================================  ==================  ======================
fbits    message                                     metadata            from
=======  ==========================================  ==================  ======================
LOCAL0   ``IP_RX_DATAGRAM`` (protocol 6): a segment  PACKET_META         IPv4 RX
LOCAL1   ``STORE_MEM_ACK``                           MEM_META            the receive buffer
LOCAL2   ``TCP_RX_MSG_REQ``, ``TCP_RX_ADJUST_PTR``,  APP_META            applications
         ``TCP_OPEN_REQ``, ``TCP_PEER_REQ``
LOCAL3   ``ARP_RESOLVED``                            PACKET_META         the ARP tile
=======  ==========================================  ==================  ======================

Out of it: ``STORE_MEM`` (a segment's new bytes, to the receive buffer, route key
``"rx_mem"``, answered on LOCAL1), ``TCP_NEW_FLOW_NOTIF``, ``TCP_RX_MSG_RESP`` and
``TCP_PEER_RESP`` (to the
flow's application: for a connection the peer opens, the tile routed to under the local port,
an integer key; for one an application opens, that application), and ``ARP_RESOLVE`` (route key
``"arp"``, answered on LOCAL3). The formats are in :mod:`beehive.proto.tcp.app`.

With the transmit tile (:class:`~beehive.proto.tcp.tx.TcpTxTile`) it shares flow state over
:class:`~beehive.proto.tcp.state.TcpWires` (``d.wire("tcp_rx", "tcp_tx")``).

How a segment goes through
--------------------------
::

    noc_in ─▶ fbits ─┬▶ segments ─▶ checksum + PacketBuffer ─▶ SegmentHead: PayloadPeek
                     │                                          (60-byte header), TcpOptions
                     │                                             │ segment      │ words
                     ├▶ store acks ──┐                             ▼              ▼
                     ├▶ app requests ┼────────────────────────▶ RxEngine ─▶ SegmentStore ─┐
                     └▶ ARP answers ─┘  flow table, records,    │  │     (StreamStrip,    │
                                        CommitQueue             │  │      STORE_MEM)      ├▶ noc_out
                                        RX events (wires) ◀─────┘  │                      │
                                        to the TX tile             └─▶ app messages ──────┘

The components: :class:`SegmentHead` holds each segment for the engine's verdict,
:class:`RxEngine` decides, :class:`SegmentStore` stores a segment's new bytes,
:class:`CommitQueue` (in the engine) holds its commit until the memory acknowledges the store;
the messages out wait in an :class:`~beehive.proto.tcp.queues.Outbox` each.

The engine handles one event at a time, in 2 cycles (3 for a segment, whose flow is looked
up first): it reads the flow's record (and the transmit tile's), decides, writes the record
back and queues what follows. A segment's new bytes, in order or not, go to the flow's receive
ring at their place; an in-order segment moves ``rcv_stored`` on at once (so the next one is in
order too), and ``rcv_nxt``, what is acknowledged and what the application may read, follows
when the memory acknowledges the store, so no byte is acknowledged or read before it is
written. Two out-of-order ranges per flow are kept (the reorder buffer: the ring itself),
so the peer's losses may leave two holes; a segment that would make a third range is
dropped and counted (``ooo_dropped``), and the peer sends it again. With SACK an ACK reports
the range the latest out-of-order segment went to.

Nothing on ``noc_in`` waits for ``noc_out`` (``streaming = False``): segments wait in a buffer
that drops what does not fit (``overflow``: TCP sends them again), store acknowledgements are
bounded by the stores in flight, and requests are handled without sending anything (responses
are queued per flow, and sent as ``noc_out`` allows).

Drops, each counted once: ``bad_checksum``, ``overflow``, ``truncated`` (under 20 bytes, or a
data offset past the end), ``bad_header`` (a data offset under 5, SYN with FIN or RST),
``no_flow`` (no connection: answered with RST unless it was one), ``no_listener`` (a SYN to a
port nobody listens on: RST), ``syn_dropped`` (no free slot, or ``max_half_open`` half-open
connections already), ``ooo_dropped``, ``out_of_window`` and ``duplicate`` (nothing new:
acknowledged again), ``bad_ack`` (an ACK of what was never sent: acknowledged and dropped),
``rejected`` (a segment its connection's state does not take: no ACK, RST out of window or in
TIME-WAIT, SYN on an open connection).

A connection in TIME-WAIT is not reset by a RST (RFC 1337): both FINs are done, and a peer
that already closed answers a repeated ACK with RST; the slot is freed by its timer and counted
``closed``.
"""

from types import SimpleNamespace
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import Endpoint, NextHopTable, address_of, first_hop
from apiary.os.memory_tile import MEM_FORMAT, MEM_META, STORE_MEM, MemMsgType
from apiary.os.uapi import KERNEL_FORMAT, OFFSET_BITS, KernelMsgType, monitor_input
from apiary.stream.counters import CounterSignature, count
from apiary.stream.header import byte_reverse, header_signal
from apiary.stream.layout import payload_signature
from apiary.stream.peek import PayloadPeek
from apiary.stream.queue import Queue, register_stream
from apiary.stream.realign import StreamStrip
from apiary.tile import Receive, Send, Tile, TileEnv

from ..arp import ArpMsgType
from ..ipv4 import IpProtocol, pseudo_header_sum
from ..layer import (early_first_word, low_latency, packet_layout, received_packets,
                     verified_packets)
from ..messages import IP_META, PACKET_META, MsgType
from .app import (APP_META, APP_REQUEST, GEN_BITS, SLOT_BITS, BufferKind, Status, app_input,
                  app_requests)
from .config import TcpConfig, config_or_default
from .flow_table import FLOW_KEY, FlowTable
from .header import (ACK, FIN, MAX_HEADER_BYTES, MAX_WSCALE, OPT_MSS, OPT_SACK, OPT_SACK_OK,
                     OPT_WSCALE, RST, SACK_BLOCK, SYN, TCP, TCP_HEADER_BYTES)
from .header import seq_le, seq_lt, seq_min
from .queues import MEM_REQUEST, FlowQueue, Outbox, memory_requests
from .segments import POOL_PORT, BufferPool
from .state import RX_EVENT, RX_STATE, ConnState, TcpWires, slot_bits


__all__ = ["TcpRxTile", "RX_KEY_MEMORY", "RX_KEY_ARP", "TcpOptions", "SegmentHead",
           "CommitQueue", "SegmentStore", "RxEngine"]


#: Route keys of the receive tile: its receive buffer, and the ARP tile it asks for addresses.
RX_KEY_MEMORY, RX_KEY_ARP = "rx_mem", "arp"
ARP_RESOLVE = ArpMsgType.ARP_RESOLVE.value

#: Longest segment taken (the IPv4 payload of a 1500-byte MTU).
MAX_SEGMENT = 1480
#: The MSS assumed when a SYN carries none (RFC 9293).
DEFAULT_MSS = 536

#: A segment offered to the engine: its length and metadata, its header bytes (lane order)
#: and how many of them there are, and its options (a SYN's; any segment's first SACK block
#: beyond its ACK, :class:`TcpOptions`).
RX_SEGMENT = data.StructLayout({"packet": packet_layout(), "head": 8 * MAX_HEADER_BYTES,
                             "head_len": range(MAX_HEADER_BYTES + 1), "mss": 16, "has_mss": 1,
                             "ws": 4, "has_ws": 1, "has_sack": 1, "sack": SACK_BLOCK,
                             "sack_high": 32, "sack_bytes": 32, "sack_valid": 1})
#: What a store's acknowledgement (or a FIN) commits: ``end`` (and the FIN) becomes ``rcv_nxt``.
COMMIT = data.StructLayout({"slot": 12, "gen": GEN_BITS, "advance": 1, "end": 32, "fin": 1,
                            "store": 1})


def store_layout(max_segment: int = MAX_SEGMENT) -> data.StructLayout:
    """A segment's store: the request, and the bytes of the segment (at most ``max_segment``)
    not to store."""
    return data.StructLayout({"store": MEM_REQUEST, "cut": range(max_segment + 1)})


#: :func:`store_layout` of a 1,500-byte MTU's segments.
STORE = store_layout()
#: A message to an application.
APP_MESSAGE = data.StructLayout({"msg_type": 8, "x": 8, "y": 8, "fbits": 4,
                                 "meta": APP_META.layout()})
#: An ARP answer.
ARP_ANSWER = data.StructLayout({"peer_ip": 32, "peer_mac": 48, "vlan": 1, "vlan_tci": 16})
#: A connection an application is opening, waiting for ARP.
OPEN = data.StructLayout({"key": FLOW_KEY, "x": 8, "y": 8, "fbits": 4})

#: What the engine counts (the tile counts the rest).
ENGINE_COUNTERS = {
    "truncated": "segments under 20 bytes or shorter than their header, dropped",
    "bad_header": "segments with a data offset under 5, or SYN with FIN or RST, dropped",
    "no_flow": "segments for no connection (answered with RST unless one), dropped",
    "no_listener": "SYNs to a port nobody listens on, answered with RST",
    "syn_dropped": "SYNs that found no free slot or too many half-open connections",
    "ooo_dropped": "out-of-order segments beyond the two ranges kept, dropped",
    "out_of_window": "segments with data outside the receive window, dropped",
    "duplicate": "segments with nothing new, acknowledged again and dropped",
    "bad_ack": "segments acknowledging what was never sent, dropped",
    "rejected": "segments the connection's state does not take, dropped",
    "stored": "segments whose new data went to the receive buffer",
    "reordered": "of those, out of order (held in the ring until the gap fills)",
    "opened": "connections established",
    "closed": "connections closed by FIN both ways",
    "reset": "connections reset by the peer, refused, or timed out",
    "app_bad": "application messages for no open connection, or with bad pointers",
    "replies_dropped": "error replies to applications lost: the reply queue was full",
}

# The engine's events.
_SEG, _COMMIT_EV, _TXEV, _APP, _ARP, _NOTIFY = range(6)


def _wanted(ev):
    """Whether an :data:`RX_EVENT` has anything for the transmit tile."""
    return Cat(ev.open, ev.ack_now, ev.acked, ev.dupacks != 0, ev.wake, ev.linger, ev.closed,
               ev.rst).any()


class TcpRxTile(Tile):
    """The receive half of a TCP engine (see the module docstring for what it does).

    Parameters
    ----------
    env : TileEnv
        Routes: integer keys (local ports) to the applications listening on them; ``"rx_mem"``
        to the receive buffer's memory tile; ``"arp"`` to the ARP tile (only for applications
        that open connections).
    config : TcpConfig
        The engine's sizes and timers (the transmit tile's must be the same).

    Members
    -------
    wires : Out(TcpWires(config.flows))
        To the transmit tile.

    Cost: one state record of :data:`~beehive.proto.tcp.state.RX_STATE` per flow (about 700
    bits) in a memory with two read ports (the engine's and the transmit tile's), the flow
    table (``flows`` entries of 65 bits), the segment buffer (``segment_buffer`` bytes) and the
    header capture (60 bytes).
    """

    streaming = False

    #: Under Apiary (untrusted) as here; trusted, without ``monitor`` and ``kernel``.
    inputs: tuple[Receive, ...] = (
        monitor_input(Fbits.LOCAL0),
        # Segments come from IPv4 RX as its datagrams, with their head payload bytes.
        Receive("seg_rx", MsgType.IP_RX_DATAGRAM, MsgType.TCP_RX_SEGMENT, meta=IP_META,
                fbits=Fbits.LOCAL0, empty_packets=True),
        Receive("ack_rx", MemMsgType.STORE_MEM_ACK, meta=MEM_FORMAT, fbits=Fbits.LOCAL1,
                empty_packets=True),
        app_input(MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_ADJUST_PTR, MsgType.TCP_OPEN_REQ,
                  MsgType.TCP_PEER_REQ, fbits=Fbits.LOCAL2),
        Receive("arp_rx", ArpMsgType.ARP_RESOLVED, meta=PACKET_META, fbits=Fbits.LOCAL3,
                empty_packets=True),
    )
    outputs: tuple[Send, ...] = (
        Send("store_tx", MemMsgType.STORE_MEM, meta=MEM_FORMAT, empty_packets=True),
        Send("app_tx", MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP,
             MsgType.TCP_PEER_RESP, meta=APP_META),
        Send("arp_tx", ArpMsgType.ARP_RESOLVE, meta=PACKET_META),
        Send("k_tx", KernelMsgType.CAP_ALLOC, KernelMsgType.CAP_FREE, KernelMsgType.CAP_SEND,
             meta=KERNEL_FORMAT),
    )

    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None) -> None:
        config = config_or_default(config)
        self.config = config
        counters = {
            "segments": "segments received with a good checksum",
            "bad_checksum": "segments whose checksum is wrong, dropped",
            "overflow": "segments that found no room in the segment buffer, dropped",
            **ENGINE_COUNTERS,
            "store_errors": "receive-buffer stores the memory refused (a configuration error)",
            "malformed": "messages the receivers dropped or reframed",
        }
        self.apiary = env is not None and not env.trusted
        if not self.apiary:
            self.inputs = self.inputs[1:]
            self.outputs = self.outputs[:-1]
        if self.apiary:
            counters |= {
                "alloc_failed": "ring allocations the memory manager or the monitor refused "
                                "(asked again later)",
                "grant_failed": "ring sends or frees the monitor refused",
            }
        super().__init__(env, {"wires": Out(TcpWires(config.flows))}, counters)
        routes = self.env.next_hops("data")
        self.ports: dict[int | None, list[Endpoint]] = {
            k: v for k, v in routes.items() if isinstance(k, int)}
        self.rx_mem = first_hop(routes, RX_KEY_MEMORY)
        self.arp = first_hop(routes, RX_KEY_ARP)
        if routes and self.rx_mem is None and not self.apiary:
            raise ValueError(f"TcpRxTile {self.env.name!r} needs a route to its receive buffer "
                             f"(a memory tile) with key {RX_KEY_MEMORY!r}")

    def elaborate(self, platform):
        m = Module()
        cfg, width, counters = self.config, self.env.width, self.counters
        here = (self.env.x, self.env.y)
        ports = self.message_ports(
            m, overrides={"seg_rx": {"packet_with_header": low_latency(self.env)}})
        seg_rx, ack_rx, app_rx, arp_rx = ports.seg_rx, ports.ack_rx, ports.app_rx, ports.arp_rx
        app_q = app_requests(m, app_rx, fall_through=low_latency(self.env))
        errors = seg_rx.errors + ack_rx.errors + app_rx.errors + arp_rx.errors
        if self.apiary:
            errors += ports.monitor.errors
        m.d.comb += counters.malformed.eq(errors + ports.dropped)
        rx_mem = (self.rx_mem.x, self.rx_mem.y) if self.rx_mem else (0, 0)
        m.submodules.engine = engine = RxEngine(cfg, ports=self.ports, rx_mem=rx_mem,
                                                apiary=self.apiary,
                                                commit_at_once=early_first_word(self.env))
        connect(m, engine=engine.wires, tile=flipped(self.wires))
        connect(m, requests=app_q.o, engine=engine.app)
        for name in ENGINE_COUNTERS:
            m.d.comb += getattr(counters, name).eq(getattr(engine.counters, name))

        # Segments: checksummed and stored whole, their header captured, their new bytes
        # stored in the receive ring. From 128 bits up (as in the layers) a segment's first
        # word leaves the buffer with its descriptor; with low_latency the queues pass
        # through when empty.
        through = low_latency(self.env)
        hdr = received_packets(m, seg_rx)
        seg_hdr, seg_data = verified_packets(
            m, width, hdr[0], hdr[1], max_packet=cfg.max_segment, offset=0,
            initial=lambda m, length, meta: pseudo_header_sum(
                meta.peer_ip, meta.local_ip, IpProtocol.TCP.value, length),
            verify=lambda m, v: (v.sum == 0xFFFF, {}), counters=counters, always_ready=True,
            buffer_bytes=cfg.segment_buffer,
            max_queued=max(32, cfg.segment_buffer // 1024),
            first_word_with_desc=early_first_word(self.env), word_with_header=through)
        m.submodules.head = head = SegmentHead(width)
        connect(m, packets=seg_hdr, head=head.hdr)
        connect(m, source=seg_data, head=head.data)
        connect(m, head=head.segment, engine=engine.segment)
        m.d.comb += head.keep.eq(engine.keep)
        with m.If(head.taken):
            count(m, counters.segments)
        store_tx = ports.store_tx
        m.submodules.store = store = SegmentStore(
            width, dst=address_of(self.rx_mem, Fbits.LOCAL0), src=(*here, Fbits.LOCAL1),
            descriptor=store_tx.i_hdr.payload.shape(), max_segment=cfg.max_segment,
            through=through)
        connect(m, engine=engine.stores, store=store.i)
        # A register slice (unless low_latency): the engine's verdict releases the held words in
        # the cycle it is taken, and nothing after that (the store's realignment, the senders'
        # merge onto noc_out) should add to that cycle (it did: 29 ns on an ECP5, the core's
        # clock missed).
        connect(m, head=register_stream(m, "kept_words", head.words, enabled=not through),
                store=store.words)
        connect(m, store=store.o_hdr, sender=store_tx.i_hdr)
        connect(m, store=store.o_data, sender=store_tx.i_data)
        # Store acknowledgements: counted, payloads (none) discarded.
        m.d.comb += [ack_rx.o_hdr.ready.eq(1), ack_rx.o_data.ready.eq(1),
                     engine.acked.eq(ack_rx.o_hdr.valid)]
        with m.If(ack_rx.o_hdr.valid & data.View(MEM_META, ack_rx.o_hdr.payload.meta).error):
            count(m, counters.store_errors)

        self._arp(m, engine, arp_rx, ports.arp_tx)
        self._messages(m, engine, ports)
        return m

    def _arp(self, m, engine, arp_rx, arp_tx):
        """ARP answers to the engine as they come; its requests to the ARP tile."""
        m.submodules.arp_q = arp_q = Queue(ARP_ANSWER, 2)
        arp_meta = data.View(PACKET_META.layout(), arp_rx.o_hdr.payload.meta[:PACKET_META.size])
        m.d.comb += [
            arp_q.i.valid.eq(arp_rx.o_hdr.valid),
            arp_q.i.payload.peer_ip.eq(arp_meta.peer_ip),
            arp_q.i.payload.peer_mac.eq(arp_meta.peer_mac),
            arp_q.i.payload.vlan.eq(arp_meta.vlan),
            arp_q.i.payload.vlan_tci.eq(arp_meta.vlan_tci),
            arp_rx.o_hdr.ready.eq(arp_q.i.ready),
            arp_rx.o_data.ready.eq(1),
        ]
        connect(m, answers=arp_q.o, engine=engine.arp)

        def resolve(m, peer_ip):
            meta = Signal(PACKET_META.layout())
            m.d.comb += meta.peer_ip.eq(peer_ip)
            return dict(dst=address_of(self.arp, Fbits.LOCAL1),
                        src=(self.env.x, self.env.y, Fbits.LOCAL3), msg_type=ARP_RESOLVE,
                        meta=meta)
        m.submodules.arp_out = arp_out = Outbox(unsigned(32), 2, arp_tx.i_hdr.payload.shape(),
                                                resolve)
        connect(m, engine=engine.resolve, outbox=arp_out.i)
        connect(m, outbox=arp_out.o, sender=arp_tx.i_hdr)

    def _messages(self, m, engine, ports):
        """The engine's messages to applications; under Apiary, with the ring allocator."""
        app_tx = ports.app_tx

        def message(m, out):
            return dict(dst=(out.x, out.y, out.fbits), src=(self.env.x, self.env.y, Fbits.LOCAL2),
                        msg_type=out.msg_type, meta=out.meta)
        if self.apiary:
            m.submodules.app_out = app_out = Queue(APP_MESSAGE, 4)
            pool = self._rings(m, ports.monitor, app_out.o, ports.k_tx, app_tx, message)
            m.d.comb += [engine.pool.ready.eq(pool.ready), engine.pool.pair.eq(pool.pair),
                         pool.take.eq(engine.pool.take), pool.take_job.eq(engine.pool.take_job)]
        else:
            m.submodules.app_out = app_out = Outbox(APP_MESSAGE, 4, app_tx.i_hdr.payload.shape(),
                                                    message,
                                                    fall_through=low_latency(self.env))
            connect(m, outbox=app_out.o, sender=app_tx.i_hdr)
        connect(m, engine=engine.messages, outbox=app_out.i)

    def _rings(self, m, k_rx, messages, k_tx, app_tx, message):
        """Under Apiary: the ring allocator, its kernel messages, and the application messages,
        of which a notification of a new connection's ring becomes the ring's ``CAP_SEND``."""
        cfg, here = self.config, (self.env.x, self.env.y, Fbits.LOCAL0)
        m.submodules.pool = pool = BufferPool(rx_ring=cfg.rx_ring, tx_ring=cfg.tx_ring,
                                              spare=cfg.spare)
        m.d.comb += [
            k_rx.o_hdr.ready.eq(1), k_rx.o_data.ready.eq(1),
            pool.result_valid.eq(k_rx.o_hdr.valid
                                 & (k_rx.o_hdr.payload.msg_type == KernelMsgType.CAP_RESULT)),
            pool.result.eq(k_rx.o_hdr.payload.meta),
            pool.tx_x.eq(self.wires.tx_x), pool.tx_y.eq(self.wires.tx_y),
            pool.tx_fbits.eq(Fbits.LOCAL0),
            self.counters.alloc_failed.eq(pool.alloc_failed),
            self.counters.grant_failed.eq(pool.grant_failed),
        ]
        req = pool.requests
        m.d.comb += req.ready.eq(offer_message(m, k_tx, req.valid, dst=here, src=here,
                                               msg_type=req.payload.msg_type,
                                               meta=req.payload.meta))
        out = messages.payload
        is_grant = (out.msg_type == MsgType.TCP_NEW_FLOW_NOTIF) & (out.meta.status == Status.OK)
        g = pool.grants.payload
        m.d.comb += [
            pool.grants.valid.eq(messages.valid & is_grant),
            g.handle.eq(out.meta.addr[:8]), g.kind.eq(out.meta.kind),
            g.size_log2.eq(out.meta.size_log2), g.flow.eq(out.meta.flow),
            g.x.eq(out.x), g.y.eq(out.y), g.fbits.eq(out.fbits),
        ]
        sent = offer_message(m, app_tx, messages.valid & ~is_grant, **message(m, out))
        m.d.comb += messages.ready.eq(Mux(is_grant, pool.grants.ready, sent))
        return pool


class TcpOptions(wiring.Component):
    """Walk a segment's options: a SYN's MSS, window scale and SACK-permitted, any segment's
    SACK blocks.

    While ``head_valid`` (the first ``MAX_HEADER_BYTES`` bytes of a segment on ``head``, lane
    order) and until ``clear``: a segment with options is walked from byte 20, one option a
    cycle (a NOP a byte), up to its data offset, an end-of-options, or a malformed option (a
    length under 2 or past the header: the walk stops there, with what was found before). On a
    SYN, ``mss`` / ``has_mss`` take a 4-byte MSS option, ``ws`` / ``has_ws`` a 3-byte window
    scale (at most 14), ``has_sack`` a 2-byte SACK-permitted. On any segment a SACK option
    (RFC 2018: kind 5, 1 to 4 blocks) whose blocks are 4-byte aligned in the header, as the
    RFC's ``NOP, NOP, SACK`` layout puts them, is read a block a cycle: ``sack`` is the block
    that starts first of those that end after the segment's ACK (the first range the peer
    holds beyond it), ``sack_valid`` whether there is one. A misaligned SACK option is
    skipped. ``sack_high`` is the last end of those blocks (the highest byte the peer holds, plus
    one), ``sack_bytes`` the bytes they hold beyond the ACK: what RFC 6675's pipe takes off as
    SACKed (a first block inside the second is a duplicate report, RFC 2883's D-SACK: not
    counted, and not taken as ``sack``). Then ``done`` rises. A segment without options is
    done at once, with none.

    Latency: ``done`` rises 1 cycle after ``head_valid`` for a segment without options,
    ``2 + n + b`` for one whose walk takes ``n`` options (NOPs counted) and ``b`` SACK blocks
    before the end of its options or a malformed one; it falls the cycle after ``clear`` (or
    ``head_valid`` falling).
    """

    def __init__(self) -> None:
        super().__init__({
            "head": In(8 * MAX_HEADER_BYTES), "head_valid": In(1), "clear": In(1),
            "done": Out(1), "mss": Out(16), "has_mss": Out(1), "ws": Out(4), "has_ws": Out(1),
            "has_sack": Out(1), "sack": Out(SACK_BLOCK), "sack_high": Out(32),
            "sack_bytes": Out(32), "sack_valid": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        head, o = self.head, self
        tcp = header_signal(m, TCP, head)
        header_len = Cat(Const(0, 2), tcp.data_offset)
        syn = (tcp.flags & SYN).any()
        pos = Signal(range(MAX_HEADER_BYTES + 4))
        walking = Signal()
        done = self.done

        def byte(offset):
            value = Signal(8)
            with m.Switch(pos):
                for p in range(MAX_HEADER_BYTES):
                    if p + offset < MAX_HEADER_BYTES:
                        with m.Case(p):
                            m.d.comb += value.eq(head[8 * (p + offset):8 * (p + offset) + 8])
            return value

        # A SACK option's blocks, one a cycle from the aligned word ``block_at`` (of the header's
        # 32-bit words), ``blocks`` of them left.
        block_at = Signal(range(MAX_HEADER_BYTES // 4))
        blocks = Signal(range(5))
        nth = Signal(range(5))                  # blocks read so far
        first = Signal(SACK_BLOCK)              # the option's first block, and the bytes it
        first_bytes = Signal(32)                # counted

        def word(offset):
            value = Signal(32)
            with m.Switch(block_at):
                for w in range(TCP_HEADER_BYTES // 4, MAX_HEADER_BYTES // 4 - offset):
                    with m.Case(w):
                        m.d.comb += value.eq(byte_reverse(head[32 * (w + offset):
                                                               32 * (w + offset + 1)]))
            return value

        kind, length, b2, b3 = byte(0), byte(1), byte(2), byte(3)
        left, right = word(0), word(1)
        with m.If(~self.head_valid | self.clear):
            m.d.sync += [walking.eq(0), done.eq(0), blocks.eq(0)]
        with m.Elif(~walking & ~done):
            none = [o.has_mss.eq(0), o.has_ws.eq(0), o.has_sack.eq(0), o.sack_valid.eq(0),
                    o.sack_bytes.eq(0), nth.eq(0)]
            with m.If(tcp.data_offset > 5):
                m.d.sync += [walking.eq(1), pos.eq(TCP_HEADER_BYTES), *none]
            with m.Else():
                m.d.sync += [done.eq(1), *none]
        with m.Elif(walking & (blocks != 0)):
            m.d.sync += [blocks.eq(blocks - 1), block_at.eq(block_at + 2), nth.eq(nth + 1)]
            beyond_ack = seq_lt(tcp.ack, right) & seq_lt(left, right)
            held = Signal(32)           # this block's bytes beyond the ACK
            m.d.comb += held.eq(Mux(beyond_ack,
                                    right - Mux(seq_lt(left, tcp.ack), tcp.ack, left), 0))
            dsack = ((nth == 1) & seq_le(left, first.start) & seq_le(first.end, right)
                     & beyond_ack)
            with m.If(nth == 0):
                m.d.sync += [first.start.eq(left), first.end.eq(right), first_bytes.eq(held)]
            with m.If(dsack):
                m.d.sync += o.sack_bytes.eq(o.sack_bytes - first_bytes + held)
            with m.Else():
                m.d.sync += o.sack_bytes.eq(o.sack_bytes + held)
            with m.If(beyond_ack):
                m.d.sync += o.sack_valid.eq(1)
            with m.If(beyond_ack & (~o.sack_valid | seq_lt(left, o.sack.start) | dsack)):
                m.d.sync += [o.sack.start.eq(left), o.sack.end.eq(right)]
            with m.If(beyond_ack & (~o.sack_valid | seq_lt(o.sack_high, right))):
                m.d.sync += o.sack_high.eq(right)
        with m.Elif(walking):
            end = (pos >= header_len) | (kind == 0)
            nop = kind == 1
            bad = ~nop & ((length < 2) | (pos + length > header_len))
            with m.If(end | bad):
                m.d.sync += [walking.eq(0), done.eq(1)]
            with m.Elif(nop):
                m.d.sync += pos.eq(pos + 1)
            with m.Else():
                m.d.sync += pos.eq(pos + length)
                with m.If(syn & (kind == OPT_MSS) & (length == 4)):
                    m.d.sync += [o.mss.eq(Cat(b3, b2)), o.has_mss.eq(1)]
                with m.If(syn & (kind == OPT_WSCALE) & (length == 3)):
                    m.d.sync += [o.ws.eq(Mux(b2 > MAX_WSCALE, MAX_WSCALE, b2)), o.has_ws.eq(1)]
                with m.If(syn & (kind == OPT_SACK_OK) & (length == 2)):
                    m.d.sync += o.has_sack.eq(1)
                n = length[3:]
                aligned = (pos[:2] == 2) & (length[:3] == 2) & (n >= 1) & (n <= 4)
                with m.If(~syn & (kind == OPT_SACK) & aligned):
                    m.d.sync += [blocks.eq(n), block_at.eq((pos + 2)[2:])]
        return m


class SegmentHead(wiring.Component):
    """Hold each verified segment while the engine decides on it.

    A segment's length and metadata are taken from ``hdr`` (one at a time: ``hdr.ready`` is low
    while one is held) and its header bytes from the first words of ``data``
    (:class:`~apiary.stream.peek.PayloadPeek`, 60 bytes); once its options are read
    (:class:`TcpOptions`) all of it is offered on ``segment``. The engine takes it with its
    verdict: ``segment.ready`` (raised only with ``segment.valid``) and ``keep``; a kept
    segment's words, header included, go on ``words``, another's are dropped. ``taken``
    pulses as a segment comes in from ``hdr``.

    Latency: ``segment`` is valid once the header is captured (:class:`PayloadPeek`) and
    :class:`TcpOptions` is done: 2 cycles after the metadata comes in for a segment that is no
    SYN whose header comes with it in one word. The next segment's metadata is taken from the
    cycle after the verdict.
    """

    def __init__(self, width: int) -> None:
        self._width = width
        super().__init__({
            "hdr": In(stream.Signature(packet_layout())),
            "data": In(payload_signature(width)),
            "segment": Out(stream.Signature(RX_SEGMENT)),
            "keep": In(1),
            "words": Out(payload_signature(width)),
            "taken": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cur = Signal(packet_layout())
        cur_valid = Signal()
        m.d.comb += self.hdr.ready.eq(~cur_valid)
        with m.If(self.hdr.valid & self.hdr.ready):
            m.d.sync += [cur.eq(self.hdr.payload), cur_valid.eq(1)]
            m.d.comb += self.taken.eq(1)
        m.submodules.peek = peek = PayloadPeek(self._width, MAX_HEADER_BYTES, slack=4)
        connect(m, source=flipped(self.data), peek=peek.i)
        connect(m, peek=peek.o, store=flipped(self.words))
        m.submodules.options = opts = TcpOptions()
        seg = self.segment.payload
        m.d.comb += [
            opts.head.eq(peek.head), opts.head_valid.eq(peek.head_valid),
            opts.clear.eq(peek.verdict.valid),
            self.segment.valid.eq(cur_valid & peek.head_valid & opts.done),
            seg.packet.eq(cur), seg.head.eq(peek.head), seg.head_len.eq(peek.head_len),
            seg.mss.eq(opts.mss), seg.has_mss.eq(opts.has_mss), seg.ws.eq(opts.ws),
            seg.has_ws.eq(opts.has_ws), seg.has_sack.eq(opts.has_sack),
            seg.sack.eq(opts.sack), seg.sack_high.eq(opts.sack_high),
            seg.sack_bytes.eq(opts.sack_bytes), seg.sack_valid.eq(opts.sack_valid),
            peek.verdict.valid.eq(self.segment.ready), peek.verdict.payload.keep.eq(self.keep),
        ]
        with m.If(self.segment.ready):
            m.d.sync += cur_valid.eq(0)
        return m


class CommitQueue(wiring.Component):
    """Commits waiting for their stores (8 at most), in order.

    ``acked`` pulses with each acknowledgement of a store by the receive buffer; they are
    counted. The oldest commit is offered on ``o`` if it waits for no store (``store`` clear:
    a FIN alone) or an acknowledgement is counted, which taking it uses up. Stores are
    acknowledged in the order they were sent, so each commit's acknowledgement is its store's.

    Latency: a commit is offered from the cycle after it is queued (or after the
    acknowledgement it waits for; with ``at_once``, in the acknowledgement's cycle).
    Throughput: one commit a cycle. Nothing is dropped.
    """

    def __init__(self, at_once: bool = False) -> None:
        self._at_once = at_once
        super().__init__({"i": In(stream.Signature(COMMIT)), "o": Out(stream.Signature(COMMIT)),
                          "acked": In(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.queue = queue = Queue(COMMIT, 8)
        connect(m, engine=flipped(self.i), queue=queue.i)
        acks = Signal(8)
        take = Signal()
        head = queue.o.payload
        counted = (acks != 0) | self.acked if self._at_once else acks != 0
        m.d.comb += [self.o.valid.eq(queue.o.valid & (~head.store | counted)),
                     self.o.payload.eq(head), queue.o.ready.eq(self.o.ready)]
        with m.If(self.o.ready):
            m.d.comb += take.eq(head.store)
        m.d.sync += acks.eq(acks + self.acked - take)
        return m


class SegmentStore(wiring.Component):
    """Each kept segment's new bytes to the receive buffer, as a ``STORE_MEM`` message.

    A store on ``i`` (up to 4 wait) is the message's :data:`~.queues.MEM_REQUEST` (to the
    memory tile at ``dst``, from ``src``) and ``cut``, the bytes of the segment's next packet on
    ``words`` (the kept segments, whole, in order) not to store: its header and the bytes
    before the new ones (:class:`~apiary.stream.realign.StreamStrip`). The descriptor goes on
    ``o_hdr`` (``descriptor``: the sender's layout), the bytes kept on ``o_data``. The engine
    offers a store only while ``i.ready`` (it checks for room before it takes the segment).

    Latency: the descriptor is offered from the cycle after the store is queued (with
    ``through``, from that cycle, when nothing waits before it); the bytes follow
    :class:`~apiary.stream.realign.StreamStrip`'s. Nothing is dropped. Segments are at most
    ``max_segment`` bytes (:attr:`~.config.TcpConfig.max_segment`).
    """

    def __init__(self, width: int, *, dst: tuple, src: tuple,
                 descriptor: data.StructLayout, max_segment: int = MAX_SEGMENT,
                 through: bool = False) -> None:
        self._width, self._dst, self._src, self._descriptor = width, dst, src, descriptor
        self._max, self._through = max_segment, through
        super().__init__({
            "i": In(stream.Signature(store_layout(max_segment))),
            "words": In(payload_signature(width)),
            "o_hdr": Out(stream.Signature(descriptor)),
            "o_data": Out(payload_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.stores = stores = memory_requests(
            self._descriptor, msg_type=STORE_MEM, dst=self._dst, src=self._src, stores=True,
            fall_through=self._through)
        m.submodules.cut_q = cut_q = Queue(range(self._max + 1), 4, fall_through=self._through)
        m.submodules.strip = strip = StreamStrip(self._width, self._max)
        m.d.comb += [
            stores.i.valid.eq(self.i.valid), stores.i.payload.eq(self.i.payload.store),
            cut_q.i.valid.eq(self.i.valid), cut_q.i.payload.eq(self.i.payload.cut),
            self.i.ready.eq(stores.i.ready & cut_q.i.ready),
        ]
        connect(m, segments=flipped(self.words), strip=strip.i)
        connect(m, cuts=cut_q.o, strip=strip.n)
        connect(m, strip=strip.o, sender=flipped(self.o_data))
        connect(m, stores=stores.o, sender=flipped(self.o_hdr))
        return m


class RxEngine(wiring.Component):
    """The receive tile's engine: per-flow receive state, one event at a time (see the module
    docstring for what it does with them).

    Events, in this order of priority, each taken only when what it may queue has room: a
    commit whose store is acknowledged (from its :class:`CommitQueue`, which ``acked`` feeds),
    a transmit event from ``wires``, a segment on ``segment`` (its verdict is
    ``segment.ready`` with ``keep``), an application request on ``app`` (needs no room: its
    rare error replies are dropped, counted in ``replies_dropped``, if ``messages`` is full),
    an ARP answer on ``arp``, a flow's notification (queued by earlier events, each flow once).
    An event takes 2 cycles (3 for a segment or an ARP answer, which first look the flow up):
    the flow's record is read, then decided on, written back, and what follows is offered:
    an event to the transmit tile (``wires``), a store on ``stores`` and its commit, a message
    to an application on ``messages``, an ARP request on ``resolve``. A segment's own figures
    (its end, length, verdict on its header) are registered while its flow is looked up, so
    the decision compares each with the flow's record in one carry chain; the store's fields
    do not wait for the decision, only its ``valid`` does.

    Parameters
    ----------
    config : TcpConfig
    ports : dict
        The tile's routes by local port (the listeners, :class:`NextHopTable` entries).
    rx_mem : (x, y)
        The receive buffer's memory tile, which applications are told of.
    apiary : bool
        Under Apiary: a new connection takes a pair of rings from ``pool``
        (:class:`~.segments.BufferPool`), and rings are addressed by their handles.
    commit_at_once : bool
        A commit is taken in the cycle its store's acknowledgement comes
        (:class:`CommitQueue` ``at_once``), a cycle earlier: a path from ``acked`` into the
        engine's choice of event (from 128 bits up, as the layers' queues).
    """

    def __init__(self, config: TcpConfig, *, ports: dict, rx_mem: tuple[int, int],
                 apiary: bool = False, commit_at_once: bool = False) -> None:
        self._config, self._ports, self._rx_mem, self._apiary = config, ports, rx_mem, apiary
        self._commit_at_once = commit_at_once
        members = {
            "wires": Out(TcpWires(config.flows)),
            "segment": In(stream.Signature(RX_SEGMENT)),
            "keep": Out(1),
            "app": In(stream.Signature(APP_REQUEST)),
            "arp": In(stream.Signature(ARP_ANSWER)),
            "acked": In(1),
            "stores": Out(stream.Signature(store_layout(config.max_segment))),
            "messages": Out(stream.Signature(APP_MESSAGE)),
            "resolve": Out(stream.Signature(unsigned(32))),
            "counters": Out(CounterSignature(ENGINE_COUNTERS)),
        }
        if apiary:
            members["pool"] = Out(POOL_PORT)
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cfg, wires, counters = self._config, self.wires, self.counters
        flows, sb = cfg.flows, slot_bits(cfg.flows)
        m.submodules.ev_q = ev_q = Queue(RX_EVENT, 8)
        # Every event taken but a notification is queued, whether or not it has anything for
        # the transmit tile (its verdict comes late in the cycle, too late for the queue's write
        # enable); the empty ones are dropped at the queue's head, without waiting for the
        # transmit tile. The engine queues at most one every 2 cycles and the head drops one a
        # cycle, so an empty one delays the next event only while the transmit tile is not
        # taking them.
        wanted = _wanted(ev_q.o.payload)
        m.d.comb += [
            wires.rx_event.valid.eq(ev_q.o.valid & wanted),
            wires.rx_event.payload.eq(ev_q.o.payload),
            ev_q.o.ready.eq(wires.rx_event.ready | ~wanted),
        ]
        m.submodules.commit_q = commit_q = CommitQueue(at_once=self._commit_at_once)
        m.submodules.notify_q = notify_q = FlowQueue(flows)
        m.d.comb += commit_q.acked.eq(self.acked)

        # -- state -------------------------------------------------------------------------------
        m.submodules.state = state_mem = Memory(shape=RX_STATE, depth=flows, init=[])
        rd = state_mem.read_port(transparent_for=())
        peer_rd = state_mem.read_port(transparent_for=())
        wr = state_mem.write_port()
        m.d.comb += [peer_rd.addr.eq(wires.rx_read_addr), wires.rx_read_data.eq(peer_rd.data)]
        m.submodules.table = table = FlowTable(flows, cfg.ways)
        m.submodules.ports = ports = NextHopTable(self._ports, 16)
        s = Signal(RX_STATE)
        m.d.comb += s.eq(rd.data)
        clock = Signal(32)              # the ISN clock
        m.d.sync += clock.eq(clock + 1)
        seg = self.segment.payload
        tcp = header_signal(m, TCP, seg.head)
        plan = self._plan(m, cfg.rx_ring, seg, tcp)

        # -- the engine ----------------------------------------------------------------------
        e = SimpleNamespace(
            cfg=cfg, sb=sb, ring=cfg.rx_ring, ring_log2=cfg.rx_ring_log2, s=s,
            t=wires.tx_read_data, tcp=tcp, cur=seg.packet, opts=seg, plan=plan,
            ports=ports, wires=wires, counters=counters, clock=clock, rd=rd, table=table,
            half_open=Signal(range(flows + 1)), pending_open=Signal(OPEN), open_busy=Signal(),
            kind=Signal(range(6)), slot=Signal(sb), gen=Signal(GEN_BITS), executing=Signal(),
            app_ev=Signal(APP_REQUEST), arp_ev=Signal(ARP_ANSWER), commit_ev=Signal(COMMIT),
            txev=Signal.like(wires.tx_event.payload), found=Signal(), can_alloc=Signal(),
            new=Signal(RX_STATE), write=Signal(), ev=Signal(RX_EVENT), notify=Signal(),
            app_msg=Signal(APP_MESSAGE), app_push=Signal(), store=Signal(MEM_REQUEST),
            cut=Signal(range(cfg.max_segment + 1)), store_push=Signal(), commit=Signal(COMMIT),
            commit_push=Signal(), arp_push=Signal(), arp_ip=Signal(32), verdict=Signal(),
            keep=Signal(),
            tbl_insert=Signal(), tbl_remove=Signal(), release=Signal(),
            half_delta=Signal(range(-1, 2)),
            reply_room=Signal(), arp_room=Signal(), pool=self.pool if self._apiary else None,
        )
        slot, kind = e.slot, e.kind
        m.d.comb += [e.new.eq(s), e.ev.slot.eq(slot), e.ev.gen.eq(e.new.gen)]
        # What each event may queue must have room before it is taken, except an application
        # request: the tile's input must never wait for its output, and application requests
        # share that input with the memory's acknowledgements. So a request needs no room: its
        # rare error replies are dropped (counted) if the reply queue is full.
        go = {
            _COMMIT_EV: commit_q.o.valid & ev_q.i.ready,
            _TXEV: wires.tx_event.valid & ev_q.i.ready,
            _SEG: self.segment.valid & ev_q.i.ready & self.stores.ready & commit_q.i.ready,
            _APP: self.app.valid,
            _ARP: self.arp.valid & ev_q.i.ready & self.messages.ready,
            _NOTIFY: notify_q.o.valid & self.messages.ready,
        }
        m.d.comb += [e.reply_room.eq(self.messages.ready), e.arp_room.eq(self.resolve.ready)]
        key = Signal(FLOW_KEY)
        # The flow table is searched in IDLE, when `kind` still names the previous event: an
        # ARP answer being taken searches for the pending open's key, anything else for the
        # segment's.
        m.d.comb += [
            key.peer_ip.eq(e.cur.meta.peer_ip), key.peer_port.eq(tcp.src_port),
            key.local_port.eq(tcp.dst_port),
            table.key.eq(Mux(self.arp.ready, e.pending_open.key, key)),
        ]
        self._dispatch(m, e, go, commit_q.o, notify_q.o)
        m.d.comb += wires.tx_read_addr.eq(rd.addr)

        # -- effects -------------------------------------------------------------------------
        m.d.comb += [
            wr.addr.eq(slot), wr.en.eq(e.write), wr.data.eq(e.new),
            ev_q.i.valid.eq(e.executing & (kind != _NOTIFY)), ev_q.i.payload.eq(e.ev),
            self.messages.valid.eq(e.app_push), self.messages.payload.eq(e.app_msg),
            self.stores.valid.eq(e.store_push), self.stores.payload.store.eq(e.store),
            self.stores.payload.cut.eq(e.cut),
            commit_q.i.valid.eq(e.commit_push), commit_q.i.payload.eq(e.commit),
            self.resolve.valid.eq(e.arp_push), self.resolve.payload.eq(e.arp_ip),
            self.segment.ready.eq(e.verdict), self.keep.eq(e.keep),
            table.insert.eq(e.tbl_insert), table.remove.eq(e.tbl_remove),
            table.remove_key.peer_ip.eq(s.peer_ip), table.remove_key.peer_port.eq(s.peer_port),
            table.remove_key.local_port.eq(s.local_port), table.remove_place.eq(s.place),
            table.release.eq(e.release), table.release_slot.eq(slot),
            ports.key.eq(tcp.dst_port),
        ]
        with m.If(e.app_push & ~self.messages.ready):
            count(m, counters.replies_dropped)
        m.d.sync += e.half_open.eq(e.half_open + e.half_delta)
        m.d.comb += [notify_q.i.valid.eq(e.notify), notify_q.i.payload.eq(slot)]
        return m

    @staticmethod
    def _plan(m, ring, seg, tcp):
        """A segment's own figures, registered in every cycle: a segment waits unchanged from
        IDLE to its verdict, so in EXEC they are those of the segment the engine decides on,
        and each of the verdict's comparisons is one carry chain between them and the flow's
        record (``seq - ring`` and ``seq_end - ring`` compare with ``rx_head`` instead of
        ``seq`` and ``seq_end`` with ``rx_head + ring``; ``ack - 1`` with ``iss`` instead of
        ``ack`` with ``iss + 1``: the same in sequence space)."""
        cur, flags = seg.packet, tcp.flags
        f_syn, f_rst, f_fin = ((flags & bit).any() for bit in (SYN, RST, FIN))
        header_len = Cat(Const(0, 2), tcp.data_offset)
        seg_len = (cur.length - header_len)[:16]
        seq_end = (tcp.seq + seg_len)[:32]
        p = SimpleNamespace(
            truncated=Signal(), bad_header=Signal(), header_len=Signal(6), has_data=Signal(),
            seq_end=Signal(32), seq_end1=Signal(32), rst_ack=Signal(32), ack_m1=Signal(32),
            seq_mring=Signal(32), end_mring=Signal(32))
        m.d.sync += [
            p.truncated.eq((seg.head_len < 20)
                           | ((tcp.data_offset >= 5) & (header_len > cur.length))),
            p.bad_header.eq((tcp.data_offset < 5) | (f_syn & (f_fin | f_rst))),
            p.header_len.eq(header_len), p.has_data.eq(seg_len != 0),
            p.seq_end.eq(seq_end), p.seq_end1.eq(seq_end + 1),
            p.rst_ack.eq(seq_end + f_syn + f_fin), p.ack_m1.eq(tcp.ack - 1),
            p.seq_mring.eq(tcp.seq - ring), p.end_mring.eq(seq_end - ring),
        ]
        return p

    def _dispatch(self, m, e, go, commits, notify):
        """Pick an event (IDLE; MATCH for a flow lookup), then handle it (EXEC)."""
        wires, app, arp, rd, table, pool = self.wires, self.app, self.arp, e.rd, e.table, e.pool
        kind, slot, sb = e.kind, e.slot, e.sb
        with m.FSM(name="engine"):
            with m.State("IDLE"):
                with m.If(go[_COMMIT_EV]):
                    m.d.comb += [rd.addr.eq(commits.payload.slot), commits.ready.eq(1)]
                    m.d.sync += [kind.eq(_COMMIT_EV), e.commit_ev.eq(commits.payload),
                                 slot.eq(commits.payload.slot), e.gen.eq(commits.payload.gen)]
                    m.next = "EXEC"
                with m.Elif(go[_TXEV]):
                    m.d.comb += [rd.addr.eq(wires.tx_event.payload.slot),
                                 wires.tx_event.ready.eq(1)]
                    m.d.sync += [kind.eq(_TXEV), e.txev.eq(wires.tx_event.payload),
                                 slot.eq(wires.tx_event.payload.slot),
                                 e.gen.eq(wires.tx_event.payload.gen)]
                    m.next = "EXEC"
                with m.Elif(go[_SEG]):
                    m.d.comb += table.lookup.eq(1)
                    m.d.sync += kind.eq(_SEG)
                    m.next = "MATCH"
                with m.Elif(go[_APP]):
                    handle = app.payload.meta.flow
                    m.d.comb += [rd.addr.eq(handle[:sb]), app.ready.eq(1)]
                    m.d.sync += [kind.eq(_APP), e.app_ev.eq(app.payload), slot.eq(handle[:sb]),
                                 e.gen.eq(handle[SLOT_BITS:SLOT_BITS + GEN_BITS])]
                    m.next = "EXEC"
                with m.Elif(go[_ARP]):
                    m.d.comb += [table.lookup.eq(1), arp.ready.eq(1)]
                    m.d.sync += [kind.eq(_ARP), e.arp_ev.eq(arp.payload)]
                    m.next = "MATCH"
                with m.Elif(go[_NOTIFY]):
                    m.d.comb += [rd.addr.eq(notify.payload), notify.ready.eq(1)]
                    m.d.sync += [kind.eq(_NOTIFY), slot.eq(notify.payload)]
                    m.next = "EXEC"
            with m.State("MATCH"):
                chosen = Mux(table.hit, table.slot, table.free_slot)
                m.d.comb += rd.addr.eq(chosen)
                m.d.sync += [slot.eq(chosen), e.found.eq(table.hit),
                             e.can_alloc.eq(~table.hit & table.free
                                            & (pool.ready if pool is not None else 1))]
                m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += e.executing.eq(1)
                with m.Switch(kind):
                    with m.Case(_SEG):
                        self._segment(m, e)
                    with m.Case(_COMMIT_EV):
                        self._commit(m, e)
                    with m.Case(_TXEV):
                        self._tx_event(m, e)
                    with m.Case(_APP):
                        self._app(m, e)
                    with m.Case(_ARP):
                        self._open(m, e)
                    with m.Case(_NOTIFY):
                        self._notify(m, e)
                m.next = "IDLE"

    # -- the event handlers (combinational, in the EXEC cycle) -----------------------------------

    def _count(self, m, e, name):
        counter = getattr(e.counters, name)
        count(m, counter)

    def _respond(self, m, e, msg_type, x, y, fbits, **fields):
        """Queue an application message (fields of :data:`APP_META`)."""
        m.d.comb += [e.app_push.eq(1), e.app_msg.msg_type.eq(msg_type), e.app_msg.x.eq(x),
                     e.app_msg.y.eq(y), e.app_msg.fbits.eq(fbits)]
        for name, value in fields.items():
            m.d.comb += getattr(e.app_msg.meta, name).eq(value)

    def _store_addr(self, e, seq):
        """Where byte ``seq`` of the flow's receive ring is: in the ring of its slot, or under
        Apiary at that offset of its segment (a virtual address)."""
        offset = seq[:e.ring_log2]
        if self._apiary:
            return Cat(offset, Const(0, OFFSET_BITS - e.ring_log2), e.s.rx_h)
        return e.cfg.rx_base + Cat(offset, e.slot)

    def _reply_addr(self, e, seq):
        """The ``addr`` an application is told for byte ``seq``: under Apiary its offset in the
        ring (the application adds its own handle)."""
        if self._apiary:
            return seq[:e.ring_log2]
        return self._store_addr(e, seq)

    def _take_rings(self, m, e):
        """A new connection in the slot: under Apiary it takes the spare pair of rings, and the
        slot's previous pair is freed."""
        pool, s, new = e.pool, e.s, e.new
        if pool is None:
            return
        job = pool.take_job
        m.d.comb += [
            new.bufs.eq(1), new.rx_h.eq(pool.pair.rx), new.tx_h.eq(pool.pair.tx),
            pool.take.eq(1), job.old.eq(s.bufs), job.old_rx.eq(s.rx_h), job.old_tx.eq(s.tx_h),
            job.tx.eq(pool.pair.tx), job.flow.eq(self._handle(e, new.gen)),
        ]

    def _handle(self, e, gen=None):
        return Cat(e.slot, Const(0, SLOT_BITS - e.sb), e.s.gen if gen is None else gen)

    def _send_rst(self, m, e, seq, ack, flags):
        """Ask the transmit tile for a reset to the segment's sender (no flow)."""
        cur, tcp = e.cur, e.tcp
        m.d.comb += [
            e.ev.rst.eq(1), e.ev.seq.eq(seq), e.ev.ack.eq(ack), e.ev.rst_flags.eq(flags),
            e.ev.peer_ip.eq(cur.meta.peer_ip), e.ev.peer_port.eq(tcp.src_port),
            e.ev.local_port.eq(tcp.dst_port), e.ev.peer_mac.eq(cur.meta.peer_mac),
            e.ev.vlan.eq(cur.meta.vlan), e.ev.vlan_tci.eq(cur.meta.vlan_tci),
        ]

    def _free(self, m, e):
        """The slot's connection is over: free it and stop its timer."""
        m.d.comb += [e.new.state.eq(ConnState.FREE), e.write.eq(1), e.tbl_remove.eq(1),
                     e.release.eq(1), e.ev.closed.eq(1)]
        with m.If(e.s.half_open):
            m.d.comb += [e.new.half_open.eq(0), e.half_delta.eq(-1)]

    def _abort(self, m, e, status):
        """Reset or timed out: tell the application (if it knows the flow, or opened it)."""
        self._free(m, e)
        with m.If((e.s.announced != 0) | e.s.active):
            # The slot stays taken until the application has been told (_notify).
            m.d.comb += [e.new.state.eq(ConnState.ABORTED), e.new.status.eq(status),
                         e.notify.eq(1), e.release.eq(0)]
        self._count(m, e, "reset")

    def _both_closed(self, m, e):
        """Both FINs are done: TIME-WAIT if we closed first, else free."""
        with m.If(e.s.closed_first):
            m.d.comb += [e.new.state.eq(ConnState.TIME_WAIT), e.write.eq(1), e.ev.linger.eq(1)]
        with m.Else():
            self._free(m, e)
            self._count(m, e, "closed")

    def _segment(self, m, e):
        cfg, s, tcp, opts, new, pl = e.cfg, e.s, e.tcp, e.opts, e.new, e.plan
        flags = tcp.flags
        f_syn, f_ack, f_rst, f_fin = ((flags & bit).any() for bit in (SYN, ACK, RST, FIN))
        m.d.comb += e.verdict.eq(1)
        seq, ackn, win = tcp.seq, tcp.ack, tcp.window

        with m.If(pl.truncated):
            self._count(m, e, "truncated")
        with m.Elif(pl.bad_header):
            self._count(m, e, "bad_header")
        with m.Elif(~e.found):
            with m.If(f_rst):
                self._count(m, e, "no_flow")
            with m.Elif(f_syn & ~f_ack):
                with m.If(~e.ports.hit):
                    self._send_rst(m, e, 0, pl.rst_ack, RST | ACK)
                    self._count(m, e, "no_listener")
                with m.Elif(~e.can_alloc | (e.half_open >= cfg.half_open)):
                    self._count(m, e, "syn_dropped")
                with m.Else():
                    self._accept(m, e, opts, win)
            with m.Elif(f_ack):
                self._send_rst(m, e, ackn, 0, RST)
                self._count(m, e, "no_flow")
            with m.Else():
                self._send_rst(m, e, 0, pl.rst_ack, RST | ACK)
                self._count(m, e, "no_flow")
        with m.Elif(s.state == ConnState.SYN_SENT):
            with m.If(f_ack & (pl.ack_m1 != s.iss)):
                with m.If(~f_rst):
                    self._send_rst(m, e, ackn, 0, RST)
                self._count(m, e, "bad_ack")
            with m.Elif(f_rst):
                with m.If(f_ack):
                    self._abort(m, e, Status.REFUSED)
                with m.Else():
                    self._count(m, e, "rejected")
            with m.Elif(f_syn & f_ack):
                m.d.comb += [
                    new.state.eq(ConnState.ESTABLISHED), new.irs.eq(seq),
                    new.rcv_nxt.eq(seq + 1), new.rcv_stored.eq(seq + 1), new.rx_head.eq(seq + 1),
                    new.snd_una.eq(ackn), new.snd_wnd.eq(win), new.last_win.eq(win),
                    new.peer_mss.eq(Mux(opts.has_mss, opts.mss, DEFAULT_MSS)),
                    new.peer_ws.eq(Mux(opts.has_ws, opts.ws, 0)), new.ws_ok.eq(opts.has_ws),
                    new.sack_ok.eq(opts.has_sack & cfg.sack),
                    e.write.eq(1), e.notify.eq(1),
                    e.ev.ack_now.eq(1), e.ev.acked.eq(1), e.ev.ack.eq(ackn),
                ]
                self._count(m, e, "opened")
            with m.Else():
                self._count(m, e, "rejected")
        with m.Elif(s.state == ConnState.ABORTED):
            self._count(m, e, "rejected")
        with m.Else():
            self._synchronised(m, e, f_syn, f_ack, f_rst, f_fin)

    def _accept(self, m, e, opts, win):
        """A SYN to a port someone listens on: a new half-open connection."""
        new, cur, tcp, s = e.new, e.cur, e.tcp, e.s
        seq = tcp.seq
        m.d.comb += [
            new.eq(0), new.gen.eq(s.gen + 1), new.state.eq(ConnState.SYN_RCVD),
            new.half_open.eq(1), e.half_delta.eq(1),
            new.peer_ip.eq(cur.meta.peer_ip), new.peer_port.eq(tcp.src_port),
            new.local_port.eq(tcp.dst_port), new.peer_mac.eq(cur.meta.peer_mac),
            new.vlan.eq(cur.meta.vlan), new.vlan_tci.eq(cur.meta.vlan_tci),
            new.app_x.eq(e.ports.dst_x), new.app_y.eq(e.ports.dst_y),
            new.app_fbits.eq(e.ports.dst_fbits),
            new.iss.eq(e.clock), new.irs.eq(seq), new.rcv_nxt.eq(seq + 1),
            new.rcv_stored.eq(seq + 1), new.rx_head.eq(seq + 1),
            new.snd_una.eq(e.clock), new.snd_wnd.eq(win), new.last_win.eq(win),
            new.peer_mss.eq(Mux(opts.has_mss, opts.mss, DEFAULT_MSS)),
            new.peer_ws.eq(Mux(opts.has_ws, opts.ws, 0)), new.ws_ok.eq(opts.has_ws),
            new.sack_ok.eq(opts.has_sack & e.cfg.sack),
            e.write.eq(1), e.tbl_insert.eq(1), new.place.eq(e.table.free_place),
            e.ev.open.eq(1), e.ev.seq.eq(e.clock),
            e.ev.app_x.eq(e.ports.dst_x), e.ev.app_y.eq(e.ports.dst_y),
            e.ev.app_fbits.eq(e.ports.dst_fbits),
        ]
        m.d.comb += e.ports.lookup.eq(1)
        self._take_rings(m, e)

    def _synchronised(self, m, e, f_syn, f_ack, f_rst, f_fin):
        """A segment for SYN-RECEIVED, an established connection or TIME-WAIT."""
        s, t, tcp, new, pl = e.s, e.t, e.tcp, e.new, e.plan
        seq, ackn, win = tcp.seq, tcp.ack, tcp.window
        in_window = seq_lt(pl.seq_mring, s.rx_head)         # seq before rx_head + ring
        with m.If(f_rst & (s.state == ConnState.TIME_WAIT)):
            self._count(m, e, "rejected")                   # RFC 1337: TIME-WAIT waits it out
        with m.Elif(f_rst):
            with m.If(seq == s.rcv_nxt):
                self._abort(m, e, Status.RESET)
            with m.Else():
                with m.If(seq_le(s.rcv_nxt, seq) & in_window):
                    m.d.comb += e.ev.ack_now.eq(1)          # a challenge ACK (RFC 5961)
                self._count(m, e, "rejected")
        with m.Elif(f_syn | ~f_ack):
            with m.If(f_syn & (s.state != ConnState.SYN_RCVD)):
                m.d.comb += e.ev.ack_now.eq(1)
            self._count(m, e, "rejected")
        with m.Elif((s.state == ConnState.SYN_RCVD) & (pl.ack_m1 != s.iss)):
            self._send_rst(m, e, ackn, 0, RST)
            self._count(m, e, "bad_ack")
        with m.Else():
            una = s.snd_una
            # The most sent so far: the transmit tile's if its record is this connection's,
            # else ISS + 1. Both comparisons are made, then one is picked.
            tx_current = (t.gen == s.gen) & t.active
            beyond_sent = Mux(tx_current, seq_lt(t.snd_max, ackn), seq_lt(s.iss, pl.ack_m1))
            all_acked = Mux(tx_current, t.snd_max == una, s.iss + 1 == una)
            with m.If(beyond_sent):
                m.d.comb += e.ev.ack_now.eq(1)
                self._count(m, e, "bad_ack")
            with m.Else():
                m.d.comb += e.write.eq(1)
                with m.If(s.state == ConnState.SYN_RCVD):
                    m.d.comb += [new.state.eq(ConnState.ESTABLISHED), new.half_open.eq(0),
                                 e.half_delta.eq(-1), e.notify.eq(1)]
                    self._count(m, e, "opened")
                # The ACK, the window, the duplicate-ACK count.
                # A duplicate is one as RFC 5681 has it or, on a connection with SACK, any ACK of
                # ``una`` that says the peer holds more beyond it than before, with data or a new
                # window (RFC 6675): a peer sending data of its own reports its losses so.
                sack_news = (s.sack_ok & e.opts.sack_valid
                             & (~s.peer_sack_valid | seq_lt(s.peer_sack_high, e.opts.sack_high)))
                with m.If(seq_lt(una, ackn)):
                    m.d.comb += [new.snd_una.eq(ackn), new.dupacks.eq(0), e.ev.acked.eq(1),
                                 e.ev.ack.eq(ackn)]
                with m.Elif((ackn == una) & ~f_fin & ~all_acked
                            & ((~pl.has_data & (win == s.last_win)) | sack_news)):
                    dup = Mux(s.dupacks == 7, 7, s.dupacks + 1)
                    m.d.comb += [new.dupacks.eq(dup), e.ev.dupacks.eq(dup)]
                with m.If(seq_le(una, ackn)):
                    wnd = win << Mux(s.ws_ok, s.peer_ws, 0)
                    m.d.comb += [new.snd_wnd.eq(wnd), new.last_win.eq(win),
                                 new.peer_sack.eq(e.opts.sack),
                                 new.peer_sack_high.eq(e.opts.sack_high),
                                 new.peer_sacked.eq(e.opts.sack_bytes),
                                 new.peer_sack_valid.eq(e.opts.sack_valid & s.sack_ok)]
                    with m.If(wnd > s.snd_wnd):
                        m.d.comb += e.ev.wake.eq(1)
                fin_acked_now = s.our_fin & ~s.fin_acked & seq_lt(s.our_fin_seq, ackn)
                with m.If(fin_acked_now):
                    m.d.comb += new.fin_acked.eq(1)
                    with m.If(s.fin_rcvd):
                        self._both_closed(m, e)
                    with m.Else():
                        m.d.comb += e.ev.linger.eq(1)       # FIN-WAIT-2: not forever
                self._data(m, e, f_fin, in_window)

    def _data(self, m, e, f_fin, in_window):
        """The segment's data and FIN: in order, out of order, or nothing new.

        What is accepted ends at ``acc_end``, the earlier of the segment's end and the
        window's (``wnd_end``, ``rx_head + ring``). Every comparison with ``acc_end`` is made
        against both, then picked by which one it is (``to_seg_end``), and the store's fields
        are set whether or not it is pushed, so that no comparison waits for another."""
        s, tcp, new, pl = e.s, e.tcp, e.new, e.plan
        seq, seq_end, rs = tcp.seq, pl.seq_end, s.rcv_stored
        wnd_end = Signal(32)
        m.d.comb += wnd_end.eq(s.rx_head + e.ring)
        to_seg_end = seq_lt(pl.end_mring, s.rx_head)        # seq_end before wnd_end
        acc_end = Mux(to_seg_end, seq_end, wnd_end)

        def before_acc_end(x):                              # seq_lt(x, acc_end)
            return Mux(to_seg_end, seq_lt(x, seq_end), seq_lt(x, wnd_end))

        def after_acc_end(x):                               # seq_lt(acc_end, x)
            return Mux(to_seg_end, seq_lt(seq_end, x), seq_lt(wnd_end, x))

        has_data = pl.has_data
        starts_later = seq_lt(rs, seq)
        in_order = has_data & ~starts_later & before_acc_end(rs)
        ooo = has_data & starts_later & in_window
        all_taken = to_seg_end | (pl.end_mring == s.rx_head)      # acc_end == seq_end
        fin_here = f_fin & all_taken & ~starts_later & seq_le(rs, seq_end)
        # The two out-of-order ranges, A (``ooo_``) and B (``ooo2_``): B held only beside A,
        # and after it with a gap. What the segment's bytes reach, or touch (adjoin or overlap).
        reaches_a = s.ooo_valid & ~after_acc_end(s.ooo_start)         # ooo_start <= acc_end
        reaches_b = s.ooo2_valid & ~after_acc_end(s.ooo2_start)
        touches_a = reaches_a & seq_le(seq, s.ooo_end)
        touches_b = reaches_b & seq_le(seq, s.ooo2_end)
        live = (s.state == ConnState.ESTABLISHED) | (s.state == ConnState.SYN_RCVD)

        # The store: from rcv_stored (in order) or from seq (out of order) to acc_end.
        start = Mux(starts_later, seq, rs)
        m.d.comb += [
            e.store.addr.eq(self._store_addr(e, start)), e.store.size.eq(acc_end - start),
            e.store.wrap.eq(e.ring_log2),
            e.cut.eq(pl.header_len + Mux(starts_later, 0, rs - seq)),
            e.commit.slot.eq(e.slot), e.commit.gen.eq(s.gen),
        ]

        def store():
            m.d.comb += [e.keep.eq(1), e.store_push.eq(1), e.commit_push.eq(1),
                         e.commit.store.eq(1)]
            self._count(m, e, "stored")

        with m.If(~live):
            with m.If(has_data | f_fin):
                m.d.comb += e.ev.ack_now.eq(1)      # TIME-WAIT: the FIN again, or stray data
                self._count(m, e, "duplicate")
        with m.Elif(in_order):
            # Up to acc_end, and on to the end of each range it reaches (B's: then A's too).
            stored, merge_a, merge_b = Signal(32), Signal(), Signal()
            m.d.comb += [
                merge_a.eq(reaches_a & ~fin_here), merge_b.eq(reaches_b & ~fin_here),
                stored.eq(Mux(merge_b, self._end_past(s.ooo2_end, acc_end, after_acc_end),
                              Mux(merge_a, self._end_past(s.ooo_end, acc_end, after_acc_end),
                                  acc_end))),
            ]
            with m.If(merge_b):
                m.d.comb += [new.ooo_valid.eq(0), new.ooo2_valid.eq(0), new.ooo_report.eq(0)]
            with m.Elif(merge_a):
                m.d.comb += [new.ooo_valid.eq(s.ooo2_valid), new.ooo_start.eq(s.ooo2_start),
                             new.ooo_end.eq(s.ooo2_end), new.ooo2_valid.eq(0),
                             new.ooo_report.eq(0)]
            store()
            m.d.comb += [new.rcv_stored.eq(Mux(fin_here, pl.seq_end1, stored)),
                         e.commit.advance.eq(1), e.commit.end.eq(stored),
                         e.commit.fin.eq(fin_here)]
        with m.Elif(fin_here):
            m.d.comb += [new.rcv_stored.eq(pl.seq_end1), e.commit_push.eq(1),
                         e.commit.advance.eq(1), e.commit.end.eq(seq_end), e.commit.fin.eq(1)]
        with m.Elif(ooo & (~s.ooo2_valid | touches_a | touches_b)):
            store()
            m.d.comb += e.ev.ack_now.eq(1)
            self._count(m, e, "reordered")
            self._ooo_ranges(m, e, seq, acc_end, after_acc_end, touches_a, touches_b)
        with m.Elif(ooo):
            m.d.comb += e.ev.ack_now.eq(1)
            self._count(m, e, "ooo_dropped")
        with m.Elif(has_data | f_fin):
            m.d.comb += e.ev.ack_now.eq(1)
            with m.If(seq_le(seq_end, rs)):
                self._count(m, e, "duplicate")
            with m.Else():
                self._count(m, e, "out_of_window")

    @staticmethod
    def _end_past(end, acc_end, after_acc_end):
        """The later of a range's ``end`` and ``acc_end``."""
        return Mux(after_acc_end(end), end, acc_end)

    def _ooo_ranges(self, m, e, seq, acc_end, after_acc_end, touches_a, touches_b):
        """An out-of-order segment ``[seq, acc_end)`` that is kept: it starts range A (none
        yet), grows the ranges it touches (both: one range, A), or is a range of its own, B
        (after A) or A (before A, which becomes B). ``ooo_report`` says which range holds it,
        the one the next ACK reports (RFC 2018: the block with the latest segment first)."""
        s, new = e.s, e.new
        a_start = seq_min(seq, s.ooo_start)
        with m.If(~s.ooo_valid):
            m.d.comb += [new.ooo_valid.eq(1), new.ooo_start.eq(seq), new.ooo_end.eq(acc_end),
                         new.ooo_report.eq(0)]
        with m.Elif(touches_a & touches_b):
            m.d.comb += [new.ooo_start.eq(a_start),
                         new.ooo_end.eq(self._end_past(s.ooo2_end, acc_end, after_acc_end)),
                         new.ooo2_valid.eq(0), new.ooo_report.eq(0)]
        with m.Elif(touches_a):
            m.d.comb += [new.ooo_start.eq(a_start),
                         new.ooo_end.eq(self._end_past(s.ooo_end, acc_end, after_acc_end)),
                         new.ooo_report.eq(0)]
        with m.Elif(touches_b):
            m.d.comb += [new.ooo2_start.eq(seq_min(seq, s.ooo2_start)),
                         new.ooo2_end.eq(self._end_past(s.ooo2_end, acc_end, after_acc_end)),
                         new.ooo_report.eq(1)]
        with m.Elif(seq_lt(s.ooo_end, seq)):                  # B free: after A
            m.d.comb += [new.ooo2_valid.eq(1), new.ooo2_start.eq(seq),
                         new.ooo2_end.eq(acc_end), new.ooo_report.eq(1)]
        with m.Else():                                        # B free: before A
            m.d.comb += [new.ooo2_valid.eq(1), new.ooo2_start.eq(s.ooo_start),
                         new.ooo2_end.eq(s.ooo_end), new.ooo_start.eq(seq),
                         new.ooo_end.eq(acc_end), new.ooo_report.eq(0)]

    def _commit(self, m, e):
        """A store is acknowledged (or a FIN needs none): what was stored in order counts."""
        s, c, new = e.s, e.commit_ev, e.new
        live = (s.state == ConnState.ESTABLISHED) | (s.state == ConnState.TIME_WAIT)
        with m.If((s.gen == c.gen) & live & c.advance):
            m.d.comb += [new.rcv_nxt.eq(c.end + c.fin), e.write.eq(1), e.ev.ack_now.eq(1)]
            with m.If(s.rx_req | c.fin):
                m.d.comb += e.notify.eq(1)
            with m.If(c.fin & ~s.fin_rcvd):
                m.d.comb += new.fin_rcvd.eq(1)
                with m.If(s.fin_acked):
                    self._both_closed(m, e)

    def _tx_event(self, m, e):
        s, x, new = e.s, e.txev, e.new
        with m.If((s.gen == x.gen) & (s.state != ConnState.FREE)
                  & (s.state != ConnState.ABORTED)):
            with m.If(x.fin_sent & ~s.our_fin):
                m.d.comb += [new.our_fin.eq(1), new.our_fin_seq.eq(x.seq),
                             new.closed_first.eq(~s.fin_rcvd), e.write.eq(1)]
            with m.If(x.expire & ((s.state == ConnState.TIME_WAIT)
                                  | (s.fin_acked & ~s.fin_rcvd))):
                self._free(m, e)
                self._count(m, e, "closed")
            with m.Elif(x.abort):
                self._abort(m, e, Status.TIMEOUT)

    def _app(self, m, e):
        s, a, new = e.s, e.app_ev, e.new
        meta = a.meta
        # An application knows a flow from its first notification (the receive buffer's).
        ours = (s.gen == e.gen) & (s.announced != 0) & ((s.state == ConnState.ESTABLISHED)
                                                        | (s.state == ConnState.TIME_WAIT))
        closed = dict(flow=meta.flow, status=Status.CLOSED)
        with m.Switch(a.msg_type):
            with m.Case(MsgType.TCP_RX_MSG_REQ):
                with m.If(ours):
                    m.d.comb += [new.rx_req.eq(1), new.rx_req_len.eq(Mux(meta.length == 0, 1,
                                                                         meta.length)),
                                 e.write.eq(1), e.notify.eq(1)]
                with m.Elif((s.gen != e.gen) | (s.state != ConnState.ABORTED)):
                    self._respond(m, e, MsgType.TCP_RX_MSG_RESP, a.x, a.y, a.fbits, **closed)
                    self._count(m, e, "app_bad")
            with m.Case(MsgType.TCP_RX_ADJUST_PTR):
                head = Signal(32)
                m.d.comb += head.eq(s.irs + 1 + meta.ptr)
                with m.If(ours & seq_le(s.rx_head, head) & seq_le(head, s.rcv_nxt)):
                    half = e.ring // 2
                    was = Signal(32)
                    now = Signal(32)
                    m.d.comb += [was.eq(s.rx_head + e.ring - s.rcv_nxt),
                                 now.eq(head + e.ring - s.rcv_nxt),
                                 new.rx_head.eq(head), e.write.eq(1)]
                    with m.If((was < half) & (now >= half)):
                        m.d.comb += e.ev.ack_now.eq(1)      # a window update
                with m.Else():
                    self._count(m, e, "app_bad")
            with m.Case(MsgType.TCP_PEER_REQ):
                # Answered in the flow's turn (after what is queued for it, and with room).
                with m.If((s.gen == e.gen) & (s.announced != 0)):
                    m.d.comb += [new.peer_req.eq(1), e.write.eq(1), e.notify.eq(1)]
                with m.Else():
                    self._respond(m, e, MsgType.TCP_PEER_RESP, a.x, a.y, a.fbits, **closed)
                    self._count(m, e, "app_bad")
            with m.Case(MsgType.TCP_OPEN_REQ):
                with m.If(e.open_busy | ~e.arp_room):
                    self._respond(m, e, MsgType.TCP_NEW_FLOW_NOTIF, a.x, a.y, a.fbits,
                                  status=Status.BUSY, peer_ip=meta.peer_ip,
                                  peer_port=meta.peer_port, local_port=meta.local_port)
                with m.Else():
                    p = e.pending_open
                    m.d.sync += [p.key.peer_ip.eq(meta.peer_ip), p.key.peer_port.eq(meta.peer_port),
                                 p.key.local_port.eq(meta.local_port), p.x.eq(a.x), p.y.eq(a.y),
                                 p.fbits.eq(a.fbits), e.open_busy.eq(1)]
                    m.d.comb += [e.arp_push.eq(1), e.arp_ip.eq(meta.peer_ip)]
            with m.Default():
                self._count(m, e, "app_bad")

    def _open(self, m, e):
        """The ARP tile answered: open the pending connection (the flow table was searched)."""
        s, a, p, new = e.s, e.arp_ev, e.pending_open, e.new
        answer = dict(peer_ip=p.key.peer_ip, peer_port=p.key.peer_port,
                      local_port=p.key.local_port)
        with m.If(e.open_busy & (a.peer_ip == p.key.peer_ip)):
            m.d.sync += e.open_busy.eq(0)
            with m.If(a.peer_mac == 0):
                self._respond(m, e, MsgType.TCP_NEW_FLOW_NOTIF, p.x, p.y, p.fbits,
                              status=Status.UNREACHABLE, **answer)
            with m.Elif(~e.can_alloc):
                self._respond(m, e, MsgType.TCP_NEW_FLOW_NOTIF, p.x, p.y, p.fbits,
                              status=Status.BUSY, **answer)
            with m.Else():
                m.d.comb += [
                    new.eq(0), new.gen.eq(s.gen + 1), new.state.eq(ConnState.SYN_SENT),
                    new.active.eq(1), new.peer_ip.eq(p.key.peer_ip),
                    new.peer_port.eq(p.key.peer_port), new.local_port.eq(p.key.local_port),
                    new.peer_mac.eq(a.peer_mac), new.vlan.eq(a.vlan), new.vlan_tci.eq(a.vlan_tci),
                    new.app_x.eq(p.x), new.app_y.eq(p.y), new.app_fbits.eq(p.fbits),
                    new.iss.eq(e.clock), new.snd_una.eq(e.clock), new.peer_mss.eq(DEFAULT_MSS),
                    e.write.eq(1), e.tbl_insert.eq(1), new.place.eq(e.table.free_place),
                    e.ev.open.eq(1), e.ev.active.eq(1), e.ev.seq.eq(e.clock),
                    e.ev.app_x.eq(p.x), e.ev.app_y.eq(p.y), e.ev.app_fbits.eq(p.fbits),
                ]
                self._take_rings(m, e)

    def _notify(self, m, e):
        """Tell the flow's application what it is waiting for: one message per event."""
        cfg, s, new = e.cfg, e.s, e.new
        app = (s.app_x, s.app_y, s.app_fbits)
        handle = self._handle(e)
        live = (s.state == ConnState.ESTABLISHED) | (s.state == ConnState.TIME_WAIT)
        mem_x, mem_y = self._rx_mem
        with m.If(s.peer_req):
            self._respond(m, e, MsgType.TCP_PEER_RESP, *app, flow=handle, status=Status.OK,
                          peer_ip=s.peer_ip, peer_port=s.peer_port, local_port=s.local_port)
            # Whatever else the flow waits for takes its next turn.
            m.d.comb += [new.peer_req.eq(0), e.write.eq(1), e.notify.eq(1)]
        with m.Elif(s.state == ConnState.ABORTED):
            m.d.comb += [new.state.eq(ConnState.FREE), e.write.eq(1), e.release.eq(1)]
            with m.If(s.announced != 0):
                self._respond(m, e, MsgType.TCP_RX_MSG_RESP, *app, flow=handle, status=s.status)
            with m.Else():
                self._respond(m, e, MsgType.TCP_NEW_FLOW_NOTIF, *app, status=s.status,
                              peer_ip=s.peer_ip, peer_port=s.peer_port, local_port=s.local_port)
        with m.Elif(live & (s.announced != 2)):
            send = s.announced == 1
            base_rx = cfg.rx_base + Cat(Const(0, e.ring_log2), e.slot)
            base_tx = cfg.tx_base + Cat(Const(0, cfg.tx_ring_log2), e.slot)
            if self._apiary:                # the ring's handle, which the grant sends
                base_rx, base_tx = s.rx_h, s.tx_h
            self._respond(m, e, MsgType.TCP_NEW_FLOW_NOTIF, *app, flow=handle,
                          status=Status.OK,
                          kind=Mux(send, BufferKind.SEND, BufferKind.RECEIVE),
                          addr=Mux(send, base_tx, base_rx),
                          size_log2=Mux(send, cfg.tx_ring_log2, e.ring_log2),
                          mem_x=Mux(send, e.wires.tx_mem_x, mem_x),
                          mem_y=Mux(send, e.wires.tx_mem_y, mem_y),
                          peer_ip=s.peer_ip, peer_port=s.peer_port, local_port=s.local_port)
            m.d.comb += [new.announced.eq(s.announced + 1), e.write.eq(1), e.notify.eq(1)]
        with m.Elif(live & s.rx_req):
            avail = Signal(32)
            m.d.comb += avail.eq(s.rcv_nxt - s.fin_rcvd - s.rx_head)
            with m.If((avail >= s.rx_req_len) | s.fin_rcvd):
                self._respond(m, e, MsgType.TCP_RX_MSG_RESP, *app, flow=handle,
                              status=Mux(s.fin_rcvd, Status.EOF, Status.OK),
                              ptr=s.rx_head - s.irs - 1,
                              addr=self._reply_addr(e, s.rx_head),
                              size_log2=e.ring_log2, length=avail,
                              mem_x=mem_x, mem_y=mem_y)
                m.d.comb += [new.rx_req.eq(0), e.write.eq(1)]
