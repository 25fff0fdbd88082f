"""Bit-field headers described MSB first, and the NoC message header.

Network protocols and Beehive's SystemVerilog packages list header fields most significant bit
first, while :class:`amaranth.lib.data.StructLayout` places its first field at the least
significant bit. :class:`Header` is the one place where the two meet: a table of ``(name, width)``
pairs, MSB first, from which come

* :meth:`Header.layout`, an :class:`~amaranth.lib.data.FlexibleLayout` to view a signal with;
* :meth:`Header.pack` / :meth:`Header.unpack`, the same fields as Python integers;
* :meth:`Header.to_bytes` / :meth:`Header.from_bytes`, network byte order.

The NoC header (:func:`noc_header`) keeps the field widths of Beehive's ``beehive_noc_hdr_flit``
so that a 512-bit header flit is bit-compatible with Beehive's; see ``docs/noc.md``.
"""

import enum as py_enum
from dataclasses import dataclass, field, fields as dc_fields

from amaranth.hdl import unsigned
from amaranth.lib import data, enum


__all__ = [
    "Header", "MsgType", "Fbits", "NocHeader", "Message",
    "ROUTING_BITS", "noc_header", "routing_header", "header_flits", "check_width",
    "SUPPORTED_WIDTHS", "field_location",
]


class Header:
    """A fixed-size header described as ``(name, width)`` pairs, most significant field first.

    Fields whose name starts with ``_`` are padding: they take space, are not in the layout, and
    pack as zero. ``size`` (default: the sum of the widths) pads the header with zeros at the
    least significant end, as Beehive pads its 234-bit header into a 512-bit flit.

    Raises
    ------
    ValueError
        If two fields share a name, a width is not positive, or the fields do not fit ``size``.
    """

    def __init__(self, name, fields, *, size=None):
        self.name = name
        self.fields = [(str(n), int(w)) for n, w in fields]
        names = [n for n, _ in self.fields if not n.startswith("_")]
        if len(set(names)) != len(names):
            raise ValueError(f"header {name!r} names a field twice")
        for n, w in self.fields:
            if w <= 0:
                raise ValueError(f"header {name!r}: field {n!r} has width {w}; widths must be positive")
        self.bits = sum(w for _, w in self.fields)
        self.size = self.bits if size is None else int(size)
        if self.bits > self.size:
            raise ValueError(f"header {name!r} needs {self.bits} bits but its size is {self.size}")
        self._offsets = {}
        top = self.size
        for n, w in self.fields:
            top -= w
            if not n.startswith("_"):
                self._offsets[n] = (top, w)

    def __repr__(self):
        return f"Header({self.name!r}, {self.bits} bits in {self.size})"

    @property
    def names(self):
        return list(self._offsets)

    def offset(self, name):
        """Bit offset of field ``name`` from the LSB of the header."""
        return self._offsets[name][0]

    def width(self, name):
        return self._offsets[name][1]

    def layout(self):
        """A :class:`~amaranth.lib.data.FlexibleLayout` of :attr:`size` bits with every field."""
        return data.FlexibleLayout(self.size, {
            n: data.Field(unsigned(w), off) for n, (off, w) in self._offsets.items()
        })

    def pack(self, values=None, **kwargs):
        """Pack field values (a dict and/or keywords; missing fields are zero) into an int."""
        values = dict(values or {}, **kwargs)
        word = 0
        for n, v in values.items():
            if n not in self._offsets:
                raise ValueError(f"header {self.name!r} has no field {n!r}; fields are {self.names}")
            off, w = self._offsets[n]
            v = int(v)
            if not 0 <= v < (1 << w):
                raise ValueError(f"header {self.name!r}: {n}={v} does not fit in {w} bits")
            word |= v << off
        return word

    def unpack(self, word):
        """Split an int of :attr:`size` bits into a dict of field values."""
        return {n: (word >> off) & ((1 << w) - 1) for n, (off, w) in self._offsets.items()}

    def to_bytes(self, values=None, **kwargs):
        """Network byte order (the MSB of the header in the first byte)."""
        if self.size % 8:
            raise ValueError(f"header {self.name!r} is {self.size} bits, not a whole number of bytes")
        return self.pack(values, **kwargs).to_bytes(self.size // 8, "big")

    def from_bytes(self, raw):
        if len(raw) < self.size // 8:
            raise ValueError(f"header {self.name!r} needs {self.size // 8} bytes, got {len(raw)}")
        return self.unpack(int.from_bytes(raw[:self.size // 8], "big"))


class MsgType(enum.Enum, shape=8):
    """NoC message types, with Beehive's values where Beehive defines one."""
    ETH_TX_FRAME            = 1
    IP_RX_DATAGRAM          = 2
    TCP_RX_SEGMENT          = 3
    IP_TX_DATAGRAM          = 4
    TCP_NEW_FLOW_NOTIF      = 5
    TCP_RX_MSG_REQ          = 6
    TCP_RX_ADJUST_PTR       = 7
    TCP_RX_MSG_RESP         = 8
    TCP_TX_MSG_REQ          = 9
    TCP_TX_MSG_RESP         = 10
    TCP_TX_ADJUST_PTR       = 11
    ETH_RX_FRAME            = 12     # Beehive gives UDP_RX_SEGMENT the same value
    UDP_TX_SEGMENT          = 13
    IP_REWRITE_ADJUST_TABLE = 15
    TRACKER_MSG             = 16
    LOAD_MEM                = 19
    STORE_MEM               = 20
    LOAD_MEM_ACK            = 24
    STORE_MEM_ACK           = 25
    UDP_RX_SEGMENT          = 26     # distinct from ETH_RX_FRAME here; Beehive uses 12 for both
    CONTROL                 = 32
    ERROR                   = 33


class Fbits(py_enum.IntEnum):
    """The 4-bit destination sub-port. MSB set: deliver to the tile, low bits pick its interface."""
    LOCAL0 = 0b1000
    LOCAL1 = 0b1001
    LOCAL2 = 0b1010
    LOCAL3 = 0b1011


#: Bits of the routed part of the header; always the top bits of the first flit.
ROUTING_BITS = 64

_ROUTING = [
    ("dst_chip", 14), ("dst_x", 8), ("dst_y", 8), ("dst_fbits", 4),
    ("msg_len", 22), ("msg_type", 8),
]
_SOURCE = [
    ("src_chip", 14), ("src_x", 8), ("src_y", 8), ("src_fbits", 4), ("metadata_flits", 8),
]
_TRACE = [
    ("packet_x", 8), ("packet_y", 8), ("packet_num", 48), ("timestamp", 64),
]
# Not in Beehive (its tiles leave these bits zero): the payload length in bytes, so that the
# receiving side of a message can restore byte enables without knowing the protocol.
_PAYLOAD_BYTES = ("payload_bytes", 22)

SUPPORTED_WIDTHS = (64, 128, 256, 512)


def check_width(width, what="flit width"):
    """Raise a readable :class:`ValueError` unless ``width`` is a supported flit width."""
    if width not in SUPPORTED_WIDTHS:
        raise ValueError(f"{what} must be one of {', '.join(map(str, SUPPORTED_WIDTHS))} bits, "
                         f"not {width!r}")
    return width


def routing_header():
    """The 64-bit routed part of every NoC header (the top bits of a message's first flit)."""
    return Header("noc_routing", _ROUTING)


def noc_header(width):
    """The NoC message header at flit width ``width``.

    * 256 and 512 bits: Beehive's full 234-bit header (routing, source, metadata count, packet id,
      timestamp) at the top of one flit, then the payload length; at 512 bits the first 234 bits
      match ``beehive_noc_hdr_flit`` bit for bit.
    * 64 and 128 bits: Beehive's two-word control-NoC header (routing word, then source word with
      the payload length in its spare 22 bits): two flits at 64 bits, one at 128. Packet id and
      timestamp are not carried.

    The header's :attr:`Header.size` is ``header_flits(width) * width``; flit 0 holds its top
    ``width`` bits.
    """
    check_width(width)
    if width >= 256:
        return Header("noc_header", _ROUTING + _SOURCE + _TRACE + [_PAYLOAD_BYTES], size=width)
    return Header("noc_header", _ROUTING + _SOURCE + [_PAYLOAD_BYTES], size=128)


def header_flits(width):
    """Number of flits the NoC header takes at ``width`` bits (2 at 64, 1 above)."""
    return noc_header(width).size // width


@dataclass
class NocHeader:
    """Python view of a NoC header, for tests, traces and golden models."""
    dst_x: int = 0
    dst_y: int = 0
    dst_fbits: int = Fbits.LOCAL0
    msg_len: int = 0
    msg_type: int = 0
    src_x: int = 0
    src_y: int = 0
    src_fbits: int = Fbits.LOCAL0
    metadata_flits: int = 0
    payload_bytes: int = 0
    dst_chip: int = 0
    src_chip: int = 0
    packet_x: int = 0
    packet_y: int = 0
    packet_num: int = 0
    timestamp: int = 0

    def pack(self, width):
        """The header as ``header_flits(width)`` flit data words, first flit first.

        Fields the width does not carry (packet id and timestamp below 256 bits) must be zero.
        """
        hdr = noc_header(width)
        values = {f.name: int(getattr(self, f.name)) for f in dc_fields(self)}
        for n in list(values):
            if n not in hdr.names:
                if values[n]:
                    raise ValueError(f"a {width}-bit NoC header does not carry {n}")
                del values[n]
        word = hdr.pack(values)
        n = hdr.size // width
        mask = (1 << width) - 1
        return [(word >> (width * (n - 1 - i))) & mask for i in range(n)]

    @classmethod
    def unpack(cls, words, width):
        hdr = noc_header(width)
        n = hdr.size // width
        if len(words) < n:
            raise ValueError(f"a {width}-bit NoC header takes {n} flits, got {len(words)}")
        word = 0
        for w in words[:n]:
            word = (word << width) | int(w)
        return cls(**hdr.unpack(word))


@dataclass
class Message:
    """A whole NoC message in Python: header, metadata words and payload bytes.

    ``flits(width)`` gives what travels on a link (a list of ``(data, last)``) with ``msg_len``,
    ``metadata_flits`` and ``payload_bytes`` filled in; payload byte *i* of a flit sits in byte
    lane *i* (bits ``8*i .. 8*i+7``), the first byte in the least significant lane.
    """
    header: NocHeader = field(default_factory=NocHeader)
    meta: list = field(default_factory=list)
    payload: bytes = b""

    def flits(self, width):
        nb = width // 8
        body = [int(m) for m in self.meta]
        for i in range(0, len(self.payload), nb):
            body.append(int.from_bytes(self.payload[i:i + nb], "little"))
        hdr = NocHeader(**{f.name: getattr(self.header, f.name) for f in dc_fields(NocHeader)})
        hdr.metadata_flits = len(self.meta)
        hdr.payload_bytes = len(self.payload)
        words = hdr.pack(width)
        hdr.msg_len = len(words) - 1 + len(body)
        words = hdr.pack(width) + body
        return [(w, int(i == len(words) - 1)) for i, w in enumerate(words)]

    @classmethod
    def from_flits(cls, flits, width):
        """Decode a list of flit data words (or ``(data, last)`` pairs) into a :class:`Message`.

        Raises :class:`ValueError` if ``msg_len`` disagrees with the number of flits.
        """
        words = [f[0] if isinstance(f, tuple) else f for f in flits]
        hdr = NocHeader.unpack(words, width)
        if hdr.msg_len != len(words) - 1:
            raise ValueError(f"header says msg_len={hdr.msg_len} but the message has "
                             f"{len(words) - 1} flits after the first")
        nh = header_flits(width)
        meta = words[nh:nh + hdr.metadata_flits]
        payload = b"".join(w.to_bytes(width // 8, "little") for w in words[nh + hdr.metadata_flits:])
        return cls(hdr, meta, payload[:hdr.payload_bytes])


def field_location(width, name):
    """``(flit_index, bit_offset)``: which header flit holds field ``name`` at ``width`` bits, and
    the field's LSB within that flit's data."""
    hdr = noc_header(width)
    off = hdr.offset(name)
    n = hdr.size // width
    return n - 1 - off // width, off % width
