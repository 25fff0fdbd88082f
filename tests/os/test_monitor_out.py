"""A monitor's outgoing side (apiary/os/monitor_out.py), each part alone at 64 and 512 bits:
OutgoingRules finds every kind of violation and nothing in allowed messages, rewrites the head
(source, a load or store's physical address) and fills the FAULT report; TileOps answers each
capability operation; OutgoingCheck gives the verdicts in their order (quarantine, violation,
operation, rate), with their waits, requests and counters."""

import random
import sys
from pathlib import Path

import pytest

from apiary.noc.gate import Verdict
from apiary.noc.header import Fbits
from apiary.os.memory_tile import LOAD_MEM, STORE_MEM, decode_mem_message, mem_message_flits
from apiary.os.monitor import RateLimit
from apiary.os.monitor_out import OutgoingCheck, OutgoingRules, TileOps
from apiary.os.tlb import TlbConfig
from apiary.os.uapi import FaultKind as F, KernelMeta, KernelMsgType as K, Perm, Status, \
    kernel_message_flits, virtual_address
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv

sys.path.insert(0, str(Path(__file__).parent))
from monitor_bench import ipc_message  # noqa: E402
from test_monitor_messages import head_of, run_comb  # noqa: E402


WIDTHS = [64, 512]
TILE, PEER, MEMORY, MANAGER, ERRORS = (1, 1), (2, 1), (0, 3), (3, 0), (3, 1)
SEGMENT = dict(valid=1, owner=1, gen=0, base=0x4_0000, size=0x1000, perm=Perm.READ,
               mem_x=MEMORY[0], mem_y=MEMORY[1], root=7)


def load(width, t=LOAD_MEM, handle=1, offset=0x10, size=8, wrap=0, tag=0):
    payload = b"\0" * size if t == STORE_MEM else b""
    return mem_message_flits(width, t, virtual_address(handle, offset), size, payload,
                             src=(9, 9), dst=(5, 5), wrap=wrap, tag=tag)


def send(width, handle=1, addr=0, size=0x100, perm=Perm.READ, peer=PEER):
    return kernel_message_flits(width, K.CAP_SEND, KernelMeta(
        handle=handle, addr=addr, size=size, perm=perm, peer_x=peer[0], peer_y=peer[1]),
        src=TILE, dst=TILE)


def flits_of(value, width, n):
    mask = (1 << width) - 1
    return [((value >> (j * width)) & mask, int(j == n - 1)) for j in range(n)]


# name: (message(width), lookups, expected fault)
CASES = {
    "ipc": (lambda w: ipc_message(w, PEER, b"hi", src=(7, 7)), {}, 0),
    "ipc_no_cap": (lambda w: ipc_message(w, (2, 2), b"hi"), {"dst": 0}, F.NO_IPC_CAP),
    "forged": (lambda w: kernel_message_flits(w, K.CAP_INSTALL, KernelMeta()), {}, F.FORGED),
    "short": (lambda w: [(load(w)[0][0], 1)], {}, F.MALFORMED),
    "load": (load, {}, 0),
    "load_stale": (load, {"current": 0}, F.STALE_HANDLE),
    "store_read_only": (lambda w: load(w, STORE_MEM), {}, F.PERMISSION),
    "load_beyond": (lambda w: load(w, offset=0xffc), {}, F.OUT_OF_BOUNDS),
    "ring": (lambda w: load(w, offset=0xff8, size=0x100, wrap=8), {}, 0),
    "ring_misaligned": (lambda w: load(w, offset=0xff8, size=0x100, wrap=8),
                        {"mem": dict(SEGMENT, base=0x4_0010)}, F.OUT_OF_BOUNDS),
    "send": (send, {}, 0),
    "send_stale": (send, {"current": 0}, F.STALE_HANDLE),
    "send_wider": (lambda w: send(w, perm=Perm.RW), {}, F.DERIVE_WIDER),
    "send_beyond": (lambda w: send(w, addr=0xf80), {}, F.DERIVE_WIDER),
    "send_no_peer": (send, {"dst": 0}, F.NO_IPC_CAP),
    "alloc": (lambda w: kernel_message_flits(w, K.CAP_ALLOC, KernelMeta(size=64)), {"dst": 0},
              0),
}


def answer_lookups(ctx, dut, lookups):
    ctx.set(dut.seg.entry, lookups.get("mem", SEGMENT))
    ctx.set(dut.seg.current, lookups.get("current", 1))
    ctx.set(dut.dst.allowed, lookups.get("dst", 1))


@pytest.mark.parametrize("width", WIDTHS)
def test_rules_find_each_violation(width):
    dut = OutgoingRules(width, TILE)

    async def tb(ctx):
        for name, (message, lookups, fault) in CASES.items():
            flits = message(width)
            ctx.set(dut.head, head_of(flits, width))
            ctx.set(dut.short, int(name == "short"))
            answer_lookups(ctx, dut, lookups)
            assert ctx.get(dut.fault) == fault, name
            assert ctx.get(dut.report.op) == fault, name
        # A passed load goes to its memory tile, at its physical address, tagged by its handle,
        # from the tile's own place.
        ctx.set(dut.head, head_of(load(width, handle=1, offset=0x10), width))
        answer_lookups(ctx, dut, {})
        assert ctx.get(dut.seg.handle) == 1 and ctx.get(dut.is_mem)
        out = flits_of(ctx.get(dut.rewritten), width, len(load(width)))
        header, meta, _ = decode_mem_message(out, width)
        assert (header.dst_x, header.dst_y, header.dst_fbits) == (*MEMORY, Fbits.LOCAL0)
        assert (header.src_x, header.src_y) == TILE
        assert (meta["addr"], meta["tag"], meta["size"]) == (0x4_0010, 1, 8)
        # A stale load's FAULT reports its handle, address, size and the permission asked.
        ctx.set(dut.seg.current, 0)
        report = ctx.get(dut.report)
        assert (report.op, report.handle, report.addr, report.size, report.perm) == \
            (F.STALE_HANDLE, 1, virtual_address(1, 0x10), 8, Perm.READ)
        assert (report.user, report.peer_x, report.peer_y) == (LOAD_MEM, 5, 5)
        # A CAP_SEND's reports its own fields and the peer.
        ctx.set(dut.seg.current, 1)
        ctx.set(dut.head, head_of(send(width, perm=Perm.RW), width))
        report = ctx.get(dut.report)
        assert (report.op, report.handle, report.size, report.perm, report.peer_x) == \
            (F.DERIVE_WIDER, 1, 0x100, Perm.RW, PEER[0])
        assert ctx.get(dut.seg.handle) == 1 and ctx.get(dut.tile_op)
        assert (ctx.get(dut.dst.x), ctx.get(dut.dst.y)) == PEER     # its peer's capability

    run_comb(dut, tb)


@pytest.mark.parametrize("width", WIDTHS)
def test_rules_rate_fault_and_cost(width):
    dut = OutgoingRules(width, TILE, RateLimit(burst=4, on_excess="fault"))

    async def tb(ctx):
        answer_lookups(ctx, dut, {})
        for size in (1, 300):
            flits = ipc_message(width, PEER, bytes(size))
            ctx.set(dut.head, head_of(flits, width))
            assert ctx.get(dut.cost) == min(len(flits), 4)
            assert ctx.get(dut.fault) == 0
            ctx.set(dut.tokens_ok, 0)
            assert ctx.get(dut.fault) == F.RATE
            ctx.set(dut.tokens_ok, 1)
        ctx.set(dut.tokens_ok, 0)           # a capability operation pays as a message does
        ctx.set(dut.head, head_of(send(width), width))
        assert ctx.get(dut.fault) == F.RATE
        ctx.set(dut.tokens_ok, 1)
        assert ctx.get(dut.fault) == 0

    run_comb(dut, tb)


@pytest.mark.parametrize("width", WIDTHS)
def test_rules_paged_take_the_translation(width):
    dut = OutgoingRules(width, TILE, paged=True)

    async def tb(ctx):
        answer_lookups(ctx, dut, {"current": 0})        # segments play no part
        flits = mem_message_flits(width, LOAD_MEM, 0x12_3456, 8, src=TILE, dst=(5, 5), tag=9)
        ctx.set(dut.head, head_of(flits, width))
        for name, value in (("addr", 0x8_3456), ("mem_x", 4), ("mem_y", 2)):
            ctx.set(getattr(dut.page, name), value)
        assert ctx.get(dut.fault) == 0
        header, meta, _ = decode_mem_message(
            flits_of(ctx.get(dut.rewritten), width, len(flits)), width)
        assert (header.dst_x, header.dst_y, meta["addr"], meta["tag"]) == (4, 2, 0x8_3456, 9)
        ctx.set(dut.page.fault, F.PAGE_FAULT)
        assert ctx.get(dut.fault) == F.PAGE_FAULT

    run_comb(dut, tb)


def test_tile_ops_answer_each_operation():
    dut = TileOps(8, TILE, MANAGER)

    def req(ctx, port):
        if not ctx.get(port.valid):
            return None
        p = ctx.get(port.payload)
        return K(p.msg_type), (p.dst_x, p.dst_y), KernelMeta.unpack(p.meta.as_value().value)

    async def tb(ctx):
        ctx.set(dut.entry, dict(SEGMENT, base=0x4_0000, root=7))
        ctx.set(dut.current, 1)
        ctx.set(dut.free.found, 1)
        ctx.set(dut.meta, {"handle": 9, "size": 64, "perm": 1, "user": 5, "addr": 0x20,
                           "peer_x": 2, "peer_y": 1})
        for msg_type in (K.CAP_ALLOC, K.CAP_FREE, K.CAP_SEND):  # nothing without go
            ctx.set(dut.msg_type, msg_type.value)
            assert not ctx.get(dut.to_noc.valid) and not ctx.get(dut.to_tile.valid)
        ctx.set(dut.go, 1)
        ctx.set(dut.msg_type, K.CAP_ALLOC.value)
        t, dst, meta = req(ctx, dut.to_noc)
        assert (t, dst, meta.size, meta.perm, meta.user) == (K.MM_ALLOC, MANAGER, 64, 1, 5)
        assert req(ctx, dut.to_tile) is None
        ctx.set(dut.free.found, 0)
        t, dst, meta = req(ctx, dut.to_tile)
        assert (t, dst, meta.status, meta.op) == (K.CAP_RESULT, TILE, Status.TABLE_FULL,
                                                 K.CAP_ALLOC.value)
        ctx.set(dut.msg_type, K.CAP_FREE.value)
        assert req(ctx, dut.to_noc)[0] == K.MM_FREE and req(ctx, dut.to_noc)[2].root == 7
        assert req(ctx, dut.to_tile)[2].status == Status.OK
        assert ctx.get(dut.drop.en) and ctx.get(dut.drop.slot) == 9 % 8
        ctx.set(dut.entry.owner, 0)                     # a copy: nothing to give back
        assert req(ctx, dut.to_noc) is None and ctx.get(dut.drop.en)
        ctx.set(dut.current, 0)
        assert req(ctx, dut.to_tile)[2].status == Status.BAD_HANDLE
        assert not ctx.get(dut.drop.en)
        ctx.set(dut.msg_type, K.CAP_SEND.value)
        t, dst, meta = req(ctx, dut.to_noc)
        assert (t, meta.addr, meta.size, meta.root, meta.peer_x) == (K.MM_DERIVE, 0x4_0020,
                                                                     64, 7, 2)
        assert req(ctx, dut.to_tile)[2].status == Status.OK

    run_comb(dut, tb)


class Gate:
    """The testbench as a gate: offer a head, and take the verdict as the gate would."""

    def __init__(self, dut, width):
        self.dut, self.width = dut, width

    async def judge(self, ctx, flits, *, short=0, look=None):
        """Offer the head until the verdict is not WAIT; return ``(verdict, waits)``, and what
        ``look(ctx)`` saw in the cycle the verdict took effect."""
        dut, waits = self.dut, 0
        ctx.set(dut.head, head_of(flits, self.width))
        ctx.set(dut.first, flits[0][0])
        ctx.set(dut.short, short)
        ctx.set(dut.decide, 1)
        while ctx.get(dut.verdict) == Verdict.WAIT:
            assert waits < 100
            await ctx.tick()
            waits += 1
        verdict = ctx.get(dut.verdict)
        ctx.set(dut.accept, 1)
        seen = look(ctx) if look else None
        await ctx.tick()
        ctx.set(dut.accept, 0)
        ctx.set(dut.decide, 0)
        return (verdict, waits) if look is None else (verdict, waits, seen)


def check(width, **config):
    dut = OutgoingCheck(TileEnv(width=width, x=TILE[0], y=TILE[1]), 8, manager=MANAGER,
                        errors=ERRORS, **config)
    return dut, Gate(dut, width)


def lookups_allow(ctx, dut):
    ctx.set(dut.dst.allowed, 1)
    ctx.set(dut.seg.entry, SEGMENT)
    ctx.set(dut.seg.current, 1)
    ctx.set(dut.free.found, 1)


@pytest.mark.parametrize("width", WIDTHS)
def test_check_verdicts_and_counters(width):
    dut, gate = check(width)
    c = dut.counters

    async def tb(ctx):
        lookups_allow(ctx, dut)
        ctx.set(dut.to_noc.ready, 1)
        ctx.set(dut.to_tile.ready, 1)
        ctx.set(dut.first, load(width)[0][0])
        assert ctx.get(dut.need) == len(load(width))
        assert await gate.judge(ctx, ipc_message(width, PEER)) == (Verdict.PASS, 0)
        assert await gate.judge(ctx, load(width)) == (Verdict.PASS, 0)
        assert ctx.get(c.passed_out) == 2
        # A violation waits for the queue to the NoC, then is sunk and reported.
        ctx.set(dut.to_noc.ready, 0)
        ctx.set(dut.dst.allowed, 0)
        flits = ipc_message(width, (2, 2))
        ctx.set(dut.head, head_of(flits, width))
        ctx.set(dut.decide, 1)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.verdict) == Verdict.WAIT and not ctx.get(dut.faulted)
        ctx.set(dut.to_noc.ready, 1)
        assert ctx.get(dut.verdict) == Verdict.DROP
        ctx.set(dut.accept, 1)
        assert ctx.get(dut.faulted) and ctx.get(dut.to_noc.valid)
        p = ctx.get(dut.to_noc.payload)
        meta = KernelMeta.unpack(p.meta.as_value().value)
        assert (p.msg_type, p.dst_x, p.dst_y, meta.op, meta.peer_x) == \
            (K.FAULT.value, *ERRORS, F.NO_IPC_CAP, 2)
        await ctx.tick()
        ctx.set(dut.accept, 0)
        ctx.set(dut.decide, 0)
        assert (ctx.get(c.sunk_out), ctx.get(c.passed_out)) == (1, 2)
        # Quarantined: everything sunk, nothing reported.
        ctx.set(dut.quarantined, 1)
        assert await gate.judge(ctx, ipc_message(width, PEER)) == (Verdict.DROP, 0)
        assert not ctx.get(dut.to_noc.valid) and ctx.get(c.sunk_out) == 2
        ctx.set(dut.quarantined, 0)
        # A capability operation waits for both queues and is counted.
        ctx.set(dut.to_tile.ready, 0)
        alloc = kernel_message_flits(width, K.CAP_ALLOC, KernelMeta(size=64))
        ctx.set(dut.head, head_of(alloc, width))
        ctx.set(dut.decide, 1)
        assert ctx.get(dut.verdict) == Verdict.WAIT
        ctx.set(dut.to_tile.ready, 1)
        ctx.set(dut.accept, 1)
        assert ctx.get(dut.verdict) == Verdict.DROP
        assert ctx.get(dut.to_noc.payload.msg_type) == K.MM_ALLOC.value
        await ctx.tick()
        ctx.set(dut.decide, 0)
        ctx.set(dut.accept, 0)
        assert ctx.get(c.cap_ops) == 1 and ctx.get(c.sunk_out) == 2

    simulate(dut, tb, timeout=200)


@pytest.mark.parametrize("width", WIDTHS)
def test_check_rate_limit_stalls(width):
    """2 tokens, 1 back every 4 cycles: once the bucket is empty, a message of ``c`` flits
    every ``4 c`` cycles, each cycle it waits counted in ``rate_stalls``."""
    dut, gate = check(width, rate=RateLimit(burst=2, refill=1, period=4))
    flits = ipc_message(width, PEER, b"")
    cost, n = len(flits), 6

    async def tb(ctx):
        lookups_allow(ctx, dut)
        ctx.set(dut.to_noc.ready, 1)
        ctx.set(dut.to_tile.ready, 1)
        waits = [(await gate.judge(ctx, flits))[1] for _ in range(n)]
        assert ctx.get(dut.counters.rate_stalls) == sum(waits)
        assert waits[0] == 0
        assert waits[-1] == 4 * cost - 1      # the steady state
        cycles = sum(waits) + n             # from the first decide to the last accept
        assert (n * cost - 2) * 4 - 4 < cycles <= (n * cost - 2) * 4 + 1

    simulate(dut, tb, timeout=500)


@pytest.mark.parametrize("width", WIDTHS)
def test_check_paged_load_waits_for_its_translation(width):
    dut, gate = check(width, tlbs=(TlbConfig(),))
    rng = random.Random(width)

    async def manager(ctx):             # answer the TLB_MISS with the page, a few cycles later
        while not ctx.get(dut.to_noc.valid):
            await ctx.tick()
        p = ctx.get(dut.to_noc.payload)
        assert p.msg_type == K.TLB_MISS.value and p.meta.addr == 0x12_3456
        await ctx.tick().repeat(rng.randrange(1, 5))
        ctx.set(dut.answer.payload, {"status": 0, "base": 0x8_0000, "size": 4096,
                                     "mem_x": 4, "mem_y": 2, "perm": Perm.RW})
        ctx.set(dut.answer.valid, 1)
        await ctx.tick().until(dut.answer.ready)
        ctx.set(dut.answer.valid, 0)

    async def tb(ctx):
        lookups_allow(ctx, dut)
        ctx.set(dut.to_noc.ready, 1)
        ctx.set(dut.to_tile.ready, 1)
        flits = mem_message_flits(width, LOAD_MEM, 0x12_3456, 8, src=TILE, dst=(5, 5))
        verdict, waits = await gate.judge(ctx, flits)
        assert verdict == Verdict.PASS and waits > 1
        c = dut.counters
        assert (ctx.get(c.tlb_misses), ctx.get(c.passed_out)) == (1, 1)

    simulate(dut, tb, background=[manager], timeout=200)
