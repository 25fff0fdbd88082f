"""TcpDatagramTile (beehive/apps/tcp_datagram.py) on its own in Amaranth's simulator, at 64 and
512 bits, against tests/apps/tcp_model.py playing the TCP engine and its memory tiles (which
checks every engine and memory request the tile makes) and a Python datagram application that
answers each request after a random delay: the replies written to the send rings must be
exactly the records of the application's answers, in order, on every connection; every
error closes its connection and is counted, and the next connection is served."""

import random
from collections import deque

import pytest

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.tile import Endpoint
from beehive.apps.tcp_datagram import (DATAGRAM_FBITS, KEY_APP, TcpDatagramTile, record,
                                       split_records)
from beehive.proto.ipv4 import IpProtocol
from beehive.proto.messages import PACKET_META, MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import handle_slot
from tcp_model import TcpEngineModel, beside_a_frozen_peer
from test_tcp_apps import APP, CONFIG, RX, RX_MEM, TX, TX_MEM, app_env, closed, run

WIDTHS = [64, 512]
APP_TILE = (0, 1)               # the datagram application
MAX_RECORD = CONFIG.rx_ring - 2


def answer(payload: bytes) -> bytes:
    """What the application answers: the request reversed, then its length (so replies and
    requests differ in length and content)."""
    return payload[::-1] + len(payload).to_bytes(2, "big")


class DatagramModel(TcpEngineModel):
    """The engine model, and the datagram application at :data:`APP_TILE`: each
    ``UDP_RX_SEGMENT`` is checked and answered ``delay`` cycles later (a random number in
    ``delays``, plus ``late(payload)``) with ``reply(payload)`` and the request's metadata."""

    def __init__(self, *args, delays=(0, 40), reply=answer, late=lambda payload: 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.queues["app"] = deque()
        self.delays, self.reply, self.late = delays, reply, late
        self.pending: list = []             # (due cycle, flits)
        self.requests: list = []            # (flow handle, payload) of each request

    def tick(self):
        super().tick()
        due = [p for p in self.pending if p[0] <= self.cycle]
        for item in due:
            self.pending.remove(item)
            self.queues["app"].append((item[1], None))

    def receive(self, flits):
        header = Message.from_flits(flits, self.width).header
        if header.msg_type != MsgType.UDP_RX_SEGMENT.value:
            return super().receive(flits)
        header, meta, payload = decode_meta_message(flits, self.width, PACKET_META.size)
        fields = PACKET_META.unpack(meta)
        assert (header.dst_x, header.dst_y, header.dst_fbits) == (*APP_TILE, Fbits.LOCAL0)
        assert (header.src_x, header.src_y, header.src_fbits) == (*APP, DATAGRAM_FBITS)
        handle = fields["peer_mac"] & 0xFFFF
        flow = self.flows[handle_slot(handle)]
        assert flow.handle == handle
        assert fields["protocol"] == IpProtocol.TCP.value
        assert (fields["peer_ip"], fields["peer_port"], fields["local_port"]) == flow.peer
        self.requests.append((handle, payload))
        reply = NocHeader(dst_x=APP[0], dst_y=APP[1], dst_fbits=DATAGRAM_FBITS,
                          src_x=APP_TILE[0], src_y=APP_TILE[1],
                          msg_type=MsgType.UDP_TX_SEGMENT.value)
        due = self.cycle + self.rng.randint(*self.delays) + self.late(payload)
        self.pending.append((due, meta_message_flits(
            self.width, reply, meta, PACKET_META.size, self.reply(payload))))
        return None

    def idle(self):
        return super().idle() and not self.pending


def bridge(width, **kw):
    env = app_env(width, **{KEY_APP: [Endpoint("app", *APP_TILE)]})
    return TcpDatagramTile(env, config=CONFIG, **kw)


def model_for(width, seed, **options):
    return DatagramModel(CONFIG, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                         rng=random.Random(3000 + seed), **options)


def test_records_pack_and_split():
    stream = record(b"abc") + record(b"") + record(bytes(300)) + b"\x00\x05ab"
    records, rest = split_records(stream)
    assert records == [b"abc", b"", bytes(300)] and rest == b"\x00\x05ab"
    with pytest.raises(ValueError, match="65535"):
        record(bytes(1 << 16))


def test_tile_checks_its_parameters_and_routes():
    with pytest.raises(ValueError, match="max_record must be an integer from 1 to 254"):
        bridge(64, max_record=255)
    with pytest.raises(ValueError, match="needs a route to its application with key 'app'"):
        TcpDatagramTile(app_env(64), config=CONFIG)
    assert TcpDatagramTile(config=CONFIG).max_record == MAX_RECORD


@pytest.mark.parametrize("width", WIDTHS)
def test_records_are_answered_in_order_on_every_connection(width):
    """Three connections at once, each with records of 0 to 200 bytes (one of 2 bytes, as long
    as the length prefix, on each; the rings wrap, a record arrives in pieces) and then FIN:
    each gets exactly the records of the application's answers, in order, and is closed; the
    application sees each request whole, with its connection's peer."""
    rng = random.Random(width)
    model = model_for(width, 1, burst=48)
    plans = {slot: [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 90, 200])))
                    for _ in range(6)] + [b"\xab\xcd"] for slot in range(3)}
    flows = {}

    def script(model):
        if model.cycle == 5:
            for slot, records in plans.items():
                flows[slot] = model.announce(slot, 1 + slot, peer=(0x0A000001 + slot,
                                                                    5000 + slot, 7200))
                model.deliver(flows[slot], b"".join(map(record, records)), fin=True)

    counters, _ = run(bridge(width), model, seed=width, script=script,
                      until=lambda m: len(flows) == 3 and all(map(closed, flows.values())),
                      timeout=200_000)
    for slot, records in plans.items():
        assert model.written(flows[slot]) == b"".join(record(answer(r)) for r in records)
        assert [p for h, p in model.requests if h == flows[slot].handle] == records
    assert counters["records"] == 21 and counters["closed"] == 3 and counters["flows"] == 3
    assert all(counters[k] == 0 for k in ("oversized", "truncated", "timeouts", "bad_replies",
                                          "mem_errors", "dropped", "ended"))


@pytest.mark.parametrize("width", WIDTHS)
def test_errors_close_their_connection_and_are_counted(width):
    """An oversized record, a record cut by FIN, a reply longer than ``max_record`` and a
    request never answered in time each close their own connection (after the records before
    them are answered) and count once, while the other connections are served; a reply that
    comes after its timeout is dropped."""
    rng = random.Random(7)
    good = [bytes(rng.getrandbits(8) for _ in range(n)) for n in (5, 40)]

    def reply(payload):
        if payload == b"too long":
            return bytes(MAX_RECORD + 1)
        return answer(payload)

    model = model_for(width, 2, delays=(0, 10), reply=reply,
                      late=lambda payload: 3000 if payload == b"slow" else 0)
    flows = {}
    streams = {
        0: b"".join(map(record, good)) + (MAX_RECORD + 1).to_bytes(2, "big") + bytes(20),
        1: record(good[0]) + record(b"cut short")[:6],
        2: record(good[1]) + record(b"too long"),
        3: record(b"slow"),
    }

    def script(model):
        if model.cycle == 5:
            for slot, stream in streams.items():
                flows[slot] = model.announce(slot, 2)
                model.deliver(flows[slot], stream, fin=slot == 1)

    def done(model):
        return len(flows) == 4 and all(closed(flows[s]) for s in range(4)) and model.idle()

    tile = bridge(width, reply_timeout=500)
    counters, _ = run(tile, model, seed=width + 1, script=script, until=done, timeout=300_000,
                      settle=4000)
    assert model.written(flows[0]) == b"".join(record(answer(r)) for r in good)
    assert model.written(flows[1]) == record(answer(good[0]))
    assert model.written(flows[2]) == record(answer(good[1]))
    assert model.written(flows[3]) == b""
    assert {k: counters[k] for k in ("oversized", "truncated", "bad_replies", "timeouts",
                                     "closed", "records", "dropped")} == {
        "oversized": 1, "truncated": 1, "bad_replies": 1, "timeouts": 1, "closed": 4,
        "records": 4, "dropped": 1}


def records_beside_a_frozen_peer(width, frozen, records=8):
    """Cycles connection A takes from its records' arrival (all at once, with FIN) to its
    close, alone or (``frozen``) beside connection B, whose peer stops reading: B's send ring
    holds ten replies, its eleventh record waits for room. A's records come once B's
    ``TCP_TX_MSG_REQ`` has waited 50 cycles; the application answers each in 5 cycles, memory
    acks come at once, no gaps or stalls. Returns ``(cycles, model, flows)``."""
    config = TcpConfig(flows=4, rx_ring=2048, tx_ring=1024, mss=64)
    model = DatagramModel(config, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                          rng=random.Random(5), delays=(5, 5), burst=4096, arrive=1.0, read=1.0)
    rng = random.Random(width)
    plans = {name: [rng.randbytes(90) for _ in range(n)] for name, n in (("A", records),
                                                                           ("B", 12))}
    flows, s, script = beside_a_frozen_peer(
        model, frozen, b"".join(map(record, plans["A"])), b"".join(map(record, plans["B"])))

    tile = TcpDatagramTile(app_env(width, **{KEY_APP: [Endpoint("app", *APP_TILE)]}),
                           config=config, max_record=100)
    counters, stats = run(tile, model, seed=1, script=script,
                          until=lambda m: closed(flows["A"]), timeout=100_000, gaps=0.0,
                          stall=0.0, settle=10)
    assert model.written(flows["A"]) == b"".join(record(answer(r)) for r in plans["A"])
    if frozen:
        b = flows["B"]
        assert model.written(b) == b"".join(record(answer(r)) for r in plans["B"][:10])
        assert s.b_waits()
    assert counters["records"] == records + 10 * frozen
    return stats.cycles - s.start, model, flows


@pytest.mark.parametrize("width", WIDTHS)
def test_a_frozen_peer_holds_no_other_connection_up(width):
    """Issue 38's frozen peer: B's peer stops reading, B's next record waits for room for its
    reply; A's records, sent meanwhile, are all answered (and A closed) in the same number of
    cycles as with A alone."""
    alone, _, _ = records_beside_a_frozen_peer(width, frozen=False)
    beside, _, _ = records_beside_a_frozen_peer(width, frozen=True)
    print(f"{width} bits: A alone {alone} cycles, beside frozen B {beside}")
    assert beside <= alone * 1.01, (alone, beside)


# -- the whole design: the controller over TCP and UDP (examples/tcp_ctl.py) ----------------------

class PeerTransport:
    """A :class:`~beehive.control_client.ControlClient` transport over a scapy TCP connection
    into the simulation (:class:`~harness.bench.tcp_peer.Peer`, connected): each request is
    sent as a record, and the simulation runs until the reply's record is in."""

    def __init__(self, peer, *, cycles=500, rounds=200):
        self.peer, self.cycles, self.rounds = peer, cycles, rounds
        self.taken = 0                  # bytes of the peer's stream taken as replies

    def __call__(self, request):
        from beehive.control_client import ControlError
        self.peer.send_data(record(request))
        for _ in range(self.rounds):
            self.peer.run(self.cycles)
            replies, _ = split_records(bytes(self.peer.stream[self.taken:]))
            if replies:
                self.taken += len(record(replies[0]))
                return replies[0]
        raise ControlError(f"no reply over TCP within {self.rounds * self.cycles} cycles")


#: Small and quick (as tests/tcp): 8 flows, 4 KiB rings, a 20,000-cycle RTO.
TCP_TEST = dict(flows=8, ring=4096, rto=20_000, linger=30_000, syn_retries=2, max_retries=3)


def whole_design(width):
    """examples/tcp_ctl.py: counters read, a register written and a bad request answered over
    two TCP connections and over UDP in one simulation, each reply on its own transport; a
    record too long for the controller closes its connection; a connection the client closes
    is closed; every counter read over TCP (a request per tile)."""
    from apiary.load import load_design
    from apiary.sim import open_sim
    from apiary.top import control_map
    from beehive.apps.controller import CONTROL_PORT, STATUS_BAD_REQUEST, parse_reply
    from harness.bench.tcp_peer import Peer
    from beehive.control_client import ControlClient, SimTransport

    d = load_design("examples/tcp_ctl.py", width=width, **TCP_TEST)
    dmap = control_map(d)
    with open_sim(d, "verilator") as sim:
        first, second = (Peer(sim, sport=sport, dport=CONTROL_PORT) for sport in (41000, 41001))
        first.connect()
        second.connect()
        tcp_first = PeerTransport(first)
        over_tcp = ControlClient(dmap, tcp_first)
        over_udp = ControlClient(dmap, SimTransport(sim))
        # Each read of ctl_tcp.records is served before its own record counts: 0, 1, 2, ...
        assert [over_tcp.read("ctl_tcp.records") for _ in range(3)] == [0, 1, 2]
        assert over_udp.read("ctl_tcp.records") == 3
        over_second = ControlClient(dmap, PeerTransport(second))
        # Every counter over the second connection: a request per tile, in the map's order.
        every = over_second.counters()
        order = [t.name for t in dmap if t.of_kind("counter")]
        assert every["ctl_tcp.flows"] == 2 and every["tcp_rx.bad_checksum"] == 0
        assert every["ctl_tcp.records"] == 3 + order.index("ctl_tcp")
        assert every["ctl.requests"] == 5 + order.index("ctl")    # (counted as read)
        assert set(every) == {f"{t.name}.{e.name}" for t in dmap
                              for e in t.of_kind("counter")}
        # A register: written over TCP, read back over UDP.
        over_second.write("ctl_tcp.reply_timeout", 12345)
        assert over_udp.read("ctl_tcp.reply_timeout") == 12345
        # A malformed request gets the controller's 8-byte BAD_REQUEST reply, over TCP.
        bad = parse_reply(tcp_first(b"\x09" + bytes(7)))
        assert bad.status == STATUS_BAD_REQUEST
        # A record longer than the tile takes: the design closes that connection.
        first.send_data((600).to_bytes(2, "big") + bytes(100))
        until_fin(first)
        # The client closes the other: the design answers with its own FIN.
        second.send("FA")
        second.snd_nxt += 1
        until_fin(second)
        counters = {name: over_udp.read(name) for name in (
            "ctl_tcp.oversized", "ctl_tcp.closed", "ctl.bad_request", "ctl_tcp.dropped")}
        assert counters == {"ctl_tcp.oversized": 1, "ctl_tcp.closed": 2, "ctl.bad_request": 1,
                            "ctl_tcp.dropped": 0}


def until_fin(peer, step=1000, most=20_000):
    """Run until the design's FIN reaches ``peer`` (``most`` cycles at most)."""
    for _ in range(most // step):
        peer.run(step)
        if peer.fin:
            return
    raise AssertionError(f"no FIN from the design in {most} cycles: {peer.seen[-3:]!r}")


@pytest.mark.slow
def test_whole_design_verilator():
    """Verilator, 64-bit data plane (a 512-bit model of this 16-tile design costs minutes of
    build per CI run; the tile is tested at 512 bits above)."""
    whole_design(64)
