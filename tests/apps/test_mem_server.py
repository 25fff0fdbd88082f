"""UdpMemoryTile (beehive/apps/mem_server.py) in examples/udp_dram.py: memory reads and writes
over UDP, checked frame for frame against the Python model (MemServerModel over a bytearray,
replies built as the echo stack builds them), at 64 and 512 bits on Amaranth's simulator (a
handful of requests), and at 64 bits on Verilator (a seeded random mix, errors, bad requests, the
echo alongside; round-trip cycles)."""

import pathlib
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.sim import open_sim
from apiary.tile import Endpoint, TileEnv
from beehive.apps.mem_server import (OP_READ, OP_WRITE, STATUS_BAD_REQUEST,
                                     STATUS_MEMORY_ERROR, STATUS_OK, MemServerModel,
                                     UdpMemoryTile, mem_reply, mem_request, parse_mem_reply)
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"
MEM_PORT = 7777
CLIENT_PORT = 40000


def dram_design(width, mem_bytes=4096, **kw):
    return load_design(str(ROOT / "examples" / "udp_dram.py"), width=width,
                       mem_bytes=mem_bytes, **kw)


def udp(payload, dport=MEM_PORT, sport=CLIENT_PORT):
    return bytes(Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4)
                 / UDP(sport=sport, dport=dport) / bytes(payload))


def reply_frame(payload, sport=CLIENT_PORT):
    """The frame the design sends back for a reply ``payload``: what the echo stack sends for
    a request carrying it (same headers, addresses and ports swapped)."""
    frame, _ = echo_reply(udp(payload, sport=sport), port=MEM_PORT)
    return frame


def assert_valid_udp(frame):
    """``frame`` parses as Ethernet/IPv4/UDP with correct IPv4 and (non-zero) UDP checksums."""
    pkt = Ether(frame)
    assert IP in pkt and UDP in pkt
    ip_sum, udp_sum = pkt[IP].chksum, pkt[UDP].chksum
    assert udp_sum != 0
    again = Ether(frame)
    del again[IP].chksum
    del again[UDP].chksum
    again = Ether(bytes(again))
    assert (again[IP].chksum, again[UDP].chksum) == (ip_sum, udp_sum)
    return bytes(pkt[UDP].payload)


class Client:
    """Requests through a simulation, checked against the model."""

    def __init__(self, sim, mem_bytes, init=None):
        self.sim = sim
        self.model = MemServerModel(mem_bytes, init=init)
        self.counts = {"reads": 0, "writes": 0, "bad_request": 0}

    def run(self, payloads, batch=1):
        """Send requests ``batch`` at a time, each batch run to idle; check every reply is
        the model's, byte for byte; return the parsed replies."""
        out = []
        for k in range(0, len(payloads), batch):
            chunk = payloads[k:k + batch]
            self.sim.send_many([udp(p, sport=CLIENT_PORT + k + j) for j, p in enumerate(chunk)])
            self.sim.run()
            got = [f.data for f in self.sim.received(clear=True)]
            assert len(got) == len(chunk)
            for j, (p, frame) in enumerate(zip(chunk, got)):
                want, counter = self.model.reply(p)
                self.counts[counter] += 1
                assert assert_valid_udp(frame) == want
                assert frame == reply_frame(want, sport=CLIENT_PORT + k + j)
                out.append(parse_mem_reply(want))
        return out

    def check_counters(self, errors=None):
        c = self.sim.counters()
        for name, value in self.counts.items():
            assert c[f"mem_app_{name}"] == value, name
        assert c["mem_app_overflow"] == 0
        if errors is not None:
            assert c["mem_app_memory_errors"] == errors
            assert c["memory_out_of_range"] == errors
        assert c["memory_loads"] == self.counts["reads"]
        assert c["memory_stores"] == self.counts["writes"]
        assert c["memory_bad_type"] == c["memory_malformed"] == c["memory_bad_length"] == 0


# -- the model and the design ----------------------------------------------------------------------

def test_model_builds_and_parses_requests_and_replies():
    assert mem_request(OP_READ, 0x01020304, 5) == bytes([1, 0, 0, 5, 1, 2, 3, 4])
    assert mem_request(OP_WRITE, 7, b"ab") == bytes([2, 0, 0, 2, 0, 0, 0, 7]) + b"ab"
    assert mem_request(OP_WRITE, 7, (9, b"ab"))[2:4] == b"\x00\x09"
    r = parse_mem_reply(mem_reply(OP_READ, STATUS_OK, 3, 0x10, b"xyz"))
    assert r == {"op": 1, "status": 0, "length": 3, "addr": 16, "data": b"xyz"}
    with pytest.raises(ValueError):
        parse_mem_reply(b"\x01\x00")
    m = MemServerModel(64, max_read=16)
    assert m.reply(mem_request(OP_WRITE, 60, b"abcd"))[0][1] == STATUS_OK
    assert m.reply(mem_request(OP_READ, 60, 4))[0][8:] == b"abcd"
    assert m.reply(mem_request(OP_READ, 61, 4))[0][1] == STATUS_MEMORY_ERROR
    assert m.reply(mem_request(OP_READ, 0, 17))[0][1] == STATUS_BAD_REQUEST
    assert m.reply(mem_request(OP_WRITE, 0, (5, b"abcd")))[0][1] == STATUS_BAD_REQUEST
    assert m.reply(mem_request(3, 0, 0)) == (mem_reply(3, STATUS_BAD_REQUEST, 0, 0),
                                             "bad_request")
    assert m.reply(b"\x01\x00\x00")[0] == mem_reply(1, STATUS_BAD_REQUEST, 0, 0)


def test_design_is_deadlock_free_and_keeps_the_echo_design():
    from apiary.cli import main
    for width in (64, 512):
        graph = dram_design(width).check()
        assert graph.ok
    d = dram_design(512)
    assert (d.cols, d.rows) == (4, 3)
    assert {n: (t.x, t.y) for n, t in d.tiles.items()}["mem_app"] == (3, 1)
    echo = load_design(str(ROOT / "examples" / "udp_echo.py"))
    assert (echo.name, echo.cols, echo.rows) == ("udp_echo", 3, 3)
    assert list(echo.tiles) == [n for n in d.tiles if n not in ("mem_app", "memory")]
    assert main(["check", str(ROOT / "examples" / "udp_dram.py")]) == 0


def test_tile_needs_its_routes():
    env = TileEnv(name="app", routes={"data": {None: [Endpoint("udp_tx", 2, 1)]}})
    with pytest.raises(ValueError, match="memory"):
        UdpMemoryTile(env)
    with pytest.raises(ValueError, match="max_read"):
        UdpMemoryTile(TileEnv(), max_read=0)
    UdpMemoryTile(TileEnv())            # standalone: elaborates with default hops


# -- Amaranth's simulator ------------------------------------------------------------------------

def small_mix():
    data = bytes(range(100, 164))
    return [
        mem_request(OP_WRITE, 13, data),            # unaligned, spans words at both widths
        mem_request(OP_READ, 13, 64),
        mem_request(OP_READ, 10, 20),               # partly written
        mem_request(OP_READ, 4090, 8),              # beyond 4096 bytes: status 1
        mem_request(9, 0, 4),                       # unknown op: status 2
        mem_request(OP_WRITE, 0, b""),              # empty write
    ]


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_reads_and_writes_on_amaranth_simulator(width):
    with open_sim(dram_design(width), "pysim", idle_cycles=200) as sim:
        client = Client(sim, 4096)
        replies = client.run(small_mix())
        assert replies[1]["data"] == bytes(range(100, 164))
        assert [r["status"] for r in replies] == [0, 0, 0, 1, 2, 0]
        client.check_counters(errors=1)
        sim.send(udp(b"echo still here", dport=7))
        sim.run()
        assert [f.data for f in sim.received()] == [echo_reply(udp(b"echo still here",
                                                                   dport=7))[0]]


# -- Verilator -------------------------------------------------------------------------------------

VERILATOR_MEM = 1 << 16


@pytest.fixture(scope="module")
def sim64():
    with open_sim(dram_design(64, mem_bytes=VERILATOR_MEM), "verilator") as sim:
        yield sim


def random_mix(rng, mem_bytes, count):
    reqs = []
    for _ in range(count):
        n = rng.randrange(0, 1025)
        addr = rng.randrange(0, mem_bytes - n + 1)
        if rng.random() < 0.5:
            reqs.append(mem_request(OP_WRITE, addr, rng.randbytes(n)))
        else:
            reqs.append(mem_request(OP_READ, addr, n))
    return reqs


def bad_and_errors(mem_bytes):
    return [
        mem_request(OP_READ, mem_bytes - 4, 5),            # one byte beyond: status 1
        mem_request(OP_WRITE, mem_bytes - 2, b"abc"),      # status 1, memory untouched
        mem_request(OP_READ, 0xFFFFFFFF, 1),               # status 1
        mem_request(0, 0, 4),                              # unknown ops: status 2
        mem_request(3, 16, 4),
        mem_request(OP_WRITE, 16, (10, b"short")),         # data shorter than length
        mem_request(OP_WRITE, 16, (2, b"longer")),         # data longer than length
        mem_request(OP_READ, 0, 1025),                     # over max_read
        mem_request(OP_READ, 0, 65535),
        b"\x01\x00\x00",                                   # under 8 bytes
        b"",
        mem_request(OP_READ, 32, 16),                      # a good one still served
    ]


def exercise(sim, mem_bytes, seed, count):
    rng = random.Random(seed)
    client = Client(sim, mem_bytes)
    # Fill some memory, then a random mix, one request at a time and in bursts of 4.
    client.run([mem_request(OP_WRITE, a, rng.randbytes(1024)) for a in range(0, 8192, 1024)])
    client.run(random_mix(rng, mem_bytes, count))
    client.run(random_mix(rng, mem_bytes, 24), batch=4)
    replies = client.run(bad_and_errors(mem_bytes))
    assert [r["status"] for r in replies] == [1, 1, 1] + [2] * 8 + [0]
    client.run(random_mix(rng, mem_bytes, 10))
    # The echo on port 7 in the same run.
    frames = [udp(rng.randbytes(n), dport=7, sport=5000 + n) for n in (0, 1, 100, 1472)]
    sim.send_many(frames)
    sim.run()
    got = [f.data for f in sim.received(clear=True)]
    assert got == [echo_reply(f)[0] for f in frames]
    client.check_counters(errors=3)
    assert client.counts["bad_request"] == 8
    return client


@pytest.mark.slow
def test_random_reads_and_writes_64_bits_on_verilator(sim64):
    exercise(sim64, VERILATOR_MEM, seed=64, count=150)


def round_trip(sim, payload, dport=MEM_PORT):
    """Cycles from the request's first word in to the reply's last word out."""
    sim.sent(clear=True)
    sim.send(udp(payload, dport=dport))
    sim.run()
    (req,), (rep,) = sim.sent(clear=True), sim.received(clear=True)
    return rep.cycle_last - req.cycle_first, rep.data


@pytest.mark.slow
def test_round_trip_cycles_64_bits(sim64):
    """A 64-byte write and read (memory latency 20) against an echo of the same 72-byte
    datagram: the memory round trip adds the memory tile's turnaround, two store-and-forward
    buffers in the app and the reply's extra message, well under 100 cycles each."""
    data = bytes(range(64))
    write, rep = round_trip(sim64, mem_request(OP_WRITE, 0x101, data))
    assert parse_mem_reply(assert_valid_udp(rep))["status"] == STATUS_OK
    read, rep = round_trip(sim64, mem_request(OP_READ, 0x101, 64))
    assert parse_mem_reply(assert_valid_udp(rep))["data"] == data
    echo, _ = round_trip(sim64, mem_request(OP_WRITE, 0x101, data), dport=7)
    print(f"\n64 bits, memory latency 20: 64-byte write {write} cycles, read {read} cycles, "
          f"echo of the same request {echo} cycles")
    assert echo < write < echo + 100 and echo < read < echo + 100
