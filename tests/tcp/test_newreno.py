"""NewReno in the transmit engine (beehive/proto/tcp/tx.py) against the reference written from
RFC 5681 and RFC 6582 (tests/tcp/newreno_model.py): one scripted connection, the engine alone
in Amaranth's simulator (fast tier), and after every ACK, duplicate ACK and timeout the
engine's cwnd, ssthresh, recovery point and recovery flag equal the reference's."""

from apiary.stream.testbench import simulate, stream_put
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import SLOT_BITS
from beehive.proto.tcp.state import ConnState
from beehive.proto.tcp.tx import TxEngine

from newreno_model import MOD, NewReno

SMSS = 100                   # the peer's MSS (below the engine's 1,460): small segments
CONFIG = TcpConfig(flows=8, rx_ring=8192, tx_ring=8192, tx_base=1 << 20, initial_window=4,
                   rto=4096, tick=64)
SLOT, GEN, ISS, IRS = 3, 1, 0xFFFF_FF00, 5000          # the sequence space wraps on the way


def record(state, snd_una):
    """The receive tile's record of the flow (what the engine reads of it)."""
    return {"state": state, "gen": GEN, "peer_ip": 0x0A00_0001, "peer_port": 40000,
            "local_port": 7, "peer_mac": 0x02_00_00_00_00_01, "iss": ISS, "irs": IRS,
            "rcv_nxt": IRS + 1, "rx_head": IRS + 1, "snd_wnd": 60000, "snd_una": snd_una,
            "peer_mss": SMSS}


def test_congestion_state_equals_the_rfc_reference_event_by_event():
    dut = TxEngine(CONFIG, load_depth=4, here=(3, 1), tx_mem=(2, 3))
    compared = []

    async def neighbours(ctx):
        """Every output taken; each load's data sent (``load_done``) 3 cycles after it."""
        for s in (dut.segments, dut.loads, dut.answers, dut.wires.tx_event):
            ctx.set(s.ready, 1)
        done = []
        async for _, _, loaded in ctx.tick().sample(dut.loads.valid):
            done = [d - 1 for d in done] + ([3] if loaded else [])
            ctx.set(dut.load_done, 0 in done)
            done = [d for d in done if d > 0]

    async def bench(ctx):
        ctx.set(dut.wires.tx_read_addr, SLOT)

        async def state():
            await ctx.tick().repeat(2)
            return ctx.get(dut.wires.tx_read_data)

        async def settle():
            """Until the engine has sent what its window lets it (no turn for 8 cycles)."""
            await ctx.tick().repeat(40)
            return await state()

        async def check(event):
            s = await settle()
            got = (s.cwnd, s.ssthresh, s.recover, bool(s.in_recovery))
            compared.append((event, got))
            assert got == ref.compared(), (f"after {event}: engine (cwnd, ssthresh, recover, "
                                           f"in recovery) {got}, the RFCs' {ref.compared()}")
            return s

        async def write(una):
            """The application keeps 7,000 bytes unacknowledged in the send ring."""
            await stream_put(ctx, dut.app, {"msg_type": MsgType.TCP_TX_ADJUST_PTR.value,
                                            "x": 3, "y": 2, "meta": {
                                                "flow": SLOT | GEN << SLOT_BITS,
                                                "ptr": (una + 7000) % MOD}})

        async def rx_event(**fields):
            await stream_put(ctx, dut.wires.rx_event, {"slot": SLOT, "gen": GEN, **fields})

        ctx.set(dut.wires.rx_read_data, record(ConnState.SYN_RCVD, ISS))
        await rx_event(open=1, seq=ISS, app_x=3, app_y=2)
        ref = NewReno.opened(CONFIG.mss, CONFIG.initial_window, ISS)  # (the engine's MSS: no
        s = await check("open")                                       # peer MSS known yet)
        ref.smss = SMSS
        ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, (ISS + 1) % MOD))
        await write((ISS + 1) % MOD)
        await settle()                                   # the initial window goes out

        async def ack(n):
            """The peer acknowledges ``n`` more segments of what is outstanding."""
            s = await state()
            una = int(s.snd_una)
            start = (ISS + 1) % MOD if una == ISS else una        # (the SYN is one byte)
            outstanding = (int(s.snd_max) - start) % MOD
            to = (start + min(n * SMSS, outstanding)) % MOD
            ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED, to))
            ref.new_ack(to, una)
            await rx_event(acked=1, ack=to)
            await write(to)
            return await check(f"ACK of {(to - ISS) % MOD}")

        async def dupack(count):
            s = await state()
            ref.duplicate_ack(count, int(s.snd_una), int(s.snd_max))
            await rx_event(dupacks=count, ack=int(s.snd_una))
            return await check(f"duplicate ACK {count}")

        # Slow start: the initial window, growing by SMSS per ACK.
        for _ in range(4):
            s = await ack(1)
        assert s.cwnd == 4 * CONFIG.mss + 4 * SMSS and not s.in_recovery
        # A loss: three duplicates enter fast recovery, two more inflate the window.
        for count in range(1, 6):
            s = await dupack(count)
        assert s.in_recovery and s.recover == s.snd_max
        # A partial ACK deflates; a full ACK leaves recovery with cwnd = ssthresh.
        s = await ack(2)
        assert s.in_recovery
        recover_distance = (int(s.recover) - int(s.snd_una)) % MOD
        s = await ack(recover_distance // SMSS + (recover_distance % SMSS > 0))
        assert not s.in_recovery and s.cwnd == s.ssthresh
        # Congestion avoidance: one SMSS per window's worth of bytes acknowledged.
        grown = int(s.cwnd)
        for _ in range(10):
            s = await ack(4)
        assert s.cwnd == grown + SMSS
        # A second loss, past the first's recovery point: recovery again, and a partial ACK.
        for count in range(1, 4):
            s = await dupack(count)
        s = await ack(2)
        assert s.in_recovery
        # Then nothing: the retransmission timer expires (ssthresh from the flight then).
        for _ in range(40):
            if (await state()).retries:
                break
            await ctx.tick().repeat(256)
        ref.timeout(int(s.snd_una), int(s.snd_max))
        s = await check("retransmission timeout")
        assert s.retries == 1 and s.cwnd == SMSS and not s.in_recovery

    simulate(dut, bench, background=[neighbours], timeout=60_000)
    assert len(compared) == 27            # every event compared
