"""TcpSinkTile (beehive/apps/tcp_sink.py) on its own in Amaranth's simulator, at 64 and 512
bits, against tests/apps/tcp_model.py playing the TCP engine and the memory tiles of its rings,
with the harness of tests/apps/test_tcp_apps.py (``run``: seeded random gaps on the input and
stalls on the output, every input flit taken at once). The model checks every message: reads
only within what a response reported, pointers moved only over bytes read, one request of a
kind outstanding per flow but ``LOAD_MEM``, of which the tile's ``depth`` (the model's
``loads_per_flow``), nothing after a close; :class:`Contiguous` checks too that a flow's
loads follow one another within what the tile was told."""

import itertools
import random
from types import SimpleNamespace

import pytest

from apiary.noc.header import Fbits
from apiary.os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, decode_mem_message, mem_message_flits
from apiary.tile import Endpoint, TileEnv
from beehive.apps import TcpSinkTile
from beehive.apps.tcp_sink import MAX_DEPTH, MAX_LOAD
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import Status, app_message_flits, flow_handle, handle_slot
from tcp_model import ModelError, TcpEngineModel
from test_tcp_apps import (APP, MAX_WAIT, RX, RX_MEM, TX, TX_MEM, after_the_end, app_env, run,
                           sent_types)

WIDTHS = [64, 512]
DEPTH = 4                   # the tile's loads out per flow, by default


def config(ring):
    return TcpConfig(flows=4, rx_ring=ring, tx_ring=256, mss=64)


def model_for(cfg, width, seed, model=TcpEngineModel, **options):
    options = {"burst": 1024, "arrive": 0.5, "loads_per_flow": DEPTH, **options}
    return model(cfg, width, app=APP, rx=RX, tx=TX, rx_mem=RX_MEM, tx_mem=TX_MEM,
                 rng=random.Random(2000 + seed), **options)


def sink(width, cfg, **params):
    return TcpSinkTile(app_env(width), config=cfg, **params)


def read_all(flow, size):
    """The tile read ``flow``'s ``size`` bytes to the end and closed it after the peer's FIN."""
    return flow.fin and flow.head == size and flow.closed_at is not None


def loaded_bytes(model):
    """Bytes of every ``LOAD_MEM_ACK`` that reached the tile (the loads of flows that ended
    under them included)."""
    return sum(end - start for f in model.every for start, end in f.loads)


def load_sizes(model):
    return [fields["size"] for _, t, fields in model.received if t == LOAD_MEM]


class Contiguous(TcpEngineModel):
    """The model, checking too that each of a connection's loads starts where the one before
    it ended (no byte loaded twice, none skipped) and ends within what the responses that
    reached the tile reported (``flow.known``: the tile cannot know of a response on its
    way). ``flow.issued``: the end of its latest ``LOAD_MEM`` received, each received in the
    cycles ``flow.load_cycles``; ``seen_at``: the cycle each message numbered by ``_seen``
    reached the tile."""

    def __init__(self, *args, **options):
        super().__init__(*args, **options)
        self.seen_at = {}

    def _load(self, header, meta):
        cfg = self.config
        flow, offset = self._locate(meta["addr"], cfg.rx_base, cfg.rx_ring, "LOAD_MEM")
        pos = self._position(flow.head, offset, cfg.rx_ring)
        end, issued = pos + meta["size"], getattr(flow, "issued", 0)
        if pos != issued or end > getattr(flow, "known", 0):
            raise ModelError(f"LOAD_MEM of [{pos}, {end}) for {flow.handle:#x}: its loads so "
                             f"far end at {issued}, responses to the tile reported up to "
                             f"{getattr(flow, 'known', 0)}")
        flow.issued = end
        vars(flow).setdefault("load_cycles", []).append(self.cycle)
        return super()._load(header, meta)

    def _to_app(self, source, msg_type, dst_fbits, delivered=None, **fields):
        if msg_type == MsgType.TCP_RX_MSG_RESP and fields.get("status") in (Status.OK,
                                                                              Status.EOF):
            flow = self.flows[handle_slot(fields["flow"])]
            told = fields["ptr"] + fields["length"]

            def known(then=delivered):
                flow.known = max(getattr(flow, "known", 0), told)
                then()
            delivered = known
        super()._to_app(source, msg_type, dst_fbits, delivered, **fields)

    def _seen(self):
        n = super()._seen()
        self.seen_at[n] = self.cycle
        return n


def strays(width, stale):
    """Three messages the sink must drop: a load ack no job awaits (with its words: slot 3
    holds no connection), a ``TCP_TX_MSG_RESP`` (the sink never asks for room), a response
    for a connection that has ended."""
    return [
        ("mem", mem_message_flits(width, LOAD_MEM_ACK, 3 * 4096, 100, bytes(100), dst=APP,
                                  src=RX_MEM, dst_fbits=Fbits.LOCAL1, wrap=12)),
        ("tx", app_message_flits(width, MsgType.TCP_TX_MSG_RESP.value, dst=APP, src=TX,
                                 flow=flow_handle(0, 1), length=50)),
        ("rx", app_message_flits(width, MsgType.TCP_RX_MSG_RESP.value, dst=APP, src=RX,
                                 src_fbits=Fbits.LOCAL2, flow=stale, length=9)),
    ]


def loads_just_sent(model, flow, recent=20):
    """Whether ``flow`` (of a :class:`Contiguous` model) is after its first adjust, with loads
    out, the latest received in the last ``recent`` cycles (its ack is far off), and no load
    of its can be on its way from the tile (its loads reach as far as any response
    reported)."""
    return (flow.loads_out > 0 and flow.head > 0 and flow.issued == flow.reported
            and model.cycle < flow.load_cycles[-1] + recent)


#: Cycles a request the tile had on offer, or about to be, when it learnt of its flow's end
#: may take to reach the model (5 flits at 64 bits, behind a load, the output stalling).
SLACK = 40


def read_full_rings(tile, model, count, size, *, seed):
    """Announce ``count`` connections in slots 0 up, each with ``size`` random bytes and a FIN
    to deliver as fast as its ring takes them; run without gaps or stalls until every byte was
    read. Returns ``run``'s ``(counters, stats)``."""
    flows = [model.announce(slot, 1) for slot in range(count)]
    rng = random.Random(seed)
    for f in flows:
        model.deliver_now(f, rng.randbytes(size), fin=True)

    def script(model):
        for f in flows:
            model.deliver_now(f, b"")
    return run(tile, model, seed=1, script=script, gaps=0, stall=0, settle=0, timeout=100_000,
               until=lambda model: model.idle() and all(read_all(f, size) for f in flows))


@pytest.mark.parametrize("jobs", [1, 4])
@pytest.mark.parametrize("width", WIDTHS)
def test_sink_survives_a_reset_under_a_load(width, jobs):
    """Memory acks come 120 cycles late. Once A and C are read, B is reset while loads of its
    are out, after the first, and no load of its can be on its way (:func:`loads_just_sent`:
    the model would take it for B2's): the tile takes their acks (their words counted) and
    sends nothing more
    for B once it knows (what it sent before, an adjust or a request, reaches the model within
    :data:`SLACK` cycles of the tile's learning; a request is answered CLOSED and dropped).
    B's slot at once holds a new connection, B2 (the model fails on a load for B's slot while
    B's are unanswered): with one job it is served once B's acks are in; with four (a job
    free for B2), its first response comes before the last of them and its job waits for it
    (``SLOT``). A, C and B2 are read to the end and closed; stray and stale messages are
    dropped and counted."""
    cfg = config(4096)
    seed = width + 3 + jobs
    rng = random.Random(seed)
    model = model_for(cfg, width, seed, model=Contiguous, mem_latency=120)
    tile = sink(width, cfg, chunk=1500, jobs=jobs)
    sizes = {"A": 9000, "B": 20000, "C": 3000, "B2": 2500}
    data = {name: rng.randbytes(size) for name, size in sizes.items()}
    flows = {name: model.announce(slot, 1) for slot, name in enumerate("ABC")}
    for name in "ABC":
        model.deliver(flows[name], data[name], fin=True)
    s = SimpleNamespace(reset_at=None, strays=False, out=0)

    def script(model):
        b = flows["B"]
        if s.reset_at is None and loads_just_sent(model, b) \
                and all(read_all(flows[name], sizes[name]) for name in "AC"):
            model.reset(b)
            s.reset_at, s.out = model.cycle, b.loads_out
            flows["B2"] = model.announce(b.slot, 2)
            model.deliver(flows["B2"], data["B2"], fin=True)
        if s.reset_at is not None and not s.strays and model.cycle > s.reset_at + 60:
            for source, flits in strays(width, b.handle):
                model.inject(source, flits)
            s.strays = True

    counters, stats = run(tile, model, seed=seed, script=script, timeout=60_000,
                          until=lambda model: s.strays and model.idle() and all(
                              read_all(flows[name], sizes[name]) for name in ("A", "C", "B2")))
    b, b2 = flows["B"], flows["B2"]
    assert b.state == "reset" and 0 < b.head < sizes["B"]
    assert b.closed_at is None
    assert b.load_seen > b.end_seen                 # its last ack came after its end...
    assert b.loads[-1][1] == b.issued > b.head      # ...and was never adjusted over
    told = model.seen_at[b.end_seen]
    after = [cycle for cycle, _, f in model.received
             if f.get("flow") == b.handle and cycle > s.reset_at]
    assert all(cycle <= told + SLACK for cycle in after), (told, after)
    closed = sum(d == (MsgType.TCP_RX_MSG_RESP.value, b.handle, Status.CLOSED)
                 for d in stats.delivered)          # requests that crossed the reset
    if jobs == 1:
        assert b2.rx_seen[0] > b.load_seen          # B2 served once B's acks were in
    else:
        assert b2.rx_seen[0] < b.load_seen          # B2's job waited for them
    for name in ("A", "C", "B2"):
        assert flows[name].late == 0, name
    assert loaded_bytes(model) == sizes["A"] + sizes["C"] + sizes["B2"] + b.loads[-1][1]
    assert counters == {"connections": 4, "bytes": loaded_bytes(model),
                        "loads": len(load_sizes(model)), "closed": 3, "ended": 1,
                        "mem_errors": 0, "dropped": 3 + closed}
    assert stats.max_wait <= MAX_WAIT
    print(f"reset at {width} bits, {jobs} jobs: {s.out} loads out at the reset, "
          f"{len(after)} requests crossed it")


@pytest.mark.parametrize("width, seed, jobs, latency", [(64, 2, 3, 60), (64, 7, 4, 8),
                                                        (512, 5, 2, 60), (512, 9, 2, 0)])
def test_sink_under_random_resets(width, seed, jobs, latency):
    """Ten connections through four slots, each with 0 to 3,000 bytes and FIN, about half of
    them reset at a random moment (in any phase: a load out, between requests, before or
    after the peer's FIN); a slot is reused once its connection is closed or the tile was told
    of its end, sometimes while a load of the old one is still out. Memory acks come
    ``latency`` cycles late, in any order; a chunk of 300 or 1,000 bytes, or the ring. Those not
    reset are read to the end and closed; what reaches the tile about a flow after its end is
    dropped, and a reset that crosses the tile's close (the flow forgotten) too."""
    rng = random.Random(seed)
    cfg = config(1024)
    model = model_for(cfg, width, seed, mem_latency=latency, mem_any_order=True)
    tile = sink(width, cfg, jobs=jobs, chunk=rng.choice([None, 300, 1000]))
    conns, within = 10, (1500 if width < 512 else 400)
    plan = [(rng.randrange(3001), rng.randrange(20, within) if rng.random() < 0.5 else None)
            for _ in range(conns)]
    live = []                               # (flow, size, reset at) of those announced
    free_at = {slot: 0 for slot in range(cfg.flows)}
    gens = dict.fromkeys(free_at, 0)

    def script(model):
        for f, _, at in live:
            if model.flows[f.slot] is not f:
                continue                        # its slot holds a later connection
            if at is not None and model.cycle >= at and f.state == "open" \
                    and f.closed_at is None:
                model.reset(f)
            elif f.state == "reset" and f.end_seen is not None and free_at[f.slot] is None:
                free_at[f.slot] = model.cycle + rng.randrange(50)      # the tile was told
            elif f.closed_at is not None and free_at[f.slot] is None:
                free_at[f.slot] = model.cycle
        for slot, at in free_at.items():
            if at is not None and model.cycle >= at and len(live) < conns:
                size, reset = plan[len(live)]
                gens[slot] += 1
                f = model.announce(slot, gens[slot])
                model.deliver(f, rng.randbytes(size), fin=True)
                live.append((f, size, None if reset is None else model.cycle + reset))
                free_at[slot] = None

    counters, stats = run(tile, model, seed=seed, script=script, timeout=100_000,
                          until=lambda model: len(live) == conns and model.idle() and all(
                              f.state == "reset" or f.closed_at is not None
                              for f, _, _ in live))
    resets = sum(f.state == "reset" for f, _, _ in live)
    for f, size, _ in live:
        assert f.state == "reset" or (read_all(f, size) and f.late == 0)
    closes = len(sent_types(model, MsgType.TCP_CLOSE_REQ))
    crossed = resets - counters["ended"]    # resets that came after the tile's close
    assert 0 <= crossed <= closes + resets - conns
    assert counters == {"connections": conns, "bytes": loaded_bytes(model),
                        "loads": len(load_sizes(model)), "closed": closes,
                        "ended": resets - crossed, "mem_errors": 0,
                        "dropped": after_the_end(stats.delivered) + crossed}
    assert model.max_memory <= jobs and stats.max_wait <= MAX_WAIT
    print(f"churn at {width} bits, {jobs} jobs: {stats.cycles} cycles, {resets} resets")


class FaultyMemory(TcpEngineModel):
    """The model, but the first ``LOAD_MEM`` of the flow in slot ``fail_slot`` is answered
    with ``error`` set (no bytes)."""

    fail_slot = 1

    def _to_mem(self, item):
        flits, _ = item
        header, meta, _ = decode_mem_message(flits, self.width)
        slot = (meta["addr"] - self.config.rx_base) // self.config.rx_ring
        if header.msg_type == LOAD_MEM_ACK and slot == self.fail_slot \
                and not getattr(self, "failed", False):
            self.failed = True
            flow = self.flows[slot]

            def failed():
                flow.loads_out -= 1
            flits = mem_message_flits(self.width, LOAD_MEM_ACK, meta["addr"], meta["size"],
                                      dst=self.app, src=self.rx_mem, dst_fbits=header.dst_fbits,
                                      wrap=meta["wrap"], error=1)
            item = (flits, failed)
        super()._to_mem(item)


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("width", WIDTHS)
def test_sink_gives_a_flow_up_on_a_memory_error(width, jobs):
    """E's first load is answered with ``error``: E is given up (nothing more sent for it, not
    closed: its pointer stays at 0), A is read to the end and closed. A reset of E that
    comes later matches no connection of the tile's: dropped, not counted as ended."""
    cfg = config(4096)
    seed = width + 5
    rng = random.Random(seed)
    model = model_for(cfg, width, seed, model=FaultyMemory)
    tile = sink(width, cfg, jobs=jobs)
    sizes = {"A": 6000, "E": 3000}
    flows = {"A": model.announce(0, 1), "E": model.announce(FaultyMemory.fail_slot, 1)}
    for name, size in sizes.items():
        model.deliver(flows[name], rng.randbytes(size), fin=True)
    s = SimpleNamespace(reset=False)

    def script(model):
        if not s.reset and read_all(flows["A"], sizes["A"]) and model.idle():
            model.reset(flows["E"])
            s.reset = True

    counters, stats = run(tile, model, seed=seed, script=script, timeout=30_000,
                          until=lambda model: s.reset and model.idle())
    e = flows["E"]
    assert model.failed and e.head == 0 and e.loads == [] and e.closed_at is None
    assert e.late == 0
    assert [f["flow"] for f in sent_types(model, MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_ADJUST_PTR)
            if f["flow"] == e.handle] == [e.handle]        # only its first request
    assert counters == {"connections": 2, "bytes": sizes["A"], "loads": len(load_sizes(model)),
                        "closed": 1, "ended": 0, "mem_errors": 1, "dropped": 1}
    assert stats.max_wait <= MAX_WAIT


def load_pace(width, *, latency=0, depth=DEPTH, ring=65536, loads=32):
    """One connection whose receive ring (by default 64 KiB, the design's at 512 bits) is
    always full (bytes arriving as soon as there is room), read in 4,096-byte loads, the
    model answering at once, no gaps or stalls, memory acks ``latency`` cycles late:
    ``(cycles per load, most loads out at once, ack to adjust)``, the last the median cycles
    from a ``LOAD_MEM_ACK``'s last flit into the tile to its ``TCP_RX_ADJUST_PTR``'s last flit
    out."""
    cfg = config(ring)
    model = model_for(cfg, width, 9, model=Contiguous, mem_latency=latency,
                      loads_per_flow=depth)
    tile = sink(width, cfg, depth=depth)
    flow = model.announce(0, 1)
    size = loads * 4096
    model.deliver_now(flow, random.Random(width).randbytes(size), fin=True)
    run(tile, model, seed=1, script=lambda model: model.deliver_now(flow, b""), gaps=0,
        stall=0, settle=0, timeout=100_000,
        until=lambda model: read_all(flow, size) and model.idle())
    assert load_sizes(model) == [4096] * loads
    adjusts = [cycle for cycle, t, _ in model.received if t == MsgType.TCP_RX_ADJUST_PTR.value]
    per_load = (adjusts[-1] - adjusts[1]) / (len(adjusts) - 2)
    responses = set(flow.rx_seen)           # the other messages numbered: the acks, in order
    acks = [cycle for n, cycle in sorted(model.seen_at.items()) if n not in responses]
    to_adjust = sorted(adjust - ack for adjust, ack in zip(adjusts, acks, strict=True))
    return per_load, model.max_loads, to_adjust[len(to_adjust) // 2]


@pytest.mark.parametrize("width, latency, most, adjust_after", [
    (512, 0, 2, 1), (512, 20, 2, 1), (64, 0, 8, 6), (64, 20, 8, 6)])
def test_sink_reads_a_connection_at_close_to_a_word_a_cycle(width, latency, most,
                                                             adjust_after):
    """One connection whose 64 KiB receive ring is always full, memory acks at once or 20
    cycles late: with four loads of 4,096 bytes out (and the ring reporting more), a load
    takes its words plus at most ``most`` cycles (measured: 1.4 at 512 bits, the ack's header
    flit and the odd response on the input; 6.4 at 64, the ack's header and metadata flits),
    whatever the latency; from an ack's last flit in to its adjust's last flit out,
    ``adjust_after`` cycles (a request is 5 flits at 64 bits). A load at a time (``depth``
    1) pays the round trips: at 512 bits with the acks 20 cycles late, 23 cycles a load
    besides its words (measured)."""
    per_load, out, to_adjust = load_pace(width, latency=latency)
    words = 4096 * 8 // width
    print(f"{width} bits, acks {latency} cycles late: {per_load:.1f} cycles a load of {words} "
          f"words ({per_load - words:.1f} besides), {out} loads out, ack to adjust {to_adjust}")
    assert per_load <= words + most and out == DEPTH and to_adjust <= adjust_after
    if width == 512 and latency == 20:
        one, _, _ = load_pace(width, latency=latency, depth=1, loads=12)
        print(f"  a load at a time: {one:.1f} cycles a load")
        assert one >= words + 20


@pytest.mark.parametrize("width, depth, jobs, latency", [(512, 4, 1, 30), (64, 4, 2, 0),
                                                         (512, 2, 2, 60)])
def test_sink_keeps_at_most_depth_loads_out_for_a_flow(width, depth, jobs, latency):
    """Two connections of 30,000 bytes through 16 KiB rings, the bytes arriving in random
    bursts, random gaps and stalls, memory acks ``latency`` cycles late: a flow never has more
    than ``depth`` loads out (the model fails on one more), and has more than one out at some
    point (the loads are pipelined); every byte is read once, in order, and each connection
    closed."""
    cfg = config(16384)
    seed = width + depth + jobs
    rng = random.Random(seed)
    model = model_for(cfg, width, seed, model=Contiguous, mem_latency=latency,
                      loads_per_flow=depth)
    tile = sink(width, cfg, depth=depth, jobs=jobs)
    size = 30000
    flows = [model.announce(slot, 1) for slot in range(2)]
    for f in flows:
        model.deliver(f, rng.randbytes(size), fin=True)
    counters, stats = run(tile, model, seed=seed, script=lambda model: None, timeout=60_000,
                          until=lambda model: model.idle() and all(read_all(f, size)
                                                                   for f in flows))
    print(f"{width} bits, depth {depth}, {jobs} jobs: {stats.cycles} cycles, at most "
          f"{model.max_loads} loads out for a flow")
    assert 2 <= model.max_loads <= depth
    assert counters["bytes"] == loaded_bytes(model) == 2 * size and counters["closed"] == 2
    assert counters["dropped"] == 0 and stats.max_wait <= MAX_WAIT


class Stingy(Contiguous):
    """The model, but every other of its answers to the tile's requests that come when the
    flow has at least two bytes loaded beyond the pointer reports fewer bytes than the tile
    has loaded (up to half way, at least one byte): ``short`` lists ``(pointer, end reported,
    end of the tile's loads)`` of each as it reaches the tile. (The engine reports every byte
    readable; a short report stands for one that is out of date.)"""

    def __init__(self, *args, **options):
        super().__init__(*args, **options)
        self.short = []
        self._told = {}
        self._cut = False

    def _to_app(self, source, msg_type, dst_fbits, delivered=None, **fields):
        if msg_type == MsgType.TCP_RX_MSG_RESP and fields.get("status") == Status.OK:
            flow = self.flows[handle_slot(fields["flow"])]
            ptr, ahead = fields["ptr"], getattr(flow, "issued", 0) - fields["ptr"]
            self._cut ^= ahead >= 2
            if ahead >= 2 and self._cut:
                fields["length"] = ahead // 2

                def short(then=delivered, told=ptr + ahead // 2):
                    self.short.append((ptr, told, flow.issued))
                    then()
                delivered = short
            # What may be read: what any response said (the report just cut short included).
            told = max(self._told.get(flow.handle, 0), ptr + fields["length"])
            flow.reported = self._told[flow.handle] = told
        super()._to_app(source, msg_type, dst_fbits, delivered, **fields)


@pytest.mark.parametrize("width", WIDTHS)
def test_sink_issues_nothing_on_a_response_short_of_its_loads(width):
    """Responses that report fewer bytes than the tile has already loaded (some of them):
    they start no load (each load starts where the one before ended and ends within what the
    responses that reached the tile reported), nothing is read twice or skipped, and the
    connection is read to its end and closed."""
    cfg = config(16384)
    model = model_for(cfg, width, 11, model=Stingy, mem_latency=30)
    tile = sink(width, cfg)
    size = 60000
    flow = model.announce(0, 1)
    model.deliver(flow, random.Random(width).randbytes(size), fin=True)
    counters, stats = run(tile, model, seed=11, script=lambda model: None, timeout=60_000,
                          until=lambda model: model.idle() and read_all(flow, size))
    print(f"{width} bits: {len(model.short)} short responses of "
          f"{len(flow.rx_seen)}, {stats.cycles} cycles")
    assert len(model.short) >= 4
    assert all(ptr < told < issued for ptr, told, issued in model.short)
    assert flow.issued == size and counters["bytes"] == loaded_bytes(model) == size
    assert counters["closed"] == 1 and counters["dropped"] == 0


@pytest.mark.parametrize("last", [777, 0])
@pytest.mark.parametrize("width", WIDTHS)
def test_sink_reads_the_last_bytes_after_it_read_everything(width, last):
    """The peer sends 10,000 bytes, then once the tile has adjusted over all of them (and
    asked for more) its last ``last`` bytes at once and FIN: they are still read (a load: the
    model answers the request waiting), then the EOF that reports no more closes the
    connection."""
    cfg = config(16384)
    model = model_for(cfg, width, 13, model=Contiguous)
    tile = sink(width, cfg)
    first = 10000
    data = random.Random(width).randbytes(first + last)
    flow = model.announce(0, 1)
    model.deliver(flow, data[:first])
    s = SimpleNamespace(at=None)

    def script(model):
        if s.at is None and flow.head == first and flow.rx_req is not None and model.idle():
            s.at = model.cycle
            model.deliver_now(flow, data[first:], fin=True)

    counters, stats = run(tile, model, seed=13, script=script, timeout=60_000,
                          until=lambda model: s.at is not None and model.idle()
                          and read_all(flow, first + last))
    assert flow.issued == first + last and counters["bytes"] == loaded_bytes(model) == first + last
    types = [t for cycle, t, _ in model.received if cycle > s.at]
    closes = [k for k, t in enumerate(types) if t == MsgType.TCP_CLOSE_REQ.value]
    assert closes == [len(types) - 1]           # the close came last, once
    assert types.count(LOAD_MEM) == (last > 0)
    assert counters["closed"] == 1 and counters["dropped"] == 0 and counters["ended"] == 0


def test_one_job_takes_turns_between_busy_flows():
    """Two connections whose 64 KiB rings are always full, one job: the job leaves a flow
    after ``depth`` loads while the other waits, so the flows take turns (no more than
    ``depth`` loads of one in a row once both are under way) and the input stays busy."""
    cfg = config(65536)
    model = model_for(cfg, 512, 17, model=Contiguous, mem_latency=20)
    tile = sink(512, cfg)
    size = 24 * 4096
    counters, stats = read_full_rings(tile, model, 2, size, seed=17)
    slots = [(fields["addr"] - cfg.rx_base) // cfg.rx_ring
             for _, t, fields in model.received if t == LOAD_MEM]
    runs = [len(list(g)) for _, g in itertools.groupby(slots)]
    per_load = stats.cycles / len(slots)
    print(f"turns of {runs}; {per_load:.1f} cycles a load")
    assert len(slots) == 48 and max(runs[1:-1]) <= DEPTH
    assert per_load <= 80


def cycles_for_four(jobs, width=512, size=4 * 4096):
    """Cycles to read four connections of ``size`` bytes each (their 4,096-byte rings always
    full, no gaps or stalls, memory acks 100 cycles late and in any order), and the most
    flows with a load out at once."""
    cfg = config(4096)
    model = model_for(cfg, width, 4, mem_latency=100, mem_any_order=True)
    tile = sink(width, cfg, jobs=jobs)
    counters, stats = read_full_rings(tile, model, 4, size, seed=jobs)
    assert counters["bytes"] == 4 * size and counters["closed"] == 4
    return stats.cycles, model.max_memory


def test_sink_jobs_overlap_the_round_trips_of_several_flows():
    """Four busy connections at 512 bits, memory acks 100 cycles late: with one job a flow's
    load waits for the memory alone (about 0.4 words a cycle); with two jobs two loads are out
    at once and the reading takes at most 60 % of the cycles; with four, four loads."""
    pace = {jobs: cycles_for_four(jobs) for jobs in (1, 2, 4)}
    print("cycles (and loads out at once) by jobs:", pace)
    assert [pace[jobs][1] for jobs in (1, 2, 4)] == [1, 2, 4]
    assert pace[2][0] <= 0.6 * pace[1][0] and pace[4][0] <= 0.6 * pace[1][0]


def test_parameters_are_checked():
    cfg = config(4096)
    TcpSinkTile(TileEnv(), config=cfg)                     # standalone: engine at (0, 0)
    assert TcpSinkTile(app_env(64), config=cfg).chunk == 4096
    assert TcpSinkTile(app_env(64), config=cfg, chunk=4096).chunk == 4096     # > tx_ring
    assert TcpSinkTile(app_env(64), config=config(1024)).chunk == 1024         # the ring
    big = TcpConfig(flows=4, rx_ring=1 << 23, tx_ring=256, mss=64)
    assert TcpSinkTile(app_env(64), config=big).chunk == 4096
    assert TcpSinkTile(app_env(64), config=big, chunk=MAX_LOAD).chunk == (1 << 22) - 1
    for chunk in (0, 4097, True, 2.0, -1):
        with pytest.raises(ValueError, match=r"chunk .* from 1 to 4096"):
            TcpSinkTile(app_env(64), config=cfg, chunk=chunk)
    with pytest.raises(ValueError, match=r"from 1 to 4194303"):
        TcpSinkTile(app_env(64), config=big, chunk=1 << 22)
    with pytest.raises(ValueError, match="tcp_tx"):
        TcpSinkTile(app_env(64, tcp_tx=[]), config=cfg)
    with pytest.raises(ValueError, match="LOCAL2"):
        TcpSinkTile(app_env(64, tcp_rx=[Endpoint("tcp_rx", *RX)]), config=cfg)
    assert TcpSinkTile(app_env(64), config=cfg).jobs == 1
    assert TcpSinkTile(app_env(64), config=cfg).depth == DEPTH
    assert TcpSinkTile(app_env(64), config=cfg, depth=MAX_DEPTH).depth == 8
    for depth in (0, 9, True, 2.0):
        with pytest.raises(ValueError, match=r"depth .* from 1 to 8"):
            TcpSinkTile(app_env(64), config=cfg, depth=depth)
    for jobs in (0, 17, True, 2.0):
        with pytest.raises(ValueError, match="jobs must be an integer from 1 to 16"):
            TcpSinkTile(app_env(64), config=cfg, jobs=jobs)
    with pytest.raises(TypeError, match="TcpConfig"):
        TcpSinkTile(app_env(64), config={"flows": 4})
