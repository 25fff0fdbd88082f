"""The context scheduler alone, at 64 and 512 bits (Amaranth's simulator): eight connections
over two workers, each engine message resumed once, in its connection's order, on whichever
worker is free, with the context block the connection last yielded (zeros for a new one);
a connection runs on one worker at a time and a worker runs one connection; the blocks live in
a memory model between turns. Around it, in Python: the engine (which answers a connection's
turn with its next message, as the TCP engine answers a request), the workers (each turn adds
to the block and yields it, after a random delay) and the context memory."""

import random
from collections import deque

import pytest

from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.nexthop import Endpoint
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, MEM_META, STORE_MEM, STORE_MEM_ACK,
                                   decode_mem_message, mem_message_flits)
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv
from beehive.apps.contexts import (KEY_CTX_MEM, KEY_WORKER, RESUME_FORMAT, YIELD_FORMAT,
                                   ContextMsgType, TcpContextSchedulerTile)
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import APP_META, BufferKind, Status, app_message_flits, flow_handle
from beehive.proto.tcp.config import TcpConfig

from test_tcp_apps import read_counters

HERE = (1, 1)
ENGINE = (3, 0)
WORKERS = [(4, 0, Fbits.LOCAL0), (4, 1, Fbits.LOCAL1)]
MEMORY = (5, 0, Fbits.LOCAL0)
CONFIG = TcpConfig(flows=8)
CTX_BYTES = 32
CTX_BASE = 0x400


def scheduler(width):
    routes = {KEY_WORKER: [Endpoint(f"w{k}", x, y, f) for k, (x, y, f) in enumerate(WORKERS)],
              KEY_CTX_MEM: [Endpoint("ctx", *MEMORY)]}
    env = TileEnv(name="sched", x=HERE[0], y=HERE[1], width=width, routes={"data": routes})
    return TcpContextSchedulerTile(env, config=CONFIG, ctx_bytes=CTX_BYTES, ctx_base=CTX_BASE)


def engine_flits(width, msg_type, **fields):
    return app_message_flits(width, msg_type, dst=HERE, src=ENGINE, **fields)


def connection_events(rng, handle):
    """A connection's engine messages, in order: its two announcements, then answers."""
    events = [(MsgType.TCP_NEW_FLOW_NOTIF, dict(flow=handle, kind=BufferKind.RECEIVE,
                                                 peer_port=1000 + handle)),
              (MsgType.TCP_NEW_FLOW_NOTIF, dict(flow=handle, kind=BufferKind.SEND))]
    for _ in range(rng.randrange(2, 7)):
        kind = rng.choice([MsgType.TCP_RX_MSG_RESP, MsgType.TCP_TX_MSG_RESP])
        events.append((kind, dict(flow=handle, length=rng.randrange(1 << 16),
                                  ptr=rng.randrange(1 << 32))))
    return events


def turn(block, msg_type, fields):
    """What a worker's turn does to a block: counts the turn and folds the message in."""
    turns = int.from_bytes(block[:4], "little") + 1
    mix = (int.from_bytes(block[4:8], "little") * 31 + int(msg_type.value)
           + fields.get("length", 0)) % (1 << 32)
    return turns.to_bytes(4, "little") + mix.to_bytes(4, "little") + block[8:]


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("seed", [1, 2])
def test_eight_connections_over_two_workers_resume_with_their_blocks(width, seed):
    rng = random.Random(seed)
    tile = scheduler(width)
    conns = {flow_handle(slot, 1): connection_events(rng, flow_handle(slot, 1))
             for slot in range(CONFIG.flows)}
    # The engine has at most the two announcements and one answer out per connection (the
    # rest come one per turn, below); an announcement of a connection reset before it was
    # announced is dropped.
    to_tile = deque()
    first = {h: deque(events[:3]) for h, events in conns.items()}
    while any(first.values()):                  # interleaved, each connection in order
        msg_type, fields = first[rng.choice([h for h in first if first[h]])].popleft()
        to_tile.append(("engine", engine_flits(width, msg_type, **fields)))
    to_tile.insert(5, ("engine", engine_flits(width, MsgType.TCP_NEW_FLOW_NOTIF,
                                              status=Status.RESET)))
    sent = {h: 3 for h in conns}            # events of each connection given to the tile
    done = {h: 0 for h in conns}            # events of each connection resumed
    blocks = {h: bytes(CTX_BYTES) for h in conns}     # the block each last yielded
    memory = bytearray(CTX_BASE + CONFIG.flows * CTX_BYTES)
    held = []                               # yields the workers have not sent yet
    running = {}                            # worker -> connection, from resume to yield sent
    workers_seen = {h: set() for h in conns}
    total = sum(len(e) for e in conns.values())
    finished = []

    async def network(ctx):
        """The tile's input: memory answers first, then at random a held yield or the next
        engine message."""
        while not finished:
            answers = [m for m in to_tile if m[0] == "memory"]
            choices = [m for m in to_tile if m[0] == "engine"][:1] + held[:]
            if answers:
                item = answers[0]
                to_tile.remove(item)
            elif choices and rng.random() < 0.5:
                item = rng.choice(choices)
                if item in held:
                    held.remove(item)
                    del running[item[2]]
                else:
                    to_tile.remove(item)
            else:
                await ctx.tick()
                continue
            await send_flits(ctx, tile.noc_in, item[1], stall=0.2, rng=rng)

    async def outside(ctx):
        """The tile's output: the context memory and the workers."""
        stores = 0
        while sum(done.values()) < total or stores < total:
            flits = await recv_flits(ctx, tile.noc_out, stall=0.2, rng=rng)
            msg_type = decode_meta_message(flits, width, MEM_META.size)[0].msg_type
            if msg_type in (LOAD_MEM, STORE_MEM):
                header, meta, payload = decode_mem_message(flits, width)
                assert (header.dst_x, header.dst_y, header.dst_fbits) == MEMORY
                addr, size = meta["addr"], meta["size"]
                assert size == CTX_BYTES and (addr - CTX_BASE) % CTX_BYTES == 0
                if msg_type == STORE_MEM:
                    stores += 1
                    memory[addr:addr + size] = payload
                    ack = mem_message_flits(width, STORE_MEM_ACK, addr, size, dst=HERE,
                                            dst_fbits=Fbits.LOCAL1, src=MEMORY[:2])
                else:
                    ack = mem_message_flits(width, LOAD_MEM_ACK, addr, size,
                                            bytes(memory[addr:addr + size]), dst=HERE,
                                            dst_fbits=Fbits.LOCAL1, src=MEMORY[:2])
                to_tile.append(("memory", ack))
                continue
            assert msg_type == ContextMsgType.CTX_RESUME.value
            header, meta, block = decode_meta_message(flits, width, RESUME_FORMAT.size)
            worker = WORKERS.index((header.dst_x, header.dst_y, header.dst_fbits))
            fields = RESUME_FORMAT.unpack(meta)
            app = APP_META.unpack(fields["app"])
            handle = app["flow"]
            # One connection per worker, one worker per connection.
            assert worker not in running, (worker, running)
            assert handle not in running.values()
            # The next message of the connection, as the engine sent it.
            msg_type, expect = conns[handle][done[handle]]
            assert fields["event"] == msg_type.value
            assert {k: app[k] for k in expect} == {k: int(v) for k, v in expect.items()}
            # With the block it last yielded (zeros, for a new connection).
            fresh = msg_type == MsgType.TCP_NEW_FLOW_NOTIF and expect.get("kind") == \
                BufferKind.RECEIVE
            assert block == (bytes(CTX_BYTES) if fresh else blocks[handle])
            done[handle] += 1
            workers_seen[handle].add(worker)
            blocks[handle] = turn(block, msg_type, expect)
            x, y, fbits = WORKERS[worker]
            yield_flits = meta_message_flits(
                width, NocHeader(dst_x=HERE[0], dst_y=HERE[1], dst_fbits=Fbits.LOCAL1,
                                 src_x=x, src_y=y, src_fbits=fbits,
                                 msg_type=ContextMsgType.CTX_YIELD.value),
                YIELD_FORMAT.pack(flow=handle), YIELD_FORMAT.size, blocks[handle])
            running[worker] = handle
            held.append(("yield", yield_flits, worker))
            # The engine answers the turn's request with the connection's next message.
            if sent[handle] < len(conns[handle]):
                msg_type, more = conns[handle][sent[handle]]
                sent[handle] += 1
                to_tile.append(("engine", engine_flits(width, msg_type, **more)))
        while held or any(m[0] == "memory" for m in to_tile):
            await ctx.tick()
        await ctx.tick().repeat(50)
        finished.append(read_counters(ctx, tile))

    simulate(tile, network, outside, timeout=200_000)
    counters = finished[0]
    assert done == {h: len(e) for h, e in conns.items()}
    # Each connection's last block is in the context memory, where its slot's block is.
    for handle, block in blocks.items():
        at = CTX_BASE + (handle & 0xFFF) * CTX_BYTES
        assert bytes(memory[at:at + CTX_BYTES]) == block
    assert counters["resumes"] == counters["yields"] == total
    assert counters["dropped"] == 1 and counters["overflow"] == 0
    assert counters["bad_yield"] == 0 and counters["mem_errors"] == 0
    # More connections than workers, and connections moved between them.
    assert sum(len(s) == 2 for s in workers_seen.values()) >= 2
    assert counters["migrations"] >= 2


def test_a_stray_yield_is_dropped_and_a_slots_next_connection_starts_from_zeros():
    width = 64
    tile = scheduler(width)
    memory = {}
    got = []

    def yield_from(worker, handle, block):
        x, y, fbits = WORKERS[worker]
        return meta_message_flits(
            width, NocHeader(dst_x=HERE[0], dst_y=HERE[1], dst_fbits=Fbits.LOCAL1, src_x=x,
                             src_y=y, src_fbits=fbits, msg_type=ContextMsgType.CTX_YIELD.value),
            YIELD_FORMAT.pack(flow=handle), YIELD_FORMAT.size, block)

    async def next_resume(ctx):
        """Serve the context memory until the next resume: (worker, APP_META fields, block)."""
        while True:
            flits = await recv_flits(ctx, tile.noc_out)
            header, meta, payload = decode_mem_message(flits, width)
            if header.msg_type == STORE_MEM:
                memory[meta["addr"]] = payload
                reply = mem_message_flits(width, STORE_MEM_ACK, meta["addr"], CTX_BYTES,
                                          dst=HERE, dst_fbits=Fbits.LOCAL1)
            elif header.msg_type == LOAD_MEM:
                reply = mem_message_flits(width, LOAD_MEM_ACK, meta["addr"], CTX_BYTES,
                                          memory[meta["addr"]], dst=HERE,
                                          dst_fbits=Fbits.LOCAL1)
            else:
                header, meta, block = decode_meta_message(flits, width, RESUME_FORMAT.size)
                worker = WORKERS.index((header.dst_x, header.dst_y, header.dst_fbits))
                return worker, APP_META.unpack(RESUME_FORMAT.unpack(meta)["app"]), block
            await send_flits(ctx, tile.noc_in, reply)

    async def bench(ctx):
        old, new = flow_handle(3, 1), flow_handle(3, 2)
        await send_flits(ctx, tile.noc_in, engine_flits(width, MsgType.TCP_NEW_FLOW_NOTIF,
                                                        flow=old, kind=BufferKind.RECEIVE))
        worker, _, block = await next_resume(ctx)
        assert block == bytes(CTX_BYTES)
        # Five more messages while it runs: four wait, the fifth is dropped.
        for length in range(5):
            await send_flits(ctx, tile.noc_in, engine_flits(width, MsgType.TCP_RX_MSG_RESP,
                                                            flow=old, length=length + 1))
        # The other worker says it is done with the connection: it is not.
        await send_flits(ctx, tile.noc_in, yield_from(1 - worker, old, b"\xee" * CTX_BYTES))
        await ctx.tick().repeat(100)
        got.append(read_counters(ctx, tile))
        # Its own worker yields: each waiting message resumes with the block yielded last.
        for length in range(1, 5):
            await send_flits(ctx, tile.noc_in, yield_from(worker, old, bytes([length]) * 32))
            worker, app, block = await next_resume(ctx)
            assert app["length"] == length and block == bytes([length]) * CTX_BYTES
        assert memory == {CTX_BASE + 3 * CTX_BYTES: b"\x04" * CTX_BYTES}
        # The slot's next connection starts from zeros, not from the block its last one left.
        await send_flits(ctx, tile.noc_in, yield_from(worker, old, b"\x77" * CTX_BYTES))
        await send_flits(ctx, tile.noc_in, engine_flits(width, MsgType.TCP_NEW_FLOW_NOTIF,
                                                        flow=new, kind=BufferKind.RECEIVE))
        worker, app, block = await next_resume(ctx)
        assert app["flow"] == new and block == bytes(CTX_BYTES)
        assert memory == {CTX_BASE + 3 * CTX_BYTES: b"\x77" * CTX_BYTES}
        got.append(read_counters(ctx, tile))

    simulate(tile, bench, timeout=20_000)
    before, after = got
    assert before["bad_yield"] == 1 and before["overflow"] == 1 and before["yields"] == 0
    assert after["yields"] == 5 and after["resumes"] == 6 and after["bad_yield"] == 1


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="ctx_bytes must be a power of two"):
        TcpContextSchedulerTile(ctx_bytes=24)
    with pytest.raises(ValueError, match="ctx_base must be a multiple"):
        TcpContextSchedulerTile(ctx_bytes=32, ctx_base=16)
    env = TileEnv(name="sched", width=64, routes={"data": {KEY_WORKER: [Endpoint("w", 2, 2)]}})
    with pytest.raises(ValueError, match="one route with key 'ctx_mem'"):
        TcpContextSchedulerTile(env, config=CONFIG)
