"""The DHCP client's two data paths on their own, in Amaranth's simulator (fast): the message it
sends, read back with scapy, and the reply parser on replies scapy builds (options in any order,
pad bytes, a list of routers, a reply too long, one that comes while the last is read)."""

import random

import pytest
from scapy.layers.dhcp import BOOTP, DHCP

from apiary.stream.testbench import recv_packet, send_packet, simulate
from beehive.apps.dhcp import MESSAGE_BYTES, DhcpMessage, DhcpReplyParser, DhcpType
from beehive.proto.addresses import ipv4_to_int, mac_to_int

MAC = "02:00:00:00:00:2a"


def options(packet):
    return {o[0]: o[1:] if len(o) > 2 else o[1] for o in packet[DHCP].options
            if isinstance(o, tuple)}


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("kind", ["discover", "select", "renew", "release"])
def test_the_message_is_what_scapy_reads(width, kind):
    dut = DhcpMessage(width)
    sent = {}

    async def bench(ctx):
        ctx.set(dut.kind, DhcpType.RELEASE if kind == "release" else
                DhcpType.DISCOVER if kind == "discover" else DhcpType.REQUEST)
        ctx.set(dut.xid, 0x12345678)
        ctx.set(dut.mac, mac_to_int(MAC))
        ctx.set(dut.ciaddr, ipv4_to_int("10.0.0.50") if kind in ("renew", "release") else 0)
        ctx.set(dut.broadcast, kind in ("discover", "select"))
        ctx.set(dut.requested, ipv4_to_int("10.0.0.50"))
        ctx.set(dut.with_requested, kind == "select")
        ctx.set(dut.server, ipv4_to_int("10.0.0.1"))
        ctx.set(dut.with_server, kind in ("select", "release"))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        sent["bytes"] = await recv_packet(ctx, dut.o, width, rng=random.Random(1), stall=0.3)

    simulate(dut, bench, timeout=2000)
    raw = sent["bytes"]
    assert len(raw) == MESSAGE_BYTES
    p = BOOTP(raw)
    assert (p.op, p.htype, p.hlen, p.xid) == (1, 1, 6, 0x12345678)
    assert p.flags == (0x8000 if kind in ("discover", "select") else 0)
    assert p.chaddr[:6] == bytes.fromhex(MAC.replace(":", "")) and p.chaddr[6:] == bytes(10)
    assert p.ciaddr == ("10.0.0.50" if kind in ("renew", "release") else "0.0.0.0")
    o = options(p)
    assert o["message-type"] == {"discover": 1, "select": 3, "renew": 3, "release": 7}[kind]
    assert ("requested_addr" in o) == (kind == "select")
    assert o.get("server_id") == ("10.0.0.1" if kind in ("select", "release") else None)
    assert list(o["param_req_list"]) == [1, 3, 51, 58, 59]


def ack(**kw):
    opts = kw.pop("opts", [("message-type", "ack"), "pad", ("server_id", "10.0.0.1"),
                           ("router", "10.0.0.254", "10.0.0.253"), ("lease_time", 3600),
                           ("subnet_mask", "255.255.0.0"), ("renewal_time", 1000),
                           ("rebinding_time", 3000), ("domain", b"example"), "end"])
    return bytes(BOOTP(op=2, xid=kw.pop("xid", 7), yiaddr="10.0.3.4",
                       chaddr=bytes.fromhex(MAC.replace(":", "")), **kw) / DHCP(options=opts))


@pytest.mark.parametrize("width", [64, 512])
def test_the_parser_reads_a_reply_and_drops_what_it_cannot_keep(width):
    dut = DhcpReplyParser(width, 576)
    replies, events = [], []

    async def feed(ctx):
        rng = random.Random(2)
        await send_packet(ctx, dut.i, ack(), width, rng=rng)
        await send_packet(ctx, dut.i, ack(xid=8), width, rng=rng)          # while parsing
        for _ in range(700):
            await ctx.tick()
        await send_packet(ctx, dut.i, ack(xid=9) + bytes(400), width, rng=rng)   # too long
        for _ in range(100):
            await ctx.tick()
        await send_packet(ctx, dut.i, ack(xid=10, opts=[("message-type", "nak"), "end"]),
                          width, rng=rng)
        for _ in range(700):
            await ctx.tick()

    async def watch(ctx):
        async for _, _, done, busy, long, reply in ctx.tick().sample(
                dut.done, dut.dropped_busy, dut.dropped_long, dut.reply):
            if done:
                replies.append({name: int(getattr(reply, name)) for name in (
                    "op", "xid", "yiaddr", "chaddr", "cookie", "kind", "server", "lease", "t1",
                    "t2", "subnet", "router", "has_server", "has_router", "has_t1")})
            if busy:
                events.append("busy")
            if long:
                events.append("long")

    simulate(dut, feed, background=[watch], timeout=5000)
    assert events == ["busy", "long"]
    first, nak = replies
    assert first == {
        "op": 2, "xid": 7, "yiaddr": ipv4_to_int("10.0.3.4"), "chaddr": mac_to_int(MAC),
        "cookie": 0x63825363, "kind": 5, "server": ipv4_to_int("10.0.0.1"), "lease": 3600,
        "t1": 1000, "t2": 3000, "subnet": ipv4_to_int("255.255.0.0"),
        "router": ipv4_to_int("10.0.0.254"), "has_server": 1, "has_router": 1, "has_t1": 1}
    assert (nak["xid"], nak["kind"], nak["has_server"], nak["has_t1"]) == (10, 6, 0, 0)
