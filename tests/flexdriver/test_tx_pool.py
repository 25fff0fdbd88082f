"""FLD's shared transmit descriptor pool (flexdriver/tx_pool.py): the NIC's reads of per-queue
ring addresses answered with the WQE of the descriptor posted there, through the cuckoo table;
releases free slots, a full pool waits, a repost replaces."""

import random

import pytest

from apiary.stream.testbench import simulate, stream_get, stream_put
from flexdriver.descriptors import expand_tx
from flexdriver.tx_pool import TxDescriptorPool

QUEUES, RING, POOL = 8, 64, 32
RING_BASE, WINDOW = 0x4000_0000, 0x0000_2000_0000_0000


def address(queue, index):
    return RING_BASE + (queue * RING + index) * 64


def descriptor(rng):
    return {"buffer": rng.getrandbits(18), "length": rng.randrange(60, 1519),
            "queue": rng.getrandbits(12), "flags": rng.getrandbits(3)}


async def nic_read(ctx, dut, addr):
    await stream_put(ctx, dut.nic_read, addr)
    answer = await stream_get(ctx, dut.nic_data)
    return bool(answer.found), int(answer.wqe).to_bytes(64, "little")


def pool():
    return TxDescriptorPool(queues=QUEUES, ring_entries=RING, pool_entries=POOL,
                            ring_base=RING_BASE, window=WINDOW)


def test_random_posts_reads_and_releases_answer_as_rings_per_queue_would():
    rng = random.Random(5)
    dut = pool()

    async def bench(ctx):
        posted = {}
        for _ in range(300):
            roll = rng.random()
            if roll < 0.4 and len(posted) < POOL:
                pos = (rng.randrange(QUEUES), rng.randrange(RING))
                desc = descriptor(rng)
                await stream_put(ctx, dut.post, {"queue": pos[0], "index": pos[1], "desc": desc})
                posted[pos] = desc
            elif roll < 0.6 and posted:
                pos = rng.choice(list(posted))
                await stream_put(ctx, dut.release, {"queue": pos[0], "index": pos[1]})
                # The pulse that says what was released (the transmit side frees its slot).
                async for _, _, back in ctx.tick().sample(dut.released):
                    if back.valid:
                        break
                assert back.found
                assert {name: int(getattr(back.desc, name)) for name in posted[pos]} == \
                    posted[pos]
                del posted[pos]
            else:
                pos = rng.choice(list(posted)) if posted and rng.random() < 0.7 else \
                    (rng.randrange(QUEUES), rng.randrange(RING))
                found, wqe = await nic_read(ctx, dut, address(*pos))
                assert found == (pos in posted)
                if found:
                    assert wqe == expand_tx(posted[pos], pos[1], WINDOW).pack()
                else:
                    assert wqe == bytes(64)
            await ctx.tick().repeat(6)                 # (a post's table insert finishes)
            assert ctx.get(dut.free) == POOL - len(posted)

    simulate(dut, bench, timeout=50_000)


def test_a_full_pool_waits_for_a_release_and_a_repost_replaces():
    rng = random.Random(6)
    dut = pool()

    async def bench(ctx):
        descs = [descriptor(rng) for _ in range(POOL + 1)]
        for i in range(POOL):
            await stream_put(ctx, dut.post, {"queue": i % QUEUES, "index": i, "desc": descs[i]})
        await ctx.tick().repeat(6)
        assert ctx.get(dut.free) == 0
        ctx.set(dut.post.payload, {"queue": 7, "index": 63, "desc": descs[POOL]})
        ctx.set(dut.post.valid, 1)
        for _ in range(20):
            await ctx.tick()
            assert not ctx.get(dut.post.ready)               # no slot: the post waits
        await stream_put(ctx, dut.release, {"queue": 0, "index": 0})
        await ctx.tick().until(dut.post.ready)              # taken once a slot is free
        await ctx.tick()
        ctx.set(dut.post.valid, 0)
        await ctx.tick().repeat(6)
        assert await nic_read(ctx, dut, address(7, 63)) == (
            True, expand_tx(descs[POOL], 63, WINDOW).pack())
        assert (await nic_read(ctx, dut, address(0, 0)))[0] is False
        # Posting the same position again replaces its descriptor: the old slot comes back
        # (a post needs a free slot first, replacing or not).
        await stream_put(ctx, dut.release, {"queue": 2, "index": 2})
        await stream_put(ctx, dut.post, {"queue": 1, "index": 1, "desc": descs[0]})
        await ctx.tick().repeat(6)
        assert ctx.get(dut.free) == 1
        assert await nic_read(ctx, dut, address(1, 1)) == (
            True, expand_tx(descs[0], 1, WINDOW).pack())
        # Addresses outside the rings, or not on an entry, find nothing.
        for addr in (RING_BASE - 64, address(QUEUES - 1, RING - 1) + 64, address(3, 3) + 8):
            assert await nic_read(ctx, dut, addr) == (False, bytes(64))

    simulate(dut, bench, timeout=20_000)


def test_sizes_are_powers_of_two():
    with pytest.raises(ValueError, match="pool_entries must be a power of two"):
        TxDescriptorPool(queues=4, ring_entries=16, pool_entries=24, ring_base=0, window=0)


def test_at_table_2a_the_pool_and_its_table_are_16_kib_each():
    """FlexDriver's Table 2a link (100 Gb/s, 512 queues): N_txdesc = 1,133 descriptors, a pool
    of f(1,133) = 2,048; the paper's hash table adds 15.5 KiB. Counted from the memories the
    built design instantiates."""
    from amaranth.hdl import Fragment, Shape
    dut = TxDescriptorPool(queues=512, ring_entries=2048, pool_entries=2048, ring_base=0,
                           window=0)

    def memories(fragment, path=""):
        for sub, name, *_ in fragment.subfragments:
            yield from memories(sub, f"{path}/{name}")
        if type(fragment).__name__ == "MemoryInstance":
            data = fragment._data
            yield path, Shape.cast(data.shape).width * data.depth

    bits = dict(memories(Fragment.get(dut, None)))
    table = sum(b for p, b in bits.items() if p.startswith("/table/"))
    assert table == 4 * 1024 * 32 == 16 * 1024 * 8          # 16 KiB: the paper's 15.5 + 3.2 %
    assert bits["/pool"] == 2048 * 64 == 16 * 1024 * 8      # 8-byte descriptors
    assert bits["/free_list"] == 2048 * 11                  # 2.75 KiB (the paper lists none)
