"""A Viewstamped Replication witness (Liskov & Cowling, "Viewstamped Replication Revisited"; the
Beehive paper's consensus witness, section VI-B): one tile per shard, a UDP application placed
after UDP RX and replying through UDP TX.

A witness tracks the order of a shard's operations and validates its leader; it does not execute
them. It keeps the VR state of one group member (view number, status, op number, commit number)
and, per operation, only its *metadata* (op number, client id, request number and the request's
digest) in an on-chip ring of ``log_depth`` entries, plus a running digest of the whole log (the
*log summary*, :func:`chain_digest`). The Linux side (``beehive/vr/``) runs the leader, the
replica and the clients, and speaks the same format to a software witness
(:class:`beehive.vr.witness.SoftwareWitness`, also this tile's golden model).

Messages (one UDP datagram each, exactly :data:`MESSAGE_BYTES` = 48 bytes, big-endian,
:data:`VR_MESSAGE`):

=================  =====  =====================================================================
field              bits   meaning
=================  =====  =====================================================================
``magic``          8      :data:`MAGIC` (0xB1: "Beehive VR", format version 1)
``type``           8      :class:`VrType`
``shard``          16     the shard (the tile's ``shard``; another is dropped)
``status``         8      replies: the witness's :class:`VrStatus` (0 normal, 1 view change)
``reason``         8      NACK: a :class:`NackReason`; 0 otherwise
(reserved)         16     0 (ignored)
``view``           32     view number
``normal_view``    32     DO_VIEW_CHANGE and replies: the last view in which the witness was
                          normal (VR's *v'*)
``op``             64     op number
``commit``         64     commit number
``client``         32     client id of the op
``request``        32     the client's request number
``digest``         64     PREPARE: digest of the request (``request_digest``); LOG_ENTRY: the
                          entry's; DO_VIEW_CHANGE, START_VIEW, NACK: the log summary
=================  =====  =====================================================================

What the witness does with each (``W`` its state; anything else is dropped and counted):

====================  ==========================================================================
in                    out
====================  ==========================================================================
PREPARE (leader)      normal, same view and ``op == W.op + 1``: log the op's metadata, move the
                      log summary on, ``W.commit = max(W.commit, min(commit, op))``; PREPARE_OK
                      (view, op, commit, client, request, the request's digest). Otherwise NACK
                      (VIEW_CHANGE, OLD_VIEW, NEW_VIEW, GAP: an op missing before it, STALE_OP:
                      already logged)
COMMIT (leader's      normal, same view: ``W.commit = max(W.commit, min(commit, W.op))``, no
heartbeat)            reply. Otherwise NACK
START_VIEW_CHANGE     ``view > W.view``: status view change, ``W.view = view``;
                      DO_VIEW_CHANGE (the new view, ``normal_view``, op, commit, the last op's
                      client and request, log summary) to the sender. The same view while in
                      view change: DO_VIEW_CHANGE again. Otherwise NACK (OLD_VIEW)
START_VIEW (new       ``view >= W.view``: status normal, view and ``normal_view`` = ``view``, op,
leader)               commit and log summary taken from the message; PREPARE_OK (view, op). An
                      older view: NACK (OLD_VIEW)
LOG_QUERY             an op still in the ring (``0 < op <= W.op``, not overwritten): LOG_ENTRY
                      (its client, request, digest). Otherwise NACK (NOT_IN_LOG)
====================  ==========================================================================

Every reply carries the witness's ``status``, ``view``, ``normal_view`` and ``commit``; a NACK
also its ``op`` and log summary, and the ``client`` and ``request`` of the message it refuses.
The witness cannot address other nodes: DO_VIEW_CHANGE goes back to whoever sent
START_VIEW_CHANGE (the replica taking over), as every reply goes back to its request's sender.

Dropped (counted in ``dropped``, no reply; the next good datagram is served): a datagram that is
not :data:`MESSAGE_BYTES` long, has another ``magic`` or ``shard``, an unknown ``status`` or
``reason``, or a type the witness does not take (its own replies among them), and NoC messages
other than ``UDP_RX_SEGMENT``.
"""

import dataclasses
import enum
import hashlib
from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import connect

from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.stream.checksum import word_sum
from apiary.stream.header import Header, byte_reverse, header_view
from apiary.stream.peek import PayloadPeek
from apiary.stream.realign import StreamInsert
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import PACKET_META, MsgType
from .kernel_ctl import positive_ints
from apiary.stream.counters import count


__all__ = ["VR_MESSAGE", "MESSAGE_BYTES", "MAGIC", "VrType", "VrStatus", "NackReason",
           "VrMessage", "MalformedMessage", "request_digest", "chain_digest", "REPLY_KEY",
           "VrWitnessTile"]


# -- the message format (the one definition: tile, Python VR group and tests) ----------------------

VR_MESSAGE = Header("vr_message", [
    ("magic", 8), ("type", 8), ("shard", 16), ("status", 8), ("reason", 8), ("_reserved", 16),
    ("view", 32), ("normal_view", 32), ("op", 64), ("commit", 64),
    ("client", 32), ("request", 32), ("digest", 64)])
MESSAGE_BYTES = VR_MESSAGE.size // 8
MAGIC = 0xB1
#: Route key of the replies: ``d.route(witness, udp_tx, key=REPLY_KEY)`` (no key serves too).
REPLY_KEY = "reply"
_MASK64 = (1 << 64) - 1


class VrType(enum.IntEnum):
    """Message types (8 bits). The witness takes PREPARE, COMMIT, START_VIEW_CHANGE, START_VIEW
    and LOG_QUERY and sends the others. (Python ``IntEnum``s, not Amaranth enums, so that mypy
    follows the Python side.)"""
    PREPARE = 1
    PREPARE_OK = 2
    COMMIT = 3
    START_VIEW_CHANGE = 4
    DO_VIEW_CHANGE = 5
    START_VIEW = 6
    NACK = 7
    LOG_QUERY = 8
    LOG_ENTRY = 9


class VrStatus(enum.IntEnum):
    NORMAL = 0
    VIEW_CHANGE = 1


class NackReason(enum.IntEnum):
    """Why a NACK refuses a message."""
    NONE = 0
    OLD_VIEW = 1        # the message's view is older than the witness's
    NEW_VIEW = 2        # newer: the witness missed a view change (send START_VIEW)
    GAP = 3             # PREPARE of an op past W.op + 1: resend the ones in between
    STALE_OP = 4        # PREPARE of an op already logged (a retransmission): it is in the log
    VIEW_CHANGE = 5     # the witness is in a view change
    NOT_IN_LOG = 6      # LOG_QUERY of an op not (or no longer) in the ring


class MalformedMessage(ValueError):
    """A datagram that is not a VR message (the witness drops and counts it)."""


@dataclasses.dataclass(frozen=True)
class VrMessage:
    """One message of :data:`VR_MESSAGE`; :meth:`pack` and :meth:`unpack` are the codec."""
    type: VrType
    shard: int = 0
    view: int = 0
    op: int = 0
    commit: int = 0
    client: int = 0
    request: int = 0
    digest: int = 0
    normal_view: int = 0
    status: VrStatus = VrStatus.NORMAL
    reason: NackReason = NackReason.NONE

    def pack(self) -> bytes:
        """The 48-byte datagram."""
        return VR_MESSAGE.to_bytes(
            magic=MAGIC, type=self.type.value, shard=self.shard, status=self.status.value,
            reason=self.reason.value, view=self.view, normal_view=self.normal_view, op=self.op,
            commit=self.commit, client=self.client, request=self.request, digest=self.digest)

    @classmethod
    def unpack(cls, payload: bytes) -> "VrMessage":
        """The message in ``payload``.

        Raises
        ------
        MalformedMessage
            If ``payload`` is not :data:`MESSAGE_BYTES` long, has another magic, or an unknown
            type, status or reason.
        """
        payload = bytes(payload)
        if len(payload) != MESSAGE_BYTES:
            raise MalformedMessage(f"a VR message is {MESSAGE_BYTES} bytes, not {len(payload)}")
        f = VR_MESSAGE.from_bytes(payload)
        if f["magic"] != MAGIC:
            raise MalformedMessage(f"a VR message starts with magic {MAGIC:#04x}, not "
                                   f"{f['magic']:#04x}")
        try:
            kind, status, reason = (VrType(f["type"]), VrStatus(f["status"]),
                                    NackReason(f["reason"]))
        except ValueError as e:
            raise MalformedMessage(f"not a VR message: {e}") from None
        return cls(kind, shard=f["shard"], view=f["view"], op=f["op"], commit=f["commit"],
                   client=f["client"], request=f["request"], digest=f["digest"],
                   normal_view=f["normal_view"], status=status, reason=reason)


def request_digest(request: bytes) -> int:
    """The 64-bit digest a PREPARE carries for a client request (BLAKE2b, 8 bytes)."""
    return int.from_bytes(hashlib.blake2b(bytes(request), digest_size=8).digest(), "big")


def _rotl64(value: int, amount: int) -> int:
    return (value << amount | value >> (64 - amount)) & _MASK64


def chain_digest(summary: int, op: int, client: int, request: int, digest: int) -> int:
    """The log summary after appending op ``op`` (``client``, ``request``, ``digest``) to a log
    whose summary was ``summary`` (0 for the empty log): ``(rotl64(summary, 5) ^ digest ^
    client << 32 ^ request) + op`` modulo 2**64. Cheap in hardware (an XOR and one 64-bit add),
    order-sensitive, and not cryptographic: it tells logs apart, it does not authenticate them.
    The tile computes the same (:meth:`VrWitnessTile.elaborate`)."""
    return ((_rotl64(summary, 5) ^ digest ^ (client << 32 | request)) + op) & _MASK64


# -- the tile --------------------------------------------------------------------------------------

def _log_entry_layout() -> data.StructLayout:
    return data.StructLayout({"op": 64, "client": 32, "request": 32, "digest": 64})


class VrWitnessTile(Tile):
    """The VR witness of one shard (see the module docstring for the protocol).

    Parameters
    ----------
    env : TileEnv
        Its one next hop on the data plane: UDP TX (key ``"reply"`` or none). Standalone (no
        routes) it replies to tile (0, 0).
    shard : int
        The shard it serves (0 to 65535); messages for another are dropped.
    log_depth : int
        Entries of the op-metadata ring, a power of two from 2 to 65536; the op ``n`` is kept
        at ``n % log_depth`` until ``log_depth`` later ops overwrite it.
    queue : int
        Requests that may wait while one is served (at least 1); one that finds the queue full
        is dropped unanswered and counted in ``overflow`` (VR clients and leaders retransmit).

    Store and forward, one message at a time, and the input never waits for the output
    (``streaming = False``): every datagram is taken in at once (PayloadPeek captures its first
    48 bytes and discards the rest) and queued with its metadata; the engine takes it from the
    queue, reads the ring (one cycle), updates the state and builds the reply (one cycle), and
    sends the reply (1 flit at 512 bits; 1 header + 4 metadata + 6 payload flits at 64).
    Latency from a request's last flit in to its reply's first flit out: 6 cycles when idle
    (``tests/apps/test_vr_witness.py`` asserts it at every width). Throughput: about one message
    per 4 cycles plus its reply's flits: 5 cycles at 512 bits (measured, back to back), about 15
    at 64, where the 11 flits of each request already take 11.

    Counters: ``prepares`` (PREPARE_OK sent for a PREPARE), ``commits`` (COMMITs applied),
    ``nacks`` (NACKs sent), ``view_changes`` (START_VIEW_CHANGEs that began one),
    ``start_views`` (START_VIEWs adopted), ``queries`` (LOG_ENTRYs sent), ``dropped``
    (malformed or misrouted datagrams, other NoC messages), ``framing`` (NoC messages whose
    flits disagreed with their header, :class:`~apiary.noc.framing.MessageReceiver`'s errors),
    ``overflow`` (requests dropped unanswered: the queue was full).

    Raises
    ------
    ValueError
        If ``shard``, ``log_depth`` or ``queue`` is out of range, or the tile has more than one
        next hop.
    """

    #: The input never waits for the output: requests are queued (see ``queue``).
    streaming = False

    inputs = (Receive("receiver", MsgType.UDP_RX_SEGMENT, meta=PACKET_META, empty_packets=True),)
    outputs = (Send("sender", MsgType.UDP_TX_SEGMENT, meta=PACKET_META),)

    def __init__(self, env: TileEnv | None = None, *, shard: int = 0, log_depth: int = 256,
                 queue: int = 8) -> None:
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < 1 << 16:
            raise ValueError(f"VrWitnessTile: shard must be an integer from 0 to 65535, "
                             f"not {shard!r}")
        if (isinstance(log_depth, bool) or not isinstance(log_depth, int) or log_depth < 2
                or log_depth > 1 << 16 or log_depth & (log_depth - 1)):
            raise ValueError(f"VrWitnessTile: log_depth must be a power of two from 2 to 65536 "
                             f"(ring entries), not {log_depth!r}")
        self.shard, self.log_depth = shard, log_depth
        (self.queue,) = positive_ints(queue=queue)
        super().__init__(env, counters={
            "prepares": "PREPAREs accepted (PREPARE_OK sent)",
            "commits": "COMMITs applied",
            "nacks": "NACKs sent",
            "view_changes": "START_VIEW_CHANGEs that began a view change",
            "start_views": "START_VIEWs adopted",
            "queries": "LOG_QUERYs answered with LOG_ENTRY",
            "dropped": "datagrams dropped: malformed, another shard, a type not taken, "
                       "or not a UDP segment",
            "framing": "NoC messages whose flits disagreed with their header",
            "overflow": "messages dropped unanswered: the request queue was full",
        })
        routes = self.env.next_hops("data")
        hops = {hop for hops in routes.values() for hop in hops}
        if len(hops) > 1:
            raise ValueError(f"VrWitnessTile {self.env.name!r}: needs one next hop on the data "
                             f"plane (UDP TX), has {len(hops)}")
        self.reply_hop = first_hop(routes, REPLY_KEY, None)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self.env.width
        counters = self.counters

        # -- in: the datagram's header and metadata, then its first 48 bytes, queued -----------
        # The input never waits for the output (``streaming = False``): every message is taken
        # at once, and one that finds the queue full is dropped (counted in ``overflow``).
        ports = self.message_ports(m)
        rx, tx = ports.receiver, ports.sender
        m.submodules.peek = peek = PayloadPeek(width, MESSAGE_BYTES)
        connect(m, receiver=rx.o_data, peek=peek.i)
        m.d.comb += [peek.o.ready.eq(1), peek.verdict.payload.keep.eq(0),  # words discarded
                     peek.verdict.valid.eq(1), rx.o_hdr.ready.eq(1),
                     counters.framing.eq(rx.errors)]
        request = data.StructLayout({"meta": PACKET_META.layout(), "length": 16,
                                     "is_segment": 1, "msg": VR_MESSAGE.layout()})
        m.submodules.requests = queue = fifo.SyncFIFOBuffered(width=request.size,
                                                              depth=self.queue)
        arriving = Signal(request)          # the message whose head the peek is capturing
        with m.If(rx.o_hdr.valid):
            h = rx.o_hdr.payload
            m.d.sync += [arriving.meta.eq(h.meta[:PACKET_META.size]),
                         arriving.length.eq(h.payload_bytes),
                         arriving.is_segment.eq(h.msg_type == MsgType.UDP_RX_SEGMENT)]
        pushed = Signal(request)
        m.d.comb += [pushed.eq(arriving),
                     pushed.msg.eq(header_view(VR_MESSAGE, peek.head)),
                     queue.w_data.eq(pushed), queue.w_en.eq(peek.head_valid)]
        with m.If(peek.head_valid & ~queue.w_rdy):
            count(m, counters.overflow)
        current = Signal(request)
        meta, length, is_segment, msg = (current.meta, current.length, current.is_segment,
                                         current.msg)

        # -- the witness's state and the op-metadata ring ----------------------------------------
        view, normal_view, op, commit, summary = (Signal(32), Signal(32), Signal(64), Signal(64),
                                                  Signal(64))
        in_view_change = Signal()
        entry = _log_entry_layout()
        m.submodules.ring = ring = Memory(shape=entry, depth=self.log_depth, init=[])
        rd, wr = ring.read_port(), ring.write_port()
        index_bits = (self.log_depth - 1).bit_length()
        kind = msg.type
        m.d.comb += rd.addr.eq(Mux(kind == VrType.LOG_QUERY.value, msg.op, op)[:index_bits])

        # -- the reply: a 48-byte header inserted before an empty packet -------------------------
        reply = Signal(VR_MESSAGE.layout())
        reply_bytes = byte_reverse(reply.as_value())        # lane order: first byte in lane 0
        m.submodules.insert = ins = StreamInsert(width, MESSAGE_BYTES, fixed=True)
        connect(m, insert=ins.o, sender=tx.i_data)
        m.d.comb += [ins.i.valid.eq(1), ins.i.payload.last.eq(1), ins.i.payload.nbytes.eq(0),
                     ins.hdr.payload.data.eq(reply_bytes)]
        reply_meta = Signal(PACKET_META.layout())
        m.d.comb += [reply_meta.eq(meta), reply_meta.l4_sum_valid.eq(1),
                     reply_meta.l4_sum.eq(word_sum(reply_bytes, MESSAGE_BYTES // 2))]
        desc_offer, head_offer = Signal(), Signal()
        desc_ready = offer_message(m, tx, desc_offer, dst=address_of(self.reply_hop),
                                   src=(self.env.x, self.env.y, Fbits.LOCAL0),
                                   msg_type=MsgType.UDP_TX_SEGMENT,
                                   payload_bytes=MESSAGE_BYTES, meta=reply_meta)
        m.d.comb += ins.hdr.valid.eq(head_offer)
        o = self.noc_out
        sent = o.valid & o.ready & o.payload.last

        # -- the decision (combinational, from msg, the state and the ring entry read) -----------
        good = Signal()
        m.d.comb += good.eq(is_segment & (length == MESSAGE_BYTES) & (msg.magic == MAGIC)
                            & (msg.shard == self.shard)
                            & (msg.status <= max(s.value for s in VrStatus))
                            & (msg.reason <= max(r.value for r in NackReason)))
        same_view = (msg.view == view)
        view_nack = Mux(msg.view < view, NackReason.OLD_VIEW.value, NackReason.NEW_VIEW.value)
        normal = ~in_view_change
        got = data.View(entry, rd.data)
        last_known = got.op == op                           # the ring still holds W.op
        # What the message does: a reply type (0: none), a NACK reason, and the updates.
        r_type, r_reason = Signal(8), Signal(8)
        accept_prepare, apply_commit, begin_change, adopt_view = (Signal(), Signal(), Signal(),
                                                                  Signal())
        with m.Switch(kind):
            with m.Case(VrType.PREPARE.value):
                with m.If(~normal):
                    m.d.comb += r_reason.eq(NackReason.VIEW_CHANGE.value)
                with m.Elif(~same_view):
                    m.d.comb += r_reason.eq(view_nack)
                with m.Elif(msg.op > op + 1):
                    m.d.comb += r_reason.eq(NackReason.GAP.value)
                with m.Elif(msg.op != op + 1):
                    m.d.comb += r_reason.eq(NackReason.STALE_OP.value)
                with m.Else():
                    m.d.comb += [accept_prepare.eq(1), r_type.eq(VrType.PREPARE_OK.value)]
            with m.Case(VrType.COMMIT.value):
                with m.If(~normal):
                    m.d.comb += r_reason.eq(NackReason.VIEW_CHANGE.value)
                with m.Elif(~same_view):
                    m.d.comb += r_reason.eq(view_nack)
                with m.Else():
                    m.d.comb += apply_commit.eq(1)
            with m.Case(VrType.START_VIEW_CHANGE.value):
                with m.If((msg.view > view) | (same_view & in_view_change)):
                    m.d.comb += [begin_change.eq(msg.view > view),
                                 r_type.eq(VrType.DO_VIEW_CHANGE.value)]
                with m.Else():
                    m.d.comb += r_reason.eq(NackReason.OLD_VIEW.value)
            with m.Case(VrType.START_VIEW.value):
                with m.If(msg.view >= view):
                    m.d.comb += [adopt_view.eq(1), r_type.eq(VrType.PREPARE_OK.value)]
                with m.Else():
                    m.d.comb += r_reason.eq(NackReason.OLD_VIEW.value)
            with m.Case(VrType.LOG_QUERY.value):
                with m.If((msg.op != 0) & (msg.op <= op) & (got.op == msg.op)):
                    m.d.comb += r_type.eq(VrType.LOG_ENTRY.value)
                with m.Else():
                    m.d.comb += r_reason.eq(NackReason.NOT_IN_LOG.value)
        taken = Signal()                                    # a type the witness takes
        m.d.comb += taken.eq((kind == VrType.PREPARE.value) | (kind == VrType.COMMIT.value)
                             | (kind == VrType.START_VIEW_CHANGE.value)
                             | (kind == VrType.START_VIEW.value)
                             | (kind == VrType.LOG_QUERY.value))
        nack = r_reason != 0

        # The state after the message.
        n_view = Mux(begin_change | adopt_view, msg.view, view)
        n_op = Mux(accept_prepare | adopt_view, msg.op, op)
        capped = Mux(msg.commit < n_op, msg.commit, n_op)   # min(commit, op)
        n_commit = Mux(adopt_view, capped,
                       Mux((accept_prepare | apply_commit) & (capped > commit), capped, commit))
        rotated = Cat(summary[59:64], summary[0:59])        # rotl64(summary, 5)
        n_summary = Mux(adopt_view, msg.digest,
                        Mux(accept_prepare,
                            ((rotated ^ msg.digest ^ Cat(msg.request, msg.client))
                             + msg.op)[:64], summary))
        n_normal_view = Mux(adopt_view, msg.view, normal_view)
        n_in_view_change = Mux(adopt_view, 0, Mux(begin_change, 1, in_view_change))

        # The reply's fields.
        answer = Signal(VR_MESSAGE.layout())
        m.d.comb += [
            answer.magic.eq(MAGIC), answer.shard.eq(self.shard),
            answer.type.eq(Mux(nack, VrType.NACK.value, r_type)), answer.reason.eq(r_reason),
            answer.status.eq(n_in_view_change), answer.view.eq(n_view),
            answer.normal_view.eq(n_normal_view), answer.commit.eq(n_commit),
            answer.op.eq(Mux(r_type == VrType.LOG_ENTRY.value, msg.op, n_op)),
            answer.client.eq(msg.client), answer.request.eq(msg.request),
            answer.digest.eq(Mux(accept_prepare, msg.digest, n_summary)),
        ]
        with m.If(r_type == VrType.DO_VIEW_CHANGE.value):
            m.d.comb += [answer.client.eq(Mux(last_known, got.client, 0)),
                         answer.request.eq(Mux(last_known, got.request, 0))]
        with m.If(r_type == VrType.LOG_ENTRY.value):
            m.d.comb += [answer.client.eq(got.client), answer.request.eq(got.request),
                         answer.digest.eq(got.digest)]
        new_entry = Signal(entry)
        m.d.comb += [new_entry.op.eq(msg.op), new_entry.client.eq(msg.client),
                     new_entry.request.eq(msg.request), new_entry.digest.eq(msg.digest),
                     wr.addr.eq(msg.op[:index_bits]), wr.data.eq(new_entry)]

        # -- the engine ----------------------------------------------------------------------------
        desc_done, head_done = Signal(), Signal()
        with m.FSM(name="vr_witness"):
            with m.State("IDLE"):
                m.d.comb += queue.r_en.eq(1)
                with m.If(queue.r_rdy):
                    m.d.sync += current.eq(queue.r_data)
                    m.next = "READ"
            with m.State("READ"):                           # the ring's read address is set
                m.next = "DECIDE"
            with m.State("DECIDE"):
                with m.If(~good | ~taken):
                    count(m, counters.dropped)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [view.eq(n_view), op.eq(n_op), commit.eq(n_commit),
                                 summary.eq(n_summary), normal_view.eq(n_normal_view),
                                 in_view_change.eq(n_in_view_change)]
                    m.d.comb += wr.en.eq(accept_prepare)
                    with m.If(nack):
                        count(m, counters.nacks)
                    with m.If(accept_prepare):
                        count(m, counters.prepares)
                    with m.If(apply_commit):
                        count(m, counters.commits)
                    with m.If(begin_change):
                        count(m, counters.view_changes)
                    with m.If(adopt_view):
                        count(m, counters.start_views)
                    with m.If(r_type == VrType.LOG_ENTRY.value):
                        count(m, counters.queries)
                    with m.If(nack | (r_type != 0)):
                        m.d.sync += [reply.eq(answer), desc_done.eq(0), head_done.eq(0)]
                        m.next = "REPLY"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("REPLY"):
                m.d.comb += [desc_offer.eq(~desc_done), head_offer.eq(~head_done)]
                with m.If(desc_offer & desc_ready):
                    m.d.sync += desc_done.eq(1)
                with m.If(ins.hdr.valid & ins.hdr.ready):
                    m.d.sync += head_done.eq(1)
                with m.If(sent):
                    m.next = "IDLE"
        return m
