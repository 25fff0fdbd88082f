"""The internal controller: reads and writes any tile's counters, registers and tables on the
control plane for a client on the network (``apiary ctl``, :mod:`beehive.control_client`).

A UDP application (placed after UDP RX on :data:`CONTROL_PORT`, replying through UDP TX, like
:class:`~beehive.apps.kernel_ctl.KernelCtlTile`) that also attaches to the control plane: each
request datagram becomes a burst of ``CTL_READ`` or ``CTL_WRITE`` messages
(:mod:`apiary.control.messages`) to the control agent of one tile position, and the agent's
``CTL_ACK`` answers become one reply datagram, sent back to the client with the request's
:data:`~beehive.proto.messages.PACKET_META`. Requests may also come over TCP, through a
:class:`~beehive.apps.tcp_datagram.TcpDatagramTile` (each request and reply a length-prefixed
record on the connection): their ``protocol`` is 6, and their replies go to the route
:data:`TCP_REPLY_KEY` instead of UDP TX. Datagrams to :data:`~beehive.apps.etherbone.ETHERBONE_PORT`
(1234, when the design routes it here) are Etherbone packets, LiteX's ``litex_server --udp``
protocol: :mod:`beehive.apps.etherbone` says how they are served.

Requests and replies (UDP payloads, network byte order). Both start with the same 8 bytes:

=====  =====  ==============================================================================
bytes  size   field
=====  =====  ==============================================================================
0      1      ``op``: 1 READ, 2 WRITE
1      1      ``tag``: anything; echoed, so a client can match replies to requests
2, 3   1 + 1  ``x``, ``y``: the tile position whose agent is asked
4-5    2      ``addr``: the first 32-bit word (the tile's address map,
                :mod:`apiary.control.addrmap`)
6      1      ``count``: words, 1 to :data:`MAX_WORDS` (64), at ``addr``, ``addr + 1``, ...
7      1      request: reserved (0, ignored); reply: ``status``
8-     4 n    request, WRITE: the ``count`` words to write, in order (u32 each);
              reply, READ: the ``count`` words read (zero from the first failing word on)
=====  =====  ==============================================================================

Reply ``status``: 0 OK; 1 BAD_ADDR, 2 READ_ONLY (the first failing word's
:class:`~apiary.control.messages.CtlStatus`: the words before it were read or written, none
after it was asked); :data:`STATUS_TIMEOUT` (0xFE): the agent did not answer a word within
``reply_timeout`` cycles (again, none after it was asked); :data:`STATUS_BAD_REQUEST` (0xFF):
the request is malformed (an ``op`` other than 1 or 2, ``count`` 0 or above 64, ``addr + count``
past 0xFFFF, shorter than 8 bytes or, for a WRITE, than ``8 + 4 count``), answered at once with
the 8-byte reply (its bytes 0-6 are the request's, zero where it is shorter) and no control
message sent. A READ's reply is ``8 + 4 count`` bytes whatever its status (but 0xFF); a
WRITE's is 8 bytes. Bytes past those a request needs are ignored.

NoC messages of the tile:

==================  ====  ======  ===================  =============================  ========
message             type  plane   from → to            fields                         route
==================  ====  ======  ===================  =============================  ========
``UDP_RX_SEGMENT``  26    data    UDP RX → tile        PACKET_META, the request       (in)
``UDP_TX_SEGMENT``  13    data    tile → UDP TX        PACKET_META, ``l4_sum`` set;   key
                                                       the reply                      ``reply``
                                                                                      (or None)
                              tile → TCP front end    the same, for a request        key
                                                       whose ``protocol`` is 6 (TCP)  ``tcp_reply``
                                                                                      (if any)
``CTL_READ``        48    ctl     tile → agent         ``CTL_META``: ``tag``,         none: to
``CTL_WRITE``       49                                 ``addr``, ``data``             (x, y,
                                                                                      LOCAL3)
``CTL_ACK``         50    ctl     agent → tile         ``tag``, ``addr``, ``status``, (in, at
                                                       ``data``                       LOCAL0)
==================  ====  ======  ===================  =============================  ========

Control messages go from the tile's own ``(x, y, LOCAL0)`` to ``(x, y,``
:data:`~apiary.control.messages.AGENT_FBITS` ``)`` of the request. Their ``tag`` is the tile's
own sequence number (one per message, not the request's ``tag``), so an answer that comes after
its word timed out is not taken for a later word's: an ack is taken only if it is a
``CTL_ACK`` from the asked position with the awaited ``tag`` and ``addr``, while one is
awaited; any other message on ``ctl_in`` is dropped and counted in ``stray_acks``. (The
controller's own counters are served by the agent at its own position, on ``LOCAL3``, like any
tile's.)

Structure::

    noc_in ─▶ Receiver(PACKET_META) ─▶ RequestSlots (memory, queue + 1 requests)
    ctl_in ─▶ Receiver(CTL_META) ─▶ AgentLink: the awaited ack (compared, taken or counted)
    slots ─▶ ControllerEngine ─▶ AgentLink ─▶ Sender(CTL_META) ─▶ ctl_out
                   └─▶ the words read, into the request's slot
                       ─▶ ReplySender ─▶ Sender(PACKET_META) ─▶ noc_out

The data plane's side is :class:`RequestSlots` (requests in) and :class:`ReplySender`
(replies out), the control plane's :class:`AgentLink`; :class:`ControllerEngine` runs a
request through them.

Neither input ever waits: a request is written into a free slot of a memory as its words come
(a request that finds every slot taken is dropped whole, unanswered, counted in ``overflow``;
UDP clients retry), and an ack is compared and taken, or dropped, in the cycle it comes. So
the tile never holds ``noc_in`` while it waits for ``noc_out`` or the control plane, nor
``ctl_in`` while it waits for ``ctl_out`` or the data plane: ``streaming = False``, and the
two planes' dependency graphs stay apart. Requests are served one at a time, in order, a
word at a time: each word is a round trip to the agent.

**The bus port** (``ControllerTile(bridge=True)``): the same word reads and writes for a bus
outside the NoC, a board's own (the LiteX SoC maps it into its Wishbone bus, so that LiteX's
UARTBone, ``litex_server --uart``, reaches every agent's registers and counters: docs/platforms.md).
The member ``bridge`` (:data:`BRIDGE`), brought out at the top as ``<tile>_bridge``, takes one
request at a time (:data:`BRIDGE_REQUEST`: the agent's ``x`` and ``y``, the word's ``addr``,
``write`` and its ``data``) and answers each with one reply (:data:`BRIDGE_REPLY`: the word read,
0 for a write or a failure, and the ``status``: the agent's, or :data:`STATUS_TIMEOUT`); the
request is taken with its reply. :class:`BridgeAgent` serves it and :class:`AgentArbiter` shares
:class:`AgentLink` with the engine, a word at a time, taking turns when both wait. Counted in
``bridge_reads``, ``bridge_writes`` and ``bridge_failed`` (replies with a status other than OK).

Python helpers: :func:`read_request`, :func:`write_request` build requests; :func:`request_ok`
says whether the tile takes one; :func:`parse_reply` reads a reply; :func:`expected_reply`
builds the reply the tile sends (tests).
"""

import struct
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux, Array
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.control.messages import AGENT_FBITS, CTL_FORMAT, CTL_META, CtlMsgType, CtlStatus
from apiary.noc.framing import offer_descriptor
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.stream.checksum import fold16
from apiary.stream.counters import CounterSignature, count
from apiary.stream.layout import payload_signature
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.ipv4 import IpProtocol
from ..proto.messages import PACKET_META, MsgType
from .etherbone import (ETHERBONE_PORT, BYTE_ENABLES as EB_BYTE_ENABLES, HEAD_BYTES as
                        EB_HEAD_BYTES, MAGIC as EB_MAGIC, MAX_RECORD_WORDS as EB_MAX_WORDS,
                        PROBE_REPLY as EB_PROBE_REPLY, SIZES as EB_SIZES, VERSION as EB_VERSION,
                        X_SHIFT as EB_X_SHIFT, Y_SHIFT as EB_Y_SHIFT)
from .kernel_ctl import positive_ints


__all__ = ["ControllerTile", "CONTROL_PORT", "MAX_WORDS", "OP_READ", "OP_WRITE", "STATUS_OK",
           "STATUS_BAD_ADDR", "STATUS_READ_ONLY", "STATUS_TIMEOUT", "STATUS_BAD_REQUEST",
           "STATUS_NAMES", "REPLY_KEY", "TCP_REPLY_KEY", "HEADER_BYTES", "ControlReply",
           "read_request", "write_request", "request_ok", "expected_reply", "parse_reply",
           "SlotGeometry", "RequestSlots", "AgentLink", "ReplySender", "ControllerEngine",
           "BRIDGE", "BRIDGE_REQUEST", "BRIDGE_REPLY", "BRIDGE_COUNTERS", "BridgeAgent",
           "AgentArbiter"]


#: The controller's UDP port (route key of UDP RX to it).
CONTROL_PORT = 7200
#: Words one request reads or writes at most.
MAX_WORDS = 64
OP_READ, OP_WRITE = 1, 2
STATUS_OK = int(CtlStatus.OK)
STATUS_BAD_ADDR = int(CtlStatus.BAD_ADDR)
STATUS_READ_ONLY = int(CtlStatus.READ_ONLY)
STATUS_TIMEOUT = 0xFE
STATUS_BAD_REQUEST = 0xFF
STATUS_NAMES = {STATUS_OK: "OK", STATUS_BAD_ADDR: "BAD_ADDR", STATUS_READ_ONLY: "READ_ONLY",
                STATUS_TIMEOUT: "TIMEOUT", STATUS_BAD_REQUEST: "BAD_REQUEST"}
#: Route key of the replies: ``d.route(ctl, udp_tx, key=REPLY_KEY)`` (a route without a key
#: serves too).
REPLY_KEY = "reply"
#: Route key of the replies to requests that came over TCP (``protocol`` 6 in their
#: ``PACKET_META``), through a :class:`~beehive.apps.tcp_datagram.TcpDatagramTile`:
#: ``d.route(ctl, bridge, key=TCP_REPLY_KEY, fbits=DATAGRAM_FBITS)``.
TCP_REPLY_KEY = "tcp_reply"
#: op, tag, x, y, addr, count, reserved / status.
_HEADER = struct.Struct("!BBBBHBB")
HEADER_BYTES = _HEADER.size
#: The longest request: a WRITE of MAX_WORDS words.
_MAX_REQUEST = HEADER_BYTES + 4 * MAX_WORDS


# -- Python helpers --------------------------------------------------------------------------------

def _check_word(value: int, what: str) -> int:
    if not isinstance(value, int) or not 0 <= value < 1 << 32:
        raise ValueError(f"{what} must be a 32-bit unsigned word, not {value!r}")
    return value


def _check_target(x: int, y: int, addr: int, count: int, tag: int) -> None:
    for value, name, limit in ((x, "x", 256), (y, "y", 256), (tag, "tag", 256),
                               (addr, "addr", 1 << 16)):
        if not isinstance(value, int) or not 0 <= value < limit:
            raise ValueError(f"{name} must be 0 to {limit - 1}, not {value!r}")
    if not 1 <= count <= MAX_WORDS:
        raise ValueError(f"a request reads or writes 1 to {MAX_WORDS} words, not {count}")
    if addr + count > 1 << 16:
        raise ValueError(f"words {addr:#06x} to {addr + count - 1:#x} run past the 16-bit "
                         f"address map")


def read_request(x: int, y: int, addr: int, count: int = 1, *, tag: int = 0) -> bytes:
    """Read ``count`` words at ``addr``, ``addr + 1``, ... of the agent at (``x``, ``y``)."""
    _check_target(x, y, addr, count, tag)
    return _HEADER.pack(OP_READ, tag, x, y, addr, count, 0)


def write_request(x: int, y: int, addr: int, words: list[int], *, tag: int = 0) -> bytes:
    """Write ``words`` to ``addr``, ``addr + 1``, ... of the agent at (``x``, ``y``), in
    order."""
    words = list(words)
    _check_target(x, y, addr, len(words), tag)
    body = b"".join(struct.pack("!I", _check_word(w, "a word")) for w in words)
    return _HEADER.pack(OP_WRITE, tag, x, y, addr, len(words), 0) + body


def request_ok(payload: bytes) -> bool:
    """Whether the tile takes ``payload`` as a well-formed request (else: bad request)."""
    payload = bytes(payload)
    if len(payload) < HEADER_BYTES:
        return False
    op, _, _, _, addr, count, _ = _HEADER.unpack_from(payload)
    if op not in (OP_READ, OP_WRITE) or not 1 <= count <= MAX_WORDS or addr + count > 1 << 16:
        return False
    return op == OP_READ or len(payload) >= HEADER_BYTES + 4 * count


def expected_reply(request: bytes, status: int, words: list[int] | None = None) -> bytes:
    """The reply the tile sends to ``request`` with ``status``; for a READ, ``words`` are the
    words read before the failing one (all ``count`` of them when OK), the rest are zero. A
    bad request (see :func:`request_ok`) gets the 8-byte reply with status 0xFF whatever
    ``status`` says."""
    request = bytes(request)
    if not request_ok(request):
        return (request[:HEADER_BYTES - 1]).ljust(HEADER_BYTES - 1, b"\0") + \
            bytes([STATUS_BAD_REQUEST])
    head = request[:HEADER_BYTES - 1] + bytes([status])
    if request[0] != OP_READ:
        return head
    count = request[6]
    words = list(words or [])[:count]
    words += [0] * (count - len(words))
    return head + b"".join(struct.pack("!I", w) for w in words)


@dataclass
class ControlReply:
    """A reply taken apart (:func:`parse_reply`)."""
    op: int
    tag: int
    x: int
    y: int
    addr: int
    count: int
    status: int
    words: list[int] = field(default_factory=list)

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, f"{self.status:#04x}")


def parse_reply(payload: bytes) -> ControlReply:
    """A reply as a :class:`ControlReply` (``words``: a READ's words, empty otherwise).
    ``ValueError`` if it is not one: shorter than 8 bytes, or a READ reply (status not 0xFF)
    without its ``count`` words."""
    payload = bytes(payload)
    if len(payload) < HEADER_BYTES:
        raise ValueError(f"a controller reply is at least {HEADER_BYTES} bytes, not "
                         f"{len(payload)}")
    op, tag, x, y, addr, count, status = _HEADER.unpack_from(payload)
    words: list[int] = []
    if op == OP_READ and status != STATUS_BAD_REQUEST:
        if len(payload) < HEADER_BYTES + 4 * count:
            raise ValueError(f"a READ reply of {count} words is {HEADER_BYTES + 4 * count} "
                             f"bytes, not {len(payload)}")
        words = list(struct.unpack_from(f"!{count}I", payload, HEADER_BYTES))
    return ControlReply(op, tag, x, y, addr, count, status, words)


# -- the tile --------------------------------------------------------------------------------------

def _bswap32(value: Any) -> Any:
    """A u32 lane (payload byte order: first byte in the low bits) ⇄ its value (network order)."""
    return Cat(value[24:32], value[16:24], value[8:16], value[0:8])


@dataclass(frozen=True)
class SlotGeometry:
    """How requests are kept: ``slots`` slots of ``2 ** row_bits`` rows of ``width`` bits (a
    row holds ``lanes`` u32 words), enough for the longest request."""
    width: int
    slots: int

    @property
    def lanes(self) -> int:
        return self.width // 32

    @property
    def lane_bits(self) -> int:
        return (self.lanes - 1).bit_length()

    @property
    def rows(self) -> int:
        return -(-_MAX_REQUEST // (self.width // 8))

    @property
    def row_bits(self) -> int:
        return max(1, (self.rows - 1).bit_length())

    @property
    def addr_width(self) -> int:
        return ((self.slots << self.row_bits) - 1).bit_length()

    def requests(self) -> wiring.Signature:
        """The slots' side of :class:`RequestSlots` (``Out`` there, ``In`` on the engine)."""
        shape = unsigned(self.width)
        return wiring.Signature({
            "pending": Out(1), "head": Out(range(self.slots)), "meta": Out(PACKET_META.size),
            "length": Out(range(_MAX_REQUEST + 1)), "release": In(1),
            "read": Out(ReadPort.Signature(addr_width=self.addr_width, shape=shape)),
            "reply": Out(WritePort.Signature(addr_width=self.addr_width, shape=shape,
                                             granularity=32)),
            "reply_row": Out(shape),        # the reply's row at ``read.addr``, with ``read``
        })

    def reply(self) -> wiring.Signature:
        """The engine's side of :class:`ReplySender` (``Out`` there, ``In`` on the sender)."""
        return wiring.Signature({
            "request": Out(8 * (HEADER_BYTES - 1)), "status": Out(8),
            "meta": Out(PACKET_META.layout()), "total": Out(24),
            "start": Out(1), "words": Out(range(MAX_WORDS + 1)),
            "fetch": In(1), "fetch_row": In(range(self.rows + 1)), "done": In(1),
        })


#: The engine's side of :class:`AgentLink` (``Out`` on the engine): the word to read or write
#: at (``x``, ``y``, ``addr``), offered until ``issued``; then, while ``waiting``, its ack
#: (``ack`` with ``status`` and ``value``) or ``timed_out``.
AGENT_PORT = wiring.Signature({
    "x": Out(8), "y": Out(8), "addr": Out(16), "read": Out(1), "data": Out(32),
    "offer": Out(1), "issued": In(1),
    "waiting": Out(1), "ack": In(1), "status": In(4), "value": In(32), "timed_out": In(1),
})

#: A word read or write on the bus port: the agent at (``x``, ``y``), its word ``addr``.
BRIDGE_REQUEST = data.StructLayout({"x": 8, "y": 8, "addr": 16, "write": 1, "data": 32})
#: Its answer: the word read (0 for a write, or when ``status`` is not :data:`STATUS_OK`) and the
#: agent's :class:`~apiary.control.messages.CtlStatus`, or :data:`STATUS_TIMEOUT`.
BRIDGE_REPLY = data.StructLayout({"data": 32, "status": 8})
#: The controller's bus port, as its master sees it (``In`` on the tile): requests out, one
#: reply back for each.
BRIDGE = wiring.Signature({"request": Out(stream.Signature(BRIDGE_REQUEST)),
                           "reply": In(stream.Signature(BRIDGE_REPLY))})
#: What the bus port counts.
BRIDGE_COUNTERS = {
    "bridge_reads": "words read over the bus port (the board's own bus)",
    "bridge_writes": "words written over the bus port",
    "bridge_failed": "bus port words answered with a status other than OK (refused by the "
                     "agent, or no answer in time)",
}

#: What the engine counts (the tile counts the rest).
ENGINE_COUNTERS = {
    "requests": "requests answered (all of them, bad ones included)",
    "reads": "well-formed READ requests",
    "writes": "well-formed WRITE requests",
    "bad_request": "requests answered with status 0xFF (bad request)",
    "timeouts": "requests answered with status 0xFE: an agent did not answer in time",
}


class ControllerTile(Tile):
    """Serve register reads and writes requested in UDP datagrams over the control plane (see
    the module docstring for the formats).

    Parameters
    ----------
    env : TileEnv
        Its next hop on the data plane: UDP TX under key ``"reply"`` (or ``None``). Standalone
        (no routes) the replies go to tile (0, 0). ``env.width`` (data) and ``env.ctl_width``
        (control plane) may be any supported flit width.
    queue : int
        Requests that may wait while one is served (at least 1); the tile keeps ``queue + 1``
        requests of up to 264 bytes each in one memory.
    reply_timeout : int
        Cycles each word waits for its agent's ``CTL_ACK`` before the request is answered with
        status :data:`STATUS_TIMEOUT` (at least 1).
    etherbone_port : int or None
        UDP datagrams to this port (``PACKET_META.local_port``, UDP only) are Etherbone packets
        (:mod:`beehive.apps.etherbone`); ``None``: every datagram is a request of the format
        above.
    bridge : bool
        Whether the tile has the bus port ``bridge`` (see the module docstring), for a board's
        own bus.

    Counters: ``requests`` (answered), ``reads``, ``writes`` (well-formed READs and WRITEs),
    ``bad_request`` (answered with status 0xFF), ``timeouts`` (answered with status 0xFE),
    ``overflow`` (requests dropped unanswered: no free slot), ``stray_acks`` (control-plane
    messages dropped: not the awaited ``CTL_ACK``, late, or malformed), ``dropped`` (data-plane
    messages dropped: of another type, or malformed); with ``bridge``, :data:`BRIDGE_COUNTERS`.

    Latency (idle tile): a READ's first control message has its first flit on ``ctl_out`` 4
    cycles after the request's last flit came in (one to commit its slot, two to read and
    decode its first 8 bytes), a WRITE's 5 (its first word read from the slot), a bad
    request's reply on ``noc_out`` 4; each further word's message follows 1 cycle (READ) or
    2 (WRITE) after the previous word's ack came in, and the reply 1 cycle after the last
    ack, its payload streaming from the memory at one word per cycle. Throughput: one request
    at a time, a word at a time, so a request of ``n`` words takes ``n`` round trips to its
    agent plus the reply's flits. Drops: a request finding no free slot (``overflow``); any
    data-plane message other than ``UDP_RX_SEGMENT`` (``dropped``); any control-plane message
    other than the awaited ack (``stray_acks``).

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """

    planes = ("data", "ctl")
    #: The inputs never wait for an output (see the module docstring).
    streaming = False
    #: The design's controller: the top builds a control agent at every position with counters
    #: or registers, and the layout check lays out its routes to them and back.
    controls = True

    # Data plane: requests in, replies out. Control plane (submodules ``ctl_rx``, ``ctl_tx``):
    # register requests to the agents, their acks back.
    inputs = (Receive("seg_rx", MsgType.UDP_RX_SEGMENT, meta=PACKET_META, empty_packets=True),
              Receive("rx", CtlMsgType.CTL_ACK, meta=CTL_FORMAT, plane="ctl"))
    outputs = (Send("rep_tx", MsgType.UDP_TX_SEGMENT, meta=PACKET_META,
                    keys=[REPLY_KEY, None, TCP_REPLY_KEY]),
               Send("tx", CtlMsgType.CTL_READ, CtlMsgType.CTL_WRITE, meta=CTL_FORMAT,
                    plane="ctl"))


    def __init__(self, env: TileEnv | None = None, *, queue: int = 2,
                 reply_timeout: int = 1 << 10,
                 etherbone_port: int | None = ETHERBONE_PORT, bridge: bool = False) -> None:
        self.queue, self.reply_timeout = positive_ints(queue=queue, reply_timeout=reply_timeout)
        if etherbone_port is not None and not 0 < etherbone_port < 1 << 16:
            raise ValueError(f"etherbone_port must be a UDP port (1 to 65535) or None, not "
                             f"{etherbone_port!r}")
        self.etherbone_port, self.has_bridge = etherbone_port, bool(bridge)
        super().__init__(env, members={"bridge": In(BRIDGE)} if bridge else None, counters={
            **ENGINE_COUNTERS, **(BRIDGE_COUNTERS if bridge else {}),
            "overflow": "requests dropped unanswered: every request slot was taken",
            "stray_acks": "control-plane messages dropped: not the awaited CTL_ACK (late, of "
                          "another tag, address or source, of another type) or malformed",
            "dropped": "data-plane messages dropped: of another type than UDP_RX_SEGMENT, or "
                       "malformed",
        })
        routes = self.env.next_hops("data")
        self.reply_hop = first_hop(routes, REPLY_KEY, None)
        self.tcp_reply_hop = first_hop(routes, TCP_REPLY_KEY)
        if routes and self.reply_hop is None:
            raise ValueError(f"{type(self).__name__} {self.env.name!r} needs a route to UDP TX "
                             f"with key {REPLY_KEY!r} (or no key); it has keys "
                             f"{sorted(map(str, routes))}")


    def elaborate(self, platform: Any) -> Module:
        m = Module()
        geometry = SlotGeometry(self.env.width, self.queue + 1)
        me = (self.env.x, self.env.y, Fbits.LOCAL0)
        counters = self.counters
        data_ports, ctl_ports = self.message_ports(m), self.message_ports(m, "ctl")
        seg_rx, rep_tx = data_ports.seg_rx, data_ports.rep_tx
        ctl_rx, ctl_tx = ctl_ports.rx, ctl_ports.tx

        # Data plane in: requests into their slots.
        m.submodules.slots = slots = RequestSlots(geometry, seg_rx.o_hdr.payload.shape())
        connect(m, receiver=seg_rx.o_hdr, slots=slots.hdr)
        connect(m, receiver=seg_rx.o_data, slots=slots.data)
        m.d.comb += [counters.overflow.eq(slots.overflow),
                     counters.dropped.eq(seg_rx.errors + slots.stray)]
        # The engine: a request at a time, a word at a time.
        m.submodules.engine = engine = ControllerEngine(geometry, self.etherbone_port)
        connect(m, slots=slots.requests, engine=engine.requests)
        for name in ENGINE_COUNTERS:
            m.d.comb += getattr(counters, name).eq(getattr(engine.counters, name))
        # Control plane: each word's message to its agent, and the agent's ack.
        m.submodules.agent = agent = AgentLink(
            reply_timeout=self.reply_timeout, src=me, descriptor=ctl_tx.i_hdr.payload.shape(),
            acks=ctl_rx.o_hdr.payload.shape())
        if self.has_bridge:                     # the bus port takes turns with the engine
            m.submodules.bridge = bridge = BridgeAgent()
            m.submodules.arbiter = arbiter = AgentArbiter()
            connect(m, tile=flipped(self.bridge), bridge=bridge.bus)
            connect(m, engine=engine.agent, arbiter=arbiter.engine)
            connect(m, bridge=bridge.agent, arbiter=arbiter.bridge)
            connect(m, arbiter=arbiter.agent, agent=agent.word)
            for name in BRIDGE_COUNTERS:
                m.d.comb += getattr(counters, name).eq(getattr(bridge.counters, name))
        else:
            connect(m, engine=engine.agent, agent=agent.word)
        connect(m, agent=agent.o, sender=ctl_tx.i_hdr)
        connect(m, receiver=ctl_rx.o_hdr, agent=agent.acks)
        m.d.comb += [ctl_rx.o_data.ready.eq(1),
                     counters.stray_acks.eq(ctl_rx.errors + agent.stray)]
        # Data plane out: the reply, from the request's slot.
        tcp_dst = (address_of(self.tcp_reply_hop) if self.tcp_reply_hop is not None else None)
        m.submodules.reply = reply = ReplySender(
            geometry, src=me, dst=address_of(self.reply_hop, Fbits.LOCAL0), tcp_dst=tcp_dst,
            descriptor=rep_tx.i_hdr.payload.shape())
        connect(m, engine=engine.reply, reply=reply.engine)
        m.d.comb += reply.row.eq(slots.requests.reply_row)
        connect(m, reply=reply.o_hdr, sender=rep_tx.i_hdr)
        connect(m, reply=reply.o_data, sender=rep_tx.i_data)
        return m


class RequestSlots(wiring.Component):
    """The requests, each kept in a slot of one memory from its first word until its reply is
    sent (data plane in).

    A message on ``hdr`` (a :class:`~apiary.noc.framing.MessageReceiver`'s headers, taken in
    the cycle they come, as are the words on ``data``) that is a ``UDP_RX_SEGMENT`` takes the
    next free slot: its first :data:`_MAX_REQUEST` bytes are written there a row a word, its
    metadata and length (at most that) kept beside. It is pending from the cycle after its last
    word. One that finds every slot taken is dropped (counted in ``overflow``), a message of
    another type too (``stray``).

    ``requests`` (:meth:`SlotGeometry.requests`): the oldest pending request's slot (``head``,
    with its ``meta`` and ``length``; ``pending`` if there is one); ``release`` frees it. The
    engine reads the memory through ``read`` (one cycle) and writes the words of the reply
    through ``reply`` (32-bit lanes) at their places in the slot, in a memory of their own
    (``reply_row``, read with ``read``): each memory has one write port and one read port, so
    that it maps to block RAM (three ports on one memory made the 64-bit controller 25,050
    LUTs and 13,958 flip-flops on an ECP5, 2026-11-29). The first 8 bytes of a reply are the
    sender's, never read from the slot.
    """

    def __init__(self, geometry: SlotGeometry, hdr: data.StructLayout) -> None:
        self._geometry = geometry
        super().__init__({
            "hdr": In(stream.Signature(hdr)),
            "data": In(payload_signature(geometry.width)),
            "requests": Out(geometry.requests()),
            "overflow": Out(32), "stray": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        g, r = self._geometry, self.requests
        slots, rows, row_bits = g.slots, g.rows, g.row_bits
        m.submodules.mem = mem = Memory(shape=unsigned(g.width), depth=slots << row_bits, init=[])
        m.submodules.replies = replies = Memory(shape=unsigned(g.width), depth=slots << row_bits,
                                                init=[])
        w_req = mem.write_port()                    # requests coming in, a row at a time
        w_rep = replies.write_port(granularity=32)  # the words read, a lane at a time
        rd, rd_rep = mem.read_port(), replies.read_port()
        m.d.comb += [rd.addr.eq(r.read.addr), rd.en.eq(r.read.en), r.read.data.eq(rd.data),
                     rd_rep.addr.eq(r.read.addr), rd_rep.en.eq(r.read.en),
                     r.reply_row.eq(rd_rep.data),
                     w_rep.addr.eq(r.reply.addr), w_rep.data.eq(r.reply.data),
                     w_rep.en.eq(r.reply.en)]
        slot_meta = Array(Signal(PACKET_META.size, name=f"slot_meta{k}") for k in range(slots))
        slot_len = Array(Signal(range(_MAX_REQUEST + 1), name=f"slot_len{k}")
                         for k in range(slots))
        head = r.head                               # the oldest request's slot
        used = Signal(range(slots + 1))             # slots holding a request (served one too)
        commit = Signal()
        m.d.sync += used.eq(used + commit - r.release)

        def next_slot(slot: Any, plus: Any) -> Any:
            total = slot + plus
            return Mux(total >= slots, total - slots, total)

        m.d.comb += [r.pending.eq(used != 0), r.meta.eq(slot_meta[head]),
                     r.length.eq(slot_len[head])]
        with m.If(r.release):
            m.d.sync += head.eq(next_slot(head, 1))

        m.d.comb += [self.hdr.ready.eq(1), self.data.ready.eq(1)]
        in_slot = Signal(range(slots))
        in_keep = Signal()                          # the message is a request with a slot
        in_row = Signal(range(rows + 1))
        hdr = self.hdr.payload
        with m.If(self.hdr.valid):
            is_req = hdr.msg_type == MsgType.UDP_RX_SEGMENT.value
            free = used < slots
            slot = next_slot(head, used)
            m.d.sync += [in_keep.eq(is_req & free), in_slot.eq(slot), in_row.eq(0)]
            with m.If(is_req & free):
                m.d.sync += [
                    slot_meta[slot].eq(hdr.meta[:PACKET_META.size]),
                    slot_len[slot].eq(Mux(hdr.payload_bytes > _MAX_REQUEST, _MAX_REQUEST,
                                          hdr.payload_bytes)),
                ]
            with m.If(~is_req):
                count(m, self.stray)
            with m.Elif(~free):
                count(m, self.overflow)
        word = self.data
        m.d.comb += [w_req.addr.eq(Cat(in_row[:row_bits], in_slot)),
                     w_req.data.eq(word.payload.data)]
        with m.If(word.valid & in_keep):
            m.d.comb += w_req.en.eq(in_row < rows)
            with m.If(in_row < rows):
                m.d.sync += in_row.eq(in_row + 1)
            with m.If(word.payload.last):
                m.d.comb += commit.eq(1)
        return m


class AgentLink(wiring.Component):
    """A word's round trip to a control agent (the control plane side).

    While ``word.offer``, the word's ``CTL_READ`` (``word.read``) or ``CTL_WRITE`` (of
    ``word.data``) to address ``word.addr`` of the agent at (``word.x``, ``word.y``,
    :data:`~apiary.control.messages.AGENT_FBITS`) is offered on ``o`` (to the control plane's
    sender; ``descriptor`` its layout) from ``src``, tagged with the link's own sequence number;
    ``word.issued`` when it is taken. Then, while ``word.waiting``, the awaited ack is the
    ``CTL_ACK`` on ``acks`` (a receiver's headers, taken in the cycle they come) from that
    position with that tag and address: ``word.ack``, with its ``status`` and ``value``, in
    the cycle it comes. ``word.timed_out`` rises ``reply_timeout`` cycles into the wait without
    one. The tag moves on with the ack or the time-out, so a late ack is never taken for a
    later word's. Every other message on ``acks`` is dropped and counted in ``stray``.
    """

    def __init__(self, *, reply_timeout: int, src: tuple, descriptor: data.StructLayout,
                 acks: data.StructLayout) -> None:
        self._reply_timeout, self._src = reply_timeout, src
        super().__init__({
            "word": In(AGENT_PORT),
            "o": Out(stream.Signature(descriptor)),
            "acks": In(stream.Signature(acks)),
            "stray": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        w = self.word
        seq = Signal(8)                             # tag of the control message
        timer = Signal(range(self._reply_timeout + 1))
        c_meta = Signal(CTL_META)
        m.d.comb += [c_meta.tag.eq(seq), c_meta.addr.eq(w.addr),
                     c_meta.data.eq(Mux(w.read, 0, w.data))]
        m.d.comb += w.issued.eq(offer_descriptor(
            m, self.o, w.offer, dst=(w.x, w.y, AGENT_FBITS), src=self._src,
            msg_type=Mux(w.read, CtlMsgType.CTL_READ.value, CtlMsgType.CTL_WRITE.value),
            meta=c_meta))
        with m.If(w.offer):
            with m.If(w.issued):                    # taken with the message's last flit
                m.d.sync += timer.eq(self._reply_timeout)

        a_hdr = self.acks.payload
        a_meta = data.View(CTL_META, a_hdr.meta)
        m.d.comb += [
            self.acks.ready.eq(1),
            w.ack.eq(self.acks.valid & w.waiting & (a_hdr.msg_type == CtlMsgType.CTL_ACK.value)
                     & (a_hdr.src_x == w.x) & (a_hdr.src_y == w.y) & (a_meta.tag == seq)
                     & (a_meta.addr == w.addr)),
            w.status.eq(a_meta.status), w.value.eq(a_meta.data), w.timed_out.eq(timer == 0),
        ]
        with m.If(self.acks.valid & ~w.ack):
            count(m, self.stray)
        with m.If(w.waiting):
            m.d.sync += timer.eq(timer - 1)
            with m.If(w.ack):
                m.d.sync += seq.eq(seq + 1)
            with m.Elif(w.timed_out):
                m.d.sync += seq.eq(seq + 1)
        return m


class BridgeAgent(wiring.Component):
    """The bus port's words (``bus``, :data:`BRIDGE`), one at a time, as :class:`AgentLink`
    words (``agent``).

    A request is offered to the link from the cycle it is valid; its reply is valid the cycle
    after the agent's ack (or the link's time-out) and held until taken, and the request is
    taken with it. Counts :data:`BRIDGE_COUNTERS`.
    """

    def __init__(self) -> None:
        super().__init__({"bus": In(BRIDGE), "agent": Out(AGENT_PORT),
                          "counters": Out(CounterSignature(BRIDGE_COUNTERS))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        request, reply, agent = self.bus.request, self.bus.reply, self.agent
        word = request.payload
        m.d.comb += [agent.x.eq(word.x), agent.y.eq(word.y), agent.addr.eq(word.addr),
                     agent.read.eq(~word.write), agent.data.eq(word.data)]
        with m.FSM(name="bridge"):
            with m.State("OFFER"):
                m.d.comb += agent.offer.eq(request.valid)
                with m.If(request.valid & agent.issued):
                    m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += agent.waiting.eq(1)
                ok = agent.ack & (agent.status == STATUS_OK)
                with m.If(agent.ack | agent.timed_out):
                    m.d.sync += [reply.payload.data.eq(Mux(ok & ~word.write, agent.value, 0)),
                                 reply.payload.status.eq(Mux(agent.ack, agent.status,
                                                             STATUS_TIMEOUT))]
                    count(m, self.counters.bridge_writes, word.write)
                    count(m, self.counters.bridge_reads, ~word.write)
                    count(m, self.counters.bridge_failed, ~ok)
                    m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += [reply.valid.eq(1), request.ready.eq(reply.ready)]
                with m.If(reply.ready):
                    m.next = "OFFER"
        return m


class AgentArbiter(wiring.Component):
    """Two masters of :class:`AgentLink` (``engine`` and ``bridge``, each an :data:`AGENT_PORT`)
    sharing it (``agent``) a word at a time.

    The link is given to a master offering a word while it is free (to the one that did not
    have it last when both offer: neither waits more than one word of the other's), and kept
    from the word's issue until its ack or time-out; the other master's offer waits. Adds no
    cycle: the chosen master's word goes through in the cycle it is offered.
    """

    def __init__(self) -> None:
        super().__init__({"engine": In(AGENT_PORT), "bridge": In(AGENT_PORT),
                          "agent": Out(AGENT_PORT)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        masters, out = (self.engine, self.bridge), self.agent
        busy, owner, last = Signal(), Signal(), Signal()
        chosen = Signal()                       # 1: the bridge's word
        m.d.comb += chosen.eq(Mux(busy, owner, Mux(masters[0].offer & masters[1].offer, ~last,
                                                  masters[1].offer)))
        for name in ("x", "y", "addr", "read", "data"):
            m.d.comb += getattr(out, name).eq(Mux(chosen, getattr(masters[1], name),
                                                  getattr(masters[0], name)))
        m.d.comb += [out.offer.eq(~busy & Mux(chosen, masters[1].offer, masters[0].offer)),
                     out.waiting.eq(busy & Mux(owner, masters[1].waiting, masters[0].waiting))]
        for k, master in enumerate(masters):
            mine = chosen == k
            m.d.comb += [master.issued.eq(out.issued & mine),
                         master.ack.eq(out.ack & busy & mine),
                         master.timed_out.eq(out.timed_out & busy & mine),
                         master.status.eq(out.status), master.value.eq(out.value)]
        with m.If(out.issued):
            m.d.sync += [busy.eq(1), owner.eq(chosen), last.eq(chosen)]
        with m.If(out.waiting & (out.ack | out.timed_out)):
            m.d.sync += busy.eq(0)
        return m


class ReplySender(wiring.Component):
    """A request's reply, built in its slot (data plane out).

    ``engine.start`` (with the reply's ``words``, 0 to :data:`MAX_WORDS`) starts it: its
    descriptor is offered on ``o_hdr`` (a ``UDP_TX_SEGMENT`` to ``dst``, or ``tcp_dst`` for a
    request that came over TCP; from ``src``; ``descriptor`` the sender's layout) with the
    request's ``meta`` and the UDP sum (``l4_sum``) of its bytes (``total``: the words' sum),
    and its rows are read from the slot (``fetch``, ``fetch_row``: the engine reads the row,
    which is on ``row`` the next cycle) and sent on ``o_data``, the first with the reply's 8
    bytes in front (the request's 7 and ``status``), one a cycle as the sender takes them.
    ``done`` pulses as the last is taken.

    Latency: the descriptor and the first row are offered from the cycle after ``start``,
    respectively the one after that. Throughput: a row a cycle.
    """

    def __init__(self, geometry: SlotGeometry, *, src: tuple, dst: tuple,
                 tcp_dst: tuple | None, descriptor: data.StructLayout) -> None:
        self._geometry, self._src, self._dst, self._tcp_dst = geometry, src, dst, tcp_dst
        super().__init__({
            "engine": In(geometry.reply()),
            "row": In(geometry.width),
            "o_hdr": Out(stream.Signature(descriptor)),
            "o_data": Out(payload_signature(geometry.width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        e, nb = self.engine, self._geometry.width // 8
        b = [e.request[8 * k:8 * k + 8] for k in range(HEADER_BYTES - 1)]
        status, r_meta = e.status, e.meta
        n_words = Signal(range(MAX_WORDS + 1))      # words in the reply
        reply_head = Cat(*b, status)
        head_sum = Cat(b[1], b[0]) + Cat(b[3], b[2]) + Cat(b[5], b[4]) + Cat(status, b[6])
        rep_meta = Signal(PACKET_META.layout())
        m.d.comb += [rep_meta.eq(r_meta), rep_meta.l4_sum.eq(fold16(e.total + head_sum)),
                     rep_meta.l4_sum_valid.eq(1)]
        reply_bytes = HEADER_BYTES + 4 * n_words
        reply_rows = (reply_bytes + nb - 1) >> (nb.bit_length() - 1)
        rep_offer = Signal()
        rep_dst: tuple = self._dst
        if self._tcp_dst is not None:           # requests that came over TCP go back there
            over_tcp = r_meta.protocol == IpProtocol.TCP.value
            rep_dst = tuple(Mux(over_tcp, t, u) for t, u in zip(self._tcp_dst, rep_dst))
        rep_ready = offer_descriptor(m, self.o_hdr, rep_offer, dst=rep_dst, src=self._src,
                          msg_type=MsgType.UDP_TX_SEGMENT.value, meta=rep_meta,
                          payload_bytes=reply_bytes)
        fetch_row = e.fetch_row                     # the next row to read for the reply
        cur_row = Signal(range(self._geometry.rows + 1))    # the row on ``row``
        have = Signal()                             # ``row`` holds a reply row to send
        sending = Signal()
        desc_done = Signal()
        out_row = Signal(self._geometry.width)
        m.d.comb += out_row.eq(self.row)
        with m.If(cur_row == 0):
            m.d.comb += out_row[:8 * HEADER_BYTES].eq(reply_head)
        m.d.comb += [self.o_data.valid.eq(have), self.o_data.payload.data.eq(out_row),
                     self.o_data.payload.nbytes.eq(nb),  # the sender frames by payload_bytes
                     self.o_data.payload.last.eq(cur_row + 1 == reply_rows)]
        taken = self.o_data.valid & self.o_data.ready
        fetch = e.fetch
        m.d.comb += fetch.eq(sending & (~have | taken) & (fetch_row < reply_rows))
        with m.If(sending):
            m.d.sync += have.eq(fetch | (have & ~taken))
            with m.If(fetch):
                m.d.sync += [fetch_row.eq(fetch_row + 1), cur_row.eq(fetch_row)]
            m.d.comb += rep_offer.eq(~desc_done)
            with m.If(rep_ready):
                m.d.sync += desc_done.eq(1)
            with m.If(taken & self.o_data.payload.last):
                m.d.sync += [sending.eq(0), have.eq(0)]
                m.d.comb += e.done.eq(1)
        with m.If(e.start):
            m.d.sync += [n_words.eq(e.words), sending.eq(1), desc_done.eq(0), fetch_row.eq(0),
                         have.eq(0)]
        return m


class ControllerEngine(wiring.Component):
    """The controller's engine: a request at a time, a word at a time.

    Takes the oldest pending request (``requests``: :class:`RequestSlots`), reads its first
    row and decodes its 8 bytes (2 cycles; an Etherbone packet's 16, a cycle more at 64 bits);
    a malformed one is answered at once (status :data:`STATUS_BAD_REQUEST`; an Etherbone one is
    dropped). An Etherbone read's words are read from the agents their addresses (words of the
    slot, fetched a cycle each) name; its reply's record header and base address are written
    into the slot after the words (2 cycles); an Etherbone write is not answered. Then for each
    word: a WRITE's word is read from the slot (1 cycle), the word's message is offered to
    :class:`AgentLink` (``agent``) and its ack awaited; a READ's word is written into its place
    in the slot (the reply is built there). A failing
    status or a time-out ends the request (a READ's words from there on are zeroed, a cycle
    each). The reply (``reply``: :class:`ReplySender`) goes with the request's 7 bytes, the
    status and the words' sum; its rows are read from the slot as the sender asks, and the slot
    is released with its last. Counts ``requests``, ``reads``, ``writes``, ``bad_request`` and
    ``timeouts``.
    """

    def __init__(self, geometry: SlotGeometry, etherbone_port: int | None = None) -> None:
        self._geometry, self._etherbone_port = geometry, etherbone_port
        super().__init__({
            "requests": In(geometry.requests()),
            "agent": Out(AGENT_PORT),
            "reply": Out(geometry.reply()),
            "counters": Out(CounterSignature(ENGINE_COUNTERS)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        g = self._geometry
        r, agent, reply = self.requests, self.agent, self.reply
        rd = r.read
        # The request being served: its first 8 bytes (an Etherbone packet's 16).
        r_bytes = Signal(8 * EB_HEAD_BYTES)
        b = [r_bytes[8 * k:8 * k + 8] for k in range(EB_HEAD_BYTES)]
        r_op, r_x, r_y = b[0], b[2], b[3]
        r_addr = Cat(b[5], b[4])
        r_meta = Signal(PACKET_META.layout())
        r_len = Signal(range(_MAX_REQUEST + 1))
        is_eb = Signal()                            # an Etherbone packet (etherbone.py)
        e = self._etherbone(m, b, r_len)
        r_count = Mux(is_eb, e.count, b[6])
        is_read = Signal()
        m.d.comb += is_read.eq(Mux(is_eb, e.rcount != 0, r_op == OP_READ))
        bad = Signal()
        m.d.comb += bad.eq(Mux(is_eb, e.bad,
                               ((r_op != OP_READ) & (r_op != OP_WRITE))
                               | (b[6] == 0) | (b[6] > MAX_WORDS)
                               | (r_addr + b[6] > (1 << 16))
                               | (r_len < HEADER_BYTES)
                               | (~is_read & (r_len < HEADER_BYTES + 4 * b[6]))))
        j = Signal(range(MAX_WORDS + 1))            # the word being asked
        last = Signal()                             # it is the request's last
        m.d.comb += last.eq(j + 1 == r_count)
        status = Signal(8)
        total = Signal(24)                          # one's-complement sum of the words read
        position = Signal(range(MAX_WORDS + 4))     # the word's u32 index in the slot
        m.d.comb += position.eq(j + Mux(is_eb, EB_HEAD_BYTES // 4, HEADER_BYTES // 4))
        word_row = Cat(position[g.lane_bits:], Const(0, 1))[:g.row_bits]
        word_lane = position[:g.lane_bits]
        lane_sel = Array(rd.data[32 * k:32 * k + 32] for k in range(g.lanes))
        word = _bswap32(lane_sel[word_lane])        # the slot's word j (as ``rd.data`` holds it)
        # An Etherbone read's word j names its agent and address; a write's goes to the base's.
        e_x, e_y, e_addr = (Mux(is_read, word, e.base)[lo:hi] for lo, hi in
                            ((EB_X_SHIFT, 32), (EB_Y_SHIFT, EB_X_SHIFT), (2, EB_Y_SHIFT)))
        m.d.comb += [agent.x.eq(Mux(is_eb, e_x, r_x)), agent.y.eq(Mux(is_eb, e_y, r_y)),
                     agent.addr.eq(Mux(is_eb, e_addr + Mux(is_read, 0, j), r_addr + j)),
                     agent.read.eq(is_read), agent.data.eq(word),
                     reply.request.eq(Mux(is_eb, e.reply_head, r_bytes[:8 * (HEADER_BYTES - 1)])),
                     reply.status.eq(status), reply.meta.eq(r_meta), reply.total.eq(total)]
        # The word read goes into its lane of the slot (the reply is built in place).
        rep_word = Signal(32)
        rep_write = Signal()
        m.d.comb += [r.reply.addr.eq(Cat(word_row, r.head)),
                     r.reply.data.eq(_bswap32(rep_word).replicate(g.lanes)),
                     r.reply.en.eq(Mux(rep_write, (Const(1, g.lanes) << word_lane)[:g.lanes], 0))]
        m.d.comb += rd.en.eq(0)                     # (a read port's enable is 1 by default)
        req = SimpleNamespace(bytes=r_bytes, meta=r_meta, len=r_len, count=r_count,
                              is_read=is_read, bad=bad, j=j, last=last, status=status, total=total,
                              word_row=word_row, rep_word=rep_word, rep_write=rep_write,
                              is_eb=is_eb, eb=e, position=position)
        self._serve(m, req)
        return m

    def _etherbone(self, m: Module, b: list, r_len: Any) -> SimpleNamespace:
        """An Etherbone packet's fields in the request's first 16 bytes ``b``
        (:mod:`beehive.apps.etherbone`), whether it is malformed (``bad``), and the first 7
        bytes of the reply's header (``reply_head``; the 8th is the status byte, 0)."""
        e = SimpleNamespace(pf=b[2][0], wcount=b[10], rcount=b[11],
                            base=Cat(b[15], b[14], b[13], b[12]))
        e.count = Signal(8)
        m.d.comb += e.count.eq(e.wcount | e.rcount)
        first = Cat(e.base[2:EB_Y_SHIFT], Const(0, 1))  # a write's first word, and one more bit
        header_ok = ((Cat(b[1], b[0]) == EB_MAGIC) & (b[2][4:] == EB_VERSION >> 4)
                     & (b[3] == EB_SIZES) & (r_len >= 8))
        record_bad = ((r_len < EB_HEAD_BYTES) | (b[9] != EB_BYTE_ENABLES)
                      | ((e.wcount == 0) == (e.rcount == 0)) | (e.count > EB_MAX_WORDS)
                      | (r_len < EB_HEAD_BYTES + 4 * e.count)
                      | ((e.wcount != 0) & (first + e.count > (1 << 16))))
        e.bad = Signal()
        m.d.comb += e.bad.eq(~header_ok | (~e.pf & record_bad))
        e.reply_head = Cat(Const(EB_MAGIC >> 8, 8), Const(EB_MAGIC & 0xFF, 8),
                           Mux(e.pf, Const(EB_VERSION | EB_PROBE_REPLY, 8), Const(EB_VERSION, 8)),
                           Const(EB_SIZES, 8),
                           Const(0, 24))
        # The reply's record header (one write record of the words read) and its base address.
        e.record = Cat(Const(0, 8), e.rcount, Const(EB_BYTE_ENABLES, 8), Const(0, 8))
        return e

    def _serve(self, m: Module, q: SimpleNamespace) -> None:
        """The engine's states."""
        r, agent, reply, counters = self.requests, self.agent, self.reply, self.counters
        rd, head, row_bits = r.read, r.head, self._geometry.row_bits
        is_read, j, status = q.is_read, q.j, q.status

        def start_reply(code: Any, words: Any) -> None:
            m.d.sync += status.eq(code)
            m.d.comb += [reply.start.eq(1), reply.words.eq(words)]

        def end_write(code: Any) -> None:
            """A write is done (``code`` its status): answered, or released if Etherbone's."""
            with m.If(q.is_eb):
                m.d.comb += r.release.eq(1)
                m.next = "IDLE"
            with m.Else():
                start_reply(code, 0)
                m.next = "REPLY"

        def end_read() -> None:
            """A read's words are in the slot: the reply, after an Etherbone one's record."""
            with m.If(q.is_eb):
                m.d.sync += k.eq(0)
                m.next = "RECORD"
            with m.Else():
                start_reply(status, q.count)
                m.next = "REPLY"

        nb = self._geometry.width // 8
        k = Signal()
        meta = data.View(PACKET_META.layout(), r.meta)
        eb_now = Const(0) if self._etherbone_port is None else (
            (meta.local_port == self._etherbone_port) & (meta.protocol == IpProtocol.UDP.value))
        with m.FSM(name="controller"):
            with m.State("IDLE"):
                m.d.comb += [rd.addr.eq(Cat(Const(0, row_bits), head)), rd.en.eq(r.pending)]
                with m.If(r.pending):
                    m.next = "LOAD"
            with m.State("LOAD"):               # the slot's first row is on rd.data
                width = min(len(q.bytes), len(rd.data))
                m.d.sync += [q.bytes[:width].eq(rd.data[:width]), q.meta.eq(r.meta),
                             q.len.eq(r.length), j.eq(0), q.total.eq(0), q.is_eb.eq(eb_now),
                             status.eq(STATUS_OK)]
                if nb < EB_HEAD_BYTES:          # an Etherbone packet's head takes two rows
                    with m.If(eb_now):
                        m.d.comb += [rd.addr.eq(Cat(Const(1, row_bits), head)), rd.en.eq(1)]
                        m.next = "LOAD2"
                    with m.Else():
                        m.next = "DECODE"
                else:
                    m.next = "DECODE"
            with m.State("LOAD2"):              # its second row
                m.d.sync += q.bytes[8 * nb:].eq(rd.data[:8 * (EB_HEAD_BYTES - nb)])
                m.next = "DECODE"
            with m.State("DECODE"):
                count(m, counters.requests)
                with m.If(q.bad):
                    count(m, counters.bad_request)
                    with m.If(q.is_eb):         # Etherbone has no error reply: dropped
                        m.d.comb += r.release.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        start_reply(STATUS_BAD_REQUEST, 0)
                        m.next = "REPLY"
                with m.Elif(q.is_eb & q.eb.pf):
                    start_reply(STATUS_OK, 0)
                    m.next = "REPLY"
                with m.Elif(is_read):
                    count(m, counters.reads)
                    m.next = "ISSUE"
                    with m.If(q.is_eb):         # its address is word j of the slot
                        m.next = "FETCH"
                with m.Else():
                    count(m, counters.writes)
                    m.next = "FETCH"
            with m.State("FETCH"):              # word j of the slot onto rd.data
                m.d.comb += [rd.addr.eq(Cat(q.word_row, head)), rd.en.eq(1)]
                m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += agent.offer.eq(1)
                with m.If(agent.issued):        # taken with the message's last flit
                    m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += agent.waiting.eq(1)
                with m.If(agent.ack):
                    with m.If(agent.status != STATUS_OK):
                        with m.If(is_read):
                            m.d.sync += status.eq(agent.status)
                            m.next = "ZERO"
                        with m.Else():
                            end_write(agent.status)
                    with m.Else():
                        with m.If(is_read):
                            m.d.comb += [q.rep_word.eq(agent.value), q.rep_write.eq(1)]
                            m.d.sync += q.total.eq(q.total + agent.value[:16]
                                                   + agent.value[16:])
                        with m.If(q.last):
                            with m.If(is_read):
                                end_read()
                            with m.Else():
                                end_write(STATUS_OK)
                        with m.Elif(is_read & ~q.is_eb):
                            m.d.sync += j.eq(j + 1)
                            m.next = "ISSUE"
                        with m.Else():
                            m.d.sync += j.eq(j + 1)
                            m.next = "FETCH"
                with m.Elif(agent.timed_out):
                    count(m, counters.timeouts)
                    with m.If(is_read):
                        m.d.sync += status.eq(STATUS_TIMEOUT)
                        m.next = "ZERO"
                    with m.Else():
                        end_write(STATUS_TIMEOUT)
            with m.State("ZERO"):               # a failed READ: words j.. are zero
                m.d.comb += [q.rep_word.eq(0), q.rep_write.eq(1)]
                m.d.sync += j.eq(j + 1)
                with m.If(q.last):
                    end_read()
            with m.State("RECORD"):             # an Etherbone read's reply record, 2 words
                word = Mux(k, q.eb.base, q.eb.record)
                m.d.comb += [q.position.eq(HEADER_BYTES // 4 + k), q.rep_word.eq(word),
                             q.rep_write.eq(1)]
                m.d.sync += [q.total.eq(q.total + word[:16] + word[16:]), k.eq(1)]
                with m.If(k):
                    start_reply(STATUS_OK, q.count + 2)
                    m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += [rd.en.eq(reply.fetch),
                             rd.addr.eq(Cat(reply.fetch_row[:row_bits], head))]
                with m.If(reply.done):
                    m.d.comb += r.release.eq(1)
                    m.next = "IDLE"
