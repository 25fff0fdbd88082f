"""The TCP header (RFC 9293), its flags and the options the engine reads and writes.

The engine reads three options on SYN segments: MSS (kind 2), window scale (kind 3, RFC 7323)
and SACK-permitted (kind 4, RFC 2018), and on every segment the blocks of a SACK option (kind 5)
aligned as RFC 2018's ``NOP, NOP, SACK`` puts them; every other option is skipped by its length.
It writes them on its own SYN and SYN-ACK as ``MSS, NOP, WS``, then, if it offers SACK at all,
``NOP, NOP, SACK-permitted`` (or four NOPs to a peer that did not offer it; :func:`syn_options`):
8 or 12 bytes, a 28-byte header (:data:`SYN_HEADER_BYTES`) or a 32-byte one
(:data:`MAX_TX_HEADER_BYTES`). Other segments carry a bare 20-byte header, or, on a connection
that agreed to SACK while out-of-order bytes wait in the receive ring, ``NOP, NOP, SACK`` with
that one block (:func:`sack_option`): 32 bytes.
Timestamps are not offered, so a Linux peer does not use them.

Sequence numbers are compared modulo 2**32 (:func:`seq_lt` and friends, in hardware and in
Python).
"""

from amaranth import Cat, Const, Mux, Value
from amaranth.lib import data

from apiary.stream.header import Header, byte_reverse


__all__ = ["TCP", "TCP_HEADER_BYTES", "SYN_HEADER_BYTES", "MAX_TX_HEADER_BYTES",
           "MAX_HEADER_BYTES", "FIN", "SYN", "RST", "PSH", "ACK", "URG", "OPT_EOL", "OPT_NOP",
           "OPT_MSS", "OPT_WSCALE", "OPT_SACK_OK", "OPT_SACK", "SACK_BLOCK_BYTES", "SACK_BLOCK",
           "MAX_WSCALE",
           "syn_options", "sack_option", "seq_lt", "seq_le", "seq_max",
           "seq_min", "py_seq_lt"]


#: The fixed 20-byte TCP header; ``data_offset`` counts 32-bit words, options follow.
TCP = Header("tcp", [
    ("src_port", 16), ("dst_port", 16), ("seq", 32), ("ack", 32),
    ("data_offset", 4), ("reserved", 4), ("flags", 8), ("window", 16),
    ("checksum", 16), ("urgent", 16),
])
TCP_HEADER_BYTES = 20
SYN_HEADER_BYTES = 28
MAX_TX_HEADER_BYTES = 32
#: The option bytes of an ACK reporting one SACK block (:func:`sack_option`).
SACK_BLOCK_BYTES = 12
#: A SACK block: the peer holds ``[start, end)`` (sequence numbers).
SACK_BLOCK = data.StructLayout({"start": 32, "end": 32})
MAX_HEADER_BYTES = 60

FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

OPT_EOL, OPT_NOP, OPT_MSS, OPT_WSCALE, OPT_SACK_OK, OPT_SACK = 0, 1, 2, 3, 4, 5
#: The largest shift RFC 7323 allows; larger ones are taken as 14.
MAX_WSCALE = 14


def syn_options(mss: Value, wscale: Value, with_wscale: Value,
                with_sack: Value | None = None) -> Value:
    """The option bytes of the engine's SYN and SYN-ACK, lane order (first byte in bits 7..0):
    MSS ``mss``, then NOP and window scale ``wscale``, or, without ``with_wscale`` (a passive
    open whose SYN offered none), NOP NOP NOP NOP: 8 bytes. With ``with_sack`` given, 4 more:
    NOP NOP SACK-permitted if it is set, else NOP NOP NOP NOP (so that every SYN of an engine
    that offers SACK has the same 32-byte header)."""
    ws = Cat(Const(OPT_NOP, 8), Const(OPT_WSCALE, 8), Const(3, 8), wscale[:8])
    nops = Const(0x01010101, 32)
    options = Cat(Const(OPT_MSS, 8), Const(4, 8), mss[8:16], mss[:8], Mux(with_wscale, ws, nops))
    if with_sack is None:
        return options
    sack_ok = Cat(Const(OPT_NOP, 8), Const(OPT_NOP, 8), Const(OPT_SACK_OK, 8), Const(2, 8))
    return Cat(options, Mux(with_sack, sack_ok, nops))


def sack_option(start: Value, end: Value) -> Value:
    """The 12 option bytes of an ACK that reports one SACK block ``[start, end)`` (RFC 2018),
    lane order: NOP NOP SACK (kind 5, length 10), the block's edges big-endian."""
    return Cat(Const(OPT_NOP, 8), Const(OPT_NOP, 8), Const(OPT_SACK, 8), Const(10, 8),
               byte_reverse(start), byte_reverse(end))


def seq_lt(a: Value, b: Value) -> Value:
    """``a`` before ``b`` in sequence space (RFC 9293's ``<``, modulo 2**32)."""
    return (a - b)[31]


def seq_le(a: Value, b: Value) -> Value:
    return ~seq_lt(b, a)


def seq_max(a: Value, b: Value) -> Value:
    return Mux(seq_lt(a, b), b, a)


def seq_min(a: Value, b: Value) -> Value:
    return Mux(seq_lt(a, b), a, b)


def py_seq_lt(a: int, b: int) -> bool:
    """:func:`seq_lt` for Python integers."""
    return bool((a - b) & 0x80000000)
