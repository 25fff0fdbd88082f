"""The Apiary monitor (apiary/os/monitor.py) alone, at 64 and 512 bits, through its four ports:
allowed IPC and memory traffic passes (memory translated) in order under random stalls, with its
exact added latency; every kind of violation sinks its message, reports one FAULT and
quarantines the tile; inbound denials are reported without quarantine; the rate limit stalls at
its bucket's rate or faults; the capability operations and kernel messages do what the
docstring says; RELEASE gives the memory back and lifts the quarantine; and random sequences of
all of it match a Python model of the monitor (tests/os/monitor_model.py), message for message.
"""

import random
import sys
from pathlib import Path

import pytest

from apiary.noc.header import Fbits, NocHeader, header_flits
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK,
                                   mem_message_flits)
from apiary.os.monitor import MonitorConfig, RateLimit
from apiary.os.monitor_messages import spare_lanes
from apiary.os.uapi import (FaultKind, IpcDir, KernelMeta, KernelMsgType as K, Perm, Status,
                            decode_kernel_message, kernel_message_flits,
                            virtual_address)

sys.path.insert(0, str(Path(__file__).parent))
from monitor_bench import (ERRORS, KERNEL_TYPES, MANAGER, MEMORY, PEER, SOURCE, TILE,  # noqa: E402
                           MonitorBench, decode, ipc_message, kernel, mem)
from monitor_model import MonitorModel  # noqa: E402


WIDTHS = [64, 512]
OTHER = (2, 2)          # a tile nobody granted anything
KERNEL = (MANAGER, ERRORS, MEMORY)
LOCAL0, LOCAL1 = Fbits.LOCAL0, Fbits.LOCAL1
SEG_BASE = 0x4_0000     # physical base of the test segment (ring aligned up to 2**18)


def model_of(bench, config=None, *, ipc_out=((*PEER, None),), ipc_in=((*SOURCE, LOCAL0),)):
    config = config or MonitorConfig()
    return MonitorModel(bench.width, TILE, MANAGER, ERRORS, KERNEL, list(ipc_out), list(ipc_in),
                        entries=config.entries, ipc_entries=config.ipc_entries,
                        in_entries=config.in_entries)


def faults_of(messages, width):
    """The metas of the FAULTs among ``(cycle, flits)`` messages."""
    return [km(f, width)[2] for _, f in messages if decode(f, width)[1] == K.FAULT]


def km(flits, width):
    """``(type, header, meta)`` of a kernel message that came out."""
    header, meta = decode_kernel_message(flits, width)
    return K(header.msg_type), header, meta


def own_lanes_cleared(flits, width):
    """``flits`` with the :func:`~apiary.os.monitor_messages.spare_lanes` of a one-flit kernel
    message from the monitor itself (its tile's source) cleared: they carry nothing, and show
    what the monitor's merger shows there for the tile's or the NoC's traffic."""
    lanes = spare_lanes(width)
    header = NocHeader.unpack([flits[0][0]], width)
    if (lanes is None or len(flits) != 1 or header.msg_type not in KERNEL_TYPES
            or (header.src_x, header.src_y) != TILE):
        return flits
    lo, hi = lanes
    (data, last), = flits
    return [(data & ~(((1 << (hi - lo)) - 1) << lo), last)]


class Checked:
    """Drive the bench one message at a time and hold it to the model: every message out, flit
    for flit, and at the end the counters."""

    def __init__(self, bench, model):
        self.b, self.m = bench, model
        self.noc, self.tile = [], []
        self.checked = {}

    async def _after(self, ctx, noc, tile, quiet):
        self.noc += noc
        self.tile += tile
        await self.b.wait_out(ctx, len(self.noc), len(self.tile))
        mon = self.b.monitor
        while ctx.get(mon.tile_reset):
            await ctx.tick()
        await ctx.tick().repeat(quiet)
        self.compare()

    async def from_tile(self, ctx, flits, quiet=2, **model):
        noc, tile = self.m.from_tile(flits, **model)
        await self.b.from_tile(ctx, flits)
        await self._after(ctx, noc, tile, quiet)
        return noc, tile

    async def from_noc(self, ctx, flits, quiet=2):
        noc, tile = self.m.from_noc(flits)
        await self.b.from_noc(ctx, flits)
        await self._after(ctx, noc, tile, quiet)
        return noc, tile

    def compare(self):
        """The messages out so far are those predicted (those new since the last call checked
        decoded first, for a readable difference)."""
        w = self.b.width
        for got, want, side in ((self.b.noc, self.noc, "noc"), (self.b.tile, self.tile, "tile")):
            got = [f for _, f in got]
            start = self.checked.get(side, 0)
            if got != want:
                assert [decode(f, w) for f in got[start:]] == [decode(f, w) for f in want[start:]]
                assert [own_lanes_cleared(f, w) for f in got] == want
            self.checked[side] = len(got)

    def check_counters(self):
        got = dict(self.b.counters)
        got.pop("rate_stalls")
        want = dict(self.m.counters)
        want.pop("rate_stalls")
        want["quarantined"] = int(self.m.quarantined)
        assert got == want


async def install(b, ctx, *, base=SEG_BASE, size=0x1000, perm=Perm.RW, root=7, op=K.CAP_ALLOC,
                  mem_at=MEMORY, user=0, peer=(0, 0)):
    """Install a segment (``CAP_INSTALL`` from the manager); return the tile's answer."""
    n = len(b.tile)
    await b.from_noc(ctx, kernel(b.width, K.CAP_INSTALL, op=op.value, addr=base, size=size,
                                 perm=perm, mem_x=mem_at[0], mem_y=mem_at[1], root=root,
                                 user=user, peer_x=peer[0], peer_y=peer[1]))
    await b.wait_out(ctx, tile=n + 1)
    return km(b.tile[n][1], b.width)


def op_msg(width, msg_type, **meta):
    """A capability operation from the tile (to its monitor: the destination does not matter)."""
    return kernel(width, msg_type, src=TILE, dst=MANAGER, **meta)


# -- allowed traffic -------------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", range(2))
def test_allowed_traffic_passes_in_order_with_random_stalls(width, seed):
    """Both ways at once, random gaps into and back-pressure out of both sides: IPC messages to
    PEER (any port) and memory requests through two segments leave to the NoC in order, IPC
    unchanged (but a spoofed source, set back to the tile's own), requests translated (the
    segment's memory tile and LOCAL0, ``base + offset``, ``tag`` = handle); IPC messages from
    SOURCE and kernel tiles and memory acks reach the tile in order, the acks' addresses made
    virtual again. Nothing else comes out and nothing is counted as sunk or faulty."""
    rng = random.Random(seed)
    b = MonitorBench(width, stall=0.3, seed=seed)
    model = model_of(b)
    segs = [dict(base=0x10000, size=0x2000, perm=Perm.RW, root=3, mem_at=MEMORY),
            dict(base=0x7_0000, size=100, perm=Perm.READ, root=4, mem_at=(0, 2))]
    out_msgs, in_msgs = [], []
    for _ in range(40):
        kind = rng.choice(["ipc", "ipc", "load", "store"])
        if kind == "ipc":
            out_msgs.append(ipc_message(width, PEER, rng.randbytes(rng.randrange(0, 150)),
                                        dst_fbits=rng.choice([LOCAL0, LOCAL1]),
                                        src=rng.choice([TILE, TILE, MEMORY, (5, 5)])))
        else:
            h = 0 if kind == "store" else rng.randrange(2)
            s = segs[h]
            size = rng.randrange(0, min(64, s["size"]))
            offset = rng.randrange(0, s["size"] - size + 1)
            payload = rng.randbytes(size) if kind == "store" else b""
            out_msgs.append(mem(width, STORE_MEM if kind == "store" else LOAD_MEM,
                                virtual_address(h, offset), size, payload))
    for _ in range(40):
        kind = rng.choice(["ipc", "ipc", "kernel", "ack"])
        if kind == "ipc":
            in_msgs.append(ipc_message(width, TILE, rng.randbytes(rng.randrange(0, 150)),
                                       src=SOURCE))
        elif kind == "kernel":
            in_msgs.append(ipc_message(width, TILE, rng.randbytes(rng.randrange(0, 20)),
                                       src=rng.choice(KERNEL), dst_fbits=LOCAL1))
        else:
            h = rng.randrange(2)
            ack = rng.choice([LOAD_MEM_ACK, STORE_MEM_ACK])
            size = rng.randrange(0, 40)
            in_msgs.append(mem(width, ack, segs[h]["base"] + rng.randrange(0, 60), size,
                               rng.randbytes(size) if ack == LOAD_MEM_ACK else b"",
                               src=MEMORY, dst=TILE, tag=h))
    for seg in segs:
        model.from_noc(kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=seg["base"],
                              size=seg["size"], perm=seg["perm"], mem_x=seg["mem_at"][0],
                              mem_y=seg["mem_at"][1], root=seg["root"]))
    expect_noc = [f for msg in out_msgs for f in model.from_tile(msg)[0]]
    expect_tile = [f for msg in in_msgs for f in model.from_noc(msg)[1]]
    go = []

    async def tile_side(b, ctx):
        for seg in segs:
            await install(b, ctx, **seg)
        b.tile.clear()                      # the two CAP_RESULTs
        go.append(1)
        for msg in out_msgs:
            await b.from_tile(ctx, msg, rng=rng, stall=0.3)

    async def noc_side(b, ctx):
        while not go:
            await ctx.tick()
        for msg in in_msgs:
            await b.from_noc(ctx, msg, rng=rng, stall=0.3)

    b.run(tile_side, noc_side, timeout=40_000)
    w = width
    assert [decode(f, w) for _, f in b.noc] == [decode(f, w) for f in expect_noc]
    assert [f for _, f in b.noc] == expect_noc
    assert [decode(f, w) for _, f in b.tile] == [decode(f, w) for f in expect_tile]
    assert [f for _, f in b.tile] == expect_tile
    c = b.counters
    assert (c["passed_out"], c["passed_in"]) == (len(out_msgs), len(in_msgs))
    assert c["sunk_out"] == c["sunk_in"] == c["faults"] == c["quarantined"] == 0
    # The spoofed sources went out as the tile's.
    headers = [d[2] if d[0] == "mem" else d[2].header for d in (decode(f, w) for _, f in b.noc)]
    assert {(h.src_x, h.src_y) for h in headers} == {TILE}


# Added cycles of a passed message at 64 bits: its head (header, plus metadata for memory).
ADDED_64 = {"ipc": 2, "mem": 4}


@pytest.mark.parametrize("width", WIDTHS)
def test_added_latency(width):
    """Messages one at a time, nothing stalled: at 512 bits every flit of an allowed message (IPC
    or memory, either way) is on the far side in the cycle it arrives (0 cycles added); at 64 bits
    every flit of it is 2 cycles late for IPC (its 2 header flits) and 4 for memory requests and
    acks (2 header + 2 metadata flits)."""
    cases = [("ipc", "out", ipc_message(width, PEER, bytes(40))),
             ("mem", "out", mem(width, STORE_MEM, virtual_address(0, 8), 30, bytes(30))),
             ("mem", "out", mem(width, LOAD_MEM, virtual_address(0, 0), 100)),
             ("ipc", "in", ipc_message(width, TILE, bytes(40), src=SOURCE)),
             ("mem", "in", mem(width, LOAD_MEM_ACK, SEG_BASE, 20, bytes(20), src=MEMORY,
                               dst=TILE)),
             ("mem", "in", mem(width, STORE_MEM_ACK, SEG_BASE, 20, src=MEMORY, dst=TILE))]
    starts = []

    async def script(b, ctx):
        await install(b, ctx)
        await ctx.tick().repeat(10)
        for _, way, msg in cases:
            starts.append((len(b.log["tile_out"]), len(b.log["noc_in"]),
                           len(b.log["noc_out"]), len(b.log["tile_in"])))
            await (b.from_tile if way == "out" else b.from_noc)(ctx, msg)
            await ctx.tick().repeat(12)

    b = MonitorBench(width).run(script)
    measured = []
    for (kind, way, msg), (to, ni, no, ti) in zip(cases, starts):
        n = len(msg)
        src, dst = ((b.log["tile_out"][to:to + n], b.log["noc_out"][no:no + n]) if way == "out"
                    else (b.log["noc_in"][ni:ni + n], b.log["tile_in"][ti:ti + n]))
        assert len(dst) == n
        # Each flit: cycles after the message's first flit arrived, beside the flit index.
        added = {d - src[0] - k for k, d in enumerate(dst)}
        assert len(added) == 1, (kind, way, src, dst)
        measured.append((kind, added.pop()))
    if width == 512:
        assert all(a == 0 for _, a in measured)
    else:
        assert measured == [(kind, ADDED_64[kind]) for kind, _, _ in cases]
    assert b.counters["passed_out"] == 3 and b.counters["passed_in"] == 3


# -- violations ------------------------------------------------------------------------------------

def violation(width, kind):
    """``(config, setup, message, FAULT meta)`` of one violation of ``kind``: ``setup`` is a list
    of ``("tile" | "noc", flits)`` sent first (the segment is handle 0: SEG_BASE, 0x1000 bytes,
    read and write, root 7)."""
    seg = [("noc", kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=SEG_BASE,
                          size=0x1000, perm=Perm.RW, mem_x=MEMORY[0], mem_y=MEMORY[1], root=7))]
    ro = [("noc", kernel(width, K.CAP_INSTALL, op=K.CAP_SEND.value, addr=SEG_BASE, size=0x100,
                         perm=Perm.READ, mem_x=MEMORY[0], mem_y=MEMORY[1], root=7))]
    store = ("tile", mem(width, STORE_MEM, virtual_address(0, 4), 8, bytes(8)))
    config = MonitorConfig()
    if kind == FaultKind.NO_IPC_CAP:
        # A store first, so that at 64 bits the gate's head still holds its metadata.
        setup = seg + [store]
        msg = ipc_message(width, OTHER, b"hi", dst_fbits=LOCAL1)
        meta = KernelMeta(peer_x=OTHER[0], peer_y=OTHER[1], peer_fbits=LOCAL1, user=12)
    elif kind == FaultKind.OUT_OF_BOUNDS:
        setup = seg
        msg = mem(width, LOAD_MEM, virtual_address(0, 0xFF0), 0x11, dst=(9, 9))
        meta = KernelMeta(handle=0, addr=virtual_address(0, 0xFF0), size=0x11, perm=Perm.READ,
                          peer_x=9, peer_y=9, peer_fbits=LOCAL0, user=LOAD_MEM)
    elif kind == FaultKind.PERMISSION:
        setup = ro
        msg = mem(width, STORE_MEM, virtual_address(0, 0), 4, bytes(4), dst=MEMORY)
        meta = KernelMeta(handle=0, addr=0, size=4, perm=Perm.WRITE, peer_x=MEMORY[0],
                          peer_y=MEMORY[1], peer_fbits=LOCAL0, user=STORE_MEM)
    elif kind == FaultKind.STALE_HANDLE:
        setup = seg + [("tile", op_msg(width, K.CAP_FREE, handle=0))]
        msg = mem(width, LOAD_MEM, virtual_address(0, 0), 4, dst=MEMORY)
        meta = KernelMeta(handle=0, addr=0, size=4, perm=Perm.READ, peer_x=MEMORY[0],
                          peer_y=MEMORY[1], peer_fbits=LOCAL0, user=LOAD_MEM)
    elif kind == FaultKind.DERIVE_WIDER:
        setup = seg
        msg = op_msg(width, K.CAP_SEND, handle=0, addr=0x800, size=0x801, perm=Perm.READ,
                     peer_x=PEER[0], peer_y=PEER[1], peer_fbits=LOCAL0, user=5)
        meta = KernelMeta(handle=0, addr=0x800, size=0x801, perm=Perm.READ, peer_x=PEER[0],
                          peer_y=PEER[1], peer_fbits=LOCAL0, user=K.CAP_SEND.value)
    elif kind == FaultKind.RATE:
        # The first message takes all but one token (3 flits at 64 bits, 2 at 512), the second
        # (as long) has too few.
        first = ipc_message(width, PEER, bytes(1))
        config = MonitorConfig(rate=RateLimit(burst=len(first) + 1, refill=1, period=1000,
                                              on_excess="fault"))
        setup = [("tile", first)]
        msg = ipc_message(width, PEER, bytes(2), dst_fbits=LOCAL1)
        meta = KernelMeta(peer_x=PEER[0], peer_y=PEER[1], peer_fbits=LOCAL1, user=12)
    elif kind == FaultKind.FORGED:
        setup = seg + [store]
        msg = kernel(width, K.CAP_INSTALL, src=TILE, dst=(3, 3), op=32, addr=0, size=1 << 39,
                     perm=3, root=7)
        meta = KernelMeta(peer_x=3, peer_y=3, peer_fbits=LOCAL0, user=K.CAP_INSTALL.value)
    elif kind == FaultKind.MALFORMED:
        setup = seg
        full = mem(width, LOAD_MEM, virtual_address(0, 0), 4, dst=MEMORY)
        msg = full[:3]
        msg[-1] = (msg[-1][0], 1)       # ends inside its metadata
        meta = KernelMeta(peer_x=MEMORY[0], peer_y=MEMORY[1], peer_fbits=LOCAL0, user=LOAD_MEM)
    return config, setup, msg, meta


# A message that ends inside its head exists only where the head spans flits (below 512 bits).
@pytest.mark.parametrize("width, kind", [
    (width, kind) for width in WIDTHS for kind in FaultKind
    # PAGE_FAULT: test_paging.py; STALLED, UNFINISHED: the stall watches' tests below.
    if kind not in (FaultKind.INBOUND, FaultKind.PAGE_FAULT, FaultKind.STALLED,
                    FaultKind.UNFINISHED)
    and not (kind == FaultKind.MALFORMED and width == 512)])
def test_violation_sinks_reports_and_quarantines(width, kind):
    """The offending message: nothing of it on ``noc_out``, exactly one FAULT to the error manager
    (``op`` the kind; handle, virtual address, size and permission asked of a load, store or
    CAP_SEND, zero for anything else; the destination, or the CAP_SEND's peer; ``user`` the type);
    the tile quarantined: then its allowed messages and the allowed messages to it are sunk and
    counted; kernel messages to the monitor still work (an IPC_GRANT is obeyed)."""
    config, setup, msg, meta = violation(width, kind)
    b = MonitorBench(width, config)
    model = model_of(b, config)
    chk = Checked(b, model)
    fault_at = []

    async def script(b, ctx):
        for side, flits in setup:
            await (chk.from_tile if side == "tile" else chk.from_noc)(ctx, flits)
        before = (len(b.noc), len(b.log["noc_out"]))
        fault_at.append(before)
        noc, tile = await chk.from_tile(ctx, msg, quiet=10,
                                        over_rate=kind == FaultKind.RATE)
        assert len(noc) == 1 and not tile
        # Quarantined: both ways sunk.
        await chk.from_tile(ctx, ipc_message(width, PEER, b"after"))
        await chk.from_noc(ctx, ipc_message(width, TILE, b"in", src=SOURCE))
        await chk.from_noc(ctx, mem(width, LOAD_MEM_ACK, SEG_BASE, 4, bytes(4), src=MEMORY,
                                    dst=TILE))
        await chk.from_tile(ctx, op_msg(width, K.CAP_ALLOC, size=64, perm=3))
        # The kernel still reaches the monitor.
        await chk.from_noc(ctx, kernel(width, K.IPC_GRANT, status=1, perm=IpcDir.OUT,
                                       peer_x=OTHER[0], peer_y=OTHER[1], peer_fbits=LOCAL0))
        assert b.monitor.counters.quarantined is not None

    b.run(script)
    chk.check_counters()
    n0, flits0 = fault_at[0]
    assert len(b.noc) == n0 + 1
    t, hdr, got = km(b.noc[n0][1], width)
    assert t == K.FAULT and (hdr.dst_x, hdr.dst_y) == ERRORS and (hdr.src_x, hdr.src_y) == TILE
    meta.op = kind
    assert got == meta
    fault_len = len(b.noc[n0][1])
    assert len(b.log["noc_out"]) == flits0 + fault_len          # the only flits out after it
    c = b.counters
    assert c["faults"] == 1 and c["quarantined"] == 1
    assert c["sunk_out"] == 3 and c["sunk_in"] == 2
    assert model.ipc_out[1].valid and (model.ipc_out[1].x, model.ipc_out[1].y) == OTHER


@pytest.mark.parametrize("width", WIDTHS)
def test_inbound_denial_is_reported_without_quarantine(width):
    """Messages to the tile from a source without an IPC capability in (PEER; SOURCE on a port it
    was not granted; a memory ack from a tile that is not a memory tile): sunk, each reported
    (``INBOUND``, the source as peer, the port it was sent to, ``user`` = type | 1 << 8), counted;
    the tile is not quarantined: traffic both ways passes before and after."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))
    denied = [ipc_message(width, TILE, b"no", src=PEER),
              ipc_message(width, TILE, b"no", src=SOURCE, dst_fbits=LOCAL1),
              mem(width, LOAD_MEM_ACK, 0, 4, bytes(4), src=OTHER, dst=TILE)]

    async def script(b, ctx):
        for flits in denied:
            await chk.from_noc(ctx, flits)
            await chk.from_tile(ctx, ipc_message(width, PEER, b"out"))
            await chk.from_noc(ctx, ipc_message(width, TILE, b"in", src=SOURCE))

    b.run(script)
    chk.check_counters()
    faults = faults_of(b.noc, width)
    assert [(m.op, m.peer_x, m.peer_y, m.peer_fbits, m.user) for m in faults] == [
        (FaultKind.INBOUND, *PEER, LOCAL0, 12 | 256),
        (FaultKind.INBOUND, *SOURCE, LOCAL1, 12 | 256),
        (FaultKind.INBOUND, *OTHER, LOCAL0, LOAD_MEM_ACK | 256)]
    c = b.counters
    assert (c["inbound_denied"], c["sunk_in"], c["faults"], c["quarantined"]) == (3, 3, 3, 0)
    assert (c["passed_out"], c["passed_in"]) == (3, 3)


@pytest.mark.parametrize("width", WIDTHS)
def test_release_of_a_running_tile_kills_it(width):
    """A RELEASE of a tile that did not fault (hung, say, or told to stop) is a kill: the tile
    is held in reset while its owned memory goes back (MM_FREE) and its segments are dropped,
    then it runs again; no FAULT. A message it was part way through sending is ended on the
    NoC (a flit marked ``last``), and its next message after the reset passes whole."""
    b = MonitorBench(width)
    long = ipc_message(width, PEER, bytes(range(200)))
    part = 2 if width == 64 else 1

    async def script(b, ctx):
        await install(b, ctx, root=77)
        await b.from_tile(ctx, long[:part])
        await b.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))
        await b.wait_out(ctx, noc=2)
        while ctx.get(b.monitor.tile_reset):
            await ctx.tick()
        assert b.resets
        await b.from_tile(ctx, ipc_message(width, PEER, b"again"))
        await b.wait_out(ctx, noc=3)

    b.run(script)
    cut, free, again = (f for _, f in b.noc)
    assert cut[:part] == long[:part] and len(cut) == part + 1 and cut[-1][1] == 1
    assert km(free, width)[0] == K.MM_FREE and km(free, width)[2].root == 77
    assert again == ipc_message(width, PEER, b"again")
    c = b.counters
    assert (c["faults"], c["quarantined"], c["passed_out"]) == (0, 0, 2)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_denial_during_release_is_sunk_not_reported(width):
    """A message from a source the tile may not hear, arriving while a RELEASE walks the table
    (the tile still quarantined): sunk and counted, no report; the walk's MM_FREE goes out
    intact and the quarantine is lifted after it."""
    b = MonitorBench(width)

    async def script(b, ctx):
        await install(b, ctx, root=77)
        await b.from_tile(ctx, ipc_message(width, OTHER, b"fault"))
        await b.wait_out(ctx, noc=1)
        await b.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))
        await b.from_noc(ctx, ipc_message(width, TILE, b"no", src=PEER))

    b.run(script)
    assert [(km(f, width)[0], km(f, width)[2].op) for _, f in b.noc] == [
        (K.FAULT, FaultKind.NO_IPC_CAP), (K.MM_FREE, 0)]
    assert km(b.noc[1][1], width)[2].root == 77
    c = b.counters
    assert (c["inbound_denied"], c["sunk_in"], c["faults"], c["quarantined"]) == (0, 1, 1, 0)


# -- the rate limit --------------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_rate_limit_stall_delays_to_the_bucket_rate(width):
    """``RateLimit(burst=8, refill=1, period=4)``, 4-flit messages sent back to back: the first
    two pass at once (the full bucket), then one message every 16 cycles exactly (1 flit per 4
    cycles, the refill rate); none lost, none faulted, every waiting cycle counted."""
    rate = RateLimit(burst=8, refill=1, period=4, on_excess="stall")
    payload = bytes(16 if width == 64 else 192)               # 4 flits with the header
    msgs = [ipc_message(width, PEER, bytes([k]) + payload[1:]) for k in range(20)]
    assert all(len(m) == 4 for m in msgs)

    async def script(b, ctx):
        for msg in msgs:
            await b.from_tile(ctx, msg)

    b = MonitorBench(width, MonitorConfig(rate=rate)).run(script, settle=100)
    assert [f for _, f in b.noc] == msgs
    starts = b.log["noc_out"][::4]
    gaps = [t1 - t0 for t0, t1 in zip(starts, starts[1:])]
    assert starts[1] - starts[0] == 4 + (2 if width == 64 else 0)
    assert set(gaps[2:]) == {16}
    flits, cycles = 4 * (len(starts) - 3), starts[-1] - starts[2]
    assert flits / cycles == rate.refill / rate.period
    c = b.counters
    assert c["passed_out"] == 20 and c["faults"] == 0 and c["sunk_out"] == 0
    assert c["rate_stalls"] > 0


@pytest.mark.parametrize("width", WIDTHS)
def test_capability_operations_pay_from_the_bucket(width):
    """A flood of CAP_ALLOCs (each asks the memory manager for work) is held to the bucket's
    rate as messages are: with a bucket of one CAP_ALLOC's flits, refilled one flit every 50
    cycles, the first passes at once and each next one ``flits * 50`` cycles after the one
    before; every waiting cycle is counted."""
    alloc = op_msg(width, K.CAP_ALLOC, size=64, perm=Perm.RW)
    rate = RateLimit(burst=len(alloc), refill=1, period=50, on_excess="stall")

    async def script(b, ctx):
        for _ in range(4):
            await b.from_tile(ctx, alloc)

    b = MonitorBench(width, MonitorConfig(rate=rate)).run(script, settle=100,
                                                          timeout=50_000)
    assert [km(f, width)[0] for _, f in b.noc] == [K.MM_ALLOC] * 4
    ends = [cycle for cycle, _ in b.noc]
    gaps = [t1 - t0 for t0, t1 in zip(ends, ends[1:])]
    # (the first within one refill period: the refill's phase when the first one passed)
    assert gaps[1:] == [len(alloc) * rate.period] * 2
    assert (len(alloc) - 1) * rate.period < gaps[0] <= len(alloc) * rate.period
    c = b.counters
    assert c["cap_ops"] == 4 and c["faults"] == 0 and c["rate_stalls"] > 0


# -- capability operations -------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_cap_alloc_asks_the_manager_and_the_install_answers_with_a_handle(width):
    """CAP_ALLOC → MM_ALLOC (size, permissions, user word) to the manager; CAP_INSTALL(op =
    CAP_ALLOC) → CAP_RESULT OK with the new handle (entry 0, then 1); a failed allocation
    (NO_MEMORY) → CAP_RESULT with that status and no entry; the handles then work."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))
    got = []

    async def script(b, ctx):
        for k, (size, perm, user) in enumerate([(100, Perm.RW, 1), (4096, Perm.READ, 0xBEEF)]):
            noc, _ = await chk.from_tile(ctx, op_msg(width, K.CAP_ALLOC, size=size, perm=perm,
                                                     user=user))
            got.append(km(noc[0], width))
            _, tile = await chk.from_noc(ctx, kernel(
                width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=0x1000 * (k + 1), size=size,
                perm=perm, mem_x=0, mem_y=3, root=10 + k, user=user))
            got.append(km(tile[0], width))
        _, tile = await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value,
                                                 status=Status.NO_MEMORY, size=1 << 30, user=9))
        got.append(km(tile[0], width))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(1, 4000), 96))
        await chk.from_tile(ctx, mem(width, STORE_MEM, virtual_address(0, 90), 10, bytes(10)))

    b.run(script)
    chk.check_counters()
    (t0, h0, a0), (t1, _, r0), (t2, _, a1), (t3, _, r1), (t4, _, r2) = got
    assert t0 == K.MM_ALLOC and (h0.dst_x, h0.dst_y) == MANAGER
    assert (a0.size, a0.perm, a0.user) == (100, Perm.RW, 1)
    assert (a1.size, a1.perm, a1.user) == (4096, Perm.READ, 0xBEEF)
    assert t1 == t3 == t4 == K.CAP_RESULT
    assert (r0.op, r0.status, r0.handle, r0.size, r0.perm, r0.user) == (32, 0, 0, 100, 3, 1)
    assert (r1.status, r1.handle, r1.user) == (Status.OK, 1, 0xBEEF)
    assert (r2.status, r2.user) == (Status.NO_MEMORY, 9)
    assert b.counters["cap_ops"] == 2 and b.counters["passed_out"] == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_cap_free_frees_owned_memory_only(width):
    """CAP_FREE of an owned handle → CAP_RESULT OK and MM_FREE(root); of a received one →
    CAP_RESULT OK and nothing to the manager; of a stale handle → BAD_HANDLE (no fault). The
    freed entry is reused with the next generation: handle 8, then 9 (8 entries)."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))
    results = []

    async def script(b, ctx):
        await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=0x1000,
                                       size=64, perm=3, mem_x=0, mem_y=3, root=21))
        await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_SEND.value, addr=0x9000,
                                       size=64, perm=1, mem_x=0, mem_y=3, root=22,
                                       peer_x=2, peer_y=1, user=4))
        for handle in (0, 1, 0):
            results.append(await chk.from_tile(ctx, op_msg(width, K.CAP_FREE, handle=handle,
                                                            user=handle + 100)))
        for root in (23, 24):
            _, tile = await chk.from_noc(ctx, kernel(
                width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=0x2000, size=8, perm=3,
                mem_x=0, mem_y=3, root=root))
            results.append(([], tile))

    b.run(script)
    chk.check_counters()
    (n0, t0), (n1, t1), (n2, t2), (_, t3), (_, t4) = results
    assert [km(f, width)[2].root for f in n0] == [21] and km(n0[0], width)[0] == K.MM_FREE
    assert n1 == [] and n2 == []
    assert [(km(t, width)[2].op, km(t, width)[2].status, km(t, width)[2].user)
            for t in t0 + t1 + t2] == [(33, Status.OK, 100), (33, Status.OK, 101),
                                       (33, Status.BAD_HANDLE, 100)]
    assert km(t3[0], width)[2].handle == 8 and km(t4[0], width)[2].handle == 9
    assert b.counters["faults"] == 0 and b.counters["cap_ops"] == 3


@pytest.mark.parametrize("width", WIDTHS)
def test_cap_send_derives_and_the_receiver_is_notified(width):
    """CAP_SEND (offset, size, permissions within the parent, to a tile with an IPC capability)
    → MM_DERIVE to the manager (physical ``base + offset``, the parent's memory tile and root,
    the peer, the user word) and CAP_RESULT OK to the tile; a CAP_INSTALL(op = CAP_SEND) →
    CAP_NOTIFY with the new handle, size, permissions, sender and user word; that capability
    works for what it allows."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))
    out = []

    async def script(b, ctx):
        await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value,
                                       addr=0x12_3400, size=0x1000, perm=3, mem_x=0, mem_y=2,
                                       root=33))
        out.append(await chk.from_tile(ctx, op_msg(
            width, K.CAP_SEND, handle=0, addr=0x100, size=0xF00, perm=Perm.READ,
            peer_x=PEER[0], peer_y=PEER[1], peer_fbits=LOCAL1, user=0xCAFE)))
        out.append(await chk.from_noc(ctx, kernel(
            width, K.CAP_INSTALL, op=K.CAP_SEND.value, addr=0x55_0000, size=0x80,
            perm=Perm.READ, mem_x=0, mem_y=3, root=44, peer_x=SOURCE[0], peer_y=SOURCE[1],
            user=0xD00D)))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(1, 0x40), 0x40))

    b.run(script)
    chk.check_counters()
    (noc, tile), (_, notify) = out
    t, hdr, d = km(noc[0], width)
    assert t == K.MM_DERIVE and (hdr.dst_x, hdr.dst_y) == MANAGER
    assert d == KernelMeta(addr=0x12_3500, size=0xF00, perm=Perm.READ, mem_x=0, mem_y=2,
                           root=33, peer_x=PEER[0], peer_y=PEER[1], peer_fbits=LOCAL1,
                           user=0xCAFE)
    t, _, r = km(tile[0], width)
    assert t == K.CAP_RESULT and (r.op, r.status, r.handle, r.user) == (34, 0, 0, 0xCAFE)
    t, hdr, n = km(notify[0], width)
    assert t == K.CAP_NOTIFY and (hdr.dst_x, hdr.dst_y) == TILE
    assert n == KernelMeta(handle=1, size=0x80, perm=Perm.READ, peer_x=SOURCE[0],
                           peer_y=SOURCE[1], user=0xD00D)
    load = decode(b.noc[-1][1], width)
    assert load[0] == "mem" and load[3]["addr"] == 0x55_0040 and load[3]["tag"] == 1
    assert (load[2].dst_x, load[2].dst_y) == (0, 3)


@pytest.mark.parametrize("width", WIDTHS)
def test_cap_send_to_a_tile_without_ipc_capability_or_through_a_stale_handle_faults(width):
    """CAP_SEND to a peer the tile may not send to → NO_IPC_CAP with the peer in the FAULT; after
    RELEASE, a CAP_SEND through the freed handle → STALE_HANDLE."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))

    async def script(b, ctx):
        seg = kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=0x1000, size=0x100,
                     perm=3, mem_x=0, mem_y=3, root=1)
        await chk.from_noc(ctx, seg)
        await chk.from_tile(ctx, op_msg(width, K.CAP_SEND, handle=0, size=8, perm=1,
                                        peer_x=OTHER[0], peer_y=OTHER[1], peer_fbits=LOCAL0))
        await chk.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))
        await chk.from_tile(ctx, op_msg(width, K.CAP_SEND, handle=0, size=8, perm=1,
                                        peer_x=PEER[0], peer_y=PEER[1], peer_fbits=LOCAL0))

    b.run(script)
    chk.check_counters()
    faults = faults_of(b.noc, width)
    assert [(f.op, f.peer_x, f.peer_y, f.user) for f in faults] == [
        (FaultKind.NO_IPC_CAP, *OTHER, 34), (FaultKind.STALE_HANDLE, *PEER, 34)]


@pytest.mark.parametrize("width", WIDTHS)
def test_cap_revoke_drops_derived_entries_and_answers(width):
    """CAP_REVOKE(root) drops every received entry of that root (two of them), not the tile's own
    allocation with the same root nor entries of other roots, and answers CAP_REVOKED(root) to
    whoever sent it (its port too); a load through a revoked handle is then STALE_HANDLE."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))
    revoked = []

    async def script(b, ctx):
        for op, root in [(K.CAP_ALLOC, 5), (K.CAP_SEND, 5), (K.CAP_SEND, 6), (K.CAP_SEND, 5)]:
            await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=op.value, addr=0x1000,
                                           size=0x100, perm=3, mem_x=0, mem_y=3, root=root))
        revoked.append(await chk.from_noc(ctx, kernel_message(width, K.CAP_REVOKE, root=5)))
        for handle in (0, 2):
            await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(handle, 0), 4))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(1, 0), 4))

    b.run(script)
    chk.check_counters()
    noc, tile = revoked[0]
    t, hdr, m = km(noc[0], width)
    assert t == K.CAP_REVOKED and m.root == 5 and not tile
    assert (hdr.dst_x, hdr.dst_y, hdr.dst_fbits) == (*MANAGER, LOCAL1)
    assert not chk.m.seg[1].valid and not chk.m.seg[3].valid
    assert chk.m.seg[0].valid and chk.m.seg[2].valid
    assert b.counters["passed_out"] == 2
    fault = km(b.noc[-1][1], width)
    assert fault[0] == K.FAULT and fault[2].op == FaultKind.STALE_HANDLE and fault[2].handle == 1


def kernel_message(width, msg_type, *, src=MANAGER, src_fbits=LOCAL1, **meta):
    """A kernel message to the tile from ``src``'s port ``src_fbits``."""
    return kernel_message_flits(width, msg_type, KernelMeta(**meta), src=src, dst=TILE,
                                src_fbits=src_fbits)


@pytest.mark.parametrize("width", WIDTHS)
def test_full_table(width):
    """Two entries: a CAP_ALLOC with the table full → TABLE_FULL at once (no MM_ALLOC); an
    allocation installed into a table that filled up meanwhile → CAP_RESULT TABLE_FULL and
    MM_FREE(root) back to the manager; a sent capability that finds it full is dropped; both
    counted in installs_dropped."""
    config = MonitorConfig(entries=2)
    b = MonitorBench(width, config)
    chk = Checked(b, model_of(b, config))
    out = []

    async def script(b, ctx):
        out.append(await chk.from_tile(ctx, op_msg(width, K.CAP_ALLOC, size=8, perm=3, user=1)))
        for root in (1, 2):
            await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value,
                                           addr=0x100, size=8, perm=3, root=root))
        out.append(await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value,
                                                  addr=0x200, size=8, perm=3, root=3, user=1)))
        out.append(await chk.from_tile(ctx, op_msg(width, K.CAP_ALLOC, size=8, perm=3, user=2)))
        out.append(await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_SEND.value,
                                                  addr=0x300, size=8, perm=1, root=4)))

    b.run(script)
    chk.check_counters()
    (a_noc, _), (i_noc, i_tile), (f_noc, f_tile), (s_noc, s_tile) = out
    assert km(a_noc[0], width)[0] == K.MM_ALLOC
    assert km(i_tile[0], width)[2].status == Status.TABLE_FULL
    assert [(km(f, width)[0], km(f, width)[2].root) for f in i_noc] == [(K.MM_FREE, 3)]
    assert f_noc == [] and km(f_tile[0], width)[2].status == Status.TABLE_FULL
    assert km(f_tile[0], width)[2].user == 2
    assert s_noc == s_tile == []
    assert b.counters["installs_dropped"] == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_ipc_grants_at_run_time(width):
    """IPC_GRANT adds and removes capabilities both ways: a message to OTHER on LOCAL1 passes once
    granted (LOCAL0 still would not); messages from OTHER on LOCAL0 reach the tile once granted and
    are denied (reported, no quarantine) once removed; removing PEER's any-port capability makes
    the next message to PEER a NO_IPC_CAP fault."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))

    def grant(status, direction, peer, fbits):
        return kernel(width, K.IPC_GRANT, src=ERRORS, status=status, perm=direction,
                      peer_x=peer[0], peer_y=peer[1], peer_fbits=fbits)

    async def script(b, ctx):
        await chk.from_noc(ctx, grant(1, IpcDir.OUT, OTHER, LOCAL1))
        await chk.from_tile(ctx, ipc_message(width, OTHER, b"granted", dst_fbits=LOCAL1))
        await chk.from_noc(ctx, grant(1, IpcDir.IN, OTHER, LOCAL0))
        await chk.from_noc(ctx, ipc_message(width, TILE, b"hello", src=OTHER))
        await chk.from_noc(ctx, grant(0, IpcDir.IN, OTHER, LOCAL0))
        await chk.from_noc(ctx, ipc_message(width, TILE, b"hello", src=OTHER))
        await chk.from_tile(ctx, ipc_message(width, PEER, b"still"))
        await chk.from_noc(ctx, grant(0, IpcDir.OUT, PEER, LOCAL0))
        await chk.from_tile(ctx, ipc_message(width, PEER, b"gone"))

    b.run(script)
    chk.check_counters()
    c = b.counters
    assert (c["passed_out"], c["passed_in"], c["inbound_denied"], c["faults"]) == (2, 1, 1, 2)
    assert c["quarantined"] == 1
    faults = faults_of(b.noc, width)
    assert [f.op for f in faults] == [FaultKind.INBOUND, FaultKind.NO_IPC_CAP]


@pytest.mark.parametrize("width", WIDTHS)
def test_kernel_messages_from_other_tiles_are_dropped(width):
    """IPC_GRANT, CAP_INSTALL, CAP_REVOKE and RELEASE from a tile that is not the kernel's (even
    one the tile may hear from): dropped and counted in kernel_denied, with no effect."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))

    async def script(b, ctx):
        await chk.from_noc(ctx, kernel(width, K.IPC_GRANT, src=SOURCE, status=1,
                                       perm=IpcDir.OUT, peer_x=OTHER[0], peer_y=OTHER[1],
                                       peer_fbits=LOCAL0))
        await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, src=PEER, op=K.CAP_ALLOC.value,
                                       addr=0, size=1 << 30, perm=3))
        await chk.from_noc(ctx, kernel(width, K.CAP_REVOKE, src=SOURCE, root=1))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, 0, 4))
        await chk.from_noc(ctx, kernel(width, K.RELEASE, src=PEER))

    b.run(script)
    chk.check_counters()
    c = b.counters
    assert c["kernel_denied"] == 4 and c["quarantined"] == 1 and not b.resets
    assert [km(f, width)[2].op for _, f in b.noc] == [FaultKind.STALE_HANDLE]
    assert b.tile == []


@pytest.mark.parametrize("width", WIDTHS)
def test_release_resets_the_tile_frees_its_memory_and_lifts_the_quarantine(width):
    """After a fault, RELEASE from the error manager: ``tile_reset`` high for the walk of the
    table, MM_FREE(root) for every owned segment (in table order; none for a received one), every
    entry dropped (old handles stale, new ones of the next generation), the quarantine lifted:
    traffic both ways passes again."""
    b = MonitorBench(width)
    chk = Checked(b, model_of(b))
    released = []

    async def script(b, ctx):
        for op, root in [(K.CAP_ALLOC, 11), (K.CAP_SEND, 12), (K.CAP_ALLOC, 13)]:
            await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=op.value, addr=0x1000,
                                           size=0x100, perm=3, mem_x=0, mem_y=3, root=root))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(2, 0x100), 1))
        await chk.from_noc(ctx, ipc_message(width, TILE, b"x", src=SOURCE))
        released.append(len(b.noc))
        released.append(await chk.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS)))
        await chk.from_tile(ctx, ipc_message(width, PEER, b"again"))
        await chk.from_noc(ctx, ipc_message(width, TILE, b"again", src=SOURCE))
        await chk.from_noc(ctx, kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=0x1000,
                                       size=0x100, perm=3, mem_x=0, mem_y=3, root=14))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(8, 0), 4))
        await chk.from_tile(ctx, mem(width, LOAD_MEM, virtual_address(0, 0), 4))

    b.run(script)
    chk.check_counters()
    n, (noc, tile) = released
    assert [(km(f, width)[0], km(f, width)[2].root) for f in noc] == [(K.MM_FREE, 11),
                                                                      (K.MM_FREE, 13)]
    assert tile == []
    assert len(b.resets) >= MonitorConfig().entries
    assert b.resets == list(range(b.resets[0], b.resets[0] + len(b.resets)))
    c = b.counters
    assert c["faults"] == 2 and c["quarantined"] == 1      # the stale load at the end
    assert c["passed_out"] == 2 and c["passed_in"] == 1 and c["sunk_in"] == 1
    fault = km(b.noc[-1][1], width)[2]
    assert fault.op == FaultKind.STALE_HANDLE and fault.handle == 0


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("begun", [1, 3])
def test_release_forgets_a_message_the_tile_had_begun(width, begun):
    """A quarantined tile reset in the middle of a message (``begun`` flits sent, no ``last``):
    after RELEASE the monitor expects a new message, so the tile's first message after its reset
    passes whole (and is not taken for the rest of the old one)."""
    b = MonitorBench(width)
    model = model_of(b)
    chk = Checked(b, model)
    partial = [(d, 0) for d, _ in ipc_message(width, PEER, bytes(100))[:begun]]

    async def script(b, ctx):
        await chk.from_tile(ctx, ipc_message(width, OTHER, b"fault"))
        await b.from_tile(ctx, partial)
        await ctx.tick().repeat(5)
        if begun >= header_flits(width):
            model.counters["sunk_out"] += 1         # its head was seen, and dropped
        await chk.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))
        await chk.from_tile(ctx, ipc_message(width, PEER, b"new"))
        await chk.from_tile(ctx, ipc_message(width, PEER, b"newer"))

    b.run(script)
    chk.check_counters()
    assert b.counters["passed_out"] == 2 and b.resets


async def reads_again_after_release(b, ctx, width):
    """A RELEASE is on its way: wait for the reset to end, then the tile reads again and a
    message from SOURCE reaches it."""
    await ctx.tick().repeat(20)
    assert b.resets and not ctx.get(b.monitor.tile_reset)
    ctx.set(b.monitor.tile_in.ready, 1)
    await b.from_noc(ctx, ipc_message(width, TILE, b"after", src=SOURCE))
    await b.wait_out(ctx, tile=1)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_quarantined_tile_that_stops_reading_blocks_nothing(width):
    """A tile that never takes its input: a message from SOURCE waits at ``tile_in``, half
    through the monitor. Once the tile faults it is cut off: the waiting message is drained (its
    sender finishes), the kernel's RELEASE gets through, and after the reset (the tile reading
    again) the next message arrives whole, nothing of the drained one with it."""
    b = MonitorBench(width)
    long = ipc_message(width, TILE, bytes(range(200)), src=SOURCE)
    sent = []

    async def noc_side(b, ctx):
        await ctx.tick()
        await b.from_noc(ctx, long)
        sent.append(1)
        await b.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))

    async def script(b, ctx):
        await ctx.tick()
        ctx.set(b.monitor.tile_in.ready, 0)
        await ctx.tick().repeat(20)
        assert b.log["tile_in"] == [] and not sent
        await b.from_tile(ctx, ipc_message(width, OTHER, b"fault"))
        while not sent:
            await ctx.tick()
        await reads_again_after_release(b, ctx, width)

    b.run(script, noc_side)
    assert [f for _, f in b.tile] == [ipc_message(width, TILE, b"after", src=SOURCE)]
    assert len(b.log["tile_in"]) == len(b.tile[0][1])
    assert [km(f, width)[2].op for _, f in b.noc] == [FaultKind.NO_IPC_CAP]
    # The waiting message had been passed (its head taken and stored while the tile did not
    # read) and is drained at the quarantine.
    c = b.counters
    assert (c["passed_in"], c["sunk_in"]) == (2, 0)
    assert c["quarantined"] == 0


STALL_LIMIT = 64


@pytest.mark.parametrize("width", WIDTHS)
def test_a_tile_that_stops_reading_is_quarantined_as_stalled(width):
    """A tile that never takes a message it is offered, and does nothing else wrong: after
    ``stall_limit`` cycles its monitor reports one ``FAULT`` of kind ``STALLED`` and quarantines
    it, the waiting message is drained (its sender finishes), and the kernel's RELEASE resets
    the tile, after which the next message arrives whole."""
    b = MonitorBench(width, MonitorConfig(stall_limit=STALL_LIMIT))
    long = ipc_message(width, TILE, bytes(range(200)), src=SOURCE)
    sent, faulted = [], []

    async def noc_side(b, ctx):
        await ctx.tick()
        await b.from_noc(ctx, long)
        sent.append(1)

    async def script(b, ctx):
        ctx.set(b.monitor.tile_in.ready, 0)
        for cycle in range(4 * STALL_LIMIT):
            if b.noc:
                faulted.append(cycle)
                break
            await ctx.tick()
        assert faulted, "no FAULT"
        while not sent:
            await ctx.tick()
        assert b.counter(ctx, "quarantined") == 1
        await b.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))
        await reads_again_after_release(b, ctx, width)

    b.run(script, noc_side)
    # The head reaches tile_in a few cycles after the start; the FAULT (header and metadata
    # flits) leaves within a few more of the limit.
    assert STALL_LIMIT < faulted[0] < STALL_LIMIT + 20
    assert [km(f, width)[2].op for _, f in b.noc] == [FaultKind.STALLED]
    _, header, _ = km(b.noc[0][1], width)
    assert (header.dst_x, header.dst_y) == ERRORS
    assert [f for _, f in b.tile] == [ipc_message(width, TILE, b"after", src=SOURCE)]
    c = b.counters
    assert c["faults"] == 1 and c["quarantined"] == 0 and c["passed_in"] == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_a_tile_waiting_to_send_is_not_stalled(width):
    """A tile that does not read while the NoC does not take what it sends is waiting, not
    hung: no FAULT for eight times the limit; once its message goes and it reads again, its
    input arrives (a tile that reads now and then never faults)."""
    b = MonitorBench(width, MonitorConfig(stall_limit=STALL_LIMIT))
    waiting = ipc_message(width, TILE, b"for you", src=SOURCE)
    mine = ipc_message(width, PEER, b"mine")

    async def noc_side(b, ctx):
        await ctx.tick()
        await b.from_noc(ctx, waiting)

    async def tile_side(b, ctx):
        await ctx.tick()
        await b.from_tile(ctx, mine)

    async def script(b, ctx):
        mon = b.monitor
        ctx.set(mon.tile_in.ready, 0)
        ctx.set(mon.noc_out.ready, 0)
        await ctx.tick().repeat(8 * STALL_LIMIT)
        assert b.noc == [] and b.counter(ctx, "quarantined") == 0
        assert ctx.get(mon.tile_in.valid) and ctx.get(mon.tile_out.valid)
        ctx.set(mon.noc_out.ready, 1)
        for _ in range(STALL_LIMIT // 2):         # reads now and then
            ctx.set(mon.tile_in.ready, 1)
            await ctx.tick()
            ctx.set(mon.tile_in.ready, 0)
            await ctx.tick().repeat(STALL_LIMIT // 2)
        ctx.set(mon.tile_in.ready, 1)
        await b.wait_out(ctx, noc=1, tile=1)

    b.run(script, noc_side, tile_side)
    assert [f for _, f in b.noc] == [mine]
    assert [f for _, f in b.tile] == [waiting]
    assert b.counters["faults"] == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_a_message_left_part_way_is_ended_on_the_noc_and_the_tile_quarantined(width):
    """The tile sends a message's head and some of its payload, then nothing for ``stall_limit``
    cycles: the monitor ends the message on the NoC with a flit marked ``last`` (no router
    path stays held), reports ``UNFINISHED`` and quarantines the tile; the rest of that message,
    sent late, is discarded; after RELEASE the tile's next message passes whole."""
    b = MonitorBench(width, MonitorConfig(stall_limit=STALL_LIMIT))
    long = ipc_message(width, PEER, bytes(range(200)))
    part = 4
    after = ipc_message(width, PEER, b"after")

    async def script(b, ctx):
        await b.from_tile(ctx, long[:part])
        await b.wait_out(ctx, noc=2, limit=4 * STALL_LIMIT)
        assert b.counter(ctx, "quarantined") == 1
        await b.from_tile(ctx, long[part:])              # too late: discarded
        await ctx.tick().repeat(10)
        assert len(b.noc) == 2
        await b.from_noc(ctx, kernel(width, K.RELEASE, src=ERRORS))
        await ctx.tick().repeat(20)
        assert b.resets and not ctx.get(b.monitor.tile_reset)
        await b.from_tile(ctx, after)
        await b.wait_out(ctx, noc=3)

    b.run(script)
    cut, fault, passed = (f for _, f in b.noc)
    assert cut[:part] == long[:part] and len(cut) == part + 1 and cut[-1][1] == 1
    assert km(fault, width)[2].op == FaultKind.UNFINISHED
    assert passed == after
    assert b.counters["faults"] == 1


def test_stall_limit_is_checked():
    for bad in (0, -1, 1.5, True, 1 << 32):
        with pytest.raises(ValueError, match="stall_limit"):
            MonitorConfig(stall_limit=bad)
    assert MonitorConfig().stall_limit == 1 << 16 and MonitorConfig(stall_limit=None)


# -- random sequences against the model ------------------------------------------------------------

GRANTABLE = [PEER, SOURCE, OTHER, (0, 0)]
SENDERS = [SOURCE, PEER, OTHER, MANAGER, MEMORY, ERRORS]


class RandomTile:
    """Random messages into the monitor, chosen from what the model holds now."""

    def __init__(self, width, model, rng):
        self.w, self.m, self.rng = width, model, rng
        self.roots = [1]
        self.next_root = 100

    def handle(self, good=0.95):
        valid = self.m.valid_handles()
        if valid and self.rng.random() < good:
            return self.rng.choice(valid)
        return self.rng.randrange(256)

    def entry(self, handle):
        return self.m.lookup(handle)[1]

    def step(self):
        """``(side, flits, follow-up)``: follow-up, when not None, is called with the messages the
        model predicted and gives the manager's answer."""
        r, w = self.rng, self.w
        ops = ["ipc_out"] * 10 + ["ipc_in"] * 8 + ["mem"] * 18 + ["ack"] * 6 + \
            ["alloc"] * 10 + ["free"] * 6 + ["send"] * 8 + ["install_send"] * 5 + \
            ["revoke"] * 5 + ["grant"] * 6 + ["foreign_kernel"] * 2 + ["forged"] * 1 + \
            ["release"] * (40 if self.m.quarantined else 1) + \
            (["malformed"] * 1 if w == 64 else [])
        op = r.choice(ops)
        if op in ("mem", "send") and not self.m.valid_handles() and r.random() < 0.9:
            op = "alloc"
        if op == "ipc_out":
            dst = r.choice([PEER] * 8 + [OTHER, SOURCE, MANAGER])
            return "tile", ipc_message(w, dst, r.randbytes(r.randrange(0, 24)),
                                       msg_type=r.choice([1, 12, 46, 200]),
                                       dst_fbits=r.choice([LOCAL0, LOCAL1]),
                                       src=r.choice([TILE] * 5 + [OTHER])), None
        if op == "ipc_in":
            return "noc", ipc_message(w, TILE, r.randbytes(r.randrange(0, 24)),
                                      src=r.choice(SENDERS),
                                      dst_fbits=r.choice([LOCAL0, LOCAL1])), None
        if op in ("mem", "malformed"):
            h = self.handle()
            e = self.entry(h)
            load = r.random() < 0.5
            size = r.randrange(0, 33)
            top = max(e.size - size, 0) if e.valid else 64
            offset = r.randrange(0, top + 1) if r.random() < 0.9 else r.randrange(0, 1 << 14)
            wrap = 0
            if r.random() < 0.15:
                wrap = r.choice([3, 4, 6, 8, 12, 41])
                size = min(size, 1 << wrap)
            flits = mem_message_flits(w, LOAD_MEM if load else STORE_MEM,
                                      virtual_address(h, offset), size,
                                      b"" if load else r.randbytes(size), src=TILE,
                                      dst=r.choice([(9, 9), MEMORY]), wrap=wrap)
            if op == "malformed":
                flits = flits[:r.randrange(1, 4)]
                flits[-1] = (flits[-1][0], 1)
            return "tile", flits, None
        if op == "ack":
            h = self.handle(0.9)
            e = self.entry(h)
            size = r.randrange(0, 20)
            return "noc", mem(w, r.choice([LOAD_MEM_ACK, STORE_MEM_ACK]),
                              (e.base + r.randrange(0, 64)) % (1 << 48), size, r.randbytes(size),
                              src=r.choice([MEMORY] * 4 + [SOURCE, PEER]), dst=TILE,
                              tag=h), None
        if op == "alloc":
            size, perm, user = r.choice([8, 64, 100, 4096]), r.randrange(1, 4), r.getrandbits(32)

            def answer(noc, tile):
                if not noc:
                    return None
                self.next_root += 1
                self.roots.append(self.next_root)
                status = Status.OK if r.random() < 0.9 else Status.NO_MEMORY
                base = r.choice([0x1000, 0x40000, 0x1234]) * r.randrange(1, 16)
                return kernel(w, K.CAP_INSTALL, op=K.CAP_ALLOC.value, status=status,
                              addr=base, size=size, perm=perm, mem_x=0, mem_y=r.randrange(4),
                              root=self.next_root, user=user)
            return "tile", op_msg(w, K.CAP_ALLOC, size=size, perm=perm, user=user), answer
        if op == "free":
            return "tile", op_msg(w, K.CAP_FREE, handle=self.handle(), user=r.getrandbits(8)), \
                None
        if op == "send":
            h = self.handle(0.95)
            e = self.entry(h)
            size = r.randrange(0, max(e.size, 1) + 1)
            offset = r.randrange(0, max(e.size - size, 0) + 1)
            if r.random() < 0.05:
                size += e.size
            perm = e.perm if r.random() < 0.6 else e.perm & r.randrange(4)
            if r.random() < 0.05:
                perm = 3
            peer = PEER if r.random() < 0.9 else r.choice(GRANTABLE)
            return "tile", op_msg(w, K.CAP_SEND, handle=h, addr=offset, size=size, perm=perm,
                                  peer_x=peer[0], peer_y=peer[1],
                                  peer_fbits=r.choice([LOCAL0, LOCAL1]),
                                  user=r.getrandbits(32)), None
        if op == "install_send":
            sender = r.choice(GRANTABLE)
            return "noc", kernel(w, K.CAP_INSTALL, op=K.CAP_SEND.value,
                                 status=Status.OK if r.random() < 0.95 else Status.BAD_HANDLE,
                                 addr=r.randrange(0, 1 << 20) * 64, size=r.choice([16, 256, 4096]),
                                 perm=r.randrange(1, 4), mem_x=0, mem_y=3,
                                 root=r.choice(self.roots), peer_x=sender[0], peer_y=sender[1],
                                 user=r.getrandbits(32)), None
        if op == "revoke":
            roots = [e.root for e in self.m.seg if e.valid] + self.roots
            return "noc", kernel_message(w, K.CAP_REVOKE, root=r.choice(roots),
                                         src_fbits=r.choice([LOCAL0, LOCAL1])), None
        if op == "grant":
            peer = r.choice(GRANTABLE)
            return "noc", kernel(w, K.IPC_GRANT, src=r.choice([MANAGER, ERRORS]),
                                 status=int(r.random() < 0.6),
                                 perm=r.choice([IpcDir.OUT, IpcDir.IN]), peer_x=peer[0],
                                 peer_y=peer[1], peer_fbits=r.choice([LOCAL0, LOCAL1])), None
        if op == "foreign_kernel":
            t = r.choice([K.IPC_GRANT, K.CAP_INSTALL, K.CAP_REVOKE, K.RELEASE])
            return "noc", kernel(w, t, src=r.choice([SOURCE, PEER]), status=1, perm=1,
                                 peer_x=OTHER[0], peer_y=OTHER[1], op=32, size=8), None
        if op == "forged":
            t = r.choice([K.CAP_RESULT, K.MM_FREE, K.FAULT, K.RELEASE, K.CAP_REVOKED])
            return "tile", kernel(w, t, src=TILE, dst=MANAGER, root=3), None
        return "noc", kernel(w, K.RELEASE, src=ERRORS), None


def run_random(width, seed, steps, config=None):
    config = config or MonitorConfig()
    rng = random.Random(seed)
    b = MonitorBench(width, config)
    model = model_of(b, config)
    chk = Checked(b, model)
    gen = RandomTile(width, model, rng)
    kinds = []

    async def script(b, ctx):
        for _ in range(steps):
            side, flits, answer = gen.step()
            noc, tile = await (chk.from_tile if side == "tile" else chk.from_noc)(ctx, flits)
            kinds.extend(m.op for m in faults_of([(0, f) for f in noc], width))
            if answer is not None:
                reply = answer(noc, tile)
                if reply is not None:
                    await chk.from_noc(ctx, reply)

    b.run(script, timeout=200_000)
    chk.check_counters()
    return b, kinds


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", range(2))
def test_random_operations_match_the_model(width, seed):
    """300 random messages (see RandomTile) into a monitor with 4 entries (so the table fills and
    handles wrap), each predicted by the model: every message out, flit for flit, and the
    counters; the run sees several kinds of fault and several releases."""
    b, kinds = run_random(width, seed, 300, MonitorConfig(entries=4))
    c = b.counters
    assert len(set(kinds)) >= 5 and c["installs_dropped"] >= 1
    assert c["passed_out"] >= 15 and c["passed_in"] >= 20 and c["cap_ops"] >= 60


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", range(2, 6))
def test_random_operations_match_the_model_long(width, seed):
    """As above, 1500 messages, 8 entries."""
    run_random(width, seed, 1500)
