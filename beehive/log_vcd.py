"""A log tile's entries as a waveform: a VCD file that GTKWave, PulseView and Surfer open.

``apiary log HOST --vcd FILE`` writes it (:mod:`beehive.log_cli`); :func:`write_log_vcd` does
the work, from entries read off a :class:`~apiary.tiles.log.LogTile` (or made in a test). Time
is the design's cycles at the given clock (one cycle = ``1e12 / clock_hz`` ps; time 0 is the
design's reset), and every field the entry holds or its snapshot shows is a signal of its own,
valid while the message passes (``message`` high, from its first flit to its last: ``span + 1``
cycles) and ``x`` between messages:

=====================  =======================================================================
scope (``TILE.``...)   signals
=====================  =======================================================================
(the tile)             ``message`` (1 bit), ``entry`` (its index in the log), the entry's
                       ``msg_type``, ``payload_bytes``, ``flits``, ``span``
``noc``                every field of the NoC header (:func:`~apiary.noc.header.noc_header`),
                       from the snapshot: ``dst_x``, ``dst_y``, ``dst_fbits``, ``msg_len``, ...
``meta.FORMAT``        every field of the metadata format of the message's type
                       (:mod:`apiary.noc.spec`); a type without a format: ``meta.raw``, its
                       metadata flits as one number
``eth``, ``ip``,       with link type 1 (Ethernet) or 101 (IPv4), the packet's addresses and
``l4``                 ports: ``eth.dst``, ``eth.src``, ``eth.type``, ``ip.src``, ``ip.dst``,
                       ``ip.proto``, ``ip.len``, ``ip.ttl``, ``l4.sport``, ``l4.dport``, and
                       TCP's ``l4.seq``, ``l4.ack``, ``l4.flags``
=====================  =======================================================================

A field the snapshot did not hold (it keeps the message's first ``snap`` bytes) stays ``x``.
"""

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from apiary.noc.header import header_flits, noc_header
from apiary.noc.spec import message_spec
from apiary.tiles.log import LINKTYPE_ETHERNET, LINKTYPE_RAW_IPV4, LogEntry


__all__ = ["Trace", "log_trace", "write_log_vcd"]

#: Cycles the dump goes on after the last message ends.
_TAIL = 16
#: The entry's own fields, with their widths.
_ENTRY = (("msg_type", 8), ("payload_bytes", 16), ("flits", 16), ("span", 16))
#: The packet fields of link types 1 and 101: scope, name, width, and how scapy gives them.
_PACKET = (("eth", "dst", 48, "Ether", "dst"), ("eth", "src", 48, "Ether", "src"),
           ("eth", "type", 16, "Ether", "type"),
           ("ip", "src", 32, "IP", "src"), ("ip", "dst", 32, "IP", "dst"),
           ("ip", "proto", 8, "IP", "proto"), ("ip", "len", 16, "IP", "len"),
           ("ip", "ttl", 8, "IP", "ttl"),
           ("l4", "sport", 16, "L4", "sport"), ("l4", "dport", 16, "L4", "dport"),
           ("l4", "seq", 32, "TCP", "seq"), ("l4", "ack", 32, "TCP", "ack"),
           ("l4", "flags", 9, "TCP", "flags"))


@dataclass
class Trace:
    """The signals of a log as value changes: ``signals`` maps ``(scope, name)`` to its width;
    ``changes`` lists ``(cycle, scope, name, value)`` in cycle order, ``None`` for ``x``."""
    signals: dict[tuple[str, str], int]
    changes: list[tuple[int, str, str, int | None]]


def _packet_fields(payload: bytes, linktype: int) -> dict[tuple[str, str], int]:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    try:
        pkt = Ether(payload) if linktype == LINKTYPE_ETHERNET else IP(payload)
    except Exception:  # noqa: BLE001 -- bytes scapy cannot take apart show no packet fields
        return {}
    layers = {"Ether": Ether in pkt and pkt[Ether], "IP": IP in pkt and pkt[IP],
              "TCP": TCP in pkt and pkt[TCP],
              "L4": (UDP in pkt and pkt[UDP]) or (TCP in pkt and pkt[TCP])}
    found = {}
    for scope, name, _, layer, attr in _PACKET:
        value = getattr(layers[layer], attr, None) if layers[layer] else None
        if value is None:
            continue
        if isinstance(value, str):          # addresses: "02:00:..." or "10.0.0.1"
            value = int(value.replace(":", ""), 16) if ":" in value \
                else int(ipaddress.IPv4Address(value))
        found[(scope, name)] = int(value)
    return found


def _fields(entry: LogEntry, width: int, linktype: int) -> dict[tuple[str, str], int]:
    """Every field of ``entry`` its snapshot shows, by ``(scope, name)``."""
    fields = {("", name): getattr(entry, name) for name, _ in _ENTRY}
    decoded = entry.decoded(width)
    if decoded is None:
        return fields
    header = decoded.header
    for spec in noc_header(width).specs:
        fields[("noc", spec.name)] = int(getattr(header, spec.name))
    meta_end = (header_flits(width) + header.metadata_flits) * (width // 8)
    if meta_end <= len(entry.snap):
        if decoded.formatted and decoded.spec is not None and decoded.spec.meta is not None:
            fmt = decoded.spec.meta
            for name, value in fmt.unpack(decoded.meta).items():
                fields[(f"meta.{fmt.name}", name)] = int(value)
        elif decoded.meta_bits:
            fields[("meta", "raw")] = decoded.meta
    if linktype in (LINKTYPE_ETHERNET, LINKTYPE_RAW_IPV4) and decoded.payload:
        fields.update(_packet_fields(decoded.payload, linktype))
    return fields


def _widths(width: int, linktype: int) -> Iterator[tuple[tuple[str, str], int]]:
    yield ("", "message"), 1
    yield ("", "entry"), 32
    for name, bits in _ENTRY:
        yield ("", name), bits
    for spec in noc_header(width).specs:
        yield ("noc", spec.name), spec.width
    if linktype in (LINKTYPE_ETHERNET, LINKTYPE_RAW_IPV4):
        for scope, name, bits, layer, _ in _PACKET:
            if linktype == LINKTYPE_ETHERNET or layer != "Ether":
                yield (scope, name), bits


def log_trace(entries: Iterable[LogEntry], width: int, linktype: int) -> Trace:
    """The signals of a log's ``entries`` (oldest first, at NoC width ``width``; ``linktype``
    says what their payloads are): each entry's fields from its cycle to the end of its
    message, ``x`` after (unless the next message starts then)."""
    signals = dict(_widths(width, linktype))
    changes: list[tuple[int, str, str, int | None]] = []
    for index, entry in enumerate(entries):
        fields = _fields(entry, width, linktype)
        for key in fields:
            if key not in signals:            # a metadata format's field: as wide as it is
                signals[key] = _meta_width(entry, key)
        changes.append((entry.cycle, "", "message", 1))
        changes.append((entry.cycle, "", "entry", index))
        for key in signals:
            if key not in (("", "message"), ("", "entry")):
                changes.append((entry.cycle, *key, fields.get(key)))
        end = entry.cycle + entry.span + 1
        changes.append((end, "", "message", 0))
        changes.extend((end, *key, None) for key in signals if key != ("", "message"))
    changes.sort(key=lambda c: c[0])           # (stable: a message's start after the last end)
    return Trace(signals, changes)


def _meta_width(entry: LogEntry, key: tuple[str, str]) -> int:
    scope, name = key
    if name == "raw":
        return 8 * len(entry.snap)
    spec = message_spec(entry.msg_type)
    assert spec is not None and spec.meta is not None and scope == f"meta.{spec.meta.name}"
    return spec.meta.field(name).width


def write_log_vcd(out: TextIO, entries: Iterable[LogEntry], width: int, linktype: int,
                  clock_hz: float, *, tile: str = "log", comment: str = "") -> Trace:
    """Write the VCD of a log tile's ``entries`` (see the module docstring) to ``out``, time in
    picoseconds with a cycle at ``clock_hz``; returns the :class:`Trace` written."""
    from vcd import VCDWriter
    trace = log_trace(entries, width, linktype)
    period = 1e12 / clock_hz
    writer = VCDWriter(out, timescale="1 ps", date="", comment=comment, version="apiary log")
    variables: dict[tuple[str, str], Any] = {}
    for (scope, name), bits in trace.signals.items():
        where = f"{tile}.{scope}" if scope else tile
        variables[(scope, name)] = writer.register_var(
            where, name, "wire", size=bits, init=0 if name == "message" else None)
    last = 0
    for cycle, scope, name, value in trace.changes:
        writer.change(variables[(scope, name)], round(cycle * period),
                      "x" if value is None else value)
        last = cycle
    writer.close(round((last + _TAIL) * period))   # (a viewer shows the last message end)
    return trace
