"""TcpRsTile (beehive/apps/tcp_rs.py) on its own in Amaranth's simulator, at 64 and 512 bits,
against tests/apps/tcp_model.py playing the TCP engine and its memory tiles (it checks every
engine and memory request the tile makes), with seeded random gaps on the tile's input and
stalls on its output: each connection's send ring must receive exactly the parity shards of
its requests, in order, as ``encode_shards`` (checked against ``reedsolo`` in
tests/apps/test_reed_solomon.py) computes them."""

import random

import pytest

from apiary.noc.header import Fbits, Message
from apiary.os.memory_tile import LOAD_MEM_ACK, decode_mem_message, mem_message_flits
from beehive.apps.tcp_rs import DATA_SHARDS, PARITY_SHARDS, TcpRsTile, answer_stream
from beehive.proto.tcp import TcpConfig
from tcp_model import TcpEngineModel, beside_a_frozen_peer
from test_tcp_apps import APP, RX, RX_MEM, TX, TX_MEM, app_env, closed, run

WIDTHS = [64, 512]
CONFIG = TcpConfig(flows=4, rx_ring=1024, tx_ring=256, mss=64)


def rs_tile(width, shard_bytes, config=CONFIG):
    return TcpRsTile(app_env(width), config=config, shard_bytes=shard_bytes)


def model_for(width, seed, config=CONFIG, **options):
    return TcpEngineModel(config, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                          rng=random.Random(5000 + seed), **options)


def test_tile_checks_its_parameters():
    with pytest.raises(ValueError, match="shard_bytes must be a positive multiple of 64"):
        rs_tile(512, 32)
    with pytest.raises(ValueError, match="shard_bytes must be a positive multiple of 8"):
        rs_tile(64, 0)
    with pytest.raises(ValueError, match=r"must fit in a receive ring \(1024\)"):
        rs_tile(64, 136)
    tile = rs_tile(64, 128)
    assert (tile.request_bytes, tile.answer_bytes) == (1024, 256)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("width", WIDTHS)
def test_requests_are_answered_in_order_on_every_connection(width, seed):
    """Three connections at once, each 2 or 3 requests of random bytes in pieces (a random
    shard size), the rings wrapping; two then close (FIN) cleanly, the third's FIN comes in
    the middle of a request: every connection gets exactly the parity of its whole requests,
    in order, and is closed; the partial request is counted and dropped."""
    rng = random.Random(width + 100 * seed)
    nb = width // 8
    shard = nb * rng.choice([1, 2]) if width == 512 else nb * rng.choice([1, 3, 5])
    size = DATA_SHARDS * shard
    streams = {slot: rng.randbytes(size * (2 + slot % 2)) for slot in range(3)}
    streams[2] += rng.randbytes(size // 2 + 3)          # cut short by the FIN
    model = model_for(width, seed, burst=3 * nb)
    flows = {}

    def script(model):
        if model.cycle == 5:
            for slot, stream in streams.items():
                flows[slot] = model.announce(slot, 1 + slot)
                model.deliver(flows[slot], stream, fin=True)

    counters, stats = run(rs_tile(width, shard), model, seed=width + seed, script=script,
                          until=lambda m: len(flows) == 3 and all(map(closed, flows.values())),
                          timeout=60_000)
    assert stats.max_wait <= 2
    for slot, stream in streams.items():
        assert model.written(flows[slot]) == answer_stream(stream, shard), slot
    assert counters == {"flows": 3, "requests": 7, "closed": 3, "ended": 0, "truncated": 1,
                        "mem_errors": 0, "dropped": 0}


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reset_drops_its_request_and_the_others_go_on(width):
    """A connection whose peer never reads its answers is reset while its second request's
    room is awaited; its slot then holds a new connection, served like the third one, which
    runs throughout."""
    rng = random.Random(width + 7)
    shard = max(width // 8, 32)
    size = DATA_SHARDS * shard
    config = TcpConfig(flows=4, rx_ring=1024, tx_ring=2 * shard * 2, mss=64)
    model = model_for(width, 2, config, burst=64, arrive=0.3)
    data = {name: rng.randbytes(size * k) for name, k in (("A", 4), ("B", 3), ("B2", 2))}
    flows = {"A": model.announce(0, 1), "B": model.announce(1, 2)}
    flows["B"].drain = False
    model.deliver(flows["A"], data["A"], fin=True)
    model.deliver(flows["B"], data["B"])
    state = {"reset_at": None}

    def script(model):
        b = flows["B"]
        if b.state == "open" and b.tx_req is not None and model.cycle - b.tx_req_since > 60:
            model.reset(b)
            state["reset_at"], state["b_written"] = model.cycle, model.written(b)
        if "B2" not in flows and state["reset_at"] and model.cycle > state["reset_at"] + 30:
            flows["B2"] = model.announce(1, 3)
            model.deliver(flows["B2"], data["B2"], fin=True)

    counters, _ = run(rs_tile(width, shard, config), model, seed=width + 3, script=script,
                      until=lambda m: "B2" in flows and closed(flows["A"])
                      and closed(flows["B2"]), timeout=60_000)
    assert model.written(flows["A"]) == answer_stream(data["A"], shard)
    assert model.written(flows["B2"]) == answer_stream(data["B2"], shard)
    # B's ring holds two answers: the third request waits for room until the reset.
    assert state["b_written"] == answer_stream(data["B"][:2 * size], shard)
    assert counters == {"flows": 3, "requests": 8, "closed": 2, "ended": 1, "truncated": 0,
                        "mem_errors": 0, "dropped": 0}


class FailingModel(TcpEngineModel):
    """The engine model whose receive memory answers the first load from slot 0's ring with
    ``error`` set (and no bytes)."""

    failed = False

    def _to_mem(self, item):
        flits, delivered = item
        header, meta, _ = decode_mem_message(flits, self.width)
        ring0 = meta["addr"] // self.config.rx_ring == 0
        if header.msg_type == LOAD_MEM_ACK and ring0 and not self.failed:
            self.failed = True
            flits = mem_message_flits(self.width, LOAD_MEM_ACK, meta["addr"], meta["size"],
                                      dst=self.app, src=self.rx_mem, dst_fbits=Fbits.LOCAL1,
                                      wrap=meta["wrap"], error=1)
        return super()._to_mem((flits, delivered))


@pytest.mark.parametrize("width", WIDTHS)
def test_a_memory_error_closes_its_connection(width):
    """A load answered with ``error``: its connection is closed, nothing written to it, the
    error counted; the other connection is served throughout."""
    rng = random.Random(width + 11)
    shard = width // 8
    data = [rng.randbytes(DATA_SHARDS * shard * 2) for _ in range(2)]
    model = FailingModel(CONFIG, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                         rng=random.Random(4), burst=64, arrive=0.5)
    flows = [model.announce(slot, 1) for slot in range(2)]
    for flow, stream in zip(flows, data):
        model.deliver(flow, stream, fin=True)
    counters, _ = run(rs_tile(width, shard), model, seed=width + 5, script=lambda m: None,
                      until=lambda m: all(map(closed, flows)), timeout=60_000)
    assert model.failed and model.written(flows[0]) == b""
    assert model.written(flows[1]) == answer_stream(data[1], shard)
    assert counters == {"flows": 2, "requests": 2, "closed": 2, "ended": 0, "truncated": 0,
                        "mem_errors": 1, "dropped": 0}


class TimedModel(TcpEngineModel):
    """The engine model, noting the cycle each ``LOAD_MEM_ACK`` has wholly reached the tile."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loads_done: list[int] = []

    def _to_mem(self, item):
        flits, delivered = item
        if Message.from_flits(flits, self.width).header.msg_type != LOAD_MEM_ACK:
            return super()._to_mem(item)

        def done():
            self.loads_done.append(self.cycle)
            delivered()
        return super()._to_mem((flits, done))


def cycles_per_request(width, shard=512, connections=1, requests=4):
    """Cycles per request in the steady state: every request's bytes in the receive ring
    from the start, memory acks at once, no gaps or stalls at the tile's ports; the time
    between the first and the last request's bytes reaching the encoder, over the requests
    between them (the answers keep up: each is checked)."""
    size = DATA_SHARDS * shard

    def ring(n):
        return 1 << max(6, (n - 1).bit_length())
    config = TcpConfig(flows=4, rx_ring=ring(size * requests),
                       tx_ring=ring(2 * shard * requests), mss=64)
    model = TimedModel(config, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                       rng=random.Random(3), burst=size * requests, arrive=1.0, read=1.0)
    rng = random.Random(width)
    data = {slot: rng.randbytes(size * requests) for slot in range(connections)}
    flows = {slot: model.announce(slot, 1) for slot in data}
    for slot, stream in data.items():
        model.deliver(flows[slot], stream, fin=True)
    counters, _ = run(rs_tile(width, shard, config), model, seed=1, script=lambda m: None,
                      until=lambda m: all(map(closed, flows.values())), timeout=200_000,
                      gaps=0.0, stall=0.0, settle=10)
    for slot, stream in data.items():
        assert model.written(flows[slot]) == answer_stream(stream, shard)
    assert counters["requests"] == connections * requests
    done = model.loads_done
    return (done[-1] - done[0]) / (len(done) - 1)


class FlowTimedModel(TcpEngineModel):
    """The engine model, noting for each flow slot the cycles its ``LOAD_MEM_ACK`` have
    wholly reached the tile."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loads_done: dict[int, list[int]] = {}

    def _to_mem(self, item):
        flits, delivered = item
        header, meta, _ = decode_mem_message(flits, self.width)
        if header.msg_type != LOAD_MEM_ACK:
            return super()._to_mem(item)
        slot = (meta["addr"] - self.config.rx_base) // self.config.rx_ring

        def done():
            self.loads_done.setdefault(slot, []).append(self.cycle)
            delivered()
        return super()._to_mem((flits, done))


def requests_beside_a_frozen_peer(width, shard, frozen, requests=6):
    """Connection A's cycles per request (between its first and last request's bytes reaching
    the encoder), alone or (``frozen``) beside connection B, whose peer stops reading: B's
    send ring holds eight answers, its ninth request waits for room. A's requests come once B's
    ``TCP_TX_MSG_REQ`` has waited 50 cycles, all at once; memory acks at once, no gaps or
    stalls. Returns ``(cycles, model, flows)``."""
    size = DATA_SHARDS * shard
    config = TcpConfig(flows=4, rx_ring=1 << (size * max(requests, 10) - 1).bit_length(),
                       tx_ring=8 * PARITY_SHARDS * shard, mss=64)
    model = FlowTimedModel(config, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                           rng=random.Random(3), burst=size * requests, arrive=1.0, read=1.0)
    rng = random.Random(width)
    data = {"A": rng.randbytes(size * requests), "B": rng.randbytes(size * 10)}
    flows, s, script = beside_a_frozen_peer(model, frozen, data["A"], data["B"])

    counters, _ = run(rs_tile(width, shard, config), model, seed=1, script=script,
                      until=lambda m: closed(flows["A"]), timeout=100_000, gaps=0.0,
                      stall=0.0, settle=10)
    assert model.written(flows["A"]) == answer_stream(data["A"], shard)
    if frozen:
        b = flows["B"]
        assert model.written(b) == answer_stream(data["B"][:8 * size], shard)
        assert s.b_waits()
    assert counters["requests"] == requests + 8 * frozen
    done = model.loads_done[0]
    return (done[-1] - done[0]) / (len(done) - 1), model, flows


@pytest.mark.parametrize("width", WIDTHS)
def test_a_frozen_peer_holds_no_other_connection_up(width):
    """Issue 38's frozen peer: B's peer stops reading, B's answers wait for room in its send
    ring; A's requests, sent meanwhile, are answered at the same rate as with A alone."""
    shard = max(2 * (width // 8), 32)
    alone, _, _ = requests_beside_a_frozen_peer(width, shard, frozen=False)
    beside, _, _ = requests_beside_a_frozen_peer(width, shard, frozen=True)
    print(f"{width} bits: A alone {alone:.2f} cycles/request, beside frozen B {beside:.2f}")
    assert beside <= alone + 1, (alone, beside)


@pytest.mark.parametrize("width", WIDTHS)
def test_small_requests_stream(width):
    """Two connections of 512-byte requests, no stalls: the encoder is fed about one word a
    cycle."""
    words = DATA_SHARDS * 64 // (width // 8)
    per = cycles_per_request(width, shard=64, connections=2, requests=3)
    assert per <= words * 1.1 + 12, per


@pytest.mark.parametrize("connections", [1, 2])
@pytest.mark.parametrize("width", WIDTHS)
def test_cycles_per_4k_request(width, connections):
    """The figure of docs/reed-solomon.md: 4 KiB requests (``shard_bytes`` 512) cost their
    words (64 at 512 bits, 512 at 64 bits) and a few cycles more."""
    words = DATA_SHARDS * 512 // (width // 8)
    per = cycles_per_request(width, connections=connections)
    print(f"{width} bits, {connections} connection(s), 4 KiB requests: {per:.1f} "
          f"cycles/request ({words} words)")
    assert per <= words * 1.1 + 8, per


def test_answer_stream_is_reedsolo_per_column():
    """The reference of the tests above, once against ``reedsolo`` itself: byte k of the two
    parity shards is RSCodec(2)'s parity of column k; a partial request has no answer."""
    reedsolo = pytest.importorskip("reedsolo")
    rng = random.Random(9)
    shard = 24
    stream = rng.randbytes(2 * DATA_SHARDS * shard + 5)
    out = answer_stream(stream, shard)
    assert len(out) == 2 * 2 * shard
    codec = reedsolo.RSCodec(2)
    for r in range(2):
        request, answer = stream[r * 8 * shard:], out[r * 2 * shard:]
        for k in range(shard):
            column = bytes(request[i * shard + k] for i in range(DATA_SHARDS))
            parity = bytes(codec.encode(column))[DATA_SHARDS:]
            assert parity == bytes([answer[k], answer[shard + k]])


# -- the whole design (examples/rs_tcp.py), driven by scapy TCP peers ------------------------------

#: Small and quick (as tests/tcp): 8 flows, 4 KiB rings, a 20,000-cycle RTO.
TCP_TEST = dict(flows=8, ring=4096, rto=20_000, linger=30_000, syn_retries=2, max_retries=3)


def whole_design(width, shard):
    """examples/rs_tcp.py: two connections at once, each sending its requests in segments
    that do not line up with them; every parity byte comes back on its own connection; a
    connection that closes in the middle of a request gets the answers to its whole requests,
    then the design's FIN; the counters say so."""
    from apiary.load import load_design
    from apiary.sim import open_sim
    from harness.bench.tcp_peer import Peer, run_peers

    rng = random.Random(width)
    size = DATA_SHARDS * shard
    d = load_design("examples/rs_tcp.py", width=width, shard_bytes=shard, **TCP_TEST)
    with open_sim(d, "verilator") as sim:
        peers = [Peer(sim, sport=sport, dport=7300) for sport in (42000, 42001)]
        for peer in peers:
            peer.connect()
        streams = [rng.randbytes(2 * size), rng.randbytes(3 * size + size // 2)]
        for peer, stream in zip(peers, streams):
            for start in range(0, len(stream), 200):
                peer.send_data(stream[start:start + 200])
        want = [answer_stream(stream, shard) for stream in streams]
        for _ in range(20):
            run_peers(sim, peers, 500)
            if all(len(p.stream) >= len(w) for p, w in zip(peers, want)):
                break
        assert [bytes(p.stream) for p in peers] == want
        peers[1].send("FA")                 # FIN in the middle of its fourth request
        peers[1].snd_nxt += 1
        for _ in range(20):
            run_peers(sim, peers, 500)
            if peers[1].fin:
                break
        assert peers[1].fin and not peers[0].fin
        counters = sim.counters()
        assert {k: counters[f"rs_{k}"] for k in (
            "flows", "requests", "closed", "truncated", "ended", "mem_errors", "dropped")} == {
            "flows": 2, "requests": 5, "closed": 1, "truncated": 1, "ended": 0,
            "mem_errors": 0, "dropped": 0}


@pytest.mark.slow
def test_whole_design_verilator():
    """Verilator, 64-bit data plane, 256-byte requests (a few minutes to build the model, once:
    it is cached; seconds to run)."""
    whole_design(64, 32)
