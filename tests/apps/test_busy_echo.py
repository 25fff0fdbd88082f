"""The busy UDP echo on its own, at 64 and 512 bits: every message comes back unchanged but for
its header (UDP TX's address, ``UDP_TX_SEGMENT``); with seeded random gaps and back-pressure no
two messages start fewer than ``cycles`` cycles apart; offered back to back into a free output
they start exactly ``cycles`` apart (or a long message's flit count apart), the first at once."""

import random

import pytest

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.nexthop import Endpoint
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.testbench import simulate, transfers
from apiary.tile import TileEnv
from beehive.apps.busy_echo import UdpBusyEchoTile
from beehive.proto.messages import META_BITS, PACKET_META, MsgType

WIDTHS = [64, 512]
HERE = (3, 1)
UDP_TX = (2, 1)


def busy(width, cycles=16, routes=True):
    env = TileEnv(name="app", x=HERE[0], y=HERE[1], width=width,
                  routes={"data": {None: [Endpoint("udp_tx", *UDP_TX, Fbits.LOCAL0)]}}
                  if routes else {})
    return UdpBusyEchoTile(env, cycles=cycles)


def random_meta(rng):
    return {"peer_ip": rng.getrandbits(32), "local_ip": rng.getrandbits(32),
            "peer_port": rng.getrandbits(16), "local_port": 7, "l4_sum": rng.getrandbits(16)}


def message(width, payload, meta):
    header = NocHeader(dst_x=HERE[0], dst_y=HERE[1], src_x=4, src_y=0,
                       msg_type=MsgType.UDP_RX_SEGMENT.value)
    return meta_message_flits(width, header, PACKET_META.pack(meta), META_BITS, payload)


def starts(flit_cycles, messages):
    """The cycles of each message's first flit, from the cycles of all flits in order."""
    out, k = [], 0
    for flits in messages:
        out.append(flit_cycles[k])
        k += len(flits)
    return out


def run(dut, messages, *, rng=None, gaps=0.0, stall=0.0, settle=40):
    """Send ``messages`` (flit lists), collect as many; returns ``(out, ins, outs, counters)``:
    the messages out as flit lists, the cycles of every flit in and out, the counters."""
    out, ins, outs, counters = [], [], [], {}

    async def source(ctx):
        for flits in messages:
            await send_flits(ctx, dut.noc_in, flits, rng=rng, stall=gaps)

    async def sink(ctx):
        for _ in messages:
            out.append(await recv_flits(ctx, dut.noc_out, rng=rng, stall=stall))
        ctx.set(dut.noc_out.ready, 1)
        for _ in range(settle):
            assert not ctx.get(dut.noc_out.valid), "more messages out than in"
            await ctx.tick()
        for name in ("forwarded", "dropped"):
            counters[name] = ctx.get(getattr(dut.counters, name))

    simulate(dut, sink, background=[source, transfers(dut.noc_in, ins),
                                    transfers(dut.noc_out, outs)], timeout=100_000)
    return out, ins, outs, counters


def check_echoed(width, sent, out):
    assert len(out) == len(sent)
    for (payload, meta), flits in zip(sent, out):
        header, got_meta, got_payload = decode_meta_message(flits, width, META_BITS)
        assert got_payload == payload
        assert PACKET_META.unpack(got_meta) == PACKET_META.unpack(PACKET_META.pack(meta))
        assert header.msg_type == MsgType.UDP_TX_SEGMENT.value
        assert (header.dst_x, header.dst_y, header.dst_fbits) == (*UDP_TX, Fbits.LOCAL0)
        assert (header.src_x, header.src_y) == HERE


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("width", WIDTHS)
def test_echoes_unchanged_and_never_starts_sooner_than_cycles_apart(width, seed):
    rng = random.Random(seed)
    sent = [(bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 18, 64, 200]))),
             random_meta(rng)) for _ in range(16)]
    messages = [message(width, p, m) for p, m in sent]
    cycles = 8
    out, ins, outs, counters = run(busy(width, cycles), messages, rng=rng, gaps=0.3,
                                   stall=0.3)
    check_echoed(width, sent, out)
    first = starts(outs, messages)
    assert all(b - a >= cycles for a, b in zip(first, first[1:]))
    assert ins == outs                             # cut-through: every flit in and out at once
    assert counters == {"forwarded": len(sent), "dropped": 0}


@pytest.mark.parametrize("cycles", [1, 5, 16])
@pytest.mark.parametrize("width", WIDTHS)
def test_saturated_starts_exactly_cycles_apart(width, cycles):
    """64-byte payloads (3 flits at 512 bits, 14 at 64), then one message longer than
    ``cycles`` (a 1,000-byte payload), then 64-byte payloads again, back to back."""
    rng = random.Random(width + cycles)
    sizes = [64] * 6 + [1000] + [64] * 3
    sent = [(bytes(rng.getrandbits(8) for _ in range(n)), random_meta(rng)) for n in sizes]
    messages = [message(width, p, m) for p, m in sent]
    out, ins, outs, counters = run(busy(width, cycles), messages)
    check_echoed(width, sent, out)
    first = starts(outs, messages)
    assert first[0] == starts(ins, messages)[0]    # 0 cycles of latency when idle
    assert [b - a for a, b in zip(first, first[1:])] == \
        [max(cycles, len(f)) for f in messages[:-1]]
    assert counters["forwarded"] == len(sent)


@pytest.mark.parametrize("width", WIDTHS)
def test_no_next_hop_drops_and_counts(width):
    rng = random.Random(3)
    messages = [message(width, bytes(20), random_meta(rng)) for _ in range(3)]
    dut = busy(width, routes=False)
    counted = {}

    async def tb(ctx):
        for flits in messages:
            await send_flits(ctx, dut.noc_in, flits)
        await ctx.tick()
        counted["dropped"] = ctx.get(dut.counters.dropped)

    simulate(dut, tb, timeout=1000)
    assert counted == {"dropped": 3}


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_cycles_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="cycles must be a positive integer"):
        busy(64, bad)
