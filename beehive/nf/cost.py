"""What each network-function tile costs in cycles, measured in Amaranth's simulator.

:func:`nf_costs` runs each tile alone (one rule that matches, so every packet is rewritten or
wrapped), feeds it back-to-back messages carrying a UDP datagram with a 64-byte payload (what
that tile takes: the IPv4 datagram for NAT and the encaps, the inner datagram for IP-in-IP decap,
VXLAN header + inner frame for VXLAN decap) with its output always ready, and returns one row
per tile and width: ``latency`` (cycles from the first message's first flit in to its first flit
out, the tile idle before) and ``cycles_per_packet`` (between consecutive first flits out, in
the steady state).
"""

from amaranth.sim import Simulator

from apiary.noc.framing import meta_message_flits
from apiary.noc.header import NocHeader
from apiary.noc.nexthop import Endpoint
from apiary.stream.checksum import internet_checksum
from apiary.stream.testbench import end_testbenches
from apiary.tile import TileEnv
from beehive.proto.addresses import ipv4_to_int, mac_to_int
from beehive.proto.ipv4 import IPV4
from beehive.proto.messages import META_BITS, PACKET_META
from beehive.proto.udp import UDP

from .ipip import IpipDecapTile, IpipEncapTile, ipip_route
from .nat import NatTile, nat_rule
from .vxlan import VXLAN, VxlanDecapTile, VxlanEncapTile, vxlan_peer


__all__ = ["nf_costs"]

_US, _PEER, _PHYS = "10.0.0.2", "10.9.0.1", "192.0.2.7"
_MAC, _PEER_MAC = "02:00:00:00:00:02", "52:54:00:00:00:09"


def _datagram(src: str, dst: str, payload: bytes) -> bytes:
    udp = UDP.to_bytes(src_port=4000, dst_port=7, length=8 + len(payload)) + payload
    ip = dict(version=4, ihl=5, total_length=20 + len(udp), flags=2, ttl=64, protocol=17,
              src=ipv4_to_int(src), dst=ipv4_to_int(dst))
    ip["checksum"] = internet_checksum(IPV4.to_bytes(ip))
    return IPV4.to_bytes(ip) + udp


def _cases() -> list[tuple[str, type, dict, bytes, dict]]:
    payload = bytes(range(64))
    dgram = _datagram(_US, _PEER, payload)
    inner_frame = (mac_to_int(_MAC).to_bytes(6, "big") + mac_to_int(_PEER_MAC).to_bytes(6, "big")
                   + b"\x08\x00" + _datagram(_PEER, _US, payload))
    peer = vxlan_peer(42, _PEER_MAC, _PHYS, "52:54:00:00:00:77")
    return [
        ("NatTile (in)", NatTile, {"direction": "in",
                                   "rules": [nat_rule(_PEER, _US, public_port=7,
                                                      private_port=9)]}, dgram, {}),
        ("IpipEncapTile", IpipEncapTile, {"rules": [ipip_route(_PEER, _PHYS)]}, dgram, {}),
        ("IpipDecapTile", IpipDecapTile, {"rules": [ipip_route(_PEER, _PHYS)]},
         _datagram(_PEER, _US, payload), {"peer_ip": ipv4_to_int(_PHYS)}),
        ("VxlanEncapTile", VxlanEncapTile, {"rules": [peer]}, dgram,
         {"peer_mac": mac_to_int(_PEER_MAC), "ethertype": 0x0800}),
        ("VxlanDecapTile", VxlanDecapTile, {"rules": [peer]},
         VXLAN.to_bytes(flags=0x08, vni=42) + inner_frame, {"peer_ip": ipv4_to_int(_PHYS)}),
    ]


def _measure(cls, params, width, payload, meta, packets) -> tuple[int, float]:
    env = TileEnv(name="nf", x=1, y=1, width=width, settings={"mac": _MAC, "ipv4": _US},
                  routes={"data": {None: [Endpoint("next", 2, 1)]}})
    tile = cls(env, **params)
    flits = meta_message_flits(width, NocHeader(dst_x=1, dst_y=1), PACKET_META.pack(meta),
                               META_BITS, payload)
    stamps_in: list[int] = []
    stamps_out: list[int] = []

    async def clock(ctx):
        cycle, head_in, head_out = 0, True, True
        ctx.set(tile.noc_out.ready, 1)
        while len(stamps_out) < packets:
            if ctx.get(tile.noc_in.valid) and ctx.get(tile.noc_in.ready):
                if head_in:
                    stamps_in.append(cycle)
                head_in = bool(ctx.get(tile.noc_in.payload.last))
            if ctx.get(tile.noc_out.valid):
                if head_out:
                    stamps_out.append(cycle)
                head_out = bool(ctx.get(tile.noc_out.payload.last))
            await ctx.tick()
            cycle += 1

    async def feed(ctx):
        for _ in range(packets):
            for word, last in flits:
                ctx.set(tile.noc_in.valid, 1)
                ctx.set(tile.noc_in.payload.data, word)
                ctx.set(tile.noc_in.payload.last, last)
                await ctx.tick().until(tile.noc_in.ready)
        ctx.set(tile.noc_in.valid, 0)

    sim = Simulator(tile)
    sim.add_clock(1e-8)
    sim.add_testbench(feed, background=True)
    sim.add_testbench(clock)
    sim.run()
    end_testbenches(sim)        # feed, if it still waits for the tile to take its last flits
    latency = stamps_out[0] - stamps_in[0]
    steady = (stamps_out[-1] - stamps_out[packets // 2]) / (packets - 1 - packets // 2)
    return latency, steady


def nf_costs(widths=(64, 512), packets: int = 12) -> list[dict]:
    """One row per tile and width: ``{"tile", "width", "latency", "cycles_per_packet",
    "bytes"}`` (``bytes``: the message payload fed in)."""
    rows = []
    for name, cls, params, payload, meta in _cases():
        for width in widths:
            latency, cpp = _measure(cls, params, width, payload, meta, packets)
            rows.append({"tile": name, "width": width, "latency": latency,
                         "cycles_per_packet": round(cpp, 2), "bytes": len(payload)})
    return rows
