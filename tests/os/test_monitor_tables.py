"""A monitor's capability tables (apiary/os/monitor_tables.py), alone: installs into the first
free row and the handles they get, lookups by handle (current or stale) and by slot, drop,
revoke and clear (a row's next install gets its next generation), IPC grants and removals,
the initial IPC rows and a full table's refusals."""

import pytest

from apiary.os.monitor_tables import CapabilityTables, ipc_rows
from apiary.os.uapi import IpcDir
from apiary.stream.testbench import simulate


ENTRIES = 4                 # handles are slot | gen << 2
PEER, OTHER = (2, 1), (2, 2)


def tables():
    return CapabilityTables(ENTRIES, ipc_rows([(*PEER, None)], 3, "IPC-out"),
                            ipc_rows([(0, 1, 0)], 1, "IPC-in"))


async def install(ctx, dut, *, owner=1, root=0, base=0x1000, size=0x100):
    """Install a row (one cycle); return the handle it got."""
    assert ctx.get(dut.free.found)
    handle = ctx.get(dut.free.handle)
    ctx.set(dut.install.en, 1)
    ctx.set(dut.install.row, {"owner": owner, "root": root, "base": base, "size": size,
                              "perm": 3, "mem_x": 0, "mem_y": 3})
    await ctx.tick()
    ctx.set(dut.install.en, 0)
    return handle


async def command(ctx, port, **fields):
    """One cycle of a command."""
    for name, value in fields.items():
        ctx.set(getattr(port, name), value)
    ctx.set(port.en, 1)
    await ctx.tick()
    ctx.set(port.en, 0)


def lookup(ctx, dut, handle):
    ctx.set(dut.seg.handle, handle)
    return ctx.get(dut.seg.current), ctx.get(dut.seg.entry)


def test_install_lookup_and_drop():
    dut = tables()

    async def tb(ctx):
        handles = [await install(ctx, dut, root=i, base=0x1000 * i) for i in range(ENTRIES)]
        assert handles == [0, 1, 2, 3]
        assert not ctx.get(dut.free.found)
        current, entry = lookup(ctx, dut, 2)
        assert current and entry.base == 0x2000 and entry.root == 2 and entry.mem_y == 3
        current, entry = lookup(ctx, dut, 3)
        assert current and entry.base == 0x3000 and entry.size == 0x100 and entry.perm == 3
        ctx.set(dut.ack.slot, 1)
        assert ctx.get(dut.ack.entry.base) == 0x1000

        await command(ctx, dut.drop, slot=2)             # CAP_FREE of handle 2
        assert lookup(ctx, dut, 2)[0] == 0               # stale from then on
        assert ctx.get(dut.free.found) and ctx.get(dut.free.slot) == 2
        assert await install(ctx, dut, root=9) == 2 | 1 << 2      # the row's next generation
        assert lookup(ctx, dut, 2)[0] == 0
        current, entry = lookup(ctx, dut, 6)
        assert current and entry.root == 9
        assert lookup(ctx, dut, 5)[0] == 0               # slot 1, generation 1: not yet

    simulate(dut, tb, timeout=100)


def test_revoke_drops_the_copies_of_a_root_and_clear_drops_valid_rows():
    dut = tables()

    async def tb(ctx):
        own = await install(ctx, dut, owner=1, root=5)
        copy = await install(ctx, dut, owner=0, root=5)
        other = await install(ctx, dut, owner=0, root=6)
        await command(ctx, dut.revoke, root=5)
        assert [lookup(ctx, dut, h)[0] for h in (own, copy, other)] == [1, 0, 1]
        assert ctx.get(dut.free.slot) == 1              # the revoked row is free again
        # clear: valid rows are dropped, free rows stay as they are.
        for slot in range(ENTRIES):
            await command(ctx, dut.clear, slot=slot)
        assert [lookup(ctx, dut, h)[0] for h in (own, copy, other)] == [0, 0, 0]
        ctx.set(dut.walk.active, 1)
        ctx.set(dut.walk.slot, 0)
        assert ctx.get(dut.walk.entry.valid) == 0
        ctx.set(dut.walk.active, 0)
        # Each row's next install gets its next generation: rows 0 to 2 were used once (row 1
        # dropped by the revoke), row 3 never.
        handles = [await install(ctx, dut) for _ in range(ENTRIES)]
        assert handles == [0 | 1 << 2, 1 | 1 << 2, 2 | 1 << 2, 3]
        assert [lookup(ctx, dut, h)[0] for h in (own, copy, other)] == [0, 0, 0]

    simulate(dut, tb, timeout=100)


@pytest.mark.parametrize("direction", [IpcDir.OUT, IpcDir.IN])
def test_ipc_grants_and_removals(direction):
    dut = tables()

    def allowed(ctx, port, place, fbits):
        ctx.set(port.x, place[0])
        ctx.set(port.y, place[1])
        ctx.set(port.fbits, fbits)
        return ctx.get(port.allowed)

    async def grant(ctx, place, fbits, add=1):
        await command(ctx, dut.grant, dir=direction, add=add, x=place[0], y=place[1],
                      fbits=fbits)

    async def tb(ctx):
        look = dut.dst if direction == IpcDir.OUT else dut.src
        other = dut.src if direction == IpcDir.OUT else dut.dst
        if direction == IpcDir.OUT:     # the design's grant: PEER, any port
            assert allowed(ctx, dut.dst, PEER, 3) and allowed(ctx, dut.dst, PEER, 0)
            assert not allowed(ctx, dut.dst, OTHER, 0)
        else:                           # (0, 1) on port 0 only; the one row is taken
            assert allowed(ctx, dut.src, (0, 1), 0) and not allowed(ctx, dut.src, (0, 1), 1)
            await grant(ctx, OTHER, 1)
            assert not allowed(ctx, dut.src, OTHER, 1)      # a full table ignores a grant
            await grant(ctx, (0, 1), 0, add=0)
            assert not allowed(ctx, dut.src, (0, 1), 0)
        await grant(ctx, OTHER, 1)
        assert allowed(ctx, look, OTHER, 1) and not allowed(ctx, look, OTHER, 2)
        assert not allowed(ctx, other, OTHER, 1)            # the other table is untouched
        await grant(ctx, OTHER, 1)                  # a duplicate takes no row (3 rows: room)
        if direction == IpcDir.OUT:
            await grant(ctx, OTHER, 2)
            assert allowed(ctx, look, OTHER, 2)
        await grant(ctx, OTHER, 1, add=0)
        assert not allowed(ctx, look, OTHER, 1)
        if direction == IpcDir.OUT:
            assert allowed(ctx, look, OTHER, 2) and allowed(ctx, look, PEER, 1)
            await grant(ctx, PEER, 0, add=0)                # removes the any-port row too
            assert not allowed(ctx, look, PEER, 1)

    simulate(dut, tb, timeout=100)


def test_too_many_initial_capabilities_are_refused():
    with pytest.raises(ValueError, match="raise MonitorConfig"):
        ipc_rows([(1, 1, 0), (1, 2, 0), (1, 1, 0), (1, 3, None)], 2, "IPC-out")
    assert ipc_rows([(1, 1, 0), (1, 1, 0)], 2, "IPC-out")[1] == {}
