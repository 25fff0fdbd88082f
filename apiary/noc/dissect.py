"""NoC trace records and their scapy dissectors, generated from the message specification.

A *trace record* is one NoC message as a tap saw it, in a form any tool can read without
knowing the flit width: :data:`TRACE_RECORD` (where and when it was seen, how many flits it
took, how many bytes of metadata follow), then the header as the 256-bit NoC header
(:func:`~apiary.noc.header.noc_header` at 256 bits: every field, whatever the width it was
seen at, then 128 bits of zeros), then the metadata as its format's value (most significant
byte first), then the payload bytes (those in the header flit first). Every field is most
significant byte first, as a dissector reads it. In a pcap its link type is
:data:`LINKTYPE_NOC_TRACE` (148, user-defined; 147 is the log tile's raw messages).

:func:`scapy_layers` generates scapy ``Packet`` classes from the same tables the hardware's
layouts come from: one for the record, one for the header and one per metadata format, bound
by ``msg_type`` (so ``rdpcap`` of a trace gives ``record / header / kernel_meta / Raw``).
scapy is imported only when they are made.
"""

import enum as py_enum
from collections.abc import Sequence
from dataclasses import dataclass, fields as dc_fields
from functools import lru_cache
from typing import Any

from ..stream.format import Field, Format
from .header import NocHeader, noc_header
from .msgtype import msg_type_name, registered_msg_types
from .spec import decode_message, message_specs


__all__ = ["LINKTYPE_NOC_TRACE", "TRACE_RECORD", "TapDirection", "Plane", "trace_record",
           "NocLayers", "scapy_layers", "packet_class"]

#: pcap link type of trace records (user-defined DLTs are 147 to 162).
LINKTYPE_NOC_TRACE = 148


class TapDirection(py_enum.IntEnum):
    """Which way the tapped port carries messages."""
    FROM_TILE = 0       # the tile's output into the NoC
    TO_TILE = 1         # the NoC's output into the tile


class Plane(py_enum.IntEnum):
    DATA = 0
    CTL = 1


TRACE_RECORD = Format("noc_trace", [
    Field("version", 8, "record format version (1)"),
    Field("plane", 8, "the mesh the message was on", values=Plane),
    Field("direction", 8, "into or out of the tile", values=TapDirection),
    Field("width", 16, "flit width in bits"),
    Field("tap_x", 8, "column of the tapped tile"),
    Field("tap_y", 8, "row of the tapped tile"),
    Field("flits", 16, "flits the message took"),
    Field("meta_bytes", 16, "bytes of metadata after the header"),
    Field("cycle", 64, "cycle the message's first flit moved"),
], doc="A trace record's header: where and when a message was seen.")

_HEADER = noc_header(256)


def trace_record(flits: Sequence[Any], width: int, *, cycle: int, tap: tuple[int, int] = (0, 0),
                 direction: int = TapDirection.FROM_TILE, plane: int = Plane.DATA) -> bytes:
    """The trace record of one message (its flits' data words, or ``(data, last)`` pairs, at
    ``width`` bits), seen at tile ``tap`` on ``cycle``."""
    d = decode_message(flits, width)
    meta_bytes = -(-d.meta_bits // 8)
    record = TRACE_RECORD.to_bytes(version=1, plane=int(plane), direction=int(direction),
                                   width=width, tap_x=tap[0], tap_y=tap[1], flits=d.flits,
                                   meta_bytes=meta_bytes, cycle=cycle)
    header = _HEADER.to_bytes({f.name: int(getattr(d.header, f.name))
                               for f in dc_fields(NocHeader)})
    return record + header + d.meta.to_bytes(meta_bytes, "big") + d.payload


def packet_class(fmt: Format, class_name: str | None = None,
                 names: dict[str, dict[int, str]] | None = None) -> Any:
    """A scapy ``Packet`` class of ``fmt``: its fields as ``BitField``\\ s (``BitEnumField``
    where the format, or ``names[field]``, names the values), most significant first, padded
    at the top to whole bytes; ``bytes(cls(**values))`` is ``fmt.to_bytes(values)``, bit for
    bit."""
    from scapy.fields import BitEnumField, BitField
    from scapy.packet import Packet
    total = -(-fmt.size // 8) * 8
    specs = fmt.specs if fmt.order == "msb" else list(reversed(fmt.specs))
    spare = fmt.size - fmt.bits            # below the fields (msb), above them (lsb)
    top = total - fmt.size + (spare if fmt.order == "lsb" else 0)
    fields_desc: list[Any] = []
    if top:
        fields_desc.append(BitField("pad_top", 0, top))
    for f in specs:
        name = f.name.lstrip("_") or "reserved"
        known = (names or {}).get(f.name) or f.value_names()
        fields_desc.append(BitEnumField(name, 0, f.width, known) if known
                           else BitField(name, 0, f.width))
    if spare and fmt.order == "msb":
        fields_desc.append(BitField("pad", 0, spare))
    cls_name = class_name or "".join(p.capitalize() for p in fmt.name.split("_"))
    return type(cls_name, (Packet,), {"name": fmt.name, "fields_desc": fields_desc})


@dataclass(frozen=True)
class NocLayers:
    """The generated scapy classes: ``record`` (a trace record, the pcap's link layer),
    ``header`` (the 256-bit NoC header) and ``meta`` (one per metadata format, by its name)."""
    record: Any
    header: Any
    meta: dict[str, Any]

    def decode(self, raw: bytes) -> Any:
        """A trace record's bytes as scapy layers."""
        return self.record(raw)


def scapy_layers() -> NocLayers:
    """The scapy layers of the message types registered so far (made once per set of
    registered types); also registers the record class for link type 148 with scapy, so
    ``rdpcap`` decodes trace pcaps."""
    key = (tuple(registered_msg_types()),
           tuple((v, s.meta.name if s.meta else "") for v, s in message_specs().items()))
    return _layers(key)


@lru_cache(maxsize=None)
def _layers(key: tuple[Any, ...]) -> NocLayers:
    from scapy.config import conf
    from scapy.packet import bind_layers
    specs = message_specs()
    meta = {}
    by_type = {}
    for value, spec in specs.items():
        if spec.meta is not None:
            if spec.meta.name not in meta:
                meta[spec.meta.name] = packet_class(spec.meta)
            by_type[value] = meta[spec.meta.name]
    record = packet_class(TRACE_RECORD, "NocTraceRecord")
    header = packet_class(_HEADER, "NocHeaderLayer", {"msg_type": {
        v: msg_type_name(v) for v in registered_msg_types()}})

    def guess(self: Any, payload: bytes) -> Any:
        cls = by_type.get(self.msg_type)
        under = self.underlayer
        if cls is not None and under is not None and under.meta_bytes == len(cls()):
            return cls
        return conf.raw_layer

    header.guess_payload_class = guess
    bind_layers(record, header)
    conf.l2types.register(LINKTYPE_NOC_TRACE, record)
    return NocLayers(record, header, meta)
