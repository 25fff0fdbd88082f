"""The ARP tile on its own, at 64 and 512 bits, with random gaps and back-pressure: replies
checked with scapy, every drop reason counted; with the resolver, its frames through a real
Ethernet TX, its answers, retries, drops and a blocked output."""

import pathlib
import random

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib.wiring import connect
from scapy.layers.l2 import ARP, Dot1Q, Ether

from apiary.design import Design
from apiary.noc.header import Fbits, field_location
from apiary.noc.splitter import FbitsSplitter
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv
from apiary.tiles import ForwardTile
from beehive.proto.addresses import int_to_ipv4, ipv4_to_int, mac_to_int
from beehive.proto.arp import RESOLVED_KEY, ArpMsgType, ArpTile
from beehive.proto.ethernet import EthernetRxTile, EthernetTxTile, EtherType
from beehive.proto.messages import MsgType
from tilebench import (HERE, IPV4, MAC, PEER_IP, PEER_MAC, SEEDS, WIDTHS,
                       assert_each_dropped_once, bad_then_good, counters_of, decode, dropped,
                       make_tile, packet_flits, run)

TX_HOP = (0, 1)
ROOT = pathlib.Path(__file__).resolve().parents[2]


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


# -- the resolver ------------------------------------------------------------------------------

OTHER_MAC, OTHER_IP = "52:54:00:aa:bb:cc", "10.0.0.9"
REQUESTER = (2, 2)                      # where the resolve requests come from (sub-port LOCAL1)


def resolve_message(ip, src=REQUESTER, vlan_tci=None):
    meta = {"peer_ip": ipv4_to_int(ip)}
    if vlan_tci is not None:
        meta.update(vlan=1, vlan_tci=vlan_tci)
    return b"", meta, ArpMsgType.ARP_RESOLVE, src


def message_flits(width, item):
    """Flits of a frame message, or of a resolve request from sub-port LOCAL1 of its source."""
    payload, meta, msg_type, *src = item
    flits = packet_flits(width, payload, meta, msg_type=msg_type, src=src[0] if src else (0, 0))
    if src:
        index, lsb = field_location(width, "src_fbits")
        data, last = flits[index]
        flits[index] = (data & ~(0xF << lsb) | Fbits.LOCAL1 << lsb, last)
    return flits


def request_frame(ip, vlan=None):
    """The broadcast ARP request the design sends for ``ip`` (on VLAN ``vlan``)."""
    eth = Ether(dst="ff:ff:ff:ff:ff:ff", src=MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return bytes(eth / ARP(op=1, hwsrc=MAC, psrc=IPV4, pdst=ip))


def reply_from(mac, ip, pdst=IPV4):
    return frame_message(bytes(ARP(op=2, hwsrc=mac, psrc=ip, hwdst=MAC, pdst=pdst)))


class Resolver(Elaboratable):
    """The ARP tile with the resolver; its frames go through a real Ethernet TX to ``mac_tx``,
    its answers (to sub-port LOCAL1) to ``answers``."""

    def __init__(self, width, settings=None, **params):
        self.arp = make_tile(ArpTile, width, {None: TX_HOP}, resolver=True, settings=settings,
                             **params)
        self.eth_tx = EthernetTxTile(TileEnv(width=width, settings={"mac": MAC, "ipv4": IPV4,
                                                                    **(settings or {})}))
        self.split = FbitsSplitter(width, [Fbits.LOCAL0, Fbits.LOCAL1])
        self.answers = self.split.o[1]

    def elaborate(self, platform):
        m = Module()
        m.submodules.arp, m.submodules.eth_tx = self.arp, self.eth_tx
        m.submodules.split = self.split
        if self.arp.runtime:            # as the design joins them: the MAC from the registers
            connect(m, arp=self.arp.addresses, eth_tx=self.eth_tx.addresses)
        connect(m, arp=self.arp.noc_out, split=self.split.i)
        connect(m, split=self.split.o[0], eth_tx=self.eth_tx.noc_in)
        return m


class Bench:
    """Runs a script against :class:`Resolver`, with seeded random gaps on the input and
    back-pressure on both outputs. ``frames`` (bytes) and ``answers`` (decoded messages) are
    what came out; ``sent``, every message the ARP tile sent, as ``(cycle of its first flit,
    decoded)``."""

    def __init__(self, width, seed=1, settings=None, **params):
        self.width, self.seed = width, seed
        self.dut = Resolver(width, settings, **params)
        self.frames, self.answers, self.sent, self.counters = [], [], [], {}

    async def send(self, ctx, *items):
        for item in items:
            await send_flits(ctx, self.dut.arp.noc_in, message_flits(self.width, item),
                             rng=self.rng, stall=0.3)

    async def wait(self, ctx, frames=0, answers=0):
        while len(self.frames) < frames or len(self.answers) < answers:
            await ctx.tick()

    def run(self, script, settle=300, timeout=100_000):
        self.rng = random.Random(self.seed)
        width, dut = self.width, self.dut

        async def main(ctx):
            await script(ctx, self)
            seen = len(self.sent)
            for _ in range(settle):
                await ctx.tick()
            assert len(self.sent) == seen, f"unexpected output: {self.sent[seen:]}"
            self.counters = {name: ctx.get(getattr(dut.arp.counters, name))
                             for name in counters_of(dut.arp)}

        async def outputs(ctx):
            # One loop, sampling every cycle (a receiver blocked in a background testbench
            # would be left dangling when the simulation ends).
            rng, nb = random.Random(self.seed + 1), width // 8
            out, mac_tx, answers = dut.arp.noc_out, dut.eth_tx.mac_tx, dut.answers
            frame, flits, sent, start, cycle = b"", [], [], 0, -1
            async for *_, sv, sr, sp, fv, fr, fp, av, ar, ap in ctx.tick().sample(
                    out.valid, out.ready, out.payload, mac_tx.valid, mac_tx.ready,
                    mac_tx.payload, answers.valid, answers.ready, answers.payload):
                cycle += 1
                if sv and sr:
                    start = start if sent else cycle
                    sent.append((int(sp.data), int(sp.last)))
                    if sp.last:
                        self.sent.append((start, decode(sent, width)))
                        sent = []
                if fv and fr:
                    frame += int(fp.data).to_bytes(nb, "little")[:int(fp.nbytes)]
                    if fp.last:
                        self.frames.append(frame)
                        frame = b""
                if av and ar:
                    flits.append((int(ap.data), int(ap.last)))
                    if ap.last:
                        self.answers.append(decode(flits, width))
                        flits = []
                ctx.set(mac_tx.ready, rng.random() >= 0.3)
                ctx.set(answers.ready, rng.random() >= 0.3)

        simulate(dut, main, background=[outputs], timeout=timeout)
        return self


def assert_answer(msg, ip, mac, src=REQUESTER, vlan_tci=None):
    assert msg.header.msg_type == ArpMsgType.ARP_RESOLVED.value
    assert (msg.header.dst_x, msg.header.dst_y, msg.header.dst_fbits) == (*src, Fbits.LOCAL1)
    assert (msg.header.src_x, msg.header.src_y) == HERE
    assert msg.payload == b""
    assert msg.meta["peer_ip"] == ipv4_to_int(ip)
    assert msg.meta["peer_mac"] == (mac_to_int(mac) if mac else 0)
    assert (msg.meta["vlan"], msg.meta["vlan_tci"]) == ((1, vlan_tci) if vlan_tci else (0, 0))


def nonzero(counters):
    return {k: v for k, v in counters.items() if v}


def frames_sent(bench):
    """The ARP tile's frame messages: all to Ethernet TX."""
    frames = [msg for _, msg in bench.sent if msg.header.msg_type == MsgType.ETH_TX_FRAME.value]
    assert all((m.header.dst_x, m.header.dst_y) == TX_HOP for m in frames)
    return frames


@pytest.mark.parametrize("width", WIDTHS)
def test_resolver_answers_a_cached_address_without_a_frame(width):
    """A request for the design's address (tagged) is answered as without the resolver and
    teaches the cache its sender: resolving that address needs no frame."""
    async def script(ctx, b):
        await b.send(ctx, frame_message(request(), vlan_tci=7), resolve_message(PEER_IP))
        await b.wait(ctx, frames=1, answers=1)

    b = Bench(width).run(script)
    assert b.frames == [bytes(Ether(dst=PEER_MAC, src=MAC) / Dot1Q(vlan=7)
                              / ARP(op=2, hwsrc=MAC, psrc=IPV4, hwdst=PEER_MAC, pdst=PEER_IP))]
    assert_answer(b.answers[0], PEER_IP, PEER_MAC, vlan_tci=7)
    assert nonzero(b.counters) == {"forwarded": 1, "resolve_cached": 1}


@pytest.mark.parametrize("width", WIDTHS)
def test_resolver_asks_the_network_and_answers_every_requester(width):
    """Two requesters of an unknown address: each gets a broadcast request out, one reply
    answers both, at their source coordinates, and fills the cache for a third."""
    other = (3, 0)

    async def script(ctx, b):
        await b.send(ctx, resolve_message(OTHER_IP), resolve_message(OTHER_IP, src=other))
        await b.wait(ctx, frames=2)
        await b.send(ctx, reply_from(OTHER_MAC, OTHER_IP))
        await b.wait(ctx, answers=2)
        await b.send(ctx, resolve_message(OTHER_IP))
        await b.wait(ctx, answers=3)

    b = Bench(width, retry_cycles=20_000).run(script)
    assert b.frames == [request_frame(OTHER_IP)] * 2
    assert len(frames_sent(b)) == 2
    first, second, cached = b.answers
    assert {(a.header.dst_x, a.header.dst_y) for a in (first, second)} == {REQUESTER, other}
    for msg in b.answers:
        src = (msg.header.dst_x, msg.header.dst_y)
        assert_answer(msg, OTHER_IP, OTHER_MAC, src=src)
    assert (cached.header.dst_x, cached.header.dst_y) == REQUESTER
    assert nonzero(b.counters) == {"requests_sent": 2, "matched_reply": 1,
                                   "resolve_replied": 2, "resolve_cached": 1}


@pytest.mark.parametrize("width", WIDTHS)
def test_resolver_retries_then_answers_zero(width):
    """Without a reply: the request goes out ``retries`` more times ``retry_cycles`` apart, then
    the requester hears ``peer_mac == 0``, once, and nothing more is sent."""
    period, retries = 300, 2

    async def script(ctx, b):
        await b.send(ctx, resolve_message(OTHER_IP, vlan_tci=5))
        await b.wait(ctx, answers=1)

    b = Bench(width, retry_cycles=period, retries=retries).run(script, settle=2 * period)
    assert b.frames == [request_frame(OTHER_IP, vlan=5)] * (retries + 1)
    times = [t for t, msg in b.sent]
    assert len(times) == retries + 2            # the requests, then the answer
    for gap in (later - earlier for earlier, later in zip(times, times[1:])):
        assert period - 8 <= gap <= period + 8
    assert_answer(b.answers[0], OTHER_IP, None, vlan_tci=5)
    assert nonzero(b.counters) == {"requests_sent": retries + 1, "resolve_timeout": 1}


@pytest.mark.parametrize("width", WIDTHS)
def test_resolver_drops_and_counts_what_it_does_not_use(width):
    """Malformed frames, frames for others and a reply nobody waits for are counted once each
    and dropped; the unmatched reply does not teach the cache (its address still needs a
    request), and the next request for us and the next resolution work."""
    stray_mac, stray_ip = "52:54:00:00:00:07", "10.0.0.7"
    bad = [
        ("truncated", frame_message(request()[:27])),
        ("unsupported", frame_message(request(hwtype=6))),
        ("unsupported", frame_message(bytes(ARP(op=3, hwsrc=PEER_MAC, psrc=PEER_IP,
                                                pdst=IPV4)))),
        ("not_for_us", frame_message(request(pdst=OTHER_IP))),
        ("not_for_us", reply_from(stray_mac, stray_ip, pdst=OTHER_IP)),
        ("unmatched_reply", reply_from(stray_mac, stray_ip)),
    ]

    async def script(ctx, b):
        await b.send(ctx, *(item for _, item in bad), frame_message(request()),
                     resolve_message(stray_ip))
        await b.wait(ctx, frames=2)
        await b.send(ctx, reply_from(stray_mac, stray_ip))
        await b.wait(ctx, answers=1)

    b = Bench(width, retry_cycles=20_000).run(script)
    assert b.frames == [bytes(Ether(dst=PEER_MAC, src=MAC) / ARP(
        op=2, hwsrc=MAC, psrc=IPV4, hwdst=PEER_MAC, pdst=PEER_IP)), request_frame(stray_ip)]
    assert_answer(b.answers[0], stray_ip, stray_mac)
    assert nonzero(b.counters) == {"truncated": 1, "unsupported": 2, "not_for_us": 2,
                                   "unmatched_reply": 1, "forwarded": 1, "matched_reply": 1,
                                   "requests_sent": 1, "resolve_replied": 1}


@pytest.mark.parametrize("width", WIDTHS)
def test_resolver_never_holds_its_input(width):
    """With its output blocked the tile still takes every message: one resolution waits in the
    only pending entry, the next is refused at once in the answer slot, the third is dropped;
    of three requests for us two replies queue and the third is dropped. Then everything
    queued comes out."""
    arp = make_tile(ArpTile, width, {None: TX_HOP}, resolver=True, pending_entries=1,
                    retry_cycles=400, retries=0)
    inputs = [resolve_message(OTHER_IP), resolve_message("10.0.0.10"),
              resolve_message("10.0.0.11"), *[frame_message(request())] * 3]
    rng = random.Random(3)
    got, done = [], []

    async def source(ctx):
        for item in inputs:
            await send_flits(ctx, arp.noc_in, message_flits(width, item), rng=rng, stall=0.3)
        done.append(True)

    async def sink(ctx):
        while not done:
            assert not ctx.get(arp.noc_out.ready)
            await ctx.tick()
        for _ in range(5):
            got.append(decode(await recv_flits(ctx, arp.noc_out, rng=rng, stall=0.3), width))
        ctx.set(arp.noc_out.ready, 1)
        for _ in range(500):
            assert not ctx.get(arp.noc_out.valid), "more than the 5 messages expected"
            await ctx.tick()
        counters.update((name, ctx.get(getattr(arp.counters, name))) for name in counters_of(arp))

    counters = {}
    simulate(arp, sink, background=[source], timeout=5_000)
    assert nonzero(counters) == {"forwarded": 2, "no_room": 1, "requests_sent": 1,
                                 "resolve_busy": 1, "resolve_dropped": 1, "resolve_timeout": 1}
    frames = [m for m in got if m.header.msg_type == MsgType.ETH_TX_FRAME.value]
    answers = [m for m in got if m.header.msg_type == ArpMsgType.ARP_RESOLVED.value]
    assert sorted(m.payload for m in frames) == sorted(
        [bytes(ARP(op=1, hwsrc=MAC, psrc=IPV4, pdst=OTHER_IP))]
        + [bytes(ARP(op=2, hwsrc=MAC, psrc=IPV4, hwdst=PEER_MAC, pdst=PEER_IP))] * 2)
    assert sorted(a.meta["peer_ip"] for a in answers) == sorted(
        ipv4_to_int(ip) for ip in (OTHER_IP, "10.0.0.10"))
    for a in answers:
        assert_answer(a, int_to_ipv4(a.meta["peer_ip"]), None)


def test_a_requester_that_streams_can_use_the_resolver_without_deadlock():
    """In a design where a streaming tile both asks the ARP tile and hears from it, the
    deadlock check passes and the ARP tile has its resolver; with only the route to Ethernet
    TX it is the plain responder."""
    def design(requester):
        d = Design("resolve", cols=2, rows=3, width=64)
        d.add("eth_rx", EthernetRxTile, at=(0, 0))
        d.add("eth_tx", EthernetTxTile, at=(0, 1))
        d.add("arp", ArpTile, at=(0, 2))
        d.route("eth_rx", "arp", key=EtherType.ARP.value)
        d.route("arp", "eth_tx")
        if requester:
            d.add("tcp", ForwardTile, at=(1, 2))
            d.route("tcp", "arp")
            d.route("arp", "tcp", key=RESOLVED_KEY)
        return d

    assert ForwardTile.streaming
    for requester in (False, True):
        d = design(requester)
        d.check()
        assert d.build_tiles()["arp"].resolver == requester


def test_resolver_parameters_and_routes_are_checked():
    with pytest.raises(ValueError, match="resolver=False"):
        make_tile(ArpTile, 64, {None: TX_HOP, RESOLVED_KEY: (2, 2)}, resolver=False)
    with pytest.raises(ValueError, match="one route to Ethernet TX"):
        make_tile(ArpTile, 64, {RESOLVED_KEY: (2, 2)})
    with pytest.raises(ValueError, match="retries"):
        make_tile(ArpTile, 64, {None: TX_HOP}, retries=-1)
    with pytest.raises(ValueError, match="announcements"):
        make_tile(ArpTile, 64, {None: TX_HOP}, announcements=0)
    with pytest.raises(ValueError, match="need the resolver"):
        make_tile(ArpTile, 64, {None: TX_HOP}, resolver=False,
                  settings={"runtime_addresses": True})
    with pytest.raises(ValueError, match="255.0.255.0.*not a run of ones"):
        make_tile(ArpTile, 64, {None: TX_HOP}, settings={"netmask": "255.0.255.0"})


GATEWAY = {"netmask": "255.255.255.0", "gateway": PEER_IP}


@pytest.mark.parametrize("width", WIDTHS)
def test_resolver_asks_for_the_gateway_outside_the_subnet(width):
    """With a netmask and a gateway: an address outside the subnet is resolved by asking for the
    gateway, and answered under its own address with the gateway's MAC; the next one outside
    comes from the cache; one inside the subnet is asked for itself."""
    far, farther = "192.168.7.9", "8.8.8.8"

    async def script(ctx, b):
        await b.send(ctx, resolve_message(far))
        await b.wait(ctx, frames=1)
        await b.send(ctx, reply_from(PEER_MAC, PEER_IP))
        await b.wait(ctx, answers=1)
        await b.send(ctx, resolve_message(farther))
        await b.wait(ctx, answers=2)
        await b.send(ctx, resolve_message(OTHER_IP))
        await b.wait(ctx, frames=2)
        await b.send(ctx, reply_from(OTHER_MAC, OTHER_IP))
        await b.wait(ctx, answers=3)

    b = Bench(width, settings=GATEWAY, retry_cycles=20_000).run(script)
    assert b.frames == [request_frame(PEER_IP), request_frame(OTHER_IP)]
    assert_answer(b.answers[0], far, PEER_MAC)
    assert_answer(b.answers[1], farther, PEER_MAC)
    assert_answer(b.answers[2], OTHER_IP, OTHER_MAC)
    assert nonzero(b.counters) == {"requests_sent": 2, "matched_reply": 2,
                                   "resolve_replied": 2, "resolve_cached": 1}


RUNTIME = {"runtime_addresses": True}
NEW_IP, NEW_MAC = "10.0.0.7", "02:00:00:00:00:42"


def announcement(mac, ip):
    """RFC 5227's ARP announcement of ``ip`` at ``mac``."""
    return bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=mac)
                 / ARP(op=1, hwsrc=mac, psrc=ip, hwdst="00:00:00:00:00:00", pdst=ip))


@pytest.mark.parametrize("width", WIDTHS)
def test_a_changed_address_takes_effect_at_once_and_is_announced(width):
    """Run-time addresses: the registers hold the settings' values and drive ``addresses``. A
    new IPv4 address is announced twice, ``retry_cycles`` apart, once it has held for
    ``announce_delay`` cycles; from the change on, a request for the old address is not
    answered and one for the new address is. A MAC written twice within the delay (as a
    48-bit register is, a word at a time) is announced once, at its final value, and the
    frames leave from it."""
    delay, period = 40, 400
    times = {}

    async def script(ctx, b):
        regs, wires = b.dut.arp.regs, b.dut.arp.addresses
        assert (ctx.get(wires.mac), ctx.get(wires.ipv4)) == (mac_to_int(MAC), ipv4_to_int(IPV4))
        assert ctx.get(wires.netmask) == ctx.get(wires.gateway) == 0
        ctx.set(regs.ipv4, ipv4_to_int(NEW_IP))
        await ctx.tick()
        assert ctx.get(wires.ipv4) == ipv4_to_int(NEW_IP)
        await b.send(ctx, frame_message(request(pdst=IPV4)), frame_message(request(pdst=NEW_IP)))
        await b.wait(ctx, frames=3)
        times["ip"] = [t for t, msg in b.sent]
        ctx.set(regs.mac, mac_to_int(NEW_MAC) & 0xFFFF_FFFF | mac_to_int(MAC) & ~0xFFFF_FFFF)
        for _ in range(delay // 2):
            await ctx.tick()
        ctx.set(regs.mac, mac_to_int(NEW_MAC))
        await b.wait(ctx, frames=5)

    b = Bench(width, settings=RUNTIME, retry_cycles=period, announce_delay=delay)
    b.run(script, settle=2 * period)
    reply = bytes(Ether(dst=PEER_MAC, src=MAC)
                  / ARP(op=2, hwsrc=MAC, psrc=NEW_IP, hwdst=PEER_MAC, pdst=PEER_IP))
    assert b.frames == [reply, announcement(MAC, NEW_IP), announcement(MAC, NEW_IP),
                        announcement(NEW_MAC, NEW_IP), announcement(NEW_MAC, NEW_IP)]
    first, second = times["ip"][1:3]
    assert delay <= first <= delay + 20 and period - 8 <= second - first <= period + 8
    assert nonzero(b.counters) == {"not_for_us": 1, "forwarded": 1, "announced": 4}


def test_an_address_of_zero_is_not_announced():
    """An IPv4 address of 0.0.0.0 (a DHCP client's, once its lease is lost) is no address: it
    is not announced, and the next real one is, twice."""
    delay, period = 40, 400

    async def script(ctx, b):
        regs = b.dut.arp.regs
        ctx.set(regs.ipv4, 0)
        for _ in range(delay + 2 * period):
            await ctx.tick()
        assert b.frames == []
        ctx.set(regs.ipv4, ipv4_to_int(NEW_IP))
        await b.wait(ctx, frames=2)

    b = Bench(64, settings=RUNTIME, retry_cycles=period, announce_delay=delay)
    b.run(script, settle=2 * period)
    assert b.frames == [announcement(MAC, NEW_IP)] * 2
    assert nonzero(b.counters) == {"announced": 2}


def test_run_time_addresses_reach_every_tile_that_reads_them():
    """In a whole design the ARP tile's ``addresses`` reach Ethernet RX and TX, IPv4 RX and TCP
    TX without ``d.wire``; the registers are in its address map at the settings' values; a
    design whose tiles take the addresses from no tile gets one error naming them."""
    from apiary.design import DesignError
    from apiary.load import load_design
    from apiary.top import DesignTop, control_map
    from beehive.proto.ipv4 import Ipv4RxTile
    d = load_design(str(ROOT / "examples" / "tcp_echo.py"), width=64)
    d.settings.update(runtime_addresses=True, netmask="255.255.0.0")
    top = DesignTop(d)
    [(driver, member, takers)] = top.broadcasts
    assert (driver, member) == ("arp", "addresses")
    assert set(takers) == {"eth_rx", "eth_tx", "ip_rx", "tcp_tx"}
    regs = top.tiles["arp"].regs
    assert (regs.mac.init, regs.ipv4.init) == (mac_to_int(MAC), ipv4_to_int(IPV4))
    assert (regs.netmask.init, regs.gateway.init) == (ipv4_to_int("255.255.0.0"), 0)

    ctl = load_design(str(ROOT / "examples" / "udp_echo_ctl.py"), width=64)
    arp = {e.name: e for e in control_map(ctl).tiles["arp"] if e.kind == "register"}
    assert {name: (e.width, e.writable) for name, e in arp.items()} == {
        "mac": (48, True), "ipv4": (32, True), "netmask": (32, True), "gateway": (32, True)}

    lone = Design("lone", cols=2, rows=1, width=64)
    lone.settings.update(runtime_addresses=True)
    lone.add("eth_rx", EthernetRxTile, at=(0, 0))
    lone.add("ip_rx", Ipv4RxTile, at=(1, 0))
    lone.route("eth_rx", "ip_rx", key=EtherType.IPV4.value)
    with pytest.raises(DesignError, match=r"tiles 'eth_rx', 'ip_rx' take 'addresses' "
                                          r"\(AddressesSignature\).*no tile of the design "
                                          r"drives it"):
        DesignTop(lone)
