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
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.framing import MessageReceiver
from apiary.noc.nexthop import first_hop
from apiary.stream.checksum import word_sum
from apiary.stream.header import Header, byte_reverse, header_view
from apiary.stream.layout import payload_signature
from apiary.stream.peek import PayloadPeek
from apiary.stream.realign import StreamInsert
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import PACKET_META, MsgType
from .kernel_ctl import OfferOnce, offer_reply, positive_ints
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
    The tile computes the same (:class:`VrUpdate`)."""
    return ((_rotl64(summary, 5) ^ digest ^ (client << 32 | request)) + op) & _MASK64


# -- the tile --------------------------------------------------------------------------------------

def _log_entry_layout() -> data.StructLayout:
    return data.StructLayout({"op": 64, "client": 32, "request": 32, "digest": 64})


#: A message as queued for the engine: its metadata, payload length, whether it is a UDP
#: segment, and its first :data:`MESSAGE_BYTES` payload bytes read as a VR message.
REQUEST = data.StructLayout({"meta": PACKET_META.layout(), "length": 16, "is_segment": 1,
                             "msg": VR_MESSAGE.layout()})
#: The witness's state: one group member's VR state and the log summary.
STATE = data.StructLayout({"view": 32, "normal_view": 32, "op": 64, "commit": 64,
                           "summary": 64, "in_view_change": 1})
#: What a message does: the reply's type (0: none), the NACK reason (0: none; a NACK is sent
#: then) and the updates that apply.
ACTIONS = data.StructLayout({"reply": 8, "reason": 8, "accept_prepare": 1, "apply_commit": 1,
                             "begin_change": 1, "adopt_view": 1})


class VrIntake(wiring.Component):
    """Take every message at once and queue it for the engine as a :data:`REQUEST`: its header
    fields and its first :data:`MESSAGE_BYTES` payload bytes. The input never waits for the
    engine.

    ``hdr`` is always ready: each transfer keeps the message's metadata, ``payload_bytes`` and
    whether it is a ``UDP_RX_SEGMENT``. Its payload words on ``i`` go through a
    :class:`~apiary.stream.peek.PayloadPeek`, which captures the first :data:`MESSAGE_BYTES`
    bytes and discards every word. Latency: the request enters the queue (a
    ``SyncFIFOBuffered`` of ``depth`` entries) in the cycle after the word that completes its
    head (the one with its 48th byte, or its last), and is on ``o`` 2 cycles later when the
    queue was empty: 3 cycles in all. Throughput: one word per cycle on ``i``.

    Drops: a request that finds the queue full, counted in ``overflow``; payload bytes past the
    first :data:`MESSAGE_BYTES` are never kept.

    Members
    -------
    hdr : In(stream.Signature(MessageReceiver.header_layout(width, meta_bits=PACKET_META.size)))
        The receiver's header transfers.
    i : In(payload_signature(width))
        The receiver's payload words (a packet per message: ``empty_packets``).
    o : Out(stream.Signature(REQUEST))
        The requests, oldest first.
    overflow : Out(32)
        Requests dropped: the queue was full.
    """

    def __init__(self, width: int, depth: int) -> None:
        self._width, self._depth = width, depth
        super().__init__({
            "hdr": In(stream.Signature(MessageReceiver.header_layout(
                width, meta_bits=PACKET_META.size))),
            "i": In(payload_signature(width)),
            "o": Out(stream.Signature(REQUEST)),
            "overflow": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.peek = peek = PayloadPeek(self._width, MESSAGE_BYTES)
        connect(m, intake=flipped(self.i), peek=peek.i)
        m.d.comb += [peek.o.ready.eq(1), peek.verdict.payload.keep.eq(0),  # words discarded
                     peek.verdict.valid.eq(1), self.hdr.ready.eq(1)]
        m.submodules.requests = queue = fifo.SyncFIFOBuffered(width=REQUEST.size,
                                                              depth=self._depth)
        arriving = Signal(REQUEST)          # the message whose head the peek is capturing
        with m.If(self.hdr.valid):
            h = self.hdr.payload
            m.d.sync += [arriving.meta.eq(h.meta[:PACKET_META.size]),
                         arriving.length.eq(h.payload_bytes),
                         arriving.is_segment.eq(h.msg_type == MsgType.UDP_RX_SEGMENT)]
        pushed = Signal(REQUEST)
        m.d.comb += [pushed.eq(arriving),
                     pushed.msg.eq(header_view(VR_MESSAGE, peek.head)),
                     queue.w_data.eq(pushed), queue.w_en.eq(peek.head_valid),
                     self.o.payload.eq(queue.r_data), self.o.valid.eq(queue.r_rdy),
                     queue.r_en.eq(self.o.ready)]
        with m.If(peek.head_valid & ~queue.w_rdy):
            count(m, self.overflow)
        return m


class VrRules(wiring.Component):
    """What a message does to the witness of shard ``shard`` (the table of the module
    docstring), decided combinationally (0 cycles) from the queued ``request``, the witness's
    ``state`` and the ring ``entry`` read for it (the entry of the message's op for a
    LOG_QUERY, of ``state.op`` otherwise).

    ``drop``: the request is malformed, for another shard, or of a type the witness does not
    take; it is dropped, whatever ``act`` says. Otherwise ``act`` says which reply it gets
    (``reason`` set: a NACK) and which updates apply.

    Members
    -------
    request : In(REQUEST)
    state : In(STATE)
    entry : In(log entry: op, client, request, digest)
    act : Out(ACTIONS)
    drop : Out(1)
    """

    def __init__(self, shard: int) -> None:
        self._shard = shard
        super().__init__({"request": In(REQUEST), "state": In(STATE),
                          "entry": In(_log_entry_layout()), "act": Out(ACTIONS),
                          "drop": Out(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        msg, w, act = self.request.msg, self.state, self.act
        good = Signal()
        m.d.comb += good.eq(self.request.is_segment & (self.request.length == MESSAGE_BYTES)
                            & (msg.magic == MAGIC) & (msg.shard == self._shard)
                            & (msg.status <= max(s.value for s in VrStatus))
                            & (msg.reason <= max(r.value for r in NackReason)))
        same_view = (msg.view == w.view)
        view_nack = Mux(msg.view < w.view, NackReason.OLD_VIEW.value, NackReason.NEW_VIEW.value)
        normal = ~w.in_view_change
        with m.Switch(msg.type):
            with m.Case(VrType.PREPARE.value):
                with m.If(~normal):
                    m.d.comb += act.reason.eq(NackReason.VIEW_CHANGE.value)
                with m.Elif(~same_view):
                    m.d.comb += act.reason.eq(view_nack)
                with m.Elif(msg.op > w.op + 1):
                    m.d.comb += act.reason.eq(NackReason.GAP.value)
                with m.Elif(msg.op != w.op + 1):
                    m.d.comb += act.reason.eq(NackReason.STALE_OP.value)
                with m.Else():
                    m.d.comb += [act.accept_prepare.eq(1), act.reply.eq(VrType.PREPARE_OK.value)]
            with m.Case(VrType.COMMIT.value):
                with m.If(~normal):
                    m.d.comb += act.reason.eq(NackReason.VIEW_CHANGE.value)
                with m.Elif(~same_view):
                    m.d.comb += act.reason.eq(view_nack)
                with m.Else():
                    m.d.comb += act.apply_commit.eq(1)
            with m.Case(VrType.START_VIEW_CHANGE.value):
                with m.If((msg.view > w.view) | (same_view & w.in_view_change)):
                    m.d.comb += [act.begin_change.eq(msg.view > w.view),
                                 act.reply.eq(VrType.DO_VIEW_CHANGE.value)]
                with m.Else():
                    m.d.comb += act.reason.eq(NackReason.OLD_VIEW.value)
            with m.Case(VrType.START_VIEW.value):
                with m.If(msg.view >= w.view):
                    m.d.comb += [act.adopt_view.eq(1), act.reply.eq(VrType.PREPARE_OK.value)]
                with m.Else():
                    m.d.comb += act.reason.eq(NackReason.OLD_VIEW.value)
            with m.Case(VrType.LOG_QUERY.value):
                with m.If((msg.op != 0) & (msg.op <= w.op) & (self.entry.op == msg.op)):
                    m.d.comb += act.reply.eq(VrType.LOG_ENTRY.value)
                with m.Else():
                    m.d.comb += act.reason.eq(NackReason.NOT_IN_LOG.value)
        taken = Signal()                                    # a type the witness takes
        m.d.comb += taken.eq((msg.type == VrType.PREPARE.value)
                             | (msg.type == VrType.COMMIT.value)
                             | (msg.type == VrType.START_VIEW_CHANGE.value)
                             | (msg.type == VrType.START_VIEW.value)
                             | (msg.type == VrType.LOG_QUERY.value))
        m.d.comb += self.drop.eq(~good | ~taken)
        return m


class VrUpdate(wiring.Component):
    """The witness's state after a message, and the reply it sends, combinationally (0
    cycles) from the message, the ``state`` before, the ring ``entry`` read for it and what
    :class:`VrRules` decided (``act``).

    ``after`` is the state to keep once the message is served (``state`` itself if nothing
    applies); ``answer`` the reply's fields: a NACK if ``act.reason`` is set, else of type
    ``act.reply``, from the state after (see the module docstring for which fields).

    Members
    -------
    msg : In(VR_MESSAGE.layout())
    state : In(STATE)
    entry : In(log entry: op, client, request, digest)
    act : In(ACTIONS)
    after : Out(STATE)
    answer : Out(VR_MESSAGE.layout())
    """

    def __init__(self, shard: int) -> None:
        self._shard = shard
        super().__init__({"msg": In(VR_MESSAGE.layout()), "state": In(STATE),
                          "entry": In(_log_entry_layout()), "act": In(ACTIONS),
                          "after": Out(STATE), "answer": Out(VR_MESSAGE.layout())})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        msg, w, got, act = self.msg, self.state, self.entry, self.act
        accept_prepare, adopt_view = act.accept_prepare, act.adopt_view
        nack = act.reason != 0
        last_known = got.op == w.op                         # the ring still holds W.op
        n_view = Mux(act.begin_change | adopt_view, msg.view, w.view)
        n_op = Mux(accept_prepare | adopt_view, msg.op, w.op)
        capped = Mux(msg.commit < n_op, msg.commit, n_op)   # min(commit, op)
        n_commit = Mux(adopt_view, capped,
                       Mux((accept_prepare | act.apply_commit) & (capped > w.commit), capped,
                           w.commit))
        rotated = Cat(w.summary[59:64], w.summary[0:59])   # rotl64(summary, 5)
        n_summary = Mux(adopt_view, msg.digest,
                        Mux(accept_prepare,
                            ((rotated ^ msg.digest ^ Cat(msg.request, msg.client))
                             + msg.op)[:64], w.summary))
        n_normal_view = Mux(adopt_view, msg.view, w.normal_view)
        n_in_view_change = Mux(adopt_view, 0, Mux(act.begin_change, 1, w.in_view_change))
        after = self.after
        m.d.comb += [after.view.eq(n_view), after.op.eq(n_op), after.commit.eq(n_commit),
                     after.summary.eq(n_summary), after.normal_view.eq(n_normal_view),
                     after.in_view_change.eq(n_in_view_change)]

        answer = self.answer
        m.d.comb += [
            answer.magic.eq(MAGIC), answer.shard.eq(self._shard),
            answer.type.eq(Mux(nack, VrType.NACK.value, act.reply)),
            answer.reason.eq(act.reason),
            answer.status.eq(n_in_view_change), answer.view.eq(n_view),
            answer.normal_view.eq(n_normal_view), answer.commit.eq(n_commit),
            answer.op.eq(Mux(act.reply == VrType.LOG_ENTRY.value, msg.op, n_op)),
            answer.client.eq(msg.client), answer.request.eq(msg.request),
            answer.digest.eq(Mux(accept_prepare, msg.digest, n_summary)),
        ]
        with m.If(act.reply == VrType.DO_VIEW_CHANGE.value):
            m.d.comb += [answer.client.eq(Mux(last_known, got.client, 0)),
                         answer.request.eq(Mux(last_known, got.request, 0))]
        with m.If(act.reply == VrType.LOG_ENTRY.value):
            m.d.comb += [answer.client.eq(got.client), answer.request.eq(got.request),
                         answer.digest.eq(got.digest)]
        return m


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
        counters = self.counters

        # The input never waits for the output (``streaming = False``): every message is taken
        # at once and queued, and one that finds the queue full is dropped.
        ports = self.message_ports(m)
        rx, tx = ports.receiver, ports.sender
        m.submodules.intake = intake = VrIntake(self.env.width, self.queue)
        connect(m, receiver=rx.o_hdr, intake=intake.hdr)
        connect(m, receiver=rx.o_data, intake=intake.i)
        m.d.comb += [counters.framing.eq(rx.errors), counters.overflow.eq(intake.overflow)]
        current = Signal(REQUEST)           # the request being served
        msg = current.msg

        # The witness's state (a register each) and the op-metadata ring.
        view, normal_view, op, commit, summary = (Signal(32), Signal(32), Signal(64), Signal(64),
                                                  Signal(64))
        in_view_change = Signal()
        state = Cat(view, normal_view, op, commit, summary, in_view_change)    # STATE
        entry = _log_entry_layout()
        m.submodules.ring = ring = Memory(shape=entry, depth=self.log_depth, init=[])
        rd, wr = ring.read_port(), ring.write_port()
        index_bits = (self.log_depth - 1).bit_length()
        new_entry = Signal(entry)
        m.d.comb += [rd.addr.eq(Mux(msg.type == VrType.LOG_QUERY.value, msg.op, op)[:index_bits]),
                     new_entry.op.eq(msg.op), new_entry.client.eq(msg.client),
                     new_entry.request.eq(msg.request), new_entry.digest.eq(msg.digest),
                     wr.addr.eq(msg.op[:index_bits]), wr.data.eq(new_entry)]

        # The decision and its outcome (combinational, from the request, the state and the
        # ring entry read).
        m.submodules.rules = rules = VrRules(self.shard)
        m.submodules.update = update = VrUpdate(self.shard)
        act = rules.act
        m.d.comb += [rules.request.eq(current), rules.state.eq(state), rules.entry.eq(rd.data),
                     update.msg.eq(msg), update.state.eq(state), update.entry.eq(rd.data),
                     update.act.eq(act)]

        # The reply: a 48-byte header inserted before an empty packet.
        reply = Signal(VR_MESSAGE.layout())
        reply_bytes = byte_reverse(reply.as_value())        # lane order: first byte in lane 0
        m.submodules.insert = ins = StreamInsert(self.env.width, MESSAGE_BYTES, fixed=True)
        connect(m, insert=ins.o, sender=tx.i_data)
        m.d.comb += [ins.i.valid.eq(1), ins.i.payload.last.eq(1), ins.i.payload.nbytes.eq(0),
                     ins.hdr.payload.data.eq(reply_bytes)]
        m.submodules.desc_once = desc = OfferOnce()
        m.submodules.head_once = head = OfferOnce()
        m.d.comb += [
            desc.ready.eq(offer_reply(m, self, tx, desc.valid, request_meta=current.meta,
                                      l4_sum=word_sum(reply_bytes, MESSAGE_BYTES // 2),
                                      payload_bytes=MESSAGE_BYTES)),
            ins.hdr.valid.eq(head.valid), head.ready.eq(ins.hdr.ready),
        ]
        o = self.noc_out
        sent = o.valid & o.ready & o.payload.last

        nack = act.reason != 0
        answered = Signal()                 # the message gets a reply (a NACK among them)
        with m.FSM(name="vr_witness"):
            with m.State("IDLE"):
                m.d.comb += intake.o.ready.eq(1)
                with m.If(intake.o.valid):
                    m.d.sync += current.eq(intake.o.payload)
                    m.next = "READ"
            with m.State("READ"):                           # the ring's read address is set
                m.next = "DECIDE"
            with m.State("DECIDE"):
                with m.If(rules.drop):
                    count(m, counters.dropped)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += state.eq(update.after)
                    m.d.comb += [wr.en.eq(act.accept_prepare), answered.eq(nack | (act.reply != 0))]
                    for event, counter in [
                            (nack, counters.nacks), (act.accept_prepare, counters.prepares),
                            (act.apply_commit, counters.commits),
                            (act.begin_change, counters.view_changes),
                            (act.adopt_view, counters.start_views),
                            (act.reply == VrType.LOG_ENTRY.value, counters.queries)]:
                        with m.If(event):
                            count(m, counter)
                    with m.If(answered):
                        m.d.sync += reply.eq(update.answer)
                        m.d.comb += [desc.start.eq(1), head.start.eq(1)]
                        m.next = "REPLY"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("REPLY"):
                m.d.comb += [desc.offer.eq(1), head.offer.eq(1)]
                with m.If(sent):
                    m.next = "IDLE"
        return m
