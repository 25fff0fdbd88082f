"""MemAcks (beehive/apps/mem_server.py) alone, at 64 and 512 bits, taken out with stalls:
every ack comes out whole, in order, its descriptor carrying its length, its data's ones'
complement sum and its header's ``error`` bit. One ack at a time, as the tile has them: the
next comes once the last one's descriptor is out."""

import random

import pytest

from apiary.os.memory_tile import MEM_FORMAT, MemMsgType
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import recv_packet, simulate, stream_get
from beehive.apps.mem_server import ACK_INFO, MemAcks
from receiver_feed import feed_message

MAX_READ = 200


@pytest.mark.parametrize("width", [64, 512])
def test_acks_are_stored_with_their_sum_and_error(width):
    rng = random.Random(width)
    acks = [(MemMsgType.STORE_MEM_ACK, b"", 0), (MemMsgType.LOAD_MEM_ACK, b"\x12", 0),
            (MemMsgType.LOAD_MEM_ACK, b"", 1), (MemMsgType.STORE_MEM_ACK, b"", 1)]
    acks += [(MemMsgType.LOAD_MEM_ACK, bytes(rng.getrandbits(8) for _ in range(n)),
              int(rng.random() < 0.3)) for n in (63, 64, 65, 130, MAX_READ)]
    dut = MemAcks(width, MAX_READ)
    got = []

    async def source(ctx):
        for k, (msg_type, data, error) in enumerate(acks):
            while len(got) < k:
                await ctx.tick()
            meta = MEM_FORMAT.pack(addr=0, size=len(data), error=error)
            await feed_message(ctx, dut.hdr, dut.i, width, data, msg_type=msg_type.value,
                               meta=meta, rng=rng, stall=0.3)

    async def sink(ctx):
        for _ in acks:
            desc = await stream_get(ctx, dut.o_desc, rng=rng, stall=0.5)
            data = await recv_packet(ctx, dut.o, width, rng=rng, stall=0.5)
            info = ACK_INFO.from_bits(int(desc.info))
            got.append((data, int(desc.bytes), info.sum, info.error))

    simulate(dut, sink, background=[source], timeout=20_000)
    assert got == [(data, len(data), ones_complement_sum(data), error)
                   for _, data, error in acks]
