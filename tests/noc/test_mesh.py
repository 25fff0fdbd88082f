import random
from collections import defaultdict

import pytest

from apiary.noc.header import Message, NocHeader
from apiary.noc.mesh import Mesh
from apiary.stream.testbench import WithCycleCounter, simulate
from apiary.noc.testbench import send_flits


WIDTHS = pytest.mark.parametrize("width", [64, 512])



def msg(src, dst, *, seq=0, meta=(), payload=b""):
    return Message(NocHeader(dst_x=dst[0], dst_y=dst[1], src_x=src[0], src_y=src[1],
                             msg_type=seq % 256), meta=list(meta), payload=bytes(payload))


def run_mesh(mesh, traffic, *, seed=0, src_stall=0.0, dst_stall=0.0, timeout=20000):
    """Send ``traffic`` ({(x, y): [Message, ...]}) from the tiles, each tile's list in order, with
    seeded random stalls at sources and sinks. Returns ``(received, dropped, first_valid)``:
    ``received[(x, y)]`` is the decoded messages ``eject[x][y]`` delivered, in order, and
    ``dropped`` the mesh's counter once everything has arrived."""
    width = mesh.width
    h = WithCycleCounter(mesh)
    inside = {(x, y) for x in range(mesh.cols) for y in range(mesh.rows)}
    expected = sum(1 for msgs in traffic.values() for m in msgs
                   if (m.header.dst_x, m.header.dst_y) in inside)
    received = defaultdict(list)
    count = [0]
    result = {}

    def source(xy, msgs):
        async def tb(ctx):
            rng = random.Random(f"{seed} {xy} src")
            for m in msgs:
                await send_flits(ctx, mesh.inject[xy[0]][xy[1]], m.flits(width),
                                 rng=rng, stall=src_stall)
        return tb

    def sink(xy):
        async def tb(ctx):
            rng = random.Random(f"{seed} {xy} dst")
            port = mesh.eject[xy[0]][xy[1]]
            flits = []
            ctx.set(port.ready, int(rng.random() >= dst_stall))
            async for _, _, valid, ready, payload in ctx.tick().sample(
                    port.valid, port.ready, port.payload):
                if valid and ready:
                    flits.append((int(payload.data), int(payload.last)))
                    if payload.last:
                        received[xy].append(Message.from_flits(flits, width))
                        flits = []
                        count[0] += 1
                ctx.set(port.ready, int(rng.random() >= dst_stall))
        return tb

    async def main(ctx):
        for _ in range(timeout):
            if count[0] >= expected:
                break
            await ctx.tick()
        else:
            raise AssertionError(f"only {count[0]} of {expected} messages arrived in "
                                 f"{timeout} cycles")
        await ctx.tick().repeat(4 * (mesh.cols + mesh.rows) + 8)  # let drops drain
        result["dropped"] = ctx.get(mesh.dropped)
        result["cycles"] = ctx.get(h.cycle)

    simulate(h, *(source(xy, msgs) for xy, msgs in traffic.items()), main,
             background=[sink(xy) for xy in inside])
    return received, result["dropped"]


def check(mesh, traffic, received):
    """Every in-mesh message arrived exactly once, intact, at its destination, in order per
    (source, destination) pair; nothing else arrived."""
    width = mesh.width
    want = defaultdict(list)
    for src, msgs in traffic.items():
        for m in msgs:
            dst = (m.header.dst_x, m.header.dst_y)
            if dst[0] < mesh.cols and dst[1] < mesh.rows:
                want[dst, src].append(Message.from_flits(m.flits(width), width))
    got = defaultdict(list)
    for dst, msgs in received.items():
        for m in msgs:
            got[dst, (m.header.src_x, m.header.src_y)].append(m)
    assert set(got) == set(want), "messages arrived for the wrong pairs"
    for key in want:
        assert got[key] == want[key], f"(destination, source) {key}: wrong, lost or reordered"


def tiles(cols, rows):
    return [(x, y) for x in range(cols) for y in range(rows)]


def all_pairs_traffic(width, cols, rows, rng):
    """From every tile to every tile (itself too): a header-only message and a multi-flit one."""
    traffic = {}
    for src in tiles(cols, rows):
        msgs = []
        for dst in tiles(cols, rows):
            msgs.append(msg(src, dst, seq=len(msgs)))
            msgs.append(msg(src, dst, seq=len(msgs), meta=[rng.getrandbits(width)],
                            payload=rng.randbytes(width // 8 + 5)))
        rng.shuffle(msgs)
        traffic[src] = msgs
    return traffic


# --- parameters ----------------------------------------------------------------------------------

def test_parameter_errors():
    with pytest.raises(ValueError, match="cols must be an integer from 1 to 255"):
        Mesh(64, 0, 3)
    with pytest.raises(ValueError, match="rows must be an integer from 1 to 255"):
        Mesh(64, 3, 256)
    with pytest.raises(ValueError, match="flit width must be one of"):
        Mesh(100, 2, 2)
    with pytest.raises(ValueError, match="depth must be an integer of at least 1"):
        Mesh(64, 2, 2, depth=0)


def test_members():
    mesh = Mesh(64, 3, 2)
    assert len(mesh.inject) == 3 and len(mesh.inject[0]) == 2
    assert len(mesh.eject[2][1].payload.data) == 64
    assert len(mesh.dropped) == 32


# --- delivery ------------------------------------------------------------------------------------

@WIDTHS
def test_all_pairs_3x3(width):
    """Single- and multi-flit messages between every pair of tiles of a 3x3 mesh, including a
    tile to itself, with random stalls."""
    mesh = Mesh(width, 3, 3)
    traffic = all_pairs_traffic(width, 3, 3, random.Random(width))
    received, dropped = run_mesh(mesh, traffic, seed=1, src_stall=0.2, dst_stall=0.2)
    check(mesh, traffic, received)
    assert sum(map(len, received.values())) == 2 * 81
    assert dropped == 0


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_random_traffic(width):
    """All nine tiles at once, 2,250 random 1-4 flit messages (3% addressed off the mesh),
    seeded random valid/ready stalls: every good message arrives once, intact, at the right tile,
    in order per pair; the rest are counted in ``dropped``."""
    rng = random.Random(1000 + width)
    mesh = Mesh(width, 3, 3)
    nb = width // 8
    hdr = 2 if width == 64 else 1
    traffic = {}
    off = 0
    for src in tiles(3, 3):
        msgs = []
        for i in range(250):
            if rng.random() < 0.03:
                dst = rng.choice([(3, 0), (1, 3), (7, 9), (200, 1)])
                off += 1
            else:
                dst = (rng.randrange(3), rng.randrange(3))
            body = rng.randrange(0, 5 - hdr)            # 1 to 4 flits in all
            meta = [rng.getrandbits(width)] if body and rng.random() < 0.5 else []
            pay = rng.randbytes(rng.randrange((body - len(meta) - 1) * nb + 1,
                                              (body - len(meta)) * nb + 1)) \
                if body - len(meta) > 0 else b""
            m = msg(src, dst, seq=i, meta=meta, payload=pay)
            assert len(m.flits(width)) == hdr + body
            msgs.append(m)
        traffic[src] = msgs
    received, dropped = run_mesh(mesh, traffic, seed=width, src_stall=0.3, dst_stall=0.3)
    check(mesh, traffic, received)
    assert sum(map(len, received.values())) == 9 * 250 - off
    assert dropped == off > 0


@WIDTHS
def test_dropped_off_mesh(width):
    """Messages addressed outside the mesh leave at its edge, are counted once each (at the last
    flit), and the good message behind them still arrives."""
    mesh = Mesh(width, 3, 3)
    rng = random.Random(3)
    big = dict(meta=[rng.getrandbits(width)], payload=rng.randbytes(2 * width // 8))
    traffic = {
        (1, 1): [msg((1, 1), (3, 1)), msg((1, 1), (1, 3), **big), msg((1, 1), (9, 9), **big),
                 msg((1, 1), (2, 2), seq=1, **big)],
        (0, 2): [msg((0, 2), (0, 5), **big), msg((0, 2), (0, 0), seq=2)],
        (2, 0): [msg((2, 0), (255, 255)), msg((2, 0), (2, 0), seq=3, **big)],
    }
    received, dropped = run_mesh(mesh, traffic, seed=5, src_stall=0.2, dst_stall=0.2)
    check(mesh, traffic, received)
    assert dropped == 5
    assert [m.header.msg_type for m in received[2, 2]] == [1]


@WIDTHS
def test_latency_per_hop(width):
    """A header flit injected at (0, 0) on cycle t is valid at (2, 2) on cycle t + 5 (five
    routers) and at (0, 0) itself on cycle t + 1."""
    mesh = Mesh(width, 3, 3)
    h = WithCycleCounter(mesh)
    seen = {}

    async def tb(ctx):
        for dst, hops in (((2, 2), 5), ((0, 0), 1), ((2, 0), 3)):
            port = mesh.inject[0][0]
            out = mesh.eject[dst[0]][dst[1]]
            ctx.set(out.ready, 1)
            data, last = msg((0, 0), dst).flits(width)[0]
            ctx.set(port.payload, {"data": data, "last": 1})
            ctx.set(port.valid, 1)
            _, _, rdy, t = await ctx.tick().sample(port.ready, h.cycle)
            assert rdy
            ctx.set(port.valid, 0)
            for _ in range(20):
                _, _, valid, c = await ctx.tick().sample(out.valid, h.cycle)
                if valid:
                    seen[dst] = (c - t, hops)
                    break

    simulate(h, tb)
    for dst, (got, hops) in seen.items():
        assert got == hops, f"to {dst}: {got} cycles, expected {hops}"
    assert len(seen) == 3


# --- small meshes --------------------------------------------------------------------------------

@pytest.mark.parametrize("cols,rows", [(1, 1), (1, 3), (3, 1)])
def test_small_meshes(cols, rows):
    """1x1, 1x3 and 3x1: every pair (a tile to itself too), and one off-mesh message each way."""
    width = 64
    mesh = Mesh(width, cols, rows)
    traffic = all_pairs_traffic(width, cols, rows, random.Random(cols * 10 + rows))
    traffic[0, 0] = [msg((0, 0), (cols, 0)), msg((0, 0), (0, rows))] + traffic[0, 0]
    received, dropped = run_mesh(mesh, traffic, seed=cols + rows, src_stall=0.2, dst_stall=0.2)
    check(mesh, traffic, received)
    assert sum(map(len, received.values())) == 2 * (cols * rows) ** 2
    assert dropped == 2

