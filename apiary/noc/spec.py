"""The message specification: for every registered message type, the format of its metadata and
what its payload holds; the one table the docs page, the checkers and the trace dissectors are
generated from.

A package that defines messages registers their types (:func:`~apiary.noc.msgtype.
register_msg_types`), then says what they carry::

    register_formats(KernelMsgType, meta=KERNEL_FORMAT)
    register_formats([MemMsgType.STORE_MEM], meta=MEM_FORMAT, payload="the bytes to store")

``meta`` is a :class:`~apiary.stream.format.Format` (the same object the package's hardware
layout comes from: ``KERNEL_META = KERNEL_FORMAT.layout()``), carried as ``meta_bits=`` metadata
(:func:`~apiary.noc.framing.meta_plan`: inline in the header flit from 256 bits up when it fits,
in flits after the header otherwise). A type registered with ``head_payload=True`` also carries
its first payload bytes in the header flit's lanes its inline metadata leaves
(:func:`head_bytes`; :func:`~apiary.noc.framing.head_room`). :func:`decode_message` takes a
message's flits apart by the specification;
:func:`message_problems` says what is wrong with one (the simulation-time checker,
:mod:`apiary.noc.checker`, fails on any); :func:`messages_markdown` writes ``docs/messages.md``.
"""

import enum as py_enum
import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..stream.format import Format
from .framing import head_room, meta_plan
from .header import Message, NocHeader, head_lanes, header_flits, message_payload, noc_header
from .msgtype import UNTYPED, msg_type_name


__all__ = ["MessageSpec", "Decoded", "register_formats", "message_spec", "message_specs",
           "head_bytes", "head_counts", "message_flits", "message_from_flits",
           "decode_message", "message_problems", "messages_markdown"]


@dataclass(frozen=True)
class MessageSpec:
    """What a message type carries: ``meta`` (its metadata's format, ``None``: no metadata)
    and ``payload`` (what its payload holds, in words; ``""``: no payload); with
    ``head_payload`` its first payload bytes ride in the header flit where the metadata leaves
    room (:meth:`head_bytes`)."""
    msg_type: py_enum.Enum
    meta: Format | None
    payload: str = ""
    head_payload: bool = False

    @property
    def value(self) -> int:
        return int(self.msg_type.value)

    def meta_flits(self, width: int) -> int:
        """Metadata flits after the header at ``width`` bits (0 when inline or none)."""
        return 0 if self.meta is None else meta_plan(width, meta_bits=self.meta.size)[0]

    def head_bytes(self, width: int) -> int:
        """Payload bytes its messages carry in the header flit at ``width`` bits."""
        if not self.head_payload:
            return 0
        return head_room(width, 0 if self.meta is None else self.meta.size)


_specs: dict[int, MessageSpec] = {}


def register_formats(types: Iterable[py_enum.Enum], meta: Format | None, *,
                     payload: str = "", head_payload: bool = False) -> None:
    """Say that every message type of ``types`` (registered message types, or an enum of them)
    carries metadata of format ``meta`` and a payload described by ``payload``, with
    ``head_payload`` its first bytes in the header flit where the metadata leaves room.

    Raises
    ------
    ValueError
        A type that is not a registered message type, or one already given another
        specification.
    """
    for t in types:
        value = int(t.value)
        if msg_type_name(value) != f"{type(t).__qualname__}.{t.name}":
            raise ValueError(f"{t!r} is not a registered message type; decorate its enum with "
                             f"@register_msg_types first")
        spec = MessageSpec(t, meta, payload, bool(head_payload))
        old = _specs.get(value)
        if old is not None and (getattr(old.meta, "name", None) != getattr(meta, "name", None)
                                or old.payload != payload
                                or old.head_payload != spec.head_payload):
            raise ValueError(f"{msg_type_name(value)} already carries "
                             f"{old.meta.name if old.meta else 'no metadata'}; a message type "
                             f"has one specification")
        _specs[value] = spec


def message_spec(msg_type: int) -> MessageSpec | None:
    """The specification of ``msg_type`` (``None`` if none was registered)."""
    return _specs.get(int(msg_type))


def message_specs() -> dict[int, MessageSpec]:
    """Every registered specification, by value."""
    return dict(sorted(_specs.items()))


def head_bytes(width: int, msg_type: Any) -> int:
    """Payload bytes a message of ``msg_type`` (a registered type or its value) carries in its
    header flit at ``width`` bits (0 for a type registered without ``head_payload``, or not
    registered)."""
    spec = _specs.get(int(getattr(msg_type, "value", msg_type)))
    return 0 if spec is None else spec.head_bytes(width)


def message_flits(message: Message, width: int) -> list[tuple[int, int]]:
    """``message.flits(width)`` with the head payload bytes its type carries
    (:func:`head_bytes`): how a tile's framing sends it."""
    return message.flits(width, head_bytes(width, message.header.msg_type))


def message_from_flits(flits: Sequence[Any], width: int) -> Message:
    """:meth:`Message.from_flits` with the head payload bytes the message's type carries."""
    words = _words(flits)
    return Message.from_flits(words, width,
                              head_bytes(width, NocHeader.unpack(words, width).msg_type))


def head_counts(width: int, types: Iterable[Any] | None = None) -> dict[int, int]:
    """``{msg_type: head bytes}`` of ``types`` (every registered type if ``None``) that carry
    any at ``width`` bits: the ``head=`` of a
    :class:`~apiary.noc.framing.MessageSender` or :class:`~apiary.noc.framing.MessageReceiver`
    that sends or takes those types."""
    values = _specs if types is None else [int(getattr(t, "value", t)) for t in types]
    counts = {int(v): head_bytes(width, v) for v in values}
    return {v: k for v, k in counts.items() if k}


@dataclass(frozen=True)
class Decoded:
    """A message taken apart by its specification: the header, the metadata (``meta``, an int
    of ``meta_bits`` bits: the format's value when ``spec`` has a format and the message follows
    it, else the metadata flits as one little-endian number), the payload bytes present, and
    the flits it took."""
    header: NocHeader
    spec: MessageSpec | None
    meta: int
    meta_bits: int
    payload: bytes
    flits: int

    @property
    def formatted(self) -> bool:
        """``meta`` is the value of ``spec.meta`` (the message carries the format's metadata
        where the specification says)."""
        return (self.spec is not None and self.spec.meta is not None
                and self.meta_bits == self.spec.meta.size)

    def fields(self) -> dict[str, int]:
        """The metadata's fields (empty unless :attr:`formatted`)."""
        return self.spec.meta.unpack(self.meta) if self.formatted else {}   # type: ignore


def _words(flits: Sequence[Any]) -> list[int]:
    return [int(f[0] if isinstance(f, tuple) else f) for f in flits]


def _meta_area(words: list[int], width: int, hdr: NocHeader,
               spec: MessageSpec | None) -> tuple[int, int, int]:
    """``(value, bits, area)``: the metadata as the specification places it (``bits`` of it in
    an area of ``area`` bits), or the metadata flits as they are."""
    nh = header_flits(width)
    if spec is not None and spec.meta is not None and \
            hdr.metadata_flits == spec.meta_flits(width):
        flits, inline, _ = meta_plan(width, meta_bits=spec.meta.size)
        if inline:
            area = 8 * head_lanes(width, spec.head_bytes(width))
            value = words[nh - 1] & (1 << area) - 1
        else:
            area = flits * width
            value = sum(w << (width * k) for k, w in enumerate(words[nh:nh + flits]))
        return value, spec.meta.size, area
    meta = words[nh:nh + hdr.metadata_flits]
    bits = len(meta) * width
    return sum(w << (width * k) for k, w in enumerate(meta)), bits, bits


def decode_message(flits: Sequence[Any], width: int) -> Decoded:
    """Take a message's flits (data words, or ``(data, last)`` pairs) apart; never raises on a
    malformed message (:func:`message_problems` says what is wrong), only on one shorter than
    its header."""
    words = _words(flits)
    nh = header_flits(width)
    if len(words) < nh:
        raise ValueError(f"a {width}-bit message takes at least {nh} flits, got {len(words)}")
    hdr = NocHeader.unpack(words, width)
    spec = message_spec(hdr.msg_type)
    value, bits, _ = _meta_area(words, width, hdr, spec)
    body = message_payload(words, width, head_bytes(width, hdr.msg_type),
                           nh + hdr.metadata_flits)
    return Decoded(hdr, spec, value & (1 << bits) - 1 if bits else 0, bits,
                   body[:hdr.payload_bytes], len(words))


def message_problems(flits: Sequence[Any], width: int) -> list[tuple[str, str]]:
    """``(field, what is wrong)`` for every way the message's flits break the specification:
    a length (``msg_len``, ``payload_bytes``) the flits do not match, an unregistered
    ``msg_type``, metadata not where the type's format puts it, non-zero bits around it, a
    field value its format does not allow. Empty for a good message."""
    words = _words(flits)
    nh = header_flits(width)
    if len(words) < nh:
        return [("msg_len", f"the message ends after {len(words)} flits, inside its {nh}-flit "
                            f"header")]
    hdr = NocHeader.unpack(words, width)
    found = []
    if hdr.msg_len != len(words) - 1:
        found.append(("msg_len", f"says {hdr.msg_len} flits after the first; the message has "
                                 f"{len(words) - 1}"))
    spec = message_spec(hdr.msg_type)
    if spec is None and hdr.msg_type != UNTYPED:
        found.append(("msg_type", f"{hdr.msg_type} is not a registered message type"))
    if spec is not None:
        want = spec.meta_flits(width)
        if hdr.metadata_flits != want:
            what = spec.meta.name if spec.meta is not None else "no metadata"
            found.append(("metadata_flits", f"is {hdr.metadata_flits}; "
                                            f"{msg_type_name(hdr.msg_type)} carries {what}, "
                                            f"{want} flits at {width} bits"))
        elif spec.meta is not None:
            value, bits, area = _meta_area(words, width, hdr, spec)
            if value >> bits:
                found.append((spec.meta.name, f"bits {bits}..{area - 1} of the metadata area "
                                              f"are reserved, must be zero, hold "
                                              f"{value >> bits:#x}"))
            found += [(f"{spec.meta.name}.{name}", text)
                      for name, text in spec.meta.problems(value & (1 << bits) - 1)]
    body = len(words) - nh - hdr.metadata_flits
    need = -(-max(hdr.payload_bytes - head_bytes(width, hdr.msg_type), 0) // (width // 8))
    if body != need:
        found.append(("payload_bytes", f"{hdr.payload_bytes} bytes take {need} flits at "
                                       f"{width} bits; the message has {body} after its header "
                                       f"and metadata"))
    return found


def messages_markdown(modules: Sequence[str] = ()) -> str:
    """``docs/messages.md``: the NoC header, every message type registered once ``modules``
    are imported (by name: the NoC knows no package above it, the caller names those that
    define messages) and every metadata format, generated from the specification."""
    for name in modules:
        importlib.import_module(name)
    specs = message_specs()
    out = [
        "# NoC messages",
        "",
        "<!-- Generated from the message specification (apiary/noc/spec.py) by",
        f"     python -m apiary.noc.spec {' '.join(modules)} > docs/messages.md",
        "     tests/noc/test_spec.py fails when this page is out of date. -->",
        "",
        "Every message on the NoC is a header, metadata and a payload. This page is generated",
        "from the one specification the hardware layouts, the scapy dissectors of NoC traces and",
        "the simulation-time checkers come from ([enzian.md](enzian.md) says how to use them).",
        "Fields are listed most significant first; `bits` are positions in the header or in the",
        "metadata's value. From 256 bits up the header flit's low bits (128 at 256 bits, 384 at",
        "512) are spare: a type's metadata rides there when it fits (`metadata flits` 0), in",
        "whole flits after the header otherwise, and a type marked *head* also carries its first",
        "payload bytes there, in the spare lanes right below the header's fields that its",
        "metadata leaves (`head bytes`); its payload flits carry the rest.",
        "",
        "## The NoC header",
        "",
        "Two 64-bit words at every width: two flits at 64 bits, one above (the top 128 bits of",
        "the flit; at 512 bits each position below plus 384):",
        "",
        noc_header(64).markdown(),
        "",
        "## Message types",
        "",
        "| type | name | metadata | metadata flits (64/128/256/512) | head bytes (256/512) "
        "| payload |",
        "|---|---|---|---|---|---|",
    ]
    for value, spec in specs.items():
        meta = f"[`{spec.meta.name}`](#{spec.meta.name})" if spec.meta else "none"
        counts = "/".join(str(spec.meta_flits(w)) for w in (64, 128, 256, 512))
        heads = "/".join(str(spec.head_bytes(w)) for w in (256, 512))
        out.append(f"| {value} | `{msg_type_name(value)}` | {meta} | {counts} | {heads} | "
                   f"{spec.payload or 'none'} |")
    formats: dict[str, Format] = {}
    for spec in specs.values():
        if spec.meta is not None:
            formats.setdefault(spec.meta.name, spec.meta)
    out += ["", "## Metadata formats"]
    for name, fmt in formats.items():
        out += ["", f"### {name}", "", f"{fmt.doc} {fmt.size} bits.".strip(), "",
                fmt.markdown()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":      # run as a script, this file is not the registry's module
    import sys
    print(importlib.import_module("apiary.noc.spec").messages_markdown(sys.argv[1:]), end="")
