"""The ConnectX-style NIC model (flexdriver/nic.py), driven as FLD would drive it: WQEs and
receive descriptors written into memory, doorbells rung, completions read back; frames checked
with scapy."""

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN

from flexdriver.formats import (CQE_BYTES, CQE_ERROR, CQE_FILLER, CQE_RECV, CQE_SEND, DECAPPED,
                                ERR_LENGTH, IP_OK, IS_IPV4, IS_TCP, IS_UDP, L3_CSUM, L4_CSUM, L4_OK,
                                RX_DESC_BYTES, SIGNALED, WQE_BYTES, Cqe, RxDesc, TxWqe)
from flexdriver.nic import HostMemory, NicError, NicModel, Rule, toeplitz

SQ_BASE, RQ_BASE, CQ_BASE, DATA, BUFS = 0x1000, 0x2000, 0x4000, 0x10000, 0x40000


def frame(sport=1000, dport=7, payload=b"hello", **ip):
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(
        src=ip.get("src", "10.0.0.1"), dst=ip.get("dst", "10.0.0.2")) / UDP(
        sport=sport, dport=dport) / payload


def completions(memory, cq_base, entries, start, count):
    return [Cqe.unpack(memory.read(cq_base + ((start + i) % entries) * CQE_BYTES, CQE_BYTES))
            for i in range(count)]


def test_formats_have_their_real_sizes_and_round_trip():
    wqe = TxWqe(index=7, queue=3, address=0x1234_5678_9A, length=1400, inline=b"\x02" * 14,
                flags=SIGNALED | L4_CSUM)
    assert len(wqe.pack()) == WQE_BYTES == 64 and TxWqe.unpack(wqe.pack()) == wqe
    assert len(RxDesc(0x8000, 2048).pack()) == RX_DESC_BYTES == 16
    cqe = Cqe(CQE_RECV, 1, 5, 2, 60, 0xDEADBEEF, 9, IP_OK | L4_OK)
    assert len(cqe.pack()) == CQE_BYTES == 64 and Cqe.unpack(cqe.pack()) == cqe
    with pytest.raises(ValueError, match="inlines at most 18"):
        TxWqe(0, 0, inline=bytes(19)).pack()


def test_rss_hash_is_microsofts_toeplitz():
    """The verification vectors of Microsoft's RSS specification."""
    src, dst = bytes([66, 9, 149, 187]), bytes([161, 142, 100, 80])
    assert toeplitz(src + dst) == 0x323E8FC2
    assert toeplitz(src + dst + (2794).to_bytes(2, "big") + (1766).to_bytes(2, "big")) \
        == 0x51CCC178


def test_send_ring_wraps_completions_in_order_with_the_owner_bit_flipping():
    memory = HostMemory()
    nic = NicModel(memory, latency=50, jitter=20, seed=3)
    nic.create_cq(0, CQ_BASE, 4)
    nic.create_sq(1, SQ_BASE, 4, cq=0)
    sent, cqes, read = [], [], 0
    for batch in range(3):                              # 3 batches of 3 WQEs on a 4-entry ring
        for k in range(3):
            i = batch * 3 + k
            packet = bytes(frame(sport=2000 + i, payload=b"x" * (10 + i)))
            memory.write(DATA + 2048 * i, packet[14:])
            memory.write(SQ_BASE + (i % 4) * WQE_BYTES, TxWqe(
                i, 1, DATA + 2048 * i, len(packet) - 14, packet[:14]).pack())
            sent.append(packet)
        nic.sq_doorbell(1, batch * 3 + 3)
        nic.advance(nic.now + 2000)
        cqes += completions(memory, CQ_BASE, 4, read, 3)
        read += 3
        nic.cq_doorbell(0, read)
    assert [f for _, f in nic.wire] == sent
    assert [c.counter for c in cqes] == list(range(9))
    assert [c.opcode for c in cqes] == [CQE_SEND] * 9
    assert [c.owner for c in cqes] == [0, 0, 0, 0, 1, 1, 1, 1, 0]   # the phase of each wrap
    times = [t for t, _ in nic.wire]
    assert times == sorted(times) and times[0] >= 100     # doorbell, WQE and data each ≥ 50


def test_checksums_filled_in_on_send_and_checked_on_receive():
    memory = HostMemory()
    nic = NicModel(memory, latency=10)
    nic.create_cq(0, CQ_BASE, 16)
    nic.create_sq(0, SQ_BASE, 16, cq=0)
    nic.create_rq(0, RQ_BASE, 16, cq=0)
    nic.set_rss([0])
    raw = bytearray(bytes(frame()))
    raw[24:26] = b"\0\0"                                 # the IPv4 checksum, zeroed
    raw[40:42] = b"\x12\x34"                             # a wrong UDP checksum
    memory.write(SQ_BASE, TxWqe(0, 0, inline=bytes(raw[:18]), address=DATA,
                                length=len(raw) - 18, flags=SIGNALED | L3_CSUM | L4_CSUM).pack())
    memory.write(DATA, bytes(raw[18:]))
    nic.sq_doorbell(0, 1)
    nic.advance(500)
    (_, out), = nic.wire
    assert out == bytes(frame())                         # both checksums now right
    for i in range(3):
        memory.write(RQ_BASE + i * RX_DESC_BYTES, RxDesc(BUFS + 2048 * i, 2048).pack())
    nic.rq_doorbell(0, 3)
    nic.advance(600)
    tcp = Ether() / IP(src="10.0.0.9", dst="10.0.0.2") / TCP(sport=5, dport=80) / b"t"
    for f in (bytes(frame()), bytes(raw), bytes(tcp)):
        nic.receive(f)
    nic.advance(1000)
    rx = [c for c in completions(memory, CQ_BASE, 16, 1, 3)]
    assert [c.opcode for c in rx] == [CQE_RECV] * 3
    assert rx[0].checks == IS_IPV4 | IS_UDP | IP_OK | L4_OK
    assert rx[1].checks == IS_IPV4 | IS_UDP                # neither checksum right
    assert rx[2].checks == IS_IPV4 | IS_TCP | IP_OK | L4_OK
    assert memory.read(BUFS, rx[0].length) == bytes(frame())
    assert memory.read(BUFS + 2048 * 2, rx[2].length) == bytes(tcp)


def test_rss_keeps_a_flow_on_one_queue_and_spreads_flows():
    memory = HostMemory()
    nic = NicModel(memory, latency=5)
    nic.create_cq(0, CQ_BASE, 256)
    for q in range(4):
        nic.create_rq(q, RQ_BASE + q * 0x1000, 64, cq=0)
        for i in range(64):
            memory.write(RQ_BASE + q * 0x1000 + i * RX_DESC_BYTES,
                         RxDesc(BUFS + (q * 64 + i) * 2048, 2048).pack())
        nic.rq_doorbell(q, 64)
    nic.set_rss([0, 1, 2, 3])
    nic.advance(100)
    flows = [(1000 + k, f"10.0.{k}.1") for k in range(40)]
    for sport, src in flows + flows[:10]:
        nic.receive(bytes(frame(sport=sport, src=src)))
    nic.advance(10_000)
    cqes = completions(memory, CQ_BASE, 256, 0, 50)
    queue_of = {}
    for (sport, src), c in zip(flows + flows[:10], cqes):
        assert queue_of.setdefault((sport, src), c.queue) == c.queue    # a flow stays put
        expected = toeplitz(bytes(int(p) for p in src.split(".")) + bytes([10, 0, 0, 2])
                            + sport.to_bytes(2, "big") + (7).to_bytes(2, "big"))
        assert c.rss_hash == expected and c.queue == expected % 4
    assert len(set(queue_of.values())) == 4                               # flows spread


def test_steering_rules_tag_contexts_only_when_trusted_and_decapsulate_vxlan():
    memory = HostMemory()
    nic = NicModel(memory, latency=5)
    nic.create_cq(0, CQ_BASE, 64)
    for q in (0, 1):
        nic.create_rq(q, RQ_BASE + q * 0x1000, 8, cq=0)
        for i in range(8):
            memory.write(RQ_BASE + q * 0x1000 + i * RX_DESC_BYTES,
                         RxDesc(BUFS + (q * 8 + i) * 2048, 2048).pack())
        nic.rq_doorbell(q, 8)
    nic.set_rss([0])
    with pytest.raises(NicError, match="may not set a context ID"):
        nic.add_rule(Rule({"dst_port": 9000}, queue=1, context=77))       # a tenant's try
    nic.add_rule(Rule({"dst_port": 9000}, queue=1, context=77), trusted=True)
    nic.add_rule(Rule({"vni": 42, "dst_port": 7}, queue=1, context=5, decap=True), trusted=True)
    nic.add_rule(Rule({"dst_port": 9001}, queue=1))                      # no context: allowed
    inner = frame(dport=7, payload=b"inner")
    vxlan = Ether() / IP(src="192.168.0.1", dst="192.168.0.2") / UDP(sport=1, dport=4789) \
        / VXLAN(vni=42) / inner
    nic.advance(100)
    for f in (frame(dport=9000), vxlan, frame(dport=9001), frame(dport=5)):
        nic.receive(bytes(f))
    nic.advance(5000)
    tagged, decapped, plain, rss = completions(memory, CQ_BASE, 64, 0, 4)
    assert (tagged.queue, tagged.context) == (1, 77)
    assert (decapped.queue, decapped.context) == (1, 5) and decapped.checks & DECAPPED
    assert decapped.checks & (IP_OK | L4_OK) == IP_OK | L4_OK      # the inner packet's
    assert memory.read(BUFS + 9 * 2048, decapped.length) == bytes(inner)
    assert (plain.queue, plain.context) == (1, 0)
    assert (rss.queue, rss.context) == (0, 0) and rss.rss_hash


def test_no_descriptor_drops_and_counts_a_short_buffer_completes_with_an_error():
    memory = HostMemory()
    nic = NicModel(memory, latency=5)
    nic.create_cq(0, CQ_BASE, 8)
    nic.create_rq(0, RQ_BASE, 4, cq=0)
    nic.set_rss([0])
    memory.write(RQ_BASE, RxDesc(BUFS, 40).pack())           # one buffer, 40 bytes
    nic.rq_doorbell(0, 1)
    nic.advance(100)
    nic.receive(bytes(frame(payload=b"y" * 30)))                # 72 bytes: too long
    nic.receive(bytes(frame()))                                 # no descriptor left
    nic.advance(1000)
    (error,) = completions(memory, CQ_BASE, 8, 0, 1)
    assert (error.opcode, error.error, error.length) == (CQE_ERROR, ERR_LENGTH, 72)
    assert nic.counters.rx_length_errors == {0: 1} and nic.counters.out_of_buffer == {0: 1}


class CountedMemory(HostMemory):
    """Host memory that notes the address of every read."""

    def __init__(self):
        super().__init__()
        self.reads = []

    def read(self, address, length):
        self.reads.append(address)
        return super().read(address, length)


def sized(n, **kw):
    """A UDP frame of ``n`` bytes."""
    return bytes(frame(payload=b"z" * (n - 42), **kw))


def test_a_striding_queue_packs_frames_at_strides_and_closes_a_buffer_with_a_filler():
    memory = CountedMemory()
    nic = NicModel(memory, latency=20, jitter=7, seed=5)
    nic.create_cq(0, CQ_BASE, 16)
    nic.create_rq(0, RQ_BASE, 4, cq=0, stride_bytes=64)
    nic.set_rss([0])
    for i in range(3):                                     # 3 buffers of 8 strides
        memory.write(RQ_BASE + i * RX_DESC_BYTES, RxDesc(BUFS + 0x1000 * i, 512).pack())
    nic.rq_doorbell(0, 3)
    nic.advance(100)
    sizes = [100, 60, 200, 100, 600, 60, 320, 64, 70]
    sent = [sized(n, sport=k) for k, n in enumerate(sizes)]
    for f in sent:                                         # all at once: they wait, in order
        nic.receive(f)
    nic.advance(5000)
    cqes = completions(memory, CQ_BASE, 16, 0, 11)
    got = [(c.opcode, c.counter, c.stride, c.length) for c in cqes]
    assert got == [(CQE_RECV, 0, 0, 100), (CQE_RECV, 0, 2, 60), (CQE_RECV, 0, 3, 200),
                   (CQE_FILLER, 0, 7, 64),                 # 2 strides do not fit in the last
                   (CQE_RECV, 1, 0, 100), (CQE_ERROR, 1, 2, 600),    # longer than a buffer
                   (CQE_RECV, 1, 2, 60), (CQE_RECV, 1, 3, 320),      # ends at the last stride
                   (CQE_RECV, 2, 0, 64), (CQE_RECV, 2, 1, 70), (0, 0, 0, 0)]
    assert cqes[5].error == ERR_LENGTH and {c.queue for c in cqes[:10]} == {0}
    placed = [f for f, n in zip(sent, sizes) if n != 600]
    for c, f in zip([c for c in cqes if c.opcode == CQE_RECV], placed):
        assert memory.read(BUFS + 0x1000 * c.counter + 64 * c.stride, c.length) == f
    assert [a for a in memory.reads if RQ_BASE <= a < RQ_BASE + 0x100] == [
        RQ_BASE, RQ_BASE + 16, RQ_BASE + 32]               # each descriptor read once
    assert nic.counters.rx_packets == {0: 8} and nic.counters.rx_length_errors == {0: 1}
    nic.receive(sized(500))                                # does not fit: no buffer left
    nic.advance(6000)
    assert completions(memory, CQ_BASE, 16, 10, 1)[0].opcode == CQE_FILLER
    assert nic.counters.out_of_buffer == {0: 1}


def test_two_queues_steered_by_rules_share_one_striding_ring():
    memory = HostMemory()
    nic = NicModel(memory, latency=10, jitter=3)
    nic.create_cq(0, CQ_BASE, 32)
    nic.create_cq(1, CQ_BASE + 0x1000, 32)
    nic.create_rq(0, RQ_BASE, 8, cq=0, stride_bytes=128)
    nic.share_rq(1, 0)
    with pytest.raises(NicError, match="no ring of its own"):
        nic.rq_doorbell(1, 1)
    with pytest.raises(NicError, match="shares queue 0's ring"):
        nic.share_rq(2, 1)
    nic.add_rule(Rule({"dst_port": 9}, queue=1, context=3), trusted=True)
    nic.set_rss([0, 1])
    nic.add_rule(Rule({"dst_port": 7}, queue=0))
    for i in range(2):
        memory.write(RQ_BASE + i * RX_DESC_BYTES, RxDesc(BUFS + 0x1000 * i, 2048).pack())
    nic.rq_doorbell(0, 2)                                  # 2 buffers of 16 strides
    nic.advance(100)
    sent = [sized(100 + 50 * k, sport=k, dport=9 if k % 2 else 7) for k in range(8)]
    for f in sent:
        nic.receive(f)
        nic.advance(nic.now + 15)
    nic.advance(nic.now + 2000)
    cqes = completions(memory, CQ_BASE, 32, 0, 10)
    recv = [c for c in cqes if c.opcode == CQE_RECV]
    assert [c.queue for c in recv] == [0, 1] * 4           # each names its own queue
    assert [c.context for c in recv] == [0, 3] * 4
    assert [(c.opcode, c.counter, c.stride) for c in cqes if c.opcode != CQE_RECV] == [
        (CQE_FILLER, 0, 13), (0, 0, 0)]                   # 13 strides taken, then buffer 1
    for c, f in zip(recv, sent):
        assert memory.read(BUFS + 0x1000 * c.counter + 128 * c.stride, c.length) == f
    assert nic.counters.rx_packets == {0: 4, 1: 4}
    for k in range(4):                  # the first fills buffer 1; then the ring has none
        nic.receive(sized(900, sport=k, dport=9))
    nic.advance(nic.now + 2000)
    assert nic.counters.out_of_buffer == {1: 3} and nic.counters.rx_packets == {0: 4, 1: 5}


def test_a_completion_queue_not_read_overruns_and_counts():
    memory = HostMemory()
    nic = NicModel(memory, latency=5)
    nic.create_cq(0, CQ_BASE, 2)
    nic.create_sq(0, SQ_BASE, 8, cq=0)
    for i in range(4):
        memory.write(SQ_BASE + i * WQE_BYTES, TxWqe(i, 0, inline=bytes(frame())[:18]).pack())
    nic.sq_doorbell(0, 4)
    nic.advance(5000)
    assert len(nic.wire) == 4 and nic.counters.cq_overrun == {0: 2}
    assert [c.counter for c in completions(memory, CQ_BASE, 2, 0, 2)] == [0, 1]


def test_a_shaped_queue_keeps_its_rate_and_an_unshaped_one_is_not_held():
    memory = HostMemory()
    nic = NicModel(memory, latency=1)
    nic.create_cq(0, CQ_BASE, 64)
    nic.create_sq(0, SQ_BASE, 16, cq=0, rate=0.5)           # half a byte per cycle
    nic.create_sq(1, SQ_BASE + 0x800, 16, cq=0)
    packet = bytes(frame(payload=bytes(86)))                  # 128 bytes
    for q, base in ((0, SQ_BASE), (1, SQ_BASE + 0x800)):
        for i in range(8):
            memory.write(base + i * WQE_BYTES, TxWqe(i, q, DATA, len(packet) - 18,
                                                     packet[:18]).pack())
        nic.sq_doorbell(q, 8)
    memory.write(DATA, packet[18:])
    nic.advance(10_000)
    shaped = [t for t, _ in nic.wire]
    times = {q: [t for (t, _), c in zip(nic.wire, completions(memory, CQ_BASE, 64, 0, 16))
                 if c.queue == q] for q in (0, 1)}
    gaps = [b - a for a, b in zip(times[0], times[0][1:])]
    assert len(shaped) == 16 and min(gaps) >= 256             # 128 bytes at 0.5 byte/cycle
    assert times[1][-1] < times[0][2]                        # the other queue went ahead


def test_bad_requests_are_refused_by_name():
    nic = NicModel(HostMemory())
    with pytest.raises(NicError, match="no completion queue 3"):
        nic.create_sq(0, 0, 8, cq=3)
    with pytest.raises(NicError, match="power of two"):
        nic.create_cq(0, 0, 6)
    nic.create_cq(0, 0, 8)
    with pytest.raises(NicError, match="no receive queue 2"):
        nic.set_rss([2])
