"""NatTile (beehive/nf/nat.py) alone at 64 and 512 bits with random gaps and back-pressure, both
directions, every output compared with the datagram scapy builds (checksums recomputed by scapy);
malformed datagrams dropped and counted with the next good one through; the rule table rewritten
at random cycles while datagrams flow, every datagram wholly old-rule or wholly new-rule; and the
NAT echo design (examples/nat_echo.py) on both simulation back ends."""

import pathlib
import random

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_NOP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.sim import open_sim
from beehive.nf.base import py_checksum_update
from beehive.nf.nat import NAT_RULE, NatTile, nat_rule
from beehive.proto.addresses import int_to_ipv4
from beehive.proto.messages import MsgType
from nfbench import IPV4, MAC, PEER_IP, PEER_MAC, SEEDS, WIDTHS, make_nf, read_entry, run

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUB, PUB2, OTHER = "192.0.2.10", "192.0.2.20", "10.0.0.99"
RULES = [
    nat_rule(PUB, IPV4, public_port=5000, private_port=7, protocol=17),
    nat_rule(PUB, IPV4, public_port=6000, private_port=8000, protocol=6),
    nat_rule(PUB, IPV4, public_port=7000, private_port=9, peer_ip=PEER_IP, peer_port=1234),
    nat_rule(PUB2, IPV4),                                   # addresses only, any protocol
]
IN, OUT = MsgType.ETH_RX_FRAME, MsgType.ETH_TX_FRAME


def matches(rule, ip, direction):
    """The documented match of ``rule`` (a dict) for the scapy datagram ``ip``."""
    if not rule["valid"] or rule["protocol"] not in (0, ip.proto):
        return False
    l4 = ip.proto in (6, 17)
    sport, dport = (ip.payload.sport, ip.payload.dport) if l4 else (0, 0)
    if direction == "in":
        ours, peer, our_port, peer_port, want = ip.dst, ip.src, dport, sport, rule["public_port"]
        addr = rule["public_ip"]
    else:
        ours, peer, our_port, peer_port, want = ip.src, ip.dst, sport, dport, rule["private_port"]
        addr = rule["private_ip"]
    if ours != int_to_ipv4(addr) or rule["peer_ip"] not in (0, ip_int(peer)):
        return False
    if rule["public_port"] or rule["peer_port"]:
        if not l4 or (rule["public_port"] and our_port != want):
            return False
        if rule["peer_port"] and peer_port != rule["peer_port"]:
            return False
    return True


def ip_int(text):
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


def expected(raw, rules, direction):
    """What the NAT must send for the datagram ``raw`` (padding after it kept): scapy's own
    encoding of the rewritten datagram, or ``raw`` if no rule matches."""
    ip = IP(raw)
    datagram, pad = raw[:ip.len], raw[ip.len:]
    ip = IP(datagram)
    rule = next((r for r in rules if matches(r, ip, direction)), None)
    if rule is None:
        return raw
    if direction == "in":
        ip.dst = int_to_ipv4(rule["private_ip"])
        if rule["public_port"]:
            ip.payload.dport = rule["private_port"]
    else:
        ip.src = int_to_ipv4(rule["public_ip"])
        if rule["public_port"]:
            ip.payload.sport = rule["public_port"]
    del ip.chksum
    if ip.proto == 6 or (ip.proto == 17 and ip[UDP].chksum != 0):
        del ip.payload.chksum
    return bytes(ip) + pad


def inbound_packets():
    return [
        IP(src=PEER_IP, dst=PUB) / UDP(sport=40000, dport=5000) / b"to the echo",
        IP(src=PEER_IP, dst=PUB) / TCP(sport=40001, dport=6000, flags="S", seq=7),
        IP(src=PEER_IP, dst=PUB) / UDP(sport=1234, dport=7000) / b"from the allowed peer",
        IP(src=PEER_IP, dst=PUB) / UDP(sport=1235, dport=7000) / b"from another port",
        IP(src=PEER_IP, dst=PUB2) / ICMP(id=3, seq=4) / b"ping",
        IP(src=PEER_IP, dst=PUB2) / UDP(sport=9, dport=10) / (bytes(range(256)) * 3),
        IP(src=PEER_IP, dst=PUB) / UDP(sport=40002, dport=5000, chksum=0) / b"no checksum",
        IP(src=PEER_IP, dst="10.0.0.77") / UDP(sport=1, dport=5000) / b"nobody's",
        IP(src=PEER_IP, dst=PUB, tos=0xb8, ttl=3) / UDP(sport=0xFFFF, dport=5000) / (b"\xff" * 9),
    ]


def outbound_packets():
    return [
        IP(src=IPV4, dst=PEER_IP, flags="DF", id=0) / UDP(sport=7, dport=40000) / b"reply",
        IP(src=IPV4, dst=PEER_IP) / TCP(sport=8000, dport=40001, flags="SA", seq=1, ack=8),
        IP(src=IPV4, dst=PEER_IP) / UDP(sport=9, dport=1234) / b"to the allowed peer",
        IP(src=IPV4, dst=PEER_IP) / ICMP(type=0, id=3, seq=4) / b"pong",
        IP(src=OTHER, dst=PEER_IP) / UDP(sport=7, dport=1) / b"not ours",
        IP(src=IPV4, dst=PEER_IP) / UDP(sport=7, dport=2, chksum=0) / b"",
    ]


def message(pkt, msg_type, pad=b""):
    return bytes(pkt) + pad, {"ethertype": 0x0800}, msg_type


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("direction", ["in", "out"])
def test_rewrites_match_scapy(direction, width, seed):
    """Addresses, ports and both checksums as scapy computes them from scratch; a UDP checksum
    of 0 stays 0; Ethernet padding after the datagram kept; unmatched datagrams unchanged."""
    pkts, kind = (inbound_packets(), IN) if direction == "in" else (outbound_packets(), OUT)
    inputs = [message(p, kind) for p in pkts]
    if direction == "in":
        inputs.append(message(IP(src=PEER_IP, dst=PUB) / UDP(sport=5, dport=5000) / b"pad", IN,
                              pad=bytes(range(1, 12))))
    tile = make_nf(NatTile, width, direction=direction, rules=RULES)
    got = run(tile, width, inputs, len(inputs), seed=seed)
    want = [expected(raw, RULES, direction) for raw, _, _ in inputs]
    assert [m.payload for m in got.out] == want
    assert all(m.header.msg_type == kind.value for m in got.out)
    assert all(m.meta["ethertype"] == 0x0800 for m in got.out)
    rewritten = sum(w != raw for w, (raw, _, _) in zip(want, inputs))
    assert got.counters["rewritten"] == rewritten > 3
    assert got.counters["passed"] == len(inputs) - rewritten
    assert got.counters["forwarded"] == len(inputs)


def good_in():
    return message(IP(src=PEER_IP, dst=PUB) / UDP(sport=1, dport=5000) / b"good", IN)


def bad_inputs():
    good = bytes(IP(src=PEER_IP, dst=PUB) / UDP(sport=1, dport=5000) / b"checked")
    v6 = bytes([0x65]) + good[1:]
    ihl4 = bytes([0x44]) + good[1:]
    bad_sum = good[:10] + bytes([good[10] ^ 1]) + good[11:]
    short = bytes(IP(src=PEER_IP, dst=PUB, len=25) / UDP(sport=1, dport=5000))[:25]
    return {
        "truncated": (good[:19], {}, IN),
        "bad_version": (v6, {}, IN),
        "bad_header_length": (ihl4, {}, IN),
        "ip_options": message(IP(src=PEER_IP, dst=PUB, options=[IPOption_NOP()] * 4)
                              / UDP(sport=1, dport=5000) / b"opts", IN),
        "bad_checksum": (bad_sum, {}, IN),
        "bad_length": (short, {}, IN),
        "fragment": message(IP(src=PEER_IP, dst=PUB, flags="MF") / UDP(sport=1, dport=5000)
                            / b"frag", IN),
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_malformed_dropped_counted_and_the_next_passes(width):
    bad = bad_inputs()
    inputs = [item for b in bad.values() for item in (b, good_in())]
    got = run(make_nf(NatTile, width, rules=RULES), width, inputs, len(bad))
    assert [m.payload for m in got.out] == [expected(good_in()[0], RULES, "in")] * len(bad)
    drops = {k: v for k, v in got.counters.items()
             if k not in ("forwarded", "rewritten", "passed") and v}
    assert drops == {reason: 1 for reason in bad}
    assert got.counters["rewritten"] == got.counters["forwarded"] == len(bad)


@pytest.mark.parametrize("width", WIDTHS)
def test_unmatched_dropped_when_asked(width):
    inputs = [message(IP(src=PEER_IP, dst="10.0.0.77") / UDP(dport=1) / b"x", IN), good_in()]
    got = run(make_nf(NatTile, width, rules=RULES, unmatched="drop"), width, inputs, 1)
    assert [m.payload for m in got.out] == [expected(good_in()[0], RULES, "in")]
    assert got.counters["no_rule"] == 1 and got.counters["passed"] == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_table_updates_mid_stream_never_mix_rules(width):
    """Entry 0 flips between two rules at random cycles while datagrams flow: each comes out
    exactly as one rule or the other makes it, never a mixture (addresses of one, ports or
    checksums of the other)."""
    rule_a = nat_rule(PUB, IPV4, public_port=5000, private_port=7, protocol=17)
    rule_b = nat_rule(PUB, OTHER, public_port=5000, private_port=4444, protocol=17)
    writes = [(0, NAT_RULE.pack(rule_b)), (0, NAT_RULE.pack(rule_a))]
    rng = random.Random(width)
    pkts = [IP(src=PEER_IP, dst=PUB, id=k) / UDP(sport=rng.randrange(1, 65536), dport=5000)
            / bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 30, 90, 200])))
            for k in range(40)]
    inputs = [message(p, IN) for p in pkts]
    tile = make_nf(NatTile, width, rules=[rule_a])
    got = run(tile, width, inputs, len(inputs), seed=width, writes=writes, write_prob=0.05)
    seen = {"a": 0, "b": 0}
    for (raw, _, _), msg in zip(inputs, got.out):
        a, b = expected(raw, [rule_a], "in"), expected(raw, [rule_b], "in")
        assert msg.payload in (a, b), "a datagram mixes the old rule and the new"
        seen["a" if msg.payload == a else "b"] += 1
    assert got.writes > 5 and seen["a"] and seen["b"]
    assert got.counters["rewritten"] == len(inputs)


def test_rules_at_reset_read_back_and_checked():
    tile = make_nf(NatTile, 64, rules=RULES, entries=8)
    assert read_entry(tile, 3) == NAT_RULE.pack(RULES[3])
    assert read_entry(tile, 5) == 0
    assert tile.signature.members["regs"].signature.registers["rules"].width == 153
    with pytest.raises(ValueError, match="direction"):
        make_nf(NatTile, 64, direction="sideways")
    with pytest.raises(ValueError, match="do not fit"):
        make_nf(NatTile, 64, rules=RULES, entries=2)
    with pytest.raises(ValueError, match="unmatched"):
        make_nf(NatTile, 64, unmatched="maybe")
    with pytest.raises(ValueError, match="rule 0"):
        make_nf(NatTile, 64, rules=[{"public_port": 1 << 16}])


def test_incremental_checksum_equals_full_recomputation():
    rng = random.Random(5)
    for _ in range(2000):
        words = [rng.getrandbits(16) for _ in range(10)]
        k = rng.randrange(10)
        new = rng.getrandbits(16)
        total = sum(words)
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        hc = ~total & 0xFFFF
        changed = words[:k] + [new] + words[k + 1:]
        total = sum(changed)
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        assert py_checksum_update(hc, [words[k]], [new]) == ~total & 0xFFFF


# -- the whole design ------------------------------------------------------------------------

DESIGN_RULES = [nat_rule(PUB, IPV4, public_port=5000, private_port=7, protocol=17)]


def client(i, payload):
    return Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=PUB) / UDP(
        sport=40000 + i, dport=5000) / payload


def reply(request):
    """The echo's reply as the client sees it through the NAT: from the public address and
    port, every checksum scapy's."""
    return bytes(Ether(dst=PEER_MAC, src=MAC) / IP(src=PUB, dst=PEER_IP, flags="DF", id=0,
                                                   ttl=64)
                 / UDP(sport=5000, dport=request[UDP].sport) / bytes(request[UDP].payload))


def nat_echo(width, backend, payloads):
    design = load_design(str(ROOT / "examples" / "nat_echo.py"), width=width,
                         rules=DESIGN_RULES, control=False)
    design.check()
    bad = client(99, b"corrupt")
    raw = bytearray(bytes(bad))
    raw[14 + 10] ^= 0xFF                     # the IPv4 header checksum
    requests = [client(i, p) for i, p in enumerate(payloads)]
    with open_sim(design, backend, seed=3, stall=0.2) as sim:
        sim.send(bytes(raw))
        sim.send_many(requests)
        sim.run(max_cycles=200_000)
        out = [f.data for f in sim.received()]
        counters = sim.counters()
    assert out == [reply(r) for r in requests]
    assert counters["nat_in_bad_checksum"] == 1
    assert counters["nat_in_rewritten"] == counters["nat_out_rewritten"] == len(requests)
    assert counters["udp_rx_bad_checksum"] == counters["ip_rx_bad_checksum"] == 0


def test_nat_echo_design_pysim_64():
    nat_echo(64, "pysim", [b"a", b"hello through the NAT" * 3])


@pytest.mark.slow
def test_nat_echo_design_verilator_64():
    """Every size from empty to a full frame, on Verilator (at 512 bits the tile alone, above)."""
    rng = random.Random(1)
    nat_echo(64, "verilator", [bytes(rng.getrandbits(8) for _ in range(n))
                                for n in (0, 1, 18, 64, 65, 300, 1000, 1472)])


# -- the whole design, reconfigured and watched through the control plane ------------------------

@pytest.mark.slow
def test_nat_rules_changed_and_log_read_over_the_control_plane():
    """examples/nat_echo.py as the newcomer runs it (docs/beehive.md), at 64 bits: echoes on the
    public port, then both NATs' rule rewritten field by field through the controller (the
    same requests as `apiary ctl ... table nat_in.rules 0 public_port=6000`), then echoes on
    the new port only; the log, read over UDP, holds the datagrams as IPv4 RX got them:
    addressed to the private port."""
    from beehive.control_client import ControlClient, SimTransport
    from beehive.log_cli import log_tile, read_log
    from apiary.sim.replay import log_records
    from apiary.tiles.log import LINKTYPE_RAW_IPV4
    from apiary.top import control_map
    design = load_design(str(ROOT / "examples" / "nat_echo.py"), width=64, entries=16)
    port = 40000

    def echo(sim, dport, payload):
        request = Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4) / UDP(
            sport=port, dport=dport) / payload
        sim.received(clear=True)             # the controller's replies, already read
        sim.send(request)
        sim.run(until_idle=True)
        return [f.data for f in sim.received(clear=True)]

    with open_sim(design, "verilator", seed=5) as sim:
        client = ControlClient(control_map(design), SimTransport(sim, client_port=41000))
        assert len(echo(sim, 5000, b"before")) == 1
        for tile in ("nat_in", "nat_out"):
            rule = NAT_RULE.unpack(client.read_entry(f"{tile}.rules", 0))
            assert rule["public_port"] == 5000
            rule["public_port"] = 6000
            client.write_entry(f"{tile}.rules", 0, NAT_RULE.pack(rule))
        replies = echo(sim, 6000, b"after")
        assert [Ether(r)[UDP].sport for r in replies] == [6000]
        assert bytes(Ether(replies[0])[UDP].payload) == b"after"
        assert echo(sim, 5000, b"old port") == []
        counters = client.counters()
        assert counters["udp_rx.no_route"] == 1           # port 5000 now reaches no service
        assert counters["nat_in.rewritten"] == counters["nat_out.rewritten"] == 2
        entries, written, lost = read_log(client, log_tile(design, "log"))
    datagrams = [IP(bytes(r.data)) for r in log_records(entries, 64, LINKTYPE_RAW_IPV4)]
    service = [(d[UDP].dport, bytes(d[UDP].payload)) for d in datagrams if d[UDP].sport == port]
    assert service == [(7, b"before"), (7, b"after"), (5000, b"old port")]
    # The log keeps the first 16 datagrams; the control requests fill it, and the rest are
    # counted as lost, not written over.
    assert written == len(datagrams) == 16 and lost > 0
