"""A monitor's incoming side (apiary/os/monitor_in.py) alone, at 64 and 512 bits: the kernel's
messages to the monitor consumed (table commands, answers to the tile, requests to the kernel,
waits while busy), refused from anyone else; messages to the tile passed (acks translated back)
or sunk, and inbound denials reported."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from apiary.noc.gate import Verdict
from apiary.noc.header import Fbits
from apiary.os.memory_tile import LOAD_MEM_ACK, decode_mem_message, mem_message_flits
from apiary.os.monitor_in import IncomingCheck
from apiary.os.uapi import FaultKind as F, IpcDir, KernelMeta, KernelMsgType as K, Status, \
    kernel_message_flits, virtual_address
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv

sys.path.insert(0, str(Path(__file__).parent))
from monitor_bench import ipc_message  # noqa: E402
from test_monitor_messages import head_of  # noqa: E402
from test_monitor_out import Gate, flits_of  # noqa: E402


WIDTHS = [64, 512]
TILE, SOURCE, OTHER, MEMORY, MANAGER, ERRORS = (1, 1), (0, 1), (2, 2), (0, 3), (3, 0), (3, 1)
DROP, PASS = Verdict.DROP, Verdict.PASS


def incoming(width):
    dut = IncomingCheck(TileEnv(width=width, x=TILE[0], y=TILE[1]), 8,
                        kernel=[MANAGER, ERRORS, MEMORY], manager=MANAGER, errors=ERRORS)
    return dut, Gate(dut, width)


def kernel(width, msg_type, src=MANAGER, **meta):
    return kernel_message_flits(width, msg_type, KernelMeta(**meta), src=src, dst=TILE)


def requests(dut):
    """What the in side offers this cycle: ``{port: (type, (x, y), meta)}``."""
    def look(ctx):
        seen = {}
        for name in ("to_tile", "to_kernel"):
            port = getattr(dut, name)
            if ctx.get(port.valid):
                p = ctx.get(port.payload)
                seen[name] = (K(p.msg_type), (p.dst_x, p.dst_y),
                              KernelMeta.unpack(p.meta.as_value().value))
        for name in ("install", "revoke", "grant"):
            port = getattr(dut, name)
            if ctx.get(port.en):
                seen[name] = SimpleNamespace(**{k: ctx.get(getattr(port, k))
                                                for k in port.signature.members})
        if ctx.get(dut.start_release):
            seen["release"] = True
        return seen
    return look


async def idle(ctx, dut):
    ctx.set(dut.to_tile.ready, 1)
    ctx.set(dut.to_kernel.ready, 1)
    ctx.set(dut.free.found, 1)
    ctx.set(dut.free.handle, 0x15)


@pytest.mark.parametrize("width", WIDTHS)
def test_kernel_messages_to_the_monitor(width):
    dut, gate = incoming(width)
    look = requests(dut)

    async def tb(ctx):
        await idle(ctx, dut)
        install = kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, addr=0x4_0000, size=64,
                         perm=3, mem_x=0, mem_y=3, root=7, user=5)
        ctx.set(dut.to_tile.ready, 0)                   # waits for its answer's way out
        ctx.set(dut.head, head_of(install, width))
        ctx.set(dut.decide, 1)
        assert ctx.get(dut.verdict) == Verdict.WAIT
        ctx.set(dut.to_tile.ready, 1)
        verdict, _, seen = await gate.judge(ctx, install, look=look)
        assert verdict == DROP
        assert (seen["install"].row.owner, seen["install"].row.base, seen["install"].row.root) \
            == (1, 0x4_0000, 7)
        t, dst, meta = seen["to_tile"]
        assert (t, dst, meta.status, meta.handle, meta.size, meta.user) == \
            (K.CAP_RESULT, TILE, Status.OK, 0x15, 64, 5)
        # A capability sent to the tile: a copy, and CAP_NOTIFY.
        copy = kernel(width, K.CAP_INSTALL, op=K.CAP_SEND.value, size=8, peer_x=2, peer_y=1)
        _, _, seen = await gate.judge(ctx, copy, look=look)
        assert seen["install"].row.owner == 0 and seen["to_tile"][0] == K.CAP_NOTIFY
        assert seen["to_tile"][2].peer_x == 2
        # No free row: an allocation is refused and its memory given back.
        ctx.set(dut.free.found, 0)
        _, _, seen = await gate.judge(ctx, install, look=look)
        assert "install" not in seen and seen["to_tile"][2].status == Status.TABLE_FULL
        assert seen["to_kernel"][:2] == (K.MM_FREE, MANAGER) and seen["to_kernel"][2].root == 7
        assert ctx.get(dut.counters.installs_dropped) == 1
        failed = kernel(width, K.CAP_INSTALL, op=K.CAP_ALLOC.value, status=Status.NO_MEMORY)
        _, _, seen = await gate.judge(ctx, failed, look=look)
        assert set(seen) == {"to_tile"} and seen["to_tile"][2].status == Status.NO_MEMORY
        assert ctx.get(dut.counters.installs_dropped) == 1
        # Revoke, grant, release.
        _, _, seen = await gate.judge(ctx, kernel(width, K.CAP_REVOKE, root=9), look=look)
        assert seen["revoke"].root == 9
        assert seen["to_kernel"][:2] == (K.CAP_REVOKED, MANAGER)
        grant = kernel(width, K.IPC_GRANT, perm=IpcDir.IN, status=1, peer_x=2, peer_y=2,
                       peer_fbits=1)
        _, _, seen = await gate.judge(ctx, grant, look=look)
        g = seen["grant"]
        assert (g.dir, g.add, g.x, g.y, g.fbits) == (IpcDir.IN, 1, 2, 2, 1)
        _, _, seen = await gate.judge(ctx, kernel(width, K.RELEASE, src=ERRORS), look=look)
        assert seen == {"release": True}
        # From a tile not of the kernel: refused, whatever the source claims to be.
        verdict, _, seen = await gate.judge(ctx, kernel(width, K.RELEASE, src=OTHER), look=look)
        assert verdict == DROP and seen == {}
        assert ctx.get(dut.counters.kernel_denied) == 1
        # While the release runs, kernel messages wait.
        ctx.set(dut.releasing, 1)
        ctx.set(dut.head, head_of(install, width))
        ctx.set(dut.decide, 1)
        assert ctx.get(dut.verdict) == Verdict.WAIT

    simulate(dut, tb, timeout=300)


@pytest.mark.parametrize("width", WIDTHS)
def test_messages_to_the_tile(width):
    dut, gate = incoming(width)
    look = requests(dut)
    c = dut.counters

    def allow(ctx, place):
        x, y = ctx.get(dut.src.x), ctx.get(dut.src.y)
        return int((x, y) == place)

    async def tb(ctx):
        await idle(ctx, dut)
        ctx.set(dut.ack.entry, {"valid": 1, "base": 0x4_0000, "size": 0x1000})
        # A memory ack from the kernel gets its virtual address back (handle from its tag).
        ack = mem_message_flits(width, LOAD_MEM_ACK, 0x4_0020, 8, b"12345678", src=MEMORY,
                                dst=TILE, tag=3)
        ctx.set(dut.head, head_of(ack, width))
        assert ctx.get(dut.ack.slot) == 3
        header, meta, _ = decode_mem_message(
            flits_of(ctx.get(dut.rewritten), width, len(ack)), width)
        assert meta["addr"] == virtual_address(3, 0x20) and meta["tag"] == 3
        assert await gate.judge(ctx, ack) == (PASS, 0)
        # From a source the tile may hear: passed as it is.
        msg = ipc_message(width, TILE, b"hi", src=SOURCE)
        ctx.set(dut.head, head_of(msg, width))
        ctx.set(dut.src.allowed, allow(ctx, SOURCE))
        assert ctx.get(dut.src.fbits) == Fbits.LOCAL0
        assert await gate.judge(ctx, msg) == (PASS, 0)
        assert ctx.get(c.passed_in) == 2
        # From anyone else: sunk and reported, the tile not blamed.
        msg = ipc_message(width, TILE, b"hi", src=OTHER)
        ctx.set(dut.head, head_of(msg, width))
        ctx.set(dut.src.allowed, allow(ctx, SOURCE))
        verdict, _, seen = await gate.judge(ctx, msg, look=look)
        assert verdict == DROP
        t, dst, meta = seen["to_kernel"]
        assert (t, dst, meta.op, meta.peer_x, meta.peer_y) == (K.FAULT, ERRORS, F.INBOUND, *OTHER)
        assert (ctx.get(c.sunk_in), ctx.get(c.inbound_denied)) == (1, 1)
        ctx.set(dut.to_kernel.ready, 0)                 # no room to report: only counted
        verdict, _, seen = await gate.judge(ctx, msg, look=look)
        assert verdict == DROP and seen == {}
        assert (ctx.get(c.sunk_in), ctx.get(c.inbound_denied)) == (2, 2)
        ctx.set(dut.to_kernel.ready, 1)
        # Quarantined, or cut short: sunk, not reported.
        ctx.set(dut.quarantined, 1)
        ctx.set(dut.head, head_of(ack, width))
        verdict, _, seen = await gate.judge(ctx, ack, look=look)
        assert verdict == DROP and seen == {} and ctx.get(c.sunk_in) == 3
        ctx.set(dut.quarantined, 0)
        verdict, _, seen = await gate.judge(ctx, ack, short=1, look=look)
        assert verdict == DROP and seen == {} and ctx.get(c.sunk_in) == 4
        assert ctx.get(c.passed_in) == 2 and ctx.get(c.inbound_denied) == 2

    simulate(dut, tb, timeout=300)
