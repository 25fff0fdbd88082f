"""The ICMP echo tile on its own, at 64 and 512 bits, with random gaps and back-pressure:
replies checked with scapy (checksum included), every drop reason counted."""

import pytest
from scapy.layers.inet import ICMP

from beehive.proto.addresses import ipv4_to_int
from beehive.proto.icmp import IcmpEchoTile
from beehive.proto.messages import MsgType
from tilebench import (IPV4, PEER_IP, SEEDS, WIDTHS, assert_each_dropped_once, bad_then_good,
                       dropped, make_tile, run)

IP_TX_HOP = (1, 0)
META = {"peer_ip": ipv4_to_int(PEER_IP), "local_ip": ipv4_to_int(IPV4), "protocol": 1}


def datagram(icmp):
    return bytes(icmp), META, MsgType.IP_RX_DATAGRAM


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_echo_requests_get_replies(width, seed):
    requests = [ICMP(id=7, seq=1) / b"abcdefgh", ICMP(id=0xFFFF, seq=0xFFFF) / b"",
                ICMP(id=1, seq=2) / (bytes(range(256)) * 4), ICMP(id=9, seq=3) / (b"\xff" * 57)]
    got = run(make_tile(IcmpEchoTile, width, {None: IP_TX_HOP}), width,
              [datagram(r) for r in requests], len(requests), seed=seed)
    for request, msg in zip(requests, got.out):
        assert msg.header.msg_type == MsgType.IP_TX_DATAGRAM.value
        assert (msg.header.dst_x, msg.header.dst_y) == IP_TX_HOP
        reply = ICMP(type=0, id=request.id, seq=request.seq) / bytes(request.payload)
        assert msg.payload == bytes(reply)                   # scapy computes the checksum
        assert msg.meta == {**msg.meta, **META}              # back to where it came from
    assert got.counters["forwarded"] == len(requests) and not dropped(got.counters)


def with_bad_checksum(icmp):
    raw = bytearray(bytes(icmp))
    raw[2] ^= 0x40
    return bytes(raw)


@pytest.mark.parametrize("width", WIDTHS)
def test_drops_and_counts_each_bad_message(width):
    good = datagram(ICMP(id=3, seq=4) / b"good")
    bad = {
        "bad_checksum": (with_bad_checksum(ICMP() / b"x"), META, MsgType.IP_RX_DATAGRAM),
        "overflow": datagram(ICMP() / (b"o" * 1500)),
        "truncated": (bytes(ICMP())[:6], META, MsgType.IP_RX_DATAGRAM),
        "not_echo_request": datagram(ICMP(type=13) / b"timestamp"),
    }
    inputs = bad_then_good(bad, good)
    got = run(make_tile(IcmpEchoTile, width, {None: IP_TX_HOP}), width, inputs, len(bad))
    assert [m.payload for m in got.out] == [bytes(ICMP(type=0, id=3, seq=4) / b"good")] * len(bad)
    assert_each_dropped_once(got, bad, inputs)
