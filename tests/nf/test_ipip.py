"""IpipEncapTile and IpipDecapTile (beehive/nf/ipip.py) alone at 64 and 512 bits with random gaps
and back-pressure, outputs compared with scapy's encodings; malformed datagrams dropped and
counted with the next good one through; the virtual → physical table rewritten at random
cycles while datagrams flow (every datagram wholly to the old host or the new); and an echo
design reached through a tunnel (tests/nf/nf_designs.py: a second IPv4 RX behind the decap tile)
on both simulation back ends."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.sim import open_sim
from beehive.nf.ipip import IPIP_ROUTE, IpipDecapTile, IpipEncapTile, ipip_route
from beehive.proto.addresses import ipv4_to_int
from beehive.proto.messages import MsgType
from nf_designs import ipip_design
from nfbench import IPV4, MAC, PEER_MAC, SEEDS, WIDTHS, make_nf, run

VIRT, VIRT2, PHYS, PHYS2 = "10.9.0.1", "10.9.0.2", "192.0.2.7", "192.0.2.8"
ROUTES = [ipip_route(VIRT, PHYS), ipip_route(VIRT2, PHYS2)]
TX, RX = MsgType.ETH_TX_FRAME, MsgType.IP_RX_DATAGRAM


def outer(inner, physical, ttl=64):
    """Scapy's IP-in-IP packet: the inner datagram's TOS and DF copied (RFC 2003 §3.1)."""
    inner = IP(bytes(inner))
    return bytes(IP(src=IPV4, dst=physical, proto=4, id=0, ttl=ttl, tos=inner.tos,
                    flags=inner.flags & 2) / inner)


def to(dst, payload=b"hi", **ip):
    return IP(src=IPV4, dst=dst, **ip) / UDP(sport=7, dport=4000) / payload


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_encap_matches_scapy(width, seed):
    pkts = [to(VIRT), to(VIRT2, bytes(range(256)) * 4, flags="DF", tos=0x2e),
            to("10.0.0.1", b"not virtual"), to(VIRT, b"", ttl=1), to(VIRT2, b"z" * 45)]
    inputs = [(bytes(p), {"ethertype": 0x0800}, TX) for p in pkts]
    tile = make_nf(IpipEncapTile, width, rules=ROUTES, ttl=30)
    got = run(tile, width, inputs, len(inputs), seed=seed)
    phys = {VIRT: PHYS, VIRT2: PHYS2}
    want = [outer(p, phys[p.dst], ttl=30) if p.dst in phys else bytes(p) for p in pkts]
    assert [m.payload for m in got.out] == want
    assert all(m.header.msg_type == TX.value for m in got.out)
    assert got.counters["encapsulated"] == 4 and got.counters["passed"] == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_encap_malformed_and_unmatched_dropped_and_counted(width):
    good = (bytes(to(VIRT, b"good")), {}, TX)
    bad = {"truncated": (bytes(to(VIRT))[:19], {}, TX),
           "bad_version": (b"\x65" + bytes(to(VIRT))[1:], {}, TX),
           "no_rule": (bytes(to("10.0.0.1")), {}, TX)}
    inputs = [item for b in bad.values() for item in (b, good)]
    got = run(make_nf(IpipEncapTile, width, rules=ROUTES, unmatched="drop"), width, inputs, 3)
    assert [m.payload for m in got.out] == [outer(to(VIRT, b"good"), PHYS)] * 3
    assert {k: v for k, v in got.counters.items() if v} == {
        **{r: 1 for r in bad}, "forwarded": 3, "encapsulated": 3}


@pytest.mark.parametrize("width", WIDTHS)
def test_encap_table_updates_mid_stream_never_mix(width):
    """The client migrates back and forth between two hosts at random cycles: every datagram
    is wrapped whole for one host or the other (address and header checksum agree)."""
    writes = [(0, IPIP_ROUTE.pack(ipip_route(VIRT, PHYS2))),
              (0, IPIP_ROUTE.pack(ipip_route(VIRT, PHYS)))]
    rng = random.Random(width)
    pkts = [to(VIRT, bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 20, 100, 300]))),
               id=k) for k in range(40)]
    inputs = [(bytes(p), {}, TX) for p in pkts]
    got = run(make_nf(IpipEncapTile, width, rules=ROUTES), width, inputs, len(inputs),
              seed=width, writes=writes, write_prob=0.03)
    hosts = []
    for p, m in zip(pkts, got.out):
        assert m.payload in (outer(p, PHYS), outer(p, PHYS2)), "a datagram mixes two entries"
        hosts.append(m.payload == outer(p, PHYS))
    assert got.writes > 5 and any(hosts) and not all(hosts)


def tunnelled(inner_src, physical, payload=b"in"):
    inner = IP(src=inner_src, dst=IPV4) / UDP(sport=4000, dport=7) / payload
    return bytes(inner), {"peer_ip": ipv4_to_int(physical), "protocol": 4}, RX


@pytest.mark.parametrize("width", WIDTHS)
def test_decap_known_tunnels_only(width):
    good = tunnelled(VIRT, PHYS, b"good")
    bad = {"no_rule": tunnelled(VIRT, PHYS2, b"spoofed"),
           "truncated": (good[0][:12], good[1], RX),
           "bad_version": (b"\x65" + good[0][1:], good[1], RX)}
    inputs = [item for b in bad.values() for item in (b, good)] + [tunnelled(VIRT2, PHYS2)]
    got = run(make_nf(IpipDecapTile, width, rules=ROUTES), width, inputs, 4)
    assert [m.payload for m in got.out] == [good[0]] * 3 + [inputs[-1][0]]
    assert all(m.header.msg_type == MsgType.ETH_RX_FRAME.value for m in got.out)
    assert {k: v for k, v in got.counters.items() if v} == {
        **{r: 1 for r in bad}, "forwarded": 4, "decapsulated": 4}


# -- the whole design ------------------------------------------------------------------------

def client(i, payload, virtual=VIRT, physical=PHYS):
    return (Ether(dst=MAC, src=PEER_MAC) / IP(src=physical, dst=IPV4)
            / IP(src=virtual, dst=IPV4) / UDP(sport=4000 + i, dport=7) / payload)


def reply(request, physical=PHYS):
    inner = IP(src=IPV4, dst=request[IP].payload.src, flags="DF", id=0, ttl=64) / UDP(
        sport=7, dport=request[UDP].sport) / bytes(request[UDP].payload)
    return bytes(Ether(dst=PEER_MAC, src=MAC) / IP(
        src=IPV4, dst=physical, proto=4, flags="DF", id=0, ttl=64) / inner)


def ipip_echo(width, backend, payloads):
    design = ipip_design(width, routes=ROUTES)
    design.check()
    requests = [client(i, p) for i, p in enumerate(payloads)]
    spoofed = client(98, b"from the wrong host", physical="192.0.2.99")
    plain = Ether(dst=MAC, src=PEER_MAC) / IP(src="10.0.0.1", dst=IPV4) / UDP(
        sport=5, dport=7) / b"plain"
    with open_sim(design, backend, seed=2, stall=0.2) as sim:
        sim.send_many([spoofed] + requests + [plain])
        sim.run(max_cycles=200_000)
        out = [f.data for f in sim.received()]
        counters = sim.counters()
    plain_reply = bytes(Ether(dst=PEER_MAC, src=MAC) / IP(
        src=IPV4, dst="10.0.0.1", flags="DF", id=0, ttl=64) / UDP(sport=7, dport=5) / b"plain")
    # The tunnel's replies in order; the plain one, two tiles shorter, may overtake them.
    assert [f for f in out if f != plain_reply] == [reply(r) for r in requests]
    assert out.count(plain_reply) == 1 and len(out) == len(requests) + 1
    assert counters["decap_no_rule"] == 1
    assert counters["decap_decapsulated"] == counters["encap_encapsulated"] == len(requests)
    assert counters["encap_passed"] == 1


def test_ipip_echo_design_pysim_64():
    ipip_echo(64, "pysim", [b"a", b"through the tunnel" * 3])


@pytest.mark.slow
def test_ipip_echo_design_verilator_64():
    """The whole design on Verilator at 64 bits (the tiles alone are tested at 512 too; a
    512-bit model of this design costs minutes of build for no more coverage)."""
    rng = random.Random(2)
    ipip_echo(64, "verilator", [bytes(rng.getrandbits(8) for _ in range(n))
                                for n in (0, 1, 44, 64, 65, 300, 1000, 1452)])
