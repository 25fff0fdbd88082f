"""The TCP application interface: the messages between the engine and application tiles.

It is the Apiary thesis's (§3.4.3): data moves through per-flow circular buffers held in
memory tiles (:class:`~apiary.os.memory_tile.MemoryTile`), one for receiving and one for
sending, and the engine and the application exchange only pointers. Every message carries
:data:`APP_META` (inline in the header flit at 512 bits, in metadata flits below) and no
payload.

=======================  ====  ==========================  =======================================
message                  type  from → to                   fields
=======================  ====  ==========================  =======================================
``TCP_NEW_FLOW_NOTIF``   5     RX engine → application     ``flow``, ``kind`` (a receive or a
                                                           send buffer), the buffer (``addr``,
                                                           ``size_log2``, ``mem_x``/``mem_y``),
                                                           ``peer_ip``/``peer_port``/
                                                           ``local_port``, ``status``; sent twice
                                                           per connection, once per buffer
``TCP_RX_MSG_REQ``       6     application → RX engine     ``flow``, ``length``: tell me when at
                                                           least this many bytes can be read
``TCP_RX_MSG_RESP``      8     RX engine → application     ``flow``, ``ptr`` (the read pointer),
                                                           ``addr`` (where byte ``ptr`` is),
                                                           ``size_log2``, ``length`` (bytes ready,
                                                           all of them), ``status``
``TCP_RX_ADJUST_PTR``    7     application → RX engine     ``flow``, ``ptr``: read up to here
                                                           (``bump_recv_ptr``)
``TCP_TX_MSG_REQ``       9     application → TX engine     ``flow``, ``length``: tell me when this
                                                           many bytes of room are free
``TCP_TX_MSG_RESP``      10    TX engine → application     ``flow``, ``ptr`` (the write pointer),
                                                           ``addr``, ``size_log2``, ``length``
                                                           (bytes free), ``status``
``TCP_TX_ADJUST_PTR``    11    application → TX engine     ``flow``, ``ptr``: written up to here
                                                           (``bump_send_ptr``)
``TCP_OPEN_REQ``         29    application → RX engine     ``peer_ip``, ``peer_port``,
                                                           ``local_port``: open a connection; the
                                                           answer is ``TCP_NEW_FLOW_NOTIF`` (a
                                                           ``status`` other than OK: it failed)
``TCP_CLOSE_REQ``        30    application → TX engine     ``flow``: send FIN after the data
                                                           written so far
``TCP_PEER_REQ``         21    application → RX engine     ``flow``: who is the connection with?
``TCP_PEER_RESP``        22    RX engine → application     ``flow``, ``peer_ip``, ``peer_port``,
                                                           ``local_port``, ``status`` (OK; CLOSED
                                                           if the slot holds a newer connection)
=======================  ====  ==========================  =======================================

Pointers are byte offsets in the connection's stream (0 is its first byte, modulo 2**32); the
byte at pointer ``p`` sits at ``addr_of_buffer + p mod 2**size_log2``, and the engine gives that
address with every response, so an application reads and writes its buffers with
``LOAD_MEM``/``STORE_MEM`` at ``addr`` with ``wrap = size_log2`` (the memory tile wraps the
ring). An application must see ``STORE_MEM_ACK`` before it bumps a send pointer (the engine
then reads what it wrote), and must read what it asked for before it bumps a receive pointer.

A flow is named by a handle, ``flow``: the engine's flow slot in the low :data:`SLOT_BITS` bits
and a generation in the top :data:`GEN_BITS`, so a message about a connection that has ended
(its slot reused) is answered with status ``CLOSED`` instead of acting on the new one.

Notifications of new connections go to the tile the RX engine routes the local port to (or,
for a connection an application opens, to that application); every response about a flow goes
to its application too, and a request for no open connection is answered (status ``CLOSED``) to
the tile that sent it. Responses carry the buffer's memory tile (``mem_x``/``mem_y``) as the
notifications do. When a connection ends, the application learns it from the ``status`` of a
``TCP_RX_MSG_RESP``: ``EOF`` (the peer closed; ``length`` bytes are still to read) answers its
receive request; ``RESET`` or ``TIMEOUT`` comes unasked, once, as the connection is dropped;
a ``TCP_TX_MSG_REQ`` still waiting for room is answered ``CLOSED``. As the receive and transmit
sides are separate tiles, a transmit answer may still arrive after a ``RESET``.

``TCP_PEER_REQ`` is for an application that did not see the peer in a notification: under
Apiary the notification is a capability, which carries no peer (below), and the context module
of :class:`~beehive.apps.tcp_app.TcpAppTile` asks with it before it hands the application a
connection. The answer goes to the flow's application as its other responses do, in the flow's
next turn of the engine; it is ``OK``, with the tuple, for any connection the application has
been told of, even one that has ended, until its slot is taken by the next.

With Apiary (the kernel's capabilities), ``addr`` becomes the application's own handle for the
buffer segment, which the engine obtains when it grants the segment (``send`` of the thesis's
Table 3.2), and the messages stay as they are: this is the thesis's notification, one per
buffer, carrying the flow, the handle and the buffer kind.
"""

import enum
from typing import Any

from amaranth.lib import data

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.ports import Receive
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.spec import register_formats
from apiary.stream.format import Field, Format
from apiary.stream.queue import Queue

from ..messages import MsgType


__all__ = ["APP_META", "Status", "BufferKind", "SLOT_BITS", "GEN_BITS", "flow_handle",
           "handle_slot", "handle_gen", "app_message_flits", "decode_app_message",
           "APP_MESSAGES", "APP_REQUEST", "app_input", "app_requests"]


#: Bits of a flow handle that name the engine's flow slot (so at most 4096 flows).
SLOT_BITS = 12
#: Bits of a flow handle that hold the slot's generation.
GEN_BITS = 4


class Status(enum.IntEnum):
    """The ``status`` of a response or notification."""
    OK = 0
    EOF = 1             # the peer sent FIN: after the ``length`` bytes reported, nothing more
    RESET = 2           # the peer reset the connection
    REFUSED = 3         # an open was answered with RST
    UNREACHABLE = 4     # an open's address could not be resolved (no ARP reply)
    TIMEOUT = 5         # retransmissions went unanswered; the connection was dropped
    CLOSED = 6          # the handle names no open connection (ended, or never was)
    BUSY = 7            # an open found no free flow slot, or another open was in progress


class BufferKind(enum.IntEnum):
    """The ``kind`` of a ``TCP_NEW_FLOW_NOTIF``: which of the connection's buffers it names."""
    RECEIVE = 0
    SEND = 1


#: The metadata of every application message (220 bits: inline at 512 bits, 4 flits at 64).
APP_META = Format("tcp_app_meta", [
    Field("flow", 16, "flow handle: slot (low 12 bits), generation above"),
    Field("status", 4, "in responses and notifications: the outcome", values=Status),
    Field("kind", 2, "TCP_NEW_FLOW_NOTIF: which buffer (0 receive, 1 send)"),
    Field("length", 32, "bytes asked for, ready or free"),
    Field("ptr", 32, "a read or write pointer (byte offset in the stream)"),
    Field("addr", 48, "where byte ptr is (or the buffer's base)"),
    Field("size_log2", 6, "the ring buffer is 2**size_log2 bytes"),
    Field("mem_x", 8, "the buffer's memory tile column"),
    Field("mem_y", 8, "the buffer's memory tile row"),
    Field("peer_ip", 32, "the connection's peer address"),
    Field("peer_port", 16, "the peer's port"),
    Field("local_port", 16, "the design's port"),
], doc="The metadata of the TCP application interface's messages.")

#: The message types of the interface.
APP_MESSAGES = (MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_MSG_RESP,
                MsgType.TCP_RX_ADJUST_PTR, MsgType.TCP_TX_MSG_REQ, MsgType.TCP_TX_MSG_RESP,
                MsgType.TCP_TX_ADJUST_PTR, MsgType.TCP_OPEN_REQ, MsgType.TCP_CLOSE_REQ,
                MsgType.TCP_PEER_REQ, MsgType.TCP_PEER_RESP)
register_formats(APP_MESSAGES, APP_META)


def flow_handle(slot: int, gen: int) -> int:
    return (gen % (1 << GEN_BITS)) << SLOT_BITS | slot


def handle_slot(handle: int) -> int:
    return handle & ((1 << SLOT_BITS) - 1)


def handle_gen(handle: int) -> int:
    return handle >> SLOT_BITS & ((1 << GEN_BITS) - 1)


def app_message_flits(width: int, msg_type: MsgType | int, *, dst: tuple[int, int] = (0, 0),
                      src: tuple[int, int] = (0, 0), dst_fbits: int = Fbits.LOCAL0,
                      src_fbits: int = Fbits.LOCAL0, **fields: int) -> list[tuple[int, int]]:
    """The flits of an application message with the :data:`APP_META` ``fields`` given (the
    others zero)."""
    value: Any = getattr(msg_type, "value", msg_type)      # a MsgType's, or the int
    header = NocHeader(dst_x=dst[0], dst_y=dst[1], dst_fbits=dst_fbits, src_x=src[0],
                       src_y=src[1], src_fbits=src_fbits, msg_type=int(value))
    return meta_message_flits(width, header, APP_META.pack(fields), APP_META.size)


def decode_app_message(flits: list, width: int) -> tuple[NocHeader, dict[str, int]]:
    """``(header, fields)`` of an application message's flits."""
    header, meta, _ = decode_meta_message(flits, width, APP_META.size)
    return header, APP_META.unpack(meta)


#: An application's request as an engine tile queues it: its type, who sent it, its fields.
APP_REQUEST = data.StructLayout({"msg_type": 8, "x": 8, "y": 8, "fbits": 4,
                                 "meta": APP_META.layout()})


def app_input(*types, fbits=None, name="app_rx"):
    """The input (:class:`~apiary.noc.ports.Receive`) by which an engine tile takes the
    application messages of ``types``, on sub-port ``fbits``; :func:`app_requests` queues
    them."""
    return Receive(name, *types, meta=APP_META, fbits=fbits, empty_packets=True)


def app_requests(m, rx, name="app", depth=4, fall_through=False):
    """The queue of :data:`APP_REQUEST` (submodule ``<name>_q`` of ``m``) that the receiver
    of application messages ``rx`` (:func:`app_input`) fills: take requests from
    ``queue.o`` (with ``fall_through``, in the cycle they come when it is empty)."""
    q = m.submodules[f"{name}_q"] = Queue(APP_REQUEST, depth, fall_through=fall_through)
    hdr = rx.o_hdr.payload
    m.d.comb += [
        q.i.valid.eq(rx.o_hdr.valid), rx.o_hdr.ready.eq(q.i.ready), rx.o_data.ready.eq(1),
        q.i.payload.msg_type.eq(hdr.msg_type), q.i.payload.x.eq(hdr.src_x),
        q.i.payload.y.eq(hdr.src_y), q.i.payload.fbits.eq(hdr.src_fbits),
        q.i.payload.meta.eq(hdr.meta),
    ]
    return q
