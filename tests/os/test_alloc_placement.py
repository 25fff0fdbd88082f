"""AllocPlacement alone (the memory manager's choice of level and memory): the level a size
needs, refused sizes, the first memory with room, and rotation past the last allocation."""

from amaranth.sim import Simulator

from apiary.os.memory_manager import AllocPlacement
from apiary.stream.testbench import simulate


LEAVES = [16, 8, 4]         # levels 0-4, 0-3, 0-2 of 256-byte blocks


def run_comb(dut, tb):
    """Without rotation the placement is combinational: no clock."""
    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


def test_level_and_bad_sizes():
    dut = AllocPlacement(LEAVES, block_bytes=256)
    sizes = {1: 0, 256: 0, 257: 1, 512: 1, 513: 2, 1500: 3, 4096: 4}

    async def tb(ctx):
        for size, level in sizes.items():
            ctx.set(dut.size, size)
            await ctx.delay(1e-9)
            assert (ctx.get(dut.level), ctx.get(dut.bad_size)) == (level, 0)
        for size in (0, 4097, 1 << 20):
            ctx.set(dut.size, size)
            await ctx.delay(1e-9)
            assert ctx.get(dut.bad_size)

    run_comb(dut, tb)


def test_first_memory_with_room_at_the_level():
    """``rooms[i]`` bit ``k``: memory ``i`` can give a block of level ``k``."""
    dut = AllocPlacement(LEAVES, block_bytes=256)

    async def tb(ctx):
        ctx.set(dut.size, 600)                              # level 2
        for rooms, pick in [((0b11111, 0b1111, 0b111), 0), ((0b00011, 0b1111, 0b111), 1),
                            ((0b00011, 0b0011, 0b100), 2), ((0b00011, 0b0011, 0b011), None)]:
            for i, room in enumerate(rooms):
                ctx.set(dut.rooms[i], room)
            await ctx.delay(1e-9)
            if pick is None:
                assert not ctx.get(dut.found) and ctx.get(dut.pick) == 0
            else:
                assert ctx.get(dut.found)
                assert (ctx.get(dut.pick), ctx.get(dut.index)) == (1 << pick, pick)

    run_comb(dut, tb)


def test_rotation_starts_after_the_last_placed():
    """With ``rotate``, each ``placed`` moves the start past the memory picked: with room
    everywhere, the picks go round 0, 1, 2, 0; a memory without room is passed over."""
    dut = AllocPlacement(LEAVES, block_bytes=256, rotate=True)

    async def tb(ctx):
        ctx.set(dut.size, 1)
        for i in range(3):
            ctx.set(dut.rooms[i], 1)
        picks = []
        for _ in range(4):
            picks.append(ctx.get(dut.index))
            ctx.set(dut.placed, 1)
            await ctx.tick()
            ctx.set(dut.placed, 0)
            await ctx.tick()                                # no move without `placed`
        assert picks == [0, 1, 2, 0]
        ctx.set(dut.rooms[2], 0)                            # start is at 1
        ctx.set(dut.placed, 1)
        await ctx.tick()
        assert (ctx.get(dut.index), ctx.get(dut.pick)) == (0, 0b001)    # 2 is passed over

    simulate(dut, tb, timeout=100)
