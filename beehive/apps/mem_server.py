"""Reads and writes of a :class:`~apiary.os.memory_tile.MemoryTile` (DRAM) over UDP.

A UDP application (placed after UDP RX like the echo, replying through UDP TX) that turns
request datagrams into ``LOAD_MEM`` / ``STORE_MEM`` messages to a memory tile and the memory
tile's acks into reply datagrams, sent back to the client with the request's metadata
(:data:`~beehive.proto.messages.PACKET_META`, as the echo does).

Datagrams (UDP payloads, big-endian):

=========  =====  ==========================================================================
field      bytes  request / reply
=========  =====  ==========================================================================
``op``     1      1 = read, 2 = write; the reply repeats it
``flags``  1      request: reserved, 0 (ignored). Reply: ``status`` (below)
``length`` 2      bytes to read or write; the reply repeats it
``addr``   4      byte address in the memory (any alignment); the reply repeats it
data       n      write request: ``length`` bytes. Read reply with status 0: ``length``
                  bytes read. Nothing otherwise
=========  =====  ==========================================================================

``status``: 0 ok; 1 memory error (the ack's ``error`` bit: ``addr + length`` beyond the
memory); 2 bad request (a datagram under 8 bytes, an unknown ``op``, a write whose data is not
``length`` bytes, a read longer than ``max_read``), answered without touching memory. Fields a
datagram under 8 bytes lacks read as 0 in the reply. Every request stored gets exactly one
reply.

NoC messages of the tile:

=================  ====  ===============  ==============  ===========================  ========
message            type  from → to        metadata        payload                      route
=================  ====  ===============  ==============  ===========================  ========
``UDP_RX_SEGMENT`` 26    UDP RX → tile    PACKET_META     a request datagram           (in)
``LOAD_MEM``       19    tile → memory    MEM_META addr,  none                         key
                                          size=length                                  ``"memory"``
``STORE_MEM``      20    tile → memory    MEM_META        the ``length`` data bytes    key
                                                                                       ``"memory"``
``LOAD_MEM_ACK``   24    memory → tile    MEM_META,       the bytes read (none on      (in)
                                          error           error)
``STORE_MEM_ACK``  25    memory → tile    MEM_META, error none                         (in)
``UDP_TX_SEGMENT`` 13    tile → UDP TX    PACKET_META,    the reply datagram           key
                                          ``l4_sum`` set                               ``"reply"``
                                                                                       (or None)
=================  ====  ===============  ==============  ===========================  ========

Segments and acks arrive on the same NoC input, told apart by ``msg_type`` on their first flit
(acks: 24, 25; anything else is taken as a segment). Their metadata layouts differ: PACKET_META
(202 bits) and MEM_META (93 bits) are both inline at 512 bits, but at 64 bits they take 4 and 2
metadata flits, so each kind has its own :class:`~apiary.noc.framing.MessageReceiver`.

Structure::

    noc_in ─▶ split by msg_type ─┬▶ Receiver(PACKET_META) ─▶ MemRequests (PacketBuffer, never waits)
                                 └▶ Receiver(MEM_META) ─▶ MemAcks (PacketBuffer + InternetChecksum)
    MemRequests ─▶ engine: MemRequestHead (the first word) ─▶ MemForward (StreamStrip(8)) ─┐
                                                              Sender(MEM_META) ◀───────────┘
    MemAcks ─▶ MemReply (StreamInsert(8-byte reply header)) ─▶ Sender(PACKET_META, l4_sum)
    the senders ─▶ noc_out (one at a time); MemSegment asks for the segment under Apiary

The components are those of this module; the tile's ``elaborate`` joins them and runs the
engine, one request at a time (its states ``IDLE``, ``HEAD``, ``MEMORY``, ``ACK``, ``REPLY``).

The input never waits for the output: requests are stored whole in a buffer that drops (and
counts in ``overflow``) what does not fit rather than hold the input, and the one outstanding
ack always has room in its buffer. Hence ``streaming = False``, which is what makes the
UDP RX → app → memory → app loop deadlock-free (``apiary check``). Both stores also give the
reply its UDP checksum: the ack's data is summed while it is stored, so UDP TX gets a valid
``l4_sum`` and every reply carries a real checksum.

Throughput: one request at a time. Each costs the request's store-and-forward (its words plus
about 5 cycles), the memory round trip (request flits, the memory's latency, the ack's words),
the ack's store-and-forward (its words plus about 5 cycles) and the reply's flits. Measured in
``examples/udp_dram.py`` (Verilator, 512 bits, memory latency 20), from a request frame's first
word in to its reply's last word out: a 64-byte write 55 cycles, a 64-byte read 71, where the
echo of the same 72-byte datagram takes 36. With one request at a time the tile's throughput
is one request per such turnaround (not measured under load: roughly 20 to 40 cycles per small
request at 512 bits, i.e. some millions of requests per second at 250 MHz, plus a word per
cycle for data); the next requests wait in the request buffer (up to 16 of them in 4 KiB)
meanwhile. Acks are not matched to requests: only the memory tile sends them, one per request,
so a stray ack from elsewhere would be taken for the next request's.

Python model: :func:`mem_request` builds request payloads, :func:`parse_mem_reply` reads
replies, :class:`MemServerModel` predicts them.
"""

import struct
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.framing import MessageReceiver, MessageSender, offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.os.memory_tile import LOAD_MEM, MEM_FORMAT, MEM_META, STORE_MEM, MemMsgType
from apiary.os.uapi import KERNEL_FORMAT, KERNEL_META, OFFSET_BITS, KernelMsgType, Perm, Status
from apiary.stream.checksum import InternetChecksum, ones_sum
from apiary.stream.layout import payload_signature
from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.realign import StreamInsert, StreamStrip
from apiary.tile import Receive, Send, Tile

from ..proto.messages import PACKET_META, MsgType
from apiary.stream.counters import count
from .kernel_ctl import OfferOnce, offer_reply


__all__ = ["UdpMemoryTile", "OP_READ", "OP_WRITE", "STATUS_OK", "STATUS_MEMORY_ERROR",
           "STATUS_BAD_REQUEST", "MEMORY_KEY", "REPLY_KEY", "MAX_READ", "mem_request",
           "parse_mem_reply", "mem_reply", "MemServerModel"]


OP_READ, OP_WRITE = 1, 2
STATUS_OK, STATUS_MEMORY_ERROR, STATUS_BAD_REQUEST = 0, 1, 2
#: Route keys: ``d.route(app, memory_tile, key=MEMORY_KEY)``, ``d.route(app, udp_tx,
#: key=REPLY_KEY)`` (a route without a key also serves for the replies).
MEMORY_KEY, REPLY_KEY = "memory", "reply"
MAX_READ = 1024
HEADER = struct.Struct("!BBHI")
#: Longest UDP payload UDP RX forwards (1480-byte IP payload less the UDP header).
MAX_REQUEST = 1472


# -- Python model ----------------------------------------------------------------------------------

def mem_request(op, addr, data_or_length=0, *, flags=0):
    """A request payload: ``mem_request(OP_READ, addr, length)`` or
    ``mem_request(OP_WRITE, addr, data)`` (the length is ``len(data)``). Any ``op`` is packed,
    so bad requests can be built too; ``length=`` can be forced by passing ``(length, data)``."""
    if isinstance(data_or_length, int):
        length, payload = data_or_length, b""
    elif isinstance(data_or_length, tuple):
        length, payload = data_or_length
    else:
        payload = bytes(data_or_length)
        length = len(payload)
    return HEADER.pack(op, flags, length, addr) + bytes(payload)


def mem_reply(op, status, length, addr, data=b""):
    """A reply payload, as the tile sends it."""
    return HEADER.pack(op, status, length, addr) + bytes(data)


def parse_mem_reply(payload):
    """``{"op", "status", "length", "addr", "data"}`` from a reply payload (``ValueError`` if it
    is under 8 bytes)."""
    payload = bytes(payload)
    if len(payload) < HEADER.size:
        raise ValueError(f"a reply is at least {HEADER.size} bytes, not {len(payload)}")
    op, status, length, addr = HEADER.unpack_from(payload)
    return {"op": op, "status": status, "length": length, "addr": addr,
            "data": payload[HEADER.size:]}


class MemServerModel:
    """What the tile answers, over a ``bytearray`` standing for the memory.

    ``reply(payload)`` returns ``(reply payload, counter)``, the counter one of ``"reads"``,
    ``"writes"`` or ``"bad_request"``, and applies writes to :attr:`memory`."""

    def __init__(self, size_bytes, max_read=MAX_READ, init=None):
        self.memory = bytearray(size_bytes) if init is None else bytearray(init)
        self.max_read = max_read

    def reply(self, payload):
        payload = bytes(payload)
        head = (payload + bytes(HEADER.size))[:HEADER.size]
        op, _, length, addr = HEADER.unpack(head)
        bad = (len(payload) < HEADER.size or op not in (OP_READ, OP_WRITE)
               or (op == OP_WRITE and len(payload) - HEADER.size != length)
               or (op == OP_READ and length > self.max_read))
        if bad:
            return mem_reply(op, STATUS_BAD_REQUEST, length, addr), "bad_request"
        if addr + length > len(self.memory):
            return mem_reply(op, STATUS_MEMORY_ERROR, length, addr), \
                "reads" if op == OP_READ else "writes"
        if op == OP_READ:
            return (mem_reply(op, STATUS_OK, length, addr, self.memory[addr:addr + length]),
                    "reads")
        self.memory[addr:addr + length] = payload[HEADER.size:]
        return mem_reply(op, STATUS_OK, length, addr), "writes"


# -- the tile --------------------------------------------------------------------------------------

#: What an ack's descriptor carries: the sum of its data and its ``error`` bit.
ACK_INFO = data.StructLayout({"sum": 16, "error": 1})
#: A request's header as kept while it is served.
_REQUEST_HEAD = data.StructLayout({"op": 8, "length": 16, "addr": 32, "write": 1})


class MemSegment(wiring.Component):
    """Under Apiary: ask the tile's monitor for a segment of ``size`` bytes and keep the handle
    it answers with.

    While ``ask`` is high, a ``CAP_ALLOC`` (``size`` bytes, read-write) to the monitor of tile
    (``x``, ``y``) is offered on ``request`` (to the ``CAP_ALLOC`` sender). ``result`` (the
    ``CAP_RESULT`` receiver's headers) is always ready; ``answered`` is high in the cycle of a
    ``CAP_RESULT`` for a ``CAP_ALLOC``, whose handle is kept in ``handle`` (and whether it
    was granted in ``granted``) from the next cycle on.

    Members
    -------
    result : In(stream.Signature(MessageReceiver.header_layout(width,
                                                               meta_bits=KERNEL_META.size)))
    request : Out(stream.Signature(MessageSender.descriptor_layout(width,
                                                                   meta_bits=KERNEL_META.size)))
    ask : In(1)
    answered : Out(1)
    handle : Out(8)
    granted : Out(1)
    """

    def __init__(self, width: int, size: int, x: int, y: int) -> None:
        self._size, self._at = size, (x, y, Fbits.LOCAL0)
        super().__init__({
            "result": In(stream.Signature(MessageReceiver.header_layout(
                width, meta_bits=KERNEL_META.size))),
            "request": Out(stream.Signature(MessageSender.descriptor_layout(
                width, meta_bits=KERNEL_META.size))),
            "ask": In(1), "answered": Out(1), "handle": Out(8), "granted": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        cap = data.View(KERNEL_META, self.result.payload.meta)
        m.d.comb += self.result.ready.eq(1)
        m.d.comb += self.answered.eq(self.result.valid
                                     & (cap.op == KernelMsgType.CAP_ALLOC.value))
        with m.If(self.answered):
            m.d.sync += [self.handle.eq(cap.handle), self.granted.eq(cap.status == Status.OK)]
        d = self.request.payload
        ask = data.View(KERNEL_META, d.meta)
        m.d.comb += [
            self.request.valid.eq(self.ask),
            d.dst_x.eq(self._at[0]), d.dst_y.eq(self._at[1]), d.dst_fbits.eq(self._at[2]),
            d.src_x.eq(self._at[0]), d.src_y.eq(self._at[1]), d.src_fbits.eq(self._at[2]),
            d.msg_type.eq(KernelMsgType.CAP_ALLOC.value),
            ask.size.eq(self._size), ask.perm.eq(Perm.RW),
        ]
        return m


class MemRequests(wiring.Component):
    """Store each request whole, with its metadata: a
    :class:`~apiary.stream.packet_buffer.PacketBuffer` that is always ready (the input never
    waits for the engine).

    ``hdr`` is always ready; each transfer's metadata goes with the packet that follows on
    ``i`` (``empty_packets``: one per message), which is stored if it fits (at most
    :data:`MAX_REQUEST` bytes, 2 x that buffered, 16 packets queued). Stored requests come out
    as on the buffer: a descriptor (``bytes``, ``info`` = the metadata), then the words.
    Drops: a request that does not fit, counted in ``overflow``.

    Members
    -------
    hdr : In(stream.Signature(MessageReceiver.header_layout(width, meta_bits=PACKET_META.size)))
    i : In(payload_signature(width))
    o_desc : Out(stream.Signature(PacketBuffer.desc_layout(MAX_REQUEST, PACKET_META.size)))
    o : Out(payload_signature(width))
    overflow : Out(32)
    """

    def __init__(self, width: int) -> None:
        self._width = width
        super().__init__({
            "hdr": In(stream.Signature(MessageReceiver.header_layout(
                width, meta_bits=PACKET_META.size))),
            "i": In(payload_signature(width)),
            "o_desc": Out(stream.Signature(PacketBuffer.desc_layout(MAX_REQUEST,
                                                                    PACKET_META.size))),
            "o": Out(payload_signature(width)),
            "overflow": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        meta_w = PACKET_META.size
        m.submodules.requests = req_buf = PacketBuffer(
            self._width, max_bytes=MAX_REQUEST, info_width=meta_w, always_ready=True)
        seg_meta = Signal(meta_w)
        m.d.comb += self.hdr.ready.eq(1)
        with m.If(self.hdr.valid):
            m.d.sync += seg_meta.eq(self.hdr.payload.meta[:meta_w])
        connect(m, requests=flipped(self.i), buffer=req_buf.i)
        connect(m, buffer=req_buf.o_desc, requests=flipped(self.o_desc))
        connect(m, buffer=req_buf.o, requests=flipped(self.o))
        m.d.comb += [
            req_buf.verdict.valid.eq(req_buf.accepted),
            req_buf.verdict.payload.ok.eq(1),
            req_buf.verdict.payload.info.eq(seg_meta),
            self.overflow.eq(req_buf.overflow),
        ]
        return m


class MemAcks(wiring.Component):
    """Store each ack whole while its data is summed: a
    :class:`~apiary.stream.packet_buffer.PacketBuffer` of ``max_read`` bytes (2 acks queued) and
    an :class:`~apiary.stream.checksum.InternetChecksum`.

    ``hdr`` is always ready; its ``error`` bit and the data's ones' complement sum become the
    stored ack's ``info`` (:data:`ACK_INFO`), given when the sum is ready. Acks come one at a
    time (the tile has one outstanding): a header that came before the previous ack's sum was
    ready would give that ack its ``error`` bit. ``i`` waits only when the buffer is full, which
    one ack at a time never fills. Acks come out as on the buffer: a descriptor, then the
    words.

    Members
    -------
    hdr : In(stream.Signature(MessageReceiver.header_layout(width, meta_bits=MEM_META.size)))
    i : In(payload_signature(width))
    o_desc : Out(stream.Signature(PacketBuffer.desc_layout(max_read, ACK_INFO.size)))
    o : Out(payload_signature(width))
    """

    def __init__(self, width: int, max_read: int) -> None:
        self._width, self._max_read = width, max_read
        super().__init__({
            "hdr": In(stream.Signature(MessageReceiver.header_layout(
                width, meta_bits=MEM_META.size))),
            "i": In(payload_signature(width)),
            "o_desc": Out(stream.Signature(PacketBuffer.desc_layout(max_read, ACK_INFO.size))),
            "o": Out(payload_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.acks = ack_buf = PacketBuffer(
            self._width, max_bytes=self._max_read, info_width=ACK_INFO.size, max_queued=2)
        m.submodules.ack_sum = ack_sum = InternetChecksum(self._width, max_offset=0)
        ack_error = Signal()
        m.d.comb += self.hdr.ready.eq(1)
        with m.If(self.hdr.valid):
            m.d.sync += ack_error.eq(data.View(MEM_META, self.hdr.payload.meta).error)
        connect(m, acks=flipped(self.i), buffer=ack_buf.i)
        connect(m, buffer=ack_buf.o_desc, acks=flipped(self.o_desc))
        connect(m, buffer=ack_buf.o, acks=flipped(self.o))
        info = Signal(ACK_INFO)
        m.d.comb += [
            ack_sum.i.valid.eq(self.i.valid & self.i.ready),
            ack_sum.i.payload.eq(self.i.payload),
            ack_sum.offset.eq(0), ack_sum.initial.eq(0),
            info.sum.eq(ack_sum.o.payload.sum), info.error.eq(ack_error),
            ack_buf.verdict.valid.eq(ack_sum.o.valid),
            ack_buf.verdict.payload.ok.eq(1),
            ack_buf.verdict.payload.info.eq(info),
        ]
        return m


class MemRequestHead(wiring.Component):
    """Read a request's 8-byte header from its first ``word`` (lanes 0-7), tell a bad request
    (the module docstring's status 2) by its length ``bytes``, and keep the header of the
    request being served, with the memory request it turns into.

    ``op`` and ``bad`` follow ``word`` and ``bytes`` combinationally (0 cycles). A request is
    bad if it is under 8 bytes, of an unknown ``op``, a write whose data is not ``length``
    bytes, or a read longer than ``max_read``. ``take`` keeps the header in ``kept`` from the
    next cycle on (``write``: its op is a write); the memory request follows it: a
    ``STORE_MEM`` of the ``length`` data bytes or a ``LOAD_MEM``, at ``addr`` (with
    ``segment``: offset ``addr`` into the segment of ``handle``).

    Members
    -------
    word : In(64)
    bytes : In(range(MAX_REQUEST + 1))
    take : In(1)
    handle : In(8)
    op : Out(8)
    bad : Out(1)
    kept : Out(StructLayout({"op": 8, "length": 16, "addr": 32, "write": 1}))
    mem_type : Out(8)
    mem_bytes : Out(16)
    mem_meta : Out(MEM_META)
    """

    def __init__(self, max_read: int, *, segment: bool = False) -> None:
        self._max_read, self._segment = max_read, segment
        super().__init__({"word": In(64), "bytes": In(range(MAX_REQUEST + 1)), "take": In(1),
                          "handle": In(8), "op": Out(8), "bad": Out(1),
                          "kept": Out(_REQUEST_HEAD), "mem_type": Out(8), "mem_bytes": Out(16),
                          "mem_meta": Out(MEM_META)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        word = self.word
        h_op = word[0:8]
        h_len = Cat(word[24:32], word[16:24])
        h_addr = Cat(word[56:64], word[48:56], word[40:48], word[32:40])
        m.d.comb += [
            self.op.eq(h_op),
            self.bad.eq((self.bytes < 8)
                        | ((h_op != OP_READ) & (h_op != OP_WRITE))
                        | ((h_op == OP_WRITE) & (self.bytes - 8 != h_len))
                        | ((h_op == OP_READ) & (h_len > self._max_read))),
        ]
        r_op, r_len, r_addr, r_write = Signal(8), Signal(16), Signal(32), Signal()
        m.d.comb += self.kept.eq(Cat(r_op, r_len, r_addr, r_write))
        with m.If(self.take):
            m.d.sync += [r_op.eq(h_op), r_len.eq(h_len), r_addr.eq(h_addr),
                         r_write.eq(h_op == OP_WRITE)]
        m.d.comb += [
            self.mem_type.eq(Mux(r_write, STORE_MEM, LOAD_MEM)),
            self.mem_bytes.eq(Mux(r_write, r_len, 0)),
            self.mem_meta.addr.eq(Cat(r_addr, Const(0, OFFSET_BITS - 32), self.handle)
                                  if self._segment else r_addr),
            self.mem_meta.size.eq(r_len),
        ]
        return m


class MemForward(wiring.Component):
    """Pass a stored request's data, less its 8-byte header, on to the memory request (a
    :class:`~apiary.stream.realign.StreamStrip`), or discard the whole request.

    ``start`` takes the request on ``i`` from the next cycle on: forwarded if ``keep`` was
    high with it, else discarded at one word per cycle (``i`` ready). ``busy`` is high from
    the cycle after ``start`` until the cycle after the request's last word is taken; ``i`` is
    not ready meanwhile, nor while idle.

    Members
    -------
    i : In(payload_signature(width))
    o : Out(payload_signature(width))
    start, keep : In(1)
    busy : Out(1)
    """

    def __init__(self, width: int) -> None:
        self._width = width
        super().__init__({"i": In(payload_signature(width)), "o": Out(payload_signature(width)),
                          "start": In(1), "keep": In(1), "busy": Out(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        forwarding = Signal()
        m.submodules.strip = strip = StreamStrip(self._width, 8, fixed=True)
        connect(m, strip=strip.o, forward=flipped(self.o))
        with m.If(self.busy & forwarding):
            connect(m, forward=flipped(self.i), strip=strip.i)
        with m.Elif(self.busy):
            m.d.comb += self.i.ready.eq(1)
        with m.If(self.i.valid & self.i.ready & self.i.payload.last):
            m.d.sync += self.busy.eq(0)
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), forwarding.eq(self.keep)]
        return m


class MemReply(wiring.Component):
    """Send a reply: its 8-byte header (the request's ``op``, ``length`` and ``addr`` from
    ``head``, and its status) inserted before the ack's data on ``i`` or before an empty
    packet (a :class:`~apiary.stream.realign.StreamInsert`), and give its length and UDP sum.

    Each reply is begun by ``start`` (its header is offered again, while ``offer`` is high:
    an :class:`~beehive.apps.kernel_ctl.OfferOnce`) with one of: ``refuse``, a bad request's
    reply (status 2, no data); ``take_ack``, the reply with the ack ``ack`` describes (its
    data, their sum, status 0 or 1 by its ``error``). Either takes effect from the next
    cycle on; ``done`` (the reply is sent) stops taking the ack's words. ``payload_bytes``
    and ``l4_sum`` (the header's sum plus the data's) follow combinationally.

    Members
    -------
    head : In(StructLayout({"op": 8, "length": 16, "addr": 32, "write": 1}))
    ack : In(PacketBuffer.desc_layout(max_read, ACK_INFO.size))
    start, offer, refuse, take_ack, done : In(1)
    i : In(payload_signature(width))
    o : Out(payload_signature(width))
    payload_bytes : Out(range(max_read + 9))
    l4_sum : Out(16)
    """

    def __init__(self, width: int, max_read: int) -> None:
        self._width, self._max_read = width, max_read
        super().__init__({
            "head": In(_REQUEST_HEAD), "ack": In(PacketBuffer.desc_layout(max_read,
                                                                          ACK_INFO.size)),
            "start": In(1), "offer": In(1), "refuse": In(1), "take_ack": In(1), "done": In(1),
            "i": In(payload_signature(width)), "o": Out(payload_signature(width)),
            "payload_bytes": Out(range(max_read + 9)), "l4_sum": Out(16),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        status = Signal(2)
        from_ack = Signal()         # the reply's payload is the ack's (else an empty packet)
        data_sum = Signal(16)
        data_bytes = Signal(range(self._max_read + 1))
        info = data.View(ACK_INFO, self.ack.info)
        with m.If(self.refuse):
            m.d.sync += [status.eq(STATUS_BAD_REQUEST), data_sum.eq(0), data_bytes.eq(0),
                         from_ack.eq(0)]
        with m.If(self.take_ack):
            m.d.sync += [data_sum.eq(info.sum), data_bytes.eq(self.ack.bytes),
                         status.eq(Mux(info.error, STATUS_MEMORY_ERROR, STATUS_OK)),
                         from_ack.eq(1)]
        with m.If(self.done):
            m.d.sync += from_ack.eq(0)

        m.submodules.insert = ins = StreamInsert(self._width, 8, fixed=True)
        connect(m, insert=ins.o, reply=flipped(self.o))
        with m.If(from_ack):
            connect(m, reply=flipped(self.i), insert=ins.i)
        with m.Else():
            m.d.comb += [ins.i.valid.eq(1), ins.i.payload.last.eq(1),
                         ins.i.payload.nbytes.eq(0)]
        m.submodules.head_once = head = OfferOnce()
        op, length, addr = self.head.op, self.head.length, self.head.addr
        m.d.comb += [
            head.start.eq(self.start), head.offer.eq(self.offer),
            ins.hdr.valid.eq(head.valid), head.ready.eq(ins.hdr.ready),
            ins.hdr.payload.data.eq(Cat(op, status, Const(0, 6), length[8:16], length[0:8],
                                        addr[24:32], addr[16:24], addr[8:16], addr[0:8])),
            self.payload_bytes.eq(8 + data_bytes),
            self.l4_sum.eq(ones_sum(Cat(status, Const(0, 6), op), length, addr[16:32],
                                    addr[0:16], data_sum)),
        ]
        return m


class UdpMemoryTile(Tile):
    """Serve memory reads and writes requested in UDP datagrams (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        Its next hops: the memory tile under key ``"memory"``, UDP TX under ``"reply"`` (or
        ``None``). Standalone (no routes at all) both default to tile (0, 0).
    max_read : int
        Longest read served (bytes); longer ones are bad requests. Also the ack buffer's size.
    segment : int or None
        Run as an untrusted Apiary tile: out of reset, ask the monitor for a segment of this
        many bytes (``CAP_ALLOC``) and wait for its handle; every request's ``addr`` is then an
        offset into that segment (the tile sends ``handle << 40 | addr``, the monitor checks and
        translates it), and no route to a memory tile is needed. A request beyond the segment
        is a violation: the monitor quarantines the tile and nothing more is answered.

    Counters: ``reads`` and ``writes`` (requests sent to memory, answered with status 0 or 1),
    ``bad_request`` (answered with status 2), ``memory_errors`` (answered with status 1),
    ``overflow`` (requests dropped unanswered: no room in the request buffer, a burst of
    requests while one is served, or longer than 1472 bytes).
    """

    #: The input never waits for the output (see the module docstring).
    streaming = False

    # The input is split by type in this order (the segments take every other type); the
    # output is the sender ``ports.select`` names. CAP_ALLOC and CAP_RESULT (with ``segment``)
    # are between the tile and its monitor and follow no route; their framing is built either
    # way.
    inputs = (Receive("ack_rx", MemMsgType.LOAD_MEM_ACK, MemMsgType.STORE_MEM_ACK,
                      meta=MEM_FORMAT, empty_packets=True),
              Receive("cap_rx", KernelMsgType.CAP_RESULT, meta=KERNEL_FORMAT),
              Receive("seg_rx", MsgType.UDP_RX_SEGMENT, meta=PACKET_META, empty_packets=True))
    outputs = (Send("mem_tx", MemMsgType.LOAD_MEM, MemMsgType.STORE_MEM, meta=MEM_FORMAT,
                    empty_packets=True, keys=[MEMORY_KEY]),
               Send("rep_tx", MsgType.UDP_TX_SEGMENT, meta=PACKET_META, keys=[REPLY_KEY, None]),
               Send("cap_tx", KernelMsgType.CAP_ALLOC, meta=KERNEL_FORMAT, keys=()))
    merge = "select"

    def __init__(self, env=None, *, max_read=MAX_READ, segment=None):
        if not isinstance(max_read, int) or isinstance(max_read, bool) or not 1 <= max_read \
                <= 0xFFFF:
            raise ValueError(f"max_read must be a number of bytes from 1 to 65535, "
                             f"not {max_read!r}")
        if segment is not None and (not isinstance(segment, int) or isinstance(segment, bool)
                                    or not 1 <= segment < 1 << OFFSET_BITS):
            raise ValueError(f"segment must be a size in bytes from 1 to 2**{OFFSET_BITS} - 1, "
                             f"not {segment!r}")
        self.max_read = max_read
        self.segment = segment
        super().__init__(env, counters={
            "reads": "read requests sent to memory",
            "writes": "write requests sent to memory",
            "bad_request": "requests answered with status 2 (bad request)",
            "memory_errors": "requests answered with status 1 (memory error)",
            "overflow": "requests dropped unanswered: no room, or longer than 1472 bytes",
        })
        routes = self.env.next_hops("data")
        self.memory_hop = first_hop(routes, MEMORY_KEY)
        self.reply_hop = first_hop(routes, REPLY_KEY, None)
        if routes and ((self.memory_hop is None and segment is None)
                       or self.reply_hop is None):
            raise ValueError(f"{type(self).__name__} {self.env.name!r} needs a route to the "
                             f"memory tile with key {MEMORY_KEY!r} and one to UDP TX with key "
                             f"{REPLY_KEY!r} (or no key); it has keys {sorted(map(str, routes))}")

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, counters = self.env.width, self.counters
        me = (self.env.x, self.env.y, Fbits.LOCAL0)
        ports = self.message_ports(m)
        seg_rx, ack_rx, cap_rx = ports.seg_rx, ports.ack_rx, ports.cap_rx
        mem_tx, rep_tx, cap_tx = ports.mem_tx, ports.rep_tx, ports.cap_tx

        # Under Apiary: the segment, asked for out of reset (its messages framed either way).
        m.submodules.segment = segment = MemSegment(width, self.segment or 0, *me[:2])
        connect(m, receiver=cap_rx.o_hdr, segment=segment.result)
        connect(m, segment=segment.request, sender=cap_tx.i_hdr)
        m.d.comb += cap_tx.i_data.valid.eq(0)

        # Requests and acks, each stored whole: the input never waits for the output.
        m.submodules.requests = requests = MemRequests(width)
        connect(m, receiver=seg_rx.o_hdr, requests=requests.hdr)
        connect(m, receiver=seg_rx.o_data, requests=requests.i)
        m.d.comb += counters.overflow.eq(requests.overflow)
        m.submodules.acks = acks = MemAcks(width, self.max_read)
        connect(m, receiver=ack_rx.o_hdr, acks=acks.hdr)
        connect(m, receiver=ack_rx.o_data, acks=acks.i)

        # The output: one sender at a time.
        replying = Signal()         # noc_out carries the reply sender
        asking = Signal()           # ... the CAP_ALLOC sender (never both; else mem_tx)
        m.d.comb += ports.select.eq(Cat(replying, asking))     # outputs 1, 2 (else 0)
        o = self.noc_out
        out_last = o.valid & o.ready & o.payload.last

        # The request being served: its header, its data passed to the memory request (or
        # discarded), the memory request's descriptor, the reply.
        r_bytes = Signal(range(MAX_REQUEST + 1))
        r_meta = Signal(PACKET_META.layout())
        m.submodules.request_head = head = MemRequestHead(self.max_read,
                                                          segment=self.segment is not None)
        m.d.comb += [head.word.eq(requests.o.payload.data[:64]), head.bytes.eq(r_bytes),
                     head.handle.eq(segment.handle)]
        m.submodules.forward = fwd = MemForward(width)
        connect(m, requests=requests.o, forward=fwd.i)
        connect(m, forward=fwd.o, sender=mem_tx.i_data)
        mem_offer, rep_offer = Signal(), Signal()   # the descriptor offered to either sender
        mem_ready = offer_message(m, mem_tx, mem_offer, dst=address_of(self.memory_hop),
                                  src=me, msg_type=head.mem_type, payload_bytes=head.mem_bytes,
                                  meta=head.mem_meta)
        m.submodules.reply = reply = MemReply(width, self.max_read)
        connect(m, reply=reply.o, sender=rep_tx.i_data)
        connect(m, acks=acks.o, reply=reply.i)
        m.d.comb += [reply.head.eq(head.kept), reply.ack.eq(acks.o_desc.payload)]
        rep_ready = offer_reply(m, self, rep_tx, rep_offer, request_meta=r_meta,
                                l4_sum=reply.l4_sum, payload_bytes=reply.payload_bytes)
        m.submodules.desc_once = desc = OfferOnce()     # one descriptor per message sent

        with m.FSM(name="mem_server", init="ALLOC" if self.segment else "IDLE"):
            with m.State("ALLOC"):              # under Apiary: ask for the segment, once
                m.d.comb += [asking.eq(1), segment.ask.eq(1)]
                with m.If(segment.request.ready):
                    m.next = "ALLOCATING"
            with m.State("ALLOCATING"):
                with m.If(segment.answered):
                    m.next = "IDLE"
            with m.State("IDLE"):
                m.d.comb += requests.o_desc.ready.eq(~fwd.busy)
                with m.If(requests.o_desc.valid & ~fwd.busy):
                    m.d.sync += Cat(r_bytes, r_meta).eq(requests.o_desc.payload)  # bytes, info
                    m.next = "HEAD"
            with m.State("HEAD"):
                with m.If(requests.o.valid):
                    m.d.comb += [head.take.eq(1), fwd.start.eq(1), fwd.keep.eq(~head.bad),
                                 desc.start.eq(1), reply.start.eq(1)]
                    with m.If(head.bad):
                        count(m, counters.bad_request)
                        m.d.comb += reply.refuse.eq(1)
                        m.d.sync += replying.eq(1)
                        m.next = "REPLY"
                    with m.Else():
                        with m.If(head.op == OP_WRITE):
                            count(m, counters.writes)
                        with m.Else():
                            count(m, counters.reads)
                        m.next = "MEMORY"
            with m.State("MEMORY"):
                m.d.comb += [desc.offer.eq(1), mem_offer.eq(desc.valid), desc.ready.eq(mem_ready)]
                with m.If(out_last):
                    m.next = "ACK"
            with m.State("ACK"):
                m.d.comb += acks.o_desc.ready.eq(~fwd.busy)
                with m.If(acks.o_desc.valid & ~fwd.busy):
                    m.d.comb += [desc.start.eq(1), reply.start.eq(1), reply.take_ack.eq(1)]
                    m.d.sync += replying.eq(1)
                    with m.If(data.View(ACK_INFO, acks.o_desc.payload.info).error):
                        count(m, counters.memory_errors)
                    m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += [desc.offer.eq(1), rep_offer.eq(desc.valid), desc.ready.eq(rep_ready),
                             reply.offer.eq(1)]
                with m.If(out_last):
                    m.d.comb += reply.done.eq(1)
                    m.d.sync += replying.eq(0)
                    m.next = "IDLE"
        return m
