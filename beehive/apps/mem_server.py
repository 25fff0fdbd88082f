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

    noc_in ─▶ split by msg_type ─┬▶ Receiver(PACKET_META) ─▶ request PacketBuffer (always ready)
                                 └▶ Receiver(MEM_META) ─▶ ack PacketBuffer + InternetChecksum
    request buffer ─▶ engine: parse the first word ─▶ StreamStrip(8) ─▶ Sender(MEM_META) ─┐
    ack buffer ─▶ StreamInsert(8-byte reply header) ─▶ Sender(PACKET_META, l4_sum) ───────┴▶ noc_out

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

from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.lib import data
from amaranth.lib.wiring import connect

from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.os.memory_tile import LOAD_MEM, MEM_FORMAT, MEM_META, STORE_MEM, MemMsgType
from apiary.os.uapi import KERNEL_FORMAT, KERNEL_META, OFFSET_BITS, KernelMsgType, Perm, Status
from apiary.stream.checksum import InternetChecksum, ones_sum
from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.realign import StreamInsert, StreamStrip
from apiary.tile import Receive, Send, Tile

from ..proto.messages import PACKET_META, MsgType
from apiary.stream.counters import count


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

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        x, y = self.env.x, self.env.y
        mem_x, mem_y, mem_fbits = address_of(self.memory_hop)
        rep_x, rep_y, rep_fbits = address_of(self.reply_hop)

        # -- the framing: input split by msg_type into the receivers, senders selected -----------
        ports = self.message_ports(m)
        seg_rx, ack_rx, cap_rx = ports.seg_rx, ports.ack_rx, ports.cap_rx
        mem_tx, rep_tx, cap_tx = ports.mem_tx, ports.rep_tx, ports.cap_tx

        # -- under Apiary: the segment's handle, from the monitor's CAP_RESULT --------------------
        handle = Signal(8)
        allocated = Signal()
        cap = data.View(KERNEL_META, cap_rx.o_hdr.payload.meta)
        m.d.comb += cap_rx.o_hdr.ready.eq(1)
        with m.If(cap_rx.o_hdr.valid & (cap.op == KernelMsgType.CAP_ALLOC.value)):
            m.d.sync += [handle.eq(cap.handle), allocated.eq(cap.status == Status.OK)]

        # -- requests: stored whole with their metadata -------------------------------------------
        meta_w = PACKET_META.size
        m.submodules.requests = req_buf = PacketBuffer(
            width, max_bytes=MAX_REQUEST, info_width=meta_w, always_ready=True)
        seg_meta = Signal(meta_w)
        m.d.comb += seg_rx.o_hdr.ready.eq(1)
        with m.If(seg_rx.o_hdr.valid):
            m.d.sync += seg_meta.eq(seg_rx.o_hdr.payload.meta[:meta_w])
        connect(m, receiver=seg_rx.o_data, buffer=req_buf.i)
        m.d.comb += [
            req_buf.verdict.valid.eq(req_buf.accepted),
            req_buf.verdict.payload.ok.eq(1),
            req_buf.verdict.payload.info.eq(seg_meta),
            self.counters.overflow.eq(req_buf.overflow),
        ]

        # -- acks: stored whole while their data is summed ----------------------------------------
        ack_info = data.StructLayout({"sum": 16, "error": 1})
        m.submodules.acks = ack_buf = PacketBuffer(
            width, max_bytes=self.max_read, info_width=ack_info.size, max_queued=2)
        m.submodules.ack_sum = ack_sum = InternetChecksum(width, max_offset=0)
        ack_error = Signal()
        m.d.comb += ack_rx.o_hdr.ready.eq(1)
        with m.If(ack_rx.o_hdr.valid):
            m.d.sync += ack_error.eq(data.View(MEM_META, ack_rx.o_hdr.payload.meta).error)
        connect(m, receiver=ack_rx.o_data, buffer=ack_buf.i)
        info = Signal(ack_info)
        m.d.comb += [
            ack_sum.i.valid.eq(ack_rx.o_data.valid & ack_rx.o_data.ready),
            ack_sum.i.payload.eq(ack_rx.o_data.payload),
            ack_sum.offset.eq(0), ack_sum.initial.eq(0),
            info.sum.eq(ack_sum.o.payload.sum), info.error.eq(ack_error),
            ack_buf.verdict.valid.eq(ack_sum.o.valid),
            ack_buf.verdict.payload.ok.eq(1),
            ack_buf.verdict.payload.info.eq(info),
        ]

        # -- the output: one sender at a time ---------------------------------------------------
        replying = Signal()         # noc_out carries the reply sender
        asking = Signal()           # ... the CAP_ALLOC sender (never both; else mem_tx)
        m.d.comb += ports.select.eq(Cat(replying, asking))     # outputs 1, 2 (else 0)
        o = self.noc_out
        cd = cap_tx.i_hdr.payload
        ask = data.View(KERNEL_META, cd.meta)
        m.d.comb += [
            cd.dst_x.eq(x), cd.dst_y.eq(y), cd.dst_fbits.eq(Fbits.LOCAL0),
            cd.src_x.eq(x), cd.src_y.eq(y), cd.src_fbits.eq(Fbits.LOCAL0),
            cd.msg_type.eq(KernelMsgType.CAP_ALLOC.value),
            ask.size.eq(self.segment or 0), ask.perm.eq(Perm.RW),
            cap_tx.i_data.valid.eq(0),
        ]
        out_last = o.valid & o.ready & o.payload.last

        # -- the request being served --------------------------------------------------------------
        r_bytes = Signal(range(MAX_REQUEST + 1))
        r_meta = Signal(PACKET_META.layout())
        r_op = Signal(8)
        r_len = Signal(16)
        r_addr = Signal(32)
        r_status = Signal(2)
        r_write = Signal()
        req_busy = Signal()         # the request's words are being passed or discarded
        req_fwd = Signal()          # ... to the strip (else discarded)

        word = req_buf.o.payload.data
        h_op = word[0:8]
        h_len = Cat(word[24:32], word[16:24])
        h_addr = Cat(word[56:64], word[48:56], word[40:48], word[32:40])
        bad = Signal()
        m.d.comb += bad.eq((r_bytes < 8)
                           | ((h_op != OP_READ) & (h_op != OP_WRITE))
                           | ((h_op == OP_WRITE) & (r_bytes - 8 != h_len))
                           | ((h_op == OP_READ) & (h_len > self.max_read)))

        m.submodules.strip = strip = StreamStrip(width, 8, fixed=True)
        connect(m, strip=strip.o, sender=mem_tx.i_data)
        with m.If(req_busy & req_fwd):
            connect(m, buffer=req_buf.o, strip=strip.i)
        with m.Elif(req_busy):
            m.d.comb += req_buf.o.ready.eq(1)
        with m.If(req_buf.o.valid & req_buf.o.ready & req_buf.o.payload.last):
            m.d.sync += req_busy.eq(0)

        # The memory request.
        md = mem_tx.i_hdr.payload
        mm = data.View(MEM_META, md.meta)
        m.d.comb += [
            md.dst_x.eq(mem_x), md.dst_y.eq(mem_y), md.dst_fbits.eq(mem_fbits),
            md.src_x.eq(x), md.src_y.eq(y), md.src_fbits.eq(Fbits.LOCAL0),
            md.msg_type.eq(Mux(r_write, STORE_MEM, LOAD_MEM)),
            md.payload_bytes.eq(Mux(r_write, r_len, 0)),
            mm.addr.eq(r_addr if self.segment is None
                       else Cat(r_addr, Const(0, OFFSET_BITS - 32), handle)),
            mm.size.eq(r_len), mm.error.eq(0),
        ]

        # The reply: header inserted in front of the ack's data (or of an empty packet).
        m.submodules.insert = ins = StreamInsert(width, 8, fixed=True)
        connect(m, insert=ins.o, sender=rep_tx.i_data)
        reply_head = Cat(r_op, r_status, Const(0, 6), r_len[8:16], r_len[0:8],
                         r_addr[24:32], r_addr[16:24], r_addr[8:16], r_addr[0:8])
        from_ack = Signal()         # the reply's payload is the ack's (else an empty packet)
        with m.If(from_ack):
            connect(m, buffer=ack_buf.o, insert=ins.i)
        with m.Else():
            m.d.comb += [ins.i.valid.eq(1), ins.i.payload.last.eq(1),
                         ins.i.payload.nbytes.eq(0)]
        data_sum = Signal(16)
        data_bytes = Signal(range(self.max_read + 1))
        rd = rep_tx.i_hdr.payload
        rm = data.View(PACKET_META.layout(), rd.meta)
        m.d.comb += [
            rd.dst_x.eq(rep_x), rd.dst_y.eq(rep_y), rd.dst_fbits.eq(rep_fbits),
            rd.src_x.eq(x), rd.src_y.eq(y), rd.src_fbits.eq(Fbits.LOCAL0),
            rd.msg_type.eq(MsgType.UDP_TX_SEGMENT.value),
            rd.payload_bytes.eq(8 + data_bytes),
            rm.eq(r_meta),
            rm.l4_sum.eq(ones_sum(Cat(r_status, Const(0, 6), r_op), r_len, r_addr[16:32],
                                  r_addr[0:16], data_sum)),
            rm.l4_sum_valid.eq(1),
            ins.hdr.payload.data.eq(reply_head),
        ]
        desc_done = Signal()
        head_done = Signal()

        with m.FSM(name="mem_server", init="ALLOC" if self.segment else "IDLE"):
            with m.State("ALLOC"):              # under Apiary: ask for the segment, once
                m.d.comb += [asking.eq(1), cap_tx.i_hdr.valid.eq(1)]
                with m.If(cap_tx.i_hdr.ready):
                    m.next = "ALLOCATING"
            with m.State("ALLOCATING"):
                with m.If(cap_rx.o_hdr.valid & (cap.op == KernelMsgType.CAP_ALLOC.value)):
                    m.next = "IDLE"
            with m.State("IDLE"):
                m.d.comb += req_buf.o_desc.ready.eq(~req_busy)
                with m.If(req_buf.o_desc.valid & ~req_busy):
                    m.d.sync += [r_bytes.eq(req_buf.o_desc.payload.bytes),
                                 r_meta.eq(req_buf.o_desc.payload.info)]
                    m.next = "HEAD"
            with m.State("HEAD"):
                with m.If(req_buf.o.valid):
                    m.d.sync += [r_op.eq(h_op), r_len.eq(h_len), r_addr.eq(h_addr),
                                 r_write.eq(h_op == OP_WRITE), req_busy.eq(1),
                                 req_fwd.eq(~bad), desc_done.eq(0), head_done.eq(0)]
                    with m.If(bad):
                        m.d.sync += [self.counters.bad_request.eq(self.counters.bad_request + 1),
                                     r_status.eq(STATUS_BAD_REQUEST), data_sum.eq(0),
                                     data_bytes.eq(0), from_ack.eq(0), replying.eq(1)]
                        m.next = "REPLY"
                    with m.Else():
                        with m.If(h_op == OP_WRITE):
                            count(m, self.counters.writes)
                        with m.Else():
                            count(m, self.counters.reads)
                        m.next = "MEMORY"
            with m.State("MEMORY"):
                m.d.comb += mem_tx.i_hdr.valid.eq(~desc_done)
                with m.If(mem_tx.i_hdr.valid & mem_tx.i_hdr.ready):
                    m.d.sync += desc_done.eq(1)
                with m.If(out_last):
                    m.next = "ACK"
            with m.State("ACK"):
                m.d.comb += ack_buf.o_desc.ready.eq(~req_busy)
                with m.If(ack_buf.o_desc.valid & ~req_busy):
                    info_r = data.View(ack_info, ack_buf.o_desc.payload.info)
                    m.d.sync += [
                        data_sum.eq(info_r.sum), data_bytes.eq(ack_buf.o_desc.payload.bytes),
                        r_status.eq(Mux(info_r.error, STATUS_MEMORY_ERROR, STATUS_OK)),
                        from_ack.eq(1), replying.eq(1), desc_done.eq(0), head_done.eq(0),
                    ]
                    with m.If(info_r.error):
                        count(m, self.counters.memory_errors)
                    m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += [rep_tx.i_hdr.valid.eq(~desc_done), ins.hdr.valid.eq(~head_done)]
                with m.If(rep_tx.i_hdr.valid & rep_tx.i_hdr.ready):
                    m.d.sync += desc_done.eq(1)
                with m.If(ins.hdr.valid & ins.hdr.ready):
                    m.d.sync += head_done.eq(1)
                with m.If(out_last):
                    m.d.sync += [replying.eq(0), from_ack.eq(0)]
                    m.next = "IDLE"
        return m
