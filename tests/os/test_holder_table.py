"""HolderTable alone (the memory manager's holders of derived capabilities): derives fill the
lowest free entries once per receiver, a full table, a free revokes every holder of the root in
entry order, acks clear them and say when the last is in, stray acks."""

from apiary.os.memory_manager import HolderTable
from apiary.stream.testbench import simulate


A, B, C = (1, 2, 0), (3, 4, 1), (5, 6, 2)


async def command(ctx, dut, name, root, peer=(0, 0, 0), src=(0, 0)):
    """Present ``root``, ``peer`` and ``src``, strobe ``name`` for one cycle (after the checks
    the caller makes on the outputs, which are combinational)."""
    set_query(ctx, dut, root, peer, src)
    ctx.set(getattr(dut, name), 1)
    await ctx.tick()
    ctx.set(getattr(dut, name), 0)


def set_query(ctx, dut, root, peer=(0, 0, 0), src=(0, 0)):
    ctx.set(dut.root, root)
    ctx.set(dut.peer, {"x": peer[0], "y": peer[1], "fbits": peer[2]})
    ctx.set(dut.src, {"x": src[0], "y": src[1]})


def test_derive_free_revoke_and_acks():
    dut = HolderTable(3)

    async def tb(ctx):
        await command(ctx, dut, "derive", 7, A)
        await command(ctx, dut, "derive", 7, A)             # the same receiver: one entry
        await command(ctx, dut, "derive", 9, B)
        set_query(ctx, dut, 7, C)
        assert ctx.get(dut.held) and not ctx.get(dut.full) and not ctx.get(dut.being_freed)
        await command(ctx, dut, "derive", 7, C)             # the last free entry
        set_query(ctx, dut, 8, A)
        assert ctx.get(dut.full) and not ctx.get(dut.held)
        set_query(ctx, dut, 7, A)
        assert not ctx.get(dut.full)                        # A holds 7 already

        # Free root 7: its holders A (entry 0) and C (entry 2) are revoked in entry order.
        await command(ctx, dut, "free", 7)
        assert ctx.get(dut.being_freed)
        assert ctx.get(dut.revokee) == {"x": A[0], "y": A[1], "fbits": A[2]}
        assert not ctx.get(dut.last)
        await command(ctx, dut, "sent", 7)
        assert ctx.get(dut.revokee) == {"x": C[0], "y": C[1], "fbits": C[2]}
        assert ctx.get(dut.last)
        await command(ctx, dut, "sent", 7)

        set_query(ctx, dut, 7, src=B[:2])
        assert ctx.get(dut.stray)                           # B holds 9, not 7
        set_query(ctx, dut, 9, src=B[:2])
        assert ctx.get(dut.stray)                           # 9 is not being freed
        set_query(ctx, dut, 7, src=C[:2])
        assert not ctx.get(dut.stray) and ctx.get(dut.awaited)      # A's ack is still due
        await command(ctx, dut, "acked", 7, src=C[:2])
        set_query(ctx, dut, 7, src=A[:2])
        assert not ctx.get(dut.stray) and not ctx.get(dut.awaited)  # the last one
        await command(ctx, dut, "acked", 7, src=A[:2])
        set_query(ctx, dut, 7, A)
        assert not ctx.get(dut.held) and not ctx.get(dut.being_freed)
        set_query(ctx, dut, 9, B)
        assert ctx.get(dut.held) and not ctx.get(dut.being_freed)
        await command(ctx, dut, "derive", 11, C)            # freed entries are reused
        set_query(ctx, dut, 12, A)
        assert not ctx.get(dut.full)

    simulate(dut, tb, timeout=200)
