"""Random memory latency (the Apiary thesis's portability experiment: a random 10-20 cycle delay
per memory operation, services unchanged): MemoryModel(latency=(lo, hi), seed=) draws every
read's latency from [lo, hi] with a seeded xorshift generator, answers in order on
max(command + draw, previous answer + 1), loses nothing under back-pressure; open_sim's
memory_latency=(lo, hi) attaches it, seeded by seed=, and both back ends answer on the same
cycles (a memory design and examples/udp_dram.py)."""

import collections
import pathlib
import random
import sys

import pytest

from apiary.os.memory import (MemoryModel, check_latency, random_latencies,
                              read_answer_cycles)
from apiary.os.memory_tile import LOAD_MEM, STORE_MEM, decode_mem_message
from apiary.sim import SimError, memory_latency_of, memory_models, open_sim
from apiary.stream.testbench import simulate, stream_get, stream_put

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_memory import (Reference, check_replies, flits_of, frame_of,  # noqa: E402
                         memory_design, request, timed_reads)

ROOT = pathlib.Path(__file__).resolve().parents[2]


# -- the draws -------------------------------------------------------------------------------------

def test_draws_are_uniform_on_the_range_and_follow_the_seed():
    """Every draw is in [lo, hi], each value about equally often; the same seed gives the same
    draws, another seed others."""
    draws = random_latencies(10, 20, 1, 22_000)
    assert min(draws) == 10 and max(draws) == 20
    counts = collections.Counter(draws)
    assert all(abs(counts[v] - 2000) < 200 for v in range(10, 21)), counts
    assert random_latencies(10, 20, 1, 500) == draws[:500]
    assert random_latencies(10, 20, 2, 500) != draws[:500]
    assert random_latencies(10, 20, 0, 500) != draws[:500]
    assert set(random_latencies(1, 2, 3, 100)) == {1, 2}
    # A few consecutive draws are not all the same (the generator moves every read).
    assert len(set(draws[:8])) > 2


def test_answer_cycles_keep_order_and_stay_in_the_range():
    assert read_answer_cycles([0, 1, 2, 10], [20, 10, 12, 10]) == [20, 21, 22, 23]
    rng = random.Random(4)
    taken = sorted(rng.sample(range(3000), 1000))
    lat = random_latencies(10, 20, 4, len(taken))
    answers = read_answer_cycles(taken, lat)
    assert all(b > a for a, b in zip(answers, answers[1:]))
    assert all(10 <= a - t <= 20 for t, a in zip(taken, answers))


def test_latency_arguments_are_checked():
    assert check_latency(7) == 7
    assert check_latency((10, 20)) == (10, 20) and check_latency([10, 20]) == (10, 20)
    assert check_latency((5, 5)) == 5
    for bad in (0, -1, True, 2.5, (0, 3), (4, 3), (1, 2, 3), (1, True), "10"):
        with pytest.raises(ValueError):
            check_latency(bad)
    assert MemoryModel(64, 4, depth_words=16, latency=(5, 5)).latency == 5
    assert MemoryModel(64, 4, depth_words=16, latency=(2, 9)).latency_range == (2, 9)
    with pytest.raises(ValueError):
        MemoryModel(64, 4, depth_words=16, latency=(2, 9), seed=-1)
    with pytest.raises(ValueError):
        MemoryModel(64, 4, depth_words=16, latency=(2, 9), seed=1 << 32)


def test_simulators_take_a_range_from_the_argument_or_the_design():
    d = memory_design(64)
    assert memory_latency_of(d) == 20
    assert memory_latency_of(d, (10, 20)) == (10, 20)
    assert memory_latency_of(d, [3, 3]) == 3
    d.settings["memory_latency"] = (10, 20)
    assert memory_latency_of(d) == (10, 20)
    assert memory_latency_of(d, 4) == 4
    for bad in ((20, 10), (0, 5), "x", 0):
        with pytest.raises(SimError):
            memory_latency_of(d, bad)
    # The Verilog cache key: unchanged for a fixed latency, the seed in it for a range.
    assert memory_models(20).key == "MemoryModel(latency=20)"
    assert memory_models(20, seed=5).key == "MemoryModel(latency=20)"
    assert memory_models((10, 20)).key == memory_models((10, 20), seed=1).key
    assert memory_models((10, 20), seed=2).key != memory_models((10, 20), seed=1).key
    with pytest.raises(SimError):
        memory_models((10, 20), seed=-1)
    with pytest.raises(SimError):
        memory_models(0)


# -- the model ---------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, seed", [(10, 20, 1), (10, 20, 77), (1, 4, 9)])
def test_model_answers_each_read_on_its_draw_in_order(lo, hi, seed):
    """Reads back to back, then with random gaps: each answered on exactly
    max(taken + draw, previous answer + 1), its draw the seed's (random_latencies), the data
    the word at its address, one command per cycle, at most ``hi`` in flight."""
    rng = random.Random(seed)
    init = [rng.getrandbits(64) for _ in range(50)]
    dut = MemoryModel(64, 6, depth_words=50, latency=(lo, hi), seed=seed, init=init)
    addrs = [rng.randrange(50) for _ in range(120)]
    took, answered, data = timed_reads(dut, addrs, rng, burst=60, stall=0.6, timeout=5000)
    assert data == [init[a] for a in addrs]
    assert took[:60] == list(range(60))                 # one command per cycle
    assert answered == read_answer_cycles(took, random_latencies(lo, hi, seed, len(took)))
    waits = [a - t for t, a in zip(took, answered)]
    assert all(lo <= w <= hi for w in waits)
    assert len(set(waits)) > (hi - lo) // 2             # really random
    in_flight = max(sum(1 for t, a in zip(took, answered) if t <= c < a) for c in range(400))
    assert in_flight <= hi


def test_model_with_random_latency_keeps_writes_and_order_under_backpressure():
    """Writes with random byte enables, reads interleaved, ``rdata.ready`` stalled at random:
    every read sees every earlier write, nothing lost, in order."""
    rng = random.Random(8)
    depth = 24
    ref = [rng.getrandbits(32) for _ in range(depth)]
    dut = MemoryModel(32, 5, depth_words=depth, latency=(1, 6), seed=3, init=ref)
    port = dut.port
    ops = []
    for _ in range(300):
        a = rng.randrange(depth)
        if rng.random() < 0.5:
            ops.append(("w", a, rng.getrandbits(32), rng.getrandbits(4)))
        else:
            ops.append(("r", a))
    expected = []
    mem = list(ref)
    for op in ops:
        if op[0] == "w":
            _, a, v, we = op
            mask = sum(0xFF << 8 * k for k in range(4) if we >> k & 1)
            mem[a] = mem[a] & ~mask | v & mask
        else:
            expected.append(mem[op[1]])
    got = []

    async def commands(ctx):
        for op in ops:
            await stream_put(ctx, port.cmd, {"we": int(op[0] == "w"), "addr": op[1]},
                             rng=rng, stall=0.3)

    async def write_data(ctx):
        for op in ops:
            if op[0] == "w":
                await stream_put(ctx, port.wdata, {"data": op[2], "we": op[3]}, rng=rng,
                                 stall=0.5)

    async def reads(ctx):
        for _ in expected:
            got.append(int((await stream_get(ctx, port.rdata, rng=rng, stall=0.5)).data))

    simulate(dut, reads, background=[commands, write_data], timeout=20_000)
    assert got == expected


# -- in a design, on both back ends --------------------------------------------------------------

def design_run(backend, *, latency=(10, 20), seed=3, width=64):
    """Stores and loads through a memory design (a port tile and a memory tile): replies as
    the Python reference, and ``(sent, received)`` frames with their cycle stamps."""
    size_bytes = 2048
    rng = random.Random(11)
    jobs = []
    for _ in range(4):
        addr, size = rng.randrange(size_bytes - 100), rng.randrange(1, 100)
        jobs.append((STORE_MEM, addr, size, rng.randbytes(size)))
        jobs.append((LOAD_MEM, rng.randrange(size_bytes - 200), rng.randrange(1, 200)))
    with open_sim(memory_design(width, size_bytes), backend, seed=seed, stall=0.1,
                  idle_cycles=100, memory_latency=latency) as sim:
        sim.send_many([frame_of(request(width, *j), width) for j in jobs])
        sim.run(max_cycles=100_000)
        received = sim.received()
        replies = [decode_mem_message(flits_of(f.data, width), width) for f in received]
        check_replies(width, jobs, replies, Reference(size_bytes))
        return [(f.cycle_first, f.cycle_last) for f in sim.sent()], \
            [(f.data, f.cycle_first, f.cycle_last) for f in received]


def test_design_with_random_latency_on_amaranth_simulator():
    """A memory design under ``memory_latency=(10, 20)``: the right replies; the same seed the
    same cycles, another seed other cycles, and not those of any fixed latency's."""
    a = design_run("pysim", seed=3)
    assert design_run("pysim", seed=3) == a
    b = design_run("pysim", seed=4)
    assert [r[1:] for r in b[1]] != [r[1:] for r in a[1]]
    fixed = design_run("pysim", seed=3, latency=15)
    assert [r[1:] for r in fixed[1]] != [r[1:] for r in a[1]]


@pytest.mark.slow
def test_design_with_random_latency_same_cycles_on_both_backends():
    """The same seed: the same frames on the same cycles on Amaranth's simulator and
    Verilator (the generator is part of the model, RamMemoryModel keeps it)."""
    assert design_run("verilator", seed=3) == design_run("pysim", seed=3)


def udp_dram_run(backend, seed=5):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from apiary.load import load_design
    from beehive.apps.mem_server import OP_READ, OP_WRITE, mem_request, parse_mem_reply
    d = load_design(str(ROOT / "examples" / "udp_dram.py"), width=64, mem_bytes=4096)

    def udp(payload, sport):
        return bytes(Ether(dst="02:00:00:00:00:02", src="52:54:00:12:34:56")
                     / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=sport, dport=7777)
                     / payload)

    requests = [mem_request(OP_WRITE, 13, bytes(range(100, 164))),
                mem_request(OP_READ, 13, 64), mem_request(OP_READ, 200, 40)]
    with open_sim(d, backend, seed=seed, idle_cycles=200, memory_latency=(10, 20)) as sim:
        out = []
        for k, r in enumerate(requests):
            sim.send(udp(r, 40000 + k))
            sim.run()
            out.extend((f.data, f.cycle_first, f.cycle_last) for f in sim.received(clear=True))
    replies = [parse_mem_reply(bytes(Ether(f)[UDP].payload)) for f, _, _ in out]
    assert [r["status"] for r in replies] == [0, 0, 0]
    assert replies[1]["data"] == bytes(range(100, 164))
    return out


@pytest.mark.slow
def test_udp_dram_with_random_latency_same_cycles_on_both_backends():
    """examples/udp_dram.py at 64 bits, three requests over UDP, ``memory_latency=(10, 20)``:
    the reply frames leave on the same cycles on both back ends."""
    assert udp_dram_run("verilator") == udp_dram_run("pysim")
