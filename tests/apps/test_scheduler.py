"""The round-robin scheduler of TCP connections alone, at 64 and 512 bits (Amaranth's
simulator): each new connection goes to the next worker, and every later engine message about
it to the same worker; announcements of connections that ended unannounced are dropped and
counted. (Under Apiary, with capabilities, it is tested in tests/tcp/test_tcp_apiary.py.)"""

import random

import pytest

from apiary.noc.header import Fbits
from apiary.noc.nexthop import Endpoint
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv
from beehive.apps.scheduler import KEY_WORKER, TcpSchedulerTile
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import (BufferKind, Status, app_message_flits, decode_app_message,
                                   flow_handle)
from beehive.proto.tcp.config import TcpConfig

from test_tcp_apps import read_counters

WORKERS = [(4, 0, Fbits.LOCAL0), (4, 1, Fbits.LOCAL0), (5, 2, Fbits.LOCAL1)]
CONFIG = TcpConfig(flows=8)


def scheduler(width):
    routes = {KEY_WORKER: [Endpoint(f"w{k}", x, y, f) for k, (x, y, f) in enumerate(WORKERS)]}
    env = TileEnv(name="sched", x=1, y=1, width=width, routes={"data": routes})
    return TcpSchedulerTile(env, config=CONFIG)


def script(seed):
    """Engine messages for several connections, interleaved, and the worker each must reach
    (None: dropped)."""
    rng = random.Random(seed)
    messages, expect = [], []
    turn = 0
    owner = {}
    for conn in range(7):
        slot, gen = rng.randrange(CONFIG.flows), conn % 16
        handle = flow_handle(slot, gen)
        owner[handle] = turn
        turn = (turn + 1) % len(WORKERS)
        messages += [(MsgType.TCP_NEW_FLOW_NOTIF, dict(flow=handle, kind=BufferKind.RECEIVE)),
                     (MsgType.TCP_NEW_FLOW_NOTIF, dict(flow=handle, kind=BufferKind.SEND))]
        expect += [owner[handle]] * 2
        for _ in range(rng.randrange(1, 4)):
            kind = rng.choice([MsgType.TCP_RX_MSG_RESP, MsgType.TCP_TX_MSG_RESP])
            messages.append((kind, dict(flow=handle, length=rng.randrange(1 << 16))))
            expect.append(owner[handle])
        if rng.random() < 0.3:        # a connection reset before it was announced
            messages.append((MsgType.TCP_NEW_FLOW_NOTIF, dict(status=Status.RESET)))
            expect.append(None)
    return messages, expect


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("seed", [1, 2])
def test_each_connection_stays_with_the_worker_it_was_given(width, seed):
    tile = scheduler(width)
    messages, expect = script(seed)
    wanted = [(i, w) for i, w in enumerate(expect) if w is not None]
    got = []
    rng = random.Random(seed)

    async def feed(ctx):
        for msg_type, fields in messages:
            await send_flits(ctx, tile.noc_in, app_message_flits(width, msg_type, dst=(1, 1),
                                                                 src=(3, 0), **fields),
                             stall=0.3, rng=rng)

    async def collect(ctx):
        for _ in wanted:
            got.append(decode_app_message(await recv_flits(ctx, tile.noc_out, stall=0.3,
                                                           rng=rng), width))
        await ctx.tick().repeat(50)
        got.append(read_counters(ctx, tile))

    simulate(tile, feed, collect, timeout=20_000)
    counters = got.pop()
    assert len(got) == len(wanted)
    for (index, worker), (header, meta) in zip(wanted, got):
        msg_type, fields = messages[index]
        assert (header.dst_x, header.dst_y, header.dst_fbits) == WORKERS[worker]
        assert header.msg_type == msg_type.value
        assert {k: meta[k] for k in fields} == {k: int(v) for k, v in fields.items()}
    assert counters["flows"] == 7
    assert counters["forwarded"] == len(wanted)
    assert counters["dropped"] == expect.count(None)
    assert counters["overflow"] == 0


def test_the_workers_are_checked():
    env = TileEnv(name="sched", width=64, routes={"data": {"other": [Endpoint("x", 1, 1)]}})
    with pytest.raises(ValueError, match="routes with key 'worker'"):
        TcpSchedulerTile(env, config=CONFIG)


@pytest.mark.parametrize("trusted", [True, False])
def test_one_worker_converts_to_verilog(trusted):
    # A single worker needs no index bits; the tile must still give Yosys no zero-width memory.
    from amaranth.back import verilog
    env = TileEnv(name="sched", width=64, trusted=trusted,
                  routes={"data": {KEY_WORKER: [Endpoint("w0", 2, 2)]}})
    text = verilog.convert(TcpSchedulerTile(env, config=CONFIG), name="sched")
    assert "module sched" in text
