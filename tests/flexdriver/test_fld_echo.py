"""FLD-E end to end in simulation: frames arrive at the NIC model, which DMAs them into the FLD
module (flexdriver/fld.py, Amaranth's simulator), FLD streams them to the echo accelerator
(flexdriver/fld_echo.py), whose answers FLD posts back to the model, which sends them. UDP
datagrams come back with addresses and ports swapped, ARP requests are answered, every byte
checked; what the echo does not answer is counted; the rings wrap many times; the control plane
refuses a tenant's rule that sets a context ID."""

import ipaddress
import random

import pytest
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether

from apiary.stream.testbench import simulate
from flexdriver.control import OPERATOR, FldControl
from flexdriver.fld import FldMap
from flexdriver.fld_echo import FldEchoTop
from flexdriver.nic import NicError, NicModel, Rule
from flexdriver.sim import FldLink, read_count

MAC, IP_ADDR = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "02:00:00:00:00:01", "10.0.0.1"
MAP = FldMap(queues=2, ring_entries=8, pool_entries=8, buffers=8, rq_entries=8,
              tx_cq_entries=16)


def udp(sport, payload, dst=IP_ADDR):
    return bytes(Ether(src=PEER_MAC, dst=MAC) / IP(src=PEER_IP, dst=dst)
                 / UDP(sport=sport, dport=7) / payload)


def echoed(frame):
    """The answer to a UDP ``frame``, built afresh: sources and destinations swapped, both
    checksums computed by scapy (swapping leaves them as they were)."""
    pkt = Ether(frame)
    ip, seg = pkt[IP], pkt[UDP]
    return bytes(Ether(src=pkt.dst, dst=pkt.src)
                 / IP(src=ip.dst, dst=ip.src, id=ip.id, ttl=ip.ttl, flags=ip.flags, tos=ip.tos)
                 / UDP(sport=seg.dport, dport=seg.sport) / bytes(seg.payload))


def arp_request():
    return bytes(Ether(src=PEER_MAC, dst="ff:ff:ff:ff:ff:ff")
                 / ARP(op=1, hwsrc=PEER_MAC, psrc=PEER_IP, pdst=IP_ADDR))


def run(width, frames, *, gap=300, limit=200_000):
    """Frames into the NIC's wire, one every ``gap`` cycles; returns the NIC model, what the
    echo counted and FLD's drops, once every answer is out."""
    top = FldEchoTop(width, mac=int(MAC.replace(":", ""), 16),
                     ip=int(ipaddress.IPv4Address(IP_ADDR)), fld_map=MAP)
    link = FldLink(top)
    nic = NicModel(link, latency=40, jitter=10, seed=width)
    link.nic = nic
    control = FldControl(nic, MAP)
    control.create_queues()
    out = {}

    async def wire(ctx):
        await ctx.tick().repeat(200)                # the receive doorbell reaches the NIC
        for frame in frames:
            nic.receive(frame)
            await ctx.tick().repeat(gap)
        await ctx.tick().repeat(4000)               # the last answers out
        out["counters"] = {name: int(ctx.get(getattr(top.counters, name)))
                           for name in top.counters.signature.members}
        out["rx_dropped"] = read_count(ctx, top.rx_dropped_queue, top.rx_dropped, 0)
        out["errors"] = control.errors({"stray_reads": int(ctx.get(top.stray_reads))})

    simulate(top, wire, background=[link.run], timeout=limit)
    return nic, out


@pytest.mark.parametrize("width", [64, 512])
def test_udp_datagrams_and_arp_are_answered_byte_for_byte(width):
    rng = random.Random(width)
    frames = [arp_request()] + [udp(1000 + i, bytes(rng.getrandbits(8) for _ in
                                                     range(rng.randrange(1, 1400))))
                                for i in range(20)]
    nic, out = run(width, frames)
    sent = [f for _, f in nic.wire]
    arp = Ether(sent[0])
    assert arp[ARP].op == 2 and arp[ARP].hwsrc == MAC and arp[ARP].psrc == IP_ADDR
    assert arp[ARP].hwdst == PEER_MAC and arp[ARP].pdst == PEER_IP and arp.dst == PEER_MAC
    assert sent[1:] == [echoed(f) for f in frames[1:]]
    assert out["counters"] == {"echoed": 20, "arp_replies": 1, "ignored": 0,
                               "bad_checksum": 0, "overflow": 0}
    assert out["errors"] == {} and out["rx_dropped"] == 0
    assert nic.counters.tx_packets[0] == 21      # the 8-entry rings went round 2 times and more


def test_what_the_echo_does_not_answer_is_counted():
    good = udp(1, b"after them")
    bad_sum = bytearray(udp(2, b"bad sum"))
    bad_sum[-1] ^= 0xFF                             # the UDP checksum no longer holds
    other = udp(3, b"not for us", dst="10.0.0.9")
    ping = bytes(Ether(src=PEER_MAC, dst=MAC) / IP(src=PEER_IP, dst=IP_ADDR) / ICMP())
    nic, out = run(64, [bytes(bad_sum), other, ping, good])
    assert [f for _, f in nic.wire] == [echoed(good)]
    assert out["counters"] == {"echoed": 1, "arp_replies": 0, "ignored": 2,
                               "bad_checksum": 1, "overflow": 0}


def test_only_the_operator_tags_packets_with_a_context():
    nic = NicModel(FldLink(FldEchoTop(64, mac=2, ip=3, fld_map=MAP)))
    control = FldControl(nic, MAP)
    control.create_queues()
    with pytest.raises(NicError, match="tenant 'alice' may not tag"):
        control.add_rule(Rule({"dst_port": 7}, queue=0, context=9), tenant="alice")
    control.add_rule(Rule({"dst_port": 7}, queue=0), tenant="alice")
    control.add_rule(Rule({"dst_port": 9}, queue=0, context=9), tenant=OPERATOR)
    assert [r.context for r in nic.rules] == [0, 9]
