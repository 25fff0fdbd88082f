"""FLD's receive side (flexdriver/rx_path.py, in Amaranth's simulator) under the NIC model: the
model's DMA writes of packets and completions go into the hardware, which streams each packet
to the accelerator with its metadata and gives the buffers back in posting order; an
accelerator that is not ready loses only those packets, counted."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.stream.layout import abort_nbytes
from apiary.stream.testbench import simulate
from flexdriver.formats import IP_OK, IS_IPV4, IS_UDP, L4_OK, RX_DESC_BYTES, RxDesc
from flexdriver.nic import HostMemory, NicModel, Rule
from flexdriver.rx_path import RxPath
from flexdriver.sim import read_count

BUFFERS, BUFFER_BYTES = 8, 2048
RX_BASE, CQ_BASE, RQ_RING = 0x0010_0000, 0x0000_2000, 0x0000_8000


class FldBus:
    """The NIC's writes to FLD's windows go to the hardware (queued, one word a cycle); the
    receive ring (unmodified, in host memory) is plain memory."""

    def __init__(self, width):
        self.memory, self.nb, self.words = HostMemory(), width // 8, []

    def read(self, address, length):
        return self.memory.read(address, length)

    def write(self, address, data):
        if address >= RX_BASE or CQ_BASE <= address < CQ_BASE + BUFFERS * 64:
            data = data + bytes(-len(data) % self.nb)
            for k in range(0, len(data), self.nb):
                self.words.append((address + k, int.from_bytes(data[k:k + self.nb], "little")))
        else:
            self.memory.write(address, data)


def frames(rng, n):
    return [bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2")
                  / UDP(sport=1000 + i, dport=9000 if i % 3 == 0 else 7)
                  / bytes(rng.getrandbits(8) for _ in range(rng.randrange(18, 1400))))
            for i in range(n)]


def run(width, sent, ready):
    """Send ``sent`` into the NIC model; the accelerator is ready on cycles where ``ready``
    says; returns ``(packets received, dropped count, doorbells rung)``."""
    bus = FldBus(width)
    nic = NicModel(bus, latency=20, jitter=5, seed=4)
    nic.create_cq(0, CQ_BASE, BUFFERS)
    nic.create_rq(0, RQ_RING, BUFFERS, cq=0)
    nic.set_rss([0])
    nic.add_rule(Rule({"dst_port": 9000}, queue=0, context=5), trusted=True)
    for i in range(BUFFERS):                                # posted once, never rewritten
        bus.memory.write(RQ_RING + i * RX_DESC_BYTES,
                         RxDesc(RX_BASE + i * BUFFER_BYTES, BUFFER_BYTES).pack())
    nic.rq_doorbell(0, BUFFERS)
    dut = RxPath(width=width, buffers=BUFFERS, buffer_bytes=BUFFER_BYTES, rx_base=RX_BASE,
                 cq_base=CQ_BASE)
    got, doorbells, current = [], [], []
    state = {"cycle": 0}

    async def bench(ctx):
        ctx.set(dut.doorbell.ready, 1)
        queue = list(sent)
        for cycle in range(60_000):
            state["cycle"] = cycle
            if queue and cycle % 400 == 399:                 # a frame every 400 cycles
                nic.receive(queue.pop(0))
            nic.advance(cycle)
            if bus.words:
                address, word = bus.words.pop(0)
                ctx.set(dut.pcie_write.payload, {"address": address, "data": word})
                ctx.set(dut.pcie_write.valid, 1)
            else:
                ctx.set(dut.pcie_write.valid, 0)
            ctx.set(dut.packets.ready, ready(cycle))
            await ctx.tick()
            if ctx.get(dut.packets.valid) and ready(cycle):
                w = ctx.get(dut.packets.payload)
                if w.nbytes == abort_nbytes(width):
                    current.clear()
                else:
                    current.append(int(w.data).to_bytes(width // 8, "little")[:w.nbytes])
                    if w.last:
                        got.append((b"".join(current), int(w.meta.context),
                                    int(w.meta.checks), int(w.meta.length)))
                        current.clear()
            if ctx.get(dut.doorbell.valid):
                ring = ctx.get(dut.doorbell.payload)
                if ring.cq:
                    nic.cq_doorbell(0, int(ring.value))           # completions taken
                else:
                    doorbells.append(int(ring.value))
                    nic.rq_doorbell(int(ring.queue), doorbells[-1])
            if not queue and len(doorbells) == len(sent) and not bus.words:
                break
        state["dropped"] = read_count(ctx, dut.dropped_queue, dut.dropped, 0)

    simulate(dut, bench, timeout=80_000)
    return got, state["dropped"], doorbells, nic


@pytest.mark.parametrize("width", [64, 512])
def test_every_packet_reaches_the_accelerator_and_buffers_go_back_in_order(width):
    sent = frames(random.Random(width), 30)               # the 8 buffers go round 4 times
    got, dropped, doorbells, nic = run(width, sent, lambda cycle: True)
    assert [g[0] for g in got] == sent and dropped == 0
    assert [g[1] for g in got] == [5 if i % 3 == 0 else 0 for i in range(30)]   # context IDs
    assert {g[2] for g in got} == {IS_IPV4 | IS_UDP | IP_OK | L4_OK}
    assert [g[3] for g in got] == [len(f) for f in sent]
    assert doorbells == list(range(BUFFERS + 1, BUFFERS + 31))   # one buffer back per packet
    assert nic.counters.out_of_buffer == {}


def test_an_accelerator_not_ready_loses_only_those_packets_counted():
    sent = frames(random.Random(3), 20)
    busy = range(400 * 6, 400 * 9)                       # not ready while 3 or so arrive
    got, dropped, doorbells, nic = run(64, sent, lambda cycle: cycle not in busy)
    assert dropped >= 2 and len(got) == 20 - dropped
    assert [g[0] for g in got] == [f for f in sent if f in [g[0] for g in got]]  # in order
    assert sent[0] in [g[0] for g in got] and sent[-1] in [g[0] for g in got]
    assert len(doorbells) == 20                          # every buffer back, delivered or not
