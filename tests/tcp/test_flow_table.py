"""The TCP engine's flow table (beehive/proto/tcp/flow_table.py) alone in Amaranth's simulator:
every slot can be filled whatever the ports (sequential, or random from one address), each key
finds its own slot again, a removed key is gone while the others stay, slots come back first in
first out once released (not when their entry is removed), and a full table says so."""

import random

import pytest

from apiary.stream.testbench import simulate
from beehive.proto.tcp.flow_table import FlowTable, place_bits

PEER = 0x0A000002


class Table:
    """Drive a FlowTable as the receive tile does: a lookup, then an insert or a remove."""

    def __init__(self, dut):
        self.dut = dut

    async def lookup(self, ctx, key):
        ip, port, local = key
        ctx.set(self.dut.key, {"peer_ip": ip, "peer_port": port, "local_port": local})
        ctx.set(self.dut.lookup, 1)
        await ctx.tick()
        ctx.set(self.dut.lookup, 0)
        d = self.dut
        return (ctx.get(d.hit), ctx.get(d.slot), ctx.get(d.place), ctx.get(d.free),
                ctx.get(d.free_slot), ctx.get(d.free_place))

    async def insert(self, ctx, key):
        """Look ``key`` up and insert it: its slot and place."""
        hit, _, _, free, slot, place = await self.lookup(ctx, key)
        assert not hit and free, f"{key}: hit {hit}, free {free}"
        ctx.set(self.dut.insert, 1)
        await ctx.tick()
        ctx.set(self.dut.insert, 0)
        return slot, place

    async def remove(self, ctx, key, place, slot=None):
        ip, port, local = key
        ctx.set(self.dut.remove_key, {"peer_ip": ip, "peer_port": port, "local_port": local})
        ctx.set(self.dut.remove_place, place)
        ctx.set(self.dut.remove, 1)
        if slot is not None:
            ctx.set(self.dut.release_slot, slot)
            ctx.set(self.dut.release, 1)
        await ctx.tick()
        ctx.set(self.dut.remove, 0)
        ctx.set(self.dut.release, 0)

    async def release(self, ctx, slot):
        ctx.set(self.dut.release_slot, slot)
        ctx.set(self.dut.release, 1)
        await ctx.tick()
        ctx.set(self.dut.release, 0)


def sequential(flows):
    return [(PEER, 50000 + i, 7) for i in range(flows)]


def random_ports(flows, seed):
    rng = random.Random(seed)
    return [(PEER, port, 7) for port in rng.sample(range(1024, 65536), flows)]


@pytest.mark.parametrize("keys", [sequential(256), random_ports(256, 1), random_ports(256, 2)],
                         ids=["sequential", "random1", "random2"])
def test_every_slot_fills_and_each_key_finds_its_own(keys):
    flows = 256
    dut = FlowTable(flows, 4)
    table = Table(dut)

    async def run(ctx):
        placed = {}
        for key in keys:
            placed[key] = await table.insert(ctx, key)
        assert sorted(slot for slot, _ in placed.values()) == list(range(flows))
        assert all(0 <= place < 1 << place_bits(4) for _, place in placed.values())
        # Both banks are used.
        assert {place >> 2 for _, place in placed.values()} == {0, 1}
        for key, (slot, place) in placed.items():
            hit, got, got_place, *_ = await table.lookup(ctx, key)
            assert (hit, got, got_place) == (1, slot, place), key
        # Full: no slot for a new key, whatever its bucket.
        hit, _, _, free, _, _ = await table.lookup(ctx, (PEER, 7, 7))
        assert (hit, free) == (0, 0)

    simulate(dut, run, timeout=20 * flows)


def test_removed_keys_go_and_slots_come_back_in_order_once_released():
    flows = 16
    dut = FlowTable(flows, 4)
    table = Table(dut)
    keys = random_ports(flows + 4, 3)

    async def run(ctx):
        placed = {key: await table.insert(ctx, key) for key in keys[:flows]}
        gone = [keys[5], keys[2], keys[11]]
        # Removed now, released later (as an aborted connection's slot, kept until its
        # application is told): the table has room in the buckets but no slot yet.
        for key in gone:
            await table.remove(ctx, key, placed[key][1])
        for key in gone:
            assert (await table.lookup(ctx, key))[0] == 0
        for key in keys[:flows]:
            if key not in gone:
                hit, slot, *_ = await table.lookup(ctx, key)
                assert (hit, slot) == (1, placed[key][0])
        assert (await table.lookup(ctx, keys[flows]))[3] == 0
        for key in gone:
            await table.release(ctx, placed[key][0])
        # The new keys take the released slots in the order they were released.
        new = [await table.insert(ctx, key) for key in keys[flows:flows + 3]]
        assert [slot for slot, _ in new] == [placed[key][0] for key in gone]
        assert (await table.lookup(ctx, keys[flows + 3]))[3] == 0
        # A remove with its release in the same cycle.
        await table.remove(ctx, keys[0], placed[keys[0]][1], placed[keys[0]][0])
        slot, _ = await table.insert(ctx, keys[flows + 3])
        assert slot == placed[keys[0]][0]
        assert (await table.lookup(ctx, keys[flows + 3]))[:2] == (1, slot)

    simulate(dut, run, timeout=2000)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="power of two"):
        FlowTable(12)
    with pytest.raises(ValueError, match="ways"):
        FlowTable(8, 16)
