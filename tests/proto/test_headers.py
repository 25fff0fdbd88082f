"""Each protocol's header table against scapy: random field values encode to scapy's bytes,
and scapy's bytes decode to the same fields."""

import random

import pytest
from amaranth.hdl import Shape
from scapy.layers.inet import ICMP, IP, UDP as ScapyUDP
from scapy.layers.l2 import ARP as ScapyARP, Dot1Q, Ether

from beehive.proto.arp import ARP, ArpOperation
from beehive.proto.ethernet import ETHERNET, VLAN, EtherType
from beehive.proto.icmp import ICMP_ECHO, IcmpType
from beehive.proto.ipv4 import IPV4, IpProtocol
from beehive.proto.udp import UDP


def mac(value):
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def ip(value):
    return ".".join(str(b) for b in value.to_bytes(4, "big"))


# Fields scapy needs fixed to lay the rest out as our table does: ARP's address sizes follow
# its hardware and protocol types, and ICMP has identifier and sequence for echo types only.
FIXED = {
    "arp": lambda rng: {"htype": 1, "ptype": EtherType.IPV4.value, "hlen": 6, "plen": 4},
    "icmp_echo": lambda rng: {"type": rng.choice(list(IcmpType)).value},
}


def random_fields(header, rng):
    fields = {n: rng.getrandbits(header.width(n)) for n in header.names}
    fields.update(FIXED.get(header.name, lambda rng: {})(rng))
    return fields


# Each case: the table, a function from field values to scapy bytes of exactly that header.
CASES = {
    "ethernet": (ETHERNET, lambda f: bytes(Ether(dst=mac(f["dst"]), src=mac(f["src"]),
                                                 type=f["ethertype"]))),
    "vlan": (VLAN, lambda f: bytes(Ether(type=f["tpid"]) / Dot1Q(
        prio=f["pcp"], dei=f["dei"], vlan=f["vid"], type=f["ethertype"]))[12:18]),
    "arp": (ARP, lambda f: bytes(ScapyARP(
        hwtype=f["htype"], ptype=f["ptype"], hwlen=f["hlen"], plen=f["plen"], op=f["oper"],
        hwsrc=mac(f["sha"]), psrc=ip(f["spa"]), hwdst=mac(f["tha"]), pdst=ip(f["tpa"])))),
    "ipv4": (IPV4, lambda f: bytes(IP(
        version=f["version"], ihl=f["ihl"], tos=f["dscp"] << 2 | f["ecn"],
        len=f["total_length"], id=f["identification"], flags=f["flags"],
        frag=f["fragment_offset"], ttl=f["ttl"], proto=f["protocol"], chksum=f["checksum"],
        src=ip(f["src"]), dst=ip(f["dst"])))[:20]),
    "icmp_echo": (ICMP_ECHO, lambda f: bytes(ICMP(
        type=f["type"], code=f["code"], chksum=f["checksum"], id=f["identifier"],
        seq=f["sequence"]))),
    "udp": (UDP, lambda f: bytes(ScapyUDP(sport=f["src_port"], dport=f["dst_port"],
                                          len=f["length"], chksum=f["checksum"]))),
}


@pytest.mark.parametrize("name", CASES)
def test_table_matches_scapy(name):
    header, scapy_bytes = CASES[name]
    rng = random.Random(name)
    for _ in range(50):
        fields = random_fields(header, rng)
        raw = scapy_bytes(fields)
        assert header.to_bytes(fields) == raw
        assert header.from_bytes(raw) == fields


def test_sizes_and_layouts():
    sizes = {"ethernet": 14, "vlan": 6, "arp": 28, "ipv4": 20, "icmp_echo": 8, "udp": 8}
    for name, (header, _) in CASES.items():
        assert header.size == 8 * sizes[name] and header.layout().size == header.size


def test_protocol_numbers():
    assert Shape.cast(EtherType).width == 16 and Shape.cast(IpProtocol).width == 8
    assert bytes(Ether(type=EtherType.IPV4.value))[12:14] == bytes(Ether() / IP())[12:14]
    assert bytes(Ether() / ScapyARP())[12:14] == EtherType.ARP.value.to_bytes(2, "big")
    assert bytes(Ether() / Dot1Q())[12:14] == EtherType.VLAN.value.to_bytes(2, "big")
    assert IP(bytes(IP() / ICMP())).proto == IpProtocol.ICMP.value
    assert IP(bytes(IP() / ScapyUDP())).proto == IpProtocol.UDP.value
    assert IpProtocol.TCP.value == 6
    assert ScapyARP(op="who-has").op == ArpOperation.REQUEST.value
    assert ScapyARP(op="is-at").op == ArpOperation.REPLY.value
    assert ICMP(type="echo-request").type == IcmpType.ECHO_REQUEST.value
    assert ICMP(type="echo-reply").type == IcmpType.ECHO_REPLY.value
