"""MemRequestHead (beehive/apps/mem_server.py) alone: for random requests, ``bad`` is exactly
the Python model's bad request (:class:`MemServerModel`), ``op`` the request's; ``take`` keeps
the header, and the memory request it turns into (a STORE_MEM of the data or a LOAD_MEM, its
address in the segment with ``segment``)."""

import random

import pytest

from apiary.os.memory_tile import LOAD_MEM, STORE_MEM
from apiary.stream.testbench import simulate
from beehive.apps.mem_server import (OP_READ, OP_WRITE, STATUS_BAD_REQUEST, MemRequestHead,
                                     MemServerModel, mem_request)

MAX_READ = 100


def requests(rng):
    out = [b"", b"\x01", mem_request(OP_READ, 5, 0)[:7], mem_request(OP_READ, 5, MAX_READ),
           mem_request(OP_READ, 5, MAX_READ + 1), mem_request(OP_WRITE, 9, b"abc"),
           mem_request(OP_WRITE, 9, (4, b"abc")), mem_request(3, 1, 1)]
    for _ in range(200):
        op = rng.choice([OP_READ, OP_WRITE, OP_WRITE, 0, 3, rng.getrandbits(8)])
        length = rng.choice([0, 1, 8, MAX_READ, MAX_READ + 1, rng.getrandbits(16)])
        data = bytes(rng.getrandbits(8) for _ in range(rng.choice([length % 300, 3, 0])))
        out.append(mem_request(op, rng.getrandbits(32), (length, data),
                               flags=rng.getrandbits(8))[:rng.choice([400, 400, 5])])
    return out


@pytest.mark.parametrize("segment", [False, True])
def test_requests_are_read_and_kept(segment):
    rng = random.Random(int(segment))
    dut = MemRequestHead(MAX_READ, segment=segment)
    model = MemServerModel(1 << 20, max_read=MAX_READ)
    cases = requests(rng)

    async def tb(ctx):
        bad_seen = good_seen = 0
        for payload in cases:
            head = payload[:8].ljust(8, b"\0")
            ctx.set(dut.word, int.from_bytes(head, "little"))
            ctx.set(dut.bytes, len(payload))
            handle = rng.getrandbits(8)
            ctx.set(dut.handle, handle)
            reply, _ = model.reply(payload)
            bad = reply[1] == STATUS_BAD_REQUEST
            assert ctx.get(dut.bad) == bad, payload[:8].hex()
            assert ctx.get(dut.op) == head[0]
            bad_seen, good_seen = bad_seen + bad, good_seen + (not bad)
            ctx.set(dut.take, 1)
            await ctx.tick()
            ctx.set(dut.take, 0)
            op, length, addr = head[0], int.from_bytes(head[2:4], "big"), \
                int.from_bytes(head[4:8], "big")
            kept = ctx.get(dut.kept)
            assert (kept.op, kept.length, kept.addr, kept.write) == \
                (op, length, addr, op == OP_WRITE)
            write = op == OP_WRITE
            assert ctx.get(dut.mem_type) == (STORE_MEM if write else LOAD_MEM)
            assert ctx.get(dut.mem_bytes) == (length if write else 0)
            meta = ctx.get(dut.mem_meta)
            assert meta.addr == (handle << 40 | addr if segment else addr)
            assert (meta.size, meta.error) == (length, 0)
        assert bad_seen > 50 and good_seen > 20

    simulate(dut, tb, timeout=10_000)
