"""Beehive's Reed-Solomon encoder behind FLD (flexdriver/fld_rs.py, Amaranth's simulator) under
the NIC model: a datagram of eight shards to port 9000 comes back as the two parity shards
reedsolo computes, in a datagram whose IPv4 and UDP checksums the NIC filled in (the answer's
lengths differ from the request's: nothing is left to a swap); what is not a request is counted
and dropped."""

import ipaddress
import random

import pytest
import reedsolo
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.stream.checksum import internet_checksum
from apiary.stream.testbench import simulate
from flexdriver.control import FldControl
from flexdriver.fld import FldMap
from flexdriver.fld_rs import RS_PORT, FldRsTop
from flexdriver.nic import NicModel
from flexdriver.sim import FldLink

MAC, IP_ADDR = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "02:00:00:00:00:01", "10.0.0.1"
SHARD = 64
MAP = FldMap(queues=2, ring_entries=8, pool_entries=8, buffers=8, rq_entries=8,
              tx_cq_entries=16)


def request(sport, data, port=RS_PORT, dst=IP_ADDR):
    return bytes(Ether(src=PEER_MAC, dst=MAC) / IP(src=PEER_IP, dst=dst)
                 / UDP(sport=sport, dport=port) / data)


def parity(data):
    """reedsolo's parity shards of the eight shards in ``data``."""
    codec = reedsolo.RSCodec(2)
    columns = [bytes(data[i * SHARD + k] for i in range(8)) for k in range(SHARD)]
    symbols = [codec.encode(col)[8:] for col in columns]
    return bytes(s[0] for s in symbols) + bytes(s[1] for s in symbols)


def run(width, frames, gap=1500):
    top = FldRsTop(width, mac=int(MAC.replace(":", ""), 16),
                   ip=int(ipaddress.IPv4Address(IP_ADDR)), shard_bytes=SHARD, fld_map=MAP)
    link = FldLink(top)
    nic = link.nic = NicModel(link, latency=40, jitter=10, seed=width)
    FldControl(nic, MAP).create_queues()
    out = {}

    async def wire(ctx):
        await ctx.tick().repeat(200)
        for frame in frames:
            nic.receive(frame)
            await ctx.tick().repeat(gap)
        await ctx.tick().repeat(3000)
        out["counters"] = {name: int(ctx.get(getattr(top.counters, name)))
                           for name in top.counters.signature.members}

    simulate(top, wire, background=[link.run], timeout=200_000)
    return nic, out["counters"]


@pytest.mark.parametrize("width", [64, 512])
def test_requests_get_their_parity_shards(width):
    rng = random.Random(width)
    data = [bytes(rng.getrandbits(8) for _ in range(8 * SHARD)) for _ in range(10)]
    nic, counters = run(width, [request(4000 + i, d) for i, d in enumerate(data)])
    assert len(nic.wire) == 10
    for (_, frame), d, i in zip(nic.wire, data, range(10)):
        pkt = Ether(frame)
        assert (pkt.src, pkt.dst, pkt[IP].src, pkt[IP].dst) == (MAC, PEER_MAC, IP_ADDR, PEER_IP)
        assert (pkt[UDP].sport, pkt[UDP].dport) == (RS_PORT, 4000 + i)
        assert bytes(pkt[UDP].payload) == parity(d)
        ip = bytes(pkt[IP])
        assert internet_checksum(ip[:20]) == 0              # both filled in by the NIC
        segment = ip[20:]
        pseudo = ip[12:20] + bytes([0, 17]) + len(segment).to_bytes(2, "big")
        assert pkt[UDP].chksum != 0 and internet_checksum(pseudo + segment) == 0
    assert counters == {"answered": 10, "ignored": 0, "bad_checksum": 0, "bad_length": 0,
                        "busy": 0}


def test_what_is_not_a_request_is_counted():
    good = bytes(range(256)) * 2
    frames = [request(1, good[:-1]), request(2, good, port=7), request(3, good, dst="10.0.0.9"),
              request(4, good)]
    bad_sum = bytearray(request(5, good))
    bad_sum[-1] ^= 1
    nic, counters = run(64, frames + [bytes(bad_sum)])
    assert [bytes(Ether(f)[UDP].payload) for _, f in nic.wire] == [parity(good)]
    assert counters == {"answered": 1, "ignored": 2, "bad_checksum": 1, "bad_length": 1,
                        "busy": 0}
