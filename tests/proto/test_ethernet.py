"""Ethernet RX and TX on their own, at 64 and 512 bits, with random gaps and back-pressure:
frames in and out checked against scapy, every drop reason counted, and the pair in loopback."""

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from beehive.proto.addresses import mac_to_int
from beehive.proto.ethernet import EthernetRxTile, EthernetTxTile
from beehive.proto.messages import MsgType
from tilebench import (MAC, PEER_IP, PEER_MAC, SEEDS, WIDTHS, aborted_frame,
                       assert_each_dropped_once, bad_then_good, dropped, make_tile, run)

IP_HOP, ARP_HOP = (2, 1), (1, 2)


def rx_tile(width, **params):
    return make_tile(EthernetRxTile, width, {0x0800: IP_HOP, 0x0806: ARP_HOP}, **params)


def ipv4(payload=b"hello", dst=MAC, **ether):
    return bytes(Ether(dst=dst, src=PEER_MAC, **ether) / IP(src=PEER_IP, dst="10.0.0.2")
                 / UDP(sport=1234, dport=7) / payload)


def tagged(payload, vlan, prio):
    return bytes(Ether(dst=MAC, src=PEER_MAC) / Dot1Q(vlan=vlan, prio=prio)
                 / IP(src=PEER_IP, dst="10.0.0.2") / UDP(sport=99, dport=7) / payload)


def arp():
    return bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER_MAC)
                 / ARP(hwsrc=PEER_MAC, psrc=PEER_IP, pdst="10.0.0.2"))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_rx_forwards_by_ethertype_and_fills_the_metadata(width, seed):
    frames = [ipv4(b"x" * 30), arp(), tagged(b"tagged payload", 42, 5), ipv4(b"y" * 300),
              ipv4(b"", dst="ff:ff:ff:ff:ff:ff").ljust(60, b"\0")]
    got = run(rx_tile(width), width, frames, len(frames), seed=seed, frames_in=True)
    assert len(got.out) == len(frames)
    for frame, msg in zip(frames, got.out):
        eth = Ether(frame)
        vlan = Dot1Q in eth
        inner = eth[Dot1Q].type if vlan else eth.type
        assert msg.header.msg_type == MsgType.ETH_RX_FRAME.value
        assert (msg.header.dst_x, msg.header.dst_y) == (IP_HOP if inner == 0x0800 else ARP_HOP)
        assert msg.payload == frame[18 if vlan else 14:]         # padding included
        assert msg.meta["peer_mac"] == mac_to_int(PEER_MAC)
        assert msg.meta["ethertype"] == inner and msg.meta["vlan"] == vlan
        if vlan:
            tag = eth[Dot1Q]
            assert msg.meta["vlan_tci"] == tag.prio << 13 | tag.dei << 12 | tag.vlan
    assert got.counters["forwarded"] == len(frames) and not dropped(got.counters)


@pytest.mark.parametrize("width", WIDTHS)
def test_rx_drops_and_counts_each_bad_frame(width):
    """Each malformed frame is dropped under its own counter and the good frame after it still
    goes through; the counters add up to the frames received."""
    good = ipv4(b"good")
    bad = {
        "runt": bytes(Ether(dst=MAC, src=PEER_MAC))[:10],
        "not_for_us": ipv4(dst="02:00:00:00:00:99"),
        "no_route": bytes(Ether(dst=MAC, src=PEER_MAC, type=0x86DD) / (b"\0" * 50)),
        "oversized": ipv4(b"z" * 300),
        "bad_fcs": aborted_frame(ipv4(b"fcs"), width),
    }
    frames = bad_then_good(bad, good)
    got = run(rx_tile(width, max_frame=256), width, frames, len(bad), frames_in=True)
    assert [m.payload for m in got.out] == [good[14:]] * len(bad)
    assert_each_dropped_once(got, bad, frames)


def tx_message(payload, peer=PEER_MAC, ethertype=0x0800, vlan_tci=None):
    meta = {"peer_mac": mac_to_int(peer), "ethertype": ethertype}
    if vlan_tci is not None:
        meta.update(vlan=1, vlan_tci=vlan_tci)
    return payload, meta, MsgType.ETH_TX_FRAME


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_tx_builds_the_header_from_the_metadata(width, seed):
    messages = [tx_message(b"a" * 46), tx_message(b"arp" * 10, ethertype=0x0806),
                tx_message(b"q" * 100, vlan_tci=5 << 13 | 1 << 12 | 77), tx_message(b""),
                tx_message(bytes(range(256)) * 5)]
    got = run(make_tile(EthernetTxTile, width), width, messages, len(messages), seed=seed,
              frames_out=True)
    expected = []
    for payload, meta, _ in messages:
        eth = Ether(dst=PEER_MAC, src=MAC, type=0x8100 if meta.get("vlan") else meta["ethertype"])
        if meta.get("vlan"):
            tci = meta["vlan_tci"]
            eth = eth / Dot1Q(prio=tci >> 13, dei=tci >> 12 & 1, vlan=tci & 0xFFF,
                              type=meta["ethertype"])
        expected.append(bytes(eth) + payload)
    assert got.out == expected
    assert got.counters == {"forwarded": len(messages), "no_route": 0}


@pytest.mark.parametrize("width", WIDTHS)
def test_tx_then_rx_gives_the_payload_and_metadata_back(width):
    """A frame Ethernet TX builds for the design's own MAC comes back through Ethernet RX with
    the same payload, EtherType and tag, and the sender's MAC as the peer."""
    messages = [tx_message(b"loop" * 20, peer=MAC), tx_message(b"tag" * 7, peer=MAC,
                                                                vlan_tci=3 << 13 | 9),
                tx_message(b"arp!" * 8, peer=MAC, ethertype=0x0806)]
    frames = run(make_tile(EthernetTxTile, width), width, messages, len(messages),
                 frames_out=True).out
    back = run(rx_tile(width), width, frames, len(frames), frames_in=True).out
    assert [m.payload for m in back] == [p for p, _, _ in messages]
    for (_, meta, _), msg in zip(messages, back):
        assert msg.meta["peer_mac"] == mac_to_int(MAC)
        assert msg.meta["ethertype"] == meta["ethertype"]
        assert msg.meta["vlan"] == meta.get("vlan", 0)
        if meta.get("vlan"):                # without a tag, vlan_tci means nothing
            assert msg.meta["vlan_tci"] == meta["vlan_tci"]


def test_rx_takes_a_two_word_frame_every_two_cycles_at_512_bits():
    """Back-to-back 106-byte frames (2 words at 512 bits) leave Ethernet RX as 2-flit
    messages (37 of the 92 bytes in the header flit) without an idle cycle between them: the
    next frame's descriptor and strip count are taken in the cycle of each verdict."""
    from apiary.sim.core import frame_words
    from apiary.stream.testbench import simulate, transfers
    from beehive.proto.ethernet import EtherType
    from tilebench import IPV4, make_tile
    from harness.bench.echo import request

    tile = make_tile(EthernetRxTile, 512, {EtherType.IPV4.value: (1, 0)})
    frames = [request(64, k, MAC, IPV4) for k in range(8)]
    out = []

    async def drive(ctx):
        ctx.set(tile.noc_out.ready, 1)
        for f in frames:
            for data, nbytes, last in frame_words(f, 64):
                ctx.set(tile.mac_rx.payload, {"data": data, "nbytes": nbytes, "last": last})
                ctx.set(tile.mac_rx.valid, 1)
                await ctx.tick()
        ctx.set(tile.mac_rx.valid, 0)
        await ctx.tick().repeat(30)

    simulate(tile, drive, background=[transfers(tile.noc_out, out)], timeout=200)
    assert len(out) == 2 * len(frames)
    assert out == list(range(out[0], out[0] + len(out))), "an idle cycle between messages"
