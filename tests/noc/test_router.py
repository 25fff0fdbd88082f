import random
from collections import defaultdict

import pytest
from amaranth.sim import Simulator

from apiary.noc.header import Message, NocHeader, routing_header
from apiary.noc.router import DIRS, SOURCES, Dir, Router, xy_route
from apiary.stream.testbench import WithCycleCounter
from apiary.noc.testbench import send_flits


# --- helpers -------------------------------------------------------------------------------------


def head_flit(width, dst_x, dst_y, *, last=1, tag=0, **fields):
    """One flit whose top 64 bits route to (dst_x, dst_y), with ``tag`` in the low bits."""
    hdr = routing_header().pack(dst_x=dst_x, dst_y=dst_y, **fields)
    return (hdr << (width - 64)) | tag, last


def monitor(port, cycle, log, *, drive_ready=None, ready=False):
    """Background testbench: record ``(cycle, data, last)`` for every transfer on ``port``.
    With ``ready`` it holds ``ready`` high; with ``drive_ready=(rng, stall)`` it drives
    ``ready`` low with probability ``stall`` each cycle."""
    async def tb(ctx):
        if ready:
            ctx.set(port.ready, 1)
        if drive_ready is not None:
            rng, stall = drive_ready
            ctx.set(port.ready, int(rng.random() >= stall))
        async for _, _, valid, rdy, payload, cyc in ctx.tick().sample(
                port.valid, port.ready, port.payload, cycle):
            if valid and rdy:
                log.append((cyc, int(payload.data), int(payload.last)))
            if drive_ready is not None:
                ctx.set(port.ready, int(rng.random() >= stall))
    return tb


async def put_flits(ctx, port, flits):
    """Like :func:`send_flits` without stalls, for endless background sources: it waits with
    plain ticks, so a source still waiting when the simulation ends is closed cleanly."""
    for data, last in flits:
        ctx.set(port.payload, {"data": data, "last": last})
        ctx.set(port.valid, 1)
        while not (await ctx.tick().sample(port.ready))[2]:
            pass
    ctx.set(port.valid, 0)


def simulate(dut, testbenches, background=(), timeout=20000):
    """Run until every testbench in ``testbenches`` returns; fail after ``timeout`` cycles."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    cycles = [0]

    async def count(ctx):
        while True:
            await ctx.tick()
            cycles[0] += 1

    sim.add_testbench(count, background=True)
    for tb in background:
        sim.add_testbench(tb, background=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    while sim.advance():
        if cycles[0] > timeout:
            raise AssertionError(f"simulation still running after {timeout} cycles")


def wait_for(cond, what, timeout):
    async def tb(ctx):
        for _ in range(timeout):
            if cond():
                return
            await ctx.tick()
        raise AssertionError(f"timed out after {timeout} cycles waiting for {what}")
    return tb


def split_messages(log):
    """Group a port's ``(cycle, data, last)`` log into messages (lists of ``(data, last)``)."""
    msgs, cur = [], []
    for _, data, last in log:
        cur.append((data, last))
        if last:
            msgs.append(cur)
            cur = []
    assert not cur, "a message was left unfinished"
    return msgs


def make_harness(width, x=1, y=1, **kw):
    r = Router(width, x, y, **kw)
    h = WithCycleCounter(r)
    logs = {d: [] for d in DIRS}
    ins = {d: [] for d in DIRS}
    return r, h, logs, ins


WIDTHS = pytest.mark.parametrize("width", [64, 512])


def every_input_to(r, width, dests, *, paths=None, body=False):
    """``(testbench, sent)``: the testbench sends one message from every input of router ``r``
    at (1, 1) to each of ``dests``, 3 idle cycles apart (a head flit tagged with a running
    number, and with ``body`` a second flit); ``sent`` fills with ``(input, head data, output
    the model expects or None for a drop)``."""
    sent = []

    async def tb(ctx):
        tag = 0
        for d in DIRS:
            for dx, dy in dests:
                tag += 1
                head = head_flit(width, dx, dy, tag=tag, dst_fbits=tag % 16, last=int(not body))
                sent.append((d, head[0], xy_route(1, 1, dx, dy, d, paths)))
                await send_flits(ctx, r.port_in(d), [head, (tag, 1)] if body else [head])
                await ctx.tick().repeat(3)
        await ctx.tick().repeat(5)
    return tb, sent


def check_routes(sent, logs, ins):
    """Every message of ``sent`` the model routes left on that output 1 cycle after its head
    was taken, and no other left; returns the ``(input, output)`` turns seen."""
    def heads(log):             # the first flit of each message (a port's are contiguous)
        return [(cyc, data) for k, (cyc, data, _) in enumerate(log) if k == 0 or log[k - 1][2]]

    out_by_data = {}
    for o in DIRS:
        for cyc, data in heads(logs[o]):
            assert data not in out_by_data, "a flit left twice"
            out_by_data[data] = (o, cyc)
    in_by_data = {data: cyc for d in DIRS for cyc, data in heads(ins[d])}
    seen = set()
    for d, data, want in sent:
        if want is None:
            continue
        o, cyc = out_by_data.pop(data)
        assert o == want, f"from {d.name} the message left on {o.name}, expected {want.name}"
        assert cyc - in_by_data[data] == 1, "per-hop latency is not 1 cycle"
        seen.add((d, want))
    assert not out_by_data, "a message the model drops left the router"
    return seen


# --- parameters ----------------------------------------------------------------------------------

def test_parameter_errors():
    with pytest.raises(ValueError, match="flit width must be one of"):
        Router(65, 0, 0)
    with pytest.raises(ValueError, match="coordinate x must be an integer from 0 to 255"):
        Router(64, 256, 0)
    with pytest.raises(ValueError, match="coordinate y must be an integer from 0 to 255"):
        Router(64, 0, -1)
    with pytest.raises(ValueError, match="depth must be an integer of at least 1"):
        Router(64, 0, 0, depth=0)
    with pytest.raises(ValueError, match="local_depth must be an integer of at least 1"):
        Router(64, 0, 0, local_depth=0)
    with pytest.raises(ValueError, match=r"Router \(2, 3\) has no crossbar path from N to E"):
        Router(64, 2, 3, paths=[(Dir.W, Dir.E), (Dir.N, Dir.E)])


def test_signature():
    r = Router(128, 3, 4)
    names = set(r.signature.members)
    assert names == {f"{d}_{io}" for d in "nesw" + "p" for io in ("in", "out")} | {"dropped"}
    assert len(r.n_in.payload.data) == 128


def test_xy_model():
    # X first, then Y; (0, 0) top-left, y grows southwards.
    assert xy_route(1, 1, 2, 0) == Dir.E
    assert xy_route(1, 1, 0, 2) == Dir.W
    assert xy_route(1, 1, 1, 0) == Dir.N
    assert xy_route(1, 1, 1, 2) == Dir.S
    assert xy_route(1, 1, 1, 1) == Dir.P
    # Only legal turns: N/S inputs ignore X; U-turns go to P.
    assert xy_route(1, 1, 2, 2, Dir.N) == Dir.S
    assert xy_route(1, 1, 1, 0, Dir.N) == Dir.P
    assert xy_route(1, 1, 2, 1, Dir.E) == Dir.P


# --- routing and latency -------------------------------------------------------------------------

@WIDTHS
def test_route_choice_and_latency(width):
    """Every input, to destinations in every direction: the flit leaves on the XY output, and is
    valid there exactly one cycle after the cycle the input took it."""
    r, h, logs, ins = make_harness(width)
    dests = [(dx, dy) for dx in (0, 1, 2, 9) for dy in (0, 1, 2, 7)]
    driver, sent = every_input_to(r, width, dests)
    bg = [monitor(r.port_out(d), h.cycle, logs[d], ready=True) for d in DIRS]
    bg += [monitor(r.port_in(d), h.cycle, ins[d]) for d in DIRS]
    simulate(h, [driver], bg, timeout=1000)
    assert len(sent) == 5 * len(dests)
    seen = check_routes(sent, logs, ins)
    # Every legal turn was exercised.
    assert seen >= {(i, o) for o, srcs in SOURCES.items() for i in srcs}


@WIDTHS
def test_header_only_messages(width):
    """Header-only messages from three inputs to one output: all arrive intact, and the output is
    released after each one (no idle cycle between messages)."""
    r, h, logs, ins = make_harness(width)
    srcs = [Dir.W, Dir.N, Dir.P]
    msgs = {d: [Message(NocHeader(dst_x=1, dst_y=1, src_x=int(d), src_y=i, msg_type=3))
                for i in range(4)] for d in srcs}
    def source(d):
        async def tb(ctx):
            for msg in msgs[d]:
                await send_flits(ctx, r.port_in(d), msg.flits(width))
        return tb

    async def ready_later(ctx):
        # Hold P_out off while the input FIFOs fill, then take a flit every cycle.
        await ctx.tick().repeat(12)
        ctx.set(r.p_out.ready, 1)

    nflits = sum(len(m.flits(width)) for d in srcs for m in msgs[d])
    simulate(h, [ready_later, wait_for(lambda: len(logs[Dir.P]) == nflits, "messages", 500)],
             [monitor(r.p_out, h.cycle, logs[Dir.P]), *(source(d) for d in srcs)])

    got = split_messages(logs[Dir.P])
    assert len(got) == 12
    per_src = defaultdict(list)
    for flits in got:
        m = Message.from_flits(flits, width)
        per_src[Dir(m.header.src_x)].append(m)
    for d in srcs:
        assert [m.header.src_y for m in per_src[d]] == [0, 1, 2, 3]
        assert per_src[d] == [Message.from_flits(m.flits(width), width) for m in msgs[d]]
    # One flit per cycle from the release on: each message frees the output for the next.
    cycles = [c for c, _, _ in logs[Dir.P]]
    assert cycles == list(range(cycles[0], cycles[0] + nflits))


# --- throughput ----------------------------------------------------------------------------------

DEPTHS = pytest.mark.parametrize("depth", [2, 4])     # FIFOs in registers, in LUTRAM


@WIDTHS
@DEPTHS
def test_throughput(width, depth):
    """N back-to-back flits through one input and output take N cycles plus 1 of latency; and
    all five ports at once (W→E, E→W, N→S, S→N, P→P) each carry one flit per cycle."""
    n = 32
    r, h, logs, ins = make_harness(width, depth=depth, local_depth=depth)
    pairs = {Dir.W: (2, 1), Dir.E: (0, 1), Dir.N: (1, 2), Dir.S: (1, 0), Dir.P: (1, 1)}
    outs = {Dir.W: Dir.E, Dir.E: Dir.W, Dir.N: Dir.S, Dir.S: Dir.N, Dir.P: Dir.P}

    def source(d, only):
        async def tb(ctx):
            if only is not None and d != only:
                return
            dx, dy = pairs[d]
            flits = [head_flit(width, dx, dy, last=0, tag=0)]
            flits += [(random.Random(i).getrandbits(width), 0) for i in range(1, n)]
            flits[-1] = (flits[-1][0], 1)
            for o in DIRS:
                ctx.set(r.port_out(o).ready, 1)
            await send_flits(ctx, r.port_in(d), flits)
        return tb

    # Phase 1: W→E alone.
    bg = [monitor(r.port_out(d), h.cycle, logs[d]) for d in DIRS]
    bg += [monitor(r.port_in(d), h.cycle, ins[d]) for d in DIRS]
    simulate(h, [source(Dir.W, Dir.W), wait_for(lambda: len(logs[Dir.E]) == n, "E", 200)], bg)
    cin = [c for c, _, _ in ins[Dir.W]]
    cout = [c for c, _, _ in logs[Dir.E]]
    assert cin == list(range(cin[0], cin[0] + n))
    assert cout == list(range(cin[0] + 1, cin[0] + 1 + n)), "not N + 1 cycles"
    assert [d for _, d, _ in logs[Dir.E]] == [d for _, d, _ in ins[Dir.W]]

    # Phase 2: all five ports at once.
    r, h, logs, ins = make_harness(width, depth=depth, local_depth=depth)
    bg = [monitor(r.port_out(d), h.cycle, logs[d]) for d in DIRS]
    bg += [monitor(r.port_in(d), h.cycle, ins[d]) for d in DIRS]
    simulate(h, [*(source(d, None) for d in DIRS),
                 wait_for(lambda: all(len(logs[o]) == n for o in DIRS), "all", 200)], bg)
    start = ins[Dir.W][0][0]
    for d, o in outs.items():
        assert [c for c, _, _ in ins[d]] == list(range(start, start + n))
        assert [c for c, _, _ in logs[o]] == list(range(start + 1, start + 1 + n))
        assert [x for _, x, _ in logs[o]] == [x for _, x, _ in ins[d]]


# --- wormhole and fairness -----------------------------------------------------------------------

@WIDTHS
def test_wormhole_no_interleave(width):
    """Five inputs send multi-flit messages to P under random stalls on both sides; body flits
    carry routing bits that point elsewhere. On P_out every message is contiguous, whole and in
    order per input."""
    rng = random.Random(7)
    r, h, logs, ins = make_harness(width)
    sent = {}
    for d in DIRS:
        msgs = []
        for i in range(8):
            n = rng.randint(1, 5)
            flits = [head_flit(width, 1, 1, last=int(n == 1), tag=(int(d) << 16) | (i << 8))]
            for j in range(1, n):
                # body: top bits route East/North/..., low bits tag the flit
                garbage = head_flit(width, rng.choice([0, 2, 5]), rng.choice([0, 2, 6]))[0]
                flits.append((garbage | (int(d) << 16) | (i << 8) | j, int(j == n - 1)))
            msgs.append(flits)
        sent[d] = msgs

    def source(d):
        async def tb(ctx):
            srng = random.Random(int(d) + 100)
            for msg in sent[d]:
                await send_flits(ctx, r.port_in(d), msg, rng=srng, stall=0.3)
        return tb

    total = sum(len(f) for msgs in sent.values() for f in msgs)
    bg = [monitor(r.p_out, h.cycle, logs[Dir.P], drive_ready=(random.Random(1), 0.3))]
    bg += [monitor(r.port_out(o), h.cycle, logs[o], ready=True) for o in DIRS if o != Dir.P]
    simulate(h, [*(source(d) for d in DIRS),
                 wait_for(lambda: len(logs[Dir.P]) == total, "P", 2000)], bg)

    assert all(not logs[o] for o in DIRS if o != Dir.P), "a body flit was routed"
    got = defaultdict(list)
    for msg in split_messages(logs[Dir.P]):
        srcs = {(data >> 16) & 0xff for data, _ in msg}
        ids = {(data >> 8) & 0xff for data, _ in msg}
        assert len(srcs) == 1 and len(ids) == 1, "two messages interleaved"
        got[Dir(srcs.pop())].append(msg)
    for d in DIRS:
        assert got[d] == sent[d]


@WIDTHS
def test_round_robin_fairness(width):
    """All five inputs stream 3-flit messages to P without pause: over a window each input gets
    the same share to within one message, and P_out is never idle. Two inputs streaming
    single-flit messages to N alternate strictly."""
    r, h, logs, ins = make_harness(width)

    def streamer(d, dst, length):
        async def tb(ctx):
            i = 0
            while True:
                flits = [head_flit(width, *dst, last=int(length == 1), tag=(int(d) << 16) | i)]
                flits += [((int(d) << 16) | i, int(j == length - 1)) for j in range(1, length)]
                await put_flits(ctx, r.port_in(d), flits)
                i += 1
        return tb

    async def ready(ctx):
        ctx.set(r.p_out.ready, 1)
        ctx.set(r.n_out.ready, 1)
        await ctx.tick().repeat(400)

    bg = [streamer(d, (1, 1), 3) for d in (Dir.N, Dir.E, Dir.W)]
    bg += [streamer(Dir.S, (1, 1), 3), streamer(Dir.P, (1, 1), 3)]
    bg += [monitor(r.p_out, h.cycle, logs[Dir.P])]
    simulate(h, [ready], bg)

    window = [(c, d) for c, d, _ in logs[Dir.P] if 50 <= c < 350]
    assert [c for c, _ in window] == list(range(50, 350)), "P_out idled under load"
    counts = defaultdict(int)
    for _, data in window:
        counts[(data >> 16) & 0xff] += 1
    assert set(counts) == {int(d) for d in DIRS}
    assert max(counts.values()) - min(counts.values()) <= 3, counts

    # Two inputs, single-flit messages, to N: strict alternation.
    r, h, logs, ins = make_harness(width)
    bg = [streamer(Dir.S, (1, 0), 1), streamer(Dir.E, (1, 0), 1),
          monitor(r.n_out, h.cycle, logs[Dir.N])]
    simulate(h, [ready], bg)
    order = [(data >> 16) & 0xff for c, data, _ in logs[Dir.N] if c >= 20]
    assert len(order) > 300
    assert all(a != b for a, b in zip(order, order[1:])), "not round-robin"


# --- random traffic ------------------------------------------------------------------------------

@WIDTHS
@DEPTHS
def test_random_backpressure(width, depth):
    """Random legal XY traffic on all five inputs, random stalls on every input and output:
    each output gets exactly the messages the XY model sends it, intact and in order per input."""
    rng = random.Random(width)
    r, h, logs, ins = make_harness(width, depth=depth, local_depth=depth)
    # Router (1, 1) of a 3x3 mesh: what can legally arrive on each input.
    legal = {
        Dir.N: [(1, y) for y in (1, 2)],
        Dir.S: [(1, y) for y in (0, 1)],
        Dir.E: [(x, y) for x in (0, 1) for y in range(3)],
        Dir.W: [(x, y) for x in (1, 2) for y in range(3)],
        Dir.P: [(x, y) for x in range(3) for y in range(3)],
    }
    sent = {}
    expect = defaultdict(list)
    for d in DIRS:
        msgs = []
        for i in range(25):
            dx, dy = rng.choice(legal[d])
            nb = rng.randrange(0, 3 * width // 8)
            m = Message(NocHeader(dst_x=dx, dst_y=dy, src_x=int(d), src_y=i, msg_type=i % 7),
                        meta=[rng.getrandbits(width) for _ in range(rng.randrange(2))],
                        payload=rng.randbytes(nb))
            msgs.append(m)
            expect[xy_route(1, 1, dx, dy, d), d].append(Message.from_flits(m.flits(width), width))
        sent[d] = msgs

    def source(d):
        async def tb(ctx):
            srng = random.Random(int(d) * 13 + width)
            for m in sent[d]:
                await send_flits(ctx, r.port_in(d), m.flits(width), rng=srng, stall=0.4)
        return tb

    total = sum(len(m.flits(width)) for msgs in sent.values() for m in msgs)
    bg = [monitor(r.port_out(o), h.cycle, logs[o], drive_ready=(random.Random(int(o)), 0.4))
          for o in DIRS]
    simulate(h, [*(source(d) for d in DIRS),
                 wait_for(lambda: sum(map(len, logs.values())) == total, "all", 5000)], bg)

    got = defaultdict(list)
    for o in DIRS:
        for flits in split_messages(logs[o]):
            m = Message.from_flits(flits, width)
            got[o, Dir(m.header.src_x)].append(m)
    assert dict(got) == dict(expect)


# --- area ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_area_reports_luts():
    from apiary.bench.noc import router_area
    a = router_area(64, "xilinx")
    assert a["luts"] > 0 and a["ffs"] > 0


# --- specialised routers -------------------------------------------------------------------------

#: An edge router in a chain: through traffic W→E and E→W, the tile sends east and south and
#: receives from the west and the north. No FIFO on S; N, W and P outputs have one source each.
CHAIN_PATHS = {(Dir.W, Dir.E), (Dir.E, Dir.W), (Dir.P, Dir.E), (Dir.P, Dir.S), (Dir.W, Dir.P),
               (Dir.N, Dir.P)}


@WIDTHS
def test_specialised_router_drops_only_undeclared(width):
    """Two-flit messages from every input to destinations in every direction: those whose XY
    turn is one of the router's paths leave on the right output 1 cycle after they were taken,
    the rest appear on no output and are counted in ``dropped``, and the messages after each
    dropped one still go through."""
    r, h, logs, ins = make_harness(width, paths=CHAIN_PATHS)
    dests = [(dx, dy) for dx in (0, 1, 2) for dy in (0, 1, 2)]
    driver, sent = every_input_to(r, width, dests, paths=CHAIN_PATHS, body=True)
    dropped = [0]

    async def count_drops(ctx):
        async for _, _, n in ctx.tick().sample(r.dropped):
            dropped[0] += n

    bg = [monitor(r.port_out(d), h.cycle, logs[d], ready=True) for d in DIRS]
    bg += [monitor(r.port_in(d), h.cycle, ins[d]) for d in DIRS]
    simulate(h, [driver], bg + [count_drops], timeout=2000)

    assert check_routes(sent, logs, ins) == set(CHAIN_PATHS)
    expected = [want for _, _, want in sent if want is not None]
    assert dropped[0] == len(sent) - len(expected) > 0
    # Every message was taken, including those on inputs without a FIFO.
    assert sum(len(v) for v in ins.values()) == 2 * len(sent)


def test_specialised_router_is_smaller():
    """The chain router's crossbar and FIFOs shrink with its paths (Yosys, 64 bits)."""
    from apiary.bench.noc import router_area
    full = router_area(64, "xilinx")
    chain = router_area(64, "xilinx", paths=CHAIN_PATHS)
    assert chain["luts"] + chain["lutram"] < 0.7 * (full["luts"] + full["lutram"])
