"""Paged translation in the monitor (apiary/os/paging.py, MonitorConfig(tlbs=...)), the monitor
alone at 64 and 512 bits with the test playing the memory manager: a miss sends one TLB_MISS
and holds the load until the TLB_FILL, then the load leaves translated to the page's memory
tile; on a seeded random trace every access's hit or miss equals the TLB model's and every
address the page map's; a page the tile was not given faults (PAGE_FAULT: sunk, reported,
quarantined); the permission and the page's bounds are checked; the hit and miss latencies are
measured beside segment translation's."""

import random
import sys
from pathlib import Path

import pytest

from apiary.os.memory_tile import LOAD_MEM, STORE_MEM
from apiary.os.monitor import MonitorConfig
from apiary.os.paging import PageRange
from apiary.os.tlb import TlbConfig, TlbModel
from apiary.os.uapi import FaultKind, KernelMsgType as K, Perm, Status, decode_kernel_message

sys.path.insert(0, str(Path(__file__).parent))
from monitor_bench import ERRORS, MEMORY, TILE, MonitorBench, decode, kernel, mem  # noqa: E402


WIDTHS = [64, 512]
# A miss, at each width: from the load's first flit offered to the TLB_MISS's first flit out,
# and from the TLB_FILL's last flit in to the load's first flit out.
HEAD_TO_MISS = {512: 2, 64: 4}
FILL_TO_OUT = {512: 3, 64: 4}
TLB = TlbConfig(sets=4, ways=2, page_bits=12)
PAGES = [PageRange(*TILE, vaddr=0x10_0000, size=24 << 12, page_bits=12, mem=0,
                   base=0x8_0000, perm=Perm.RW),
         PageRange(*TILE, vaddr=0x40_0000, size=2 << 12, page_bits=12, mem=0,
                   base=0x20_0000, perm=Perm.READ),
         PageRange(*TILE, vaddr=0x4000_0000, size=2 << 21, page_bits=21, mem=0,
                   base=0x400_0000, perm=Perm.RW)]


def translate(vaddr):
    for r in PAGES:
        base = r.translate(vaddr)
        if base is not None:
            return base, r
    return None, None


class Manager:
    """The memory manager's side of paging, played by the test: answers each TLB_MISS that
    comes out of the monitor from PAGES."""

    def __init__(self, bench):
        self.b, self.seen, self.misses = bench, 0, []

    async def serve(self, ctx):
        """Answer the TLB_MISSes out so far; return how many."""
        answered = 0
        while self.seen < len(self.b.noc):
            _, flits = self.b.noc[self.seen]
            self.seen += 1
            d = decode(flits, self.b.width)
            if d[0] == "kernel" and d[1] == K.TLB_MISS:
                vaddr = d[3].addr
                self.misses.append(vaddr)
                base, r = translate(vaddr)
                if base is None:
                    answer = dict(status=Status.NO_ENTRY)
                else:
                    answer = dict(status=Status.OK, addr=base, size=1 << r.page_bits,
                                  perm=r.perm, mem_x=MEMORY[0], mem_y=MEMORY[1])
                await self.b.from_noc(ctx, kernel(self.b.width, K.TLB_FILL, **answer))
                answered += 1
        return answered


    async def loop(self, b, ctx):
        """Serve misses every cycle until the script sets ``stop`` (run beside the script)."""
        self.stop = False
        while not self.stop:
            await self.serve(ctx)
            await ctx.tick()


async def access(b, mgr, ctx, msg, limit=200):
    """Send one load or store (the manager answering misses alongside); return the first
    message out that is not a TLB_MISS."""
    n = len(b.noc)
    await b.from_tile(ctx, msg)
    for _ in range(limit):
        for _, flits in b.noc[n:]:
            d = decode(flits, b.width)
            if not (d[0] == "kernel" and d[1] == K.TLB_MISS):
                return d
        await ctx.tick()
    raise AssertionError("nothing came out")


def run(width, config, script):
    """Run ``script(b, mgr, ctx)`` on a monitor bench with the test's manager alongside."""
    holder = {}

    async def main(b, ctx):
        while "mgr" not in holder:
            await ctx.tick()
        await script(b, holder["mgr"], ctx)
        holder["mgr"].stop = True

    async def manager(b, ctx):
        holder["mgr"] = mgr = Manager(b)
        await mgr.loop(b, ctx)

    b = MonitorBench(width, config)
    b.run(main, manager)
    b.misses = holder["mgr"].misses
    return b


@pytest.mark.parametrize("width", WIDTHS)
def test_random_trace_hits_and_misses_as_the_model_and_translates(width):
    rng = random.Random(width)
    model = TlbModel(TLB)
    vpages = [PAGES[0].vaddr + (i << 12) for i in range(24)]
    addresses = []
    for _ in range(60):
        page = rng.choice(vpages[:6]) if rng.random() < 0.7 else rng.choice(vpages)
        addresses.append(page + rng.randrange(0, 4096 - 64))
    expected_misses = []
    for vaddr in addresses:
        if model.lookup(vaddr) is None:
            expected_misses.append(vaddr)
            model.fill(vaddr, translate(vaddr)[0])
    out = []

    async def script(b, mgr, ctx):
        for k, vaddr in enumerate(addresses):
            msg = (mem(width, LOAD_MEM, vaddr, 16, tag=k & 0xFF) if k % 2
                   else mem(width, STORE_MEM, vaddr, 8, bytes(range(8)), tag=k & 0xFF))
            out.append(await access(b, mgr, ctx, msg))

    b = run(width, MonitorConfig(tlbs=(TLB,)), script)
    assert b.misses == expected_misses
    assert 0 < len(expected_misses) < len(addresses)
    for k, (vaddr, d) in enumerate(zip(addresses, out)):
        assert d[0] == "mem" and d[1] == (LOAD_MEM if k % 2 else STORE_MEM)
        header, meta = d[2], d[3]
        assert (header.dst_x, header.dst_y) == MEMORY
        assert meta["addr"] == translate(vaddr)[0] + (vaddr & 0xFFF)
        assert meta["tag"] == k & 0xFF          # the tile's own tag, kept
        if k % 2 == 0:
            assert d[4] == bytes(range(8))
    assert b.counters["tlb_misses"] == len(expected_misses)
    assert b.counters["tlb_hits"] == len(addresses)
    assert b.counters["passed_out"] == len(addresses)
    assert b.counters["faults"] == 0 and b.counters["quarantined"] == 0


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", ["unmapped", "permission", "crosses"])
def test_violation_faults_like_a_segment_violation(width, case):
    """An access to a page the tile was not given (PAGE_FAULT), a store to a read-only page
    (PERMISSION), an access running off its page (OUT_OF_BOUNDS): nothing reaches the memory,
    one FAULT goes to the error manager, the tile is quarantined."""
    vaddr, msg_kind, size, kind = {
        "unmapped": (0x90_0010, LOAD_MEM, 8, FaultKind.PAGE_FAULT),
        "permission": (0x40_0100, STORE_MEM, 8, FaultKind.PERMISSION),
        "crosses": (0x10_0FF8, LOAD_MEM, 16, FaultKind.OUT_OF_BOUNDS),
    }[case]
    payload = bytes(size) if msg_kind == STORE_MEM else b""
    outs = []

    async def script(b, mgr, ctx):
        outs.append(await access(b, mgr, ctx, mem(width, msg_kind, vaddr, size, payload,
                                                  dst=MEMORY)))
        # quarantined: a good load now is sunk too
        await b.from_tile(ctx, mem(width, LOAD_MEM, 0x10_0000, 8))
        await ctx.tick().repeat(20)

    b = run(width, MonitorConfig(tlbs=(TLB,)), script)
    d = outs[0]
    assert d[0] == "kernel" and d[1] == K.FAULT
    header, meta = d[2], d[3]
    assert (header.dst_x, header.dst_y) == ERRORS
    assert meta.op == kind and meta.addr == vaddr and meta.size == size
    assert not [x for x in b.noc_messages() if x[0] == "mem"]
    assert b.counters["quarantined"] == 1 and b.counters["faults"] == 1
    assert b.counters["sunk_out"] == 2
    assert b.counters["page_faults"] == (1 if kind == FaultKind.PAGE_FAULT else 0)


def added_cycles(width, config, prepare, msg):
    """``(added, to_miss, fill_to_out)``: the cycles the monitor adds to ``msg`` (its first flit
    offered to its first flit out), after ``prepare(b, mgr, ctx)``; for a miss also the cycles
    from the first flit offered to the TLB_MISS's first flit out, and from the TLB_FILL's last
    flit in to the translated message's first flit out."""
    marks = []

    async def script(b, mgr, ctx):
        await prepare(b, mgr, ctx)
        await ctx.tick().repeat(5)
        marks.append((ctx.get(b.dut.cycle), len(b.log["noc_out"]), len(b.noc),
                      len(b.log["noc_in"])))
        await access(b, mgr, ctx, msg)
        await ctx.tick().repeat(5)

    b = run(width, config, script)
    first_in, n0, m0, i0 = marks[0]         # the cycle the first flit is offered
    out = b.log["noc_out"][n0:]
    misses = [f for _, f in b.noc[m0:] if decode(f, width)[1] == K.TLB_MISS]
    if not misses:
        return out[0] - first_in, None, None
    miss_flits = sum(len(f) for f in misses)
    fill_last = b.log["noc_in"][i0 + len(kernel(width, K.TLB_FILL)) - 1]
    return out[miss_flits] - first_in, out[0] - first_in, out[miss_flits] - fill_last


@pytest.mark.parametrize("width", WIDTHS)
def test_hit_and_miss_latency_beside_segments(width):
    """Added to a load by the monitor: with segments, its head (0 cycles at 512 bits, 4 at 64);
    paged, a hit costs 1 cycle more at 512 bits (the TLB's read) and nothing more at 64 (the
    address arrives in a metadata flit before the head's last); a miss sends its TLB_MISS 2
    cycles after the load's first flit at 512 bits (4 at 64), and the load leaves 3 cycles after
    the TLB_FILL is in (2 to fill, 1 to look up again; at 64 bits 1 more, the stored head's
    replay)."""
    from test_monitor import install
    from apiary.os.uapi import virtual_address
    load = mem(width, LOAD_MEM, 0x10_0040, 8, dst=MEMORY)

    async def nothing(b, mgr, ctx):
        return None

    async def warm(b, mgr, ctx):        # fill the page, then look up another one
        await access(b, mgr, ctx, mem(width, LOAD_MEM, 0x10_0000, 8))
        await access(b, mgr, ctx, mem(width, LOAD_MEM, 0x10_1000, 8))

    async def segment(b, mgr, ctx):
        await install(b, ctx)

    seg, _, _ = added_cycles(width, MonitorConfig(), segment,
                             mem(width, LOAD_MEM, virtual_address(0, 0x40), 8, dst=MEMORY))
    paged = MonitorConfig(tlbs=(TLB,))
    hit, _, _ = added_cycles(width, paged, warm, load)
    miss, to_miss, fill_to_out = added_cycles(width, paged, nothing, load)
    head = 0 if width == 512 else 4
    print(f"width {width}: segment +{seg}, TLB hit +{hit}, TLB miss +{miss} "
          f"(TLB_MISS out after {to_miss}, load out {fill_to_out} after the TLB_FILL)")
    assert seg == head
    assert hit == (1 if width == 512 else head)
    assert (to_miss, fill_to_out) == (HEAD_TO_MISS[width], FILL_TO_OUT[width])


def test_bad_tlb_configs_are_refused():
    with pytest.raises(ValueError, match="tuple of TlbConfig"):
        MonitorConfig(tlbs=(4096,))
    with pytest.raises(ValueError, match="same page size"):
        MonitorConfig(tlbs=(TlbConfig(), TlbConfig(sets=2)))


@pytest.mark.parametrize("width", WIDTHS)
def test_manager_answers_misses_from_each_tiles_own_pages(width):
    """The memory manager with pages (apiary/os/memory_manager.py, ``pages=``): a TLB_MISS is
    answered 2 cycles after its last flit with the page of the asking tile (its base, size,
    permission and memory tile), or NO_ENTRY past the tile's pages or for a tile given none."""
    from apiary.noc.testbench import recv_flits, send_flits
    from apiary.os.memory_manager import MemoryManagerTile
    from apiary.os.uapi import KernelMeta, kernel_message_flits
    from apiary.stream.testbench import simulate, transfers
    from apiary.tile import TileEnv
    mm_at, mems = (3, 0), [(0, 3, 1 << 16), (1, 3, 1 << 23)]
    pages = [PageRange(1, 1, vaddr=0x10000, size=2 << 12, page_bits=12, mem=0, base=0x8000,
                       perm=Perm.RW),
             PageRange(2, 1, vaddr=0x10000, size=1 << 21, page_bits=21, mem=1, base=0x20_0000,
                       perm=Perm.READ)]
    tile = MemoryManagerTile(TileEnv(x=mm_at[0], y=mm_at[1], width=width), mems,
                             block_bytes=4096, pages=pages)
    cases = [((1, 1), 0x11234, dict(status=Status.OK, addr=0x9000, size=4096, perm=Perm.RW,
                                    mem_x=0, mem_y=3)),
             ((2, 1), 0x11234, dict(status=Status.OK, addr=0x20_0000, size=1 << 21,
                                    perm=Perm.READ, mem_x=1, mem_y=3)),
             ((1, 1), 0x12000, dict(status=Status.NO_ENTRY)),
             ((3, 3), 0x10000, dict(status=Status.NO_ENTRY))]
    log_in, log_out, got, marks = [], [], [], []

    async def tb(ctx):
        n_in = n_out = 0
        for src, vaddr, _ in cases:
            flits = kernel_message_flits(width, K.TLB_MISS, KernelMeta(addr=vaddr), dst=mm_at,
                                         src=src)
            await send_flits(ctx, tile.noc_in, flits)
            n_in += len(flits)
            out = await recv_flits(ctx, tile.noc_out)
            marks.append((n_in - 1, n_out))
            n_out += len(out)
            got.append(decode_kernel_message(out, width))
        counters.update(fills=ctx.get(tile.counters.page_fills),
                        faults=ctx.get(tile.counters.page_faults))

    counters = {}
    simulate(tile, tb, background=[transfers(tile.noc_in, log_in),
                                   transfers(tile.noc_out, log_out)], timeout=2000)
    for (src, _, want), (hdr, meta) in zip(cases, got):
        assert (hdr.msg_type, hdr.dst_x, hdr.dst_y) == (K.TLB_FILL.value, *src)
        assert meta == KernelMeta(**want)
    assert [log_out[o] - log_in[i] for i, o in marks] == [2, 2, 2, 2]
    assert counters == {"fills": 2, "faults": 2}


@pytest.mark.parametrize("width", WIDTHS)
def test_two_page_sizes_each_fill_goes_to_its_own_tlb(width):
    """Coyote's pair of TLBs, 4 KiB and 2 MiB pages, looked up together: a 2 MiB page's fill
    serves every 4 KiB page inside it, a 4 KiB page's fill only itself."""
    big = 0x4000_0000
    accesses = [(big + 0x10, True), (big + 0x5_0000, False), (0x10_0000, True),
                (big + (1 << 21) + 8, True), (big + 0x5_0008, False), (0x10_0100, False)]
    out = []

    async def script(b, mgr, ctx):
        for vaddr, _ in accesses:
            out.append(await access(b, mgr, ctx, mem(width, LOAD_MEM, vaddr, 8)))

    config = MonitorConfig(tlbs=(TlbConfig(sets=4, ways=2, page_bits=12),
                                 TlbConfig(sets=2, ways=2, page_bits=21)))
    b = run(width, config, script)
    assert b.misses == [v for v, miss in accesses if miss]
    for (vaddr, _), d in zip(accesses, out):
        base, r = translate(vaddr)
        assert d[0] == "mem" and d[3]["addr"] == base + (vaddr & ((1 << r.page_bits) - 1))
    assert b.counters["tlb_misses"] == 3 and b.counters["faults"] == 0
