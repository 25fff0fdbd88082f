"""The TCP transmit tile: segments out, retransmission and congestion control, timers, the
application's send side.

Messages
--------
Into the tile, by destination sub-port (``dst_fbits``):

=======  ===============================================  ===========  ===================
fbits    message                                          metadata     from
=======  ===============================================  ===========  ===================
LOCAL0   ``TCP_TX_MSG_REQ``, ``TCP_TX_ADJUST_PTR``,       APP_META     applications
         ``TCP_CLOSE_REQ``
LOCAL1   ``LOAD_MEM_ACK``: a segment's data               MEM_META     the send buffer
=======  ===============================================  ===========  ===================

Out of it: ``IP_TX_DATAGRAM`` (a segment, protocol 6, to IPv4 TX: route key ``None`` or
``"ip"``), ``LOAD_MEM`` (a segment's data, from the send buffer: route key ``"tx_mem"``,
answered on LOCAL1) and ``TCP_TX_MSG_RESP`` (to the flow's application; route key ``"app"``
declares the path for the deadlock check). The application formats are in
:mod:`beehive.proto.tcp.app`.

What it does
------------
It keeps, per flow, what has been sent (``snd_nxt``, ``snd_max``), what the application has
written (``tail``), the congestion window (NewReno: slow start, congestion avoidance, fast
retransmit on the third duplicate ACK and fast recovery with partial ACKs, RFC 5681/6582;
equal event by event to a reference written from the RFCs, ``tests/tcp/newreno_model.py``,
which lists the choices the RFCs leave: bytes counted in congestion avoidance, cwnd = ssthresh
on a full ACK, the SYN's ACK counted as one byte) and the retransmission timer: RFC 6298's
timeout from round-trip samples (one new segment timed at a time, none retransmitted: Karn;
the estimate kept by :class:`~beehive.proto.tcp.rtt.RttEstimator`, equal sample by sample to
``tests/tcp/rto_model.py``; the configured ``rto`` until the first sample), doubled on each
expiry up to ``rto_max``, reset on a new ACK; after ``max_retries`` in a row, or
``syn_retries`` for a SYN, the connection is dropped.
On a connection that agreed to SACK (RFC 2018), no byte the peer holds is sent again as long as
it is in the first range the peer's latest ACK reported beyond ``snd_una`` (the receive tile
keeps that block, ``peer_sack``, and the end of the last, ``peer_sack_high``): a fast
retransmission (the third duplicate ACK, a partial ACK) stops short of it, and one going back
after a timeout stops short of it and moves on past it (``sack_skips`` counts both). Each
new ACK brings the next range, so going back after a timeout resends only the holes as the
ACKs report them.
Fast recovery on such a connection is RFC 6675's, equal event by event (segments sent, cwnd,
ssthresh, recovery point) to a reference written from the RFC, ``tests/tcp/sack_model.py``: it
starts on the third duplicate ACK or on one after which more than two segments' worth is
SACKed beyond ``snd_una`` (IsLost(HighACK + 1)); ssthresh and cwnd become half the flight;
the hole at ``snd_una`` goes at once; then, after each ACK, while cwnd less the pipe leaves a
segment (SetPipe over the scoreboard: bytes outstanding, less those SACKed, ``peer_sacked``,
less those of holes lost and not yet resent, plus those resent of holes not lost), NextSeg:
first a lost hole (the rest of the one before the first range, from ``rtx_high``, RFC 6675's
HighRxt; then, once, the segment past that range), else new data. A partial ACK resends the
hole at ``snd_una`` at once (RFC 6582's rule, kept). The scoreboard is the first range, the
highest SACKed byte and the bytes SACKed in all, so a hole past the first range's next one is
neither found nor counted lost: it waits for the ACKs that bring it forward, and counts as in
flight meanwhile (a pipe larger than RFC 6675's: fewer segments sent, never more). Without
SACK, fast recovery is NewReno's.
A zero window with data waiting arms the persist timer, whose expiry sends a window probe
(a bare ACK one below ``snd_una``, which the peer answers with its window). The receive tile
tells it what arrived (:data:`~beehive.proto.tcp.state.RX_EVENT`); it reads the receive tile's
record of the flow for the peer's address, window, ACK and what to acknowledge.

Work is per flow: an event that may let a flow send (an ACK, new data, a window, a timeout)
puts the flow in a work queue (once); each turn of a flow sends at most one segment, and the
flow goes back in the queue while it has more to send, so flows take turns. A data segment's
bytes are read from the send ring (``LOAD_MEM``, ``wrap`` the ring) and stored whole while
their checksum is summed; the header (20 bytes, 28 with the SYN's MSS and window-scale
options) is put in front as the segment leaves. At most ``load_depth`` loads are in flight,
and the buffer holds that many segments, so ``LOAD_MEM_ACK`` never waits for ``noc_out``
(``streaming = False``).

Every segment after the SYN carries ACK, the receive tile's ``rcv_nxt`` and the window left
in the receive ring (scaled if both sides offered window scaling).

The components: :class:`TxEngine` (the records, the work queue, :class:`TimerScan`) decides;
:class:`SegmentEmitter` sends its segments with their data; the loads and the answers to
applications wait in an :class:`~beehive.proto.tcp.queues.Outbox` each; under Apiary
:class:`SendRings` keeps each flow's send ring.
"""

from types import SimpleNamespace
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.framing import offer_descriptor
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.os.memory_tile import LOAD_MEM, MEM_FORMAT, MemMsgType
from apiary.os.uapi import KERNEL_META, OFFSET_BITS, KernelMsgType, monitor_input
from apiary.stream.checksum import InternetChecksum, ones_sum, word_sum
from apiary.stream.counters import CounterSignature, count
from apiary.stream.header import byte_reverse
from apiary.stream.layout import payload_signature
from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.queue import Queue
from apiary.stream.realign import StreamInsert
from apiary.tile import Receive, Send, Tile, TileEnv

from ..addresses import address_members, tile_addresses
from ..ipv4 import IpProtocol, pseudo_header_sum
from ..messages import PACKET_META, MsgType
from ..layer import level_meta, low_latency
from .app import APP_META, APP_REQUEST, GEN_BITS, SLOT_BITS, Status, app_input, app_requests
from .config import TcpConfig, config_or_default
from .queues import MEM_REQUEST, FlowQueue, Outbox, SlotSet, memory_requests
from .rtt import RttEstimator
from .segments import GRANT_USER
from .header import (ACK, FIN, MAX_TX_HEADER_BYTES, PSH, SACK_BLOCK_BYTES, SYN,
                     SYN_HEADER_BYTES, TCP, TCP_HEADER_BYTES, sack_option, seq_le, seq_lt,
                     seq_max, syn_options)
from .state import TIMER, TX_EVENT, TX_STATE, ConnState, TcpWires, TimerKind, slot_bits


__all__ = ["TcpTxTile", "TX_KEY_MEMORY", "TX_KEY_IP", "TX_KEY_APP", "SegmentEmitter",
           "TimerScan", "SendRings", "TxEngine"]


#: Route keys of the transmit tile: its send buffer, IPv4 TX, and the applications it answers.
TX_KEY_MEMORY, TX_KEY_IP, TX_KEY_APP = "tx_mem", "ip", "app"


def _synced(r):
    """Whether the receive tile's record ``r`` says the connection is synchronised: data and
    answers to the application may go."""
    return (r.state == ConnState.ESTABLISHED) | (r.state == ConnState.TIME_WAIT)


def _is_lost(sacked, mss):
    """RFC 6675's IsLost, by bytes: more than (DupThresh - 1) * SMSS = 2 * SMSS SACKed
    beyond a sequence number."""
    return sacked > 2 * mss


def tx_header_bytes(config: TcpConfig) -> int:
    """The longest header the engine sends: a SYN's, or with ``sack`` a SYN's or an ACK's
    with the SACK option (:mod:`~beehive.proto.tcp.header`)."""
    return MAX_TX_HEADER_BYTES if config.sack else SYN_HEADER_BYTES


def tx_segment(header_bytes: int = SYN_HEADER_BYTES) -> data.StructLayout:
    """A segment to send, from the engine to the emitter, with up to ``header_bytes`` bytes
    of header."""
    return data.StructLayout({
        "peer_mac": 48, "vlan": 1, "vlan_tci": 16, "peer_ip": 32,
        "header": 8 * header_bytes,     # lane order, checksum zero
        "header_len": 6, "data_len": 16, "has_data": 1,
    })
#: An answer to an application.
ANSWER = data.StructLayout({"x": 8, "y": 8, "fbits": 4, "meta": APP_META.layout()})
#: A flow whose timer is due.
EXPIRY = data.StructLayout({"slot": 12})
#: A flow slot's send ring under Apiary.
RING = data.StructLayout({"handle": 8, "gen": GEN_BITS, "valid": 1})
#: A flow's turn or a timer's expiry, worked out from the flow's records the cycle before it
#: is taken (sequence arithmetic in series is too long for one cycle of the core's clock on an
#: ECP5).
WORK_PLAN = data.StructLayout({
    "una": 32, "nxt": 32,       # the oldest unacknowledged byte, the next byte to send
    "rtx_at": 32,               # a fast retransmission's first byte: ``una``, or with SACK
    "rtx_len": 16,              # ... the next hole; its bytes, at most one segment
    "rtx_known": 1,             # there is such a hole (not yet resent, SACK: thought lost)
    "rtx_any": 1,               # bytes from ``una`` are outstanding (else only the FIN is)
    "una_lt_max": 1,            # something is outstanding
    "new_len": 16,              # bytes from ``nxt`` that may go now, at most one segment
    "more": 1,                  # there are such bytes
    "room": 32,                 # free bytes in the send ring
    "room_ok": 1,               # the application's waiting request fits
    "rto_at": 32,               # the deadline of a retransmission timer armed now
    "due": 1,                   # the flow's timer is due (an expiry)
    "backoff": 4,               # the back-off after this expiry
    "backoff_at": 32,           # the deadline of a timer re-armed after this expiry
    "ssthresh": 32,             # the slow-start threshold after a retransmission timeout
    # SACK: the peer holds a range beyond ``una`` (``peer_sack``), so that a retransmission
    "rtx_short": 1,             # ... a hole's stops short of it (``rtx_len`` is cut), or
                                # is the hole past it
    "new_short": 1,             # ... from ``nxt`` stops short of it (``new_len`` is cut)
    "skip": 1,                  # ... from ``nxt`` would resend it: move ``nxt`` on instead
    "skip_to": 32,              # ... to its end (at most ``snd_max``)
    # SACK recovery (RFC 6675): the window is cwnd against the pipe, not against ``nxt - una``
    "pipe_recovery": 1,         # the flow is in it
    "pipe_ok": 1,               # cwnd - pipe >= SMSS: a segment may go
    "rtx_lost": 1,              # the hole at ``rtx_at`` is lost (IsLost): NextSeg's first rule
})

#: What the engine counts (the tile's counters but ``segments`` and ``malformed``).
ENGINE_COUNTERS = {
    "data_segments": "segments sent with data",
    "retransmits": "data segments sent again (after a timeout or a fast retransmit)",
    "retransmitted_bytes": "bytes of data sent again",
    "fast_retransmits": "fast retransmits (third duplicate ACK, partial ACK, SACK recovery)",
    "timeouts": "retransmission timer expiries",
    "probes": "zero-window probes sent",
    "resets": "RST segments sent",
    "aborts": "connections dropped after too many retransmissions",
    "app_bad": "application messages for no open connection, or with bad pointers",
    "replies_dropped": "CLOSED answers to applications lost: the answer queue was full",
    "sack_skips": "retransmissions cut short of, or moved past, bytes the peer SACKed",
}

_RXEV, _APP, _EXPIRE, _WORK = range(4)


class TcpTxTile(Tile):
    """The transmit half of a TCP engine (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Routes: ``None`` or ``"ip"`` to IPv4 TX, ``"tx_mem"`` to the send buffer's memory tile,
        ``"app"`` to each application (declared so that the deadlock check knows the paths;
        responses go to the application recorded for the flow).
    config : TcpConfig
        The receive tile's.
    load_depth : int
        Data segments whose bytes may be in flight from the send buffer at once (and that the
        segment buffer holds).

    Members
    -------
    wires : In(TcpWires(config.flows))
        From the receive tile.

    Cost: a :data:`~beehive.proto.tcp.state.TX_STATE` record per flow (about 450 bits), a
    :data:`~beehive.proto.tcp.state.TIMER` per flow, a work queue of ``flows`` entries, the
    segment buffer (``load_depth`` segments).
    """

    streaming = False

    #: Under Apiary (untrusted) as here; trusted, without ``monitor``.
    inputs: tuple[Receive, ...] = (
        monitor_input(Fbits.LOCAL0),        # CAP_NOTIFY of each connection's send ring
        app_input(MsgType.TCP_TX_MSG_REQ, MsgType.TCP_TX_ADJUST_PTR, MsgType.TCP_CLOSE_REQ,
                  fbits=Fbits.LOCAL0),
        Receive("load_rx", MemMsgType.LOAD_MEM_ACK, meta=MEM_FORMAT, fbits=Fbits.LOCAL1,
                empty_packets=True),
    )
    outputs: tuple[Send, ...] = (
        Send("seg_tx", MsgType.IP_TX_DATAGRAM, meta=PACKET_META, short_meta=True,
             empty_packets=True),
        Send("load_tx", MemMsgType.LOAD_MEM, meta=MEM_FORMAT),
        Send("app_tx", MsgType.TCP_TX_MSG_RESP, meta=APP_META),
    )


    def __init__(self, env: TileEnv | None = None, *, config: TcpConfig | None = None,
                 load_depth: int = 4) -> None:
        config = config_or_default(config)
        if not isinstance(load_depth, int) or not 1 <= load_depth <= 16:
            raise ValueError(f"load_depth must be an integer from 1 to 16, not {load_depth!r}")
        self.config = config
        self.load_depth = load_depth
        super().__init__(env, {"wires": In(TcpWires(config.flows)), **address_members(env)}, {
            "segments": "segments sent", **ENGINE_COUNTERS,
            "malformed": "messages the receivers dropped or reframed",
        })
        routes = self.env.next_hops("data")
        self.apiary = not self.env.trusted
        if not self.apiary:
            self.inputs = self.inputs[1:]
        self.ip = first_hop(routes, None, TX_KEY_IP)
        self.tx_mem = first_hop(routes, TX_KEY_MEMORY)
        if routes and (self.ip is None or (self.tx_mem is None and not self.apiary)):
            raise ValueError(f"TcpTxTile {self.env.name!r} needs a route to IPv4 TX (no key, or "
                             f"{TX_KEY_IP!r}) and one to its send buffer with key "
                             f"{TX_KEY_MEMORY!r}; it has keys {sorted(map(str, routes))}")
        _, self.local_ip = tile_addresses(self)

    def elaborate(self, platform):
        m = Module()
        cfg, counters = self.config, self.counters
        here = (self.env.x, self.env.y)
        ports = self.message_ports(m)
        app_rx, load_rx, seg_tx = ports.app_rx, ports.load_rx, ports.seg_tx
        app_q = app_requests(m, app_rx, fall_through=low_latency(self.env))
        tx_mem = (self.tx_mem.x, self.tx_mem.y) if self.tx_mem else (0, 0)
        m.submodules.engine = engine = TxEngine(cfg, load_depth=self.load_depth, here=here,
                                                tx_mem=tx_mem, apiary=self.apiary)
        connect(m, engine=engine.wires, tile=flipped(self.wires))
        connect(m, requests=app_q.o, engine=engine.app)
        for name in ENGINE_COUNTERS:
            m.d.comb += getattr(counters, name).eq(getattr(engine.counters, name))
        errors = app_rx.errors + load_rx.errors + ports.dropped
        if self.apiary:
            k_rx = ports.monitor
            m.submodules.rings = rings = SendRings(cfg.flows, k_rx.o_hdr.payload.shape())
            connect(m, receiver=k_rx.o_hdr, rings=rings.notify)
            m.d.comb += [k_rx.o_data.ready.eq(1), rings.addr.eq(engine.ring_addr),
                         engine.ring.eq(rings.ring)]
            errors += k_rx.errors
        m.d.comb += counters.malformed.eq(errors)

        # Segments: the engine's headers, their data from the send buffer.
        m.submodules.emitter = emitter = SegmentEmitter(
            self.env.width, max_bytes=cfg.mss, depth=self.load_depth, local_ip=self.local_ip,
            dst=address_of(self.ip, Fbits.LOCAL0), src=(*here, Fbits.LOCAL0),
            descriptor=seg_tx.i_hdr.payload.shape(), header_bytes=tx_header_bytes(cfg))
        m.d.comb += load_rx.o_hdr.ready.eq(1)
        connect(m, receiver=load_rx.o_data, emitter=emitter.data)
        connect(m, engine=engine.segments, emitter=emitter.segments)
        connect(m, emitter=emitter.o_hdr, sender=seg_tx.i_hdr)
        connect(m, emitter=emitter.o_data, sender=seg_tx.i_data)
        m.d.comb += engine.load_done.eq(emitter.load_done)
        with m.If(emitter.sent):
            count(m, counters.segments)

        # Loads from the send buffer; answers to the applications (with low_latency, passed
        # through their queues when these are empty, as the layers' are).
        through = low_latency(self.env)
        m.submodules.loads = loads = memory_requests(
            ports.load_tx.i_hdr.payload.shape(), msg_type=LOAD_MEM,
            dst=address_of(self.tx_mem, Fbits.LOCAL0), src=(*here, Fbits.LOCAL1),
            fall_through=through)
        connect(m, engine=engine.loads, outbox=loads.i)
        connect(m, outbox=loads.o, sender=ports.load_tx.i_hdr)

        def answer(m, a):
            return dict(dst=(a.x, a.y, a.fbits), src=(*here, Fbits.LOCAL0),
                        msg_type=MsgType.TCP_TX_MSG_RESP, meta=a.meta)
        m.submodules.answers = answers = Outbox(ANSWER, 4, ports.app_tx.i_hdr.payload.shape(),
                                                answer, fall_through=through)
        connect(m, engine=engine.answers, outbox=answers.i)
        connect(m, outbox=answers.o, sender=ports.app_tx.i_hdr)
        return m


class SegmentEmitter(wiring.Component):
    """Segments out to IPv4 TX: each header the engine queues on ``segments`` (up to 8 wait;
    ``header_bytes`` at most, zero past ``header_len``), with the data the send buffer
    returns for it on ``data`` when it has any, its checksum completed (the header summed
    here as the segment starts) and the header put in front.

    A data segment's bytes are stored whole while they are summed (``depth`` segments of up to
    ``max_bytes`` bytes: the engine has at most that many loads in flight); the data must come
    in the order of the segments that carry it. A segment leaves once its data (if any) is
    stored: its message's descriptor on ``o_hdr`` (to IPv4 TX at ``dst``, from ``src``;
    ``descriptor``: the sender's layout) and its bytes, header and data, on ``o_data``.

    Latency: a segment without data taken on ``segments`` in cycle *t* is offered on ``o_hdr``
    and its header on ``o_data`` from cycle *t* + 2; one with data from the cycle after both
    it and its data's sum (:class:`~apiary.stream.checksum.InternetChecksum`, 2 cycles after
    its last word) are there. Throughput: one segment at a time, its words one per cycle.
    Nothing is dropped. ``load_done`` pulses as a data segment's last word goes out (its load's
    room is free again), ``sent`` as a segment's descriptor is taken.
    """

    def __init__(self, width: int, *, max_bytes: int, depth: int, local_ip: int | Value,
                 dst: tuple, src: tuple, descriptor: data.StructLayout,
                 header_bytes: int = SYN_HEADER_BYTES) -> None:
        self._width, self._max_bytes, self._depth = width, max_bytes, depth
        self._header_bytes = header_bytes
        self._local_ip = Const(local_ip, 32) if isinstance(local_ip, int) else local_ip
        self._dst, self._src = dst, src
        super().__init__({
            "segments": In(stream.Signature(tx_segment(header_bytes))),
            "data": In(payload_signature(width)),
            "o_hdr": Out(stream.Signature(descriptor)),
            "o_data": Out(payload_signature(width)),
            "load_done": Out(1),
            "sent": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self._width
        # Loaded data: stored whole while summed; loads are only issued with room for them.
        m.submodules.seg_buffer = buf = PacketBuffer(
            width, max_bytes=self._max_bytes, buffer_bytes=self._depth * self._max_bytes,
            max_queued=self._depth, info_width=16)
        m.submodules.seg_sum = seg_sum = InternetChecksum(width, max_offset=0)
        connect(m, receiver=flipped(self.data), buffer=buf.i)
        m.d.comb += [
            seg_sum.i.valid.eq(self.data.valid & self.data.ready),
            seg_sum.i.payload.eq(self.data.payload),
            seg_sum.offset.eq(0), seg_sum.initial.eq(0),
            buf.verdict.valid.eq(seg_sum.o.valid),
            buf.verdict.payload.ok.eq(1),
            buf.verdict.payload.info.eq(seg_sum.o.payload.sum),
        ]
        hb = self._header_bytes
        m.submodules.seg_q = seg_q = Queue(tx_segment(hb), 8)
        connect(m, engine=flipped(self.segments), queue=seg_q.i)
        # Segments other than SYNs have bare headers or, with SACK, SYN-sized ones.
        m.submodules.insert = ins = StreamInsert(width, hb, counts=(TCP_HEADER_BYTES, hb))
        connect(m, insert=ins.o, sender=flipped(self.o_data))
        d = seg_q.o.payload
        # A segment starts when its data (if any) is buffered: its kind goes to the insert's
        # queue, its data's descriptor is taken (its sum kept), then its header is offered.
        m.submodules.kinds = kinds = Queue(unsigned(1), 4)
        started = Signal()
        data_sum = Signal(16)
        header_sum = Signal(16)     # of the header's bytes (zero past its length)
        with m.If(seg_q.o.valid & ~started & (~d.has_data | buf.o_desc.valid) & kinds.i.ready):
            m.d.comb += [kinds.i.valid.eq(1), kinds.i.payload.eq(d.has_data),
                         buf.o_desc.ready.eq(d.has_data)]
            m.d.sync += [started.eq(1), data_sum.eq(Mux(d.has_data, buf.o_desc.payload.info, 0)),
                         header_sum.eq(word_sum(d.header, hb // 2))]
        ready = started
        tcp_len = d.header_len + d.data_len
        checksum = Signal(16)
        m.d.comb += checksum.eq(~ones_sum(pseudo_header_sum(self._local_ip, d.peer_ip,
                                                            IpProtocol.TCP.value, tcp_len),
                                          header_sum, data_sum))
        header = Signal(8 * hb)
        m.d.comb += header.eq(d.header)
        m.d.comb += header[128:144].eq(Cat(checksum[8:16], checksum[:8]))
        meta = Signal(PACKET_META.layout())
        seg_meta, seg_flits = level_meta(width, MsgType.IP_TX_DATAGRAM, meta.as_value())
        m.d.comb += self.o_hdr.payload.meta_flits.eq(seg_flits)
        desc_done = Signal()
        head_done = Signal()
        m.d.comb += [
            meta.peer_mac.eq(d.peer_mac), meta.vlan.eq(d.vlan), meta.vlan_tci.eq(d.vlan_tci),
            meta.peer_ip.eq(d.peer_ip), meta.local_ip.eq(self._local_ip),
            meta.protocol.eq(IpProtocol.TCP.value),
            ins.hdr.valid.eq(ready & ~head_done),
            ins.hdr.payload.data.eq(header),
            ins.hdr.payload.nbytes.eq(d.header_len),
        ]
        offer_descriptor(m, self.o_hdr, ready & ~desc_done, dst=self._dst, src=self._src,
              msg_type=MsgType.IP_TX_DATAGRAM, payload_bytes=tcp_len, meta=seg_meta)
        desc_taken = self.o_hdr.valid & self.o_hdr.ready
        head_taken = ins.hdr.valid & ins.hdr.ready
        with m.If(desc_taken):
            m.d.sync += desc_done.eq(1)
        with m.If(head_taken):
            m.d.sync += head_done.eq(1)
        with m.If(ready & (desc_done | desc_taken) & (head_done | head_taken)):
            m.d.comb += seg_q.o.ready.eq(1)
            m.d.sync += [started.eq(0), desc_done.eq(0), head_done.eq(0)]
        # The insert's packets: from the buffer (data) or empty (no data), in segment order.
        with m.If(kinds.o.valid & kinds.o.payload):
            connect(m, buffer=buf.o, insert=ins.i)
        with m.Elif(kinds.o.valid):
            m.d.comb += [ins.i.valid.eq(1), ins.i.payload.last.eq(1), ins.i.payload.nbytes.eq(0)]
        end = ins.i.valid & ins.i.ready & ins.i.payload.last
        m.d.comb += [kinds.o.ready.eq(end), self.load_done.eq(end & kinds.o.payload),
                     self.sent.eq(self.o_hdr.valid & self.o_hdr.ready)]
        return m


class TimerScan(wiring.Component):
    """The clock of the flows' timers, and the scanner that finds the timers due.

    ``now`` counts ticks of ``tick`` cycles. The scanner reads one flow's timer a cycle, slot
    after slot (``timer_addr``; the timer memory answers on ``timer`` the next cycle), and
    queues the slot of each armed timer whose deadline has come (``now - deadline`` not
    negative) on ``expiries`` (4 wait), once: a slot is not queued again until it has been
    taken. One found while the queue is full is found again on the next round.

    Latency: a due timer is queued within ``flows`` + 1 cycles, 2 cycles after its slot is on
    ``timer_addr``.
    """

    def __init__(self, flows: int, tick: int) -> None:
        self._flows, self._tick = flows, tick
        super().__init__({
            "timer_addr": Out(unsigned(slot_bits(flows))),
            "timer": In(TIMER),
            "now": Out(32),
            "expiries": Out(stream.Signature(EXPIRY)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        tick, now = self._tick, self.now
        sb = slot_bits(self._flows)
        prescale = Signal(range(tick))
        m.d.sync += prescale.eq(prescale + 1)
        with m.If(prescale == tick - 1):
            m.d.sync += now.eq(now + 1)
        m.submodules.expiry_q = expiry_q = Queue(EXPIRY, 4)
        connect(m, queue=expiry_q.o, engine=flipped(self.expiries))
        m.submodules.expiring = expiring = SlotSet(self._flows)
        scan = Signal(sb)
        scan_r = Signal(sb)
        m.d.sync += [scan.eq(scan + 1), scan_r.eq(scan)]
        m.d.comb += [self.timer_addr.eq(scan), expiring.probe.eq(scan_r),
                     expiring.drop.eq(self.expiries.payload.slot),
                     expiring.remove.eq(self.expiries.ready)]   # raised only with valid
        due = self.timer.armed & ~(now - self.timer.deadline)[31] & ~expiring.has
        with m.If(due & expiry_q.i.ready):
            m.d.comb += [expiry_q.i.valid.eq(1), expiry_q.i.payload.slot.eq(scan_r),
                         expiring.add.eq(1)]
        return m


class SendRings(wiring.Component):
    """Under Apiary: the handle of each flow slot's send ring, from the ``CAP_NOTIFY`` that
    brings it (sent by the receive tile, through the monitors).

    ``notify`` takes the headers of a :class:`~apiary.noc.framing.MessageReceiver` (layout
    ``notify``), one a cycle: a ``CAP_NOTIFY`` writes its handle, with the connection's
    generation, into the entry of the flow (its ``user`` word, a :data:`GRANT_USER`); other
    messages are ignored. ``ring`` is the entry of slot ``addr``, combinationally, valid from
    the cycle after the notification.
    """

    def __init__(self, flows: int, notify: data.StructLayout) -> None:
        self._flows = flows
        super().__init__({
            "notify": In(stream.Signature(notify)),
            "addr": In(unsigned(slot_bits(flows))),
            "ring": Out(RING),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        flows = self._flows
        m.submodules.rings = rings = Memory(shape=RING, depth=flows, init=[])
        wr = rings.write_port()
        rd = rings.read_port(domain="comb")
        hdr = self.notify.payload
        meta = data.View(KERNEL_META, hdr.meta)
        user = data.View(GRANT_USER, meta.user[:GRANT_USER.size])
        sb = slot_bits(flows)
        m.d.comb += [
            self.notify.ready.eq(1),
            wr.en.eq(self.notify.valid & (hdr.msg_type == KernelMsgType.CAP_NOTIFY.value)),
            wr.addr.eq(user.flow[:sb]), wr.data.handle.eq(meta.handle),
            wr.data.gen.eq(user.flow[SLOT_BITS:SLOT_BITS + GEN_BITS]), wr.data.valid.eq(1),
            rd.addr.eq(self.addr), self.ring.eq(rd.data),
        ]
        return m


class TxEngine(wiring.Component):
    """The transmit tile's engine: per-flow send state, timers and work, one event at a time
    (see the module docstring for what it does with them).

    Each event takes 2 cycles, a timer due or a flow's turn 3 (a turn 2 when its flow's
    records were read ahead, in a cycle that read nothing else, as the head of the work queue):
    in the first the engine picks one, in this order of priority: a receive event from
    ``wires`` (when ``segments`` has room), an application request on ``app``, a timer due
    (when the event queue to the receive tile has room), a flow's turn (when every output has
    room and fewer than ``load_depth`` loads are in flight), and reads the flow's records; a
    timer or a turn is then planned from them (the window, what may go, the timer's next
    deadline); in the last cycle it decides, writes the records back and offers what follows:
    at most one segment on ``segments``, one load on ``loads``, one answer on ``answers``, one
    event to the receive tile, the flow's next turn. An application request needs no room: an
    error answer that finds ``answers`` full is dropped and counted (``replies_dropped``).
    ``load_done`` (from the emitter) frees a load's room.

    Parameters
    ----------
    config : TcpConfig
    load_depth : int
        Loads in flight at most.
    here, tx_mem : (x, y)
        The tile's position, and its send buffer's (for the receive tile, over ``wires``, and
        the answers).
    apiary : bool
        Under Apiary: loads address the send ring by its handle, read from ``ring`` (the entry
        of slot ``ring_addr``, a :class:`SendRings`'), and data waits until it is there.
    """

    def __init__(self, config: TcpConfig, *, load_depth: int, here: tuple[int, int],
                 tx_mem: tuple[int, int], apiary: bool = False) -> None:
        self._config, self._load_depth, self._here, self._tx_mem = config, load_depth, here, tx_mem
        self._apiary = apiary
        self.rtt = RttEstimator(config.flows, floor=config.ticks(config.rto_floor),
                                ceiling=config.ticks(config.rto_ceiling))
        members = {
            "wires": In(TcpWires(config.flows)),
            "app": In(stream.Signature(APP_REQUEST)),
            "segments": Out(stream.Signature(tx_segment(tx_header_bytes(config)))),
            "loads": Out(stream.Signature(MEM_REQUEST)),
            "answers": Out(stream.Signature(ANSWER)),
            "load_done": In(1),
            "counters": Out(CounterSignature(ENGINE_COUNTERS)),
        }
        if apiary:
            members |= {"ring_addr": Out(unsigned(slot_bits(config.flows))), "ring": In(RING)}
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cfg = self._config
        flows, sb = cfg.flows, slot_bits(cfg.flows)
        wires, counters = self.wires, self.counters
        m.d.comb += [wires.tx_mem_x.eq(self._tx_mem[0]), wires.tx_mem_y.eq(self._tx_mem[1]),
                     wires.tx_x.eq(self._here[0]), wires.tx_y.eq(self._here[1])]
        m.submodules.txev_q = txev_q = Queue(TX_EVENT, 4)
        connect(m, events=txev_q.o, wires=flipped(wires.tx_event))

        # -- state, timers, work -----------------------------------------------------------------
        m.submodules.state = state_mem = Memory(shape=TX_STATE, depth=flows, init=[])
        rd = state_mem.read_port(transparent_for=())
        peer_rd = state_mem.read_port(transparent_for=())
        wr = state_mem.write_port()
        m.d.comb += [peer_rd.addr.eq(wires.tx_read_addr), wires.tx_read_data.eq(peer_rd.data)]
        m.submodules.timers = timer_mem = Memory(shape=TIMER, depth=flows, init=[])
        trd = timer_mem.read_port(transparent_for=())
        scan_rd = timer_mem.read_port(transparent_for=())
        twr = timer_mem.write_port()
        m.submodules.scan = scan = TimerScan(flows, cfg.tick_cycles)
        m.d.comb += [scan_rd.addr.eq(scan.timer_addr), scan.timer.eq(scan_rd.data)]
        m.submodules.work = work = FlowQueue(flows)
        m.submodules.rtt = rtt = self.rtt
        loads = Signal(range(self._load_depth + 1))      # data segments loaded, not yet sent

        # -- the engine ----------------------------------------------------------------------
        t = Signal(TX_STATE)
        m.d.comb += t.eq(rd.data)
        e = SimpleNamespace(
            cfg=cfg, sb=sb, m=m, t=t, r=wires.rx_read_data, timer=trd.data, now=scan.now,
            counters=counters, wires=wires, loads=loads, rd=rd,
            kind=Signal(range(4)), slot=Signal(sb), rxev=Signal.like(wires.rx_event.payload),
            app_ev=Signal(APP_REQUEST), gen=Signal(GEN_BITS),
            new=Signal(TX_STATE), write=Signal(), tnew=Signal(TIMER), twrite=Signal(),
            seg=Signal(tx_segment(tx_header_bytes(cfg))), seg_push=Signal(),
            load=Signal(MEM_REQUEST), load_push=Signal(),
            app_msg=Signal(ANSWER), app_push=Signal(), txev=Signal(TX_EVENT),
            requeue=Signal(), rings=self.ring if self._apiary else None,
            plan=Signal(WORK_PLAN), rtt=rtt.sample, rto=rtt.rto, sack_here=Signal(),
        )
        slot = e.slot
        if self._apiary:
            m.d.comb += self.ring_addr.eq(slot)
        m.d.comb += [e.new.eq(t), e.tnew.eq(e.timer), e.txev.slot.eq(slot),
                     e.txev.gen.eq(t.gen)]
        # As in the receive tile, an application request needs no room (its error answers are
        # dropped, counted, if the answer queue is full): the input must never wait.
        go_rxev = wires.rx_event.valid & self.segments.ready
        go_expire = scan.expiries.valid & txev_q.i.ready
        go_work = (work.o.valid & self.segments.ready & self.loads.ready & self.answers.ready
                   & txev_q.i.ready & (loads != self._load_depth))
        self._dispatch(m, e, go_rxev, go_expire, go_work, scan.expiries, work.o)
        m.d.comb += [wires.rx_read_addr.eq(rd.addr), trd.addr.eq(rd.addr), rtt.addr.eq(rd.addr)]

        # -- effects -------------------------------------------------------------------------
        txev_any = e.txev.fin_sent | e.txev.expire | e.txev.abort
        m.d.comb += [
            wr.addr.eq(slot), wr.en.eq(e.write), wr.data.eq(e.new),
            twr.addr.eq(slot), twr.en.eq(e.twrite), twr.data.eq(e.tnew),
            self.segments.valid.eq(e.seg_push), self.segments.payload.eq(self._sack_block(m, e)),
            self.loads.valid.eq(e.load_push), self.loads.payload.eq(e.load),
            self.answers.valid.eq(e.app_push), self.answers.payload.eq(e.app_msg),
            txev_q.i.valid.eq(txev_any), txev_q.i.payload.eq(e.txev),
        ]
        m.d.sync += loads.eq(loads + e.load_push - self.load_done)
        with m.If(e.app_push & ~self.answers.ready):
            count(m, counters.replies_dropped)
        m.d.comb += [work.i.valid.eq(e.requeue), work.i.payload.eq(slot)]
        return m

    def _sack_block(self, m, e):
        """The segment to queue: ``e.seg``, with one of the flow's out-of-order ranges as a
        SACK block in its options if ``e.sack_here`` (one copy of the option for every segment
        that reports it): the range the latest out-of-order segment went to (RFC 2018's first
        block; a second block would not fit the 32-byte header, and the peer's scoreboard keeps
        what earlier ACKs reported)."""
        if not e.cfg.sack:
            return e.seg
        r, seg = e.r, Signal.like(e.seg)
        m.d.comb += seg.eq(e.seg)
        with m.If(e.sack_here):
            m.d.comb += seg.header[8 * TCP_HEADER_BYTES:].eq(sack_option(
                Mux(r.ooo_report, r.ooo2_start, r.ooo_start),
                Mux(r.ooo_report, r.ooo2_end, r.ooo_end)))
        return seg

    def _dispatch(self, m, e, go_rxev, go_expire, go_work, expiries, work):
        """Pick an event (IDLE: its flow's records are read), then handle it (EXEC); a timer due
        or a flow's turn is planned in between (PLAN), or, for a turn whose records were read
        ahead, in IDLE itself."""
        wires, app, rd, kind, slot, sb = self.wires, self.app, e.rd, e.kind, e.slot, e.sb
        # In a cycle that reads nothing else, the records of the flow at the head of the work
        # queue are read ahead: valid in the next cycle if no write to them crossed the read.
        ahead_slot = Signal(sb)
        ahead_ok = Signal()
        m.d.comb += rd.addr.eq(work.payload)
        m.d.sync += [ahead_slot.eq(rd.addr),
                     ahead_ok.eq(~((e.write | e.twrite) & (slot == rd.addr)))]
        planned = self._plan(m, e)          # from the records on the read ports, either way
        e.room_now = planned.room           # in EXEC, the room of the event's own flow
        with m.FSM(name="engine"):
            with m.State("IDLE"):
                with m.If(go_rxev):
                    ev = wires.rx_event.payload
                    m.d.comb += [rd.addr.eq(ev.slot), wires.rx_event.ready.eq(1)]
                    m.d.sync += [kind.eq(_RXEV), slot.eq(ev.slot), e.rxev.eq(ev)]
                    m.next = "EXEC"
                with m.Elif(app.valid):
                    handle = app.payload.meta.flow
                    m.d.comb += [rd.addr.eq(handle[:sb]), app.ready.eq(1)]
                    m.d.sync += [kind.eq(_APP), slot.eq(handle[:sb]), e.app_ev.eq(app.payload),
                                 e.gen.eq(handle[SLOT_BITS:SLOT_BITS + GEN_BITS])]
                    m.next = "EXEC"
                with m.Elif(go_expire):
                    which = expiries.payload.slot
                    m.d.comb += [rd.addr.eq(which), expiries.ready.eq(1)]
                    m.d.sync += [kind.eq(_EXPIRE), slot.eq(which)]
                    m.next = "PLAN"
                with m.Elif(go_work):
                    m.d.comb += [rd.addr.eq(work.payload), work.ready.eq(1)]
                    m.d.sync += [kind.eq(_WORK), slot.eq(work.payload)]
                    with m.If(ahead_ok & (ahead_slot == work.payload)):
                        m.d.sync += e.plan.eq(planned)      # from the records read ahead
                        m.next = "EXEC"
                    with m.Else():
                        m.next = "PLAN"
            with m.State("PLAN"):           # a turn or an expiry: read the records again, plan
                m.d.comb += rd.addr.eq(slot)
                m.d.sync += e.plan.eq(planned)
                m.next = "EXEC"
            with m.State("EXEC"):
                with m.Switch(kind):
                    with m.Case(_RXEV):
                        self._rx_event(m, e)
                    with m.Case(_APP):
                        self._app(m, e)
                    with m.Case(_EXPIRE):
                        self._expire(m, e)
                    with m.Case(_WORK):
                        self._work(m, e)
                m.next = "IDLE"

    # -- the handlers (combinational, in the EXEC cycle) -----------------------------------------

    def _count(self, m, e, name, condition=None):
        counter = getattr(e.counters, name)
        if condition is None:
            count(m, counter)
        else:
            with m.If(condition):
                count(m, counter)

    def _arm(self, m, e, kind, ticks=None, *, at=None):
        """Arm the flow's timer ``ticks`` from now, or for the deadline ``at``."""
        m.d.comb += [e.tnew.armed.eq(1), e.tnew.kind.eq(kind),
                     e.tnew.deadline.eq(e.now + ticks if at is None else at), e.twrite.eq(1)]

    def _disarm(self, m, e):
        m.d.comb += [e.tnew.armed.eq(0), e.twrite.eq(1)]

    def _rto(self, e, backoff):
        """The retransmission timeout in ticks after ``backoff`` doublings, capped: the
        configured one until the flow's first round-trip sample, then RFC 6298's (from the
        :class:`~beehive.proto.tcp.rtt.RttEstimator`)."""
        cfg = e.cfg
        ceiling = cfg.ticks(cfg.rto_ceiling)
        base = Mux(e.rto == 0, cfg.ticks(cfg.rto), e.rto)
        scaled = Signal(48)
        e.m.d.comb += scaled.eq(base << backoff)
        return Mux(scaled > ceiling, ceiling, scaled[:32])

    def _mss(self, e):
        r = e.r
        return Mux(r.peer_mss < e.cfg.mss, r.peer_mss, e.cfg.mss)

    def _rx_event(self, m, e):
        cfg, t, new, x = e.cfg, e.t, e.new, e.rxev
        mss = self._mss(e)
        with m.If(x.rst):
            self._segment(m, e, peer=x, seq=x.seq, ack=x.ack, flags=x.rst_flags, window=0,
                          report=False)
            self._count(m, e, "resets")
        with m.If(x.open):
            m.d.comb += [
                new.eq(0), new.gen.eq(x.gen), new.active.eq(1), new.iss.eq(x.seq),
                new.snd_nxt.eq(x.seq), new.snd_max.eq(x.seq), new.snd_una.eq(x.seq),
                new.tail.eq(x.seq + 1), new.recover.eq(x.seq), new.rtx_high.eq(x.seq),
                new.cwnd.eq(cfg.initial_window * cfg.mss), new.ssthresh.eq(0xFFFFFFFF),
                new.app_x.eq(x.app_x), new.app_y.eq(x.app_y), new.app_fbits.eq(x.app_fbits),
                e.write.eq(1), e.requeue.eq(1),
                e.rtt.valid.eq(1), e.rtt.payload.slot.eq(e.slot), e.rtt.payload.clear.eq(1),
            ]
            self._disarm(m, e)
        with m.Elif((x.gen == t.gen) & t.active):
            m.d.comb += e.write.eq(1)
            with m.If(x.closed):
                m.d.comb += [new.active.eq(0), new.tx_req.eq(0)]
                self._disarm(m, e)
                with m.If(t.tx_req):        # the application waits for room: it never comes
                    self._answer(m, e, Status.CLOSED)
            with m.If(x.ack_now):
                m.d.comb += [new.ack_pending.eq(1), e.requeue.eq(1)]
            with m.If(x.wake):
                m.d.comb += e.requeue.eq(1)
            with m.If(x.linger):
                self._arm(m, e, TimerKind.LINGER, cfg.ticks(cfg.linger))
            with m.If(x.acked & seq_lt(t.snd_una, x.ack)):
                self._acked(m, e, x.ack, mss)
            with m.Elif(x.dupacks != 0):
                self._dupack(m, e, x.dupacks, mss)

    def _acked(self, m, e, ack, mss):
        cfg, t, new = e.cfg, e.t, e.new
        acked = Signal(32)
        m.d.comb += [acked.eq(ack - t.snd_una), new.snd_una.eq(ack), new.rtx_high.eq(ack),
                     new.retries.eq(0), new.backoff.eq(0), e.requeue.eq(1)]
        if cfg.sack:        # a hole resent past the ACK is not sent again in this recovery
            with m.If(t.in_recovery & e.r.sack_ok & seq_lt(ack, t.rtx_high)):
                m.d.comb += new.rtx_high.eq(t.rtx_high)
        with m.If(t.rtt_timing & seq_le(t.rtt_seq, ack)):     # a round-trip sample
            m.d.comb += [new.rtt_timing.eq(0), e.rtt.valid.eq(1), e.rtt.payload.slot.eq(e.slot),
                         e.rtt.payload.rtt.eq(e.now - t.rtt_at)]
        with m.If(seq_lt(t.snd_nxt, ack)):
            m.d.comb += new.snd_nxt.eq(ack)
        if cfg.cc == "newreno":
            with m.If(t.in_recovery):
                with m.If(seq_le(t.recover, ack)):
                    m.d.comb += [new.in_recovery.eq(0), new.cwnd.eq(t.ssthresh)]
                with m.Else():      # a partial ACK: send the next hole at once
                    deflated = t.cwnd - acked + mss
                    m.d.comb += new.rtx_pending.eq(1)
                    with m.If(~self._sack_recovery(e)):     # (RFC 6675: the pipe falls)
                        m.d.comb += new.cwnd.eq(Mux(t.cwnd > acked, deflated, mss))
            with m.Elif(t.cwnd < t.ssthresh):
                m.d.comb += new.cwnd.eq(t.cwnd + Mux(acked < mss, acked, mss))
            with m.Else():
                acc = t.ca_acc + acked
                with m.If(acc >= t.cwnd):
                    m.d.comb += [new.cwnd.eq(t.cwnd + mss), new.ca_acc.eq(acc - t.cwnd)]
                with m.Else():
                    m.d.comb += new.ca_acc.eq(acc)
        with m.If(e.timer.kind != TimerKind.LINGER):
            with m.If(ack == t.snd_max):
                self._disarm(m, e)
            with m.Else():              # (the timeout in force before this ACK's sample)
                self._arm(m, e, TimerKind.RETRANSMIT, self._rto(e, 0))

    def _dupack(self, m, e, count, mss):
        """A duplicate ACK: the third, or with SACK one after which more than two segments'
        worth is SACKed beyond ``snd_una`` (RFC 6675's IsLost(HighACK + 1)), starts fast
        recovery. With SACK the window is then ssthresh against the pipe (RFC 6675), without
        it NewReno's, inflated by a segment for each duplicate."""
        cfg, t, r, new = e.cfg, e.t, e.r, e.new
        lost = Const(0)
        if cfg.sack:
            lost = r.sack_ok & r.peer_sack_valid & _is_lost(r.peer_sacked, mss)
        with m.If(((count == 3) | lost) & ~t.in_recovery & seq_lt(t.recover, t.snd_una)):
            m.d.comb += [new.rtx_pending.eq(1), new.rtx_high.eq(t.snd_una), e.requeue.eq(1)]
            if cfg.cc == "newreno":
                half = (t.snd_max - t.snd_una) >> 1
                ssthresh = Mux(half > 2 * mss, half, 2 * mss)
                # NewReno inflates the window by the three segments the duplicates say have
                # left; RFC 6675 counts them in its pipe instead.
                inflated = ssthresh + 3 * mss
                m.d.comb += [new.ssthresh.eq(ssthresh),
                             new.cwnd.eq(Mux(r.sack_ok, ssthresh, inflated) if cfg.sack
                                         else inflated),
                             new.recover.eq(t.snd_max), new.in_recovery.eq(1)]
        if cfg.cc == "newreno":
            with m.If(t.in_recovery):       # with SACK: the pipe has fallen, something may go
                m.d.comb += e.requeue.eq(1)
                with m.If((count > 3) & ~self._sack_recovery(e)):
                    m.d.comb += new.cwnd.eq(t.cwnd + mss)

    def _sack_recovery(self, e):
        """Whether the flow's fast recovery is RFC 6675's (SACK agreed)."""
        if e.cfg.sack and e.cfg.cc == "newreno":
            return e.t.in_recovery & e.r.sack_ok
        return Const(0)

    def _app(self, m, e):
        t, r, a, new = e.t, e.r, e.app_ev, e.new
        meta = a.meta
        ours = t.active & (t.gen == e.gen) & (r.gen == e.gen) & ~t.fin_req
        bad = Signal()
        with m.Switch(a.msg_type):
            with m.Case(MsgType.TCP_TX_MSG_REQ):
                length = Mux(meta.length == 0, 1, meta.length)
                # Room there now is granted at once; otherwise the flow's turns grant it.
                with m.If(ours & _synced(r) & (e.room_now >= length) & self.answers.ready):
                    m.d.comb += [new.tx_req.eq(0), e.write.eq(1)]
                    self._grant_room(m, e, e.room_now)
                with m.Elif(ours):
                    m.d.comb += [new.tx_req.eq(1), new.tx_req_len.eq(length),
                                 e.write.eq(1), e.requeue.eq(1)]
                with m.Else():
                    m.d.comb += [e.app_push.eq(1), e.app_msg.x.eq(a.x), e.app_msg.y.eq(a.y),
                                 e.app_msg.fbits.eq(a.fbits), e.app_msg.meta.flow.eq(meta.flow),
                                 e.app_msg.meta.status.eq(Status.CLOSED), bad.eq(1)]
            with m.Case(MsgType.TCP_TX_ADJUST_PTR):
                tail = Signal(32)
                m.d.comb += tail.eq(t.iss + 1 + meta.ptr)
                with m.If(ours & seq_le(t.tail, tail)
                          & seq_le(tail, seq_max(t.snd_una, r.snd_una) + e.cfg.tx_ring)):
                    m.d.comb += [new.tail.eq(tail), e.write.eq(1), e.requeue.eq(1)]
                with m.Else():
                    m.d.comb += bad.eq(1)
            with m.Case(MsgType.TCP_CLOSE_REQ):
                with m.If(ours):
                    m.d.comb += [new.fin_req.eq(1), e.write.eq(1), e.requeue.eq(1)]
                with m.Else():
                    m.d.comb += bad.eq(1)
            with m.Default():
                m.d.comb += bad.eq(1)
        self._count(m, e, "app_bad", bad)

    def _expire(self, m, e):
        """A timer due (planned the cycle before, ``e.plan``)."""
        cfg, t, r, new, timer, p = e.cfg, e.t, e.r, e.new, e.timer, e.plan
        with m.If(p.due & t.active):
            with m.If(timer.kind == TimerKind.LINGER):
                m.d.comb += e.txev.expire.eq(1)
                self._disarm(m, e)
            with m.Else():
                handshake = (r.state == ConnState.SYN_SENT) | (r.state == ConnState.SYN_RCVD)
                limit = Mux(handshake, cfg.syn_retries, cfg.max_retries)
                self._count(m, e, "timeouts")
                with m.If(t.retries >= limit):
                    m.d.comb += e.txev.abort.eq(1)
                    self._disarm(m, e)
                    self._count(m, e, "aborts")
                with m.Else():
                    m.d.comb += [new.retries.eq(t.retries + 1), new.backoff.eq(p.backoff),
                                 e.write.eq(1), e.requeue.eq(1)]
                    with m.If(timer.kind == TimerKind.PERSIST):
                        m.d.comb += new.probe_pending.eq(1)
                        self._arm(m, e, TimerKind.PERSIST, at=p.backoff_at)
                    with m.Else():
                        if cfg.cc == "newreno":
                            m.d.comb += [new.ssthresh.eq(p.ssthresh), new.cwnd.eq(self._mss(e)),
                                         new.in_recovery.eq(0), new.recover.eq(t.snd_max),
                                         new.ca_acc.eq(0)]
                        m.d.comb += [new.snd_nxt.eq(Mux(handshake, t.iss, p.una)),
                                     new.rtx_pending.eq(0), new.rtt_timing.eq(0)]
                        self._arm(m, e, TimerKind.RETRANSMIT, at=p.backoff_at)

    def _plan(self, m, e):
        """A flow's turn or expiry worked out from its records on the read ports (a
        :data:`WORK_PLAN`, registered into ``e.plan`` for EXEC)."""
        cfg, t, r = e.cfg, e.t, e.r
        plan = Signal(WORK_PLAN)
        una = Signal(32)
        nxt = Signal(32)
        m.d.comb += [una.eq(seq_max(t.snd_una, r.snd_una)), nxt.eq(seq_max(t.snd_nxt, una))]
        mss = self._mss(e)
        window = r.snd_wnd
        if cfg.cc == "newreno":
            window = Mux(t.cwnd < r.snd_wnd, t.cwnd, r.snd_wnd)
        limit = Signal(32)
        data_end = Signal(32)               # the end of the data that may go now
        data_top = Signal(32)               # the end of what was sent (or written)
        rtx_at = Signal(32)
        rtx_len = Signal(32)
        new_len = Signal(32)
        room = Signal(32)
        m.d.comb += [
            limit.eq(una + window),
            data_end.eq(Mux(seq_lt(limit, t.tail), limit, t.tail)),
            data_top.eq(Mux(seq_lt(t.snd_max, t.tail), t.snd_max, t.tail)),
            # From rtx_high: never behind t.snd_una (each ACK sets it), so this is
            # seq_max(una, rtx_high) with one comparison less in series.
            rtx_at.eq(seq_max(r.snd_una, t.rtx_high)),
            rtx_len.eq(data_top - rtx_at),
            new_len.eq(data_end - nxt),
            room.eq(cfg.tx_ring - (t.tail - una)),
        ]
        # The timer: due, and what it is re-armed for after an expiry or when data goes now.
        timer = e.timer
        backoff = Signal(4)
        half = Signal(32)
        m.d.comb += [backoff.eq(Mux(t.backoff == 15, 15, t.backoff + 1)),
                     half.eq((t.snd_max - una) >> 1)]
        m.d.comb += [
            plan.due.eq(timer.armed & ~(e.now - timer.deadline)[31]),
            plan.backoff.eq(backoff), plan.backoff_at.eq(e.now + self._rto(e, backoff)),
            plan.rto_at.eq(e.now + self._rto(e, t.backoff)),
            plan.ssthresh.eq(Mux(half > 2 * mss, half, 2 * mss)),
        ]
        rtx_cap = Signal(32)            # at most one segment, and short of a range held
        new_cap = Signal(32)
        # Without SACK the hole is at una, once (NewReno: again after a partial ACK).
        m.d.comb += [rtx_cap.eq(mss), new_cap.eq(mss), plan.rtx_at.eq(rtx_at),
                     plan.rtx_known.eq(rtx_at == una)]
        gate = Signal(init=1)           # new data may go as far as the window lets it
        if cfg.sack:
            self._plan_sack(m, e, plan, una, nxt, data_top, rtx_at, rtx_len, new_len,
                            rtx_cap, new_cap)
            if cfg.cc == "newreno":     # RFC 6675: the peer's window, and cwnd against the pipe
                with m.If(plan.pipe_recovery):
                    m.d.comb += [limit.eq(una + r.snd_wnd), gate.eq(plan.pipe_ok)]
        m.d.comb += [
            plan.una.eq(una), plan.nxt.eq(nxt),
            plan.rtx_len.eq(Mux(rtx_len > rtx_cap, rtx_cap, rtx_len)),
            plan.rtx_any.eq(data_top != una),
            plan.una_lt_max.eq(seq_lt(una, t.snd_max)),
            plan.new_len.eq(Mux(new_len > new_cap, new_cap, new_len)),
            plan.more.eq(seq_lt(nxt, data_end) & gate),
            plan.room.eq(room), plan.room_ok.eq(room >= t.tx_req_len),
        ]
        return plan

    def _plan_sack(self, m, e, plan, una, nxt, data_top, rtx_at, rtx_len, new_len, rtx_cap,
                   new_cap):
        """The SACK part of the plan: the first range the peer's latest ACK said it holds
        beyond ``una`` (the receive tile's ``peer_sack``) is not sent again. A retransmission
        that would run into it is cut short (``rtx_cap``, ``new_cap``, at most one segment
        already), one that would start in it moves on past it (``skip``); a fast
        retransmission from the range on (the hole before it resent) is the segment past it,
        once, if it is lost (``past``).

        In fast recovery the pipe (RFC 6675's SetPipe) is worked out over that scoreboard: the
        bytes outstanding, less those SACKed (``peer_sacked``), less those of the holes lost and
        not resent, plus those resent of holes not lost. A byte is lost (IsLost) when more than
        two segments' worth beyond it are SACKed: the hole before the first range if that much
        is SACKed in all, the segment past the range if that much is SACKed beyond the range.
        Holes further on count as in flight until resent (more than SetPipe counts: the
        scoreboard knows their bytes, not where they are)."""
        t, r = e.t, e.r
        mss = self._mss(e)
        held, before, inside, first, past = Signal(), Signal(), Signal(), Signal(), Signal()
        to_rtx, to_new = Signal(32), Signal(32)         # bytes before the range
        sacked, beyond = Signal(32), Signal(32)         # SACKed in all, and beyond the range
        m.d.comb += [
            held.eq(r.peer_sack_valid & seq_lt(una, r.peer_sack.start)),
            before.eq(held & seq_lt(nxt, r.peer_sack.start)),
            inside.eq(held & ~seq_lt(nxt, r.peer_sack.start) & seq_lt(nxt, r.peer_sack.end)
                      & seq_lt(nxt, t.snd_max)),
            to_rtx.eq(r.peer_sack.start - rtx_at), to_new.eq(r.peer_sack.start - nxt),
            sacked.eq(Mux(held, r.peer_sacked, 0)),
            beyond.eq(r.peer_sacked - (r.peer_sack.end - r.peer_sack.start)),
            first.eq(held & seq_lt(rtx_at, r.peer_sack.start)),
        ]
        lost_past = Signal()            # the segment past the range is lost, not yet resent
        m.d.comb += [
            lost_past.eq(held & seq_le(rtx_at, r.peer_sack.end)
                         & seq_lt(r.peer_sack.end, r.peer_sack_high)
                         & seq_lt(r.peer_sack.end, data_top) & _is_lost(beyond, mss)),
            past.eq(lost_past & ~first),
        ]
        with m.If(held):
            m.d.comb += plan.rtx_known.eq(first | past)
        # The pipe. The first hole is [una, hole_end), resent up to resent_end.
        lost_first = Signal()
        hole_end, resent_end, past_len = Signal(32), Signal(32), Signal(32)
        pipe = Signal(33)
        m.d.comb += [
            lost_first.eq(held & _is_lost(sacked, mss)),
            hole_end.eq(Mux(held, r.peer_sack.start, t.snd_max)),
            resent_end.eq(Mux(seq_lt(rtx_at, hole_end), rtx_at, hole_end)),
            past_len.eq(Mux(lost_past, Mux(data_top - r.peer_sack.end < mss,
                                           data_top - r.peer_sack.end, mss), 0)),
            pipe.eq((t.snd_max - una) - sacked - past_len
                    - Mux(lost_first, hole_end - resent_end, una - resent_end)),
            plan.pipe_recovery.eq(self._sack_recovery(e)),
            plan.pipe_ok.eq(pipe[32] | ((pipe[:32] < t.cwnd) & (t.cwnd - pipe[:32] >= mss))),
            plan.rtx_lost.eq((first & lost_first) | past),
        ]
        with m.If(past):
            m.d.comb += [plan.rtx_at.eq(r.peer_sack.end),
                         rtx_len.eq(data_top - r.peer_sack.end)]
        with m.If(first & (to_rtx < mss)):
            m.d.comb += rtx_cap.eq(to_rtx)
        with m.If(before & (to_new < mss)):
            m.d.comb += new_cap.eq(to_new)
        m.d.comb += [
            plan.rtx_short.eq((first & (to_rtx < mss) & (to_rtx < rtx_len)) | past),
            plan.new_short.eq(before & (to_new < mss) & (to_new < new_len)),
            plan.skip.eq(inside),
            plan.skip_to.eq(Mux(seq_lt(t.snd_max, r.peer_sack.end), t.snd_max,
                                r.peer_sack.end)),
        ]

    def _work(self, m, e):
        """A flow's turn (planned the cycle before, ``e.plan``): at most one segment, and the
        application's answer if it waits."""
        t, r, new, p = e.t, e.r, e.new, e.plan
        live = t.active & (t.gen == r.gen)
        synced = _synced(r)
        handshake = (r.state == ConnState.SYN_SENT) | (r.state == ConnState.SYN_RCVD)
        una, nxt, tail = p.una, p.nxt, t.tail
        timer_idle = ~e.timer.armed | (e.timer.kind == TimerKind.PERSIST)

        # Under Apiary, data waits (the flow takes its turn again) until the send ring's
        # capability has reached this tile.
        ring_ok = Const(1)
        if e.rings is not None:
            ring_ok = e.rings.valid & (e.rings.gen == t.gen)

        with m.If(live):
            m.d.comb += e.write.eq(1)
            # A fast retransmission asked for with no hole known: new data may go instead.
            with m.If(t.rtx_pending & p.rtx_any & ~p.rtx_known):
                m.d.comb += new.rtx_pending.eq(0)
            # The application's answer, if it waits for room.
            with m.If(t.tx_req & synced & p.room_ok):
                m.d.comb += new.tx_req.eq(0)
                self._grant_room(m, e, p.room)
            # At most one segment.
            with m.If(handshake & (nxt == t.iss)):
                active = r.state == ConnState.SYN_SENT
                self._segment(m, e, peer=r, seq=t.iss, ack=r.rcv_nxt,
                              flags=Mux(active, SYN, SYN | ACK), window=self._window(e, syn=True),
                              syn=True, wscale=active | r.ws_ok, sack=active | r.sack_ok)
                m.d.comb += [new.snd_nxt.eq(t.iss + 1),
                             new.snd_max.eq(seq_max(t.snd_max, t.iss + 1))]
                with m.If(timer_idle):
                    self._arm(m, e, TimerKind.RETRANSMIT, at=p.rto_at)
            with m.Elif(~synced):
                pass
            with m.Elif(t.rtx_pending & p.una_lt_max & (p.rtx_known | ~p.rtx_any)):
                m.d.comb += new.rtx_pending.eq(0)
                with m.If(p.rtx_any & ring_ok):
                    self._resend_hole(m, e, timer_idle)
                with m.Elif(p.rtx_any):
                    m.d.comb += [new.rtx_pending.eq(1), e.requeue.eq(1)]
                with m.Else():          # only the FIN is outstanding
                    self._fin(m, e, tail)
            with m.Elif(p.pipe_recovery & p.pipe_ok & p.rtx_lost & p.una_lt_max & p.rtx_any
                        & ring_ok):     # RFC 6675's NextSeg: a lost hole before new data
                self._resend_hole(m, e, timer_idle)
            with m.Elif(t.probe_pending):
                m.d.comb += new.probe_pending.eq(0)
                self._segment(m, e, peer=r, seq=una - 1, ack=r.rcv_nxt, flags=ACK,
                              window=self._window(e))
                self._count(m, e, "probes")
            with m.Elif(p.more & ~ring_ok):
                m.d.comb += e.requeue.eq(1)
            with m.Elif(p.more & p.skip):     # the peer holds these bytes: on past them
                m.d.comb += [new.snd_nxt.eq(p.skip_to), e.requeue.eq(1)]
                self._count(m, e, "sack_skips")
            with m.Elif(p.more):
                end = Signal(32)
                m.d.comb += end.eq(nxt + p.new_len)
                self._send_data(m, e, nxt, p.new_len, seq_lt(nxt, t.snd_max), timer_idle)
                m.d.comb += [new.snd_nxt.eq(end), new.snd_max.eq(seq_max(t.snd_max, end))]
                self._count(m, e, "sack_skips", p.new_short)
            with m.Elif(t.fin_req & (nxt == tail)):
                self._fin(m, e, tail)
                m.d.comb += [new.snd_nxt.eq(tail + 1), new.snd_max.eq(seq_max(t.snd_max,
                                                                               tail + 1))]
            with m.Elif(t.ack_pending):
                self._segment(m, e, peer=r, seq=nxt, ack=r.rcv_nxt, flags=ACK,
                              window=self._window(e))
                m.d.comb += new.ack_pending.eq(0)
            with m.Elif(seq_lt(nxt, tail) & (r.snd_wnd == 0) & (una == t.snd_max)
                        & ~e.timer.armed):
                self._arm(m, e, TimerKind.PERSIST, at=p.rto_at)

    def _resend_hole(self, m, e, timer_idle):
        """A fast retransmission: the hole the plan found (``rtx_at``, ``rtx_len``)."""
        p = e.plan
        self._send_data(m, e, p.rtx_at, p.rtx_len, 1, timer_idle)
        m.d.comb += e.new.rtx_high.eq(p.rtx_at + p.rtx_len)
        self._count(m, e, "fast_retransmits")
        self._count(m, e, "sack_skips", p.rtx_short)

    def _send_data(self, m, e, start, length, is_retransmit, timer_idle):
        """A data segment from ``start``: its header, and the load of its bytes."""
        cfg, r, new = e.cfg, e.r, e.new
        self._segment(m, e, peer=r, seq=start, ack=r.rcv_nxt, flags=ACK | PSH,
                      window=self._window(e), data_len=length)
        offset = start[:cfg.tx_ring_log2]
        m.d.comb += [
            e.load_push.eq(1),
            e.load.addr.eq(Cat(offset, Const(0, OFFSET_BITS - cfg.tx_ring_log2),
                               e.rings.handle) if e.rings is not None
                           else cfg.tx_base + Cat(offset, e.slot)),
            e.load.size.eq(length), e.load.wrap.eq(cfg.tx_ring_log2),
            new.ack_pending.eq(0), e.requeue.eq(1),
        ]
        self._count(m, e, "data_segments")
        self._count(m, e, "retransmits", is_retransmit)
        with m.If(is_retransmit):
            count(m, e.counters.retransmitted_bytes, length)
        # Karn: a retransmission ends the timing (its ACK could be the first sending's);
        # new data is timed when nothing is.
        with m.If(is_retransmit):
            m.d.comb += new.rtt_timing.eq(0)
        with m.Elif(~e.t.rtt_timing):
            m.d.comb += [new.rtt_timing.eq(1), new.rtt_seq.eq(start + length),
                         new.rtt_at.eq(e.now)]
        with m.If(timer_idle):
            self._arm(m, e, TimerKind.RETRANSMIT, at=e.plan.rto_at)

    def _answer(self, m, e, status, **fields):
        """Answer the flow's application's ``TCP_TX_MSG_REQ`` (fields of ``APP_META``)."""
        t, msg = e.t, e.app_msg
        mem_x, mem_y = self._tx_mem
        m.d.comb += [
            e.app_push.eq(1), msg.x.eq(t.app_x), msg.y.eq(t.app_y), msg.fbits.eq(t.app_fbits),
            msg.meta.flow.eq(Cat(e.slot, Const(0, SLOT_BITS - e.sb), t.gen)),
            msg.meta.status.eq(status), msg.meta.size_log2.eq(e.cfg.tx_ring_log2),
            msg.meta.mem_x.eq(mem_x), msg.meta.mem_y.eq(mem_y),
        ]
        for name, value in fields.items():
            m.d.comb += getattr(msg.meta, name).eq(value)

    def _grant_room(self, m, e, room):
        """Answer the application's ``TCP_TX_MSG_REQ`` with OK: ``room`` bytes of the send
        ring from its tail on."""
        cfg, tail = e.cfg, e.t.tail
        self._answer(m, e, Status.OK, ptr=tail - e.t.iss - 1, length=room,
                     addr=tail[:cfg.tx_ring_log2] if e.rings is not None
                     else cfg.tx_base + Cat(tail[:cfg.tx_ring_log2], e.slot))

    def _fin(self, m, e, seq):
        t, r, new = e.t, e.r, e.new
        self._segment(m, e, peer=r, seq=seq, ack=r.rcv_nxt, flags=FIN | ACK,
                      window=self._window(e))
        m.d.comb += [new.ack_pending.eq(0), e.requeue.eq(1)]
        with m.If(~t.fin_announced):
            m.d.comb += [new.fin_announced.eq(1), e.txev.fin_sent.eq(1), e.txev.seq.eq(seq)]
        with m.If(~e.timer.armed | (e.timer.kind == TimerKind.PERSIST)):
            self._arm(m, e, TimerKind.RETRANSMIT, at=e.plan.rto_at)

    def _window(self, e, syn=False):
        """The window to advertise: the room left in the receive ring, scaled (never in a
        SYN) if both sides offered window scaling, at most 65535."""
        cfg, r = e.cfg, e.r
        room = Signal(32)
        e.m.d.comb += room.eq(r.rx_head + cfg.rx_ring - r.rcv_nxt)
        scaled = room if syn else Mux(r.ws_ok, room >> cfg.wscale, room)
        return Mux(scaled > 0xFFFF, 0xFFFF, scaled)

    def _segment(self, m, e, *, peer, seq, ack, flags, window, data_len=0, syn=False,
                 wscale=0, sack=0, report=True):
        """Queue a segment to ``peer`` (a record with the peer's address, ports, MAC, VLAN).
        A SYN offers window scaling if ``wscale``, SACK if ``sack`` (and the configuration
        does); with ``report``, another segment carries the flow's out-of-order range as a
        SACK block if the connection agreed to SACK and the block fits in the peer's MSS
        beside the data (a full-sized segment goes without; the next ACK reports it)."""
        cfg, seg, r = e.cfg, e.seg, e.r
        header_bytes = tx_header_bytes(cfg)
        plain = Signal(8 * header_bytes)
        tcp = data.View(TCP.layout(), byte_reverse(plain[:8 * TCP_HEADER_BYTES]))
        offset: int | Value = 5
        if syn:
            with_sack = sack if cfg.sack else None
            m.d.comb += plain[8 * TCP_HEADER_BYTES:].eq(
                syn_options(Const(cfg.mss, 16), Const(cfg.wscale, 8), wscale, with_sack))
            offset = header_bytes // 4
        elif cfg.sack and report:
            # The block itself is put in once, for every such segment (_sack_block).
            block = Signal()
            m.d.comb += [block.eq(r.sack_ok & r.ooo_valid
                                  & (data_len + SACK_BLOCK_BYTES <= self._mss(e))),
                         e.sack_here.eq(block)]
            offset = Mux(block, 8, 5)
        m.d.comb += [
            tcp.src_port.eq(peer.local_port), tcp.dst_port.eq(peer.peer_port),
            tcp.seq.eq(seq), tcp.ack.eq(ack), tcp.data_offset.eq(offset),
            tcp.flags.eq(flags), tcp.window.eq(window),
        ]
        m.d.comb += [
            e.seg_push.eq(1), seg.header.eq(plain), seg.header_len.eq(4 * offset),
            seg.data_len.eq(data_len), seg.has_data.eq(data_len != 0),
            seg.peer_mac.eq(peer.peer_mac), seg.vlan.eq(peer.vlan),
            seg.vlan_tci.eq(peer.vlan_tci), seg.peer_ip.eq(peer.peer_ip),
        ]
