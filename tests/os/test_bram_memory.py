"""MemoryTile(bram=True): the memory inside the tile (an on-chip Amaranth Memory behind the same
port logic, read latency 1), no memory port: stores and loads at 64 and 512 bits against a
bytearray, the same cycles as the tile with an external MemoryModel(latency=1), and a design
with one that has no top-level memory port, elaborates to Verilog and runs under open_sim."""

import pathlib
import random
import sys

import pytest

from apiary.design import Design
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.memory import MemoryPortSignature
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK, MemoryTile,
                                   decode_mem_message)
from apiary.sim import open_sim
from apiary.stream.testbench import simulate, transfers
from apiary.tile import TileEnv
from apiary.top import DesignTop, design_verilog

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_memory import (HOST_XY, TILE_XY, FlitPortTile, Reference,  # noqa: E402
                         check_replies, flits_of, frame_of, request, run_tile)


def run_bram_tile(width, requests, *, size_bytes=4096, stall=0.0, gaps=0.0, seed=0,
                  duplex=False):
    """``requests`` (lists of flits) to a BRAM tile alone; the decoded replies and the cycles
    of every flit in and out."""
    tile = MemoryTile(TileEnv(name="mem", x=TILE_XY[0], y=TILE_XY[1], width=width),
                      size_bytes=size_bytes, bram=True, duplex=duplex)
    rng = random.Random(seed)
    in_stall = dict(rng=random.Random(rng.random()), stall=gaps) if gaps else {}
    out_stall = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
    got, log_in, log_out = [], [], []

    async def source(ctx):
        for flits in requests:
            await send_flits(ctx, tile.noc_in, flits, **in_stall)

    async def sink(ctx):
        for _ in requests:
            got.append(decode_mem_message(await recv_flits(ctx, tile.noc_out, **out_stall),
                                          width))

    simulate(tile, sink, background=[source, transfers(tile.noc_in, log_in),
                                     transfers(tile.noc_out, log_out)], timeout=100_000)
    return got, log_in, log_out


def jobs_for(width, size_bytes, count, seed):
    rng = random.Random(seed)
    jobs = []
    for _ in range(count):
        addr, size = rng.randrange(size_bytes - 300), rng.randrange(300)
        jobs.append((STORE_MEM, addr, size, rng.randbytes(size)))
        jobs.append((LOAD_MEM, rng.randrange(size_bytes - 300), rng.randrange(300)))
    jobs.append((LOAD_MEM, size_bytes - 3, 4))              # out of range: error, no access
    return jobs


@pytest.mark.parametrize("width", [64, 512])
def test_bram_tile_stores_and_loads(width):
    """Random stores and loads at unaligned addresses, with back-pressure and gaps: the replies
    of a bytearray; the tile has no memory port."""
    size_bytes = 4096
    jobs = jobs_for(width, size_bytes, 12, width)
    tile = MemoryTile(TileEnv(width=width), size_bytes=size_bytes, bram=True)
    assert "mem" not in tile.signature.members and tile.bram
    assert not any(isinstance(d.signature, MemoryPortSignature)
                   for d in tile.signature.members.values() if d.is_signature)
    got, _, _ = run_bram_tile(width, [request(width, *j) for j in jobs],
                              size_bytes=size_bytes, stall=0.3, gaps=0.2, seed=width)
    check_replies(width, jobs, got, Reference(size_bytes, word=width // 8))


@pytest.mark.parametrize("width", [64, 512])
def test_bram_tile_has_the_cycles_of_a_latency_1_memory(width):
    """Flit for flit on the same cycles as the tile with an external MemoryModel(latency=1)."""
    jobs = jobs_for(width, 4096, 4, 1 + width)
    flits = [request(width, *j) for j in jobs]
    got, log_in, log_out = run_bram_tile(width, flits)
    want, _, want_in, want_out = run_tile(width, flits, latency=1)
    assert got == want
    assert (log_in, log_out) == (want_in, want_out)


def test_bram_tile_checks_its_argument():
    with pytest.raises(ValueError, match="bram"):
        MemoryTile(TileEnv(), size_bytes=4096, bram=1)


def bram_design(width, size_bytes=2048):
    d = Design(f"bram_{width}", cols=2, rows=1, width=width)
    d.add("host", FlitPortTile, at=HOST_XY)
    d.add("mem", MemoryTile, at=TILE_XY, size_bytes=size_bytes, bram=True)
    d.route("host", "mem")
    d.route("mem", "host")
    return d


def test_design_with_a_bram_tile_has_no_memory_port_and_converts_to_verilog(tmp_path):
    """No top-level memory port and nothing for the simulators to attach; the Verilog has the
    memory inside and no ``mem_mem`` port."""
    from apiary.sim import memory_models
    d = bram_design(64)
    top = DesignTop(d)
    assert not any(isinstance(desc.signature, MemoryPortSignature)
                   for desc in top.signature.members.values() if desc.is_signature)
    assert not any(name.startswith("mem_mem") for name in top.signature.members)
    assert DesignTop(d, attach=[memory_models(20)]).attached == []
    verilog = design_verilog(top, cache_dir=tmp_path)
    header = verilog[verilog.index("module bram_64"):]
    header = header[:header.index(");")]
    assert "mem_mem" not in header and "rdata" not in header
    assert "mem_loads" in header                        # the tile's counters are ports
    assert "reg [63:0] storage [255:0];" in verilog     # the memory: 2048 bytes, 256 words


def test_design_with_a_bram_tile_under_open_sim():
    """Stores and loads from outside the design through the BRAM tile on Amaranth's
    simulator; ``memory_latency=`` changes nothing (no model is attached)."""
    width, size_bytes = 64, 2048
    jobs = jobs_for(width, size_bytes, 3, 5)
    runs = []
    for latency in (5, (10, 20)):
        with open_sim(bram_design(width, size_bytes), "pysim", seed=2, stall=0.1,
                      idle_cycles=100, memory_latency=latency) as sim:
            sim.send_many([frame_of(request(width, *j), width) for j in jobs])
            sim.run(max_cycles=50_000)
            received = sim.received()
            replies = [decode_mem_message(flits_of(f.data, width), width) for f in received]
            check_replies(width, jobs, replies, Reference(size_bytes))
            assert sim.counters()["mem_loads"] == 4 and sim.counters()["mem_stores"] == 3
            runs.append([(f.data, f.cycle_first, f.cycle_last) for f in received])
    assert runs[0] == runs[1]


# -- duplex: a load and a store at once ------------------------------------------------------

def run_duplex_tile(width, requests, *, size_bytes=8192, **kw):
    """``requests`` to a duplex BRAM tile alone (:func:`run_bram_tile`); the replies in the
    order they left."""
    return run_bram_tile(width, requests, size_bytes=size_bytes, duplex=True, **kw)


def by_kind(replies):
    """The load acks and the store acks, each in the order they left."""
    loads = [r for r in replies if r[0].msg_type == LOAD_MEM_ACK]
    stores = [r for r in replies if r[0].msg_type == STORE_MEM_ACK]
    return loads, stores


@pytest.mark.parametrize("width", [64, 512])
def test_duplex_tile_reads_what_was_stored_before(width):
    """Stores and loads at random unaligned places, each load right after the store of its
    bytes (so it must wait for the store), no store over bytes a load before it reads: every
    load returns the stored bytes, each kind's acks in order, with back-pressure and gaps."""
    rng = random.Random(width)
    region, jobs, want = 400, [], []
    for k in range(10):
        base = k * region
        addr, size = base + rng.randrange(60), rng.randrange(1, 300)
        payload = rng.randbytes(size)
        jobs += [request(width, STORE_MEM, addr, size, payload),
                 request(width, LOAD_MEM, addr + size // 3, size - size // 3)]
        want.append(payload[size // 3:])
    jobs.append(request(width, LOAD_MEM, 8192 - 3, 4))       # out of range: an error ack
    got, _, _ = run_duplex_tile(width, jobs, stall=0.3, gaps=0.2, seed=width)
    loads, stores = by_kind(got)
    assert [payload for _, _, payload in loads[:-1]] == want
    assert loads[-1][1]["error"] == 1 and loads[-1][2] == b""
    assert len(stores) == 10 and not any(meta["error"] for _, meta, _ in stores)


def test_duplex_tile_stores_while_a_load_leaves():
    """At 512 bits a 4 KiB load (64 words out), a second load waiting behind it, then three
    1 KiB stores: the stores' 51 flits all come in while the first load's answer goes out (a
    tile serving one request at a time takes them only after the answers' last words), and
    the loaded bytes are those stored before."""
    width = 512
    rng = random.Random(7)
    first = rng.randbytes(4096)
    jobs = [request(width, STORE_MEM, 0, 4096, first), request(width, LOAD_MEM, 0, 4096),
            request(width, LOAD_MEM, 100, 200)]
    jobs += [request(width, STORE_MEM, 4096 + 1024 * k, 1024, rng.randbytes(1024))
             for k in range(3)]
    got, log_in, log_out = run_duplex_tile(width, jobs)
    loads, stores = by_kind(got)
    assert [payload for _, _, payload in loads] == [first, first[100:300]]
    assert len(stores) == 4
    # The cycle the load's answer's last flit left: its flits end where its place says.
    flits = [1 + -(-len(payload) // 64) for _, _, payload in got]
    at = next(k for k, (hdr, _, _) in enumerate(got) if hdr.msg_type == LOAD_MEM_ACK)
    load_last = log_out[sum(flits[:at + 1]) - 1]
    assert len(log_in) == (1 + 64) + 2 + 3 * (1 + 16)
    assert log_in[-1] < load_last, (log_in[-1], load_last)


def test_duplex_needs_the_on_chip_memory():
    with pytest.raises(ValueError, match="duplex=True needs the on-chip memory"):
        MemoryTile(TileEnv(), size_bytes=4096, duplex=True)
    with pytest.raises(ValueError, match="duplex"):
        MemoryTile(TileEnv(), size_bytes=4096, bram=True, duplex="yes")


@pytest.mark.parametrize("width", [64, 512])
def test_duplex_tile_takes_stores_back_to_back(width):
    """Six 1,460-byte stores at unaligned addresses (each one's last word a partial one) are
    taken with no idle cycle between them (the next one comes in while the last one's final
    words are written), acked in order, and each is read back whole."""
    rng = random.Random(width + 3)
    payloads = [rng.randbytes(1460) for _ in range(6)]
    jobs = [request(width, STORE_MEM, 5 + 1500 * k, 1460, p) for k, p in enumerate(payloads)]
    jobs += [request(width, LOAD_MEM, 5 + 1500 * k, 1460) for k in range(6)]
    got, log_in, _ = run_duplex_tile(width, jobs, size_bytes=16384)
    loads, stores = by_kind(got)
    assert [payload for _, _, payload in loads] == payloads
    assert [meta["addr"] for _, meta, _ in stores] == [5 + 1500 * k for k in range(6)]
    store_flits = len(jobs[0]) * 6
    assert log_in[:store_flits] == list(range(store_flits))
