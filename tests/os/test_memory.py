"""The memory port, MemoryModel and the DRAM buffer tile (MemoryTile): the model's exact read
latency and byte-masked writes; the tile against a Python bytearray at unaligned addresses and
sizes, with back-pressure, errors, dropped types, its exact latency and throughput; and a design
with a memory tile on both simulation back ends, the model attached by the simulator."""

import random

import pytest
from amaranth import Module
from amaranth.lib.wiring import In, Out, connect

from apiary.stream.mac import FrameStream
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.testbench import simulate, stream_get, stream_put, transfers
from apiary.os.memory import MemoryModel, MemoryPortSignature, memory_port_signature
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, MEM_META, STORE_MEM, STORE_MEM_ACK,
                                   MemoryTile, decode_mem_message, mem_message_flits, mem_meta,
                                   unpack_mem_meta)
from apiary.noc.framing import meta_plan
from apiary.design import Design
from apiary.tile import Tile, TileEnv
from apiary.sim import memory_models
from apiary.top import DesignTop, design_verilog


TILE_XY = (1, 0)
HOST_XY = (0, 0)
OTHER_TYPE = 12         # any message type but the memory ones


# -- the memory model ------------------------------------------------------------------------------

def timed_reads(dut, addrs, rng, *, burst, stall, timeout):
    """Read ``addrs`` from a memory model's port, the first ``burst`` commands back to back and
    the rest with random gaps (``stall``), ``rdata`` always ready: ``(took, answered, data)``,
    the cycles the commands were taken and answered and the words read."""
    port = dut.port
    took, answered, data = [], [], []

    async def master(ctx):
        for i, a in enumerate(addrs):
            await stream_put(ctx, port.cmd, {"we": 0, "addr": a},
                             **({} if i < burst else dict(rng=rng, stall=stall)))

    async def reader(ctx):
        ctx.set(port.rdata.ready, 1)
        for _ in addrs:
            data.append(int((await stream_get(ctx, port.rdata)).data))

    simulate(dut, reader, background=[master, transfers(port.cmd, took),
                                      transfers(port.rdata, answered)], timeout=timeout)
    return took, answered, data


@pytest.mark.parametrize("latency", [1, 2, 20])
def test_model_answers_every_read_exactly_latency_cycles_after_it_was_taken(latency):
    """Reads with random gaps: each answered exactly ``latency`` cycles after its command was
    taken, several in flight at once, one command per cycle, with the word at its address."""
    rng = random.Random(latency)
    init = [rng.getrandbits(64) for _ in range(50)]
    dut = MemoryModel(64, 6, depth_words=50, latency=latency, init=init)
    addrs = [rng.randrange(50) for _ in range(60)]
    # The first 30 back to back, then with random gaps.
    took, answered, data = timed_reads(dut, addrs, rng, burst=30, stall=0.4, timeout=2000)
    assert data == [init[a] for a in addrs]
    assert answered == [t + latency for t in took]
    assert took[:30] == list(range(30))                 # one command per cycle
    in_flight = max(sum(1 for t in took if c - latency < t <= c) for c in range(120))
    assert in_flight == latency


def test_model_writes_with_byte_enables_and_holds_reads_under_backpressure():
    """Writes with random byte enables and data offered late; reads interleaved, each seeing
    every earlier write; ``rdata.ready`` stalled at random: nothing lost, in order."""
    rng = random.Random(5)
    depth = 24
    ref = [rng.getrandbits(32) for _ in range(depth)]
    dut = MemoryModel(32, 5, depth_words=depth, latency=4, init=ref)
    port = dut.port
    ops = []
    for _ in range(300):
        a = rng.randrange(depth)
        if rng.random() < 0.5:
            ops.append(("w", a, rng.getrandbits(32), rng.getrandbits(4)))
        else:
            ops.append(("r", a))
    expected = []
    for op in ops:
        if op[0] == "w":
            _, a, value, we = op
            mask = sum(0xFF << 8 * k for k in range(4) if we >> k & 1)
            ref[a] = ref[a] & ~mask | value & mask
        else:
            expected.append(ref[op[1]])
    got = []

    async def commands(ctx):
        for op in ops:
            await stream_put(ctx, port.cmd, {"we": op[0] == "w", "addr": op[1]},
                             rng=rng, stall=0.2)

    async def write_data(ctx):
        for op in ops:
            if op[0] == "w":
                await stream_put(ctx, port.wdata, {"data": op[2], "we": op[3]},
                                 rng=rng, stall=0.5)

    async def reads(ctx):
        for _ in expected:
            got.append(int((await stream_get(ctx, port.rdata, rng=rng, stall=0.5)).data))

    simulate(dut, reads, background=[commands, write_data], timeout=20_000)
    assert got == expected


def test_memory_port_signature_is_recognisable_and_compares_by_shape():
    sig = memory_port_signature(64, 10, depth_words=1000)
    assert isinstance(sig, MemoryPortSignature) and isinstance(sig.flip(), MemoryPortSignature)
    assert (sig.data_width, sig.addr_width, sig.depth_words) == (64, 10, 1000)
    assert sig == memory_port_signature(64, 10, depth_words=1000)
    assert sig != memory_port_signature(64, 10)
    assert set(sig.members) == {"cmd", "wdata", "rdata"}
    assert sig.members["rdata"].flow == In and sig.members["cmd"].flow == Out
    with pytest.raises(ValueError):
        memory_port_signature(60, 10)
    with pytest.raises(ValueError):
        MemoryModel(64, 4, depth_words=16, latency=0)


# -- the tile, with a model, in Amaranth's simulator ---------------------------------------------

def tile_and_model(width, latency, size_bytes, init=b""):
    tile = MemoryTile(TileEnv(name="mem", x=TILE_XY[0], y=TILE_XY[1], width=width),
                      size_bytes=size_bytes)
    nb = width // 8
    words = [int.from_bytes(init[i:i + nb], "little") for i in range(0, len(init), nb)]
    model = MemoryModel(width, tile.addr_width, depth_words=tile.depth_words, latency=latency,
                        init=words)
    m = Module()
    m.submodules.tile = tile
    m.submodules.model = model
    connect(m, tile=tile.mem, model=model.port)
    return m, tile, model


def request_tag(addr, size):
    """The tag each test request carries (the tile must copy it into the ack)."""
    return (addr * 7 + size) & 0xFF


def request(width, msg_type, addr, size, payload=b"", wrap=0):
    return mem_message_flits(width, msg_type, addr, size, payload, dst=TILE_XY, src=HOST_XY,
                             wrap=wrap, tag=request_tag(addr, size))


def run_tile(width, requests, *, latency=20, size_bytes=4096, init=b"", stall=0.0, gaps=0.0,
             seed=0, replies=None, timeout=200_000):
    """Send ``requests`` (lists of flits) to a tile with a model; return the decoded replies
    (``replies`` of them, default one per request), the tile's counters, and the cycles of
    every flit transfer into and out of the tile."""
    m, tile, model = tile_and_model(width, latency, size_bytes, init)
    rng = random.Random(seed)
    in_stall = dict(rng=random.Random(rng.random()), stall=gaps) if gaps else {}
    out_stall = dict(rng=random.Random(rng.random()), stall=stall) if stall else {}
    got, counters, log_in, log_out = [], {}, [], []

    async def source(ctx):
        for flits in requests:
            await send_flits(ctx, tile.noc_in, flits, **in_stall)

    async def sink(ctx):
        for _ in range(len(requests) if replies is None else replies):
            got.append(decode_mem_message(await recv_flits(ctx, tile.noc_out, **out_stall),
                                          width))
        ctx.set(tile.noc_out.ready, 1)
        await ctx.tick().repeat(40)
        assert ctx.get(tile.noc_out.valid) == 0, "a reply nobody asked for"
        for name in ("loads", "stores", "out_of_range", "bad_type", "bad_length", "malformed",
                     "bad_wrap"):
            counters[name] = ctx.get(getattr(tile.counters, name))

    simulate(m, sink, background=[source, transfers(tile.noc_in, log_in),
                                  transfers(tile.noc_out, log_out)], timeout=timeout)
    return got, counters, log_in, log_out


class Reference:
    """The memory as a bytearray, the reply each request must get, and the error counters
    (``bad_wrap``, ``out_of_range``, ``bad_length``) the requests must have raised. ``word``
    (bytes) matters only to wrapped requests: a ring must hold a word."""

    def __init__(self, size_bytes, init=b"", *, word=8):
        self.mem = bytearray(size_bytes)
        self.mem[:len(init)] = init
        self.word = word
        self.errors = dict.fromkeys(("bad_wrap", "out_of_range", "bad_length"), 0)

    def error(self, msg_type, addr, size, payload, wrap):
        """The counter a request's error goes to, or None."""
        ring = 1 << wrap
        if wrap and (ring < self.word or size > ring):
            return "bad_wrap"
        end = (addr & -ring) + ring if wrap else addr + size
        if end > len(self.mem):
            return "out_of_range"
        if msg_type == STORE_MEM and len(payload) != size:
            return "bad_length"
        return None

    def reply(self, msg_type, addr, size, payload=b"", wrap=0):
        if msg_type not in (LOAD_MEM, STORE_MEM):
            return None
        error = self.error(msg_type, addr, size, payload, wrap)
        if error:
            self.errors[error] += 1
        meta = {"addr": addr, "size": size, "error": int(error is not None), "wrap": wrap,
                "tag": request_tag(addr, size)}
        ack = LOAD_MEM_ACK if msg_type == LOAD_MEM else STORE_MEM_ACK
        if error:
            return ack, meta, b""
        ring = 1 << wrap
        where = [addr & -ring | (addr + i) % ring if wrap else addr + i for i in range(size)]
        if msg_type == LOAD_MEM:
            return ack, meta, bytes(self.mem[i] for i in where)
        for i, byte in zip(where, payload):
            self.mem[i] = byte
        return ack, meta, b""


def check_replies(width, jobs, got, ref):
    expected = [r for r in (ref.reply(*job) for job in jobs) if r is not None]
    assert len(got) == len(expected)
    for (hdr, meta, payload), (msg_type, exp_meta, exp_payload) in zip(got, expected):
        assert (hdr.msg_type, meta) == (msg_type, exp_meta)
        assert payload == exp_payload
        assert (hdr.dst_x, hdr.dst_y, hdr.src_x, hdr.src_y) == (*HOST_XY, *TILE_XY)


def sizes_and_offsets(width):
    nb = width // 8
    return [0, 1, nb - 1, nb, nb + 1, 300], [0, 1, nb - 1, nb + 3]


@pytest.mark.parametrize("width, latency", [(64, 1), (64, 20), (512, 1), (512, 20)])
def test_stores_then_loads_at_unaligned_addresses_and_sizes(width, latency):
    """Stores of 0, 1, W/8-1, W/8, W/8+1 and 300 bytes at offsets 0, 1, W/8-1 and W/8+3 into
    memory filled with random bytes, each loaded back, and then the whole region loaded: the
    bytes around each store are untouched (byte enables) and the loads return exactly the
    range asked for."""
    rng = random.Random(width + latency)
    nb = width // 8
    size_bytes = 8192
    init = rng.randbytes(size_bytes)
    ref = Reference(size_bytes, init)
    sizes, offsets = sizes_and_offsets(width)
    jobs, base = [], nb
    for size in sizes:
        for off in offsets:
            addr = base + off
            data = rng.randbytes(size)
            jobs += [(STORE_MEM, addr, size, data), (LOAD_MEM, addr, size)]
            base += -(-(off + size) // nb) * nb + 2 * nb        # a word untouched between
    assert base < size_bytes
    jobs.append((LOAD_MEM, 0, size_bytes))
    got, counters, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=latency,
                                   size_bytes=size_bytes, init=init)
    check_replies(width, jobs, got, ref)
    assert not any(meta["error"] for _, meta, _ in got)
    assert counters["stores"] == len(sizes) * len(offsets) == counters["loads"] - 1
    assert counters["out_of_range"] == counters["bad_type"] == counters["malformed"] == 0


@pytest.mark.parametrize("width, latency", [(64, 20), (512, 1), (512, 20)])
def test_random_requests_with_backpressure_match_a_bytearray(width, latency):
    """A seeded random mix of loads and stores (any address and size, a few out of range, a
    few of another type) with idle cycles on the input and back-pressure on the reply stream:
    every reply equals the Python model's."""
    rng = random.Random(100 + width + latency)
    size_bytes = 2048
    ref = Reference(size_bytes)
    jobs = []
    for _ in range(50):
        kind = rng.random()
        addr = rng.randrange(size_bytes)
        size = rng.choice([0, 1, 7, 63, 64, 65, rng.randrange(size_bytes - addr + 1)])
        size = min(size, size_bytes - addr)
        if kind < 0.05:
            size = size_bytes - addr + rng.randrange(1, 100)           # out of range
        if kind < 0.5:
            payload = rng.randbytes(min(size, size_bytes))
            jobs.append((STORE_MEM, addr, size, payload))
        elif kind < 0.95:
            jobs.append((LOAD_MEM, addr, size))
        else:
            jobs.append((OTHER_TYPE, addr, size, rng.randbytes(rng.randrange(80))))
    got, counters, _, _ = run_tile(
        width, [request(width, *j) for j in jobs], latency=latency, size_bytes=size_bytes,
        stall=0.3, gaps=0.2, seed=width, replies=sum(j[0] in (LOAD_MEM, STORE_MEM) for j in jobs))
    check_replies(width, jobs, got, ref)
    assert counters["loads"] == sum(j[0] == LOAD_MEM for j in jobs)
    assert counters["stores"] == sum(j[0] == STORE_MEM for j in jobs)
    assert counters["bad_type"] == sum(j[0] not in (LOAD_MEM, STORE_MEM) for j in jobs)
    assert counters["out_of_range"] == sum(m["error"] for _, m, _ in got)


@pytest.mark.parametrize("width", [64, 512])
def test_out_of_range_requests_get_an_error_ack_and_touch_nothing(width):
    """``addr + size`` past the end (by one byte, or far), for loads and stores: the ack has
    ``error`` set and, for a load, no payload; ``out_of_range`` counts them; the memory is
    unchanged (a load of the whole memory afterwards)."""
    size_bytes = 1024
    init = random.Random(1).randbytes(size_bytes)
    ref = Reference(size_bytes, init)
    jobs = [
        (STORE_MEM, size_bytes - 10, 11, bytes(11)),
        (LOAD_MEM, size_bytes - 10, 11),
        (LOAD_MEM, size_bytes, 0),                  # empty, at the end: in range
        (LOAD_MEM, size_bytes + 1, 0),
        (STORE_MEM, (1 << 48) - 1, 2, b"xy"),
        (LOAD_MEM, 0, (1 << 30) - 1),
        (LOAD_MEM, 0, size_bytes),
    ]
    got, counters, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=3,
                                   size_bytes=size_bytes, init=init)
    check_replies(width, jobs, got, ref)
    assert [m["error"] for _, m, _ in got] == [1, 1, 0, 1, 1, 1, 0]
    assert counters["out_of_range"] == 5
    assert got[-1][2] == init


@pytest.mark.parametrize("width", [64, 512])
def test_other_message_types_are_dropped_and_the_next_request_is_served(width):
    """Messages of other types, with and without payload (an ack type among them), are taken
    whole and dropped, counted in ``bad_type``; the requests around them are served."""
    jobs = [
        (STORE_MEM, 3, 5, b"hello"),
        (OTHER_TYPE, 0, 0, bytes(range(150))),
        (LOAD_MEM_ACK, 3, 5),
        (LOAD_MEM, 3, 5),
    ]
    got, counters, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=2,
                                   replies=2)
    check_replies(width, jobs, got, Reference(4096))
    assert got[1][2] == b"hello"
    assert counters["bad_type"] == 2 and counters["loads"] == counters["stores"] == 1


@pytest.mark.parametrize("width", [64, 512])
def test_store_whose_payload_is_not_its_size_gets_an_error_ack(width):
    """A store whose payload is shorter or longer than ``size`` writes nothing and gets an ack
    with ``error``, counted in ``bad_length``; a load of the region shows it untouched."""
    jobs = [(STORE_MEM, 8, 20, b"short"), (STORE_MEM, 8, 2, b"longer"), (LOAD_MEM, 0, 40)]
    got, counters, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=2)
    check_replies(width, jobs, got, Reference(4096))
    assert [m["error"] for _, m, _ in got] == [1, 1, 0]
    assert counters["bad_length"] == 2 and counters["out_of_range"] == 0


@pytest.mark.parametrize("width", [128, 256])
def test_other_widths(width):
    """128 and 256 bits (metadata in one flit after the header): a store and loads around it."""
    jobs = [(STORE_MEM, 5, 100, bytes(range(100))), (LOAD_MEM, 0, 120), (LOAD_MEM, 104, 1)]
    got, _, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=4)
    check_replies(width, jobs, got, Reference(4096))


# -- circular buffers (wrap) ----------------------------------------------------------------------

def test_mem_meta_appends_wrap_after_error_then_tag():
    """``MEM_META`` is addr (bits 0-47), size (48-77), error (78), wrap (79-84), tag (85-92):
    93 bits, inline in the header flit at 512 bits, two metadata flits at 64; the Python packing
    agrees with the layout, rejects a wrap beyond 6 bits and round-trips through a message's
    flits."""
    assert [(name, f.offset, f.width) for name, f in MEM_META] == [
        ("addr", 0, 48), ("size", 48, 30), ("error", 78, 1), ("wrap", 79, 6), ("tag", 85, 8)]
    assert meta_plan(512, meta_bits=MEM_META.size) == (0, 93, 93)
    assert meta_plan(64, meta_bits=MEM_META.size)[0] == 2
    assert mem_meta(3, 5, 1, 63) == 3 | 5 << 48 | 1 << 78 | 63 << 79
    assert mem_meta(3, 5) == 3 | 5 << 48                   # Beehive's messages: wrap 0
    fields = {"addr": (1 << 48) - 1, "size": 7, "error": 0, "wrap": 42, "tag": 0xA5}
    assert unpack_mem_meta(mem_meta(**fields)) == fields
    with pytest.raises(ValueError, match="wrap"):
        mem_meta(0, 0, wrap=64)
    for width in (64, 128, 512):
        flits = mem_message_flits(width, STORE_MEM, 9, 3, b"abc", wrap=12, tag=200)
        assert decode_mem_message(flits, width)[1:] == (
            {"addr": 9, "size": 3, "error": 0, "wrap": 12, "tag": 200}, b"abc")


def wrap_cases(ring, nb, rng):
    """(offset in the ring, size) of accesses to a ``ring``-byte ring of ``nb``-byte words: one
    byte at either end, the whole ring from aligned and unaligned starts (first and last word
    the same memory word), ending exactly at the ring's end, starting exactly at its start,
    crossing it by a byte or a word, size 0, and a few at random."""
    w = min(ring, nb + 3)
    cases = [(0, 1), (ring - 1, 1), (0, ring), (1, ring), (nb - 1, ring), (ring - 1, ring),
             (2, ring - 1), (ring // 2 + 3, ring - 2), (ring - 3, 3), (ring - w, w), (0, 3),
             (0, w), (ring - 1, 2), (ring - 3, 7), (ring - nb + 1, nb + 2), (5, 0), (1, 3)]
    cases += [(rng.randrange(ring), rng.randrange(1, ring + 1)) for _ in range(6)]
    return list(dict.fromkeys(c for c in cases if c[1] <= ring))


@pytest.mark.parametrize("width", [64, 512])
def test_wrapped_stores_and_loads_match_a_bytearray(width):
    """Rings of one word, four words and 256 bytes in memory of random bytes: stores that wrap
    (see :func:`wrap_cases`), each loaded back with the same ``wrap`` and then with a plain
    load of the ring and a word either side, all with back-pressure and idle cycles: every byte
    equals the Python model's, so the bytes outside each access, those between its first and
    last lanes of a shared word included, are untouched; no error."""
    rng = random.Random(width)
    nb = width // 8
    size_bytes = 4096
    init = rng.randbytes(size_bytes)
    ref = Reference(size_bytes, init, word=nb)
    jobs = []
    for ring in sorted({nb, 4 * nb, 256}):
        k = ring.bit_length() - 1
        base = 3 * ring                         # aligned, not at 0; the rings lie apart
        for off, size in wrap_cases(ring, nb, rng):
            addr = base + off
            jobs += [(STORE_MEM, addr, size, rng.randbytes(size), k),
                     (LOAD_MEM, addr, size, b"", k),
                     (LOAD_MEM, base - nb, ring + 2 * nb)]
    jobs.append((LOAD_MEM, 0, size_bytes))
    got, counters, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=7,
                                   size_bytes=size_bytes, init=init, stall=0.3, gaps=0.2,
                                   seed=width)
    check_replies(width, jobs, got, ref)
    assert not any(meta["error"] for _, meta, _ in got)
    assert counters["bad_wrap"] == counters["out_of_range"] == counters["bad_length"] == 0
    assert counters["stores"] == len(jobs) // 3


@pytest.mark.parametrize("width", [64, 512])
def test_bad_wraps_get_an_error_ack_are_counted_and_touch_nothing(width):
    """Rings smaller than a word, sizes above the ring (loads and stores) go to ``bad_wrap``;
    rings that do not fit in the memory, even when ``addr + size`` would, go to
    ``out_of_range``; a bad wrap is counted there only, even if its ring is also outside; a
    wrapped store with a short payload goes to ``bad_length``. Each gets an ack with ``error``
    (no payload for a load), and the good wrapped store and load right after each go through;
    the memory holds exactly the good stores."""
    rng = random.Random(width)
    nb = width // 8
    log_nb = nb.bit_length() - 1
    size_bytes = 3072                           # not a power of two: a ring can overhang it
    init = rng.randbytes(size_bytes)
    ref = Reference(size_bytes, init, word=nb)
    k4 = log_nb + 2                             # a ring of 4 words
    bad = [
        (STORE_MEM, 100, 1, b"x", log_nb - 1),                  # ring smaller than a word
        (LOAD_MEM, 100, 1, b"", 1),
        (STORE_MEM, 5, 4 * nb + 1, bytes(4 * nb + 1), k4),     # size above the ring
        (LOAD_MEM, 4 * nb, 4 * nb + 1, b"", k4),
        (LOAD_MEM, size_bytes + 10, 1, b"", 1),                 # both: counted as a bad wrap
        (STORE_MEM, 5, 10, bytes(10), 12),                      # ring [0, 4096): outside
        (LOAD_MEM, 2048 + 5, 10, b"", 11),                      # ring [2048, 4096): overhangs
        (LOAD_MEM, 0, 0, b"", 48),
        (STORE_MEM, 7, 1, b"y", 63),
        (STORE_MEM, 1024 + 3, 5, b"four", k4),                  # short payload
    ]
    ring = 1 << k4
    jobs = []
    for j in bad:
        addr = 1024 + rng.randrange(ring)
        size = rng.randrange(1, ring + 1)
        jobs += [j, (STORE_MEM, addr, size, rng.randbytes(size), k4),
                 (LOAD_MEM, addr, size, b"", k4)]
    jobs.append((LOAD_MEM, 0, size_bytes))
    got, counters, _, _ = run_tile(width, [request(width, *j) for j in jobs], latency=3,
                                   size_bytes=size_bytes, init=init, stall=0.2, seed=width)
    check_replies(width, jobs, got, ref)
    assert [m["error"] for _, m, _ in got] == [1, 0, 0] * len(bad) + [0]
    assert [counters[c] for c in ("bad_wrap", "out_of_range", "bad_length")] == [5, 4, 1]
    assert ref.errors == {"bad_wrap": 5, "out_of_range": 4, "bad_length": 1}


# -- exact latency and throughput -----------------------------------------------------------------

def header_and_meta_flits(width):
    return len(request(width, LOAD_MEM, 0, 0))


def per_request(log, counts):
    """Split a list of transfer cycles into consecutive runs of ``counts`` entries."""
    out, i = [], 0
    for n in counts:
        out.append(log[i:i + n])
        i += n
    assert i == len(log)
    return out


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("latency", [1, 20])
def test_load_latency_and_one_word_per_cycle(width, latency):
    """4 KiB loads: the ack's header leaves the cycle after the request's last flit came in,
    its first payload flit ``latency + 2`` cycles after it (no earlier than the ack's header
    and metadata flits allow), ``+ 1`` when the range starts mid-word, and then one flit per
    cycle: the tile keeps reads in flight. A load of a whole 4 KiB ring from a mid-word start
    (its reads wrap, the first word read twice) takes the same cycles."""
    hm = header_and_meta_flits(width)
    words = 4096 // (width // 8)
    cases = [(0, 0, 0), (5, 1, 0), (4096 + 5, 1, 12)]      # (addr, extra cycle, wrap)
    _, _, log_in, log_out = run_tile(
        width, [request(width, LOAD_MEM, a, 4096, wrap=k) for a, _, k in cases],
        latency=latency, size_bytes=8192)
    ins = per_request(log_in, [hm] * len(cases))
    outs = per_request(log_out, [hm + words] * len(cases))
    for (_addr, extra, _wrap), flits_in, flits_out in zip(cases, ins, outs):
        last_in = flits_in[-1]
        assert flits_out[:hm] == list(range(last_in + 1, last_in + 1 + hm))
        payload = flits_out[hm:]
        assert payload[0] == max(last_in + latency + 2 + extra, last_in + 1 + hm)
        assert payload == list(range(payload[0], payload[0] + words))   # 1 cycle per word


@pytest.mark.parametrize("width", [64, 512])
def test_store_takes_one_word_per_cycle_and_acks_two_cycles_after(width):
    """4 KiB stores: their payload flits are taken one per cycle without a stall, and the ack
    leaves 2 cycles after the last one (3 when the last word needs a flush). A store of a whole
    4 KiB ring from a mid-word start (its writes wrap, the first and last to the same word)
    takes the same cycles."""
    hm = header_and_meta_flits(width)
    words = 4096 // (width // 8)
    cases = [(0, 0, 0), (5, 1, 0), (4096 + 5, 1, 12)]      # (addr, extra cycle, wrap)
    _, _, log_in, log_out = run_tile(
        width, [request(width, STORE_MEM, a, 4096, bytes(4096), k) for a, _, k in cases],
        size_bytes=8192)
    ins = per_request(log_in, [hm + words] * len(cases))
    outs = per_request(log_out, [hm] * len(cases))
    for (_addr, extra, _wrap), flits_in, flits_out in zip(cases, ins, outs):
        # From the last header/metadata flit (taken once the previous request is done) on.
        assert flits_in[hm - 1:] == list(range(flits_in[hm - 1], flits_in[hm - 1] + words + 1))
        assert flits_out[0] == flits_in[-1] + 2 + extra


def test_back_to_back_loads_keep_order_and_overlap_nothing():
    """Requests are served one at a time: many small loads queued at once all come back, in
    order, each at least ``latency`` cycles after the previous one's request."""
    width, latency = 512, 10
    init = bytes(range(256)) * 16
    jobs = [(LOAD_MEM, 7 * k, 3) for k in range(12)]
    got, _, log_in, log_out = run_tile(width, [request(width, *j) for j in jobs],
                                       latency=latency, init=init)
    check_replies(width, jobs, got, Reference(4096, init))
    payload_cycles = log_out[1::2]
    assert all(b - a >= latency for a, b in zip(payload_cycles, payload_cycles[1:]))


# -- in a design, on both simulation back ends -----------------------------------------------------

class FlitPortTile(Tile):
    """Test-only: a frame on ``mac_rx`` is a NoC message, its bytes the flits' bytes (flit *k*
    in bytes ``k*W/8`` on); every message delivered to the tile leaves as such a frame."""

    streaming = False

    def __init__(self, env=None):
        env = env if env is not None else TileEnv()
        super().__init__(env, {"mac_rx": In(FrameStream(env.width)),
                               "mac_tx": Out(FrameStream(env.width))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [
            self.noc_out.valid.eq(self.mac_rx.valid),
            self.noc_out.payload.data.eq(self.mac_rx.payload.data),
            self.noc_out.payload.last.eq(self.mac_rx.payload.last),
            self.mac_rx.ready.eq(self.noc_out.ready),
            self.mac_tx.valid.eq(self.noc_in.valid),
            self.mac_tx.payload.data.eq(self.noc_in.payload.data),
            self.mac_tx.payload.nbytes.eq(self.env.width // 8),
            self.mac_tx.payload.last.eq(self.noc_in.payload.last),
            self.noc_in.ready.eq(self.mac_tx.ready),
        ]
        return m


def memory_design(width, size_bytes=2048):
    d = Design(f"memory_{width}", cols=2, rows=1, width=width)
    d.add("host", FlitPortTile, at=HOST_XY)
    d.add("mem", MemoryTile, at=TILE_XY, size_bytes=size_bytes)
    d.route("host", "mem")
    d.route("mem", "host")
    return d


def frame_of(flits, width):
    return b"".join(data.to_bytes(width // 8, "little") for data, _ in flits)


def flits_of(frame, width):
    nb = width // 8
    words = [int.from_bytes(frame[i:i + nb], "little") for i in range(0, len(frame), nb)]
    return [(w, int(i == len(words) - 1)) for i, w in enumerate(words)]


def test_design_top_brings_the_memory_port_out_or_attaches_a_model(tmp_path, monkeypatch):
    """Without an attachment the tile's memory port is the top-level port ``mem_mem``; with the
    simulators' (:func:`apiary.sim.memory_models`), a model sits inside the top and the port is
    gone; the Verilog cache keeps the two apart (the conversion is stubbed: only the keys matter
    here)."""
    import apiary.top
    d = memory_design(64)
    plain = DesignTop(d)
    assert isinstance(plain.signature.members["mem_mem"].signature, MemoryPortSignature)
    assert plain.attached == []
    modelled = DesignTop(d, attach=[memory_models(3)])
    assert "mem_mem" not in modelled.signature.members
    assert [(t, m) for t, m, _ in modelled.attached] == [("mem", "mem")]
    assert "mem_loads" in modelled.bank

    converted = []

    def convert(top, **kw):
        converted.append(top)
        return f"// {sorted(top.signature.members)}\n"
    monkeypatch.setattr(apiary.top.verilog, "convert", convert)
    a = design_verilog(plain, cache_dir=tmp_path)
    b = design_verilog(modelled, cache_dir=tmp_path)
    assert "mem_mem" in a and "mem_mem" not in b
    assert len(list((tmp_path / "verilog").iterdir())) == 2
    assert design_verilog(DesignTop(d, attach=[memory_models(3)]), cache_dir=tmp_path) == b
    assert design_verilog(DesignTop(d, attach=[memory_models(4)]), cache_dir=tmp_path) != ""
    assert len(converted) == 3 and len(list((tmp_path / "verilog").iterdir())) == 3


def test_design_top_without_memory_ports_keeps_its_cache_key(tmp_path, monkeypatch):
    """A design without memory ports gets the same Verilog cache entry with or without the
    memory-model attachment (the simulators always pass it)."""
    import apiary.top
    from apiary.tiles.forward import ForwardTile
    monkeypatch.setattr(apiary.top.verilog, "convert", lambda top, **kw: "// stub\n")
    d = Design("plain", cols=2, rows=1, width=64)
    d.add("host", FlitPortTile, at=HOST_XY)
    d.add("fwd", ForwardTile, at=TILE_XY)
    d.route("host", "fwd")
    d.route("fwd", "host")
    design_verilog(DesignTop(d), cache_dir=tmp_path)
    design_verilog(DesignTop(d, attach=[memory_models(3)]), cache_dir=tmp_path)
    assert len(list((tmp_path / "verilog").iterdir())) == 1


def design_traffic(width, size_bytes):
    rng = random.Random(width)
    jobs = []
    for _ in range(12):
        addr = rng.randrange(size_bytes - 200)
        size = rng.randrange(200)
        jobs.append((STORE_MEM, addr, size, rng.randbytes(size)))
        jobs.append((LOAD_MEM, rng.randrange(size_bytes - 300), rng.randrange(300)))
    jobs.append((LOAD_MEM, size_bytes - 3, 4))          # out of range
    return jobs


def run_design(backend, width, *, size_bytes=2048, **kw):
    from apiary.sim import open_sim
    jobs = design_traffic(width, size_bytes)
    with open_sim(memory_design(width, size_bytes), backend, seed=3, stall=0.2, idle_cycles=100,
                  **kw) as sim:
        # A frame each, one after the other: the port tile sends one message per frame.
        sim.send_many([frame_of(request(width, *j), width) for j in jobs])
        sim.run(max_cycles=200_000)
        replies = [decode_mem_message(flits_of(f.data, width), width) for f in sim.received()]
        return jobs, replies, sim.sent(), sim.received(), sim.counters()


@pytest.mark.parametrize("backend", ["pysim", pytest.param("verilator", marks=pytest.mark.slow)])
def test_design_with_a_memory_tile_on_both_backends(backend):
    """A design with a memory tile: load and store messages come in from outside through a
    port tile, across the mesh; the simulator attached a memory model (the replies equal the
    Python model's), and the tile's counters are top-level counters."""
    width = 64
    jobs, replies, _, _, counters = run_design(backend, width)
    check_replies(width, jobs, replies, Reference(2048))
    assert counters["mem_loads"] == 13 and counters["mem_stores"] == 12
    assert counters["mem_out_of_range"] == 1


def test_memory_latency_is_the_simulators_setting():
    """``open_sim(memory_latency=)``, else the design's ``settings["memory_latency"]``, else 20,
    is the attached model's read latency: a load's reply takes exactly the difference longer."""
    from apiary.sim import open_sim
    width = 64
    job = (LOAD_MEM, 16, 8)
    frame = frame_of(request(width, *job), width)

    def load_turnaround(**kw):
        d = memory_design(width)
        if "settings" in kw:
            d.settings["memory_latency"] = kw.pop("settings")
        with open_sim(d, "pysim", idle_cycles=50, **kw) as sim:
            sim.send(frame)
            sim.run(max_cycles=5000)
            (reply,), (sent,) = sim.received(), sim.sent()
            return reply.cycle_last - sent.cycle_last

    base = load_turnaround(memory_latency=5)
    assert load_turnaround(settings=11) - base == 6
    assert load_turnaround(settings=11, memory_latency=30) - base == 25     # overrides
    assert load_turnaround() - base == 15                     # the default, 20


@pytest.mark.slow
def test_design_same_replies_and_cycles_on_both_backends():
    """The same traffic, stalls and gaps give the same replies on the same cycles on both back
    ends (the Verilog model is built from the same top, memory model included)."""
    width = 64
    p = run_design("pysim", width)
    v = run_design("verilator", width)
    assert p[1] == v[1]
    assert p[2] == v[2] and p[3] == v[3]
    assert p[4] == v[4]
