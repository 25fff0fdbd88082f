"""RFC 6298 in the transmit engine (beehive/proto/tcp/tx.py) against the reference written from
the RFC (tests/tcp/rto_model.py): one scripted connection, the engine alone in Amaranth's
simulator (fast tier). The peer acknowledges each timed segment after a chosen number of ticks;
after every ACK the engine's SRTT, RTTVAR and RTO (its RttEstimator's) equal the reference's, a
retransmission is never timed (Karn), and the timer expires exactly the RTO in force at the last
ACK after it."""

from apiary.stream.testbench import simulate, stream_put
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import SLOT_BITS
from beehive.proto.tcp.state import ConnState
from beehive.proto.tcp.tx import TxEngine

from newreno_model import MOD, seq_lt
from rto_model import Rto
from test_newreno import GEN, ISS, SLOT, record

TICK = 64
CONFIG = TcpConfig(flows=8, rx_ring=8192, tx_ring=8192, tx_base=1 << 20, initial_window=4,
                   rto=64 * TICK, rto_min=4 * TICK, tick=TICK)
#: Ticks from the timed segment's sending to its ACK, one sample each: a first sample, steady
#: ones, jumps up (RTTVAR grows), drops, samples of 0 and 1 tick (RTO at its floor). Each is
#: cut to 2 ticks below the timeout in force, so that the ACK comes before the timer expires.
DELAYS = (6, 6, 7, 12, 3, 2, 16, 1, 0, 0, 1, 5)


def test_the_timeout_equals_the_rfc_reference_sample_by_sample():
    dut = TxEngine(CONFIG, load_depth=4, here=(3, 1), tx_mem=(2, 3))
    ref = Rto(CONFIG.ticks(CONFIG.rto), CONFIG.ticks(CONFIG.rto_floor),
              CONFIG.ticks(CONFIG.rto_ceiling))
    clock = {"cycle": 0, "end": None}
    compared = []

    def tick():
        return clock["cycle"] // TICK           # the engine's timer (it counts from reset)

    async def neighbours(ctx):
        """Every output taken; each load's data sent 3 cycles after it; each data segment
        told to the reference, a retransmission if it starts below what was sent before."""
        for s in (dut.segments, dut.loads, dut.answers, dut.wires.tx_event):
            ctx.set(s.ready, 1)
        done = []
        async for _, _, loaded, sent, seg in ctx.tick().sample(
                dut.loads.valid, dut.segments.valid, dut.segments.payload):
            if sent and seg.data_len:
                header = int(seg.header).to_bytes(32, "little")
                seq = int.from_bytes(header[4:8], "big")
                end = (seq + int(seg.data_len)) % MOD
                again = clock["end"] is not None and seq_lt(seq, clock["end"])
                ref.sent(end, tick(), again)
                if not again:
                    clock["end"] = end
            done = [d - 1 for d in done] + ([3] if loaded else [])
            ctx.set(dut.load_done, 0 in done)
            done = [d for d in done if d > 0]
            clock["cycle"] += 1

    async def bench(ctx):
        ctx.set(dut.wires.tx_read_addr, SLOT)
        ctx.set(dut.rtt.peek_addr, SLOT)

        async def state():
            await ctx.tick().repeat(2)
            return ctx.get(dut.wires.tx_read_data)

        async def write(una):
            await stream_put(ctx, dut.app, {"msg_type": MsgType.TCP_TX_ADJUST_PTR.value,
                                            "x": 3, "y": 2, "meta": {
                                                "flow": SLOT | GEN << SLOT_BITS,
                                                "ptr": (una + 4000) % MOD}})

        async def rx_event(**fields):
            await stream_put(ctx, dut.wires.rx_event, {"slot": SLOT, "gen": GEN, **fields})

        async def at_tick(target):
            """Until tick ``target`` (or now, if later), away from the tick's edges."""
            while tick() < target or clock["cycle"] % TICK not in range(8, 40):
                await ctx.tick()

        async def ack(to, event):
            ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, to))
            clock["armed_with"] = ref.timeout       # the ACK restarts the timer with it
            sample = ref.acked(to, tick())
            await rx_event(acked=1, ack=to)
            await write(to)
            await ctx.tick().repeat(40)
            s = await state()
            est = ctx.get(dut.rtt.peek)
            got = (int(est.srtt), int(est.rttvar), int(est.rto))
            want = (ref.srtt8, ref.rttvar4, ref.rto)
            compared.append((event, sample, got))
            assert got == want, (f"after {event} (sample {sample}): engine (SRTT/8, RTTVAR/4, "
                                 f"RTO) {got}, RFC 6298's {want}")
            return s, sample

        ctx.set(dut.wires.rx_read_data, record(ConnState.SYN_RCVD, ISS))
        await rx_event(open=1, seq=ISS, app_x=3, app_y=2)
        ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, (ISS + 1) % MOD))
        await write((ISS + 1) % MOD)
        await ctx.tick().repeat(40)
        await state()
        assert int(ctx.get(dut.rtt.peek).rto) == 0  # no sample yet: the initial timeout

        for k, delay in enumerate(DELAYS):
            end, sent_at = ref.timed
            delay = min(delay, ref.timeout - 2)
            await at_tick(sent_at + delay)
            s, sample = await ack(end, f"sample {k + 1}")
            assert sample >= delay
        rtos = [got[2] for _, _, got in compared]
        assert any(b > a for a, b in zip(rtos, rtos[1:]))       # it rose with a long sample
        assert any(b < a for a, b in zip(rtos, rtos[1:]))       # and fell with short ones

        # Nothing more is acknowledged: the timer expires the RTO in force at the last ACK after
        # it, and what is resent is not timed, so its ACK changes nothing (Karn).
        last_ack = tick() - 1                     # (the ACK was taken in the tick before)
        while not (await state()).retries:
            await ctx.tick().repeat(4)
        assert tick() - last_ack in (clock["armed_with"], clock["armed_with"] + 1)
        ref.timed_out()
        await ctx.tick().repeat(100)                # the oldest segment resent
        s = await state()
        assert not s.rtt_timing
        before = (ref.srtt8, ref.rttvar4, ref.rto)
        s, sample = await ack((int(s.snd_una) + 1) % MOD, "an ACK after the retransmission")
        assert sample is None and (ref.srtt8, ref.rttvar4, ref.rto) == before

    simulate(dut, bench, background=[neighbours], timeout=120_000)
    assert len(compared) == len(DELAYS) + 1
