"""TcpEchoTile and TcpSenderTile (beehive/apps/tcp_echo.py, tcp_sender.py) on their own in
Amaranth's simulator, at 64 and 512 bits, against tests/apps/tcp_model.py playing the TCP
engine (RX and TX tiles) and the memory tiles of its rings: the model answers requests as the
engine does and checks every message (destination, sub-ports, fields, pointers, reads and
writes against what was reported and granted, one job per flow at a time); the input has
seeded random gaps, the output random stalls, and every input flit must be taken at once (the
tiles never hold their input). The echo runs with one job at a time (``jobs=1``) and with
several."""

import random
from types import SimpleNamespace

import pytest

from apiary.noc.header import Fbits, Message
from apiary.noc.testbench import recv_flits
from apiary.os.memory_tile import LOAD_MEM_ACK, STORE_MEM_ACK, mem_message_flits
from apiary.stream.testbench import simulate
from apiary.tile import Endpoint, TileEnv
from beehive.apps import TcpEchoTile, TcpSenderTile
from beehive.apps.tcp_echo import ROOM_GRACE
from beehive.apps.tcp_sender import stream_bytes
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import (BufferKind, Status, app_message_flits, decode_app_message,
                                   flow_handle, handle_slot)
from tcp_model import TcpEngineModel, beside_a_frozen_peer

WIDTHS = [64, 512]
APP, RX, TX, RX_MEM, TX_MEM = (1, 1), (2, 1), (3, 1), (0, 2), (3, 2)
CONFIG = TcpConfig(flows=4, rx_ring=256, tx_ring=256, mss=64)
CHUNK = 100                 # not a multiple of a word; the rings wrap every few chunks
MAX_WAIT = 2                # cycles an input flit may wait to be taken
ENGINE_MESSAGES = {t.value for t in (MsgType.TCP_NEW_FLOW_NOTIF, MsgType.TCP_RX_MSG_RESP,
                                     MsgType.TCP_TX_MSG_RESP)}


def app_env(width, **routes):
    table = {"tcp_rx": [Endpoint("tcp_rx", *RX, Fbits.LOCAL2)],
             "tcp_tx": [Endpoint("tcp_tx", *TX)],
             "rx_mem": [Endpoint("rx_mem", *RX_MEM)], "tx_mem": [Endpoint("tx_mem", *TX_MEM)]}
    table.update(routes)
    return TileEnv(name="app", x=APP[0], y=APP[1], width=width, routes={"data": table})


def model_for(width, seed, **options):
    return TcpEngineModel(CONFIG, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                          rng=random.Random(1000 + seed), **options)


def echo_tile(width, jobs, chunk=CHUNK, **options):
    return TcpEchoTile(app_env(width), config=CONFIG, chunk=chunk, jobs=jobs, **options)


def closed(flow):
    """The tile closed ``flow`` and its peer read everything."""
    return flow.closed_at is not None and flow.una == flow.tail


def read_counters(ctx, tile):
    return {name: ctx.get(getattr(tile.counters, name))
            for name in tile.signature.members["counters"].signature.members}


async def put_flits(ctx, port, flits, rng=None, gaps=0.0):
    """Send flits, returning the most cycles one waited to be taken."""
    worst = 0
    for data, last in flits:
        while rng is not None and rng.random() < gaps:
            await ctx.tick()
        ctx.set(port.payload, {"data": data, "last": last})
        ctx.set(port.valid, 1)
        wait = 0
        while not (await ctx.tick().sample(port.ready))[2]:
            wait += 1
        ctx.set(port.valid, 0)
        worst = max(worst, wait)
    return worst


def run(tile, model, *, seed, script, until, timeout, gaps=0.3, stall=0.3, settle=300):
    """Run ``tile`` against ``model`` (``script(model)`` each cycle) until ``until(model)``,
    then ``settle`` cycles more (whatever the tile sends meanwhile is checked too). Returns the
    counters and ``stats``: ``cycles`` to ``until``, ``max_wait`` of an input flit,
    ``delivered`` (``(msg_type, flow, status)`` of the engine messages, in the order the tile
    got them)."""
    rng_in, rng_out = random.Random(seed), random.Random(seed + 1)
    stats = SimpleNamespace(cycles=0, max_wait=0, delivered=[])
    counters = {}

    async def clock(ctx):
        while True:
            await ctx.tick()
            model.tick()
            script(model)

    async def source(ctx):
        while True:
            item = model.next_message()
            if item is None:
                await ctx.tick()
                continue
            flits, delivered = item
            wait = await put_flits(ctx, tile.noc_in, flits, rng_in, gaps)
            stats.max_wait = max(stats.max_wait, wait)
            if Message.from_flits(flits, tile.env.width).header.msg_type in ENGINE_MESSAGES:
                header, fields = decode_app_message(flits, tile.env.width)
                stats.delivered.append((header.msg_type, fields["flow"], fields["status"]))
            if delivered is not None:
                delivered()

    async def sink(ctx):
        port, flits = tile.noc_out, []
        while True:
            ctx.set(port.ready, int(rng_out.random() >= stall))
            _, _, ready, valid, flit = await ctx.tick().sample(port.ready, port.valid,
                                                               port.payload)
            if ready and valid:
                flits.append((int(flit.data), int(flit.last)))
                if flit.last:
                    model.receive(flits)
                    flits = []

    async def main(ctx):
        while not until(model):
            await ctx.tick()
        stats.cycles = model.cycle
        for _ in range(settle):
            await ctx.tick()
        counters.update(read_counters(ctx, tile))

    simulate(tile, main, background=[clock, source, sink], timeout=timeout)
    return counters, stats


def sent_types(model, *types):
    """The fields of the tile's messages of the given types, in order."""
    values = {t.value for t in types}
    return [fields for _, t, fields in model.received if t in values]


# -- the echo ------------------------------------------------------------------------------------

def stray_messages(width, stale):
    """Six messages the echo must drop: no job or flow of its matches them."""
    nobody = flow_handle(3, 9)                  # slot 3 never holds a connection here
    ring3 = 3 * CONFIG.tx_ring
    app = dict(dst=APP, src=TX)
    return [
        ("tx", app_message_flits(width, MsgType.TCP_TX_MSG_RESP.value, flow=nobody, length=50,
                                 **app)),
        ("mem", mem_message_flits(width, STORE_MEM_ACK, ring3, 5, dst=APP, src=TX_MEM,
                                  dst_fbits=Fbits.LOCAL1, wrap=8)),
        ("mem", mem_message_flits(width, LOAD_MEM_ACK, ring3, 64, bytes(range(64)), dst=APP,
                                  src=RX_MEM, dst_fbits=Fbits.LOCAL1, wrap=8)),
        ("rx", app_message_flits(width, MsgType.TCP_RX_MSG_REQ.value, flow=nobody, **app)),
        ("rx", app_message_flits(width, MsgType.TCP_RX_MSG_RESP.value, flow=stale, length=9,
                                 **app)),
        ("rx", app_message_flits(width, MsgType.TCP_RX_MSG_RESP.value, flow=nobody, length=9,
                                 dst_fbits=Fbits.LOCAL3, **app)),
    ]


@pytest.mark.parametrize("jobs", [1, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_echo_echoes_closes_and_survives_a_reset(width, jobs):
    """Three connections at once: A (700 bytes, more than a chunk at a time, wrapping the
    rings; then FIN), C (one byte with its FIN) and B, whose peer never reads: B's send ring
    fills, its job waits for room, and B is reset under it; the slot then holds a new
    connection B2 (150 bytes, FIN). Each connection gets its own bytes back, in order, and
    A, C and B2 are closed after their last byte; B is forgotten. Stray and stale messages
    are dropped and counted."""
    stats = echo_scenario(width, seed=width, jobs=jobs)
    assert stats.reported > CHUNK
    print(f"echo at {width} bits, {jobs} jobs: {stats.cycles} cycles")


def echo_scenario(width, seed, jobs, chunk=CHUNK, **stalls):
    rng = random.Random(seed)
    model = model_for(width, seed)
    tile = echo_tile(width, jobs, chunk)
    data = {"A": rng.randbytes(700), "B": rng.randbytes(400), "C": b"!", "B2": rng.randbytes(150)}
    flows = {"A": model.announce(0, 1), "C": model.announce(2, 3), "B": model.announce(1, 5)}
    flows["B"].drain = False
    model.deliver(flows["A"], data["A"], fin=True)
    model.deliver(flows["C"], data["C"], fin=True)
    model.deliver(flows["B"], data["B"])
    s = SimpleNamespace(reset_at=None, strays=False, b_written=None)

    def script(model):
        b = flows["B"]
        if b.state == "open" and b.tx_req is not None and model.cycle - b.tx_req_since > 100:
            model.reset(b)
            s.reset_at, s.b_written = model.cycle, model.written(b)
        if "B2" not in flows and s.reset_at is not None and model.cycle > s.reset_at + 50:
            flows["B2"] = model.announce(1, 6)
            model.deliver(flows["B2"], data["B2"], fin=True)
        if "B2" in flows and not s.strays and model.cycle > s.reset_at + 80:
            for source, flits in stray_messages(width, stale=b.handle):
                model.inject(source, flits)
            s.strays = True

    def done(model):
        return s.strays and model.idle() and all(
            closed(f) for k, f in flows.items() if k != "B")

    counters, stats = run(tile, model, seed=seed, script=script, until=done, timeout=60_000,
                          **stalls)

    for name in ("A", "C", "B2"):
        f = flows[name]
        assert bytes(f.sent) == data[name], name
        assert f.fin and f.closed_at == len(data[name]) and f.late == 0, name
    b = flows["B"]
    assert b.state == "reset" and 0 < b.tail < len(data["B"])
    assert s.b_written == data["B"][:b.tail]
    # Served a chunk at a time, with responses reporting more than a chunk.
    stats.reported = max(f.get("length", 0) for t, f in model.sent
                         if t == MsgType.TCP_RX_MSG_RESP.value)
    asked = max(f["length"] for f in sent_types(model, MsgType.TCP_TX_MSG_REQ))
    assert asked == min(chunk, stats.reported)
    # A's chunks use the room left from the grant before without asking again (its credit):
    # each grant is the free part of its 256-byte ring, two chunks' worth or more.
    a = flows["A"].handle
    asks = [f for f in sent_types(model, MsgType.TCP_TX_MSG_REQ) if f["flow"] == a]
    writes = [f for f in sent_types(model, MsgType.TCP_TX_ADJUST_PTR) if f["flow"] == a]
    assert len(writes) >= -(-700 // chunk) and len(asks) < len(writes), (len(asks), len(writes))
    assert {f["length"] for f in sent_types(model, MsgType.TCP_RX_MSG_REQ)} == {1}
    assert counters == {"flows": 4, "bytes": 700 + 1 + 150 + b.tail, "closed": 3, "ended": 1,
                        "send_notifs": 4, "mem_errors": 0, "dropped": 6}
    assert stats.max_wait <= MAX_WAIT
    return stats


@pytest.mark.parametrize("jobs", [1, 4])
@pytest.mark.parametrize("width, seed", [(64, 8), (64, 37), (64, 75), (512, 0), (512, 1),
                                         (512, 4)])
def test_echo_under_random_resets(width, seed, jobs):
    """Ten connections through four slots, each with 0 to 300 bytes and FIN, about half of
    them reset at a random moment (in any phase of their jobs: waiting for room, loading,
    storing, between requests); a slot is reused once its connection is over. Those not reset
    get their bytes back and are closed; those reset had only their own bytes, in order,
    echoed. What reaches the tile about a flow after its end (answers that crossed the reset)
    is dropped, and nothing else. (At 64 bits, seeds 8 and 37 with one job, 8 and 75 with
    four, end a flow while a request of its is half sent.)"""
    stats = churn_scenario(width, seed=seed, jobs=jobs)
    print(f"churn at {width} bits, {jobs} jobs: {stats.cycles} cycles, {stats.resets} resets")


def churn_scenario(width, seed, jobs, conns=10, chunk=CHUNK, **stalls):
    rng = random.Random(seed)
    model = model_for(width, seed)
    tile = echo_tile(width, jobs, chunk)
    within = 800 if width < 512 else 250     # a connection's lifetime, roughly
    plan = [(rng.randbytes(rng.randrange(301)), rng.randrange(20, within)
             if rng.random() < 0.5 else None) for _ in range(conns)]
    live = []                               # (flow, data, reset at) of those announced
    free_at = {slot: 0 for slot in range(CONFIG.flows)}
    gens = dict.fromkeys(free_at, 0)
    written = {}

    def script(model):
        for f, _, at in live:
            if model.flows[f.slot] is not f:
                continue                        # its slot holds a later connection
            if at is not None and model.cycle >= at and f.state == "open" \
                    and f.closed_at is None:
                model.reset(f)
                written[f.handle] = model.written(f)
                free_at[f.slot] = model.cycle + 300     # its in-flight requests drain first
            elif closed(f) and free_at[f.slot] is None:
                free_at[f.slot] = model.cycle
        for slot, at in free_at.items():
            if at is not None and model.cycle >= at and len(live) < conns:
                data, reset = plan[len(live)]
                gens[slot] += 1
                f = model.announce(slot, gens[slot])
                model.deliver(f, data, fin=True)
                live.append((f, data, None if reset is None else model.cycle + reset))
                free_at[slot] = None

    def done(model):
        return len(live) == conns and model.idle() and all(
            f.state == "reset" or closed(f) for f, _, _ in live)

    counters, stats = run(tile, model, seed=seed, script=script, until=done, timeout=100_000,
                          **stalls)
    for f, data, _ in live:
        if f.state == "reset":
            assert written[f.handle] == data[:f.tail]
        else:
            assert bytes(f.sent) == data and f.closed_at == len(data) and f.late == 0
    resets = sum(f.state == "reset" for f, _, _ in live)
    handed = {}
    for f in sent_types(model, MsgType.TCP_TX_ADJUST_PTR):
        handed[f["flow"]] = max(handed.get(f["flow"], 0), f["ptr"])
    assert {f["length"] for f in sent_types(model, MsgType.TCP_RX_MSG_REQ)} == {1}
    closes = len(sent_types(model, MsgType.TCP_CLOSE_REQ))   # a reset may cross a close
    assert conns - resets <= closes <= conns
    assert counters == {"flows": conns, "bytes": sum(handed.values()), "closed": closes,
                        "ended": resets, "send_notifs": conns, "mem_errors": 0,
                        "dropped": after_the_end(stats.delivered)}
    assert stats.max_wait <= MAX_WAIT
    stats.resets = resets
    return stats


def after_the_end(delivered):
    """How many responses reached the tile after their flow's end had (a response whose
    status is not OK, or EOF for the receive side): those the tile must drop."""
    ended, late = set(), 0
    for msg_type, flow, status in delivered:
        if msg_type == MsgType.TCP_NEW_FLOW_NOTIF.value:
            continue
        if flow in ended:
            late += 1
        elif status not in (Status.OK, Status.EOF) or (
                msg_type == MsgType.TCP_TX_MSG_RESP.value and status != Status.OK):
            ended.add(flow)
    return late


def notification(width, handle, kind, slot):
    ring = CONFIG.rx_ring if kind == BufferKind.RECEIVE else CONFIG.tx_ring
    mem = RX_MEM if kind == BufferKind.RECEIVE else TX_MEM
    return app_message_flits(width, MsgType.TCP_NEW_FLOW_NOTIF.value, dst=APP, src=RX,
                             src_fbits=Fbits.LOCAL2, flow=handle, kind=kind, addr=slot * ring,
                             size_log2=8, mem_x=mem[0], mem_y=mem[1])


def rx_response(width, handle, status=Status.OK, length=0):
    return app_message_flits(width, MsgType.TCP_RX_MSG_RESP.value, dst=APP, src=RX,
                             src_fbits=Fbits.LOCAL2, flow=handle, status=status, ptr=0,
                             addr=handle_slot(handle) * 256, size_log2=8, length=length)


def announce(width, handle):
    slot = handle_slot(handle)
    return [notification(width, handle, BufferKind.RECEIVE, slot),
            notification(width, handle, BufferKind.SEND, slot)]


async def take_until_quiet(ctx, tile, width, quiet_for=200):
    """The messages ``noc_out`` sends until it has been idle for ``quiet_for`` cycles, as
    ``(msg_type, flow, length)``."""
    out, quiet = [], 0
    while quiet < quiet_for:
        if ctx.get(tile.noc_out.valid):
            header, fields = decode_app_message(await recv_flits(ctx, tile.noc_out), width)
            assert (header.src_x, header.src_y, header.src_fbits) == (*APP, Fbits.LOCAL0)
            to_rx = header.msg_type in (MsgType.TCP_RX_MSG_REQ.value,
                                        MsgType.TCP_RX_ADJUST_PTR.value)
            assert (header.dst_x, header.dst_y, header.dst_fbits) == \
                ((*RX, Fbits.LOCAL2) if to_rx else (*TX, Fbits.LOCAL0))
            out.append((header.msg_type, fields["flow"], fields["length"]))
            quiet = 0
        else:
            await ctx.tick()
            quiet += 1
    return out


@pytest.mark.parametrize("jobs", [1, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_echo_takes_every_message_while_its_output_is_blocked(width, jobs):
    """With ``noc_out`` held, a burst of notifications, responses, resets and strays (an ack
    with data) is taken without waiting, while slots are reset and reused under the queued
    work and the jobs already started: once the output moves, each slot's first request goes
    out once, for its newest connection, and the jobs serve only responses of connections
    still open (a job whose connection was reset before its request went out sends
    nothing). With one job (and ``room_grace`` 64), slot 0's gives itself up while it waits
    for room that does not come, and the others are served."""
    tile = echo_tile(width, jobs, room_grace=64)
    h = {(slot, gen): flow_handle(slot, gen) for slot in range(4) for gen in range(1, 4)}
    burst = [
        *announce(width, h[3, 2]),          # its first request waits for the output
        *announce(width, h[0, 1]),          # queued behind it...
        rx_response(width, h[0, 1], Status.RESET),
        *announce(width, h[0, 2]),          # ...and the slot reused: still queued once
        *announce(width, h[1, 2]), *announce(width, h[2, 2]),
        *(rx_response(width, h[slot, 2], length=10 + slot) for slot in range(4)),
        rx_response(width, h[1, 2], Status.RESET),  # its response is queued behind slot 0's
        *announce(width, h[1, 3]),
        mem_message_flits(width, LOAD_MEM_ACK, 40, 200, bytes(200), dst=APP, src=RX_MEM,
                          dst_fbits=Fbits.LOCAL1, wrap=8),
        app_message_flits(width, MsgType.TCP_OPEN_REQ.value, dst=APP, src=RX),
    ]
    out, counters = {}, {}

    async def tb(ctx):
        ctx.set(tile.noc_out.ready, 0)
        for flits in burst:
            assert await put_flits(ctx, tile.noc_in, flits) <= MAX_WAIT
        for _ in range(50):
            await ctx.tick()
        out["released"] = await take_until_quiet(ctx, tile, width)
        # The first job's answer: its connection is gone (the job, given up for the others
        # with one job, left the answer to the table: the connection ends there too).
        await put_flits(ctx, tile.noc_in, app_message_flits(
            width, MsgType.TCP_TX_MSG_RESP.value, dst=APP, src=TX, flow=h[0, 2],
            status=Status.CLOSED))
        out["after"] = await take_until_quiet(ctx, tile, width)
        counters.update(read_counters(ctx, tile))

    simulate(tile, tb, timeout=20_000)
    rx_req, tx_req = MsgType.TCP_RX_MSG_REQ.value, MsgType.TCP_TX_MSG_REQ.value
    # Slot 1's job (with several jobs, started before its reset) is never served.
    assert sorted(out["released"]) == sorted(
        [(rx_req, h[slot, gen], 1) for slot, gen in ((3, 2), (0, 2), (1, 3), (2, 2))]
        + [(tx_req, h[slot, 2], 10 + slot) for slot in (0, 2, 3)])
    assert out["after"] == []
    assert counters == {"flows": 6, "bytes": 0, "closed": 0, "ended": 3, "send_notifs": 6,
                        "mem_errors": 0, "dropped": 2}


@pytest.mark.parametrize("jobs", [1, 2, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_echo_overlaps_the_jobs_of_several_flows(width, jobs):
    """Four connections busy at once (300 to 700 bytes each, then FIN), memory acks 8 cycles
    late and in any order (as from several memory tiles): the tile has ``jobs`` flows under
    way at once (the model's count of flows with a ``TCP_TX_MSG_REQ`` or a ``LOAD_MEM``
    unanswered: a job waiting for room may give itself up to another flow, so more may wait
    for room), never more than ``jobs`` with a memory request unanswered, and every connection
    gets its bytes back, in order, then its close."""
    seed = width + jobs
    rng = random.Random(seed)
    model = model_for(width, seed, mem_latency=8, mem_any_order=True)
    tile = echo_tile(width, jobs)
    data = [rng.randbytes(rng.randrange(300, 701)) for _ in range(CONFIG.flows)]
    flows = [model.announce(slot, 2) for slot in range(CONFIG.flows)]
    for f, d in zip(flows, data):
        model.deliver(f, d, fin=True)
    counters, stats = run(tile, model, seed=seed, script=lambda model: None,
                          until=lambda model: model.idle() and all(map(closed, flows)),
                          timeout=60_000)
    for f, d in zip(flows, data):
        assert bytes(f.sent) == d and f.closed_at == len(d) and f.late == 0
    assert model.max_busy >= jobs and model.max_memory <= jobs
    assert counters == {"flows": 4, "bytes": sum(map(len, data)), "closed": 4, "ended": 0,
                        "send_notifs": 4, "mem_errors": 0, "dropped": 0}
    assert stats.max_wait <= MAX_WAIT
    print(f"overlap at {width} bits, {jobs} jobs: {stats.cycles} cycles")


@pytest.mark.parametrize("jobs", [1, 2, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_echo_serves_other_flows_while_one_waits_for_room(width, jobs):
    """B's peer does not read: B's send ring fills and its job waits for room (its
    ``TCP_TX_MSG_REQ`` unanswered). Only then do A, C and D get their bytes (and FIN): on the
    jobs left (with one job, B's gives itself up to them) they are all echoed and closed
    while B's request stays unanswered. B's peer then reads, and B gets the rest of its
    bytes back and is closed."""
    seed = 3 * width + jobs
    rng = random.Random(seed)
    model = model_for(width, seed)
    tile = echo_tile(width, jobs)
    data = {name: rng.randbytes(size) for name, size in
            (("A", 500), ("B", 600), ("C", 300), ("D", 400))}
    flows = {name: model.announce(slot, 1) for slot, name in enumerate(data)}
    b, others = flows["B"], [flows[name] for name in "ACD"]
    b.drain = False
    model.deliver(b, data["B"], fin=True)
    s = SimpleNamespace(stuck_since=None, released=None, still_waiting=False)

    def script(model):
        if s.stuck_since is None and b.tx_req is not None and model.cycle > b.tx_req_since + 50:
            s.stuck_since = b.tx_req_since
            for name in "ACD":
                model.deliver(flows[name], data[name], fin=True)
        if s.released is None and all(map(closed, others)):
            s.released = model.cycle
            s.still_waiting = b.tx_req is not None and b.tx_req_since == s.stuck_since
            b.drain = True

    counters, stats = run(tile, model, seed=seed, script=script,
                          until=lambda model: s.released and closed(b) and model.idle(),
                          timeout=60_000)
    assert s.stuck_since is not None and s.still_waiting
    for name, f in flows.items():
        assert bytes(f.sent) == data[name] and f.closed_at == len(data[name]) and f.late == 0
    assert counters == {"flows": 4, "bytes": sum(map(len, data.values())), "closed": 4,
                        "ended": 0, "send_notifs": 4, "mem_errors": 0, "dropped": 0}
    assert stats.max_wait <= MAX_WAIT


@pytest.mark.parametrize("width", WIDTHS)
def test_echo_resets_flows_with_jobs_in_flight(width):
    """Memory acks come 120 cycles late, in any order. Three connections are reset with a job
    in flight, each at another step: X once its ``LOAD_MEM`` is out, Y once its ``STORE_MEM``
    is out, Z (whose peer does not read) while its ``TCP_TX_MSG_REQ`` waits for room; each
    slot at once holds a new connection (X2, Y2, Z2) with bytes and FIN, while W echoes
    throughout. The dead jobs' acks are taken (X's loaded bytes discarded, nothing more sent
    for X, Y or Z: the model fails on any step after an end); the new connections' responses
    come while their slots' dead jobs still wait for their acks, and their jobs start only
    after them (the model fails on a request for a slot whose previous connection has a
    memory request unanswered), though with eight jobs for four flows a job is free; every
    byte of X2, Y2, Z2 and W comes back and they are closed."""
    seed = width + 11
    rng = random.Random(seed)
    model = model_for(width, seed, mem_latency=120, mem_any_order=True)
    tile = echo_tile(width, 8)
    sizes = {"X": 300, "Y": 300, "Z": 600, "W": 700, "X2": 250, "Y2": 250, "Z2": 250}
    data = {name: rng.randbytes(size) for name, size in sizes.items()}
    flows = {name: model.announce(slot, 1) for slot, name in enumerate("XYZW")}
    flows["Z"].drain = False
    for name in "XYZW":
        model.deliver(flows[name], data[name], fin=True)
    written = {}
    triggers = {"X": lambda f: f.loads_out > 0, "Y": lambda f: f.stores_out > 0,
                "Z": lambda f: f.tx_req is not None and model.cycle > f.tx_req_since + 30}

    def script(model):
        for name, now in triggers.items():
            f = flows[name]
            if f.state == "open" and now(f):
                model.reset(f)
                written[name] = model.written(f)
                flows[name + "2"] = model.announce(f.slot, 2)
                model.deliver(flows[name + "2"], data[name + "2"], fin=True)

    counters, stats = run(tile, model, seed=seed, script=script,
                          until=lambda model: len(flows) == 7 and model.idle() and all(
                              closed(flows[name]) for name in ("X2", "Y2", "Z2", "W")),
                          timeout=60_000)
    for name in ("X2", "Y2", "Z2", "W"):
        f = flows[name]
        assert bytes(f.sent) == data[name] and f.closed_at == len(data[name]) and f.late == 0
    for name in "XYZ":
        f = flows[name]
        assert f.state == "reset" and written[name] == data[name][:f.tail]
    x, y = flows["X"], flows["Y"]
    assert x.tail == 0 and x.load_seen > x.end_seen and y.store_seen > y.end_seen
    # The new connections' first responses reached the tile before the dead jobs' acks.
    assert flows["X2"].rx_seen[0] < x.load_seen and flows["Y2"].rx_seen[0] < y.store_seen
    resent = sum(len(data[name]) for name in ("X2", "Y2", "Z2", "W"))
    assert counters == {"flows": 7, "bytes": resent + sum(flows[n].tail for n in "XYZ"),
                        "closed": 4, "ended": 3, "send_notifs": 7, "mem_errors": 0,
                        "dropped": after_the_end(stats.delivered)}
    assert stats.max_wait <= MAX_WAIT


def cycles_per_job(jobs, mem_latency, width=512, size=1024):
    """Cycles per 64-byte job, the tile's steady pace, with four flows that always have bytes
    to echo and room for them, no gaps or stalls, the model answering at once but for memory
    acks ``mem_latency`` cycles late."""
    rng = random.Random(jobs)
    model = model_for(width, jobs, mem_latency=mem_latency, burst=256, arrive=1.0, read=1.0)
    tile = echo_tile(width, jobs, chunk=64)
    flows = [model.announce(slot, 1) for slot in range(CONFIG.flows)]
    for f in flows:
        model.deliver(f, rng.randbytes(size))
    run(tile, model, seed=jobs, script=lambda model: None, gaps=0, stall=0, settle=0,
        until=lambda model: all(f.una == size for f in flows), timeout=30_000)
    done = [cycle for cycle, t, _ in model.received if t == MsgType.TCP_TX_ADJUST_PTR.value]
    assert len(done) == len(flows) * size // 64
    return (done[-1] - done[len(flows)]) / (len(done) - len(flows) - 1)


def test_echo_throughput_grows_with_jobs():
    """At 512 bits with 64-byte chunks: with the model answering at once, four jobs finish one
    every 8 cycles at most (the output port's limit is 7: a store's two flits and five
    one-flit requests); with memory acks 20 cycles late, four jobs take at most a third of
    the cycles per job that one job takes."""
    pace = {(jobs, latency): cycles_per_job(jobs, latency) for jobs in (1, 4)
            for latency in (0, 20)}
    print("cycles per job (jobs, memory latency):", pace)
    assert pace[4, 0] <= 8
    assert 3 * pace[4, 20] <= pace[1, 20]


def echo_beside_a_frozen_peer(width, jobs, frozen, size=1500):
    """Cycles connection A's echo takes from its bytes' arrival (all at once, with FIN) to its
    close, alone or (``frozen``) beside connection B, whose peer stops reading: B's send ring
    fills and its next job waits for room. A's bytes come once B's ``TCP_TX_MSG_REQ`` has
    waited longer than a job holds on before it gives itself up (``ROOM_GRACE``); memory
    acks at once, no gaps or stalls. Returns ``(cycles, flows)``."""
    model = model_for(width, 7, burst=4096, arrive=1.0, read=1.0)
    rng = random.Random(width)
    data = {"A": rng.randbytes(size), "B": rng.randbytes(CONFIG.tx_ring + 3 * CHUNK)}
    flows, s, script = beside_a_frozen_peer(model, frozen, data["A"], data["B"],
                                            wait=ROOM_GRACE + 50, now=False)
    counters, stats = run(echo_tile(width, jobs), model, seed=1, script=script,
                          until=lambda m: closed(flows["A"]), timeout=100_000, gaps=0.0,
                          stall=0.0, settle=10)
    assert bytes(flows["A"].sent) == data["A"]
    if frozen:
        b = flows["B"]
        written = model.written(b)          # the ring full but for less than a chunk
        assert data["B"].startswith(written) and len(written) > CONFIG.tx_ring - CHUNK
        assert s.b_waits()
    return stats.cycles - s.start, flows


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("width", WIDTHS)
def test_echo_a_frozen_peer_holds_no_other_connection_up(width, jobs):
    """Issue 38's frozen peer: B's peer stops reading and its job waits for room; A's bytes,
    sent meanwhile, are echoed in the same number of cycles as with A alone (with one job,
    B's gives itself up as A's response comes)."""
    alone, _ = echo_beside_a_frozen_peer(width, jobs, frozen=False)
    beside, _ = echo_beside_a_frozen_peer(width, jobs, frozen=True)
    print(f"{width} bits, {jobs} jobs: A alone {alone} cycles, beside frozen B {beside}")
    assert beside <= alone * 1.01, (alone, beside)


# -- the sender ----------------------------------------------------------------------------------

PEER = ("10.0.0.1", 5001)


def sender(width, **params):
    params = dict(dict(peer_ip=PEER[0], peer_port=PEER[1], local_port=40001, length=1234,
                       start=30, retry=150, chunk=CHUNK), **params)
    return TcpSenderTile(app_env(width), config=CONFIG, **params)


@pytest.mark.parametrize("width", WIDTHS)
def test_sender_retries_then_sends_the_stream_and_closes(width):
    """The first open is answered UNREACHABLE; ``retry`` cycles later the tile opens again, and
    sends its 1234 bytes (13 chunks, the ring wrapping) while the peer reads at its own pace;
    the send ring receives exactly the ``k % 251`` stream, then the close."""
    stats = sender_scenario(width, seed=width + 7)
    print(f"sender at {width} bits: {stats.cycles} cycles")


def sender_scenario(width, seed, length=1234, chunk=CHUNK, **stalls):
    model = model_for(width, seed)
    model.open_answers.append(Status.UNREACHABLE)
    tile = sender(width, length=length, chunk=chunk)

    def done(model):
        f = model.flows.get(0)
        return f is not None and f.closed_at is not None and f.una == f.tail

    counters, stats = run(tile, model, seed=seed, script=lambda model: None, until=done,
                          timeout=60_000, **stalls)
    (first, req1), (second, req2) = model.opens
    assert req1 == req2 and (req1["peer_ip"], req1["peer_port"], req1["local_port"]) == \
        (0x0A000001, PEER[1], 40001)
    assert first >= 30
    (failed_at, status), = model.answered
    assert status == Status.UNREACHABLE and second - failed_at >= 150
    f = model.flows[0]
    assert bytes(f.sent) == stream_bytes(length) and f.closed_at == length
    assert sent_types(model, MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_ADJUST_PTR) == []
    assert counters == {"opens": 2, "opened": 1, "failed": 1, "bytes": length, "closed": 1,
                        "ended": 0, "mem_errors": 0, "dropped": 0}
    assert stats.max_wait <= MAX_WAIT
    return stats


@pytest.mark.parametrize("width", WIDTHS)
def test_sender_gives_up_after_its_attempts(width):
    """Two attempts, both refused (REFUSED, then BUSY): two opens, ``retry`` apart, no third."""
    model = model_for(width, 3)
    model.open_answers.extend([Status.REFUSED, Status.BUSY])
    tile = sender(width, attempts=2, retry=60, start=0)
    counters, _ = run(tile, model, seed=3, script=lambda model: None,
                      until=lambda model: len(model.answered) == 2, timeout=20_000, settle=400)
    assert len(model.opens) == 2 and model.opens[1][0] - model.answered[0][0] >= 60
    assert counters == {"opens": 2, "opened": 0, "failed": 2, "bytes": 0, "closed": 0,
                        "ended": 0, "mem_errors": 0, "dropped": 0}


@pytest.mark.parametrize("width", WIDTHS)
def test_sender_stops_when_the_connection_is_reset(width):
    """Reset while it waits for room (the peer does not read): the tile stops, without
    closing, though the engine never answers its pending request; an answer that comes
    after all (it crossed the reset) is dropped, not acted on."""
    model = model_for(width, 5)
    tile = sender(width, length=2000, start=0)
    s = SimpleNamespace(reset_at=None, late=False)

    def script(model):
        f = model.flows.get(0)
        if f is not None and f.state == "open":
            f.drain = False
            if f.tx_req is not None and model.cycle - f.tx_req_since > 50:
                model.reset(f)
                s.reset_at = model.cycle
        if s.reset_at is not None and not model.queues["rx"] and not s.late \
                and model.cycle > s.reset_at + 40:
            model.inject("tx", app_message_flits(
                width, MsgType.TCP_TX_MSG_RESP.value, dst=APP, src=TX, flow=f.handle,
                ptr=f.tail, addr=f.tail % 256, size_log2=8, length=256))
            s.late = True

    counters, _ = run(tile, model, seed=5, script=script,
                      until=lambda model: s.late and model.idle(), timeout=30_000, settle=400)
    f = model.flows[0]
    assert model.written(f) == stream_bytes(f.tail) and 0 < f.tail < 2000
    assert f.closed_at is None and f.late == 0
    assert sent_types(model, MsgType.TCP_TX_MSG_REQ)[-1]["length"] == CHUNK
    assert counters == {"opens": 1, "opened": 1, "failed": 0, "bytes": f.tail, "closed": 0,
                        "ended": 1, "mem_errors": 0, "dropped": 1}


# -- parameters ----------------------------------------------------------------------------------

def test_parameters_and_routes_are_checked():
    for cls in (TcpEchoTile, TcpSenderTile):
        cls(TileEnv(), config=CONFIG)               # standalone: engine at (0, 0)
        with pytest.raises(ValueError, match="tcp_tx"):
            cls(app_env(64, tcp_tx=[]), config=CONFIG)
        with pytest.raises(ValueError, match="LOCAL2"):
            cls(app_env(64, tcp_rx=[Endpoint("tcp_rx", *RX)]), config=CONFIG)
        for chunk in (0, CONFIG.tx_ring + 1, True):
            with pytest.raises(ValueError, match="chunk"):
                cls(app_env(64), config=CONFIG, chunk=chunk)
        with pytest.raises(TypeError, match="TcpConfig"):
            cls(app_env(64), config={"flows": 4})
    assert TcpEchoTile(app_env(64), config=CONFIG).chunk == 64     # min(mss, tx_ring // 2)
    assert TcpEchoTile(app_env(64), config=CONFIG).jobs == 4
    assert TcpEchoTile(app_env(64), config=CONFIG).room_grace == ROOM_GRACE == 1024
    for grace in (0, 1 << 16, True):
        with pytest.raises(ValueError, match="room_grace must be an integer from 1 to 65535"):
            TcpEchoTile(app_env(64), config=CONFIG, room_grace=grace)
    for jobs in (0, 65, True, 2.0):
        with pytest.raises(ValueError, match="jobs"):
            TcpEchoTile(app_env(64), config=CONFIG, jobs=jobs)
    for bad in (dict(peer_ip="10.0.0"), dict(peer_port=0), dict(attempts=0),
                dict(length=1 << 32), dict(retry=-1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            sender(64, **bad)
