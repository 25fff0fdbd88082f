"""The SACK sender (RFC 2018) in TxEngine (beehive/proto/tcp/tx.py) alone, the receive tile
played by the testbench: after a retransmission timeout the engine goes back to ``snd_una``
and resends only the holes, as the peer's ACKs report what it holds (the receive tile's
``peer_sack``): a retransmission stops short of the range held and moves on past it, and
``sack_skips`` counts each. Without that range (a peer that reports none) the same timeout
resends everything outstanding, segment after segment. (Fast recovery with SACK, RFC 6675's,
is tests/tcp/test_sack_recovery.py's.)"""

import pytest

from apiary.stream.testbench import simulate, stream_put
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import SLOT_BITS
from beehive.proto.tcp.header import MAX_TX_HEADER_BYTES
from beehive.proto.tcp.state import ConnState
from beehive.proto.tcp.tx import TxEngine

SMSS = 250                  # the peer's MSS: 1,000 bytes are four segments
CONFIG = TcpConfig(flows=8, rx_ring=8192, tx_ring=8192, tx_base=1 << 20, rto=4096, tick=64)
SLOT, GEN, ISS, IRS = 5, 1, 0xFFFF_FF80, 5000          # the data's sequence numbers wrap
DATA = ISS + 1                                          # the first data byte


def at(offset):
    return (DATA + offset) % (1 << 32)


def record(state, una, held=None):
    """The receive tile's record: the peer acknowledged up to ``una`` (an offset into the
    data) and, with ``held`` (offsets), reported holding that range beyond it."""
    r = {"state": state, "gen": GEN, "peer_ip": 0x0A00_0001, "peer_port": 40000,
         "local_port": 7, "peer_mac": 0x02_00_00_00_00_01, "iss": ISS, "irs": IRS,
         "rcv_nxt": IRS + 1, "rx_head": IRS + 1, "snd_wnd": 60000, "peer_mss": SMSS,
         "snd_una": ISS if state == ConnState.SYN_RCVD else at(una), "sack_ok": 1}
    if held is not None:
        r |= {"peer_sack_valid": 1, "peer_sack": {"start": at(held[0]), "end": at(held[1])}}
    return r


def segments_sent(dut):
    """The engine's neighbours (every output taken, each load's data sent, ``load_done``, 3
    cycles after it) and the list of data segments it sends, as ``(offset, length)``."""
    segments = []

    async def neighbours(ctx):
        for s in (dut.segments, dut.loads, dut.answers, dut.wires.tx_event):
            ctx.set(s.ready, 1)
        done = []
        async for _, _, valid, seg, loaded in ctx.tick().sample(
                dut.segments.valid, dut.segments.payload, dut.loads.valid):
            done = [d - 1 for d in done] + ([3] if loaded else [])
            ctx.set(dut.load_done, 0 in done)
            done = [d for d in done if d > 0]
            if valid and seg.data_len:
                raw = int(seg.header).to_bytes(MAX_TX_HEADER_BYTES, "little")
                seq = int.from_bytes(raw[4:8], "big")
                segments.append(((seq - DATA) % (1 << 32), int(seg.data_len)))

    return segments, neighbours


async def open_and_write(ctx, dut, fields, length=1000):
    """Open the flow (the receive tile's record with ``fields`` over :func:`record`'s) and let
    its application write ``length`` bytes; returns the coroutine that sends the engine an
    event for the flow."""
    ctx.set(dut.wires.tx_read_addr, SLOT)

    async def rx_event(**event):
        await stream_put(ctx, dut.wires.rx_event, {"slot": SLOT, "gen": GEN, **event})

    ctx.set(dut.wires.rx_read_data, record(ConnState.SYN_RCVD, 0) | fields)
    await rx_event(open=1, seq=ISS, app_x=3, app_y=2)
    ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, 0) | fields)
    await stream_put(ctx, dut.app, {"msg_type": MsgType.TCP_TX_ADJUST_PTR.value, "x": 3, "y": 2,
                                    "meta": {"flow": SLOT | GEN << SLOT_BITS, "ptr": length}})
    return rx_event


def go_back(reports):
    """Send 1,000 bytes, let the peer acknowledge the first segment, then let the timer expire;
    after it, each step of ``reports`` (``(una, held)``: the peer's ACK, the range it reports)
    comes once the engine has nothing more to send. Returns the data segments sent after the
    timeout as ``(offset, length)``, and the ``sack_skips`` count."""
    dut = TxEngine(CONFIG, load_depth=4, here=(3, 1), tx_mem=(2, 3))
    segments, neighbours = segments_sent(dut)
    result = []

    async def bench(ctx):
        rx_event = await open_and_write(ctx, dut, {})
        await ctx.tick().repeat(60)
        assert segments == [(0, 250), (250, 250), (500, 250), (750, 250)]
        una, held = reports[0]
        ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, una, held))
        await rx_event(acked=1, ack=at(una))
        await ctx.tick().repeat(60)
        assert len(segments) == 4, "sent again before the timer expired"
        for _ in range(100):
            await ctx.tick().repeat(128)
            if len(segments) > 4:
                break
        else:
            raise AssertionError("the retransmission timer never expired")
        for una, held in reports[1:]:
            await ctx.tick().repeat(60)
            ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, una, held))
            await rx_event(acked=1, ack=at(una))
        await ctx.tick().repeat(60)
        result.extend([segments[4:], ctx.get(dut.counters.sack_skips),
                       ctx.get(dut.counters.retransmitted_bytes)])

    simulate(dut, bench, background=[neighbours], timeout=30_000)
    return result


def test_after_a_timeout_only_the_holes_are_sent_again():
    # The peer holds [0, 250) in order and [400, 600) beyond a hole, then, once the hole is
    # filled, [800, 1000) beyond the next. One segment after the timeout: [250, 400), cut
    # short; [400, 600) skipped. The ACK of 600 (a window of two segments now): [600, 800),
    # cut short; [800, 1000) skipped.
    sent, skips, resent = go_back([(250, (400, 600)), (600, (800, 1000))])
    assert sent == [(250, 150), (600, 200)]
    assert skips == 4 and resent == 350


@pytest.mark.parametrize("held", [None, (100, 200)], ids=["no-sack", "below-una"])
def test_without_a_range_beyond_una_everything_outstanding_goes_again(held):
    # No range reported, or one the ACK has passed: the timeout resends from 250 in
    # segments, and the ACK of 500 lets the rest go.
    sent, skips, resent = go_back([(250, held), (500, held)])
    assert sent == [(250, 250), (500, 250), (750, 250)]
    assert skips == 0 and resent == 750
