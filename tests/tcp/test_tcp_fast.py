"""The TCP engine in the fast tier, on Amaranth's simulator (no Verilator build):

* the whole ``examples/tcp_echo.py`` design at 64 bits with the slow tests' small parameters
  (``TEST`` of ``test_tcp_engine.py``), driven through the network stack by the scripted peer
  (:class:`harness.bench.tcp_peer.Peer`, which checks every segment's checksums): a handshake
  and its options, a short echo and a close both ways; malformed segments dropped and counted,
  the next good one still echoed. One simulation serves both tests (each its own connection,
  asserting on counter deltas): opening it is most of the cost.
* the 512-bit receive path alone: the real IPv4 RX tile fed IPv4 datagrams carrying TCP
  segments, its messages (the first 28 payload bytes riding in the 512-bit header flit,
  :func:`apiary.noc.spec.head_bytes`) into the real TCP RX tile, wired to the real TCP TX tile
  as in a design. For an established flow each segment's ``STORE_MEM`` carries exactly its data
  bytes at its place in the ring, for sizes on both sides of the header flit's and the next
  flit's boundaries; a bad checksum is dropped and counted and the next good segment goes
  through; the ACKs TCP TX sends say everything was committed. It fails if TCP RX takes IPv4
  RX's datagrams without their head bytes (the regression of commit 26b0894).
"""

import pathlib
import random
import sys

import pytest
from amaranth import Elaboratable, Module
from amaranth.lib.wiring import connect
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from apiary.noc.header import Fbits
from apiary.noc.merger import MessageMerger
from apiary.noc.spec import head_bytes
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.memory_tile import STORE_MEM, STORE_MEM_ACK, decode_mem_message, mem_message_flits
from apiary.sim import open_sim
from apiary.stream.testbench import simulate
from beehive.proto.ipv4 import IpProtocol, Ipv4RxTile
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig, TcpRxTile, TcpTxTile
from harness.bench.tcp_peer import Peer, seq_add, seq_diff
from test_tcp_engine import TEST, fix_checksum, tcp_echo

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "proto"))
from tilebench import (HERE, IPV4, PEER_IP, counters_of, decode, make_tile,  # noqa: E402
                       packet_flits)


# -- the whole design at 64 bits -----------------------------------------------------------------

@pytest.fixture(scope="module")
def echo():
    """``tcp_echo`` at 64 bits with the slow tests' parameters, on pysim, opened once."""
    with open_sim(tcp_echo.design(width=64, **TEST), "pysim") as sim:
        yield sim


def until(peer, done, *, step=50, limit=2000):
    """Run ``peer`` in steps of ``step`` cycles until ``done()``; fail after ``limit``."""
    start = peer.sim.cycle
    while not done():
        assert peer.sim.cycle - start < limit, f"not done in {limit} cycles: {peer.seen!r}"
        peer.run(step)


def delta(sim, before):
    """The counters that moved since ``before``, by how much."""
    now = sim.counters()
    return {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}


#: The 64-bit tests share one simulation, so one xdist worker (``--dist loadgroup``).
ECHO64 = pytest.mark.xdist_group("tcp_fast64")


@ECHO64
def test_handshake_echo_and_close_at_64_bits(echo):
    before = echo.counters()
    p = Peer(echo, sport=40000)
    synack = p.connect(cycles=200)
    # Our MSS and window scale (0: a 4 KiB ring needs none), SACK-permitted (the peer offered
    # it), no timestamps: a 32-byte header.
    assert synack.tcp.options == [("MSS", 1460), ("NOP", None), ("WScale", 0), ("NOP", None),
                                  ("NOP", None), ("SAckOK", b"")]
    assert synack.tcp.dataofs == 8
    assert synack.tcp.window == TEST["ring"]
    assert p.exchange(b"hello, world", cycles=50, rounds=20) == b"hello, world"
    # The peer closes; the echo closes its side after the end of the stream, once.
    p.send("FA")
    p.snd_nxt = seq_add(p.snd_nxt, 1)
    until(p, lambda: p.fin)
    p.run(200)
    assert [s.flags for s in p.seen if "F" in s.flags] == ["FA"]
    moved = delta(echo, before)
    assert moved["tcp_rx_opened"] == moved["tcp_rx_closed"] == 1
    assert moved["tcp_echo_bytes"] == 12 and moved["tcp_rx_stored"] == 1
    assert not {k for k in moved if k.startswith("tcp_rx_") and k not in (
        "tcp_rx_segments", "tcp_rx_stored", "tcp_rx_opened", "tcp_rx_closed")}, moved


@ECHO64
def test_malformed_segments_are_dropped_and_counted_at_64_bits(echo):
    p = Peer(echo, sport=40001, isn=77_000)
    p.connect(cycles=200)
    p.run(50)
    before = echo.counters()
    bad_sum = p.segment("PA", data=b"oops")
    bad_sum[TCP].chksum = Ether(bytes(bad_sum))[TCP].chksum ^ 0xFF
    short = fix_checksum(bytes(bad_sum[TCP])[:12], at=10)    # 12 bytes, its sum right
    low_offset = p.segment("PA", data=b"abc")
    low_offset[TCP].dataofs = 4                 # a header shorter than 20 bytes
    echo.send_many([bad_sum, short, low_offset, p.segment("SF")])
    assert p.run(300) == [], "a malformed segment was answered"
    moved = delta(echo, before)
    drops = {k: v for k, v in moved.items() if k in (
        "tcp_rx_bad_checksum", "tcp_rx_truncated", "tcp_rx_bad_header")}
    assert drops == {"tcp_rx_bad_checksum": 1, "tcp_rx_truncated": 1, "tcp_rx_bad_header": 2}
    assert "tcp_rx_stored" not in moved and "tcp_echo_bytes" not in moved
    # The connection is untouched: the next good segment is echoed.
    assert p.exchange(b"good", cycles=50, rounds=20) == b"good"
    assert delta(echo, before)["tcp_rx_stored"] == 1


def sack_blocks(seen):
    """The SACK blocks of a segment the design sent, as ``(left, right)`` pairs."""
    return [tuple(v) for k, v in seen.tcp.options if k == "SAck"]


@ECHO64
def test_acks_report_the_out_of_order_range_as_a_sack_block_at_64_bits(echo):
    """RFC 2018: on a connection whose peer offered SACK, the ACK that answers an out-of-order
    segment reports the range held (and that range only, as it grows); once the gap fills, the
    ACK covers it all and carries no block. A peer that did not offer SACK gets neither the
    option on the SYN-ACK nor blocks."""
    p = Peer(echo, sport=40002, isn=91_000)
    p.connect(cycles=200)
    p.run(50)
    base, data = p.snd_nxt, bytes(range(150))
    before = echo.counters()
    p.send_data(data[50:100], seq=seq_add(base, 50), advance=False)
    dup = [s for s in p.run(200) if not s.data]
    assert [(s.tcp.ack, sack_blocks(s)) for s in dup] == [
        (base, [(seq_add(base, 50), seq_add(base, 100))])]
    assert dup[0].tcp.dataofs == 8
    p.send_data(data[100:], seq=seq_add(base, 100), advance=False)
    dup = [s for s in p.run(200) if not s.data]
    assert [(s.tcp.ack, sack_blocks(s)) for s in dup] == [
        (base, [(seq_add(base, 50), seq_add(base, 150))])]
    # In-order bytes short of the gap: their echo, a data segment, reports the block too
    # (every segment's checksums are checked as it arrives).
    p.send_data(data[:20])
    until(p, lambda: len(p.stream) >= 20)
    echoed = [s for s in p.seen if s.data]
    assert echoed[-1].data == data[:20] and echoed[-1].tcp.dataofs == 8
    assert sack_blocks(echoed[-1]) == [(seq_add(base, 50), seq_add(base, 150))]
    p.send_data(data[20:50])
    p.snd_nxt = seq_add(base, 150)
    until(p, lambda: len(p.stream) >= 150)
    assert bytes(p.stream) == data
    assert all(sack_blocks(s) == [] for s in p.seen if s.tcp.ack == seq_add(base, 150))
    assert delta(echo, before)["tcp_rx_reordered"] == 2

    q = Peer(echo, sport=40003, isn=92_000)
    q.syn_options = lambda: [("MSS", 1460), ("NOP", None), ("WScale", 7)]
    synack = q.connect(cycles=200)
    # Every SYN of an engine that offers SACK has a 32-byte header: here NOPs in its place.
    assert synack.tcp.options == [("MSS", 1460), ("NOP", None), ("WScale", 0)] + [
        ("NOP", None)] * 4
    q.run(50)
    q.send_data(b"late", seq=seq_add(q.snd_nxt, 10), advance=False)
    dup = [s for s in q.run(200) if not s.data]
    assert [(s.tcp.ack, s.tcp.dataofs, sack_blocks(s)) for s in dup] == [(q.snd_nxt, 5, [])]


@ECHO64
def test_two_out_of_order_ranges_are_kept_merged_and_reported_at_64_bits(echo):
    """Two holes: the receive tile keeps two out-of-order ranges, and a segment that would
    make a third is dropped and counted. Each ACK's SACK block is the range the latest
    out-of-order segment went to; a segment touching both ranges makes them one; a range
    before the first pushes it second; in-order data fills up to a range's end and the other
    range becomes the first. Offsets below are from the first byte of the stream."""
    p = Peer(echo, sport=40006, isn=95_000)
    p.connect(cycles=200)
    p.run(50)
    base, data = p.snd_nxt, bytes(random.Random(38).randrange(256) for _ in range(300))
    before = echo.counters()

    def send(lo, hi):
        """Bytes ``[lo, hi)``; the ACKs without data that answer, offsets from ``base``."""
        p.send_data(data[lo:hi], seq=seq_add(base, lo), advance=False)
        return [(seq_diff(s.tcp.ack, base), [(seq_diff(a, base), seq_diff(b, base))
                                             for a, b in sack_blocks(s)])
                for s in p.run(200) if not s.data]

    assert send(100, 150) == [(0, [(100, 150)])]            # A
    assert send(200, 250) == [(0, [(200, 250)])]            # B, after A
    assert send(190, 200) == [(0, [(190, 250)])]            # B grows back
    assert send(20, 40) == [(0, [(190, 250)])]              # a third range: dropped
    assert send(150, 160) == [(0, [(100, 160)])]            # A grows on
    assert send(160, 190) == [(0, [(100, 250)])]            # both touched: one range
    assert send(40, 60) == [(0, [(40, 60)])]                # before A: A, the old A is B
    moved = delta(echo, before)
    assert moved["tcp_rx_reordered"] == 6 and moved["tcp_rx_ooo_dropped"] == 1, moved
    # In order up to A: the stream moves to A's end, B becomes A and is reported.
    p.send_data(data[:40], seq=base, advance=False)
    until(p, lambda: len(p.stream) >= 60)
    assert bytes(p.stream) == data[:60]
    last = [s for s in p.seen if s.tcp.ack == seq_add(base, 60)]
    assert last and all(sack_blocks(s) == [(seq_add(base, 100), seq_add(base, 250))]
                        for s in last)
    p.send_data(data[60:100], seq=seq_add(base, 60), advance=False)
    until(p, lambda: len(p.stream) >= 250)
    p.send_data(data[250:], seq=seq_add(base, 250), advance=False)
    p.snd_nxt = seq_add(base, 300)
    until(p, lambda: len(p.stream) >= 300)
    assert bytes(p.stream) == data
    assert all(sack_blocks(s) == [] for s in p.seen
               if seq_diff(s.tcp.ack, base) in (250, 300))
    # The dropped range came again in order (data[20:40] above): nothing else was dropped.
    assert delta(echo, before)["tcp_rx_ooo_dropped"] == 1


def six_segments_the_second_lost(echo, sport, isn, segments=6):
    """A connection whose peer has an MSS of 100: 600 bytes echoed in six segments (or
    ``segments``), the peer taking none (the test says below what it got). Returns the peer
    and the first byte's sequence number."""
    p = Peer(echo, sport=sport, isn=isn, mss=100)
    p.connect(cycles=200)
    p.run(50)
    base = p.rcv_nxt
    p.send_data((bytes(range(200)) * segments)[:100 * segments])
    echoed = []
    for _ in range(20):
        echoed += [s for s in p.run(100, ack=False, lose=lambda s: s.data) if s.data]
        if len(echoed) >= segments:
            break
    assert [(seq_diff(s.tcp.seq, base), len(s.data)) for s in echoed] == [
        (k, 100) for k in range(0, 100 * segments, 100)]
    return p, base


@ECHO64
def test_a_fast_retransmit_stops_short_of_what_the_peer_sacked_at_64_bits(echo):
    """RFC 2018, the sender's half, through the whole stack: the receive tile reads the SACK
    blocks of the peer's duplicate ACKs (most recent first; the one starting first beyond the
    ACK is kept) and the transmit tile's fast retransmit from the ACK stops where the range the
    peer holds begins. Block edges are bytes, not segments: this peer holds the second half of
    the lost segment (as it would from an earlier transmission cut elsewhere), so only the
    first half goes again."""
    p, base = six_segments_the_second_lost(echo, 40004, 93_000)
    before = echo.counters()
    p.rcv_nxt = seq_add(base, 100)
    p.send("A")
    blocks = (seq_add(base, 400), seq_add(base, 600), seq_add(base, 150), seq_add(base, 400))
    for _ in range(3):
        p.send("A", options=[("NOP", None), ("NOP", None), ("SAck", blocks)])
    again = [s for s in p.run(300, ack=False) if s.data]
    assert [(seq_diff(s.tcp.seq, base), len(s.data)) for s in again] == [(100, 50)]
    assert again[0].data == bytes(range(100, 150))
    moved = delta(echo, before)
    assert moved["tcp_tx_fast_retransmits"] == moved["tcp_tx_sack_skips"] == 1, moved
    assert moved["tcp_tx_retransmitted_bytes"] == 50
    # The peer now holds it all: nothing more goes.
    p.rcv_nxt = seq_add(base, 600)
    p.send("A")
    assert [s for s in p.run(300, ack=False) if s.data] == []


@ECHO64
def test_fast_recovery_resends_the_hole_past_the_sacked_range_in_the_same_round_trip(echo):
    """RFC 6675 through the whole stack: eight segments echoed, the second and the fourth
    lost. The first duplicate ACK already says the peer holds 500 bytes beyond the first hole
    (more than two segments' worth: IsLost), so it starts recovery: cwnd is half the 700 bytes
    in flight, and the pipe with the first hole resent is 100 bytes (the second hole, [300,
    400), is lost too: the peer holds 400 bytes beyond it), so the second hole goes at once,
    in the same round trip, where NewReno would wait for the third duplicate and then the
    partial ACK; further duplicates and the partial ACK send neither again."""
    p, base = six_segments_the_second_lost(echo, 40007, 96_000, segments=8)
    p.rcv_nxt = seq_add(base, 100)
    p.send("A")
    p.run(100, ack=False)
    before = echo.counters()

    def resent(acks, ack, *blocks):
        """``acks`` ACKs of ``ack`` reporting ``blocks``; what the design sends again."""
        edges = tuple(seq_add(base, b) for block in blocks for b in block)
        for _ in range(acks):
            p.rcv_nxt = seq_add(base, ack)   # (the peer's own count moves with what it gets)
            p.send("A", options=[("NOP", None), ("NOP", None), ("SAck", edges)] if blocks
                   else [])
        return [(seq_diff(s.tcp.seq, base), len(s.data))
                for s in p.run(300, ack=False) if s.data]

    assert resent(1, 100, (400, 800), (200, 300)) == [(100, 100), (300, 100)]
    assert resent(4, 100, (400, 800), (200, 300)) == []
    assert resent(1, 300, (400, 800)) == []       # the first hole filled: a partial ACK
    moved = delta(echo, before)
    assert moved["tcp_tx_fast_retransmits"] == 2 and moved["tcp_tx_sack_skips"] == 1, moved
    assert moved["tcp_tx_retransmitted_bytes"] == 200 and "tcp_tx_timeouts" not in moved
    assert resent(1, 800) == []


@ECHO64
def test_acks_with_data_and_new_sack_blocks_count_as_duplicates_at_64_bits(echo):
    """RFC 6675: a peer that sends data of its own reports a loss on its data segments, which
    are no duplicate ACKs as RFC 5681 counts them; on a connection with SACK an ACK of the same
    byte whose blocks reach further than before counts. Three such segments make the fast
    retransmit; a fourth whose blocks say nothing new does not count."""
    p, base = six_segments_the_second_lost(echo, 40005, 94_000)
    p.rcv_nxt = seq_add(base, 100)
    p.send("A")
    p.run(100, ack=False)
    before = echo.counters()
    for end in (300, 500, 600, 600):
        p.send_data(b"more", options=[("NOP", None), ("NOP", None),
                                      ("SAck", (seq_add(base, 200), seq_add(base, end)))])
    again = [s for s in p.run(400, ack=False) if s.data and s.tcp.seq == seq_add(base, 100)]
    assert [len(s.data) for s in again] == [100]
    moved = delta(echo, before)
    assert moved["tcp_tx_fast_retransmits"] == 1 and "tcp_tx_sack_skips" not in moved, moved


# -- the 512-bit receive path: IPv4 RX into TCP RX -------------------------------------------------

WIDTH = 512
CONFIG = TcpConfig(flows=4, rx_ring=4096, tx_ring=4096, rto=100_000, linger=30_000)
PORT, SPORT = 7, 40000
APP, RX_MEM, IP_TX, TX_MEM = (3, 2), (3, 3), (1, 2), (2, 3)


class ReceivePath(Elaboratable):
    """IPv4 RX's ``noc_out`` into TCP RX's ``noc_in`` (through a merger whose other input, ``acks``,
    takes the receive buffer's ``STORE_MEM_ACK``), TCP RX wired to TCP TX as ``d.wire`` joins
    them. The tiles are built alone (:func:`tilebench.make_tile`, all at ``HERE``: they are
    joined directly, not over the mesh), IPv4 RX routing protocol 6 to TCP RX."""

    def __init__(self, width, config):
        self.ip_rx = make_tile(Ipv4RxTile, width, {IpProtocol.TCP.value: HERE})
        self.tcp_rx = make_tile(TcpRxTile, width, {PORT: APP, "rx_mem": RX_MEM}, config=config)
        self.tcp_tx = make_tile(TcpTxTile, width, {None: IP_TX, "tx_mem": TX_MEM}, config=config)
        self.merge = MessageMerger(width, 2)
        self.acks = self.merge.i[1]

    def elaborate(self, platform):
        m = Module()
        m.submodules.ip_rx, m.submodules.tcp_rx = self.ip_rx, self.tcp_rx
        m.submodules.tcp_tx, m.submodules.merge = self.tcp_tx, self.merge
        connect(m, self.ip_rx.noc_out, self.merge.i[0])
        connect(m, self.merge.o, self.tcp_rx.noc_in)
        connect(m, self.tcp_rx.wires, self.tcp_tx.wires)
        return m


def datagram(segment, *, corrupt=False):
    """The message Ethernet RX sends IPv4 RX for an IPv4 datagram carrying ``segment`` (scapy
    TCP, checksummed; ``corrupt``: its checksum field flipped)."""
    raw = bytearray(bytes(IP(src=PEER_IP, dst=IPV4) / segment))
    if corrupt:
        raw[20 + 16] ^= 0x5A
    return packet_flits(WIDTH, bytes(raw), {"ethertype": 0x0800}, msg_type=MsgType.ETH_RX_FRAME)


#: Data bytes of a 20-byte-header segment in the header flit (28 - 20 = 8 at 512 bits); the next
#: flit holds the following 64.
IN_HEAD = head_bytes(WIDTH, MsgType.IP_RX_DATAGRAM) - 20
#: Data bytes per segment: on both sides of the header flit's end and of the next flit's.
SIZES = [1, IN_HEAD - 1, IN_HEAD, IN_HEAD + 1, IN_HEAD + 63, IN_HEAD + 64, IN_HEAD + 65, 200, 1460]


class ReceiveBench:
    """Drives a :class:`ReceivePath` at 512 bits, with seeded random gaps and back-pressure:
    datagrams into IPv4 RX (:meth:`send`); TCP RX's ``STORE_MEM`` collected (``stores``: its
    metadata and payload) and answered with ``STORE_MEM_ACK``, as the receive buffer does; its
    other messages kept in ``notes``; the segments TCP TX sends parsed into ``sent``."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.dut = ReceivePath(WIDTH, CONFIG)
        self.stores, self.notes, self.sent, self.acks = [], [], [], []

    def run(self, script, timeout=20_000):
        simulate(self.dut, script, background=[self.rx_out, self.memory, self.tx_out],
                 timeout=timeout)

    async def send(self, ctx, segment, *, corrupt=False):
        await send_flits(ctx, self.dut.ip_rx.noc_in, datagram(segment, corrupt=corrupt),
                         rng=self.rng, stall=0.2)

    async def rx_out(self, ctx):
        while True:
            flits = await recv_flits(ctx, self.dut.tcp_rx.noc_out, rng=self.rng, stall=0.2)
            header, meta, payload = decode_mem_message(flits, WIDTH)
            if header.msg_type != STORE_MEM:
                self.notes.append((header.msg_type, (header.dst_x, header.dst_y)))
                continue
            self.stores.append((meta, payload))
            self.acks.append(mem_message_flits(
                WIDTH, STORE_MEM_ACK, meta["addr"], meta["size"], wrap=meta["wrap"], dst=HERE,
                dst_fbits=Fbits.LOCAL1, src=RX_MEM))

    async def memory(self, ctx):
        while True:
            if self.acks:
                await send_flits(ctx, self.dut.acks, self.acks.pop(0), rng=self.rng, stall=0.3)
            else:
                await ctx.tick()

    async def tx_out(self, ctx):
        while True:
            msg = decode(await recv_flits(ctx, self.dut.tcp_tx.noc_out, rng=self.rng,
                                          stall=0.2), WIDTH)
            assert msg.header.msg_type == MsgType.IP_TX_DATAGRAM.value
            self.sent.append(TCP(msg.payload))

    def counters(self, ctx, tile):
        """``tile``'s counters that are not zero."""
        values = {name: ctx.get(getattr(tile.counters, name)) for name in counters_of(tile)}
        return {name: v for name, v in values.items() if v}

    async def wait(self, ctx, done, limit=3000):
        for _ in range(limit):
            if done():
                return
            await ctx.tick()
        raise AssertionError(
            f"not done in {limit} cycles: stores of {[m['size'] for m, _ in self.stores]} "
            f"bytes, TCP RX counters {self.counters(ctx, self.dut.tcp_rx)}, TCP TX sent "
            f"{[(str(s.flags), s.ack) for s in self.sent]}")


def test_512_bit_tcp_rx_fed_by_ipv4_rx_stores_each_segments_data():
    bench = ReceiveBench(seed=512)
    isn = 4000                      # the stream wraps around the 4 KiB ring within a few segments
    expect, counters = [], {}

    def tcp(flags, **kw):
        return TCP(sport=SPORT, dport=PORT, flags=flags, window=65535, **kw)

    async def peer(ctx):
        sent = bench.sent
        await bench.send(ctx, tcp("S", seq=isn, options=[("MSS", 1460)]))
        await bench.wait(ctx, lambda: sent)
        assert (str(sent[0].flags), sent[0].ack) == ("SA", isn + 1)
        seq, ack = isn + 1, sent[0].seq + 1
        await bench.send(ctx, tcp("A", seq=seq, ack=ack))
        segments = [([], bench.rng.randbytes(n)) for n in SIZES]
        # With timestamps the TCP header (32 bytes) is longer than the header flit's 28.
        segments.append(([("NOP", None), ("NOP", None), ("Timestamp", (7, 0))], b"options"))
        for k, (options, data) in enumerate(segments):
            segment = tcp("PA", seq=seq, ack=ack, options=options) / data
            if k == 4:              # a bad checksum in the middle: dropped, the same one again
                await bench.send(ctx, segment, corrupt=True)
            await bench.send(ctx, segment)
            expect.append((seq, data))
            seq += len(data)
        await bench.wait(ctx, lambda: len(bench.stores) >= len(expect))
        # Every byte committed (its store acknowledged): TCP TX acknowledges the whole stream.
        await bench.wait(ctx, lambda: sent[-1].ack == seq)
        await ctx.tick().repeat(200)
        counters.update(rx=bench.counters(ctx, bench.dut.tcp_rx),
                        ip=bench.counters(ctx, bench.dut.ip_rx))

    bench.run(peer)
    ring, n = CONFIG.rx_ring, len(expect)
    assert [payload for _, payload in bench.stores] == [data for _, data in expect]
    slot = bench.stores[0][0]["addr"] // ring
    for (meta, _), (seq, data) in zip(bench.stores, expect):
        assert (meta["addr"], meta["size"], meta["wrap"]) == \
            (slot * ring + seq % ring, len(data), CONFIG.rx_ring_log2)
    assert any(meta["addr"] % ring + meta["size"] > ring for meta, _ in bench.stores), \
        "no store wrapped around the ring"
    # SYN, ACK and the data segments taken, the bad one dropped; nothing else dropped.
    assert counters["rx"] == {"segments": 2 + n, "stored": n, "opened": 1, "bad_checksum": 1}
    assert counters["ip"] == {"forwarded": 3 + n}
    # The application heard of the connection (its receive and send buffers).
    assert bench.notes == [(MsgType.TCP_NEW_FLOW_NOTIF.value, APP)] * 2
    assert {str(s.flags) for s in bench.sent[1:]} == {"A"}
