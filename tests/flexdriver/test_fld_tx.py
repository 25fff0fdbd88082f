"""FLD's transmit side driving the NIC model: descriptors posted into the hardware pool
(flexdriver/tx_pool.py, in Amaranth's simulator), the NIC model fetching each WQE through the
pool's translation (its reads of the per-queue ring addresses served by the hardware) and the
packet data from FLD's transmit buffer, and the frames on the wire exactly those posted."""

import random

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.stream.testbench import simulate, stream_get, stream_put
from flexdriver.descriptors import BUFFER_UNIT
from flexdriver.formats import SIGNALED
from flexdriver.nic import HostMemory, NicModel
from flexdriver.tx_pool import TxDescriptorPool

QUEUES, RING, POOL = 4, 16, 16
RING_BASE, WINDOW, CQ_BASE = 0x4000_0000, 0x8000_0000, 0x1000


class FldBus:
    """The NIC's view of the FPGA: reads of the rings go to the hardware pool (answered by the
    testbench), everything else is plain memory (FLD's transmit buffer, the completions)."""

    def __init__(self):
        self.memory = HostMemory()
        self.pending = []

    def read(self, address, length):
        return self.memory.read(address, length)

    def write(self, address, data):
        self.memory.write(address, data)

    def submit_read(self, address, length, answer):
        if RING_BASE <= address < RING_BASE + QUEUES * RING * 64:
            self.pending.append((address, answer))
        else:
            answer(self.memory.read(address, length))


def test_the_nic_sends_what_was_posted_through_the_pool():
    rng = random.Random(9)
    bus = FldBus()
    nic = NicModel(bus, latency=30, jitter=10, seed=2)
    nic.create_cq(0, CQ_BASE, 64)
    for q in range(QUEUES):
        nic.create_sq(q, RING_BASE + q * RING * 64, RING, cq=0)
    dut = TxDescriptorPool(queues=QUEUES, ring_entries=RING, pool_entries=POOL,
                           ring_base=RING_BASE, window=WINDOW)
    frames = {q: [] for q in range(QUEUES)}

    async def bench(ctx):
        produced = [0] * QUEUES
        offset = 0
        for round_ in range(3):                          # each queue's ring wraps
            for q in range(QUEUES):
                for _ in range(3):
                    i = produced[q]
                    frame = bytes(Ether() / IP(dst=f"10.0.0.{q + 1}") / UDP(sport=i, dport=7)
                                  / (bytes([q]) * rng.randrange(20, 600)))
                    bus.memory.write(WINDOW + offset * BUFFER_UNIT, frame)
                    await stream_put(ctx, dut.post, {"queue": q, "index": i % RING, "desc": {
                        "buffer": offset, "length": len(frame), "queue": q,
                        "flags": SIGNALED}})
                    frames[q].append(frame)
                    offset += -(-len(frame) // BUFFER_UNIT)
                    produced[q] += 1
                nic.sq_doorbell(q, produced[q])
            # The NIC runs; its ring reads are served by the hardware.
            for _ in range(3000):
                nic.advance(nic.now + 1)
                while bus.pending:
                    address, answer = bus.pending.pop(0)
                    await stream_put(ctx, dut.nic_read, address)
                    got = await stream_get(ctx, dut.nic_data)
                    assert got.found
                    answer(int(got.wqe).to_bytes(64, "little"))
                await ctx.tick()
                if len(nic.wire) == 12 * (round_ + 1):
                    break
            # Their completions release the slots.
            for _, frame in nic.wire[-12:]:
                q = Ether(frame)[IP].dst.split(".")[-1]
                await stream_put(ctx, dut.release, {
                    "queue": int(q) - 1, "index": Ether(frame)[UDP].sport % RING})
            await ctx.tick().repeat(8)
            assert ctx.get(dut.free) == POOL

    simulate(dut, bench, timeout=200_000)
    sent = {q: [f for _, f in nic.wire if Ether(f)[IP].dst == f"10.0.0.{q + 1}"]
            for q in range(QUEUES)}
    assert sent == frames                                # every frame, in each queue's order
    assert nic.counters.tx_errors == {} and sum(nic.counters.tx_packets.values()) == 36
