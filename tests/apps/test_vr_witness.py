"""VrWitnessTile (beehive/apps/vr_witness.py) alone at 64 and 512 bits on Amaranth's simulator:
VR messages in as UDP_RX_SEGMENTs, the replies out as UDP_TX_SEGMENTs to UDP TX with the
request's metadata and a right l4_sum. Prepares in order are acknowledged with the right fields;
out of order, old-view and view-change cases are refused and counted; a view change runs through
START_VIEW_CHANGE, DO_VIEW_CHANGE and START_VIEW; malformed datagrams are dropped and counted and
the next good one is served; random sequences match the software witness (the golden model)
message for message and counter for counter."""

import random

import pytest

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.checksum import ones_complement_sum
from apiary.stream.testbench import WithCycleCounter, simulate
from apiary.tile import Endpoint, TileEnv
from beehive.apps.vr_witness import (MAGIC, MESSAGE_BYTES, NackReason, VrMessage, VrStatus,
                                     VrType, VrWitnessTile, chain_digest, request_digest)
from beehive.proto.messages import PACKET_META, MsgType
from beehive.vr.witness import COUNTERS, SoftwareWitness


WITNESS, UDP_RX, UDP_TX = (3, 1), (2, 0), (2, 1)
SHARD = 3
WIDTHS = [64, 512]


def witness_tile(width, **kw):
    env = TileEnv(name="vr", x=WITNESS[0], y=WITNESS[1], width=width,
                  routes={"data": {"reply": [Endpoint("udp_tx", *UDP_TX)]}})
    return VrWitnessTile(env, shard=SHARD, **kw)


def segment(width, payload, meta, msg_type=MsgType.UDP_RX_SEGMENT.value):
    hdr = NocHeader(dst_x=WITNESS[0], dst_y=WITNESS[1], dst_fbits=Fbits.LOCAL0,
                    msg_type=msg_type, src_x=UDP_RX[0], src_y=UDP_RX[1], src_fbits=Fbits.LOCAL0)
    return meta_message_flits(width, hdr, PACKET_META.pack(meta), PACKET_META.size,
                              bytes(payload))


def run_tile(width, payloads, *, log_depth=256, stall=0.0, seed=0, msg_types=None, queue=16,
             hold=0):
    """Send ``payloads`` (datagrams) to the tile; ``(replies, counters, timing)``: each reply is
    ``(index of the request it answers, payload)``, timing ``[(cycle of a request's last flit
    in, cycle of its reply's first flit out)]``. ``hold``: cycles before the sink first takes
    a flit (UDP TX busy)."""
    rng = random.Random(seed)
    dut = WithCycleCounter(witness_tile(width, log_depth=log_depth, queue=queue))
    tile = dut.dut
    metas = [{n: rng.getrandbits(PACKET_META.width(n)) for n in PACKET_META.names}
             for _ in payloads]
    types = msg_types or [MsgType.UDP_RX_SEGMENT.value] * len(payloads)
    ends, replies, starts, counters = [], [], [], {}

    async def source(ctx):
        for payload, meta, msg_type in zip(payloads, metas, types):
            await send_flits(ctx, tile.noc_in, segment(width, payload, meta, msg_type),
                             rng=rng, stall=stall)
            ends.append(ctx.get(dut.cycle) - 1)

    async def sink(ctx):
        await ctx.tick().repeat(hold + 1)
        quiet = 0
        while quiet < 200:
            if ctx.get(tile.noc_out.valid):
                starts.append(ctx.get(dut.cycle))
                flits = await recv_flits(ctx, tile.noc_out, rng=rng, stall=stall)
                hdr, meta, payload = decode_meta_message(flits, width, PACKET_META.size)
                assert (hdr.dst_x, hdr.dst_y, hdr.msg_type) == (*UDP_TX,
                                                               MsgType.UDP_TX_SEGMENT.value)
                assert (hdr.src_x, hdr.src_y) == WITNESS
                got = PACKET_META.unpack(meta)
                assert got["l4_sum_valid"] == 1
                assert got["l4_sum"] == ones_complement_sum(payload)
                index = next(k for k, m in enumerate(metas) if all(
                    got[n] == m[n] for n in PACKET_META.names if not n.startswith("l4_sum")))
                replies.append((index, payload))
                quiet = 0
            else:
                await ctx.tick()
                quiet += 1
        counters.update({n: ctx.get(getattr(tile.counters, n))
                         for n in (*COUNTERS, "framing", "overflow")})

    simulate(dut, sink, background=[source], timeout=400 * len(payloads) + 2000)
    return replies, counters, list(zip(ends, starts))


def model_run(payloads, *, log_depth=256):
    """What the software witness answers: ``([(index, reply)], counters)``."""
    model = SoftwareWitness(shard=SHARD, log_depth=log_depth)
    out = [(k, model.handle(p)) for k, p in enumerate(payloads)]
    return [(k, r) for k, r in out if r is not None], model.counters


def prepare(op, view=0, commit=0, client=7, request=None, body=b"x"):
    return VrMessage(VrType.PREPARE, shard=SHARD, view=view, op=op, commit=commit,
                     client=client, request=op if request is None else request,
                     digest=request_digest(body + bytes([op & 0xFF]))).pack()


def decoded(replies):
    return [VrMessage.unpack(p) for _, p in replies]


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_prepares_in_order_are_acknowledged_with_their_fields(width):
    payloads = [prepare(op, commit=op - 1) for op in range(1, 6)]
    replies, counters, timing = run_tile(width, payloads)
    assert [k for k, _ in replies] == list(range(5))
    for op, reply in enumerate(decoded(replies), 1):
        sent = VrMessage.unpack(payloads[op - 1])
        assert reply.type is VrType.PREPARE_OK and reply.shard == SHARD
        assert (reply.view, reply.op, reply.commit) == (0, op, op - 1)
        assert (reply.client, reply.request, reply.digest) == (7, op, sent.digest)
        assert reply.status is VrStatus.NORMAL and reply.reason is NackReason.NONE
    assert counters["prepares"] == 5 and counters["nacks"] == counters["dropped"] == 0
    # Latency, last flit in to first flit out (the docstring's figure), when idle.
    assert timing[0][1] - timing[0][0] == 6


@pytest.mark.parametrize("width", WIDTHS)
def test_out_of_order_and_wrong_view_prepares_are_refused_and_counted(width):
    payloads = [
        prepare(1),                 # ok
        prepare(3),                 # gap: op 2 missing
        prepare(1),                 # already logged
        prepare(2, view=1),         # a newer view
        prepare(2),                 # ok: the gap filled
        VrMessage(VrType.COMMIT, shard=SHARD, view=0, commit=9).pack(),   # commit capped at 2
        prepare(3, commit=1),       # ok; the commit number never goes back
    ]
    replies, counters, _ = run_tile(width, payloads)
    got = decoded(replies)
    assert [k for k, _ in replies] == [0, 1, 2, 3, 4, 6]        # COMMIT has no reply
    assert [r.type for r in got] == [VrType.PREPARE_OK, VrType.NACK, VrType.NACK, VrType.NACK,
                                     VrType.PREPARE_OK, VrType.PREPARE_OK]
    assert [r.reason for r in got[1:4]] == [NackReason.GAP, NackReason.STALE_OP,
                                            NackReason.NEW_VIEW]
    assert all(r.op == 1 and r.view == 0 for r in got[1:4])    # a NACK carries the state
    summary = 0
    for op in (1, 2, 3):
        p = VrMessage.unpack(prepare(op))
        summary = chain_digest(summary, op, p.client, p.request, p.digest)
    assert got[-1].commit == 2 and got[-1].op == 3
    assert counters == {"prepares": 3, "commits": 1, "nacks": 3, "view_changes": 0,
                        "start_views": 0, "queries": 0, "dropped": 0, "framing": 0, "overflow": 0}
    assert replies == model_run(payloads)[0]
    nack = VrMessage.unpack(run_tile(width, payloads + [prepare(9)])[0][-1][1])
    assert nack.reason is NackReason.GAP and nack.digest == summary   # the log summary


@pytest.mark.parametrize("width", WIDTHS)
def test_a_view_change_elects_a_new_leader(width):
    svc = VrMessage(VrType.START_VIEW_CHANGE, shard=SHARD, view=1).pack()
    payloads = [prepare(1), prepare(2, commit=1),
                svc,                                            # DO_VIEW_CHANGE
                prepare(3),                                     # refused: in view change
                svc,                                            # DO_VIEW_CHANGE again
                VrMessage(VrType.START_VIEW_CHANGE, shard=SHARD, view=0).pack(),  # old
                VrMessage(VrType.START_VIEW, shard=SHARD, view=1, op=2, commit=2,
                          digest=0x1234).pack(),
                prepare(3, view=1, commit=2),                   # the new leader's first op
                prepare(4, view=0),                             # the old leader: refused
                VrMessage(VrType.START_VIEW, shard=SHARD, view=0).pack()]      # too old
    replies, counters, _ = run_tile(width, payloads)
    got = decoded(replies)
    assert [r.type for r in got] == [
        VrType.PREPARE_OK, VrType.PREPARE_OK, VrType.DO_VIEW_CHANGE, VrType.NACK,
        VrType.DO_VIEW_CHANGE, VrType.NACK, VrType.PREPARE_OK, VrType.PREPARE_OK, VrType.NACK,
        VrType.NACK]
    dvc = got[2]
    second = VrMessage.unpack(payloads[1])
    assert (dvc.view, dvc.normal_view, dvc.op, dvc.commit) == (1, 0, 2, 1)
    assert dvc.status is VrStatus.VIEW_CHANGE
    assert (dvc.client, dvc.request) == (second.client, second.request)   # the last op's
    assert got[3].reason is NackReason.VIEW_CHANGE and got[4] == dvc
    assert got[5].reason is NackReason.OLD_VIEW
    sv = got[6]
    assert (sv.view, sv.normal_view, sv.op, sv.commit, sv.digest) == (1, 1, 2, 2, 0x1234)
    assert sv.status is VrStatus.NORMAL
    assert (got[7].view, got[7].op) == (1, 3)
    assert [got[8].reason, got[9].reason] == [NackReason.OLD_VIEW, NackReason.OLD_VIEW]
    assert (counters["view_changes"], counters["start_views"], counters["nacks"]) == (1, 1, 4)


@pytest.mark.parametrize("width", WIDTHS)
def test_malformed_datagrams_are_dropped_counted_and_the_next_is_served(width):
    good = prepare(1)
    bad_magic = bytes([MAGIC ^ 0xFF]) + good[1:]
    payloads = [
        b"", good[:MESSAGE_BYTES - 1], good + b"\0", bad_magic,
        VrMessage(VrType.PREPARE, shard=SHARD + 1, op=1).pack(),       # another shard
        VrMessage(VrType.PREPARE_OK, shard=SHARD, op=1).pack(),        # a type not taken
        good[:1] + bytes([0x7F]) + good[2:],                           # an unknown type
        good[:4] + bytes([9]) + good[5:],                              # an unknown status
        good,                                                          # not a UDP segment
        good,
    ]
    types = [MsgType.UDP_RX_SEGMENT.value] * len(payloads)
    types[-2] = MsgType.UDP_TX_SEGMENT.value
    replies, counters, _ = run_tile(width, payloads, msg_types=types)
    assert [k for k, _ in replies] == [len(payloads) - 1]
    assert decoded(replies)[0].type is VrType.PREPARE_OK
    assert counters["dropped"] == len(payloads) - 1 and counters["prepares"] == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_the_ring_answers_log_queries_until_overwritten(width):
    depth = 4
    query = [VrMessage(VrType.LOG_QUERY, shard=SHARD, op=op).pack() for op in range(8)]
    payloads = [prepare(op) for op in range(1, 7)] + query
    replies, counters, _ = run_tile(width, payloads, log_depth=depth)
    got = decoded(replies)[6:]
    assert [r.type for r in got] == [VrType.NACK] * 3 + [VrType.LOG_ENTRY] * 4 + [VrType.NACK]
    for r in got[3:7]:
        sent = VrMessage.unpack(prepare(r.op))
        assert (r.client, r.request, r.digest) == (sent.client, sent.request, sent.digest)
    assert counters["queries"] == 4
    expected, model_counters = model_run(payloads, log_depth=depth)
    assert (replies, counters) == (expected, {**model_counters, "framing": 0, "overflow": 0})


@pytest.mark.parametrize("width", WIDTHS)
def test_a_burst_while_udp_tx_is_busy_overflows_the_queue_without_holding_the_input(width):
    payloads = [prepare(op) for op in range(1, 11)]
    replies, counters, timing = run_tile(width, payloads, queue=2, hold=400)
    assert len(timing) == len(replies)
    assert counters["overflow"] > 0                         # dropped, not held
    assert counters["prepares"] + counters["nacks"] + counters["overflow"] == len(payloads)
    assert counters["prepares"] >= 2 and len(replies) == len(payloads) - counters["overflow"]
    got = decoded(replies)       # the first few, queued while UDP TX was busy; the rest lost
    assert [(r.type, r.op) for r in got] == [(VrType.PREPARE_OK, op)
                                             for op in range(1, len(got) + 1)]


def random_messages(rng, count):
    """A leader's traffic with the faults of a real network: mostly the next prepare, with
    repeats, gaps, commits, view changes and the odd stray or broken datagram."""
    view, op, out = 0, 0, []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.55:
            op += 1 if rng.random() < 0.85 else rng.choice([-1, 0, 2])
            op = max(op, 1)
            out.append(VrMessage(VrType.PREPARE, shard=SHARD, view=view, op=op,
                                 commit=max(0, op - rng.randrange(3)),
                                 client=rng.getrandbits(32), request=rng.getrandbits(32),
                                 digest=rng.getrandbits(64)).pack())
        elif roll < 0.7:
            out.append(VrMessage(VrType.COMMIT, shard=SHARD, view=view,
                                 commit=rng.randrange(op + 2)).pack())
        elif roll < 0.78:
            view += rng.choice([0, 1])
            out.append(VrMessage(VrType.START_VIEW_CHANGE, shard=SHARD, view=view).pack())
        elif roll < 0.86:
            out.append(VrMessage(VrType.START_VIEW, shard=SHARD, view=view, op=op,
                                 commit=rng.randrange(op + 1),
                                 digest=rng.getrandbits(64)).pack())
        elif roll < 0.94:
            out.append(VrMessage(VrType.LOG_QUERY, shard=SHARD, op=rng.randrange(op + 2)).pack())
        else:
            good = out[-1] if out else prepare(1)
            out.append(good[:rng.randrange(MESSAGE_BYTES)] if rng.random() < 0.5
                       else VrMessage(VrType.PREPARE, shard=SHARD ^ 1).pack())
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_random_traffic_with_stalls_matches_the_software_witness(width):
    rng = random.Random(width)
    payloads = random_messages(rng, 40)
    replies, counters, _ = run_tile(width, payloads, log_depth=8, stall=0.3, seed=width,
                                    queue=len(payloads))     # no overflow: not the point here
    expected, model_counters = model_run(payloads, log_depth=8)
    assert replies == expected
    assert counters == {**model_counters, "framing": 0, "overflow": 0}
    assert model_counters["prepares"] > 5 and model_counters["nacks"] > 2


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="power of two"):
        witness_tile(64, log_depth=12)
    with pytest.raises(ValueError, match="shard"):
        VrWitnessTile(TileEnv("vr", width=64), shard=1 << 16)
    two = {"data": {1: [Endpoint("a", 0, 0)], 2: [Endpoint("b", 1, 0)]}}
    with pytest.raises(ValueError, match="one next hop"):
        VrWitnessTile(TileEnv("vr", width=64, routes=two))


def test_the_codec_round_trips_and_refuses_what_is_not_a_message():
    msg = VrMessage(VrType.DO_VIEW_CHANGE, shard=2, view=5, op=1 << 40, commit=3, client=9,
                    request=11, digest=(1 << 64) - 1, normal_view=4,
                    status=VrStatus.VIEW_CHANGE)
    raw = msg.pack()
    assert len(raw) == MESSAGE_BYTES and raw[0] == MAGIC and raw[1] == VrType.DO_VIEW_CHANGE.value
    assert raw[2:4] == (2).to_bytes(2, "big") and raw[8:12] == (5).to_bytes(4, "big")
    assert VrMessage.unpack(raw) == msg
    for bad in (raw[:-1], raw + b"\0", b"\0" + raw[1:], raw[:1] + b"\x63" + raw[2:]):
        with pytest.raises(ValueError):
            VrMessage.unpack(bad)
