"""UDP RX and TX on their own, at 64 and 512 bits, with random gaps and back-pressure:
datagrams and checksums checked with scapy, every drop reason counted, and the pair in
loopback."""

import pytest
from scapy.layers.inet import IP, UDP

from apiary.stream.checksum import ones_complement_sum
from beehive.proto.addresses import ipv4_to_int
from beehive.proto.messages import MsgType
from beehive.proto.udp import UdpRxTile, UdpTxTile
from tilebench import (IPV4, PEER_IP, SEEDS, WIDTHS, assert_each_dropped_once, bad_then_good,
                       dropped, make_tile, run)

ECHO_HOP, MEM_HOP, IP_TX_HOP = (2, 2), (3, 2), (1, 0)
RX_META = {"peer_ip": ipv4_to_int(PEER_IP), "local_ip": ipv4_to_int(IPV4), "protocol": 17}


def rx_tile(width):
    return make_tile(UdpRxTile, width, {7: ECHO_HOP, 7777: MEM_HOP})


def datagram(payload, sport=4000, dport=7, src=PEER_IP, dst=IPV4, **udp):
    """What IPv4 RX sends UDP RX: the UDP datagram, its checksum computed over the pseudo-header
    of ``src`` and ``dst``."""
    raw = bytes(IP(src=src, dst=dst) / UDP(sport=sport, dport=dport, **udp) / payload)[20:]
    return raw, RX_META, MsgType.IP_RX_DATAGRAM


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_rx_checks_strips_and_forwards_by_port(width, seed):
    """Payload to the application on the destination port, ports and the payload's sum in the
    metadata; a zero checksum ("none") is accepted."""
    inputs = [datagram(b"hello"), datagram(b"", dport=7777), datagram(bytes(range(256)) * 5),
              datagram(b"no checksum", chksum=0), datagram(b"odd!" * 33 + b"z", sport=65535)]
    got = run(rx_tile(width), width, inputs, len(inputs), seed=seed)
    for (raw, _, _), msg in zip(inputs, got.out):
        udp = UDP(raw)
        assert msg.header.msg_type == MsgType.UDP_RX_SEGMENT.value
        assert (msg.header.dst_x, msg.header.dst_y) == (ECHO_HOP if udp.dport == 7 else MEM_HOP)
        assert msg.payload == raw[8:]
        assert (msg.meta["peer_port"], msg.meta["local_port"]) == (udp.sport, udp.dport)
        assert msg.meta["l4_sum_valid"] == 1
        assert msg.meta["l4_sum"] == ones_complement_sum(raw[8:])
        assert msg.meta["peer_ip"] == RX_META["peer_ip"]
    assert got.counters["forwarded"] == len(inputs) and not dropped(got.counters)


@pytest.mark.parametrize("width", WIDTHS)
def test_rx_drops_and_counts_each_bad_datagram(width):
    good = datagram(b"good")
    raw = bytes(IP(src=PEER_IP, dst=IPV4) / UDP(sport=1, dport=7) / b"checked")[20:]
    bad = {
        "bad_checksum": (raw[:6] + bytes([raw[6] ^ 0x10, raw[7]]) + raw[8:], RX_META,
                         MsgType.IP_RX_DATAGRAM),
        "overflow": datagram(b"o" * 1480),
        # The checksum is checked first: these two say "no checksum" (0) to get past it.
        "truncated": (raw[:6] + b"\0", RX_META, MsgType.IP_RX_DATAGRAM),
        "bad_length": datagram(b"short", len=20, chksum=0),
        "no_route": datagram(b"nobody listens", dport=9),
    }
    inputs = bad_then_good(bad, good)
    got = run(rx_tile(width), width, inputs, len(bad))
    assert [m.payload for m in got.out] == [b"good"] * len(bad)
    assert_each_dropped_once(got, bad, inputs)


def segment(payload, sport=7, dport=4000, local=IPV4, peer=PEER_IP, with_sum=True):
    """What an application sends UDP TX: the payload, its sum if it knows it."""
    meta = {"local_ip": ipv4_to_int(local), "peer_ip": ipv4_to_int(peer), "local_port": sport,
            "peer_port": dport}
    if with_sum:
        meta.update(l4_sum=ones_complement_sum(payload), l4_sum_valid=1)
    return payload, meta, MsgType.UDP_TX_SEGMENT


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_tx_builds_header_and_checksum_from_the_metadata(width, seed):
    """The checksum comes from the pseudo-header, the header and ``l4_sum``, without a pass over
    the payload; without ``l4_sum_valid`` it is 0 ("none")."""
    messages = [segment(b"reply"), segment(b""), segment(bytes(range(256)) * 5, dport=1),
                segment(b"no sum", with_sum=False), segment(b"\xff\xff" * 10)]
    got = run(make_tile(UdpTxTile, width, {None: IP_TX_HOP}), width, messages, len(messages),
              seed=seed)
    for (payload, meta, _), msg in zip(messages, got.out):
        assert msg.header.msg_type == MsgType.IP_TX_DATAGRAM.value
        assert (msg.header.dst_x, msg.header.dst_y) == IP_TX_HOP
        assert msg.meta["protocol"] == 17
        udp = UDP(sport=meta["local_port"], dport=meta["peer_port"]) / payload
        if meta.get("l4_sum_valid"):
            want = bytes(IP(src=IPV4, dst=PEER_IP) / udp)[20:]    # scapy's checksum
        else:
            want = bytes(UDP(sport=meta["local_port"], dport=meta["peer_port"], chksum=0)
                         / payload)
        assert msg.payload == want
    assert got.counters == {"forwarded": len(messages), "no_route": 0}


@pytest.mark.parametrize("width", WIDTHS)
def test_tx_then_rx_gives_the_payload_back(width):
    """UDP TX's datagram passes UDP RX's checksum check and comes back with its ports."""
    messages = [segment(b"round trip" * 9, sport=4000, dport=7),
                segment(b"to memory", sport=4001, dport=7777)]
    sent = run(make_tile(UdpTxTile, width, {None: IP_TX_HOP}), width, messages, 2).out
    back = run(rx_tile(width), width,
               [(m.payload, RX_META, MsgType.IP_RX_DATAGRAM) for m in sent], 2).out
    assert [m.payload for m in back] == [p for p, _, _ in messages]
    assert [(m.meta["peer_port"], m.meta["local_port"]) for m in back] == [(4000, 7),
                                                                           (4001, 7777)]
