"""The TCP engine's ring allocator under Apiary (beehive/proto/tcp/segments.py) alone, in
Amaranth's simulator, against a scripted monitor: spare pairs allocated ahead (the order of a
pair's two rings alternating), a refused allocation asked again later, a taken pair's send ring
sent to the transmit tile and the slot's previous pair freed, and rings granted to applications
with the permissions of their kind."""

from apiary.os.uapi import KernelMsgType as K, Perm, Status
from apiary.stream.testbench import simulate
from beehive.proto.tcp.app import BufferKind
from beehive.proto.tcp.segments import ALLOC_RX, ALLOC_TX, RETRY_CYCLES, BufferPool

RX, TX = 8192, 4096


def monitor(pool, log, *, refuse=()):
    """Answer each request the pool sends: CAP_ALLOC with the next handle (or NO_MEMORY for the
    allocations numbered in ``refuse``), anything else OK. ``log`` gets ``(cycle, msg_type,
    fields)`` of every request."""
    async def bench(ctx):
        handle, allocs, cycle = 16, 0, 0
        ctx.set(pool.requests.ready, 1)
        while True:
            *_, valid, p = await ctx.tick().sample(pool.requests.valid, pool.requests.payload)
            cycle += 1
            ctx.set(pool.result_valid, 0)
            if valid:                               # a request taken at this clock edge
                meta = p.meta
                fields = dict(handle=meta.handle, size=meta.size, perm=meta.perm, user=meta.user,
                              peer=(meta.peer_x, meta.peer_y, meta.peer_fbits))
                log.append((cycle, p.msg_type, fields))
                result = {"op": p.msg_type, "status": Status.OK, "user": meta.user,
                          "handle": meta.handle}
                if p.msg_type == K.CAP_ALLOC.value:
                    if allocs in refuse:
                        result["status"] = Status.NO_MEMORY
                    else:
                        result["handle"] = handle
                        handle += 1
                    allocs += 1
                ctx.set(pool.requests.ready, 0)
                await ctx.tick().repeat(3)          # the monitor and the manager take a while
                cycle += 3
                ctx.set(pool.requests.ready, 1)
                ctx.set(pool.result, result)
                ctx.set(pool.result_valid, 1)
    return bench


def test_spare_pairs_alternate_and_a_refusal_is_asked_again():
    pool = BufferPool(rx_ring=RX, tx_ring=TX, spare=2)
    log = []

    async def check(ctx):
        await ctx.tick().repeat(RETRY_CYCLES + 200)
        assert ctx.get(pool.ready)
        assert ctx.get(pool.alloc_failed) == 1

    simulate(pool, check, background=[monitor(pool, log, refuse={1})], timeout=5000)
    allocs = [(f["size"], f["user"]) for _, t, f in log if t == K.CAP_ALLOC.value]
    # Pair 1: receive ring, then its send ring (refused once, asked again after the back-off);
    # pair 2: send ring first. Then the pool is full.
    assert allocs == [(RX, ALLOC_RX), (TX, ALLOC_TX), (TX, ALLOC_TX), (TX, ALLOC_TX),
                      (RX, ALLOC_RX)]
    cycles = [c for c, t, _ in log if t == K.CAP_ALLOC.value]
    assert cycles[2] - cycles[1] >= RETRY_CYCLES
    assert all(f["perm"] == Perm.RW for _, t, f in log)


def test_taking_a_pair_frees_the_old_one_and_sends_the_rings_on():
    pool = BufferPool(rx_ring=RX, tx_ring=TX, spare=1)
    log = []
    taken = {}

    async def use(ctx):
        ctx.set(pool.tx_x, 3)
        ctx.set(pool.tx_y, 1)
        ctx.set(pool.tx_fbits, 8)
        while not ctx.get(pool.ready):
            await ctx.tick()
        taken.update(rx=ctx.get(pool.pair.rx), tx=ctx.get(pool.pair.tx))
        ctx.set(pool.take, 1)
        ctx.set(pool.take_job, {"old": 1, "old_rx": 5, "old_tx": 6, "tx": taken["tx"],
                                "flow": 0x2003})
        await ctx.tick()
        ctx.set(pool.take, 0)
        # The connection is established: both rings to its application at (2, 2).
        for kind, handle in ((BufferKind.RECEIVE, taken["rx"]), (BufferKind.SEND, taken["tx"])):
            ctx.set(pool.grants.valid, 1)
            ctx.set(pool.grants.payload, {"handle": handle, "kind": kind,
                                          "size_log2": 13 if kind == BufferKind.RECEIVE else 12,
                                          "flow": 0x2003, "x": 2, "y": 2, "fbits": 8})
            await ctx.tick().until(pool.grants.ready)
        ctx.set(pool.grants.valid, 0)
        await ctx.tick().repeat(100)

    simulate(pool, use, background=[monitor(pool, log)], timeout=3000)
    others = [(t, f) for _, t, f in log if t != K.CAP_ALLOC.value]
    assert [(t, f["handle"]) for t, f in others[:2]] == [(K.CAP_FREE.value, 5),
                                                         (K.CAP_FREE.value, 6)]
    send_tx, grant_rx, grant_tx = (f for t, f in others[2:5])
    assert [t for t, _ in others[2:5]] == [K.CAP_SEND.value] * 3
    assert send_tx == dict(handle=taken["tx"], size=TX, perm=Perm.READ,
                           user=0x2003 | BufferKind.SEND << 16 | 12 << 18, peer=(3, 1, 8))
    assert grant_rx == dict(handle=taken["rx"], size=RX, perm=Perm.READ,
                            user=0x2003 | BufferKind.RECEIVE << 16 | 13 << 18, peer=(2, 2, 8))
    assert grant_tx == dict(handle=taken["tx"], size=TX, perm=Perm.WRITE,
                            user=0x2003 | BufferKind.SEND << 16 | 12 << 18, peer=(2, 2, 8))
