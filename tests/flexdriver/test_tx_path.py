"""FLD's whole transmit side (flexdriver/tx_path.py, in Amaranth's simulator) under the NIC model:
the accelerator's packets go into the shared paged buffer, their descriptors into the pool, the
doorbells to the model; the model's reads of WQEs and packet bytes are answered by the hardware,
its completions written back into it. Every frame reaches the wire intact and in order per
queue; credits come back with the completions; a tenant that sends without credit, a packet
longer than ``max_packet`` and an aborted one are dropped and counted under their own queue
only, and keep no page."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.stream.layout import abort_nbytes
from apiary.stream.testbench import simulate
from flexdriver.nic import NicModel
from flexdriver.sim import FldLink, read_count
from flexdriver.tx_path import TxPath

QUEUES, RING, POOL = 2, 8, 8
PAGES, PAGE_BYTES, MAX_PACKET = 40, 256, 2048         # (40: any number of pages)
RING_BASE, WINDOW, CQ_BASE, CQ_ENTRIES = 0x4000_0000, 0x8000_0000, 0x1000, 16


def frames(rng, n, queue):
    return [bytes(Ether() / IP(src="10.0.0.2", dst="10.0.0.1")
                  / UDP(sport=7, dport=1000 + 10 * queue + i)
                  / bytes(rng.getrandbits(8) for _ in range(rng.randrange(18, 1400))))
            for i in range(n)]


class ChunkedReads:
    """The link as a NIC that splits its DMA reads into ``chunk`` bytes (PCIe's maximum read
    request) sees it: each packet is read in several requests, most starting inside it."""

    def __init__(self, link, chunk):
        self.link, self.chunk = link, chunk

    def write(self, address, data):
        self.link.write(address, data)

    def submit_read(self, address, length, answer):
        pieces = [(address + k, min(self.chunk, length - k))
                  for k in range(0, length, self.chunk)]
        got = {}

        def collect(k):
            def land(data):
                got[k] = data
                if len(got) == len(pieces):
                    answer(b"".join(got[i] for i in range(len(pieces))))
            return land
        for k, (a, n) in enumerate(pieces):
            self.link.submit_read(a, n, collect(k))


def run(width, packets, *, rates=(None, None), obey_credits=(True, True), limit=120_000,
        chunk=None):
    """Offer ``packets`` (``(queue, frame)``; a frame of ``None`` is an aborted packet) to the
    accelerator side, in order, each queue waiting for credit when ``obey_credits`` says;
    returns the NIC model and what the hardware counted. With ``chunk``, the NIC reads in
    requests of that many bytes."""
    nb = width // 8
    dut = TxPath(width=width, queues=QUEUES, ring_entries=RING, pool_entries=POOL, pages=PAGES,
                 page_bytes=PAGE_BYTES, max_packet=MAX_PACKET, ring_base=RING_BASE,
                 window=WINDOW, cq_base=CQ_BASE,
                 cq_entries=CQ_ENTRIES)

    def doorbell(nic, ring):
        if ring.cq:
            nic.cq_doorbell(0, int(ring.value))
        else:
            nic.sq_doorbell(int(ring.queue), int(ring.value))

    link = FldLink(dut, doorbell)
    bus = ChunkedReads(link, chunk) if chunk else link
    nic = link.nic = NicModel(bus, latency=30, jitter=8, seed=width)
    nic.create_cq(0, CQ_BASE, CQ_ENTRIES)
    for q in range(QUEUES):
        nic.create_sq(q, RING_BASE + q * RING * 64, RING, cq=0, rate=rates[q])
    out = {"credits_min": RING, "done": False}

    def credit(ctx, queue):
        ctx.set(dut.credit_queue, queue)
        value = ctx.get(dut.credit)
        out["credits_min"] = min(out["credits_min"], value)
        return value

    async def accelerator(ctx):
        for queue, frame in packets:
            while obey_credits[queue] and credit(ctx, queue) == 0:
                await ctx.tick()
            words = [frame[k:k + nb] for k in range(0, len(frame), nb)] if frame else [b""]
            for k, chunk in enumerate(words):
                last = k == len(words) - 1
                nbytes = len(chunk) if frame else abort_nbytes(width)
                ctx.set(dut.packets.payload, {"data": int.from_bytes(chunk, "little"),
                                              "nbytes": nbytes, "last": last,
                                              "meta": {"queue": queue, "flags": 0}})
                ctx.set(dut.packets.valid, 1)
                await ctx.tick().until(dut.packets.ready)
            ctx.set(dut.packets.valid, 0)
        # Every credit back once the NIC has sent what it took.
        while any(credit(ctx, q) != RING for q in range(QUEUES)):
            await ctx.tick()
        await ctx.tick().repeat(50)
        out["dropped"] = [read_count(ctx, dut.dropped_queue, dut.dropped, q) for q in range(QUEUES)]
        out["stray_reads"] = int(ctx.get(dut.stray_reads))
        out["free_pages"] = int(ctx.get(dut.free_pages))

    simulate(dut, accelerator, background=[link.run], timeout=limit)
    return nic, out


def wire_by_queue(nic, sent):
    """The wire's frames, attributed to the queue whose packet each is."""
    owner = {frame: q for q, frame in sent if frame}
    by_queue = {q: [] for q in range(QUEUES)}
    for _, frame in nic.wire:
        by_queue[owner[frame]].append(frame)
    return by_queue


@pytest.mark.parametrize("width", [64, 512])
def test_every_frame_reaches_the_wire_in_order_and_credits_come_back(width):
    rng = random.Random(width)
    sent = [(q, f) for q, f in zip([0, 1] * 12, [f for pair in zip(
        frames(rng, 12, 0), frames(rng, 12, 1)) for f in pair])]
    nic, out = run(width, sent)
    got = wire_by_queue(nic, sent)
    for q in range(QUEUES):
        assert got[q] == [f for qq, f in sent if qq == q]
    assert out["dropped"] == [0, 0] and out["stray_reads"] == 0
    assert nic.counters.tx_packets == {0: 12, 1: 12} and nic.counters.tx_errors == {}
    assert out["credits_min"] == 0              # the 8 ring positions were all in use at times
    assert out["free_pages"] == PAGES           # every page back


@pytest.mark.parametrize("width", [64, 512])
def test_reads_that_start_inside_a_packet_walk_its_pages(width):
    """The NIC reads each packet in 320-byte requests: most start on a later page of the
    packet, some inside a page; the pages of the two queues' packets come back out of order,
    so the free pages (and the chains) are shuffled. Every frame intact."""
    rng = random.Random(width + 1)
    sent = [(k % 2, f) for k, f in enumerate(frames(rng, 16, 0))]
    nic, out = run(width, sent, chunk=320, rates=(2.0, None))
    got = wire_by_queue(nic, sent)
    for q in range(QUEUES):
        assert got[q] == [f for qq, f in sent if qq == q]
    assert out["stray_reads"] == 0 and out["free_pages"] == PAGES


def test_a_tenant_without_credit_loses_only_its_own_packets():
    """Queue 0 is shaped to a crawl and its tenant ignores its credits; queue 1 obeys them:
    queue 0's surplus is dropped and counted under queue 0, queue 1 loses nothing, and no
    queue ever has more packets outstanding than its ring holds (its credit never below 0)."""
    rng = random.Random(5)
    slow, fast = frames(rng, 16, 0), frames(rng, 10, 1)
    sent = [(0, f) for f in slow[:12]] + [(1, f) for f in fast] + \
        [(0, f) for f in slow[12:]]
    nic, out = run(64, sent, rates=(0.5, None), obey_credits=(False, True), limit=200_000)
    got = wire_by_queue(nic, sent)
    assert got[1] == fast and out["dropped"][1] == 0
    assert out["dropped"][0] >= 4 and len(got[0]) == 16 - out["dropped"][0]
    assert got[0] == [f for f in slow if f in got[0]]           # in order
    assert nic.counters.tx_errors == {}


def test_too_long_and_aborted_packets_are_dropped_and_keep_no_pages():
    rng = random.Random(9)
    good = frames(rng, 10, 1)
    long_frame = bytes(Ether() / IP() / UDP() / bytes(MAX_PACKET))      # over max_packet
    sent = [(1, good[0]), (1, long_frame), (1, None), (1, good[1])] + \
        [(1, f) for f in good[2:]]
    nic, out = run(64, sent)
    assert wire_by_queue(nic, sent)[1] == good
    assert out["dropped"] == [0, 2] and out["free_pages"] == PAGES
