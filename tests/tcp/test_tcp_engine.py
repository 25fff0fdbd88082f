"""The TCP engine through the whole simulated stack (examples/tcp_echo.py and tcp_connect.py),
driven by a scripted peer (scapy) on Verilator: handshakes and options, data both ways, windows
(the peer's), reordering and duplicates, a loss recovered by fast retransmit, malformed
segments at 64 and 512 bits; our window closed and zero windows, loss recovered by the timer
with back-off, FIN and RST, a SYN flood, an active open, slots reused at 64 bits.
``test_pysim_*`` runs a short exchange on Amaranth's simulator too (the engine's tiles run alone
on it in tests/tcp/test_tcp_fast.py).
Every segment the design sends has its checksums checked (``Peer.run``).
"""

import pathlib
import random
import struct

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether

from apiary.design import Design
from apiary.load import load_script
from apiary.sim import open_sim
from apiary.stream.checksum import internet_checksum
from apiary.tiles.forward import ForwardTile
from harness.bench.tcp_peer import (DESIGN_IP, DESIGN_MAC, PEER_IP, PEER_MAC, Peer, seq_add,
                                    seq_diff)

pytestmark = pytest.mark.slow        # Verilator models of whole designs (minutes to build)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def example(name):
    return load_script(EXAMPLES / f"{name}.py")


tcp_echo = example("tcp_echo")
tcp_connect = example("tcp_connect")

#: Small and quick: 8 flows, 4 KiB rings, a 20,000-cycle RTO, few retries, a short linger.
#: max_half_open 2 (a quarter of the flows): the SYN flood test's bound.
TEST = dict(flows=8, ring=4096, rto=20_000, linger=30_000, syn_retries=2, max_retries=3,
            max_half_open=2)
RTO = TEST["rto"]
# Tests that share a Verilator model run on one xdist worker (--dist loadgroup), which builds it
# once; the long scenarios (timers, floods, many connections) run at 64 bits only.
W64 = pytest.param(64, marks=pytest.mark.xdist_group("tcp64"), id="64")
W512 = pytest.param(512, marks=pytest.mark.xdist_group("tcp512"), id="512")
WIDTHS = [W64, W512]


def echo_sim(width, **kw):
    return open_sim(tcp_echo.design(width=width, **TEST), "verilator", **kw)


def counters(sim):
    return {k: v for k, v in sim.counters().items() if v}


def data_segments(segments):
    return [s for s in segments if s.data]


def peer_closes(p, runs):
    """The peer ``p`` sends its FIN, then runs 3,000 cycles at a time, at most ``runs`` times,
    until the design's FIN has come; asserts that it has."""
    p.send("FA")
    p.snd_nxt = seq_add(p.snd_nxt, 1)
    for _ in range(runs):
        p.run(3000)
        if p.fin:
            break
    assert p.fin, p.seen


def handshake_echo_and_close(p):
    """The peer ``p`` connects to the echo (a design of :data:`TEST`'s rings), sends 12 bytes
    and has them back, and closes; the design's FIN follows, and its counters say one
    connection opened and closed (tests/sim/test_netlist.py runs it on the ECP5 netlist too)."""
    synack = p.connect()
    # Our MSS and window scale (0: a 4 KiB ring needs none), SACK-permitted (the peer offered
    # it), no timestamps.
    assert synack.tcp.options == [("MSS", 1460), ("NOP", None), ("WScale", 0), ("NOP", None),
                                  ("NOP", None), ("SAckOK", b"")]
    assert synack.tcp.window == 4096
    assert p.exchange(b"hello, world", cycles=3000) == b"hello, world"
    # The peer closes; the echo closes its side after the end of the stream.
    peer_closes(p, 10)
    p.run(3000)
    c = counters(p.sim)
    assert c["tcp_rx_opened"] == 1 and c["tcp_rx_closed"] == 1
    assert c["tcp_echo_bytes"] == 12


@pytest.mark.parametrize("width", WIDTHS)
def test_handshake_options_echo_and_close(width):
    with echo_sim(width) as sim:
        handshake_echo_and_close(Peer(sim))


@pytest.mark.parametrize("width", WIDTHS)
def test_bulk_echo_respects_the_peers_scaled_window(width):
    rng = random.Random(width)
    data = rng.randbytes(40_000)
    window = 16                        # × 2**7 = 2048 bytes, with the peer's window scale 7
    with echo_sim(width) as sim:
        p = Peer(sim, window=window)
        p.connect()
        sent = 0
        acked_at = {}                  # the highest ACK the peer had sent before each run
        while len(p.stream) < len(data) and sim.cycle < 3_000_000:
            while sent < len(data) and sent - len(p.stream) < 3000:
                n = min(1460, len(data) - sent, 3000 - (sent - len(p.stream)))
                p.send_data(data[sent:sent + n])
                sent += n
            limit = seq_add(p.rcv_nxt, window << 7)
            for s in p.run(2000):
                acked_at[s.tcp.seq] = limit
                assert seq_diff(limit, seq_add(s.tcp.seq, len(s.data))) >= 0, \
                    "the design sent beyond the window the peer advertised"
        assert bytes(p.stream) == data
        assert all(len(s.data) <= 1460 for s in p.seen)


@pytest.mark.parametrize("width", WIDTHS)
def test_out_of_order_and_duplicate_segments(width):
    with echo_sim(width) as sim:
        p = Peer(sim)
        p.connect()
        base = p.snd_nxt
        first, second, third = b"A" * 300, b"B" * 200, b"C" * 100
        # The third segment first, then the second (both out of order), then the first.
        p.send_data(third, seq=seq_add(base, 500))
        p.send_data(second, seq=seq_add(base, 300))
        acks = p.run(3000)
        # Each out-of-order segment is acknowledged at once, at the gap: duplicate ACKs.
        assert [s.tcp.ack for s in acks] == [base, base]
        p.send_data(first, seq=base)
        p.send_data(first, seq=base)               # a duplicate
        p.send_data(b"A" * 100 + b"B" * 50, seq=seq_add(base, 200))   # overlaps both sides
        p.snd_nxt = seq_add(base, 600)
        for _ in range(5):
            p.run(3000)
        assert bytes(p.stream) == first + second + third
        c = counters(sim)
        assert c["tcp_rx_reordered"] == 2 and c["tcp_rx_duplicate"] >= 1


@pytest.mark.parametrize("width", WIDTHS)
def test_a_lost_segment_comes_back_by_fast_retransmit(width):
    rng = random.Random(5)
    data = rng.randbytes(4000)          # within the design's 4 KiB window
    with echo_sim(width) as sim:
        p = Peer(sim)
        p.connect()
        for i in range(0, len(data), 1000):
            p.send_data(data[i:i + 1000])
        lost = []

        def lose_first(seen):
            if seen.data and not lost:
                lost.append(seen)
                return True
            return False
        segments = p.run(4000, ack=False, lose=lose_first)
        assert len(data_segments(segments)) >= 3 and lost
        # Three duplicate ACKs for the lost one (the segments after it arrived).
        for _ in range(3):
            p.send("A", ack=lost[0].tcp.seq)
        again = p.run(1000, ack=False)
        resent = [s for s in again if s.data and s.tcp.seq == lost[0].tcp.seq]
        assert resent, "no fast retransmit within 1000 cycles"
        assert resent[0].cycle - lost[0].cycle < RTO // 2
        p.send("A")
        for _ in range(5):
            p.run(3000)
        assert bytes(p.stream) == data
        c = counters(sim)
        assert c["tcp_tx_fast_retransmits"] >= 1 and "tcp_tx_timeouts" not in c


@pytest.mark.parametrize("width", [W64])
def test_a_lost_segment_comes_back_by_timeout(width):
    """The only data segment is lost and nothing follows it (no duplicate ACKs): the timer
    sends it again after one RTO."""
    with echo_sim(width) as sim:
        p = Peer(sim)
        p.connect()
        p.send_data(b"lost once")
        lost = []

        def lose_once(seen):
            if seen.data and not lost:
                lost.append(seen)
                return True
            return False
        for _ in range(5):
            p.run(RTO // 2, lose=lose_once)
        assert bytes(p.stream) == b"lost once" and lost
        again = [s for s in p.seen if s.data][1]
        assert RTO - 1024 <= again.cycle - lost[0].cycle <= RTO + 2048
        c = counters(sim)
        assert c["tcp_tx_timeouts"] == 1 and c["tcp_tx_retransmits"] == 1


@pytest.mark.parametrize("width", [W64])
def test_the_retransmission_timer_backs_off_then_gives_up(width):
    with echo_sim(width) as sim:
        p = Peer(sim)
        p.connect()
        p.send_data(b"x" * 100)
        tries = []
        for _ in range(20):
            tries += [s for s in p.run(10_000, ack=False) if s.data]
            if len(tries) > TEST["max_retries"]:
                break
        p.run(20 * RTO, ack=False)
        assert len(tries) == 1 + TEST["max_retries"], tries
        gaps = [b.cycle - a.cycle for a, b in zip(tries, tries[1:])]
        tick = 1024
        for k, gap in enumerate(gaps):
            # RTO doubled at each expiry, to the tick (and a timer scan) either way.
            assert (RTO << k) - tick <= gap <= (RTO << k) + 2 * tick, gaps
        c = counters(sim)
        assert c["tcp_tx_aborts"] == 1 and c["tcp_rx_reset"] == 1
        assert c["tcp_tx_retransmits"] == TEST["max_retries"]
        # The connection is gone: the peer's next segment is answered with a reset.
        p.send_data(b"late")
        assert [s.flags for s in p.run(3000)] == ["R"]


@pytest.mark.parametrize("width", [W64])
def test_zero_window_holds_data_and_probes_until_it_opens(width):
    with echo_sim(width) as sim:
        p = Peer(sim, window=0)
        p.connect()
        p.send_data(b"held back")
        held = p.run(3 * RTO, ack=False)
        assert not data_segments(held)
        probes = [s for s in held if s.tcp.seq == seq_add(p.iss, 0) and not s.data]
        assert probes, "no window probe under a zero window"
        p.window = 8192
        p.send("A")
        for _ in range(3):
            p.run(3 * RTO)
        assert bytes(p.stream) == b"held back"
        assert counters(sim)["tcp_tx_probes"] >= 1


class SinkTile(ForwardTile):
    """An application that takes every message and does nothing (never holds its input)."""
    streaming = False


@pytest.mark.parametrize("width", [64])
@pytest.mark.xdist_group("tcp_sink")
def test_a_full_receive_ring_closes_the_window(width):
    """An application that never reads: the advertised window falls to zero, data past it is
    dropped and counted, and every ACK says so."""
    d = Design("tcp_sink", cols=4, rows=4, width=width)
    d.settings.update(mac=DESIGN_MAC, ipv4=DESIGN_IP)
    tcp_echo.udp_echo.build_stack(d)
    config = tcp_echo.tcp_config(width, **TEST)
    tcp_echo.add_tcp(d, config)
    d.add("sink", SinkTile, at=(3, 2))
    tcp_echo.connect_app(d, "sink", 7)
    with open_sim(d, "verilator") as sim:
        p = Peer(sim)
        p.connect()
        for i in range(4):
            p.send_data(bytes([i]) * 1024)
        acks = p.run(4000)
        assert acks[-1].tcp.window == 0 and acks[-1].tcp.ack == p.snd_nxt
        p.send_data(b"no room")
        late = p.run(3000)
        assert late[-1].tcp.ack == seq_add(p.snd_nxt, -7) and late[-1].tcp.window == 0
        assert counters(sim)["tcp_rx_out_of_window"] == 1


@pytest.mark.parametrize("width", [W64])
def test_resets_closed_ports_and_unknown_flows(width):
    with echo_sim(width) as sim:
        p = Peer(sim)
        p.connect()
        assert p.exchange(b"before", cycles=3000) == b"before"
        # A reset out of the window is ignored; one in the window but not exact is challenged.
        p.send("R", seq=seq_add(p.snd_nxt, 100_000))
        assert p.run(3000) == []
        p.send("R", seq=seq_add(p.snd_nxt, 10))
        assert [s.flags for s in p.run(3000)] == ["A"]
        # The exact one ends the connection; the application is told.
        p.send("R")
        assert p.run(3000) == []
        c = counters(sim)
        assert c["tcp_rx_reset"] == 1 and c["tcp_echo_ended"] == 1
        p.send_data(b"after")
        reset = p.run(3000)
        assert [s.flags for s in reset] == ["R"]
        assert reset[0].tcp.seq == p.rcv_nxt      # RST's seq is the ACK it answers
        # A SYN to a closed port: RST|ACK acknowledging the SYN.
        closed = Peer(sim, sport=40001, dport=9, isn=555)
        closed.send("S", ack=0)
        answer = closed.run(3000)
        assert [(s.flags, s.tcp.ack) for s in answer] == [("RA", 556)]
        assert counters(sim)["tcp_rx_no_listener"] == 1


@pytest.mark.parametrize("width", [W64])
def test_reset_in_syn_received_and_data_with_fin(width):
    with echo_sim(width) as sim:
        # A half-open connection reset by its peer frees its slot without telling anyone.
        half = Peer(sim, sport=41000)
        half.send("S", options=half.syn_options(), ack=0)
        synack = half.run(3000, ack=False)[0]
        half.send("R", seq=seq_add(half.isn, 1), ack=0)
        assert half.run(3000) == []
        c = counters(sim)
        assert c["tcp_rx_reset"] == 1 and "tcp_echo_flows" not in c
        assert synack.flags == "SA"
        # Data and FIN in one segment: both echoed, then the echo's FIN.
        p = Peer(sim)
        p.connect()
        p.send("FPA", data=b"last words")
        p.snd_nxt = seq_add(p.snd_nxt, len(b"last words") + 1)
        for _ in range(10):
            p.run(3000)
            if p.fin:
                break
        assert bytes(p.stream) == b"last words" and p.fin
        p.run(3000)
        assert counters(sim)["tcp_rx_closed"] == 1


@pytest.mark.parametrize("width", [W64])
def test_a_syn_flood_holds_only_max_half_open_slots(width):
    half_open = TEST["max_half_open"]
    with echo_sim(width) as sim:
        friend = Peer(sim, sport=30000)
        friend.connect()
        flood = [Peer(sim, sport=50000 + i, isn=i * 1000) for i in range(3 * half_open)]
        for f in flood:
            f.send("S", ack=0)
        sim.run(3000)
        answered = {Ether(f.data)[TCP].dport for f in sim.received(clear=True)}
        c = counters(sim)
        assert c["tcp_rx_syn_dropped"] == 2 * half_open
        # The established connection is untouched.
        assert friend.exchange(b"still here", cycles=3000) == b"still here"
        # The half-open ones time out (two SYN-ACK retries), and a new peer gets in.
        sim.run((RTO + 2 * RTO + 4 * RTO) + 10_000)
        late = Peer(sim, sport=60000)
        late.connect()
        assert late.exchange(b"in", cycles=3000) == b"in"
        assert len(answered) <= half_open


@pytest.mark.parametrize("width", WIDTHS)
def test_malformed_segments_are_dropped_and_counted(width):
    with echo_sim(width) as sim:
        p = Peer(sim)
        p.connect()
        good = p.segment("PA", data=b"good")

        def raw_with(tcp_bytes):
            frame = bytes(Ether(src=PEER_MAC, dst=DESIGN_MAC)
                          / IP(src=PEER_IP, dst=DESIGN_IP, proto=6) / tcp_bytes)
            return frame

        valid = bytes(good[TCP])
        bad_sum = bytearray(valid)
        bad_sum[16] ^= 0xFF
        long_offset = bytearray(bytes(p.segment("PA", data=b"abc")[TCP]))
        long_offset[12] = 0xF0             # 60-byte header in a 23-byte segment
        del_offset = p.segment("PA", data=b"abc")
        del_offset[TCP].dataofs = 4
        syn_fin = p.segment("SF")
        # An IPv4 total length longer than what arrived (IPv4 RX drops it), and one shorter
        # (the segment is cut short, so its checksum fails).
        too_long = Ether(bytes(good))
        too_long[IP].len += 40
        del too_long[IP].chksum
        too_short = Ether(bytes(good))
        too_short[IP].len -= 2
        del too_short[IP].chksum
        for frame in (raw_with(bytes(bad_sum)), fix_checksum(valid[:12], at=10),
                      fix_checksum(long_offset), bytes(syn_fin), bytes(too_long),
                      bytes(too_short)):
            sim.send(frame)
        sim.send(del_offset)
        p.run(3000)
        c = counters(sim)
        assert c["tcp_rx_bad_checksum"] == 2
        assert c["tcp_rx_truncated"] == 2
        assert c["tcp_rx_bad_header"] == 2
        assert c["ip_rx_bad_length"] == 1
        assert "tcp_rx_stored" not in c
        # The next good segment goes through.
        assert p.exchange(b"good", cycles=3000) == b"good"


def fix_checksum(tcp_bytes, at=16):
    """A frame carrying these TCP bytes, the 16-bit word at byte ``at`` (the checksum field, or
    any word of a segment too short to have one) set so that the checksum is right."""
    src = bytes(int(x) for x in PEER_IP.split("."))
    dst = bytes(int(x) for x in DESIGN_IP.split("."))
    raw = bytearray(tcp_bytes)
    raw[at:at + 2] = b"\0\0"
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(raw))
    raw[at:at + 2] = struct.pack("!H", internet_checksum(pseudo + bytes(raw)))
    return bytes(Ether(src=PEER_MAC, dst=DESIGN_MAC) / IP(src=PEER_IP, dst=DESIGN_IP, proto=6)
                 / bytes(raw))


@pytest.mark.parametrize("width", [W64])
def test_slots_are_reused_after_close(width):
    with echo_sim(width) as sim:
        for i in range(2 * TEST["flows"] + 1):
            p = Peer(sim, sport=20000 + i, isn=i * 7919)
            p.connect()
            assert p.exchange(bytes([i]) * 10, cycles=3000) == bytes([i]) * 10
            peer_closes(p, 5)
            p.run(2000)
        c = counters(sim)
        assert c["tcp_rx_opened"] == c["tcp_rx_closed"] == 2 * TEST["flows"] + 1


#: One tcp_connect design for both active-open tests, so that they share a Verilator model; at
#: 64 bits only (a 512-bit model of it costs four CPU-minutes per cold run, and the segments it
#: sends and receives at 512 bits take the paths the echo's take above).
#: 32 flows (8 buckets of 4), not TEST's 8 (2 buckets): the peer's key lands in bucket 5, so an
#: open that searched the table with any other key (the stale segment key, as before the fix
#: of 2026-11-29) would be filed where the SYN-ACK's search cannot find it.
CONNECT = dict(TEST, start=500, length=10_000, retry=5000, flows=32)


@pytest.mark.parametrize("width", [W64])
def test_active_open_sends_its_stream_and_lingers_in_time_wait(width):
    length = CONNECT["length"]
    d = tcp_connect.design(width=width, **CONNECT)
    with open_sim(d, "verilator") as sim:
        sim.run(2000)
        arp = [Ether(f.data) for f in sim.received(clear=True)]
        assert [a[ARP].pdst for a in arp] == [PEER_IP] and arp[0].dst == "ff:ff:ff:ff:ff:ff"
        sim.send(Ether(src=PEER_MAC, dst=DESIGN_MAC) / ARP(op=2, hwsrc=PEER_MAC, psrc=PEER_IP,
                                                            hwdst=DESIGN_MAC, pdst=DESIGN_IP))
        sim.run(2000)
        syn = Ether(sim.received(clear=True)[0].data)[TCP]
        assert str(syn.flags) == "S" and dict(syn.options)["MSS"] == 1460
        assert "SAckOK" in dict(syn.options) and syn.dataofs == 8
        p = Peer(sim, sport=5001, dport=syn.sport, isn=9000)
        p.rcv_nxt = seq_add(syn.seq, 1)
        p.send("SA", ack=p.rcv_nxt, options=[("MSS", 1000), ("NOP", None), ("WScale", 2)])
        p.snd_nxt = 9001
        for _ in range(30):
            p.run(3000)
            if p.fin:
                break
        assert bytes(p.stream) == bytes(k % 251 for k in range(length)) and p.fin
        assert all(len(s.data) <= 1000 for s in p.seen)       # the peer's MSS
        # We close too: the design closed first, so it lingers in TIME-WAIT, then frees.
        p.send("FA")
        p.snd_nxt = seq_add(p.snd_nxt, 1)
        p.run(3000)
        assert "tcp_rx_closed" not in counters(sim)
        # What a slow simulation met over TAP: Linux sent its FIN again (our ACK was late), we
        # acknowledged both, and Linux, closed by the first, answered the second with RST. The
        # RST does not end TIME-WAIT (RFC 1337): the flow is freed by its timer, counted closed.
        seen = len(p.seen)
        p.send("FA", seq=seq_add(p.snd_nxt, -1))
        p.run(3000)
        assert any(a.flags == "A" and a.tcp.ack == p.snd_nxt for a in p.seen[seen:]), p.seen
        p.send("R", seq=p.snd_nxt)
        p.run(3000)
        c = counters(sim)
        assert "tcp_rx_closed" not in c and "tcp_rx_reset" not in c and c["tcp_rx_rejected"] == 1
        p.run(2 * TEST["linger"])
        assert counters(sim)["tcp_rx_closed"] == 1


@pytest.mark.parametrize("width", [W64])
def test_active_open_refused_then_retried(width):
    d = tcp_connect.design(width=width, **CONNECT)
    with open_sim(d, "verilator") as sim:
        sim.run(2000)
        sim.received(clear=True)
        sim.send(Ether(src=PEER_MAC, dst=DESIGN_MAC) / ARP(op=2, hwsrc=PEER_MAC, psrc=PEER_IP,
                                                            hwdst=DESIGN_MAC, pdst=DESIGN_IP))
        sim.run(2000)
        syn = Ether(sim.received(clear=True)[0].data)[TCP]
        p = Peer(sim, sport=5001, dport=syn.sport)
        p.send("RA", seq=0, ack=seq_add(syn.seq, 1))
        sim.run(10_000)
        again = [Ether(f.data) for f in sim.received(clear=True)]
        assert any(TCP in a and str(a[TCP].flags) == "S" for a in again)
        c = counters(sim)
        assert c["sender_failed"] == 1 and c["sender_opens"] == 2


def test_pysim_handshake_and_echo():
    """The same engine on Amaranth's simulator (slow: a short exchange)."""
    with open_sim(tcp_echo.design(width=64, **TEST), "pysim") as sim:
        p = Peer(sim)
        p.connect(cycles=300)
        assert p.exchange(b"pysim", cycles=400, rounds=3) == b"pysim"
