"""Fault isolation at the NoC level, on a whole design (Amaranth's simulator, 64 and 512 bits):
two untrusted tiles on rows of their own. One is made to fault; the other's messages arrive
with the same bytes in the same cycles as in a run where nothing faults (it shares no link with
the faulty tile or its fault report), and nothing of the faulty tile's traffic leaves after
the fault."""

import pytest

from apiary.design import Design
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.kernel import Kernel
from apiary.os.uapi import FaultKind, KernelMsgType as K, decode_kernel_message
from apiary.sim import elaborate
from apiary.stream.testbench import simulate
from apiary.tiles import PortTile

class ProbePort(PortTile):
    """A port the testbench drives: it always takes what arrives, whatever it is sending, so it
    never holds its input while it waits for its output (the kernel's routes to and from the
    memory tile would otherwise close a loop in the deadlock check, rightly so for a tile that
    might)."""
    streaming = False


#   (0,0) a_src* ─▶ (1,0) a_dst     (2,0) mm        (3,0) errors
#   (0,1) b_src* ─▶ (1,1) b_dst     (2,1) mem0      (3,1) spy
#   * untrusted


def isolation_design(width):
    d = Design("isolation", cols=4, rows=2, width=width)
    Kernel(d, manager=(2, 0), errors=(3, 0), memories={"mem0": ((2, 1), 4096)})
    for row, name in enumerate("ab"):
        d.add(f"{name}_src", ProbePort, at=(0, row), trusted=False)
        d.add(f"{name}_dst", PortTile, at=(1, row))
        d.route(f"{name}_src", f"{name}_dst", allow=True)
    d.add("spy", PortTile, at=(3, 1))
    return d


def message(width, src, dst, payload):
    hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], dst_fbits=Fbits.LOCAL0, src_x=src[0],
                    src_y=src[1], msg_type=12)
    return Message(hdr, [], payload).flits(width)


def run(width, fault):
    """b sends 12 messages at fixed cycles; a sends 4 good ones, then (with ``fault``) one to
    the spy it holds no capability for, then 4 more. Returns what reached b_dst, a_dst and the
    spy, with cycles, and the counters."""
    top, _, names = elaborate(isolation_design(width))
    got = {"a_dst": [], "b_dst": [], "spy": []}
    counters = {}

    clock = {"now": 0}

    async def counter(ctx):
        async for _ in ctx.tick():
            clock["now"] += 1

    def sink_at(name):
        async def tb(ctx):
            port = getattr(top, f"{name}_rx")
            ctx.set(port.ready, 1)
            while True:
                flits = await recv_flits(ctx, port)
                got[name].append((clock["now"], flits))
        return tb

    async def b(ctx):
        for k in range(12):
            await send_flits(ctx, top.b_src_tx, message(width, (0, 1), (1, 1), bytes([k]) * 9))
            await ctx.tick().repeat(3)

    async def a(ctx):
        for k in range(9):
            if k == 4 and fault:
                flits = message(width, (0, 0), (3, 1), b"not allowed")
            else:
                flits = message(width, (0, 0), (1, 0), bytes([0x80 + k]) * 5)
            await send_flits(ctx, top.a_src_tx, flits)
            await ctx.tick().repeat(2)

    async def main(ctx):
        await ctx.tick().repeat(10)
        await b(ctx)
        await ctx.tick().repeat(100)
        for name in names:
            counters[name] = ctx.get(getattr(top.counters, name))

    simulate(top, main, a, background=[counter, *(sink_at(n) for n in got)], timeout=10_000)
    return got, counters


@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 512])
def test_a_fault_leaves_the_other_tiles_traffic_untouched(width):
    clean, clean_counters = run(width, fault=False)
    faulty, counters = run(width, fault=True)
    assert len(clean["b_dst"]) == 12
    assert faulty["b_dst"] == clean["b_dst"]                     # same bytes, same cycles
    assert len(clean["a_dst"]) == 9
    assert faulty["a_dst"] == clean["a_dst"][:4]                 # nothing after the fault
    assert faulty["spy"] == [] and clean["spy"] == []
    assert counters["a_src_monitor_quarantined"] == 1
    assert counters["a_src_monitor_faults"] == 1
    assert counters["a_src_monitor_sunk_out"] == 5              # the bad one and the 4 after
    assert counters["b_src_monitor_passed_out"] == 12 and counters["b_src_monitor_faults"] == 0
    assert counters["errors_faults"] == 1
    assert clean_counters["errors_faults"] == 0


@pytest.mark.slow
def test_the_fault_report_names_tile_kind_and_destination():
    """The error manager's log entry for the fault above, read through the spy (a trusted tile
    may ask)."""
    width = 512
    top, _, _ = elaborate(isolation_design(width))
    from apiary.os.uapi import KernelMeta, kernel_message_flits
    entries = []

    async def main(ctx):
        ctx.set(top.spy_rx.ready, 1)
        await send_flits(ctx, top.a_src_tx, message(width, (0, 0), (3, 1), b"x"))
        await ctx.tick().repeat(40)
        await send_flits(ctx, top.spy_tx, kernel_message_flits(
            width, K.FAULT_READ, KernelMeta(handle=0), src=(3, 1), dst=(3, 0)))
        entries.append(decode_kernel_message(await recv_flits(ctx, top.spy_rx), width))

    simulate(top, main, timeout=2000)
    (header, meta), = entries
    assert header.msg_type == K.FAULT_ENTRY.value
    assert (meta.mem_x, meta.mem_y, meta.op) == (0, 0, FaultKind.NO_IPC_CAP)
    assert (meta.peer_x, meta.peer_y, meta.user) == (3, 1, 12)
