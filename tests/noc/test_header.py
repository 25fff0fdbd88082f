"""The MSB-first header table, the NoC header's bit positions, and message framing in Python."""

import random
import struct

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator
from scapy.layers.inet import UDP

from apiary.stream.header import Header
from apiary.noc import Message, NocHeader, header_flits, noc_header, routing_header, field_location
from apiary.noc.header import head_lanes, spare_bytes
from apiary.stream.layout import check_width


UDP_HEADER = Header("udp", [("src_port", 16), ("dst_port", 16), ("length", 16), ("checksum", 16)])


def test_header_bytes_match_scapy():
    raw = bytes(UDP(sport=0x1234, dport=7, len=0x0abc, chksum=0xbeef))
    assert UDP_HEADER.to_bytes(src_port=0x1234, dst_port=7, length=0x0abc, checksum=0xbeef) == raw
    assert UDP_HEADER.from_bytes(raw) == {"src_port": 0x1234, "dst_port": 7,
                                          "length": 0x0abc, "checksum": 0xbeef}


def test_byte_order_exhaustive_per_field():
    # Every bit of every field lands where network byte order puts it, and nowhere else.
    fields = [("a", 3), ("b", 13), ("_pad", 4), ("c", 12), ("d", 32)]
    hdr = Header("t", fields)
    assert hdr.bits == hdr.size == 64
    for name, width in fields:
        if name.startswith("_"):
            continue
        for bit in range(width):
            raw = int.from_bytes(hdr.to_bytes({name: 1 << bit}), "big")
            assert raw == 1 << (hdr.offset(name) + bit)
            assert hdr.unpack(raw) == {n: (1 << bit if n == name else 0) for n in hdr.names}
    assert [hdr.offset(n) for n in hdr.names] == [61, 48, 32, 0]


def test_layout_view_agrees_with_pack():
    hdr = noc_header(512)
    sig = Signal(hdr.layout())
    values = {n: random.Random(n).getrandbits(hdr.width(n)) for n in hdr.names}

    async def tb(ctx):
        ctx.set(sig.as_value(), hdr.pack(values))
        for n, v in values.items():
            assert ctx.get(getattr(sig, n)) == v, n

    sim = Simulator(Module())
    sim.add_testbench(tb)
    sim.run()


def test_beehive_bit_positions_at_512():
    # beehive_noc_hdr_flit, MSB first: dst_chip [511:498] ... metadata_flits [413:406]; its
    # packet id and timestamp are not carried, the payload length follows.
    hdr = noc_header(512)
    expected = {
        "dst_chip": 498, "dst_x": 490, "dst_y": 482, "dst_fbits": 478, "msg_len": 456,
        "msg_type": 448, "src_chip": 434, "src_x": 426, "src_y": 418, "src_fbits": 414,
        "metadata_flits": 406, "payload_bytes": 384,
    }
    assert {n: hdr.offset(n) for n in expected} == expected
    assert hdr.width("msg_len") == 22 and hdr.bits == 128
    assert spare_bytes(512) == 48 and spare_bytes(256) == 16 and spare_bytes(128) == 0


@pytest.mark.parametrize("width", [256, 512])
def test_head_payload_bytes_round_trip(width):
    """A message's first payload bytes may ride in the header flit's spare lanes, right below
    the header's fields: fewer payload flits, the same message back."""
    rng = random.Random(width)
    room = spare_bytes(width)
    for _ in range(100):
        head = rng.randrange(room + 1)
        msg = Message(NocHeader(dst_x=5, msg_type=9), [],
                      rng.randbytes(rng.randrange(0, 200)))
        flits = msg.flits(width, head)
        body = -(-max(len(msg.payload) - head, 0) // (width // 8))
        assert len(flits) == 1 + body
        first = flits[0][0] >> (8 * head_lanes(width, head))
        assert first.to_bytes(width // 8, "little")[:min(head, len(msg.payload))] == \
            msg.payload[:head]
        assert Message.from_flits(flits, width, head).payload == msg.payload
    with pytest.raises(ValueError, match="room for at most 48 head payload bytes, not 49"):
        Message(payload=b"x").flits(512, 49)


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_routing_word_is_top_of_first_flit(width):
    h = NocHeader(dst_x=3, dst_y=200, dst_fbits=0b1010, msg_len=5, msg_type=13, src_x=1, src_y=2)
    first = h.pack(width)[0]
    routing = routing_header().unpack(first >> (width - 64))
    assert routing == {"dst_chip": 0, "dst_x": 3, "dst_y": 200, "dst_fbits": 0b1010,
                       "msg_len": 5, "msg_type": 13}
    assert field_location(width, "dst_x") == (0, width - 64 + 42)
    assert field_location(width, "src_x")[0] == (1 if width == 64 else 0)


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_message_round_trip(width):
    rng = random.Random(width)
    for _ in range(200):
        n = rng.randrange(0, 200)
        msg = Message(NocHeader(dst_x=rng.randrange(256), dst_y=rng.randrange(256),
                                msg_type=rng.randrange(256), src_x=rng.randrange(256)),
                      meta=[rng.getrandbits(width) for _ in range(rng.randrange(3))],
                      payload=bytes(rng.getrandbits(8) for _ in range(n)))
        flits = msg.flits(width)
        nb = width // 8
        assert len(flits) == header_flits(width) + len(msg.meta) + -(-n // nb)
        assert [last for _, last in flits] == [0] * (len(flits) - 1) + [1]
        back = Message.from_flits(flits, width)
        assert back.payload == msg.payload and back.meta == msg.meta
        assert back.header.msg_len == len(flits) - 1
        assert back.header.dst_x == msg.header.dst_x


def test_payload_byte_lanes():
    flits = Message(payload=bytes(range(1, 11))).flits(64)
    assert flits[2][0] == struct.unpack("<Q", bytes(range(1, 9)))[0]
    assert flits[3] == (0x0a09, 1)


def test_errors_are_sentences():
    with pytest.raises(ValueError, match="must be one of 64, 128, 256, 512 bits, not 100"):
        check_width(100)
    with pytest.raises(ValueError, match="has no field 'nope'"):
        UDP_HEADER.pack(nope=1)
    with pytest.raises(ValueError, match="length=70000 does not fit in 16 bits"):
        UDP_HEADER.pack(length=70000)
    with pytest.raises(ValueError, match="msg_len=0 but the message has 1 flits"):
        Message.from_flits([NocHeader().pack(512)[0], 0], 512)
    with pytest.raises(ValueError, match="needs 300 bits but its size is 256"):
        Header("big", [("a", 300)], size=256)
