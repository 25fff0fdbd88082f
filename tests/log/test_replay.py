"""Logs as pcaps and as traces; ReplayTile injects a log's messages on their recorded cycles."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.utils import rdpcap

from apiary.noc import Message, NocHeader
from apiary.noc.spec import message_flits
from apiary.noc.testbench import recv_flits
from apiary.sim import SimError
from apiary.sim.pcap import PcapRecord, read_pcap_records, write_pcap_records
from apiary.sim.replay import (Logged, ReplayTile, log_records, trace_from_entries,
                               trace_from_pcap, write_log_pcap)
from apiary.stream.testbench import simulate, transfers
from apiary.tile import Endpoint, TileEnv
from apiary.tiles.log import LogEntry, LogTile
from apiary.tiles.raw_port import message_frame


NEXT = Endpoint("next", 2, 1, 0b1001)


def sample_messages(rng, n, most=60):
    return [Message(NocHeader(dst_x=1, dst_y=0, msg_type=rng.randrange(256)),
                    meta=[rng.getrandbits(64)] * rng.randrange(2),
                    payload=bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, most))))
            for _ in range(n)]


def log_run(width, msgs, rng, snap=192):
    """Send ``msgs`` through a LogTile (each message's flits back to back, random gaps between
    messages, the next hop always ready); returns (the flits that left, the cycle of every flit,
    the log's entries)."""
    env = TileEnv("log0", x=1, y=0, width=width, routes={"data": {None: [NEXT]}})
    dut = LogTile(env, entries=32, snap=snap)
    moved, got, entries = [], [], []

    async def source(ctx):
        for msg in msgs:
            for _ in range(rng.choice([0, 0, 1, 5])):
                await ctx.tick()
            for data, last in msg.flits(width):
                ctx.set(dut.noc_in.payload, {"data": data, "last": last})
                ctx.set(dut.noc_in.valid, 1)
                await ctx.tick()
            ctx.set(dut.noc_in.valid, 0)

    async def sink(ctx):
        for _ in msgs:
            got.append(await recv_flits(ctx, dut.noc_out))
        await ctx.tick().repeat(2)
        for i in range(len(msgs)):
            ctx.set(dut.regs.log.r_index, i)
            await ctx.tick().repeat(2)
            entries.append(LogEntry.decode(ctx.get(dut.regs.log.r_data), snap))

    simulate(dut, sink, background=[source, transfers(dut.noc_out, moved)], timeout=20_000)
    return got, moved, entries


def replay_run(width, trace, n, at=None, ready=None):
    """Run a ReplayTile on ``trace``; returns (flits out, their cycles, counters)."""
    env = TileEnv("log0", x=1, y=0, width=width, routes={"data": {None: [NEXT]}})
    dut = ReplayTile(env, trace=trace, at=at)
    moved, got, counters = [], [], {}

    async def sink(ctx):
        for _ in range(n):
            got.append(await recv_flits(ctx, dut.noc_out, **(ready or {})))
        await ctx.tick()
        counters.update(injected=ctx.get(dut.counters.injected),
                        late=ctx.get(dut.counters.late))

    simulate(dut, sink, background=[transfers(dut.noc_out, moved)], timeout=20_000)
    return got, moved, counters


def first_cycles(messages, cycles):
    it = iter(cycles)
    return [[next(it) for _ in m][0] for m in messages]


@pytest.mark.parametrize("width", [64, 512])
def test_replay_injects_each_logged_message_on_its_cycle(width):
    rng = random.Random(width)
    msgs = sample_messages(rng, 12)
    got, moved, entries = log_run(width, msgs, rng)
    assert [e.cycle for e in entries] == first_cycles(got, moved)
    assert all(e.span == e.flits - 1 for e in entries)
    trace = trace_from_entries(entries, width)
    assert [list(zip(t.flits, [0] * (len(t.flits) - 1) + [1])) for t in trace] == got

    out, out_moved, counters = replay_run(width, trace, len(msgs))
    assert out == got
    assert out_moved == moved                     # every flit on the same cycle
    assert counters == {"injected": len(msgs), "late": 0}

    out, out_moved, _ = replay_run(width, trace, len(msgs), at=3)
    assert out == got
    assert [c - 3 for c in out_moved] == [c - moved[0] for c in moved]


def test_replay_counts_messages_it_could_not_send_on_time():
    width = 64
    msg = sample_messages(random.Random(5), 1, most=40)[0]
    flits = tuple(d for d, _ in msg.flits(width))
    trace = [Logged(2, flits), Logged(4, flits)]           # the second overlaps the first
    out, moved, counters = replay_run(width, trace, 2)
    assert moved[0] == 2 and moved[len(flits)] == 2 + len(flits)
    assert counters == {"injected": 2, "late": 1}


def test_replay_tile_refuses_a_trace_out_of_order():
    with pytest.raises(ValueError, match="not after the previous one"):
        ReplayTile(TileEnv(width=64), trace=[(5, (1,)), (5, (2,))])


def udp_message(width, i):
    """A message whose payload is an IPv4 datagram, as Ethernet RX sends it to IPv4 RX."""
    datagram = bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1000 + i, dport=7)
                     / (b"p" * (5 + i)))
    return Message(NocHeader(dst_x=1, msg_type=2), meta=[0xAB] * (4 if width == 64 else 0),
                   payload=datagram)


@pytest.mark.parametrize("width", [64, 512])
def test_log_pcap_round_trip(tmp_path, width):
    msgs = [udp_message(width, i) for i in range(4)]
    entries = []
    for i, msg in enumerate(msgs):
        flits = message_flits(msg, width)
        frame = message_frame(flits, width)
        entries.append(LogEntry(cycle=1000 + 37 * i, payload_bytes=len(msg.payload),
                                flits=len(flits), span=len(flits) - 1, msg_type=2,
                                snap=(frame + bytes(200))[:200]))
    clock = 250e6

    noc = tmp_path / "noc.pcap"
    assert write_log_pcap(noc, entries, width, 147, clock) == 4
    packets = rdpcap(str(noc))
    assert [round(float(p.time) * clock) for p in packets] == [e.cycle for e in entries]
    assert [bytes(p) for p in packets] == [message_frame(message_flits(m, width), width)
                                           for m in msgs]
    assert trace_from_pcap(noc, width, clock) == trace_from_entries(entries, width)

    ip = tmp_path / "ip.pcap"
    write_log_pcap(ip, entries, width, 101, clock)
    packets = rdpcap(str(ip))
    assert [bytes(p) for p in packets] == [m.payload for m in msgs]
    assert [p[UDP].sport for p in packets] == [1000, 1001, 1002, 1003]
    assert float(packets[1].time) == pytest.approx(1037 / clock, abs=1e-12)
    with pytest.raises(SimError, match="replay needs whole NoC messages"):
        trace_from_pcap(ip, width)

    # A snapshot shorter than the message: the pcap says how long it was.
    short = [LogEntry(e.cycle, e.payload_bytes, e.flits, e.span, e.msg_type, e.snap[:40])
             for e in entries]
    records = log_records(short, width, 147, clock)
    assert all(len(r.data) == 40 and r.orig_len == e.flits * width // 8
               for r, e in zip(records, entries))
    with pytest.raises(SimError, match="replay needs whole messages"):
        trace_from_entries(short, width)


def test_pcap_records_round_trip(tmp_path):
    path = tmp_path / "r.pcap"
    records = [PcapRecord(4, b"ab", 2), PcapRecord(3_000_000_008, b"xyz", 90)]
    write_pcap_records(path, records, 147)
    assert read_pcap_records(path) == (147, records)
    with pytest.raises(SimError, match="orig_len 1 is below"):
        write_pcap_records(path, [PcapRecord(0, b"ab", 1)])
