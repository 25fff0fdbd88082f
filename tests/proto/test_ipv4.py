"""IPv4 RX and TX on their own, at 64 and 512 bits, with random gaps and back-pressure:
datagrams checked with scapy, every drop reason counted, and the pair in loopback."""

import pytest
from scapy.layers.inet import ICMP, IP, UDP

from beehive.proto.addresses import int_to_ipv4, ipv4_to_int
from beehive.proto.ipv4 import Ipv4RxNoOptionsTile, Ipv4RxTile, Ipv4TxTile
from beehive.proto.messages import MsgType
from tilebench import (IPV4, PEER_IP, SEEDS, WIDTHS, assert_each_dropped_once, bad_then_good,
                       dropped, make_tile, run)

UDP_HOP, ICMP_HOP, ETH_HOP = (2, 1), (1, 2), (0, 1)


def rx_tile(width, cls=Ipv4RxTile):
    return make_tile(cls, width, {17: UDP_HOP, 1: ICMP_HOP})


def frame(datagram, pad=0):
    """What Ethernet RX sends IPv4 RX: the datagram, maybe with Ethernet padding."""
    return bytes(datagram) + b"\0" * pad, {"ethertype": 0x0800}, MsgType.ETH_RX_FRAME


def udp(payload=b"data", **ip):
    return IP(src=PEER_IP, dst=IPV4, **ip) / UDP(sport=5, dport=7) / payload


@pytest.mark.parametrize("cls", [Ipv4RxTile, Ipv4RxNoOptionsTile])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_rx_strips_the_header_and_forwards_by_protocol(width, seed, cls):
    """Header (options included, where supported) stripped, padding trimmed, addresses and
    protocol in the metadata, UDP and ICMP to their tiles."""
    datagrams = [frame(udp(b"x" * 18), pad=4), frame(IP(src=PEER_IP, dst=IPV4) / ICMP() / b"ping"),
                 frame(udp(b"opt" * 40, options=[b"\x94\x04\x00\x00"])),      # router alert
                 frame(udp(b"")), frame(udp(bytes(range(256)) * 4))]
    if cls is Ipv4RxNoOptionsTile:
        del datagrams[2]
    got = run(rx_tile(width, cls), width, datagrams, len(datagrams), seed=seed)
    for (raw, _, _), msg in zip(datagrams, got.out):
        ip = IP(raw)
        assert msg.header.msg_type == MsgType.IP_RX_DATAGRAM.value
        assert (msg.header.dst_x, msg.header.dst_y) == (UDP_HOP if ip.proto == 17 else ICMP_HOP)
        assert msg.payload == raw[ip.ihl * 4:ip.len]
        assert (msg.meta["peer_ip"], msg.meta["local_ip"], msg.meta["protocol"]) == \
            (ipv4_to_int(PEER_IP), ipv4_to_int(IPV4), ip.proto)
        assert msg.meta["ethertype"] == 0x0800          # what came in is kept
    assert got.counters["forwarded"] == len(datagrams) and not dropped(got.counters)


def corrupt_checksum(datagram):
    raw = bytearray(bytes(datagram))
    raw[10] ^= 0x01
    return bytes(raw)


@pytest.mark.parametrize("cls", [Ipv4RxTile, Ipv4RxNoOptionsTile])
@pytest.mark.parametrize("width", WIDTHS)
def test_rx_drops_and_counts_each_bad_datagram(width, cls):
    """Each bad datagram is dropped and counted once, and the good one after it goes through;
    without options support, a datagram with options is one of them."""
    good = frame(udp(b"good"))
    whole = bytes(udp(b"x" * 40))
    bad = {
        "truncated": frame(whole[:16]),
        "bad_version": frame(bytes(udp(version=6))),
        "bad_header_length": frame(bytes(udp(ihl=4))),
        "bad_checksum": frame(corrupt_checksum(udp())),
        "bad_length": frame(whole[:40]),                 # total length says 68
        "fragment": frame(bytes(udp(flags="MF"))),
        "ttl_expired": frame(bytes(udp(ttl=0))),
        "not_for_us": frame(bytes(IP(src=PEER_IP, dst="10.0.0.77") / UDP() / b"x")),
        "no_route": frame(bytes(IP(src=PEER_IP, dst=IPV4, proto=47) / b"gre")),
    }
    if cls is Ipv4RxNoOptionsTile:
        bad["options"] = frame(bytes(udp(b"opt", options=[b"\x94\x04\x00\x00"])))
    inputs = bad_then_good(bad, good)
    got = run(rx_tile(width, cls), width, inputs, len(bad))
    assert [m.payload for m in got.out] == [bytes(udp(b"good"))[20:]] * len(bad)
    assert_each_dropped_once(got, bad, inputs)


def tx_message(payload, protocol=17, peer=PEER_IP, local=IPV4):
    meta = {"peer_ip": ipv4_to_int(peer), "local_ip": ipv4_to_int(local), "protocol": protocol}
    return payload, meta, MsgType.IP_TX_DATAGRAM


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_tx_puts_a_valid_header_in_front(width, seed):
    messages = [tx_message(b"u" * 9), tx_message(b"i" * 64, protocol=1), tx_message(b""),
                tx_message(bytes(range(200)) * 7, peer="192.168.1.20")]
    got = run(make_tile(Ipv4TxTile, width, {None: ETH_HOP}), width, messages, len(messages),
              seed=seed)
    for (payload, meta, _), msg in zip(messages, got.out):
        assert msg.header.msg_type == MsgType.ETH_TX_FRAME.value
        assert (msg.header.dst_x, msg.header.dst_y) == ETH_HOP
        assert msg.meta["ethertype"] == 0x0800
        expect = IP(src=IPV4, dst=int_to_ipv4(meta["peer_ip"]), proto=meta["protocol"],
                    flags="DF", ttl=64, id=0) / payload
        assert msg.payload == bytes(expect)                  # scapy fills in the checksum
    assert got.counters == {"forwarded": len(messages), "no_route": 0}


@pytest.mark.parametrize("width", WIDTHS)
def test_tx_then_rx_gives_the_payload_back(width):
    """A datagram IPv4 TX builds to the design's own address comes back through IPv4 RX."""
    messages = [tx_message(b"loop" * 30, peer=IPV4, local=PEER_IP),
                tx_message(b"icmp", protocol=1, peer=IPV4, local=PEER_IP)]
    sent = run(make_tile(Ipv4TxTile, width, {None: ETH_HOP}), width, messages, 2).out
    back = run(rx_tile(width), width, [frame(m.payload) for m in sent], 2).out
    assert [m.payload for m in back] == [p for p, _, _ in messages]
    assert [m.meta["protocol"] for m in back] == [17, 1]
    assert all(m.meta["peer_ip"] == ipv4_to_int(PEER_IP) for m in back)
