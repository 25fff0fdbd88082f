"""VxlanEncapTile and VxlanDecapTile (beehive/nf/vxlan.py) alone at 64 and 512 bits with random
gaps and back-pressure, outputs compared with scapy's VXLAN encodings; malformed packets dropped
and counted with the next good one through; the peer table rewritten at random cycles while
packets flow (every packet wholly old entry or new); and an echo design reached through VXLAN
(tests/nf/nf_designs.py: second IPv4 and UDP RX behind the decap tile) on both back ends."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

from apiary.sim import open_sim
from beehive.nf.vxlan import VXLAN_PEER, VxlanDecapTile, VxlanEncapTile, vxlan_peer, \
    vxlan_source_port
from beehive.proto.addresses import ipv4_to_int, mac_to_int
from beehive.proto.messages import MsgType
from nf_designs import vxlan_design
from nfbench import IPV4, MAC, NEXT, PEER_MAC, SEEDS, WIDTHS, make_nf, run

VM, VM2, VM_IP = "52:54:00:00:00:09", "52:54:00:00:00:0a", "10.9.0.1"
VTEP, VTEP2, VTEP_MAC = "192.0.2.7", "192.0.2.8", "52:54:00:00:00:77"
PEERS = [vxlan_peer(42, VM, VTEP, VTEP_MAC), vxlan_peer(43, VM2, VTEP2, VTEP_MAC)]
TX, RX = MsgType.ETH_TX_FRAME, MsgType.UDP_RX_SEGMENT


def datagram(payload=b"hi", sport=7, dport=5555, dst=VM_IP):
    return IP(src=IPV4, dst=dst, flags="DF", id=0) / UDP(sport=sport, dport=dport) / payload


def tx_meta(peer_mac, dst=VM_IP, sport=7, dport=5555):
    return {"ethertype": 0x0800, "peer_mac": mac_to_int(peer_mac), "peer_ip": ipv4_to_int(dst),
            "local_port": sport, "peer_port": dport}


def encapsulated(dgram, meta, peer):
    """Scapy's RFC 7348 packet (without the outer Ethernet header, Ethernet TX's)."""
    sport = vxlan_source_port(meta["peer_ip"], meta["peer_port"], meta["local_port"])
    return bytes(IP(src=IPV4, dst=peer["vtep_ip"] and _ip(peer["vtep_ip"]), flags="DF", id=0,
                    ttl=64)
                 / UDP(sport=sport, dport=4789, chksum=0) / VXLAN(flags="Instance",
                                                                   vni=peer["vni"])
                 / Ether(dst=_mac(peer["peer_mac"]), src=MAC) / dgram)


def _ip(v):
    return ".".join(str(v >> s & 255) for s in (24, 16, 8, 0))


def _mac(v):
    return ":".join(f"{v >> s & 255:02x}" for s in range(40, -8, -8))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_encap_matches_scapy(width, seed):
    cases = [(datagram(), tx_meta(VM)), (datagram(bytes(range(256)) * 3, 9, 1), tx_meta(VM2,
             sport=9, dport=1)), (datagram(b"plain"), tx_meta(PEER_MAC)),
             (datagram(b"", 65535, 0), tx_meta(VM, sport=65535, dport=0))]
    inputs = [(bytes(d), meta, TX) for d, meta in cases]
    got = run(make_nf(VxlanEncapTile, width, rules=PEERS), width, inputs, len(inputs), seed=seed)
    by_mac = {p["peer_mac"]: p for p in PEERS}
    for (d, meta), m in zip(cases, got.out):
        peer = by_mac.get(meta["peer_mac"])
        if peer is None:
            assert m.payload == bytes(d) and m.meta["peer_mac"] == meta["peer_mac"]
        else:
            assert m.payload == encapsulated(d, meta, peer)
            assert m.meta["peer_mac"] == mac_to_int(VTEP_MAC) and m.meta["ethertype"] == 0x0800
    assert got.counters["encapsulated"] == 3 and got.counters["passed"] == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_encap_table_updates_mid_stream_never_mix(width):
    """The peer's VNI and VTEP change at random cycles: each packet carries one entry's VNI,
    address and checksum, never parts of two."""
    moved = vxlan_peer(77, VM, VTEP2, "52:54:00:00:00:78")
    writes = [(0, VXLAN_PEER.pack(moved)), (0, VXLAN_PEER.pack(PEERS[0]))]
    rng = random.Random(width)
    cases = [(datagram(bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 30, 200]))),
                       sport=k), tx_meta(VM, sport=k)) for k in range(40)]
    inputs = [(bytes(d), meta, TX) for d, meta in cases]
    got = run(make_nf(VxlanEncapTile, width, rules=PEERS), width, inputs, len(inputs),
              seed=width, writes=writes, write_prob=0.03)
    old = []
    for (d, meta), m in zip(cases, got.out):
        a, b = encapsulated(d, meta, PEERS[0]), encapsulated(d, meta, moved)
        assert (m.payload, m.meta["peer_mac"]) in ((a, mac_to_int(VTEP_MAC)),
                                                   (b, mac_to_int("52:54:00:00:00:78")))
        old.append(m.payload == a)
    assert got.writes > 5 and any(old) and not all(old)


def vxlan_in(vni=42, vtep=VTEP, dst=MAC, src=VM, payload=b"inner", tag=False, **vx):
    dgram = IP(src=VM_IP, dst=IPV4) / UDP(sport=5555, dport=7) / payload
    inner = Ether(dst=dst, src=src) / (Dot1Q(vlan=5) / dgram if tag else dgram)
    raw = bytes(VXLAN(flags=vx.pop("flags", "Instance"), vni=vni) / inner)
    return raw, {"peer_ip": ipv4_to_int(vtep), "protocol": 17}, RX


@pytest.mark.parametrize("width", WIDTHS)
def test_decap_strips_checks_and_counts(width):
    good = vxlan_in(payload=b"good")
    bad = {"truncated": (good[0][:20], good[1], RX),
           "bad_flags": vxlan_in(flags=0),
           "no_rule": vxlan_in(vni=43),                  # VNI 43 is VTEP2's, not VTEP's
           "not_for_us": vxlan_in(dst="02:00:00:00:00:99"),
           "no_route": (bytes(VXLAN(flags="Instance", vni=42) / Ether(dst=MAC, src=VM,
                                                                      type=0x86DD) / b"v6"),
                        good[1], RX)}
    tagged = vxlan_in(tag=True, payload=b"tagged")
    inputs = [item for b in bad.values() for item in (b, good)] + [tagged]
    tile = make_nf(VxlanDecapTile, width, rules=PEERS, routes={0x0800: NEXT})
    got = run(tile, width, inputs, len(bad) + 1)
    inner = bytes(IP(src=VM_IP, dst=IPV4) / UDP(sport=5555, dport=7) / b"good")
    assert [m.payload for m in got.out[:-1]] == [inner] * len(bad)
    assert got.out[-1].payload == bytes(IP(src=VM_IP, dst=IPV4) / UDP(sport=5555, dport=7)
                                        / b"tagged")
    assert got.out[-1].meta["vlan"] == 1 and got.out[-1].meta["vlan_tci"] == 5
    m = got.out[0]
    assert m.header.msg_type == MsgType.ETH_RX_FRAME.value
    assert m.meta["peer_mac"] == mac_to_int(VM) and m.meta["ethertype"] == 0x0800
    assert {k: v for k, v in got.counters.items() if v} == {
        **{r: 1 for r in bad}, "forwarded": len(bad) + 1, "decapsulated": len(bad) + 1}


# -- the whole design ------------------------------------------------------------------------

def client(i, payload):
    return (Ether(dst=MAC, src=VTEP_MAC) / IP(src=VTEP, dst=IPV4) / UDP(sport=50000 + i,
                                                                         dport=4789)
            / VXLAN(flags="Instance", vni=42) / Ether(dst=MAC, src=VM)
            / IP(src=VM_IP, dst=IPV4) / UDP(sport=4000 + i, dport=7) / payload)


def reply(request):
    dgram = datagram(bytes(request[UDP].payload.payload[UDP].payload), 7,
                     request[UDP].payload.payload[UDP].sport)
    meta = tx_meta(VM, sport=7, dport=dgram[UDP].dport)
    return bytes(Ether(dst=VTEP_MAC, src=MAC, type=0x0800)) + encapsulated(dgram, meta, PEERS[0])


def vxlan_echo(width, backend, payloads):
    design = vxlan_design(width, peers=PEERS)
    design.check()
    requests = [client(i, p) for i, p in enumerate(payloads)]
    unknown = client(97, b"unknown vni")
    unknown[VXLAN].vni = 1000
    with open_sim(design, backend, seed=4, stall=0.2) as sim:
        sim.send_many([unknown] + requests)
        sim.run(max_cycles=200_000)
        out = [f.data for f in sim.received()]
        counters = sim.counters()
    assert out == [reply(r) for r in requests]
    assert counters["decap_no_rule"] == 1
    assert counters["decap_decapsulated"] == counters["encap_encapsulated"] == len(requests)


def test_vxlan_echo_design_pysim_64():
    vxlan_echo(64, "pysim", [b"a", b"over the overlay" * 3])


@pytest.mark.slow
def test_vxlan_echo_design_verilator_64():
    """The whole design on Verilator at 64 bits (the tiles alone are tested at 512 too)."""
    rng = random.Random(3)
    vxlan_echo(64, "verilator", [bytes(rng.getrandbits(8) for _ in range(n))
                                 for n in (0, 1, 14, 64, 65, 300, 1000, 1400)])
