"""The ARP tile on its own, at 64 and 512 bits, with random gaps and back-pressure: replies
checked with scapy, every drop reason counted."""

import pytest
from scapy.layers.l2 import ARP

from beehive.proto.addresses import mac_to_int
from beehive.proto.arp import ArpTile
from beehive.proto.messages import MsgType
from tilebench import (IPV4, MAC, PEER_IP, PEER_MAC, SEEDS, WIDTHS, assert_each_dropped_once,
                       bad_then_good, dropped, make_tile, run)

TX_HOP = (0, 1)


def request(pdst=IPV4, **fields):
    return bytes(ARP(op=1, hwsrc=PEER_MAC, psrc=PEER_IP, pdst=pdst, **fields))


def frame_message(payload, vlan_tci=None):
    meta = {"peer_mac": mac_to_int("ff:ff:ff:ff:ff:ff"), "ethertype": 0x0806}
    if vlan_tci is not None:
        meta.update(vlan=1, vlan_tci=vlan_tci)
    return payload, meta, MsgType.ETH_RX_FRAME


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_answers_requests_for_our_address(width, seed):
    """Each request for the design's address gets a 28-byte reply to the requester, tag kept
    (Ethernet padding after the request is ignored)."""
    requests = [frame_message(request()), frame_message(request() + b"\0" * 18),
                frame_message(request(), vlan_tci=7)]
    got = run(make_tile(ArpTile, width, {None: TX_HOP}), width, requests, len(requests),
              seed=seed)
    for (_, meta, _), msg in zip(requests, got.out):
        assert msg.header.msg_type == MsgType.ETH_TX_FRAME.value
        assert (msg.header.dst_x, msg.header.dst_y) == TX_HOP
        assert msg.payload == bytes(ARP(op=2, hwsrc=MAC, psrc=IPV4, hwdst=PEER_MAC, pdst=PEER_IP))
        assert msg.meta["peer_mac"] == mac_to_int(PEER_MAC)
        assert msg.meta["ethertype"] == 0x0806
        assert (msg.meta["vlan"], msg.meta.get("vlan_tci") if meta.get("vlan") else 0) == \
            (meta.get("vlan", 0), meta.get("vlan_tci", 0))
    assert got.counters["forwarded"] == len(requests) and not dropped(got.counters)


@pytest.mark.parametrize("width", WIDTHS)
def test_drops_and_counts_what_it_does_not_answer(width):
    good = frame_message(request())
    bad = {
        "truncated": frame_message(request()[:27]),
        "unsupported": frame_message(request(hwtype=6)),
        "not_request": frame_message(bytes(ARP(op=2, hwsrc=PEER_MAC, psrc=PEER_IP,
                                               pdst=IPV4))),
        "not_for_us": frame_message(request(pdst="10.0.0.9")),
    }
    inputs = bad_then_good(bad, good)
    got = run(make_tile(ArpTile, width, {None: TX_HOP}), width, inputs, len(bad))
    assert len(got.out) == len(bad)
    assert_each_dropped_once(got, bad, inputs)


def test_without_a_next_hop_every_request_is_counted_no_route():
    got = run(make_tile(ArpTile, 64), 64, [frame_message(request())] * 3, 0)
    assert got.counters["no_route"] == 3 and got.counters["forwarded"] == 0
