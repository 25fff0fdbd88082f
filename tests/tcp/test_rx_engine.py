"""RxEngine (beehive/proto/tcp/rx.py) alone, its segments offered as SegmentHead would (scapy
headers), the transmit tile, the receive buffer and the application played by the testbench: a
SYN to a port someone listens on opens a half-open connection (an open event with the ISS and
the listener), its ACK establishes it; in-order data becomes a store of its new bytes into the
flow's ring (the header cut) whose acknowledgement commits it (an ACK event and the new-flow
notification to the application); a SYN to a closed port and a segment of no connection are
answered with resets, and counted."""

from scapy.layers.inet import TCP

from apiary.noc.nexthop import Endpoint
from apiary.stream.testbench import simulate
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import Status, flow_handle
from beehive.proto.tcp.header import ACK, MAX_HEADER_BYTES, RST
from beehive.proto.tcp.rx import RxEngine

CONFIG = TcpConfig(flows=8, rx_ring=4096, tx_ring=4096)
APP = Endpoint("app", 3, 2, 1)
PEER_IP, PEER_MAC = 0x0A00_0001, 0x02_00_00_00_00_01


def engine():
    return RxEngine(CONFIG, ports={7: [APP]}, rx_mem=(3, 3))


class Bench:
    """The engine's neighbours: every event, store and message it offers is taken and logged."""

    def __init__(self, dut):
        self.dut = dut
        self.events, self.stores, self.messages = [], [], []

    def background(self):
        dut = self.dut

        async def take(ctx):
            for s in (dut.wires.rx_event, dut.stores, dut.messages, dut.resolve):
                ctx.set(s.ready, 1)
            async for _, _, *got in ctx.tick().sample(
                    dut.wires.rx_event.valid, dut.wires.rx_event.payload, dut.stores.valid,
                    dut.stores.payload, dut.messages.valid, dut.messages.payload):
                ev_valid, ev, st_valid, st, msg_valid, msg = got
                if ev_valid:
                    self.events.append(ev)
                if st_valid:
                    self.stores.append(st)
                if msg_valid:
                    self.messages.append(msg)
        return [take]

    async def segment(self, ctx, tcp, *, mss=None, ws=None):
        """Offer a segment (a scapy TCP layer) until the verdict; returns ``keep``."""
        raw = bytes(tcp)
        head = raw[:MAX_HEADER_BYTES]
        ctx.set(self.dut.segment.payload, {
            "packet": {"length": len(raw), "meta": {"peer_ip": PEER_IP, "peer_mac": PEER_MAC}},
            "head": int.from_bytes(head.ljust(MAX_HEADER_BYTES, b"\0"), "little"),
            "head_len": len(head), "mss": mss or 0, "has_mss": mss is not None,
            "ws": ws or 0, "has_ws": ws is not None})
        ctx.set(self.dut.segment.valid, 1)
        *_, keep = await ctx.tick().sample(self.dut.keep).until(self.dut.segment.ready)
        ctx.set(self.dut.segment.valid, 0)
        await ctx.tick().repeat(4)
        return keep


def test_a_connection_opens_and_its_data_is_stored_then_committed():
    dut = engine()
    bench = Bench(dut)

    async def run(ctx):
        keep = await bench.segment(ctx, TCP(sport=40000, dport=7, flags="S", seq=1000),
                                   mss=1400, ws=7)
        assert not keep
        (ev,) = bench.events
        assert ev.open and not ev.active and (ev.app_x, ev.app_y, ev.app_fbits) == (3, 2, 1)
        iss = ev.seq
        # The handshake's ACK establishes it (nothing is sent yet: the transmit tile's record,
        # on tx_read_data, is all zero, so snd_max is the ISS + 1).
        await bench.segment(ctx, TCP(sport=40000, dport=7, flags="A", seq=1001, ack=iss + 1))
        assert ctx.get(dut.counters.opened) == 1
        # In-order data: its bytes (not its header) go to the flow's ring, at once.
        tcp = TCP(sport=40000, dport=7, flags="PA", seq=1001, ack=iss + 1) / (b"x" * 100)
        assert await bench.segment(ctx, tcp)
        (store,) = bench.stores
        slot = ev.slot
        assert store.store.addr == CONFIG.rx_base + slot * CONFIG.rx_ring + 1001 % 4096
        assert (store.store.size, store.store.wrap, store.cut) == (100, 12, 20)
        assert ctx.get(dut.counters.stored) == 1
        # Committed when the memory acknowledges the store: an ACK, and the application hears
        # of the connection (its receive buffer first).
        events = len(bench.events)
        ctx.set(dut.acked, 1)
        await ctx.tick()
        ctx.set(dut.acked, 0)
        await ctx.tick().repeat(8)
        assert any(e.ack_now for e in bench.events[events:])
        notes = [m for m in bench.messages if m.msg_type == MsgType.TCP_NEW_FLOW_NOTIF.value]
        assert notes and notes[0].meta.status == Status.OK
        assert (notes[0].x, notes[0].y, notes[0].fbits) == (3, 2, 1)
        assert notes[0].meta.peer_port == 40000 and notes[0].meta.local_port == 7

    simulate(dut, run, background=bench.background(), timeout=500)


def test_segments_of_no_connection_are_answered_with_resets():
    dut = engine()
    bench = Bench(dut)

    async def run(ctx):
        await bench.segment(ctx, TCP(sport=40001, dport=80, flags="S", seq=5000))
        await bench.segment(ctx, TCP(sport=40002, dport=7, flags="A", seq=7000, ack=1234))
        rst_syn, rst_ack = bench.events
        assert rst_syn.rst and rst_syn.rst_flags == RST | ACK and rst_syn.ack == 5001
        assert rst_syn.seq == 0 and (rst_syn.peer_port, rst_syn.local_port) == (40001, 80)
        assert rst_ack.rst and rst_ack.rst_flags == RST and rst_ack.seq == 1234
        assert ctx.get(dut.counters.no_listener) == 1 and ctx.get(dut.counters.no_flow) == 1
        assert not bench.stores and not bench.messages

    simulate(dut, run, background=bench.background(), timeout=500)


def test_a_burst_of_connects_fills_every_slot_of_a_small_engine():
    """Four flows: four SYNs back to back each open a half-open connection (the default
    half-open bound is every slot of a small engine), a fifth finds no slot and is dropped
    and counted; with ``max_half_open=1`` the second is dropped and counted already."""
    for max_half_open, opened in ((None, 4), (1, 1)):
        config = TcpConfig(flows=4, rx_ring=4096, tx_ring=4096, max_half_open=max_half_open)
        assert config.half_open == opened
        burst_of_syns(RxEngine(config, ports={7: [APP]}, rx_mem=(3, 3)), 5, opened)


def burst_of_syns(dut, syns, opened):
    """Offer ``syns`` SYNs from as many ports back to back: ``opened`` open connections in
    slots of their own, the rest dropped and counted."""
    bench = Bench(dut)

    async def run(ctx):
        for i in range(syns):
            await bench.segment(ctx, TCP(sport=41000 + i, dport=7, flags="S", seq=i << 20))
        opens = [ev for ev in bench.events if ev.open]
        assert sorted(ev.slot for ev in opens) == list(range(opened))
        assert ctx.get(dut.counters.syn_dropped) == syns - opened

    simulate(dut, run, background=bench.background(), timeout=800)


async def request(ctx, dut, msg_type, x=5, y=6, fbits=2, **meta):
    """An application's request (as the tile's request queue offers it), taken."""
    ctx.set(dut.app.payload, {"msg_type": msg_type.value, "x": x, "y": y, "fbits": fbits,
                              "meta": meta})
    ctx.set(dut.app.valid, 1)
    await ctx.tick().until(dut.app.ready)
    ctx.set(dut.app.valid, 0)
    await ctx.tick().repeat(8)


def test_the_peer_of_a_flow_is_told_to_its_application_and_not_for_a_stale_handle():
    """TCP_PEER_REQ: answered in the flow's turn to the flow's application with the tuple; for a
    handle of another generation, or of a connection never announced, CLOSED to the asker."""
    dut = engine()
    bench = Bench(dut)

    async def run(ctx):
        await bench.segment(ctx, TCP(sport=40007, dport=7, flags="S", seq=1000))
        (ev,) = bench.events
        iss, slot, gen = ev.seq, ev.slot, ev.gen
        # Half-open: nobody was told of the flow yet.
        await request(ctx, dut, MsgType.TCP_PEER_REQ, flow=flow_handle(slot, gen))
        (early,) = bench.messages
        assert early.msg_type == MsgType.TCP_PEER_RESP.value
        assert early.meta.status == Status.CLOSED and (early.x, early.y, early.fbits) == (5, 6, 2)
        # Established: announced (both rings), then asked about with its handle and a stale one.
        await bench.segment(ctx, TCP(sport=40007, dport=7, flags="A", seq=1001, ack=iss + 1))
        del bench.messages[:]
        await request(ctx, dut, MsgType.TCP_PEER_REQ, flow=flow_handle(slot, gen))
        await request(ctx, dut, MsgType.TCP_PEER_REQ, flow=flow_handle(slot, gen + 1))
        answers = [m for m in bench.messages if m.msg_type == MsgType.TCP_PEER_RESP.value]
        ours, stale = (sorted(answers, key=lambda m: m.meta.status))
        assert ours.meta.status == Status.OK and ours.meta.flow == flow_handle(slot, gen)
        assert (ours.x, ours.y, ours.fbits) == (3, 2, 1)        # the flow's application
        assert ours.meta.peer_ip == PEER_IP and ours.meta.peer_port == 40007
        assert ours.meta.local_port == 7
        assert stale.meta.status == Status.CLOSED and (stale.x, stale.y) == (5, 6)
        assert stale.meta.peer_ip == 0 and stale.meta.peer_port == 0
        assert ctx.get(dut.counters.app_bad) == 2

    simulate(dut, run, background=bench.background(), timeout=800)
