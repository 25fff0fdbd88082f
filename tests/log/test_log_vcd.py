"""A log's entries as a VCD (beehive/log_vcd.py): every field a signal, valid while its message
passes, read back with pyvcd's own reader."""

import io

import pytest
from scapy.layers.inet import IP, UDP
from vcd.reader import TokenKind, tokenize

from apiary.noc.header import Message, NocHeader
from apiary.noc.spec import message_flits, message_spec
from apiary.tiles.log import LINKTYPE_NOC, LINKTYPE_RAW_IPV4, LogEntry
from apiary.tiles.raw_port import message_frame
from beehive.log_vcd import write_log_vcd
from beehive.proto.messages import MsgType

CLOCK = 125e6           # 8,000 ps a cycle


def datagram_entry(width, cycle, sport, snap=256):
    """An entry for an IPv4 datagram as Ethernet RX hands it to IPv4 RX (with its metadata)."""
    payload = bytes(IP(src="10.0.0.1", dst="10.0.0.2", ttl=9) / UDP(sport=sport, dport=7)
                    / b"abcdefgh")
    spec = message_spec(MsgType.IP_RX_DATAGRAM.value)
    value = spec.meta.pack({"peer_mac": 0x020000000001, "ethertype": 0x0800})
    flits = spec.meta_flits(width)
    meta = [value >> (width * k) & (1 << width) - 1 for k in range(flits)]
    msg = Message(NocHeader(dst_x=1, dst_y=0, src_x=0, msg_type=MsgType.IP_RX_DATAGRAM.value),
                  meta=meta, payload=payload)
    words = message_flits(msg, width)
    if not flits:                             # (at 512 bits the metadata rides in the header)
        words[0] = (words[0][0] | value, words[0][1])
    frame = message_frame(words, width)
    return LogEntry(cycle=cycle, payload_bytes=len(payload), flits=len(words),
                    span=len(words) - 1, msg_type=MsgType.IP_RX_DATAGRAM.value,
                    snap=(frame + bytes(snap))[:snap])


def read_vcd(text):
    """``({reference: id}, {id: [(time, value)]})`` of a VCD."""
    names, changes, scope, now = {}, {}, [], 0
    for token in tokenize(io.BytesIO(text.encode())):
        if token.kind is TokenKind.SCOPE:
            scope.append(token.scope.ident)
        elif token.kind is TokenKind.UPSCOPE:
            scope.pop()
        elif token.kind is TokenKind.VAR:
            names[".".join([*scope, token.var.reference])] = token.var.id_code
        elif token.kind is TokenKind.CHANGE_TIME:
            now = token.time_change
        elif token.kind in (TokenKind.CHANGE_SCALAR, TokenKind.CHANGE_VECTOR):
            value = token.data.value
            value = int(value) if value in ("0", "1") else value      # (scalars are text)
            changes.setdefault(token.data.id_code, []).append((now, value))
    return names, changes


def value_at(names, changes, name, time):
    found = None
    for t, v in changes.get(names[name], []):
        if t <= time:
            found = v
    return found


@pytest.mark.parametrize("width", [64, 512])
def test_every_field_is_a_signal_while_its_message_passes(width):
    entries = [datagram_entry(width, 100, 5000), datagram_entry(width, 140, 5001)]
    out = io.StringIO()
    trace = write_log_vcd(out, entries, width, LINKTYPE_RAW_IPV4, CLOCK, tile="log_in")
    names, changes = read_vcd(out.getvalue())
    at = lambda name, cycle: value_at(names, changes, f"log_in.{name}", cycle * 8000)  # noqa: E731

    first, second = entries
    assert at("message", 99) == 0 and at("message", 100) == 1
    assert at("message", 100 + first.span) == 1 and at("message", 101 + first.span) == 0
    assert at("entry", 100) == 0 and at("entry", 140) == 1
    assert at("flits", 100) == first.flits and at("payload_bytes", 100) == first.payload_bytes
    assert at("msg_type", 140) == MsgType.IP_RX_DATAGRAM.value
    # The NoC header, the metadata's fields by name, the packet's addresses and ports.
    assert at("noc.dst_x", 100) == 1 and at("noc.msg_type", 100) == MsgType.IP_RX_DATAGRAM.value
    assert at("noc.payload_bytes", 100) == first.payload_bytes
    assert at("meta.ip_meta.ethertype", 100) == 0x0800
    assert at("meta.ip_meta.peer_mac", 100) == 0x020000000001
    assert at("ip.src", 100) == 0x0A000001 and at("ip.dst", 100) == 0x0A000002
    assert at("ip.ttl", 100) == 9 and at("ip.proto", 100) == 17
    assert at("l4.sport", 100) == 5000 and at("l4.sport", 140) == 5001
    assert at("l4.dport", 140) == 7
    # Between messages every field is x; the message line is 0.
    assert at("l4.sport", 120) == "x" and at("noc.dst_x", 120) == "x"
    assert ("l4", "seq") in trace.signals and at("l4.seq", 100) == "x"   # (UDP has none)
    assert not any(n.startswith("log_in.eth.") for n in names)


def test_a_short_snapshot_leaves_what_it_did_not_hold_x():
    width = 64
    whole = datagram_entry(width, 10, 6000)
    short = LogEntry(whole.cycle, whole.payload_bytes, whole.flits, whole.span, whole.msg_type,
                     whole.snap[:16])           # the two header flits only
    out = io.StringIO()
    write_log_vcd(out, [short], width, LINKTYPE_NOC, CLOCK)
    names, changes = read_vcd(out.getvalue())
    at = lambda name: value_at(names, changes, f"log.{name}", 10 * 8000)  # noqa: E731
    assert at("message") == 1 and at("flits") == whole.flits
    assert at("noc.dst_x") == 1 and at("noc.msg_type") == MsgType.IP_RX_DATAGRAM.value
    assert not any(n.startswith("log.meta") or n.startswith("log.ip") for n in names)
