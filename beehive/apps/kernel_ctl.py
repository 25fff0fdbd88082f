"""The kernel's control service over UDP: a Linux program reads the fault log and releases
quarantined tiles, and grants or revokes IPC capabilities.

A UDP application (placed after UDP RX, replying through UDP TX, like
:class:`~beehive.apps.mem_server.UdpMemoryTile`) that turns request datagrams into kernel
messages (:mod:`apiary.os.uapi`) and answers each with one reply datagram, sent back to the
client with the request's :data:`~beehive.proto.messages.PACKET_META`.

Requests (UDP payloads, network byte order; bytes past those listed are ignored):

====  ======================  ======  =========================================================
op    request                 bytes   fields
====  ======================  ======  =========================================================
1     read a fault entry      3       1-2: ``index`` (u16) into the error manager's log
2     release a tile          4       1: ``x``, 2: ``y``, 3: ``fbits`` (its monitor's sub-port,
                                      0-15; usually ``Fbits.LOCAL0`` = 8)
3     grant IPC               7       1: ``x``, 2: ``y`` (the tile), 3: ``dir`` (1 out, 2 in:
4     revoke IPC                      :class:`~apiary.os.uapi.IpcDir`), 4: ``peer x``,
                                      5: ``peer y``, 6: ``peer fbits`` (0-15)
====  ======================  ======  =========================================================

A request shorter than its op needs, of another op (an empty one included), or with an
``fbits`` above 15 or a ``dir`` other than 1 or 2 is a *bad request*: answered at once with
status :data:`STATUS_BAD_REQUEST`, no kernel message sent.

Replies. Every reply starts with ``op`` (the request's byte 0, 0 for an empty request) and
``status``. A read (op 1, well formed) gets the 36-byte *fault reply*; every other request the
8-byte *status reply*:

=======  =====  ====================================================================
bytes    size   fault reply (op 1)
=======  =====  ====================================================================
0        1      ``op`` = 1
1        1      ``status``: 0 OK, 4 NO_ENTRY (index past the end of the log),
                0xFE timeout (the error manager did not answer)
2-3      2      ``total``: faults logged so far (``FAULT_ENTRY.root``, saturating)
4-5      2      ``index``, as asked
6, 7     1 + 1  ``x``, ``y``: the faulting tile (``mem_x/y``)
8        1      ``kind``: a :class:`~apiary.os.uapi.FaultKind` (``op``)
9        1      ``handle``
10       1      ``perm``
11-13    3      ``peer x``, ``peer y``, ``peer fbits``: the offending message's
                destination (or, for an inbound fault, its source)
14-15    2      reserved, 0
16-23    8      ``addr`` (48 bits used)
24-31    8      ``size`` (40 bits used)
32-35    4      ``user``: ``msg_type | inbound << 8`` of the offending message
=======  =====  ====================================================================

The status reply: byte 0 ``op``, 1 ``status`` (0 OK: the kernel message was sent; 0xFF bad
request), 2-7 the request's bytes 1-6 (zero where the request is shorter). In a fault reply
whose status is not OK every field but ``op``, ``status``, ``total`` and ``index`` is zero
(and ``total`` too after a timeout).

NoC messages of the tile (kernel messages carry :data:`~apiary.os.uapi.KERNEL_META`, no payload):

==================  ====  ===================  ===============================  ==============
message             type  from → to            fields                           route
==================  ====  ===================  ===============================  ==============
``UDP_RX_SEGMENT``  26    UDP RX → tile        PACKET_META, the request         (in)
``FAULT_READ``      46    tile → error mgr     ``handle`` = index (low 8 bits)  key
                                                                                ``"kernel"``
``FAULT_ENTRY``     47    error mgr → tile     the entry, ``root``, ``status``  (in)
``RELEASE``         45    tile → error mgr     ``peer_x/y/fbits`` = the tile    key
                                                                                ``"kernel"``
``IPC_GRANT``       44    tile → the tile's    ``status`` 1 grant / 0 revoke,   none: to (x, y,
                          monitor              ``perm`` = dir, ``peer_x/y/      ``LOCAL0``) of
                                               fbits``                          the request
``UDP_TX_SEGMENT``  13    tile → UDP TX        PACKET_META, ``l4_sum`` set;     key ``"reply"``
                                               the reply                        (or None)
==================  ====  ===================  ===============================  ==============

A design declares ``d.route(ctl, errors, key=KERNEL_KEY)`` and ``d.route(ctl, udp_tx,
key=REPLY_KEY)``. The log holds at most 256 entries (``FAULT_READ`` names one by its 8-bit
``handle``), so an index above 255 is answered NO_ENTRY (the error manager is still asked, for
``total``).

Structure::

    noc_in ─▶ split by msg_type ─┬▶ Receiver(PACKET_META) ─▶ CtlIntake: first 7 bytes + meta, queued
                                 └▶ Receiver(KERNEL_META) ─▶ CtlAnswers: the awaited FAULT_ENTRY
    CtlIntake ─▶ engine (CtlDecoder) ─▶ Sender(KERNEL_META) ─────────────┐
                                   └─▶ CtlReply ─▶ Sender(PACKET_META) ─┴▶ noc_out

The components are those of this module; the tile's ``elaborate`` joins them and runs the
engine (its states ``IDLE``, ``DECODE``, ``KERNEL``, ``WAIT``, ``REPLY``). :class:`OfferOnce`
and :func:`offer_reply` serve the other UDP services too
(:class:`~beehive.apps.mem_server.UdpMemoryTile`, :class:`~beehive.apps.vr_witness.VrWitnessTile`).

The input never waits for the output: a request is kept as its first 7 bytes and metadata in a
queue of ``queue`` entries (a request that finds the queue full is dropped unanswered, counted
in ``overflow``; UDP clients retry), and the one ``FAULT_ENTRY`` awaited is taken into a
register. Hence ``streaming = False``. Requests are served one at a time, in order: a read
waits for its ``FAULT_ENTRY`` (a round trip to the error manager) or for ``reply_timeout``
cycles. ``FAULT_ENTRY`` answers are not matched to requests: one that comes while no read
waits (a late answer after a timeout) is dropped and counted, but a late one could be taken
for the next read's.

Python helpers: :func:`fault_request`, :func:`release_request`, :func:`ipc_request` build
requests; :func:`parse_reply` and :func:`parse_fault_reply` read replies;
:func:`fault_reply` and :func:`status_reply` build the replies the tile sends (tests).
"""

import struct
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from apiary.noc.framing import MessageReceiver, offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.os.uapi import KERNEL_FORMAT, KERNEL_META, IpcDir, KernelMeta, KernelMsgType, Status
from apiary.stream.checksum import word_sum
from apiary.stream.emit import network_bytes, send_words
from apiary.stream.layout import payload_signature
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import PACKET_META, MsgType
from apiary.stream.counters import count


__all__ = ["add_control_service", "CTL_PORT", "KernelCtlTile", "OfferOnce", "offer_reply",
           "OP_FAULT_READ", "OP_RELEASE", "OP_IPC_GRANT", "OP_IPC_REVOKE",
           "STATUS_OK", "STATUS_NO_ENTRY", "STATUS_TIMEOUT", "STATUS_BAD_REQUEST",
           "KERNEL_KEY", "REPLY_KEY", "FAULT_REPLY_BYTES", "STATUS_REPLY_BYTES",
           "fault_request", "release_request", "ipc_request", "request_ok", "fault_reply",
           "status_reply", "parse_reply", "parse_fault_reply", "positive_ints"]


OP_FAULT_READ, OP_RELEASE, OP_IPC_GRANT, OP_IPC_REVOKE = 1, 2, 3, 4
STATUS_OK = int(Status.OK)
STATUS_NO_ENTRY = int(Status.NO_ENTRY)
STATUS_TIMEOUT = 0xFE
STATUS_BAD_REQUEST = 0xFF
#: The UDP port the examples serve it on (``apiary faults`` asks there by default).
CTL_PORT = 7100

#: Route keys: ``d.route(ctl, error_manager, key=KERNEL_KEY)``, ``d.route(ctl, udp_tx,
#: key=REPLY_KEY)`` (a route without a key also serves for the replies).
KERNEL_KEY, REPLY_KEY = "kernel", "reply"
#: Bytes a request of each op needs.
REQUEST_BYTES = {OP_FAULT_READ: 3, OP_RELEASE: 4, OP_IPC_GRANT: 7, OP_IPC_REVOKE: 7}
#: The fault reply: op, status, total, index, x, y, kind, handle, perm, peer x/y/fbits, 2 bytes
#: reserved, addr, size, user.
FAULT_REPLY = struct.Struct("!BBHHBBBBBBBB2xQQI")
FAULT_REPLY_BYTES = FAULT_REPLY.size
STATUS_REPLY_BYTES = 8
#: Request bytes the tile keeps (the longest request).
_KEPT = max(REQUEST_BYTES.values())
_FIELDS = ("total", "index", "x", "y", "kind", "handle", "perm", "peer_x", "peer_y",
           "peer_fbits", "addr", "size", "user")


# -- Python helpers --------------------------------------------------------------------------------

def fault_request(index: int) -> bytes:
    """Read entry ``index`` (0 the oldest) of the fault log."""
    return struct.pack("!BH", OP_FAULT_READ, index)


def release_request(x: int, y: int, fbits: int = Fbits.LOCAL0) -> bytes:
    """Release tile (``x``, ``y``): its monitor (on sub-port ``fbits``) resets it and lifts its
    quarantine."""
    return struct.pack("!BBBB", OP_RELEASE, x, y, fbits)


def ipc_request(x: int, y: int, direction: int, peer_x: int, peer_y: int,
                peer_fbits: int = Fbits.LOCAL0, *, grant: bool = True) -> bytes:
    """Grant (or with ``grant=False`` revoke) tile (``x``, ``y``) the IPC capability to send to
    (``direction`` = :data:`IpcDir.OUT`) or receive from (:data:`IpcDir.IN`) tile
    (``peer_x``, ``peer_y``) on sub-port ``peer_fbits``."""
    return struct.pack("!7B", OP_IPC_GRANT if grant else OP_IPC_REVOKE, x, y, int(direction),
                       peer_x, peer_y, peer_fbits)


def request_ok(payload: bytes) -> bool:
    """Whether the tile takes ``payload`` as a well-formed request (else: bad request)."""
    payload = bytes(payload)
    op = payload[0] if payload else 0
    if op not in REQUEST_BYTES or len(payload) < REQUEST_BYTES[op]:
        return False
    if op == OP_RELEASE:
        return payload[3] < 16
    if op in (OP_IPC_GRANT, OP_IPC_REVOKE):
        return payload[3] in (IpcDir.OUT, IpcDir.IN) and payload[6] < 16
    return True


def fault_reply(index: int, status: int, total: int, entry: KernelMeta | None = None) -> bytes:
    """The fault reply to a read of ``index``: ``entry`` (a ``FAULT_ENTRY``'s meta: ``mem_x/y``
    the tile, ``op`` the kind...) gives the fields, zero without it."""
    e = entry if entry is not None else KernelMeta()
    return FAULT_REPLY.pack(OP_FAULT_READ, status, total, index, e.mem_x, e.mem_y, e.op,
                            e.handle, e.perm, e.peer_x, e.peer_y, e.peer_fbits, e.addr, e.size,
                            e.user)


def status_reply(request: bytes, status: int) -> bytes:
    """The 8-byte reply to ``request`` (anything but a well-formed read)."""
    request = bytes(request)
    op = request[0] if request else 0
    return bytes([op, status]) + (request[1:_KEPT] + bytes(_KEPT)).ljust(6, b"\0")[:6]


def parse_fault_reply(payload: bytes) -> dict[str, int]:
    """``{"op", "status", "total", "index", "x", "y", "kind", "handle", "perm", "peer_x",
    "peer_y", "peer_fbits", "addr", "size", "user", "msg_type", "inbound"}`` from a fault reply
    (``msg_type`` and ``inbound`` taken apart from ``user``). ``ValueError`` if it is not one."""
    payload = bytes(payload)
    if len(payload) < FAULT_REPLY_BYTES or payload[0] != OP_FAULT_READ:
        raise ValueError(f"a fault reply is {FAULT_REPLY_BYTES} bytes starting with op "
                         f"{OP_FAULT_READ}, not {payload[:8].hex()}... ({len(payload)} bytes)")
    values = FAULT_REPLY.unpack_from(payload)
    out = {"op": values[0], "status": values[1], **dict(zip(_FIELDS, values[2:]))}
    out["msg_type"] = out["user"] & 0xFF
    out["inbound"] = out["user"] >> 8 & 1
    return out


def parse_reply(payload: bytes) -> dict[str, Any]:
    """Any reply: a fault reply as :func:`parse_fault_reply` reads it, a status reply as
    ``{"op", "status", "args"}`` (``args`` the request's bytes 1-6 echoed)."""
    payload = bytes(payload)
    if len(payload) == FAULT_REPLY_BYTES:
        return parse_fault_reply(payload)
    if len(payload) != STATUS_REPLY_BYTES:
        raise ValueError(f"a reply is {STATUS_REPLY_BYTES} or {FAULT_REPLY_BYTES} bytes, "
                         f"not {len(payload)}")
    return {"op": payload[0], "status": payload[1], "args": payload[2:]}


# -- the tile --------------------------------------------------------------------------------------

def positive_ints(**values: int) -> tuple[int, ...]:
    """``values``' values, in order, once each is checked to be a positive integer (a UDP
    service tile's ``queue`` and ``reply_timeout``, say).

    Raises
    ------
    ValueError
        Naming the first that is not.
    """
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return tuple(values.values())


class OfferOnce(wiring.Component):
    """Offer a transfer once per message: a descriptor or a header that must go out exactly
    once while a tile sends one message (the UDP services here use it for their replies).

    ``valid`` follows ``offer`` combinationally (0 cycles) until the transfer (a cycle with
    ``valid`` and ``ready`` high); from the next cycle on it stays low, whatever ``offer``
    does, until a cycle with ``start`` high (the next message): from the cycle after that it
    follows ``offer`` again. A ``start`` in the cycle of a transfer wins. One bit is
    registered: whether the transfer was made.

    Members
    -------
    start : In(1)
        A new message: offer again from the next cycle on.
    offer : In(1)
        Offer the transfer now (if it has not been made).
    valid : Out(1)
        To the consumer's ``valid``.
    ready : In(1)
        The consumer's ``ready``.
    """

    def __init__(self) -> None:
        super().__init__({"start": In(1), "offer": In(1), "valid": Out(1), "ready": In(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        done = Signal()
        with m.If(self.offer):
            m.d.comb += self.valid.eq(~done)
            with m.If(self.ready):
                m.d.sync += done.eq(1)
        with m.If(self.start):
            m.d.sync += done.eq(0)
        return m


def offer_reply(m: Module, tile: Any, sender: Any, valid: Any, *, request_meta: Any,
                l4_sum: Any, payload_bytes: Any) -> Any:
    """Offer ``sender`` (a ``UDP_TX_SEGMENT`` sender of ``tile``, a UDP service with a
    ``reply_hop``) the descriptor of a reply while ``valid``: to UDP TX, with the request's
    :data:`~beehive.proto.messages.PACKET_META` ``request_meta`` and the reply's ``l4_sum``
    (valid), ``payload_bytes`` long. Returns the sender's ``ready``."""
    meta = Signal(PACKET_META.layout(), name="reply_meta")
    m.d.comb += [meta.eq(request_meta), meta.l4_sum.eq(l4_sum), meta.l4_sum_valid.eq(1)]
    return offer_message(m, sender, valid, dst=address_of(tile.reply_hop, Fbits.LOCAL0),
                         src=(tile.env.x, tile.env.y, Fbits.LOCAL0),
                         msg_type=MsgType.UDP_TX_SEGMENT.value, payload_bytes=payload_bytes,
                         meta=meta)


#: A request as queued: its metadata, its first 7 bytes and its length (up to 7).
REQUEST = data.StructLayout({"meta": PACKET_META.size, "bytes": 8 * _KEPT,
                             "length": range(_KEPT + 1)})
#: A NoC address.
_ADDRESS = data.StructLayout({"x": 8, "y": 8, "fbits": 4})


class CtlIntake(wiring.Component):
    """Keep each request's metadata, first 7 bytes and length in a queue: the
    input never waits for the engine.

    ``hdr`` and ``i`` are always ready. A message's ``hdr`` transfer keeps its metadata, its
    length (saturated at 7) and whether it is a ``UDP_RX_SEGMENT``; its first
    payload word gives the bytes (``empty_packets``: every message has one). With its last
    word a UDP segment enters the queue (a ``SyncFIFOBuffered`` of ``depth`` entries; on ``o``
    2 cycles later when the queue was empty). Throughput: one word per cycle.

    Drops, each counted once per message: a message of another type (``stray``); a request
    that finds the queue full (``overflow``).

    Members
    -------
    hdr : In(stream.Signature(MessageReceiver.header_layout(width, meta_bits=PACKET_META.size)))
        The receiver's header transfers.
    i : In(payload_signature(width))
        The receiver's payload words.
    o : Out(stream.Signature(REQUEST))
        The requests, oldest first.
    stray, overflow : Out(32)
        The drops above.
    """

    def __init__(self, width: int, depth: int) -> None:
        self._depth = depth
        super().__init__({
            "hdr": In(stream.Signature(MessageReceiver.header_layout(
                width, meta_bits=PACKET_META.size))),
            "i": In(payload_signature(width)),
            "o": Out(stream.Signature(REQUEST)),
            "stray": Out(32), "overflow": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.requests = req_q = fifo.SyncFIFOBuffered(width=REQUEST.size,
                                                             depth=self._depth)
        s_meta = Signal(PACKET_META.size)
        s_keep = Signal()           # the message is a UDP segment
        s_length = Signal(range(_KEPT + 1))
        s_bytes = Signal(8 * _KEPT)
        s_first = Signal(init=1)    # the next payload word is the message's first
        hdr = self.hdr.payload
        m.d.comb += [self.hdr.ready.eq(1), self.i.ready.eq(1)]
        with m.If(self.hdr.valid):
            m.d.sync += [
                s_meta.eq(hdr.meta[:PACKET_META.size]),
                s_keep.eq(hdr.msg_type == MsgType.UDP_RX_SEGMENT.value),
                s_length.eq(Mux(hdr.payload_bytes > _KEPT, _KEPT, hdr.payload_bytes)),
            ]
        word = self.i
        first_bytes = Signal(8 * _KEPT)
        m.d.comb += first_bytes.eq(Mux(s_first, word.payload.data[:8 * _KEPT], s_bytes))
        pushed = Signal(REQUEST)
        m.d.comb += [pushed.meta.eq(s_meta), pushed.bytes.eq(first_bytes),
                     pushed.length.eq(s_length), req_q.w_data.eq(pushed),
                     self.o.payload.eq(req_q.r_data), self.o.valid.eq(req_q.r_rdy),
                     req_q.r_en.eq(self.o.ready)]
        with m.If(word.valid):
            m.d.sync += s_first.eq(word.payload.last)
            with m.If(s_first):
                m.d.sync += s_bytes.eq(word.payload.data[:8 * _KEPT])
            with m.If(word.payload.last):
                with m.If(~s_keep):
                    count(m, self.stray)
                with m.Elif(req_q.w_rdy):
                    m.d.comb += req_q.w_en.eq(1)
                with m.Else():
                    count(m, self.overflow)
        return m


class CtlDecoder(wiring.Component):
    """Decode a request (its first 7 ``bytes`` and its ``length``) combinationally (0 cycles):
    whether it is a bad request (see the module docstring), which op it is, and the kernel
    message it turns into, to the error manager at ``kernel_hop`` (a read or a release) or to
    the monitor of the tile it names (an IPC grant or revoke).

    Members
    -------
    bytes : In(56)
        Byte ``k`` in bits ``8k..8k+7``.
    length : In(range(_KEPT + 1))
    bad, read, release : Out(1)
        A bad request; op 1; op 2 (else op 3 or 4, when not bad).
    k_type : Out(8)
        The kernel message's type (``FAULT_READ``, ``RELEASE`` or ``IPC_GRANT``).
    k_dst : Out(StructLayout({"x": 8, "y": 8, "fbits": 4}))
        Its destination.
    k_meta : Out(KERNEL_META)
        Its metadata.
    """

    def __init__(self, kernel_hop: Any) -> None:
        self._kernel = address_of(kernel_hop, Fbits.LOCAL0)
        super().__init__({"bytes": In(8 * _KEPT), "length": In(range(_KEPT + 1)),
                          "bad": Out(1), "read": Out(1), "release": Out(1),
                          "k_type": Out(8), "k_dst": Out(_ADDRESS), "k_meta": Out(KERNEL_META)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        b = [self.bytes[8 * k:8 * k + 8] for k in range(_KEPT)]
        r_op = b[0]
        need = Signal(range(_KEPT + 1))
        with m.Switch(r_op):
            for op, n in REQUEST_BYTES.items():
                with m.Case(op):
                    m.d.comb += need.eq(n)
        is_read = r_op == OP_FAULT_READ
        is_release = r_op == OP_RELEASE
        is_ipc = (r_op == OP_IPC_GRANT) | (r_op == OP_IPC_REVOKE)
        m.d.comb += [
            self.read.eq(is_read), self.release.eq(is_release),
            self.bad.eq((need == 0) | (self.length < need)
                        | (is_release & (b[3] > 15))
                        | (is_ipc & (((b[3] != IpcDir.OUT) & (b[3] != IpcDir.IN))
                                     | (b[6] > 15)))),
        ]
        k_meta = self.k_meta
        with m.If(is_read):
            m.d.comb += k_meta.handle.eq(b[2])
        with m.Elif(is_release):
            m.d.comb += [k_meta.peer_x.eq(b[1]), k_meta.peer_y.eq(b[2]),
                         k_meta.peer_fbits.eq(b[3])]
        with m.Else():
            m.d.comb += [k_meta.status.eq(r_op == OP_IPC_GRANT), k_meta.perm.eq(b[3]),
                         k_meta.peer_x.eq(b[4]), k_meta.peer_y.eq(b[5]),
                         k_meta.peer_fbits.eq(b[6])]
        kx, ky, kf = self._kernel
        m.d.comb += [
            self.k_type.eq(Mux(is_read, KernelMsgType.FAULT_READ.value,
                               Mux(is_release, KernelMsgType.RELEASE.value,
                                   KernelMsgType.IPC_GRANT.value))),
            self.k_dst.x.eq(Mux(is_ipc, b[1], kx)), self.k_dst.y.eq(Mux(is_ipc, b[2], ky)),
            self.k_dst.fbits.eq(Mux(is_ipc, Fbits.LOCAL0, kf)),
        ]
        return m


class CtlAnswers(wiring.Component):
    """Take the ``FAULT_ENTRY`` a read waits for from the kernel messages, and drop every other
    one: the input is always ready and never waits.

    ``answer`` is high (combinationally, 0 cycles) in the cycle of a ``FAULT_ENTRY``'s
    ``hdr`` transfer, ``entry`` its metadata then. A message that comes while ``waiting`` is
    low, or of another type, is counted in ``stray`` (from the next cycle on); so is a
    ``FAULT_ENTRY`` no read waits for.

    Members
    -------
    hdr : In(stream.Signature(MessageReceiver.header_layout(width, meta_bits=KERNEL_META.size)))
        The kernel messages' headers.
    i : In(payload_signature(width))
        Their payload words (none are expected; discarded).
    waiting : In(1)
        A read waits for its ``FAULT_ENTRY``.
    answer : Out(1)
    entry : Out(KERNEL_META)
    stray : Out(32)
    """

    def __init__(self, width: int) -> None:
        super().__init__({
            "hdr": In(stream.Signature(MessageReceiver.header_layout(
                width, meta_bits=KERNEL_META.size))),
            "i": In(payload_signature(width)),
            "waiting": In(1), "answer": Out(1), "entry": Out(KERNEL_META), "stray": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        hdr = self.hdr
        m.d.comb += [hdr.ready.eq(1), self.i.ready.eq(1), self.entry.eq(hdr.payload.meta),
                     self.answer.eq(hdr.valid & (hdr.payload.msg_type
                                                 == KernelMsgType.FAULT_ENTRY.value))]
        with m.If(hdr.valid & ~(self.answer & self.waiting)):
            count(m, self.stray)
        return m


class CtlReply(wiring.Component):
    """Send a reply as payload words: the 36-byte fault reply (``long``) or the 8-byte status
    reply, built from the fields held on the inputs (which must stay put while it is sent).

    ``start`` sends the reply from its first word on: ``o.valid`` rises in the next cycle and
    stays high until the reply's last word (``last`` set, ``nbytes`` the full width: the
    sender frames by ``payload_bytes``) is taken; ``o.valid`` does not wait for ``o.ready``.
    One word per cycle while ``o`` is ready. ``l4_sum`` (the reply's ones' complement sum)
    and ``payload_bytes`` follow the inputs combinationally.

    Members
    -------
    request : In(56)
        The request's first bytes (byte ``k`` in bits ``8k..8k+7``): ``op`` (byte 0), the
        ``index`` of a read, the bytes a status reply echoes.
    status : In(8)
    long : In(1)
        The fault reply (else the status reply).
    entry : In(KERNEL_META)
        The fault reply's fields (``root`` is ``total``).
    start : In(1)
    o : Out(payload_signature(width))
    l4_sum : Out(16)
    payload_bytes : Out(range(FAULT_REPLY_BYTES + 1))
    """

    def __init__(self, width: int) -> None:
        self._width = width
        super().__init__({"request": In(8 * _KEPT), "status": In(8), "long": In(1),
                          "entry": In(KERNEL_META), "start": In(1),
                          "o": Out(payload_signature(width)), "l4_sum": Out(16),
                          "payload_bytes": Out(range(FAULT_REPLY_BYTES + 1))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        e, b = self.entry, [self.request[8 * k:8 * k + 8] for k in range(_KEPT)]
        index = Cat(b[2], b[1])
        be = network_bytes
        long_reply = Cat(b[0], self.status, *be(e.root, 2), *be(index, 2), e.mem_x, e.mem_y,
                         e.op, Const(0, 2), e.handle, e.perm, Const(0, 6), e.peer_x, e.peer_y,
                         e.peer_fbits, Const(0, 4), Const(0, 16), *be(e.addr, 8),
                         *be(e.size, 8), *be(e.user, 4))
        assert len(long_reply) == 8 * FAULT_REPLY_BYTES
        short_reply = Cat(b[0], self.status, *b[1:])
        reply = Signal(8 * FAULT_REPLY_BYTES)
        m.d.comb += [reply.eq(Mux(self.long, long_reply, short_reply)),
                     self.l4_sum.eq(word_sum(reply, len(reply) // 16)),
                     self.payload_bytes.eq(Mux(self.long, FAULT_REPLY_BYTES,
                                               STATUS_REPLY_BYTES))]
        long_words = -(-FAULT_REPLY_BYTES // nb)
        short_words = -(-STATUS_REPLY_BYTES // nb)
        send_words(m, self.o, self.start, reply,
                   final=Mux(self.long, long_words - 1, short_words - 1), final_nbytes=nb)
        return m


class KernelCtlTile(Tile):
    """Serve fault-log reads, releases and IPC grants requested in UDP datagrams (see the
    module docstring for the formats).

    Parameters
    ----------
    env : TileEnv
        Its next hops: the error manager under key ``"kernel"``, UDP TX under ``"reply"`` (or
        ``None``). Standalone (no routes at all) both default to tile (0, 0).
    queue : int
        Requests that may wait while one is served (at least 1).
    reply_timeout : int
        Cycles a read waits for the error manager's ``FAULT_ENTRY`` before it is answered
        with status :data:`STATUS_TIMEOUT` (at least 1).

    Counters: ``reads``, ``releases``, ``grants`` (well-formed requests of op 1, 2, 3 or 4:
    their kernel message sent), ``bad_request`` (answered with status 0xFF), ``timeouts``
    (reads answered with status 0xFE), ``overflow`` (requests dropped unanswered: the queue
    was full), ``dropped`` (messages dropped: of another type, a ``FAULT_ENTRY`` no read waits
    for, or malformed).

    Latency (when the tile is idle): a request's kernel message, or a bad request's reply, has
    its first flit on ``noc_out`` 4 cycles after the request's last flit came in (the queue
    takes 2, decoding 2). A status reply's first flit follows in the cycle after the kernel
    message's last, a fault reply's in the cycle after the ``FAULT_ENTRY``'s last flit came
    in. Throughput: one request at a time, so about 4 cycles plus the kernel message and
    reply flits per request (7 + 7 at 64 bits, 1 + 2 at 512), a read also the round trip to
    the error manager.

    Raises
    ------
    ValueError
        If the routes lack one of the two hops, or a parameter is out of range.
    """

    #: The input never waits for the output (see the module docstring).
    streaming = False

    # Kernel messages (any kernel type) to one receiver, the rest to the other; the output is
    # the sender ``ports.select`` names. IPC_GRANT goes to a tile's monitor, on no route.
    inputs = (Receive("k_rx", *KernelMsgType, meta=KERNEL_FORMAT),
              Receive("seg_rx", MsgType.UDP_RX_SEGMENT, meta=PACKET_META, empty_packets=True))
    outputs = (Send("k_tx", KernelMsgType.FAULT_READ, KernelMsgType.RELEASE,
                    KernelMsgType.IPC_GRANT, meta=KERNEL_FORMAT, keys=[KERNEL_KEY]),
               Send("rep_tx", MsgType.UDP_TX_SEGMENT, meta=PACKET_META, keys=[REPLY_KEY, None]))
    merge = "select"

    def __init__(self, env: TileEnv | None = None, *, queue: int = 4,
                 reply_timeout: int = 1 << 16) -> None:
        self.queue, self.reply_timeout = positive_ints(queue=queue, reply_timeout=reply_timeout)
        super().__init__(env, counters={
            "reads": "fault-log reads (op 1): FAULT_READ sent",
            "releases": "releases (op 2): RELEASE sent to the error manager",
            "grants": "IPC grants and revokes (op 3, 4): IPC_GRANT sent",
            "bad_request": "requests answered with status 0xFF (bad request)",
            "timeouts": "reads answered with status 0xFE: no FAULT_ENTRY in time",
            "overflow": "requests dropped unanswered: the request queue was full",
            "dropped": "messages dropped: of another type, a FAULT_ENTRY no read waits for, "
                       "or malformed",
        })
        routes = self.env.next_hops("data")
        self.kernel_hop = first_hop(routes, KERNEL_KEY)
        self.reply_hop = first_hop(routes, REPLY_KEY, None)
        if routes and (self.kernel_hop is None or self.reply_hop is None):
            raise ValueError(f"{type(self).__name__} {self.env.name!r} needs a route to the "
                             f"error manager with key {KERNEL_KEY!r} and one to UDP TX with key "
                             f"{REPLY_KEY!r} (or no key); it has keys {sorted(map(str, routes))}")

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        counters = self.counters

        # Kernel messages (types 32-47) to one receiver, the rest to the other.
        ports = self.message_ports(m)
        seg_rx, k_rx, k_tx, rep_tx = ports.seg_rx, ports.k_rx, ports.k_tx, ports.rep_tx
        m.submodules.intake = intake = CtlIntake(self.env.width, self.queue)
        connect(m, receiver=seg_rx.o_hdr, intake=intake.hdr)
        connect(m, receiver=seg_rx.o_data, intake=intake.i)
        m.submodules.answers = answers = CtlAnswers(self.env.width)
        connect(m, receiver=k_rx.o_hdr, answers=answers.hdr)
        connect(m, receiver=k_rx.o_data, answers=answers.i)
        m.d.comb += [counters.dropped.eq(seg_rx.errors + k_rx.errors + intake.stray
                                         + answers.stray),
                     counters.overflow.eq(intake.overflow)]

        # The request being served, decoded, and its kernel message.
        r_meta = Signal(PACKET_META.layout())
        r_bytes = Signal(8 * _KEPT)
        r_length = Signal(range(_KEPT + 1))
        m.submodules.decoder = dec = CtlDecoder(self.kernel_hop)
        m.d.comb += [dec.bytes.eq(r_bytes), dec.length.eq(r_length)]
        k_offer = Signal()
        k_ready = offer_message(m, k_tx, k_offer, dst=(dec.k_dst.x, dec.k_dst.y, dec.k_dst.fbits),
                                src=(self.env.x, self.env.y, Fbits.LOCAL0), msg_type=dec.k_type,
                                meta=dec.k_meta)

        # The reply, and the output: one sender at a time.
        r_long, r_status, r_entry = Signal(), Signal(8), Signal(KERNEL_META)
        m.submodules.reply = reply = CtlReply(self.env.width)
        connect(m, reply=reply.o, sender=rep_tx.i_data)
        m.d.comb += [reply.request.eq(r_bytes), reply.status.eq(r_status),
                     reply.long.eq(r_long), reply.entry.eq(r_entry)]
        m.submodules.desc_once = desc = OfferOnce()
        m.d.comb += desc.ready.eq(offer_reply(m, self, rep_tx, desc.valid, request_meta=r_meta,
                                              l4_sum=reply.l4_sum,
                                              payload_bytes=reply.payload_bytes))
        replying = Signal()         # noc_out carries the reply (else the kernel message)
        m.d.comb += ports.select.eq(replying)
        o = self.noc_out
        out_last = o.valid & o.ready & o.payload.last
        timer = Signal(range(self.reply_timeout + 1))

        def start_reply(long: bool, status: Any) -> list:
            m.d.comb += [reply.start.eq(1), desc.start.eq(1)]
            return [r_long.eq(long), r_status.eq(status), replying.eq(1)]

        with m.FSM(name="kernel_ctl"):
            with m.State("IDLE"):
                m.d.comb += intake.o.ready.eq(1)
                with m.If(intake.o.valid):
                    m.d.sync += Cat(r_meta, r_bytes, r_length).eq(intake.o.payload)   # REQUEST
                    m.next = "DECODE"
            with m.State("DECODE"):
                with m.If(dec.bad):
                    count(m, counters.bad_request)
                    m.d.sync += start_reply(False, STATUS_BAD_REQUEST)
                    m.next = "REPLY"
                with m.Else():
                    with m.If(dec.read):
                        count(m, counters.reads)
                    with m.Elif(dec.release):
                        count(m, counters.releases)
                    with m.Else():
                        count(m, counters.grants)
                    m.next = "KERNEL"
            with m.State("KERNEL"):
                m.d.comb += k_offer.eq(1)
                with m.If(k_ready):         # taken with the message's last flit
                    with m.If(dec.read):
                        m.d.sync += timer.eq(self.reply_timeout)
                        m.next = "WAIT"
                    with m.Else():
                        m.d.sync += start_reply(False, STATUS_OK)
                        m.next = "REPLY"
            with m.State("WAIT"):
                m.d.comb += answers.waiting.eq(1)
                m.d.sync += timer.eq(timer - 1)
                with m.If(answers.answer):
                    k_in = answers.entry
                    high = r_bytes[8:16] != 0   # an index the 8-bit handle cannot name
                    found = ~high & (k_in.status == Status.OK)
                    m.d.sync += [
                        r_entry.eq(Mux(found, k_in, 0)), r_entry.root.eq(k_in.root),
                        *start_reply(True, Mux(high, STATUS_NO_ENTRY, k_in.status)),
                    ]
                    m.next = "REPLY"
                with m.Elif(timer == 0):
                    count(m, counters.timeouts)
                    m.d.sync += [r_entry.eq(0), *start_reply(True, STATUS_TIMEOUT)]
                    m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += desc.offer.eq(1)
                with m.If(out_last):
                    m.d.sync += replying.eq(0)
                    m.next = "IDLE"
        return m


def add_control_service(d: Any, kernel: Any, at: tuple[int, int], *, port: int = CTL_PORT,
                        name: str = "ctl") -> None:
    """Add the kernel's control service to design ``d`` (which has the UDP stack's ``udp_rx``
    and ``udp_tx``, and ``kernel``, an :class:`~apiary.os.kernel.Kernel`): the tile at ``at``,
    requests on UDP ``port``, its routes to the error manager and back, and the kernel's trust
    (its ``RELEASE`` and ``IPC_GRANT`` reach the monitors)."""
    d.add(name, KernelCtlTile, at=at)
    d.route("udp_rx", name, key=port)
    d.route(name, "udp_tx", key=REPLY_KEY)
    d.route(name, kernel.errors_name, key=KERNEL_KEY)
    d.route(kernel.errors_name, name)          # FAULT_ENTRY answers (the check sees the loop)
    kernel.trust(name)

