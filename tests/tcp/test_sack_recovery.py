"""SACK loss recovery in the transmit engine (beehive/proto/tcp/tx.py) against the reference
written from RFC 6675 (tests/tcp/sack_model.py): the engine alone in Amaranth's simulator (fast
tier), its receive tile and the network played by the testbench. The segments it sends go
through a scripted network that drops some once and delivers the rest in order to a peer that
acknowledges every one (or every second one) with SACK blocks for all it holds beyond its
cumulative ACK; after every ACK the segments the engine sends, in order, and its cwnd,
ssthresh, recovery point and recovery flag equal the reference's."""

from apiary.stream.testbench import simulate
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.state import ConnState
from beehive.proto.tcp.tx import TxEngine

from newreno_model import MOD
from sack_model import SackRecovery, merged
from test_sack_sender import DATA, open_and_write, record, segments_sent

SMSS = 100
CONFIG = TcpConfig(flows=8, rx_ring=8192, tx_ring=8192, tx_base=1 << 20, mss=SMSS,
                   initial_window=4, tick=64)
WRITTEN = 6000              # bytes the application writes
UNTIL = 3000                # the run ends once the peer has acknowledged this much


class Peer:
    """What the peer holds, as the ranges it has received (offsets)."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []

    def receive(self, start: int, length: int) -> None:
        self.ranges = merged(self.ranges + [(start, start + length)])

    def ack(self) -> tuple[int, list[tuple[int, int]]]:
        """The cumulative ACK and the SACK blocks beyond it."""
        if self.ranges and self.ranges[0][0] == 0:
            return self.ranges[0][1], self.ranges[1:]
        return 0, list(self.ranges)


def sack_record(ack, blocks):
    """The receive tile's record after the peer's ACK of ``ack`` with SACK ``blocks``."""
    r = record(ConnState.ESTABLISHED, ack) | {"peer_mss": SMSS}
    if blocks:
        r |= {"peer_sack_valid": 1,
              "peer_sack": {"start": (DATA + blocks[0][0]) % MOD,
                            "end": (DATA + blocks[0][1]) % MOD},
              "peer_sack_high": (DATA + blocks[-1][1]) % MOD,
              "peer_sacked": sum(e - s for s, e in blocks)}
    return r


def recovery(lost, every=1):
    """Run the transfer with the segments at offsets ``lost`` dropped the first time they are
    sent, the peer acknowledging every ``every`` segments it receives; returns the events, each
    ``(what, segments the engine sent after it)``."""
    dut = TxEngine(CONFIG, load_depth=4, here=(3, 1), tx_mem=(2, 3))
    segments, neighbours = segments_sent(dut)
    events = []

    async def bench(ctx):
        async def settle():
            """Until the engine has sent what it may (nothing new for 40 cycles)."""
            quiet = 0
            while quiet < 40:
                n = len(segments)
                await ctx.tick()
                quiet = quiet + 1 if len(segments) == n else 0
            sent = list(segments)
            segments.clear()
            return sent

        async def check(what, expected):
            sent = await settle()
            s = ctx.get(dut.wires.tx_read_data)
            got = (sent, int(s.cwnd), int(s.ssthresh), (int(s.recover) - DATA) % MOD,
                   bool(s.in_recovery))
            want = (expected, ref.cwnd, ref.ssthresh, ref.recover % MOD, ref.in_recovery)
            assert got == want, (f"after {what}: engine (sent, cwnd, ssthresh, recover, in "
                                 f"recovery) {got}, RFC 6675's {want}")
            events.append((what, sent))
            return sent

        rx_event = await open_and_write(ctx, dut, {"peer_mss": SMSS}, length=WRITTEN)
        ref = SackRecovery.opened(SMSS, CONFIG.initial_window, -1)
        await ctx.tick().repeat(4)
        flight = await check("the write", ref.write(WRITTEN))
        peer, dropped, ack, dups, unacked = Peer(), set(), 0, 0, 0
        while ack < UNTIL:
            assert flight, f"nothing in flight at ACK {ack}: the transfer stalled"
            start, length = flight.pop(0)
            if start in lost and start not in dropped:
                dropped.add(start)
                continue
            peer.receive(start, length)
            unacked += 1
            if unacked < every and flight:
                continue
            unacked = 0
            new_ack, blocks = peer.ack()
            assert len(blocks) <= 4
            dups = 0 if new_ack > ack else min(dups + 1, 7)
            ctx.set(dut.wires.rx_read_data, sack_record(new_ack, blocks))
            if new_ack > ack:
                await rx_event(acked=1, ack=(DATA + new_ack) % MOD)
            else:
                await rx_event(dupacks=dups, ack=(DATA + ack) % MOD)
            expected = ref.ack(new_ack, blocks, 0 if new_ack > ack else dups)
            ack = new_ack
            flight += await check(f"ACK {ack} {blocks} ({dups} duplicates)", expected)
        assert dropped == set(lost)

    simulate(dut, bench, background=[neighbours], timeout=200_000)
    return events


def sends(events, segment):
    """The indices of the events after which the engine sent ``segment``."""
    return [i for i, (_, sent) in enumerate(events) if segment in sent]


def first_ack(events, at_least):
    """The index of the first event that acknowledged ``at_least``."""
    return next(i for i, (what, _) in enumerate(events)
                if what.startswith("ACK") and int(what.split()[1]) >= at_least)


def duplicates(events, index):
    return int(events[index][0].split("(")[-1].split()[0])


def test_one_hole_is_resent_once_and_new_data_waits_for_the_pipe():
    events = recovery({1000})
    (resent,) = sends(events, (1000, 100))[1:]          # (the first: its first sending)
    assert duplicates(events, resent) == 3
    # cwnd is half the flight (700 of 1,400 bytes), the pipe 1,100 with the hole resent: new
    # data waits until four more segments have left the network, then one goes per ACK.
    after = [sent for _, sent in events[resent + 1:resent + 8]]
    assert after == [[], [], [], [], [(2400, 100)], [(2500, 100)], [(2600, 100)]]


def test_a_second_hole_is_resent_in_the_same_round_trip():
    events = recovery({1000, 1300})
    assert sends(events, (1300, 100))[1] < first_ack(events, 1100)


def test_the_hole_before_the_first_range_goes_segment_by_segment():
    events = recovery({1000, 1100, 1200})
    resent = [sends(events, (k, 100))[1] for k in (1000, 1100, 1200)]
    assert resent == sorted(resent) and resent[-1] < first_ack(events, 1100)


def test_a_hole_not_yet_lost_waits_for_the_partial_ack():
    # The second loss is at the window's end: too little lies beyond it to call it lost
    # before the first hole is repaired; the partial ACK then resends it.
    events = recovery({1000, 2300})
    resent = sends(events, (2300, 100))[1]
    assert resent == first_ack(events, 2300)


def test_stretch_acks_start_recovery_early_and_release_two_segments_each():
    # Every second segment acknowledged: two duplicates already SACK four segments, more
    # than two segments' worth beyond the hole (IsLost), so recovery starts on the second.
    events = recovery({1000}, every=2)
    resent = sends(events, (1000, 100))[1]
    assert duplicates(events, resent) == 2
    assert [(2000, 100), (2100, 100)] in [sent for _, sent in events]


def test_a_hole_with_exactly_two_segments_sacked_beyond_it_is_not_lost():
    # [1600, 1800) SACKed past the hole at 1500: exactly 2 * SMSS, not more: new data goes
    # instead, and the partial ACK resends the hole.
    events = recovery({1000, 1500}, every=2)
    entry = sends(events, (1000, 100))[1]
    assert events[entry + 1][1] == [(1900, 100)]
    assert sends(events, (1500, 100))[1] == first_ack(events, 1500)
