"""The NIC's descriptor formats, ConnectX-style, at their real sizes: a 64-byte transmit WQE,
a 16-byte receive descriptor, a 64-byte completion (FlexDriver's Table 2b).

The layouts follow the shape of ConnectX's (a control segment, an Ethernet segment with the
checksum offload flags and the inlined headers, a data segment pointing at the packet; a
completion carrying the offload results), big-endian, but they are this model's own: the
vendor's exact bit layouts are not published in the paper, and nothing here depends on them.

Transmit WQE (64 bytes):

=======  ====  ===========================================================================
offset   size  field
=======  ====  ===========================================================================
0        2     ``index``: the WQE's counter (its position, modulo 2**16)
2        1     ``opcode``: :data:`OP_SEND`
3        1     ``flags``: :data:`SIGNALED` (write a completion), :data:`L3_CSUM`,
               :data:`L4_CSUM` (fill in the IPv4 / TCP or UDP checksum)
4        4     ``queue``: the send queue's number
8        2     ``inline_bytes``: how many of the packet's first bytes are below (0 to 18)
10       18    the inlined bytes
28       4     ``length``: bytes at ``address`` (the rest of the packet)
32       8     ``address``: where they are (DMA)
40       24    (zero)
=======  ====  ===========================================================================

Receive descriptor (16 bytes): ``length`` (4, the buffer's size), ``key`` (4, zero here),
``address`` (8).

Completion (64 bytes):

=======  ====  ===========================================================================
0        1     ``opcode``: :data:`CQE_SEND`, :data:`CQE_RECV`, :data:`CQE_FILLER`,
               :data:`CQE_ERROR`
1        1     ``owner``: flips each time the queue wraps (a new entry has the writer's phase)
2        2     ``counter``: the WQE counter (send) or the receive descriptor's index (receive)
4        4     ``queue``: the send or receive queue's number
8        4     ``length``: the packet's bytes (receive; a filler's: the bytes left in the buffer)
12       4     ``rss_hash``: the flow hash that steered it (receive)
16       4     ``context``: the context ID a steering rule tagged it with (0: none)
20       1     ``checks``: :data:`IP_OK`, :data:`L4_OK`, :data:`IS_IPV4`, :data:`IS_TCP`,
               :data:`IS_UDP`, :data:`DECAPPED` (a VXLAN header was taken off)
21       1     ``error``: why a :data:`CQE_ERROR` (:data:`ERR_LENGTH`, :data:`ERR_OPCODE`)
22       2     ``stride``: on a striding receive queue, the packet's first stride in its buffer
               (a filler's: the buffer's first unused stride)
24       40    (zero)
=======  ====  ===========================================================================

A striding (multi-packet) receive queue puts several packets in one descriptor's buffer, each
from a stride boundary; a :data:`CQE_FILLER` completion closes a buffer that the next packet
does not fit in (``counter`` the descriptor's index, ``stride`` its first unused stride,
``length`` the bytes left).
"""

import struct
from dataclasses import dataclass


__all__ = ["WQE_BYTES", "RX_DESC_BYTES", "CQE_BYTES", "INLINE_MAX", "OP_SEND", "SIGNALED",
           "L3_CSUM", "L4_CSUM", "CQE_SEND", "CQE_RECV", "CQE_FILLER", "CQE_ERROR", "ERR_LENGTH",
           "ERR_OPCODE", "IP_OK", "L4_OK", "IS_IPV4", "IS_TCP", "IS_UDP", "DECAPPED",
           "TxWqe", "RxDesc", "Cqe"]

WQE_BYTES, RX_DESC_BYTES, CQE_BYTES = 64, 16, 64
INLINE_MAX = 18
OP_SEND = 0x0A
SIGNALED, L3_CSUM, L4_CSUM = 0x01, 0x02, 0x04
CQE_SEND, CQE_RECV, CQE_FILLER, CQE_ERROR = 0x0, 0x2, 0x3, 0xD
ERR_LENGTH, ERR_OPCODE = 1, 2
IP_OK, L4_OK, IS_IPV4, IS_TCP, IS_UDP, DECAPPED = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

_WQE = struct.Struct(">HBBIH18sIQ24x")
_RX = struct.Struct(">IIQ")
_CQE = struct.Struct(">BBHIIIIBBH40x")
assert (_WQE.size, _RX.size, _CQE.size) == (WQE_BYTES, RX_DESC_BYTES, CQE_BYTES)


@dataclass(frozen=True)
class TxWqe:
    """A transmit work-queue entry: send ``inline`` then ``length`` bytes at ``address``."""
    index: int
    queue: int
    address: int = 0
    length: int = 0
    inline: bytes = b""
    flags: int = SIGNALED
    opcode: int = OP_SEND

    def pack(self) -> bytes:
        if len(self.inline) > INLINE_MAX:
            raise ValueError(f"a WQE inlines at most {INLINE_MAX} bytes, not {len(self.inline)}")
        return _WQE.pack(self.index & 0xFFFF, self.opcode, self.flags, self.queue,
                         len(self.inline), self.inline.ljust(INLINE_MAX, b"\0"), self.length,
                         self.address)

    @classmethod
    def unpack(cls, raw: bytes) -> "TxWqe":
        index, opcode, flags, queue, n, inline, length, address = _WQE.unpack(raw)
        return cls(index, queue, address, length, inline[:min(n, INLINE_MAX)], flags, opcode)


@dataclass(frozen=True)
class RxDesc:
    """A receive descriptor: a buffer of ``length`` bytes at ``address``."""
    address: int
    length: int
    key: int = 0

    def pack(self) -> bytes:
        return _RX.pack(self.length, self.key, self.address)

    @classmethod
    def unpack(cls, raw: bytes) -> "RxDesc":
        length, key, address = _RX.unpack(raw)
        return cls(address, length, key)


@dataclass(frozen=True)
class Cqe:
    """A completion (see the module docstring)."""
    opcode: int
    owner: int
    counter: int
    queue: int
    length: int = 0
    rss_hash: int = 0
    context: int = 0
    checks: int = 0
    error: int = 0
    stride: int = 0

    def pack(self) -> bytes:
        return _CQE.pack(self.opcode, self.owner, self.counter & 0xFFFF, self.queue,
                         self.length, self.rss_hash, self.context, self.checks, self.error,
                         self.stride)

    @classmethod
    def unpack(cls, raw: bytes) -> "Cqe":
        return cls(*_CQE.unpack(raw))
