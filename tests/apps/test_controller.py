"""ControllerTile (beehive/apps/controller.py) alone: UDP_RX_SEGMENT requests in on the data
plane, the testbench playing the control agents on the control plane (a Python model of each
position's address map answering every CTL_READ / CTL_WRITE, after a random delay), with seeded
random stalls on all four ports, at 64 and 512 bits of data plane (control plane 64 bits, and
once 128). Every message out is checked: each control message's destination, type, address and
data, in order; each UDP_TX_SEGMENT reply byte for byte against the model, with the request's
metadata and its l4_sum. Statuses (BAD_ADDR, READ_ONLY, timeouts), bad requests, a full queue,
stray and late acks are counted."""

import collections
import pathlib
import random

import pytest

from apiary.bench.area import tile_areas
from apiary.load import load_design

from apiary.control.messages import (AGENT_FBITS, CtlMeta, CtlMsgType, CtlStatus,
                                     ctl_message_flits, decode_ctl_message)
from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import simulate
from apiary.tile import Endpoint, TileEnv
from beehive.apps.controller import (MAX_WORDS, OP_READ, OP_WRITE, STATUS_BAD_REQUEST,
                                     STATUS_OK, STATUS_TIMEOUT, ControllerTile, expected_reply,
                                     parse_reply, read_request, request_ok, write_request)
from beehive.proto.messages import PACKET_META, MsgType


ROOT = pathlib.Path(__file__).resolve().parents[2]
CTL = (3, 2)
UDP_RX = (2, 0)
UDP_TX = (2, 1)
UDP_RX_SEGMENT = MsgType.UDP_RX_SEGMENT.value
UDP_TX_SEGMENT = MsgType.UDP_TX_SEGMENT.value
READ, WRITE, ACK = (t.value for t in (CtlMsgType.CTL_READ, CtlMsgType.CTL_WRITE,
                                      CtlMsgType.CTL_ACK))
COUNTERS = ("requests", "reads", "writes", "bad_request", "timeouts", "overflow", "stray_acks",
            "dropped")
BUS_COUNTERS = ("bridge_reads", "bridge_writes", "bridge_failed")
SILENT = (5, 5)             # a position where no agent answers
STRAY_FROM = (7, 7)         # never asked: whatever comes from there is a stray


def controller(width, ctl_width=64, **kw):
    env = TileEnv(name="ctl", x=CTL[0], y=CTL[1], width=width, ctl_width=ctl_width,
                  routes={"data": {"reply": [Endpoint("udp_tx", *UDP_TX)]}})
    return ControllerTile(env, **kw)


def random_meta(rng):
    return {n: rng.getrandbits(PACKET_META.width(n)) for n in PACKET_META.names}


def segment(width, payload, meta, msg_type=UDP_RX_SEGMENT):
    hdr = NocHeader(dst_x=CTL[0], dst_y=CTL[1], dst_fbits=Fbits.LOCAL0, msg_type=msg_type,
                    src_x=UDP_RX[0], src_y=UDP_RX[1], src_fbits=Fbits.LOCAL0)
    return meta_message_flits(width, hdr, PACKET_META.pack(meta), PACKET_META.size,
                              bytes(payload))


class Agents:
    """The agents' address maps: per position ``{addr: [value, writable]}``; any other address
    is BAD_ADDR, and the position :data:`SILENT` never answers."""

    def __init__(self, rng, positions=((0, 0), (1, 0), (2, 1))):
        self.maps = {}
        for pos in positions:
            words = {a: [rng.getrandbits(32), False] for a in range(40)}            # counters
            words.update({0x1000 + a: [rng.getrandbits(32), True] for a in range(80)})
            words[0x1050] = [7, False]          # a read-only table's staging word, say
            self.maps[pos] = words

    def answer(self, pos, msg_type, addr, value):
        """``(status, data)`` of the ACK, ``None`` for no answer; applies a write."""
        if pos == SILENT:
            return None
        word = self.maps.get(pos, {}).get(addr)
        if word is None:
            return CtlStatus.BAD_ADDR, 0
        if msg_type == READ:
            return CtlStatus.OK, word[0]
        if not word[1]:
            return CtlStatus.READ_ONLY, value
        word[0] = value
        return CtlStatus.OK, value

    def serve(self, request):
        """The reply the tile must send for ``request`` (bytes), applying its writes, and the
        ``(msg_type, pos, addr, data)`` of every control message it must send."""
        request = bytes(request)
        if not request_ok(request):
            return expected_reply(request, 0), []
        op, x, y, count = request[0], request[2], request[3], request[6]
        addr = int.from_bytes(request[4:6], "big")
        kind = READ if op == OP_READ else WRITE
        words, sent = [], []
        for j in range(count):
            value = int.from_bytes(request[8 + 4 * j:12 + 4 * j], "big") if op == OP_WRITE else 0
            sent.append((kind, (x, y), addr + j, value))
            answer = self.answer((x, y), kind, addr + j, value)
            if answer is None:
                return expected_reply(request, STATUS_TIMEOUT, words), sent
            status, data = answer
            if status != CtlStatus.OK:
                return expected_reply(request, status, words), sent
            words.append(data)
        return expected_reply(request, STATUS_OK, words), sent


def run(width, requests, agents, *, ctl_width=64, limit=2, stall=0.0, seed=0, delay=(0, 6),
        strays=(), late=0, expect=None, timeout=200_000, bus=None, bus_replies=None, **kw):
    """Feed ``requests`` (``(payload, meta)``; or ``("raw", flits)`` data-plane messages), at
    most ``limit`` unanswered at a time (all at once with ``None``), and answer every control
    message from ``agents`` after a random delay in ``delay`` cycles (``late`` cycles for
    one from :data:`SILENT`, if ``late``). ``strays`` (flit lists) enter ``ctl_in`` at random
    times. Returns the replies (header, meta, payload), the control messages (header, meta),
    in order, and the counters, once ``expect`` replies (default: one per request) have come
    and the tile has been quiet a while. ``bus``: words ``(x, y, addr, write, data)`` asked on
    the tile's bus port meanwhile, one at a time, with stalls too; their replies ``(data,
    status)`` are appended to ``bus_replies``."""
    dut = controller(width, ctl_width, bridge=bus is not None, **kw)
    bus_words = list(bus or ())
    rng = random.Random(seed)
    stalls = [dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
              for _ in range(5)]
    expect = sum(1 for r in requests if r[0] != "raw") if expect is None else expect
    acks, strays = collections.deque(), collections.deque(strays)
    state = {"replies": 0, "done": False}
    replies, ctl, counters = [], [], {}

    async def source(ctx):
        pending = collections.deque(requests)
        sent = 0
        while pending:
            item = pending.popleft()
            if item[0] == "raw":
                await send_flits(ctx, dut.noc_in, item[1], **stalls[0])
                continue
            while limit is not None and sent - state["replies"] >= limit:
                await ctx.tick()
            sent += 1
            await send_flits(ctx, dut.noc_in, segment(width, *item), **stalls[0])

    async def agent_out(ctx):
        while True:
            flits = await recv_flits(ctx, dut.ctl_out, **stalls[1])
            header, meta = decode_ctl_message(flits, ctl_width)
            ctl.append((header, meta))
            pos = (header.dst_x, header.dst_y)
            answer = agents.answer(pos, header.msg_type, meta.addr, meta.data)
            if answer is None and late:
                answer, wait = (CtlStatus.OK, 0), late
            else:
                wait = rng.randint(*delay)
            if answer is not None:
                ack = CtlMeta(data=answer[1], addr=meta.addr, tag=meta.tag, status=answer[0])
                acks.append((wait, ctl_message_flits(ctl_width, ACK, ack, dst=CTL, src=pos,
                                                     dst_fbits=header.src_fbits,
                                                     src_fbits=AGENT_FBITS)))

    async def agent_in(ctx):
        while True:
            if strays and rng.random() < 0.02:
                await send_flits(ctx, dut.ctl_in, strays.popleft(), **stalls[2])
            elif acks:
                wait, flits = acks.popleft()
                await ctx.tick().repeat(wait) if wait else None
                await send_flits(ctx, dut.ctl_in, flits, **stalls[2])
            else:
                await ctx.tick()

    async def bus_master(ctx):
        """The bus port's words, each offered until taken with its reply."""
        for x, y, addr, write, value in bus_words:
            await ctx.tick().repeat(rng.randint(1, 3))
            ctx.set(dut.bridge.request.payload, {"x": x, "y": y, "addr": addr, "write": write,
                                                 "data": value})
            ctx.set(dut.bridge.request.valid, 1)
            while True:
                ready = stall == 0 or rng.random() >= stall
                ctx.set(dut.bridge.reply.ready, ready)
                done = ready and ctx.get(dut.bridge.reply.valid)
                if done:
                    assert ctx.get(dut.bridge.request.ready)
                    reply = ctx.get(dut.bridge.reply.payload)
                    bus_replies.append((reply.data, reply.status))
                await ctx.tick()
                if done:
                    break
            ctx.set(dut.bridge.request.valid, 0)
            ctx.set(dut.bridge.reply.ready, 0)
        state["bus_done"] = True

    async def sink(ctx):
        while state["replies"] < expect:
            flits = await recv_flits(ctx, dut.noc_out, **stalls[3])
            header, meta, payload = decode_meta_message(flits, width, PACKET_META.size)
            replies.append((header, PACKET_META.unpack(meta), payload))
            state["replies"] += 1
        while bus_words and not state.get("bus_done"):
            await ctx.tick()
        while strays or acks:
            await ctx.tick()
        ctx.set(dut.noc_out.ready, 1)
        await ctx.tick().repeat(100)
        assert ctx.get(dut.noc_out.valid) == 0, "a reply nobody asked for"
        for name in COUNTERS + (BUS_COUNTERS if bus is not None else ()):
            counters[name] = ctx.get(getattr(dut.counters, name))

    async def never_holds(ctx):
        """The inputs never wait for an output: ctl_in is always ready, noc_in at most one
        cycle in a row not ready (the receiver's empty packet after a header-only message)."""
        held = 0
        async for _, _, ctl_ready, noc_ready in ctx.tick().sample(dut.ctl_in.ready,
                                                                  dut.noc_in.ready):
            assert ctl_ready, "ctl_in held"
            held = 0 if noc_ready else held + 1
            assert held < 2, "noc_in held"

    background = [source, agent_out, agent_in, never_holds] + ([bus_master] if bus_words else [])
    simulate(dut, sink, background=background, timeout=timeout)
    return replies, ctl, counters


def check(replies, ctl, requests, agents, *, ctl_width=64):
    """Replies and control messages are exactly what ``agents`` (a model, fresh) says."""
    want_ctl = []
    requests = [r for r in requests if r[0] != "raw"]
    assert len(replies) == len(requests)
    for (header, meta, payload), (request, req_meta) in zip(replies, requests):
        reply, sent = agents.serve(request)
        want_ctl += sent
        assert payload == reply, (request.hex(), payload.hex(), reply.hex())
        assert header.msg_type == UDP_TX_SEGMENT
        assert (header.dst_x, header.dst_y, header.dst_fbits) == (*UDP_TX, Fbits.LOCAL0)
        assert (header.src_x, header.src_y, header.src_fbits) == (*CTL, Fbits.LOCAL0)
        assert meta == dict(req_meta, l4_sum=ones_complement_sum(reply), l4_sum_valid=1)
    assert len(ctl) == len(want_ctl)
    tags = set()
    for (header, meta), (kind, pos, addr, value) in zip(ctl, want_ctl):
        assert header.msg_type == kind
        assert (header.dst_x, header.dst_y, header.dst_fbits) == (*pos, AGENT_FBITS)
        assert (header.src_x, header.src_y, header.src_fbits) == (*CTL, Fbits.LOCAL0)
        assert header.payload_bytes == 0
        assert (meta.addr, meta.data, meta.status) == (addr, value, 0)
        tags.add(meta.tag)
    assert len(tags) == min(len(ctl), 256)      # every control message has its own tag


# -- the Python helpers ----------------------------------------------------------------------------

def test_requests_and_replies_pack_and_parse():
    assert read_request(1, 2, 0x1003, 4, tag=9) == bytes([1, 9, 1, 2, 0x10, 0x03, 4, 0])
    assert write_request(0, 1, 5, [0x01020304, 0xFFFFFFFF]) == \
        bytes([2, 0, 0, 1, 0, 5, 2, 0, 1, 2, 3, 4, 255, 255, 255, 255])
    assert request_ok(read_request(0, 0, 0xFFFF, 1)) and request_ok(read_request(0, 0, 0, 64))
    assert request_ok(write_request(0, 0, 0, [1]) + b"extra")
    for bad in (b"", b"\x01\x00\x00\x00\x00\x00\x01", bytes([3, 0, 0, 0, 0, 0, 1, 0]),
                bytes([1, 0, 0, 0, 0, 0, 0, 0]), bytes([1, 0, 0, 0, 0, 0, 65, 0]),
                bytes([1, 0, 0, 0, 0xFF, 0xFF, 2, 0]), write_request(0, 0, 0, [1, 2])[:-1]):
        assert not request_ok(bad), bad
    for args in ((0, 0, 0, 0), (0, 0, 0, 65), (256, 0, 0, 1), (0, 0, 0xFFFF, 2)):
        with pytest.raises(ValueError):
            read_request(*args)
    with pytest.raises(ValueError, match="32-bit"):
        write_request(0, 0, 0, [1 << 32])
    request = read_request(3, 4, 0x20, 3, tag=7)
    reply = expected_reply(request, CtlStatus.BAD_ADDR, [0xAABBCCDD])
    assert reply == request[:7] + bytes([1, 0xAA, 0xBB, 0xCC, 0xDD]) + bytes(8)
    r = parse_reply(reply)
    assert (r.op, r.tag, r.x, r.y, r.addr, r.count, r.status, r.words) == \
        (OP_READ, 7, 3, 4, 0x20, 3, 1, [0xAABBCCDD, 0, 0])
    assert r.status_name == "BAD_ADDR"
    assert expected_reply(b"\x02\x05", 0) == bytes([2, 5, 0, 0, 0, 0, 0, 0xFF])
    assert parse_reply(expected_reply(b"\x01", 0)).status_name == "BAD_REQUEST"
    w = parse_reply(expected_reply(write_request(1, 1, 0x1000, [5]), 0))
    assert (w.op, w.status, w.words) == (OP_WRITE, 0, [])
    with pytest.raises(ValueError):
        parse_reply(b"\x01\x00")
    with pytest.raises(ValueError):
        parse_reply(request[:7] + b"\x00" + bytes(11))


def test_tile_checks_its_parameters_and_routes():
    env = TileEnv(name="ctl", routes={"data": {"kernel": [Endpoint("udp_tx", 2, 1)]}})
    with pytest.raises(ValueError, match="reply"):
        ControllerTile(env)
    for bad in ({"queue": 0}, {"reply_timeout": 0}, {"queue": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ControllerTile(TileEnv(), **bad)
    tile = ControllerTile(TileEnv())
    assert tile.planes == ("data", "ctl") and tile.streaming is False


# -- the tile ----------------------------------------------------------------------------------

def mixed_requests(rng, agents, n):
    """Reads and writes of 1 to 64 words at random places of the agents' maps, some running
    into BAD_ADDR or READ_ONLY words or the silent position."""
    positions = list(agents.maps)
    out = []
    for k in range(n):
        pos = rng.choice(positions + [SILENT] * (k % 9 == 8))
        count = rng.choice([1, 2, 3, 7, rng.randint(1, MAX_WORDS), MAX_WORDS])
        tag = rng.getrandbits(8)
        if rng.random() < 0.5:
            addr = rng.choice([0, rng.randrange(40), 0x1000, rng.randrange(0x1000, 0x1050),
                               0x3000])
            out.append(read_request(*pos, addr, min(count, 0x10000 - addr), tag=tag))
        else:
            addr = rng.choice([0x1000, rng.randrange(0x1000, 0x1050), 0x1040, 5])
            words = [rng.getrandbits(32) for _ in range(count)]
            out.append(write_request(*pos, addr, words, tag=tag))
    return [(r, random_meta(rng)) for r in out]


@pytest.mark.parametrize("width", [64, 512])
def test_reads_and_writes_are_served_in_order(width):
    """Reads and writes of 1 to 64 words, a few queued at a time, random stalls everywhere,
    agents answering after random delays: every control message is the model's, every reply
    is the model's byte for byte (words read, statuses, zeros from a failing word on); the
    silent position times out."""
    rng = random.Random(width)
    agents = Agents(random.Random(1))
    requests = mixed_requests(rng, agents, 14)
    replies, ctl, counters = run(width, requests, agents, stall=0.3, seed=width,
                                 reply_timeout=300)
    check(replies, ctl, requests, Agents(random.Random(1)))
    reads = sum(r[0] == OP_READ for r, _ in requests)
    timeouts = sum(parse_reply(p).status == STATUS_TIMEOUT for _, _, p in replies)
    assert counters == {"requests": 14, "reads": reads, "writes": 14 - reads, "bad_request": 0,
                        "timeouts": timeouts, "overflow": 0, "stray_acks": 0, "dropped": 0}
    statuses = {parse_reply(p).status for _, _, p in replies}
    assert {STATUS_OK, CtlStatus.BAD_ADDR, CtlStatus.READ_ONLY} <= statuses


def test_wider_control_plane():
    """The same at 256 bits of data plane and 128 of control plane."""
    rng = random.Random(3)
    agents = Agents(random.Random(2))
    requests = mixed_requests(rng, agents, 6)
    replies, ctl, _ = run(256, requests, agents, ctl_width=128, stall=0.2, seed=3,
                          reply_timeout=300)
    check(replies, ctl, requests, Agents(random.Random(2)), ctl_width=128)


@pytest.mark.parametrize("width", [64, 512])
def test_bad_requests_are_answered_at_once(width):
    """Malformed requests (empty, short, unknown op, count 0 or 65, past the address map, a
    WRITE short of its words): each answered with the 8-byte reply and status 0xFF, no control
    message; a data-plane message of another type and a malformed one are dropped and counted;
    the good requests after them are served, bytes past what they need (hundreds of them)
    ignored."""
    rng = random.Random(5)
    agents = Agents(random.Random(0))
    payloads = [b"", b"\x01", read_request(0, 0, 0, 1)[:7], bytes([3, 0, 0, 0, 0, 0, 1, 0]),
                bytes([0, 1, 2, 3, 4, 5, 6, 7]), bytes([1, 0, 0, 0, 0, 0, 0, 0]),
                bytes([1, 0, 0, 0, 0, 0, 65, 0]), bytes([2, 9, 1, 0, 0xFF, 0xF0, 32, 0]),
                write_request(1, 0, 0x1000, [1, 2, 3])[:-1],
                read_request(1, 0, 0x1000, 2),
                read_request(1, 0, 0x1000, 3) + bytes(range(256)) * 3,   # the rest ignored
                write_request(1, 0, 0x1001, [9, 8]) + b"\xff" * 500]
    requests = [(p, random_meta(rng)) for p in payloads]
    other = segment(width, b"not a request", random_meta(rng), msg_type=MsgType.ETH_RX_FRAME.value)
    malformed = Message(NocHeader(dst_x=CTL[0], dst_y=CTL[1], msg_type=UDP_RX_SEGMENT), [0],
                        b"").flits(width)
    inputs = requests[:-3] + [("raw", other), ("raw", malformed)] + requests[-3:]
    replies, ctl, counters = run(width, inputs, agents, limit=1)
    check(replies, ctl, requests, Agents(random.Random(0)))
    assert [parse_reply(p).status for _, _, p in replies] == \
        [STATUS_BAD_REQUEST] * (len(payloads) - 3) + [STATUS_OK] * 3
    assert all(len(p) == 8 for _, _, p in replies[:-3])
    assert counters["bad_request"] == len(payloads) - 3
    assert counters["reads"] == 2 and counters["writes"] == 1
    assert counters["dropped"] == 2 and counters["requests"] == len(payloads)


@pytest.mark.parametrize("width", [64, 512])
def test_stray_and_late_acks_are_dropped_and_counted(width):
    """Acks from a position never asked, of another type, with a wrong tag or address, at
    random times, and the late answers of a silent agent (after its word timed out): all
    dropped and counted in stray_acks, never taken for an awaited word's."""
    rng = random.Random(6)
    agents = Agents(random.Random(3))
    junk = [
        ctl_message_flits(64, ACK, CtlMeta(data=1, addr=0x1000, tag=k), dst=CTL, src=STRAY_FROM,
                          dst_fbits=Fbits.LOCAL0)
        for k in range(4)
    ] + [
        ctl_message_flits(64, READ, CtlMeta(addr=0), dst=CTL, src=(0, 0), dst_fbits=Fbits.LOCAL0),
        ctl_message_flits(64, ACK, CtlMeta(data=5, addr=0x7777, tag=200), dst=CTL, src=(0, 0),
                          dst_fbits=Fbits.LOCAL0),
        Message(NocHeader(dst_x=CTL[0], dst_y=CTL[1], msg_type=ACK), [], b"").flits(64),
    ]
    requests = [(read_request(0, 0, 0, 20, tag=1), random_meta(rng)),
                (read_request(*SILENT, 0x1000, 3, tag=2), random_meta(rng)),
                (write_request(1, 0, 0x1000, list(range(30)), tag=3), random_meta(rng)),
                (read_request(1, 0, 0x1000, 30, tag=4), random_meta(rng))]
    replies, ctl, counters = run(width, requests, agents, strays=junk, late=120, limit=1,
                                 reply_timeout=60, seed=width)
    check(replies, ctl, requests, Agents(random.Random(3)))
    assert parse_reply(replies[1][2]).status == STATUS_TIMEOUT
    assert parse_reply(replies[3][2]).words == list(range(30))
    assert counters["stray_acks"] == len(junk) + 1      # + the silent agent's late answer
    assert counters["timeouts"] == 1


@pytest.mark.parametrize("width", [64, 512])
def test_a_burst_overflows_the_queue(width):
    """Ten reads at once, faster than the tile serves them (slow agents): those that find
    every slot taken are dropped unanswered and counted; the others are answered in order,
    each with its own words."""
    rng = random.Random(7)
    agents = Agents(random.Random(4))
    requests = [(read_request(0, 0, k, 4, tag=k), random_meta(rng)) for k in range(10)]
    replies, ctl, counters = run_burst(width, requests, agents)
    answered = [parse_reply(p) for _, _, p in replies]
    assert counters["overflow"] == 10 - len(answered) > 0
    assert [r.tag for r in answered] == sorted(r.tag for r in answered)
    for r in answered:
        assert r.status == STATUS_OK
        assert r.words == [agents.maps[(0, 0)][r.addr + k][0] for k in range(4)]
    assert counters["requests"] == counters["reads"] == len(answered)


def run_burst(width, requests, agents):
    """Every request at once, agents answering 25 cycles late; the replies that come within
    3000 cycles, and the counters then."""
    dut = controller(width, queue=2)
    replies, counters = [], {}
    acks = collections.deque()

    async def source(ctx):
        for payload, meta in requests:
            await send_flits(ctx, dut.noc_in, segment(width, payload, meta))

    async def agent_out(ctx):
        while True:
            header, meta = decode_ctl_message(await recv_flits(ctx, dut.ctl_out), 64)
            status, value = agents.answer((header.dst_x, header.dst_y), header.msg_type,
                                          meta.addr, meta.data)
            acks.append(ctl_message_flits(64, ACK, CtlMeta(value, meta.addr, meta.tag, status),
                                          dst=CTL, src=(header.dst_x, header.dst_y),
                                          dst_fbits=Fbits.LOCAL0, src_fbits=AGENT_FBITS))

    async def agent_in(ctx):
        while True:
            if acks:
                await ctx.tick().repeat(25)
                await send_flits(ctx, dut.ctl_in, acks.popleft())
            else:
                await ctx.tick()

    async def sink(ctx):
        ctx.set(dut.noc_out.ready, 1)
        o = dut.noc_out
        flits = []
        cycles = 0
        async for _, _, valid, word, last in ctx.tick().sample(o.valid, o.payload.data,
                                                               o.payload.last):
            if valid:
                flits.append((int(word), int(last)))
                if last:
                    header, meta, payload = decode_meta_message(flits, width, PACKET_META.size)
                    replies.append((header, meta, payload))
                    flits = []
            cycles += 1
            if cycles == 3000:
                break
        for name in COUNTERS:
            counters[name] = ctx.get(getattr(dut.counters, name))

    simulate(dut, sink, background=[source, agent_out, agent_in], timeout=10_000)
    return replies, [], counters


@pytest.mark.parametrize("width", [64, 512])
def test_the_bus_port_takes_turns_with_requests(width):
    """ControllerTile(bridge=True): words read and written on the bus port (a board's bus)
    while requests are served, with random stalls and agent delays. Each bus word's reply is the
    agent's answer (the word read, 0 for a write; BAD_ADDR, READ_ONLY, a time-out at the silent
    position), and a word written reads back; each request's reply is still the model's byte
    for byte; every control message is the right one, in order for each master; the bus
    port's words are counted."""
    rng = random.Random(11 + width)
    bus_pos = (1, 0)
    requests = mixed_requests(rng, Agents(random.Random(4), positions=((0, 0), (2, 1))), 8)
    words = [(*bus_pos, 0x1000 + k, 1, rng.getrandbits(32)) for k in range(3)]
    words += [(*bus_pos, 0x1000 + k, 0, 0) for k in range(3)]
    words += [(*bus_pos, 5, 0, 0), (*bus_pos, 5, 1, 1), (*bus_pos, 0x1050, 1, 2),
              (*bus_pos, 0x3000, 0, 0), (*SILENT, 0, 0, 0), (*bus_pos, 0x1001, 0, 0)]
    words *= 2

    def agents():
        both = Agents(random.Random(4), positions=((0, 0), (2, 1)))
        both.maps.update(Agents(random.Random(5), positions=(bus_pos,)).maps)
        return both

    bus = []
    replies, ctl, counters = run(width, requests, agents(), stall=0.3, seed=width, bus=words,
                                 bus_replies=bus, reply_timeout=300)
    model, want = agents(), []
    for x, y, addr, write, value in words:
        answer = model.answer((x, y), WRITE if write else READ, addr, value)
        status, data = answer if answer is not None else (STATUS_TIMEOUT, 0)
        want.append((data if status == STATUS_OK and not write else 0, status))
    assert bus == want
    assert want[3:6] == [(w[4], STATUS_OK) for w in words[:3]]          # written, read back
    assert {s for _, s in want} == {STATUS_OK, CtlStatus.BAD_ADDR, CtlStatus.READ_ONLY,
                                    STATUS_TIMEOUT}
    on_bus = {bus_pos, SILENT}
    bus_ctl = [(h.msg_type, (h.dst_x, h.dst_y), m.addr, m.data) for h, m in ctl
               if (h.dst_x, h.dst_y) in on_bus]
    assert bus_ctl == [(WRITE if w else READ, (x, y), a, v if w else 0)
                       for x, y, a, w, v in words]
    check(replies, [c for c in ctl if (c[0].dst_x, c[0].dst_y) not in on_bus], requests,
          agents())
    reads = sum(r[0] == OP_READ for r, _ in requests)
    failed = sum(s != STATUS_OK for _, s in want)
    assert counters == {"requests": 8, "reads": reads, "writes": 8 - reads, "bad_request": 0,
                        "timeouts": 0, "overflow": 0, "stray_acks": 0, "dropped": 0,
                        "bridge_reads": sum(1 - w[3] for w in words),
                        "bridge_writes": sum(w[3] for w in words), "bridge_failed": failed}


@pytest.mark.parametrize("width", [64, 512])
def test_latency(width):
    """An idle tile, agents answering at once: a READ's first control message starts 4 cycles
    after the request's last flit, each next one 1 cycle after the previous ack's last flit;
    the reply starts 1 cycle after the last ack's last flit."""
    agents = Agents(random.Random(0))
    dut = controller(width)
    request = read_request(0, 0, 0, 3)
    log = {"req_in": [], "ctl_out": [], "ack_in": [], "out": []}

    def transfers(port, name, first):
        async def tb(ctx):
            cycle, start = 0, True
            async for _, _, v, r, last in ctx.tick().sample(port.valid, port.ready,
                                                            port.payload.last):
                if v and r:
                    if (first and start) or (not first and last):
                        log[name].append(cycle)
                    start = bool(last)
                cycle += 1
        return tb

    async def agent(ctx):
        while True:
            header, meta = decode_ctl_message(await recv_flits(ctx, dut.ctl_out), 64)
            status, value = agents.answer((0, 0), header.msg_type, meta.addr, 0)
            await send_flits(ctx, dut.ctl_in, ctl_message_flits(
                64, ACK, CtlMeta(value, meta.addr, meta.tag, status), dst=CTL, src=(0, 0),
                dst_fbits=Fbits.LOCAL0))

    async def tb(ctx):
        ctx.set(dut.noc_out.ready, 1)
        await send_flits(ctx, dut.noc_in, segment(width, request, random_meta(random.Random(0))))
        await ctx.tick().repeat(200)

    simulate(dut, tb, background=[agent, transfers(dut.noc_in, "req_in", False),
                                  transfers(dut.ctl_out, "ctl_out", True),
                                  transfers(dut.ctl_in, "ack_in", False),
                                  transfers(dut.noc_out, "out", True)])
    assert len(log["ctl_out"]) == 3 and len(log["out"]) == 1
    assert log["ctl_out"][0] == log["req_in"][0] + 4
    assert log["ctl_out"][1] == log["ack_in"][0] + 1
    assert log["ctl_out"][2] == log["ack_in"][1] + 1
    assert log["out"][0] == log["ack_in"][2] + 1


# -- the whole design: examples/udp_echo_ctl.py on both back ends ---------------------------------

#: Counters that the control requests themselves move (each passes the stack, the audit log
#: and the controller): they change while a sweep reads them, so a sweep cannot equal the bank.
MOVED_BY_CONTROL = {"eth_rx.forwarded", "ip_rx.forwarded", "udp_rx.forwarded",
                    "udp_tx.forwarded", "ip_tx.forwarded", "eth_tx.forwarded", "audit.written",
                    "ctl.requests", "ctl.reads", "ctl.writes"}
#: The meshes' own counters (in the bank, not behind any agent).
MESH_COUNTERS = {"data_route_dropped", "ctl_route_dropped", "ctl_agents_dropped"}
CLIENT = dict(src="02:00:00:00:00:01", ip="10.0.0.1")


def bad_frames():
    """One frame per drop: ``{counter it moves: frame}``."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC

    def udp(**kw):
        ether = dict(dst=DEFAULT_MAC, src=CLIENT["src"])
        ether.update(kw.pop("ether", {}))
        ip = dict(src=CLIENT["ip"], dst=DEFAULT_IPV4)
        ip.update(kw.pop("ip", {}))
        return Ether(**ether) / IP(**ip) / UDP(sport=5000, **kw) / b"drop me, please"

    return {
        "eth_rx.not_for_us": udp(dport=7, ether={"dst": "02:00:00:00:00:99"}),
        "ip_rx.bad_checksum": udp(dport=7, ip={"chksum": 0x1234}),
        "ip_rx.not_for_us": udp(dport=7, ip={"dst": "10.0.0.99"}),
        "udp_rx.bad_checksum": udp(dport=7, chksum=0x4321),
        "udp_rx.no_route": udp(dport=9),
    }


def echo_frame(payload):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
    return Ether(dst=DEFAULT_MAC, src=CLIENT["src"]) / IP(src=CLIENT["ip"], dst=DEFAULT_IPV4) \
        / UDP(sport=5001, dport=7) / payload


def echoes(sim):
    """Payloads of the echo replies among the frames out since the last call (the control
    replies, from port 7200, are there too)."""
    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether
    frames = [Ether(f.data) for f in sim.received(clear=True)]
    return [bytes(f[UDP].payload) for f in frames if UDP in f and f[UDP].sport == 7]


def check_sweep(sweep, bank, moved=()):
    """A counters sweep equals the bank (``<tile>_<name>``) for every counter the control
    traffic does not move, is zero but for ``moved``, and names every counter of the bank."""
    names = {n.replace(".", "_", 1): n for n in sweep}
    assert set(bank) - set(names) == MESH_COUNTERS
    for flat, name in names.items():
        if name not in MOVED_BY_CONTROL:
            assert sweep[name] == bank[flat], name
            assert bool(sweep[name]) == (name in moved), (name, sweep[name])


def whole_design(width):
    """Counters, registers and a table of examples/udp_echo_ctl.py read and written through
    its controller, with scapy frames into the simulated design (SimTransport)."""
    from apiary.load import load_design
    from apiary.sim import open_sim
    from apiary.top import control_map
    from beehive.control_client import ControlClient, ControlError, SimTransport

    d = load_design("examples/udp_echo_ctl.py", width=width)
    dmap = control_map(d)
    assert dmap.controller == (3, 1) and "ctl" in dmap.tiles
    with open_sim(d, "verilator") as sim:
        client = ControlClient(dmap, SimTransport(sim))
        frames = bad_frames()
        sim.send_many(frames.values())
        sim.send(echo_frame(b"still echoing"))
        sim.run()
        assert echoes(sim) == [b"still echoing"]
        # Every counter of every tile, over the control plane: each drop provoked counted once,
        # every other drop counter zero, all equal to the counter bank.
        sweep = client.counters()
        check_sweep(sweep, sim.counters(), moved=set(frames))
        assert all(sweep[name] == 1 for name in frames)

        # A register with an effect: writing rearm empties the audit log of control requests.
        written = client.read("audit.written")
        assert written == sim.counters()["audit_written"] > 10
        client.write("audit.rearm", 1)
        assert client.read("audit.rearm") == 1
        assert client.read("audit.written") == 2                # the rearm's read and this one
        # A table: entry 0 of the log is the request that read audit.rearm back.
        entry = client.read_entry("audit.log", 0)
        assert entry >> 112 & 0xFF == MsgType.UDP_RX_SEGMENT.value
        assert entry >> 64 & 0xFFFF == 8                        # a READ request: 8 bytes

        # Refusals, each one readable line.
        with pytest.raises(ControlError, match="READ_ONLY"):
            client.write_words("udp_rx", dmap.lookup("udp_rx.no_route")[1].addr, [0])
        with pytest.raises(ControlError, match="BAD_ADDR"):
            client.read_words("udp_rx", 0x0FFF, 1)
        with pytest.raises(ControlError, match="no counter, register or table named 'nope'"):
            client.read("udp_rx.nope")
        with pytest.raises(ControlError, match="TIMEOUT"):
            client.read_words((3, 2), 0, 1)                     # no agent at (3, 2)
        assert client.read("udp_rx.no_route") == 1              # the controller still serves
        sim.send(echo_frame(b"and again"))
        sim.run()
        assert echoes(sim) == [b"and again"]
        assert client.read("ctl.timeouts") == 1
        sim.run(10)
        assert sim.counters()["ctl_route_dropped"] == 1        # the mesh dropped the request


@pytest.mark.slow
@pytest.mark.xdist_group("udp_echo_ctl64")   # one model, built once
def test_whole_design_verilator():
    """Verilator, 64-bit data plane (the model tests/test_ctl_cli.py uses too; the tile alone
    runs at 512 bits above)."""
    whole_design(64)


@pytest.mark.slow
def test_request_slots_are_block_ram_on_an_ecp5():
    """Each of the slots' two memories has one write port and one read port, so Yosys maps
    them to block RAM (with the reply's words written into the requests' memory, three ports,
    the 64-bit tile was 25,050 LUTs and 13,958 flip-flops: the memory in registers)."""
    design = load_design(str(ROOT / "examples" / "nat_echo.py"), width=64)
    [(_, _, area)] = tile_areas(design, target="ecp5", only=["ctl"])
    assert area["brams"] >= 2
    assert area["ffs"] < 4000 and area["luts"] < 8000
