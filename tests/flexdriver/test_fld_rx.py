"""FLD's receive side (flexdriver/rx_path.py, in Amaranth's simulator) under the NIC model: one
striding ring shared by the receive queues, the model's DMA writes of packets and completions
going into the hardware, which streams each packet to the accelerator with its metadata from
its stride and gives the buffers back in posting order, one ring doorbell a buffer; an
accelerator that is not ready loses only those packets (of that queue), counted."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.stream.layout import abort_nbytes
from apiary.stream.testbench import simulate
from flexdriver.formats import IP_OK, IS_IPV4, IS_UDP, L4_OK, RX_DESC_BYTES, RxDesc
from flexdriver.nic import HostMemory, NicModel, Rule
from flexdriver.rx_path import RxPath
from flexdriver.sim import buffers_closed, read_count

BUFFERS, BUFFER_BYTES, STRIDE, RQ_ENTRIES, CQ_ENTRIES = 4, 4096, 256, 8, 16
RX_BASE, CQ_BASE, RQ_RING = 0x0010_0000, 0x0000_2000, 0x0000_8000


class FldBus:
    """The NIC's writes to FLD's windows go to the hardware (queued, one word a cycle); the
    receive ring (unmodified, in host memory) is plain memory."""

    def __init__(self, width):
        self.memory, self.nb, self.words = HostMemory(), width // 8, []

    def read(self, address, length):
        return self.memory.read(address, length)

    def write(self, address, data):
        if address >= RX_BASE or CQ_BASE <= address < CQ_BASE + CQ_ENTRIES * 64:
            data = data + bytes(-len(data) % self.nb)
            for k in range(0, len(data), self.nb):
                self.words.append((address + k, int.from_bytes(data[k:k + self.nb], "little")))
        else:
            self.memory.write(address, data)


def frames(rng, n, port=None):
    return [bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2")
                  / UDP(sport=1000 + i, dport=port or (9000 if i % 3 == 0 else 7))
                  / bytes(rng.getrandbits(8) for _ in range(rng.randrange(18, 1400))))
            for i in range(n)]


def closed(sizes):
    """The ring doorbells FLD should ring for frames of ``sizes``."""
    return buffers_closed(sizes, BUFFER_BYTES, STRIDE)


def run(width, sent, ready, *, queues=1, accept=None):
    """Send ``sent`` into the NIC model (``queues`` receive queues sharing one striding ring:
    frames to port 9000 on the last by a rule tagging context 5, the others by RSS); the
    accelerator is ready on cycles where ``ready`` says and takes queue ``q`` where
    ``accept(cycle)`` has bit ``q``; returns ``(packets received, drops by queue, ring
    doorbells rung, the NIC model)``."""
    bus = FldBus(width)
    nic = NicModel(bus, latency=20, jitter=5, seed=4)
    nic.create_cq(0, CQ_BASE, CQ_ENTRIES)
    nic.create_rq(0, RQ_RING, RQ_ENTRIES, cq=0, stride_bytes=STRIDE)
    for q in range(1, queues):
        nic.share_rq(q, 0)
    nic.set_rss(list(range(queues - 1 or 1)))
    nic.add_rule(Rule({"dst_port": 9000}, queue=queues - 1, context=5), trusted=True)
    for i in range(RQ_ENTRIES):                         # posted once, never rewritten
        bus.memory.write(RQ_RING + i * RX_DESC_BYTES,
                         RxDesc(RX_BASE + i % BUFFERS * BUFFER_BYTES, BUFFER_BYTES).pack())
    nic.rq_doorbell(0, BUFFERS)
    dut = RxPath(width=width, buffers=BUFFERS, buffer_bytes=BUFFER_BYTES, stride_bytes=STRIDE,
                 rx_base=RX_BASE, cq_base=CQ_BASE, cq_entries=CQ_ENTRIES, queues=queues)
    got, doorbells, current = [], [], []
    state = {}

    async def bench(ctx):
        ctx.set(dut.doorbell.ready, 1)
        queue = list(sent)
        for cycle in range(60_000):
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
            if accept is not None:
                ctx.set(dut.accept, accept(cycle))
            await ctx.tick()
            if ctx.get(dut.packets.valid) and ready(cycle):
                w = ctx.get(dut.packets.payload)
                if w.nbytes == abort_nbytes(width):
                    current.clear()
                else:
                    current.append(int(w.data).to_bytes(width // 8, "little")[:w.nbytes])
                    if w.last:
                        got.append((b"".join(current), int(w.meta.context),
                                    int(w.meta.checks), int(w.meta.length),
                                    int(w.meta.queue)))
                        current.clear()
            if ctx.get(dut.doorbell.valid):
                ring = ctx.get(dut.doorbell.payload)
                if ring.cq:
                    nic.cq_doorbell(0, int(ring.value))           # completions taken
                else:
                    assert int(ring.queue) == 0
                    doorbells.append(int(ring.value))
                    nic.rq_doorbell(0, doorbells[-1])
            if not queue and not bus.words and not nic.busy and cycle > 400 * len(sent) + 500:
                break
        state["dropped"] = [read_count(ctx, dut.dropped_queue, dut.dropped, q)
                            for q in range(queues)]

    simulate(dut, bench, timeout=80_000)
    return got, state["dropped"], doorbells, nic


@pytest.mark.parametrize("width", [64, 512])
def test_every_packet_reaches_the_accelerator_and_buffers_go_back_in_order(width):
    sent = frames(random.Random(width), 30)
    got, dropped, doorbells, nic = run(width, sent, lambda cycle: True)
    assert [g[0] for g in got] == sent and dropped == [0]
    assert [g[1] for g in got] == [5 if i % 3 == 0 else 0 for i in range(30)]   # context IDs
    assert {g[2] for g in got} == {IS_IPV4 | IS_UDP | IP_OK | L4_OK}
    assert [g[3] for g in got] == [len(f) for f in sent]
    n = closed(len(f) for f in sent)
    assert n >= RQ_ENTRIES - BUFFERS + 1                    # several packets a buffer; the
    assert doorbells == list(range(BUFFERS + 1, BUFFERS + 1 + n))   # ring wraps, one a buffer
    assert nic.counters.out_of_buffer == {} and nic.counters.rx_packets == {0: 30}


def test_an_accelerator_not_ready_loses_only_those_packets_counted():
    sent = frames(random.Random(3), 20)
    busy = range(400 * 6, 400 * 9)                       # not ready while 3 or so arrive
    got, dropped, doorbells, nic = run(64, sent, lambda cycle: cycle not in busy)
    assert dropped[0] >= 2 and len(got) == 20 - dropped[0]
    assert [g[0] for g in got] == [f for f in sent if f in [g[0] for g in got]]  # in order
    assert sent[0] in [g[0] for g in got] and sent[-1] in [g[0] for g in got]
    assert doorbells == list(range(BUFFERS + 1, BUFFERS + 1 + closed(len(f) for f in sent)))


@pytest.mark.parametrize("width", [64, 512])
def test_a_busy_queue_loses_only_its_own_packets_and_an_oversized_one_frees_nothing(width):
    rng = random.Random(width + 1)
    fast, slow = frames(rng, 12, 7), frames(rng, 12, 9000)
    big = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=7)
                / bytes(BUFFER_BYTES))                    # longer than a whole buffer
    sent = [f for pair in zip(fast, slow) for f in pair]
    sent.insert(9, big)
    busy = range(400 * 8, 400 * 18)                       # queue 1 not taken for a while
    got, dropped, doorbells, nic = run(width, sent, lambda cycle: True, queues=2,
                                       accept=lambda cycle: 0b01 if cycle in busy else 0b11)
    q0, q1 = [g for g in got if g[4] == 0], [g for g in got if g[4] == 1]
    assert [g[0] for g in q0] == fast and dropped[0] == 0
    assert dropped[1] >= 4 and len(q1) == 12 - dropped[1]
    assert [g[0] for g in q1] == [f for f in slow if f in [g[0] for g in q1]]     # in order
    assert {g[1] for g in q1} == {5} and {g[1] for g in q0} == {0}
    assert nic.counters.rx_length_errors == {0: 1} and nic.counters.out_of_buffer == {}
    assert doorbells == list(range(BUFFERS + 1, BUFFERS + 1 + closed(len(f) for f in sent)))


@pytest.mark.parametrize("width", [64, 512])
def test_a_buffer_goes_back_on_its_filler_or_when_a_packet_ends_at_its_last_stride(width):
    sizes = [1024] * 4 + [700] * 3 + [2000, 2000, 60, 100] + [1024] * 4
    sent = [bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=k, dport=7)
                  / bytes(size - 42)) for k, size in enumerate(sizes)]
    got, dropped, doorbells, nic = run(width, sent, lambda cycle: True)
    assert [g[0] for g in got] == sent and dropped == [0]
    # Buffer 0 filled exactly by 4; buffer 1 (9 strides) closed by a filler; buffer 2 filled
    # exactly (8 + 8); buffer 3 takes 1 + 1 + 4 + 4 + 4, then a filler; buffer 0 again.
    assert closed(sizes) == 4 and doorbells == [5, 6, 7, 8]


def test_bad_parameters_are_refused_by_name():
    base = dict(width=64, buffers=4, buffer_bytes=4096, stride_bytes=256, rx_base=0,
                cq_base=0x1000, cq_entries=16)
    for change, message in (({"buffers": 3}, "buffers"), ({"stride_bytes": 32}, "stride_bytes"),
                            ({"stride_bytes": 96}, "stride_bytes"),
                            ({"width": 512, "stride_bytes": 64, "buffer_bytes": 64 * 512},
                             "buffer_bytes"),
                            ({"buffer_bytes": 128}, "buffer_bytes"),
                            ({"cq_entries": 12}, "cq_entries"), ({"queues": 3}, "queues")):
        with pytest.raises(ValueError, match=message):
            RxPath(**base | change)
    RxPath(**base | {"width": 512, "stride_bytes": 64, "buffer_bytes": 64 * 256})
