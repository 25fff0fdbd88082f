"""TxEngine (beehive/proto/tcp/tx.py) alone, the receive tile (its events and its record of the
flow), the emitter, the send buffer and the application played by the testbench: an open event
makes the flow's turn send the SYN-ACK (ISS, the receive tile's rcv_nxt, the SYN options);
once established, data the application writes (TCP_TX_ADJUST_PTR) leaves as a data segment
with the load of its bytes from the flow's send ring; a request for a flow that is not open is
answered CLOSED and counted."""

from apiary.stream.testbench import simulate, stream_put
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import SLOT_BITS, Status
from beehive.proto.tcp.header import ACK, MAX_TX_HEADER_BYTES, PSH, SYN, TCP_HEADER_BYTES
from beehive.proto.tcp.state import ConnState
from beehive.proto.tcp.tx import TxEngine

CONFIG = TcpConfig(flows=8, rx_ring=4096, tx_ring=4096, tx_base=1 << 20)
SLOT, GEN, ISS, IRS = 2, 1, 7000, 5000


def record(state):
    """The receive tile's record of the flow."""
    return {"state": state, "gen": GEN, "peer_ip": 0x0A00_0001, "peer_port": 40000,
            "local_port": 7, "peer_mac": 0x02_00_00_00_00_01, "iss": ISS, "irs": IRS,
            "rcv_nxt": IRS + 1, "rx_head": IRS + 1, "snd_wnd": 65535,
            "snd_una": ISS if state == ConnState.SYN_RCVD else ISS + 1,
            "peer_mss": 1460}


def fields(header):
    """seq, ack, flags of a segment's header bytes (lane order)."""
    raw = int(header).to_bytes(MAX_TX_HEADER_BYTES, "little")
    return (int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:12], "big"), raw[13])


def test_open_then_data_then_a_closed_flow():
    dut = TxEngine(CONFIG, load_depth=4, here=(3, 1), tx_mem=(2, 3))
    segments, loads, answers = [], [], []

    async def neighbours(ctx):
        for s in (dut.segments, dut.loads, dut.answers, dut.wires.tx_event):
            ctx.set(s.ready, 1)
        async for _, _, *got in ctx.tick().sample(
                dut.segments.valid, dut.segments.payload, dut.loads.valid, dut.loads.payload,
                dut.answers.valid, dut.answers.payload):
            if got[0]:
                segments.append(got[1])
            if got[2]:
                loads.append(got[3])
            if got[4]:
                answers.append(got[5])

    async def bench(ctx):
        assert (ctx.get(dut.wires.tx_x), ctx.get(dut.wires.tx_mem_y)) == (3, 3)
        ctx.set(dut.wires.rx_read_data, record(ConnState.SYN_RCVD))
        await stream_put(ctx, dut.wires.rx_event, {"slot": SLOT, "gen": GEN, "open": 1,
                                                   "seq": ISS, "app_x": 3, "app_y": 2})
        await ctx.tick().repeat(10)
        (synack,) = segments
        assert fields(synack.header) == (ISS, IRS + 1, SYN | ACK)
        # With SACK configured (the default) every SYN has a 32-byte header: this peer's record
        # offered no SACK, so four NOPs end its options.
        assert synack.header_len == MAX_TX_HEADER_BYTES and not synack.has_data
        raw = int(synack.header).to_bytes(MAX_TX_HEADER_BYTES, "little")
        assert raw[TCP_HEADER_BYTES + 8:] == bytes([1, 1, 1, 1])
        # Established: the application writes 300 bytes; they go at once.
        ctx.set(dut.wires.rx_read_data, record(ConnState.ESTABLISHED))
        await stream_put(ctx, dut.app, {"msg_type": MsgType.TCP_TX_ADJUST_PTR.value,
                                        "x": 3, "y": 2, "meta": {
                                            "flow": SLOT | GEN << SLOT_BITS, "ptr": 300}})
        await ctx.tick().repeat(10)
        data = segments[1]
        assert fields(data.header) == (ISS + 1, IRS + 1, ACK | PSH)
        assert data.data_len == 300 and data.has_data
        (load,) = loads
        assert load.addr == CONFIG.tx_base + SLOT * CONFIG.tx_ring + (ISS + 1) % 4096
        assert (load.size, load.wrap) == (300, 12)
        assert ctx.get(dut.counters.data_segments) == 1
        # A request for another slot, never opened: CLOSED, counted.
        await stream_put(ctx, dut.app, {"msg_type": MsgType.TCP_TX_MSG_REQ.value, "x": 4,
                                        "y": 2, "meta": {"flow": 5 | GEN << SLOT_BITS}})
        await ctx.tick().repeat(4)
        (answer,) = answers
        assert (answer.x, answer.meta.status) == (4, Status.CLOSED)
        assert ctx.get(dut.counters.app_bad) == 1

    simulate(dut, bench, background=[neighbours], timeout=500)
