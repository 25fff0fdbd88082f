"""ICMP echo (RFC 792): the header table, and the tile that answers pings.

Messages
--------
In (``IP_RX_DATAGRAM`` from IPv4 RX, protocol 1): the ICMP message. Out (``IP_TX_DATAGRAM`` to
IPv4 TX): the echo reply, same metadata (it goes back to the sender).
"""

from amaranth import Signal
from amaranth.lib import enum

from apiary.stream.checksum import ones_sum
from apiary.stream.header import Header, header_view

from .layer import RxLayerTile
from .messages import MsgType


__all__ = ["IcmpType", "ICMP_ECHO", "IcmpEchoTile"]


class IcmpType(enum.Enum, shape=8):
    ECHO_REPLY   = 0
    ECHO_REQUEST = 8


#: ICMP echo request and reply, 8 bytes before the data.
ICMP_ECHO = Header("icmp_echo", [
    ("type", 8), ("code", 8), ("checksum", 16), ("identifier", 16), ("sequence", 16),
])

#: The part of an ICMP header the reply changes.
_TYPE_CODE_CHECKSUM = Header("icmp_type_code_checksum",
                             [("type", 8), ("code", 8), ("checksum", 16)])


class IcmpEchoTile(RxLayerTile):
    """Reply to every ICMP echo request whose checksum is right with an echo reply carrying the
    same identifier, sequence number and data.

    The request's checksum covers all of it, so each request is stored whole while it is summed
    (store-and-forward: the reply starts a few cycles after the request's last word). The reply
    differs from the request only in its type, so its checksum is the request's, updated
    incrementally (RFC 1624).

    Drops, each counted: ``bad_checksum``, ``overflow`` (longer than ``max_packet``),
    ``truncated`` (under 8 bytes), ``not_echo_request`` (any other type or code), ``no_route``.
    """

    head_bytes = 8
    key_width = 1
    msg_type = MsgType.IP_TX_DATAGRAM
    receives = MsgType.IP_RX_DATAGRAM
    drop_reasons = {
        "truncated": "messages shorter than 8 bytes",
        "not_echo_request": "ICMP messages other than echo requests",
    }
    patch_bytes = 4
    verify_offset = 0
    max_packet = 1480

    def verify(self, m, v):
        return v.sum == 0xFFFF, {}

    def parse(self, m, p):
        req = p.field(ICMP_ECHO)
        p.drop("truncated", p.head_len < 8)
        p.drop("not_echo_request", (req.type != IcmpType.ECHO_REQUEST.value) | (req.code != 0))
        reply = Signal(8 * 4)
        rep = header_view(_TYPE_CODE_CHECKSUM, reply)
        # Only the type changes, 8 -> 0: HC' = ~(~HC + ~m + m') with m = 0x0800, m' = 0.
        m.d.comb += [
            rep.type.eq(IcmpType.ECHO_REPLY.value),
            rep.code.eq(0),
            rep.checksum.eq(~ones_sum((~req.checksum)[:16], 0xF7FF)),
        ]
        p.patch(reply, 4)
