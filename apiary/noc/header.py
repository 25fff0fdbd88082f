"""The NoC message header: its field table, one source of truth for every width.

The header is Beehive's two-word header (``beehive_noc_hdr_flit``'s routing and source words, at
Beehive's field widths) at every width; Beehive's packet id and timestamp, which our tiles never
set, are not carried, so that a wide header flit leaves its low bits to metadata and the first
payload bytes; see ``docs/noc.md``. The table is a
:class:`~apiary.stream.format.Format` (fields MSB first, each with its meaning), from which the
router's routing view, the tiles' framing, the Python model (:class:`NocHeader`,
:class:`Message`), the trace dissector and the docs' table (``docs/messages.md``) all come.

What a message *means* (its ``msg_type``) is not the NoC's business: the packages that define
message types register them (:mod:`apiary.noc.msgtype`).
"""

import enum as py_enum
from collections.abc import Sequence
from dataclasses import dataclass, field, fields as dc_fields

from ..stream.format import Field, Format
from ..stream.layout import check_width


__all__ = [
    "Fbits", "NocHeader", "Message",
    "ROUTING_BITS", "noc_header", "routing_header", "header_flits", "field_location",
    "spare_bytes", "head_lanes", "message_payload",
]


class Fbits(py_enum.IntEnum):
    """The 4-bit destination sub-port. MSB set: deliver to the tile, low bits pick its interface."""
    LOCAL0 = 0b1000
    LOCAL1 = 0b1001
    LOCAL2 = 0b1010
    LOCAL3 = 0b1011


#: Bits of the routed part of the header; always the top bits of the first flit.
ROUTING_BITS = 64

_ROUTING = [
    Field("dst_chip", 14, "destination chip (Beehive's; 0 on one chip)"),
    Field("dst_x", 8, "destination column"),
    Field("dst_y", 8, "destination row"),
    Field("dst_fbits", 4, "destination sub-port: MSB set = the tile, low bits its interface"),
    Field("msg_len", 22, "flits after the first"),
    Field("msg_type", 8, "what the message is (registered by the package that defines it)"),
]
_SOURCE = [
    Field("src_chip", 14, "source chip"),
    Field("src_x", 8, "source column"),
    Field("src_y", 8, "source row"),
    Field("src_fbits", 4, "source sub-port (where answers go)"),
    Field("metadata_flits", 8, "metadata flits after the header (0 when inline or none)"),
]
# Not in Beehive (its tiles leave these bits zero): the payload length in bytes, so that the
# receiving side of a message can restore byte enables without knowing the protocol.
_PAYLOAD_BYTES = Field("payload_bytes", 22, "payload length in bytes (ours; zero in Beehive)")

_DOC = "The NoC message header: routing word and source word."


def routing_header() -> Format:
    """The 64-bit routed part of every NoC header (the top bits of a message's first flit)."""
    return Format("noc_routing", _ROUTING, doc=_DOC)


def noc_header(width: int) -> Format:
    """The NoC message header at flit width ``width``: Beehive's two-word header (routing word,
    then source word with the payload length in its spare 22 bits), 128 bits. Two flits at 64
    bits, one above; from 256 bits up the flit's low ``width - 128`` bits are left to inline
    metadata and head payload bytes (:func:`~apiary.noc.framing.meta_plan`).

    The header's :attr:`Header.size` is ``header_flits(width) * width``; flit 0 holds its top
    ``width`` bits.
    """
    check_width(width)
    return Format("noc_header", _ROUTING + _SOURCE + [_PAYLOAD_BYTES], size=max(128, width),
                  doc=_DOC)


def header_flits(width: int) -> int:
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

    def pack(self, width: int) -> list[int]:
        """The header as ``header_flits(width)`` flit data words, first flit first."""
        hdr = noc_header(width)
        word = hdr.pack({f.name: int(getattr(self, f.name)) for f in dc_fields(self)})
        n = hdr.size // width
        mask = (1 << width) - 1
        return [(word >> (width * (n - 1 - i))) & mask for i in range(n)]

    @classmethod
    def unpack(cls, words: Sequence[int], width: int) -> "NocHeader":
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

    def flits(self, width: int, head: int = 0) -> list[tuple[int, int]]:
        """The message's flits, ``(data, last)``; with ``head``, its first ``head`` payload
        bytes ride in the header flit (:func:`head_lanes`) and the payload flits carry the
        rest."""
        nb = width // 8
        first = head_lanes(width, head)
        head_bytes, rest = self.payload[:head], self.payload[head:]
        body = [int(m) for m in self.meta]
        for i in range(0, len(rest), nb):
            body.append(int.from_bytes(rest[i:i + nb], "little"))
        hdr = NocHeader(**{f.name: getattr(self.header, f.name) for f in dc_fields(NocHeader)})
        hdr.metadata_flits = len(self.meta)
        hdr.payload_bytes = len(self.payload)
        words = hdr.pack(width)
        hdr.msg_len = len(words) - 1 + len(body)
        words = hdr.pack(width)
        words[-1] |= int.from_bytes(head_bytes, "little") << (8 * first)
        words += body
        return [(w, int(i == len(words) - 1)) for i, w in enumerate(words)]

    @classmethod
    def from_flits(cls, flits: Sequence[int | tuple[int, int]], width: int,
                   head: int = 0) -> "Message":
        """Decode a list of flit data words (or ``(data, last)`` pairs) into a :class:`Message`;
        ``head`` as :meth:`flits` takes it.

        Raises :class:`ValueError` if ``msg_len`` disagrees with the number of flits.
        """
        words = [f[0] if isinstance(f, tuple) else f for f in flits]
        hdr = NocHeader.unpack(words, width)
        if hdr.msg_len != len(words) - 1:
            raise ValueError(f"header says msg_len={hdr.msg_len} but the message has "
                             f"{len(words) - 1} flits after the first")
        nh = header_flits(width)
        meta = words[nh:nh + hdr.metadata_flits]
        return cls(hdr, meta, message_payload(words, width, head,
                                              nh + hdr.metadata_flits)[:hdr.payload_bytes])


def message_payload(words: Sequence[int], width: int, head: int, start: int) -> bytes:
    """The payload bytes of a message's flit data ``words`` (not cut to ``payload_bytes``): its
    ``head`` head payload bytes from the last header flit (:func:`head_lanes`), then the flits
    from ``start`` on."""
    nb = width // 8
    out = (int(words[header_flits(width) - 1]) >> 8 * head_lanes(width, head)).to_bytes(
        nb, "little")[:head]
    return out + b"".join(int(w).to_bytes(nb, "little") for w in words[start:])


def spare_bytes(width: int) -> int:
    """Bytes of the last header flit below the header's fields: what inline metadata and head
    payload bytes share (0 at 64 and 128 bits, 16 at 256, 48 at 512)."""
    hdr = noc_header(width)
    return (hdr.size - hdr.bits) // 8


def head_lanes(width: int, head: int) -> int:
    """The byte lane of the last header flit where a message's ``head`` head payload bytes
    start: they take the top ``head`` lanes of the :func:`spare_bytes`, payload byte *i* in
    lane ``spare_bytes(width) - head + i``, right below the header's fields."""
    spare = spare_bytes(width)
    if not 0 <= head <= spare:
        raise ValueError(f"a {width}-bit header flit has room for at most {spare} head payload "
                         f"bytes, not {head}")
    return spare - head


def field_location(width: int, name: str) -> tuple[int, int]:
    """``(flit_index, bit_offset)``: which header flit holds field ``name`` at ``width`` bits, and
    the field's LSB within that flit's data."""
    hdr = noc_header(width)
    off = hdr.offset(name)
    n = hdr.size // width
    return n - 1 - off // width, off % width
