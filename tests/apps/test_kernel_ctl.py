"""KernelCtlTile (beehive/apps/kernel_ctl.py) alone, at 64 and 512 bits: UDP_RX_SEGMENT
requests in, the testbench playing the error manager on the NoC side (answering each
FAULT_READ from a Python fault log), and every message out checked against the Python model:
the kernel message each request turns into, its destination, and the UDP_TX_SEGMENT reply
(payload, the request's metadata, l4_sum); bad requests, stray messages, a full queue and a
silent error manager counted."""

import collections
import random

import pytest

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.uapi import (FaultKind, IpcDir, KernelMeta, KernelMsgType, Status,
                            decode_kernel_message, kernel_message_flits)
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import simulate
from apiary.tile import Endpoint, TileEnv
from beehive.apps.kernel_ctl import (FAULT_REPLY_BYTES, OP_FAULT_READ, OP_IPC_GRANT,
                                     OP_IPC_REVOKE, OP_RELEASE, STATUS_BAD_REQUEST, STATUS_OK,
                                     STATUS_TIMEOUT, KernelCtlTile, fault_reply, fault_request,
                                     ipc_request, parse_fault_reply, parse_reply,
                                     release_request, request_ok, status_reply)
from beehive.proto.messages import PACKET_META, MsgType


CTL = (3, 1)
ERRORS = (2, 2)
UDP_RX = (2, 0)
UDP_TX = (2, 1)
FAULT_READ = KernelMsgType.FAULT_READ.value
FAULT_ENTRY = KernelMsgType.FAULT_ENTRY.value
RELEASE = KernelMsgType.RELEASE.value
IPC_GRANT = KernelMsgType.IPC_GRANT.value
UDP_TX_SEGMENT = MsgType.UDP_TX_SEGMENT.value
UDP_RX_SEGMENT = MsgType.UDP_RX_SEGMENT.value
KERNEL_TYPES = {t.value for t in KernelMsgType}
COUNTERS = ("reads", "releases", "grants", "bad_request", "timeouts", "overflow", "dropped")


def ctl_tile(width, **kw):
    env = TileEnv(name="ctl", x=CTL[0], y=CTL[1], width=width, routes={"data": {
        "kernel": [Endpoint("errors", *ERRORS)], "reply": [Endpoint("udp_tx", *UDP_TX)]}})
    return KernelCtlTile(env, **kw)


def random_meta(rng):
    return {n: rng.getrandbits(PACKET_META.width(n)) for n in PACKET_META.names}


def segment(width, payload, meta, msg_type=UDP_RX_SEGMENT):
    hdr = NocHeader(dst_x=CTL[0], dst_y=CTL[1], dst_fbits=Fbits.LOCAL0, msg_type=msg_type,
                    src_x=UDP_RX[0], src_y=UDP_RX[1], src_fbits=Fbits.LOCAL0)
    return meta_message_flits(width, hdr, PACKET_META.pack(meta), PACKET_META.size,
                              bytes(payload))


def fault_meta(rng):
    return KernelMeta(op=rng.choice(list(FaultKind)), handle=rng.getrandbits(8),
                      addr=rng.getrandbits(48), size=rng.getrandbits(40), perm=rng.getrandbits(2),
                      peer_x=rng.getrandbits(8), peer_y=rng.getrandbits(8),
                      peer_fbits=rng.getrandbits(4), user=rng.getrandbits(9))


class ErrorManagerModel:
    """The error manager's answers: a fault log of ``(tile, meta)``."""

    def __init__(self, faults):
        self.faults = list(faults)

    def entry(self, handle):
        total = len(self.faults)
        if handle >= total:
            return KernelMeta(root=total, status=Status.NO_ENTRY)
        (x, y), f = self.faults[handle]
        return KernelMeta(op=f.op, handle=f.handle, addr=f.addr, size=f.size, perm=f.perm,
                          peer_x=f.peer_x, peer_y=f.peer_y, peer_fbits=f.peer_fbits, user=f.user,
                          mem_x=x, mem_y=y, root=total, status=Status.OK)

    def answer(self, width, handle):
        return kernel_message_flits(width, FAULT_ENTRY, self.entry(handle), dst=CTL, src=ERRORS)


def expected(payload, model):
    """The messages the tile must send for a request: ``[(kind, ...)]``."""
    payload = bytes(payload)
    if not request_ok(payload):
        return [("reply", status_reply(payload, STATUS_BAD_REQUEST))]
    op = payload[0]
    if op == OP_FAULT_READ:
        index = int.from_bytes(payload[1:3], "big")
        entry = model.entry(index & 0xFF)
        if index > 255:
            reply = fault_reply(index, Status.NO_ENTRY, entry.root)
        elif entry.status == Status.OK:
            reply = fault_reply(index, Status.OK, entry.root, entry)
        else:
            reply = fault_reply(index, entry.status, entry.root)
        return [("kernel", FAULT_READ, (*ERRORS, Fbits.LOCAL0), KernelMeta(handle=index & 0xFF)),
                ("reply", reply)]
    if op == OP_RELEASE:
        k = ("kernel", RELEASE, (*ERRORS, Fbits.LOCAL0),
             KernelMeta(peer_x=payload[1], peer_y=payload[2], peer_fbits=payload[3]))
    else:
        k = ("kernel", IPC_GRANT, (payload[1], payload[2], Fbits.LOCAL0),
             KernelMeta(status=int(op == OP_IPC_GRANT), perm=payload[3], peer_x=payload[4],
                        peer_y=payload[5], peer_fbits=payload[6]))
    return [k, ("reply", status_reply(payload, STATUS_OK))]


def run(width, inputs, replies, *, model=None, answer=True, limit=3, stall=0.0, seed=0,
        cycles=None, timeout=30_000, **kw):
    """Feed ``inputs`` to the tile: ``("udp", payload, meta)`` requests, at most ``limit`` of
    them unanswered at a time (all at once with ``limit=None``), and ``("raw", flits)``
    messages, sent once every request before them is answered. The testbench answers each
    FAULT_READ from ``model`` (if ``answer``). Returns every message the tile sent, decoded,
    and its counters, once ``replies`` replies have come and it has been idle a while (or,
    with ``cycles``, after that many cycles with ``noc_out`` always ready)."""
    dut = ctl_tile(width, **kw)
    model = model or ErrorManagerModel([])
    rng = random.Random(seed)
    in_stall = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
    out_stall = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
    answers = collections.deque()
    state = {"replies": 0}
    out, counters = [], {}

    async def source(ctx):
        pending = collections.deque(inputs)
        sent = 0
        while True:
            waiting = sent - state["replies"]
            if answers:
                await send_flits(ctx, dut.noc_in, answers.popleft(), **in_stall)
            elif pending and (limit is None or (waiting == 0 if pending[0][0] == "raw"
                                                else waiting < limit)):
                item = pending.popleft()
                if item[0] == "udp":
                    sent += 1
                    flits = segment(width, item[1], item[2])
                else:
                    flits = item[1]
                await send_flits(ctx, dut.noc_in, flits, **in_stall)
            else:
                await ctx.tick()

    def handle(flits):
        if Message.from_flits(flits, width).header.msg_type in KERNEL_TYPES:
            header, meta = decode_kernel_message(flits, width)
            out.append(("kernel", header, meta))
            if header.msg_type == FAULT_READ and answer:
                answers.append(model.answer(width, meta.handle))
        else:
            header, meta, payload = decode_meta_message(flits, width, PACKET_META.size)
            out.append(("reply", header, PACKET_META.unpack(meta), payload))
            state["replies"] += 1

    async def sink(ctx):
        if cycles is None:
            while state["replies"] < replies:
                handle(await recv_flits(ctx, dut.noc_out, **out_stall))
            ctx.set(dut.noc_out.ready, 1)
            await ctx.tick().repeat(60)
            assert ctx.get(dut.noc_out.valid) == 0, "a message nobody asked for"
        else:
            ctx.set(dut.noc_out.ready, 1)
            o = dut.noc_out
            flits = []
            async for _, _, valid, word, last in ctx.tick().sample(o.valid, o.payload.data,
                                                                   o.payload.last):
                if valid:
                    flits.append((int(word), int(last)))
                    if last:
                        handle(flits)
                        flits = []
                cycles_left[0] -= 1
                if not cycles_left[0]:
                    break
            assert not flits, "a message cut short"
        for name in COUNTERS:
            counters[name] = ctx.get(getattr(dut.counters, name))

    cycles_left = [cycles]
    simulate(dut, sink, background=[source], timeout=timeout)
    return out, counters


def check(out, requests, model):
    """``out`` is exactly what the model says the ``("udp", payload, meta)`` requests get."""
    want = []
    for _, payload, meta in requests:
        want += [(e, meta) for e in expected(payload, model)]
    assert len(out) == len(want)
    for got, (exp, meta) in zip(out, want):
        assert got[0] == exp[0]
        header = got[1]
        assert (header.src_x, header.src_y, header.src_fbits) == (*CTL, Fbits.LOCAL0)
        if exp[0] == "kernel":
            _, msg_type, dst, kmeta = exp
            assert header.msg_type == msg_type
            assert (header.dst_x, header.dst_y, header.dst_fbits) == dst
            assert header.payload_bytes == 0
            assert got[2] == kmeta
        else:
            payload = exp[1]
            assert header.msg_type == UDP_TX_SEGMENT
            assert (header.dst_x, header.dst_y, header.dst_fbits) == (*UDP_TX, Fbits.LOCAL0)
            assert got[3] == payload
            assert got[2] == dict(meta, l4_sum=ones_complement_sum(payload), l4_sum_valid=1)


def udp_requests(rng, payloads):
    return [("udp", p, random_meta(rng)) for p in payloads]


# -- the Python helpers ----------------------------------------------------------------------------

def test_requests_and_replies_pack_and_parse():
    assert fault_request(0x0102) == bytes([1, 1, 2])
    assert release_request(3, 4) == bytes([2, 3, 4, Fbits.LOCAL0])
    assert ipc_request(1, 2, IpcDir.IN, 5, 6, 9) == bytes([3, 1, 2, 2, 5, 6, 9])
    assert ipc_request(1, 2, IpcDir.OUT, 5, 6, grant=False)[:4] == bytes([4, 1, 2, 1])
    assert request_ok(fault_request(7)) and request_ok(release_request(0, 0))
    assert request_ok(ipc_request(1, 2, IpcDir.OUT, 3, 4)) and request_ok(b"\x01\x00\x05extra")
    for bad in (b"", b"\x01\x00", b"\x02\x01\x02", b"\x02\x01\x02\x10", b"\x05" * 8,
                bytes([3, 1, 2, 3, 4, 5, 6]), bytes([4, 1, 2, 1, 4, 5, 16]), b"\x00" * 7):
        assert not request_ok(bad), bad
    meta = KernelMeta(op=FaultKind.PERMISSION, handle=0x12, addr=0x123456789ABC,
                      size=0x12_3456_789A, perm=2, peer_x=1, peer_y=2, peer_fbits=9,
                      user=0x1AB, mem_x=4, mem_y=5)
    reply = fault_reply(300, STATUS_OK, 1000, meta)
    assert len(reply) == FAULT_REPLY_BYTES == 36
    assert reply[:16] == bytes([1, 0, 0x03, 0xE8, 0x01, 0x2C, 4, 5, 4, 0x12, 2, 1, 2, 9, 0, 0])
    r = parse_fault_reply(reply)
    assert r == parse_reply(reply)
    assert (r["total"], r["index"], r["x"], r["y"], r["kind"], r["addr"], r["size"]) == \
        (1000, 300, 4, 5, FaultKind.PERMISSION, 0x123456789ABC, 0x12_3456_789A)
    assert (r["user"], r["msg_type"], r["inbound"]) == (0x1AB, 0xAB, 1)
    assert status_reply(b"\x02\x07", STATUS_BAD_REQUEST) == bytes([2, 0xFF, 7, 0, 0, 0, 0, 0])
    assert parse_reply(status_reply(release_request(3, 4), 0)) == \
        {"op": 2, "status": 0, "args": bytes([3, 4, 8, 0, 0, 0])}
    with pytest.raises(ValueError):
        parse_fault_reply(status_reply(fault_request(1), 0))
    with pytest.raises(ValueError):
        parse_reply(b"\x01\x00\x00")


def test_tile_needs_its_routes_and_checks_its_parameters():
    env = TileEnv(name="ctl", routes={"data": {None: [Endpoint("udp_tx", 2, 1)]}})
    with pytest.raises(ValueError, match="kernel"):
        KernelCtlTile(env)
    for bad in ({"queue": 0}, {"reply_timeout": 0}, {"queue": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            KernelCtlTile(TileEnv(), **bad)
    KernelCtlTile(TileEnv())            # standalone: elaborates with default hops


# -- the tile ----------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [64, 512])
def test_every_op_is_served_in_order(width):
    """Reads of every logged entry (and past the end, and an index above 255), releases and
    IPC grants and revokes, a few queued at a time with random stalls on both sides: each
    request sends its kernel message to the right tile and gets the model's reply."""
    rng = random.Random(width)
    model = ErrorManagerModel([((rng.randrange(8), rng.randrange(8)), fault_meta(rng))
                               for _ in range(5)])
    payloads = [fault_request(k) for k in range(5)] + [
        fault_request(5), fault_request(256 + 2), fault_request(0xFFFF),
        release_request(3, 0), release_request(1, 2, Fbits.LOCAL3),
        ipc_request(0, 1, IpcDir.OUT, 2, 3), ipc_request(2, 2, IpcDir.IN, 0, 0, 15, grant=False),
        fault_request(4) + b"trailing bytes are ignored, whatever their length" * 3,
    ]
    rng.shuffle(payloads)
    requests = udp_requests(rng, payloads)
    out, counters = run(width, requests, len(requests), model=model, stall=0.3, seed=width)
    check(out, requests, model)
    assert counters == {"reads": 9, "releases": 2, "grants": 2, "bad_request": 0,
                        "timeouts": 0, "overflow": 0, "dropped": 0}
    replies = [parse_reply(o[3]) for o in out if o[0] == "reply"]
    reads = [r for r in replies if r["op"] == OP_FAULT_READ and r["status"] == STATUS_OK]
    assert sorted((r["index"], r["x"], r["y"]) for r in reads) == sorted(
        (k, *model.faults[k][0]) for k in (0, 1, 2, 3, 4, 4))


@pytest.mark.parametrize("width", [64, 512])
def test_bad_requests_are_answered_and_counted(width):
    """Short requests of each op, unknown ops, an empty datagram, a bad fbits or dir: each
    answered with status 0xFF and the request's bytes echoed, no kernel message; a good
    request after them is served."""
    rng = random.Random(1)
    payloads = [b"", b"\x01", b"\x01\x00", b"\x02\x01\x02", bytes([3, 1, 2, 1, 4, 5]),
                bytes([4, 1]), b"\x00\x00\x00\x00", bytes([9, 1, 2, 3, 4, 5, 6, 7, 8]),
                bytes([OP_RELEASE, 1, 2, 16]), bytes([OP_IPC_GRANT, 1, 2, 0, 4, 5, 6]),
                bytes([OP_IPC_REVOKE, 1, 2, 3, 4, 5, 6]), bytes([OP_IPC_GRANT, 1, 2, 1, 4, 5, 99]),
                bytes([OP_IPC_REVOKE, 1, 2, 2, 4, 5, 16]),
                release_request(1, 1)]
    requests = udp_requests(rng, payloads)
    out, counters = run(width, requests, len(requests))
    check(out, requests, ErrorManagerModel([]))
    assert counters["bad_request"] == len(payloads) - 1
    assert counters["releases"] == 1
    assert [parse_reply(o[3])["status"] for o in out if o[0] == "reply"] == \
        [STATUS_BAD_REQUEST] * (len(payloads) - 1) + [STATUS_OK]


@pytest.mark.parametrize("width", [64, 512])
def test_stray_messages_are_dropped_and_counted(width):
    """A FAULT_ENTRY while no read waits, a kernel message of another type, a message of a
    non-UDP type, one with the wrong metadata length: dropped and counted in ``dropped``; the
    requests around them are served."""
    rng = random.Random(2)
    model = ErrorManagerModel([((1, 1), fault_meta(rng))])
    before, after = udp_requests(rng, [fault_request(0), release_request(0, 2)])
    wrong_meta = Message(NocHeader(dst_x=CTL[0], dst_y=CTL[1], dst_fbits=Fbits.LOCAL0,
                                   msg_type=UDP_RX_SEGMENT), [0], b"").flits(width)
    strays = [
        model.answer(width, 0),
        kernel_message_flits(width, KernelMsgType.CAP_RESULT.value, KernelMeta(), dst=CTL),
        segment(width, b"not a UDP segment", random_meta(rng),
                msg_type=MsgType.ETH_RX_FRAME.value),
        wrong_meta,
    ]
    inputs = [before] + [("raw", s) for s in strays] + [after]
    out, counters = run(width, inputs, 2, model=model, limit=1)
    check(out, [before, after], model)
    assert counters["dropped"] == 4
    assert counters["reads"] == counters["releases"] == 1


@pytest.mark.parametrize("width", [64, 512])
def test_a_silent_error_manager_times_out_and_a_late_answer_is_dropped(width):
    """Nobody answers a read: after reply_timeout cycles it is answered with status 0xFE and
    every field zero; the late FAULT_ENTRY that comes afterwards is dropped, and the next
    requests are served."""
    rng = random.Random(3)
    model = ErrorManagerModel([((2, 3), fault_meta(rng))])
    read, release = udp_requests(rng, [fault_request(0), release_request(2, 3)])
    out, counters = run(width, [read], 1, answer=False, reply_timeout=40)
    assert [o[0] for o in out] == ["kernel", "reply"]
    assert out[1][3] == fault_reply(0, STATUS_TIMEOUT, 0)
    assert counters["timeouts"] == 1
    late = ("raw", model.answer(width, 0))
    out, counters = run(width, [read, late, release, read], 3, model=model, limit=1,
                        answer=False, reply_timeout=40)
    replies = [parse_reply(o[3]) for o in out if o[0] == "reply"]
    assert [r["status"] for r in replies] == [STATUS_TIMEOUT, STATUS_OK, STATUS_TIMEOUT]
    assert counters["timeouts"] == 2 and counters["dropped"] == 1


@pytest.mark.parametrize("width", [64, 512])
def test_a_burst_overflows_the_queue_and_the_rest_is_answered(width):
    """Twelve requests back to back, faster than the tile serves them: those that find the
    queue full are dropped unanswered (counted in ``overflow``), every other one is answered,
    in order."""
    rng = random.Random(4)
    requests = udp_requests(rng, [release_request(k, k + 1) for k in range(12)])
    out, counters = run(width, requests, None, limit=None, queue=2, cycles=800)
    answered = 12 - counters["overflow"]
    assert 0 < counters["overflow"] < 12
    assert counters["releases"] == answered
    replies = [o[3] for o in out if o[0] == "reply"]
    assert len(replies) == answered
    xs = [r[2] for r in replies]
    assert xs == sorted(xs) and xs[0] == 0


@pytest.mark.parametrize("width", [64, 512])
def test_latency(width):
    """An idle tile: a release's kernel message starts 4 cycles after the request's last flit,
    its reply right after the kernel message; a read's reply right after the FAULT_ENTRY's
    last flit came in."""
    rng = random.Random(5)
    model = ErrorManagerModel([((1, 2), fault_meta(rng))])
    requests = udp_requests(rng, [release_request(1, 2), fault_request(0)])
    dut = ctl_tile(width)
    ends_in, out = [], []

    def last_flits(port, log, every=False):
        async def tb(ctx):
            cycle = 0
            async for _, _, v, r, last in ctx.tick().sample(port.valid, port.ready,
                                                            port.payload.last):
                if v and r and (last or every):
                    log.append((cycle, last))
                cycle += 1
        return tb

    async def tb(ctx):
        ctx.set(dut.noc_out.ready, 1)
        for _, payload, meta in requests:
            await send_flits(ctx, dut.noc_in, segment(width, payload, meta))
            await ctx.tick().repeat(30)
            if payload[0] == OP_FAULT_READ:
                await send_flits(ctx, dut.noc_in, model.answer(width, 0))
                await ctx.tick().repeat(30)

    simulate(dut, tb, background=[last_flits(dut.noc_in, ends_in),
                                  last_flits(dut.noc_out, out, every=True)])
    starts = [c for k, (c, _) in enumerate(out) if k == 0 or out[k - 1][1]]
    ends = [c for c, last in out if last]
    release_in, read_in, answer_in = (c for c, _ in ends_in)
    assert len(starts) == 4
    assert starts[0] == release_in + 4          # RELEASE
    assert starts[1] == ends[0] + 1             # its reply
    assert starts[2] == read_in + 4             # FAULT_READ
    assert starts[3] == answer_in + 1           # the fault reply
