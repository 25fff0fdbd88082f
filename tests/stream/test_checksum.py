"""The Internet checksum: the Python function against scapy, and InternetChecksum against the
Python function (random lengths, offsets, initial values, gaps) and scapy's IPv4 and UDP
checksums; its latency and throughput."""

import random
import struct

import pytest
from scapy.layers.inet import IP, UDP, IPOption_NOP
from scapy.utils import checksum as scapy_checksum

from apiary.stream.checksum import InternetChecksum, internet_checksum, ones_complement_sum
from apiary.stream.testbench import WithCycleCounter, simulate


# -- Python model ----------------------------------------------------------------------------------

def test_python_checksum_matches_scapy():
    rng = random.Random(1)
    for length in list(range(8)) + [rng.randrange(1500) for _ in range(50)]:
        data = rng.randbytes(length)
        assert internet_checksum(data) == scapy_checksum(data)
    assert ones_complement_sum(b"") == 0 and internet_checksum(b"") == 0xFFFF
    assert ones_complement_sum(b"\xff\xff\x00\x01") == 1           # end-around carry
    assert ones_complement_sum(b"\x12", initial=0x34) == 0x1234     # odd byte padded with zero
    header = bytes(IP(src="10.0.0.1", dst="10.0.0.2", id=7) / UDP())[:20]
    assert ones_complement_sum(header) == 0xFFFF


# -- hardware --------------------------------------------------------------------------------------

def to_words(packet, width, rng, clean=False):
    """``packet``'s words, random past its end unless ``clean`` (zero there)."""
    nb = width // 8
    junk = (lambda: 0) if clean else (lambda: rng.getrandbits(width))
    if not packet:
        return [(junk(), 0, 1)]
    return [(int.from_bytes(packet[k:k + nb], "little")
             | junk() << (8 * len(packet[k:k + nb])) & ((1 << width) - 1),
             len(packet[k:k + nb]), int(k + nb >= len(packet)))
            for k in range(0, len(packet), nb)]


def run_checksum(width, jobs, *, gap=0.3, seed=0, max_offset=64, clean_tail=False,
                 clean=None):
    """Feed ``jobs`` (packet, offset, initial) through the tap with random idle cycles; return
    the results as (sum, ok), the cycle the source started and those its packets' last words
    were on ``i``, and the cycles the results were valid. ``clean``: the words are zero past
    each packet (by default with ``clean_tail``, the tap's own promise)."""
    dut = InternetChecksum(width, max_offset=max_offset, clean_tail=clean_tail)
    clean = clean_tail if clean is None else clean
    top = WithCycleCounter(dut)
    rng = random.Random(seed)
    results, first_cycles, last_cycles, result_cycles = [], [], [], []

    async def source(ctx):
        first_cycles.append(ctx.get(top.cycle))
        for packet, offset, initial in jobs:
            words = to_words(packet, width, rng, clean)
            for k, (value, nbytes, last) in enumerate(words):
                while gap and rng.random() < gap:
                    ctx.set(dut.i.valid, 0)
                    # Offsets and initial values matter only with a first word.
                    ctx.set(dut.offset, rng.randrange(max_offset + 1))
                    ctx.set(dut.initial, rng.getrandbits(16))
                    await ctx.tick()
                ctx.set(dut.i.payload, {"data": value, "nbytes": nbytes, "last": last})
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.offset, offset if k == 0 else rng.randrange(max_offset + 1))
                ctx.set(dut.initial, initial if k == 0 else rng.getrandbits(16))
                if last:
                    last_cycles.append(ctx.get(top.cycle))
                await ctx.tick()
        ctx.set(dut.i.valid, 0)

    async def sink(ctx):
        while len(results) < len(jobs):
            await ctx.tick()
            if ctx.get(dut.o.valid):
                result = ctx.get(dut.o.payload)
                results.append((int(result.sum), int(result.ok)))
                result_cycles.append(ctx.get(top.cycle))
        await ctx.tick().repeat(5)
        assert ctx.get(dut.o.valid) == 0

    simulate(top, sink, background=[source], timeout=60_000)
    return results, first_cycles + last_cycles, result_cycles


def test_bad_parameters():
    with pytest.raises(ValueError, match="flit width must be one of"):
        InternetChecksum(48)
    with pytest.raises(ValueError, match="max_offset to be a non-negative number of bytes"):
        InternetChecksum(64, max_offset=-1)


@pytest.mark.parametrize("width", [64, 512])
def test_random_packets_offsets_and_initial_values(width):
    """Lengths 0..1500, offsets 0..64 (odd ones, ones past the end), random initial values,
    idle cycles between words: every result equals the Python sum of ``packet[offset:]``."""
    rng = random.Random(width)
    jobs = []
    for k in range(40):
        length = rng.randrange(1501) if k % 4 == 0 else rng.randrange(130)
        offset = rng.randrange(65) if k % 3 else rng.randrange(0, 65, 2) + 1
        jobs.append((rng.randbytes(length), offset, rng.getrandbits(16) if k % 2 else 0))
    jobs.append((b"\xff" * 10, 1, 0xFFFF))
    jobs.append((b"\xff\xff" * 3 + b"\x00\x02", 0, 0))          # 0x2FFFF needs a second fold
    jobs.append((b"\xff" * 1500, 3, 0xFFFF))
    jobs.append((b"", 0, 0))
    results, _, _ = run_checksum(width, jobs, seed=width)
    expected = [ones_complement_sum(p[o:], i) for p, o, i in jobs]
    assert [s for s, _ in results] == expected
    assert [ok for _, ok in results] == [int(s == 0xFFFF) for s in expected]


@pytest.mark.parametrize("width", [64, 512])
def test_clean_tail_sums_words_zero_past_their_bytes_unmasked(width):
    """With ``clean_tail`` (a receiver's words, zero past ``nbytes``) every sum is still exact;
    the lanes past ``nbytes`` are then summed as they come, so the same tap fed words with junk
    there gets wrong sums (the mask it no longer has)."""
    rng = random.Random(width + 1)
    jobs = [(rng.randbytes(rng.randrange(1, 200)), rng.choice([0, 8]), rng.getrandbits(16))
            for _ in range(20)]
    expected = [ones_complement_sum(p[o:], i) for p, o, i in jobs]
    results, _, _ = run_checksum(width, jobs, seed=width, max_offset=8, clean_tail=True)
    assert [s for s, _ in results] == expected
    results, _, _ = run_checksum(width, jobs, seed=width, max_offset=8, clean_tail=True,
                                 clean=False)
    assert sum(s != e for (s, _), e in zip(results, expected)) >= 10


def ipv4_frame(rng, payload_length, options=False):
    """An Ethernet-less IPv4/UDP datagram built and checksummed by scapy."""
    ip = IP(src=f"10.0.{rng.randrange(256)}.{rng.randrange(256)}", dst="10.0.0.2",
            id=rng.randrange(65536), ttl=rng.randrange(1, 256),
            options=[IPOption_NOP()] * (4 * rng.randrange(1, 4)) if options else [])
    return bytes(ip / UDP(sport=rng.randrange(65536), dport=7) / rng.randbytes(payload_length))


def pseudo_header_sum(datagram):
    ihl = (datagram[0] & 15) * 4
    udp_length = len(datagram) - ihl
    return ones_complement_sum(datagram[12:20] + struct.pack("!HH", 17, udp_length))


def zero_field(raw, at):
    return raw[:at] + b"\0\0" + raw[at + 2:]


@pytest.mark.parametrize("width", [64, 512])
def test_scapy_ipv4_and_udp_checksums(width):
    """Behind a 14-byte Ethernet header (offset 14): the IPv4 header including scapy's checksum
    sums to 0xFFFF, and with the field zeroed ``~sum`` is scapy's value. Over the IP datagram
    with offset = IHL*4 and the pseudo-header sum as ``initial``: the same for UDP."""
    rng = random.Random(width + 3)
    jobs, expect = [], []
    eth = rng.randbytes(14)
    for k in range(12):
        datagram = ipv4_frame(rng, rng.randrange(1473) if k % 3 == 0 else rng.randrange(60),
                              options=k % 2 == 1)
        ihl = (datagram[0] & 15) * 4
        ip_sum = int.from_bytes(datagram[10:12], "big")
        udp_sum = int.from_bytes(datagram[ihl + 6:ihl + 8], "big")
        frame_header = eth + datagram[:ihl]
        pseudo = pseudo_header_sum(datagram)
        jobs += [
            (frame_header, 14, 0),
            (zero_field(frame_header, 24), 14, 0),
            (datagram, ihl, pseudo),
            (zero_field(datagram, ihl + 6), ihl, pseudo),
        ]
        expect += [("ok", None), ("field", ip_sum), ("ok", None),
                   ("field", udp_sum if udp_sum != 0xFFFF else 0)]   # UDP sends 0 as 0xFFFF
    results, _, _ = run_checksum(width, jobs, seed=width)
    for (total, ok), (kind, value) in zip(results, expect):
        if kind == "ok":
            assert ok == 1 and total == 0xFFFF
        else:
            assert ~total & 0xFFFF == value


@pytest.mark.parametrize("width", [64, 512])
def test_latency_and_back_to_back_throughput(width):
    """Without idle cycles, packets (one-word ones included) follow each other word after word,
    and each result is valid exactly LATENCY cycles after its last word, for one cycle."""
    rng = random.Random(width + 5)
    jobs = [(rng.randbytes(rng.choice([0, 1, 5, 64, 65, 300])), rng.randrange(20),
             rng.getrandbits(16)) for _ in range(30)]
    results, (start, *last_cycles), result_cycles = run_checksum(width, jobs, gap=0, seed=1)
    assert [s for s, _ in results] == [ones_complement_sum(p[o:], i) for p, o, i in jobs]
    assert result_cycles == [c + InternetChecksum.LATENCY for c in last_cycles]
    words = sum(max(1, -(-len(p) // (width // 8))) for p, _, _ in jobs)
    assert last_cycles[-1] - start == words - 1
