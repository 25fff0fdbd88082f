"""The echo copy of the context scheduler.

* Its turns alone (Amaranth's simulator, 64 and 512 bits): each engine message it is resumed
  with, what it sends, and the block it yields.
* Contexts in a whole design (examples/tcp_contexts.py, 64 bits, Verilator; slow): eight TCP
  connections at once over two echo copies that keep no connection between turns; every byte
  comes back in order on its own connection, both copies serve, connections move between them
  (their state travelling in context blocks through the context memory), and all eight close.
  Trusted, and under Apiary (every tile of the engine, the scheduler and the copies behind a
  monitor; the blocks in a kernel segment, each connection's rings sent to both copies).

The scheduler alone, with scripted copies, is tested in test_contexts.py."""

import pathlib

import pytest

from apiary.load import load_script
from apiary.noc.framing import decode_meta_message, meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.nexthop import Endpoint
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK,
                                   decode_mem_message, mem_message_flits)
from apiary.sim import open_sim
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv
from beehive.apps.context_echo import ECHO_CONTEXT, KEY_SCHED, TcpContextEchoTile
from beehive.apps.contexts import RESUME_FORMAT, YIELD_FORMAT, ContextMsgType
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import (APP_META, BufferKind, Status, decode_app_message,
                                   flow_handle)
from beehive.proto.tcp.config import TcpConfig
from harness.bench.tcp import _close_all
from harness.bench.tcp_peer import Peer, run_peers


EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
tcp_contexts = load_script(EXAMPLES / "tcp_contexts.py")

TEST = dict(flows=8, ring=4096, rto=20_000, linger=30_000, syn_retries=2, max_retries=3)

HERE, SCHED, TCP_RX, TCP_TX = (1, 1), (4, 0, Fbits.LOCAL1), (3, 0, Fbits.LOCAL2), (3, 1, 0)
RX_MEM, TX_MEM = (2, 3), (2, 2)


def block_fields(block):
    """The echo's context fields of a block (bytes)."""
    value = int.from_bytes(block, "little")
    fields, at = {}, 0
    for name, field in ECHO_CONTEXT:
        width = field.shape.size if hasattr(field.shape, "size") else field.width
        fields[name] = value >> at & ((1 << width) - 1)
        at += width
    return fields


@pytest.mark.parametrize("width", [64, 512])
def test_each_turn_of_the_echo_copy(width):
    routes = {"tcp_rx": [Endpoint("tcp_rx", *TCP_RX)], "tcp_tx": [Endpoint("tcp_tx", *TCP_TX)],
              KEY_SCHED: [Endpoint("sched", *SCHED)]}
    env = TileEnv(name="app", x=HERE[0], y=HERE[1], width=width, routes={"data": routes})
    tile = TcpContextEchoTile(env, config=TcpConfig(flows=8), chunk=512)
    flow = flow_handle(5, 3)
    data = bytes((i * 13 + 5) % 256 for i in range(512))
    out = []

    def resume(event, block, **fields):
        return meta_message_flits(
            width, NocHeader(dst_x=HERE[0], dst_y=HERE[1], src_x=4, src_y=0,
                             msg_type=ContextMsgType.CTX_RESUME.value),
            RESUME_FORMAT.pack(event=event.value, app=APP_META.pack(dict(flow=flow, **fields))),
            RESUME_FORMAT.size, block)

    async def take(ctx):
        """The tile's next message: ('app', type, dst, fields), ('mem', type, dst, meta,
        payload) or ('yield', dst, flow, block)."""
        flits = await recv_flits(ctx, tile.noc_out)
        header = decode_meta_message(flits, width, 0)[0]
        dst = (header.dst_x, header.dst_y, header.dst_fbits)
        if header.msg_type == ContextMsgType.CTX_YIELD.value:
            _, meta, block = decode_meta_message(flits, width, YIELD_FORMAT.size)
            return ("yield", dst, YIELD_FORMAT.unpack(meta)["flow"], block)
        if header.msg_type in (LOAD_MEM, STORE_MEM):
            _, meta, payload = decode_mem_message(flits, width)
            return ("mem", header.msg_type, dst, meta, payload)
        _, fields = decode_app_message(flits, width)
        return ("app", header.msg_type, dst, fields)

    async def turn(ctx, event, block, **fields):
        await send_flits(ctx, tile.noc_in, resume(event, block, **fields))

    async def bench(ctx):
        zero = bytes(32)
        # A new connection: ask for its first byte.
        await turn(ctx, MsgType.TCP_NEW_FLOW_NOTIF, zero, kind=BufferKind.RECEIVE)
        kind, msg_type, dst, fields = await take(ctx)
        assert (msg_type, dst) == (MsgType.TCP_RX_MSG_REQ.value, TCP_RX)
        assert fields["flow"] == flow and fields["length"] == 1
        assert await take(ctx) == ("yield", SCHED, flow, zero)
        # Its send ring: nothing to do.
        await turn(ctx, MsgType.TCP_NEW_FLOW_NOTIF, zero, kind=BufferKind.SEND)
        assert await take(ctx) == ("yield", SCHED, flow, zero)
        # 700 bytes to read: room for a 512-byte chunk asked for, the chunk in the block.
        await turn(ctx, MsgType.TCP_RX_MSG_RESP, zero, status=Status.OK, ptr=1000,
                   addr=0x1_03E8, size_log2=12, mem_x=RX_MEM[0], mem_y=RX_MEM[1], length=700)
        _, msg_type, dst, fields = await take(ctx)
        assert (msg_type, dst, fields["length"]) == (MsgType.TCP_TX_MSG_REQ.value, TCP_TX, 512)
        _, _, _, block = await take(ctx)
        assert block_fields(block) == dict(rx_ptr=1000, rx_addr=0x1_03E8, rx_log2=12,
                                           rx_mem=RX_MEM[0] | RX_MEM[1] << 8, n=512, closed=0)
        # Room: the chunk loaded whole, stored, both pointers moved, the next byte asked for.
        await turn(ctx, MsgType.TCP_TX_MSG_RESP, block, status=Status.OK, ptr=77,
                   addr=0x2_004D, size_log2=12, mem_x=TX_MEM[0], mem_y=TX_MEM[1], length=4000)
        _, msg_type, dst, meta, _ = await take(ctx)
        assert (msg_type, dst[:2]) == (LOAD_MEM, RX_MEM)
        assert (meta["addr"], meta["size"], meta["wrap"]) == (0x1_03E8, 512, 12)
        await send_flits(ctx, tile.noc_in, mem_message_flits(
            width, LOAD_MEM_ACK, 0x1_03E8, 512, data, dst=HERE, dst_fbits=Fbits.LOCAL1))
        _, msg_type, dst, meta, payload = await take(ctx)
        assert (msg_type, dst[:2], payload) == (STORE_MEM, TX_MEM, data)
        assert (meta["addr"], meta["size"], meta["wrap"]) == (0x2_004D, 512, 12)
        await send_flits(ctx, tile.noc_in, mem_message_flits(
            width, STORE_MEM_ACK, 0x2_004D, 512, dst=HERE, dst_fbits=Fbits.LOCAL1))
        sent = [await take(ctx) for _ in range(4)]
        assert [(m[1], m[3]["ptr"]) for m in sent[:2]] == [
            (MsgType.TCP_TX_ADJUST_PTR.value, 77 + 512), (MsgType.TCP_RX_ADJUST_PTR.value, 1512)]
        assert (sent[2][1], sent[2][3]["length"]) == (MsgType.TCP_RX_MSG_REQ.value, 1)
        assert block_fields(sent[3][3])["n"] == 0
        # The peer's FIN, nothing left: closed once, however often it is reported.
        await turn(ctx, MsgType.TCP_RX_MSG_RESP, sent[3][3], status=Status.EOF, length=0)
        _, msg_type, dst, _ = await take(ctx)
        assert (msg_type, dst) == (MsgType.TCP_CLOSE_REQ.value, TCP_TX)
        _, _, _, block = await take(ctx)
        assert block_fields(block)["closed"] == 1
        await turn(ctx, MsgType.TCP_RX_MSG_RESP, block, status=Status.EOF, length=0)
        assert (await take(ctx))[0] == "yield"
        out.append({name: ctx.get(getattr(tile.counters, name))
                    for name in ("turns", "bytes", "closed", "mem_errors")})

    simulate(tile, bench, timeout=20_000)
    assert out == [dict(turns=6, bytes=512, closed=1, mem_errors=0)]


@pytest.mark.slow
@pytest.mark.parametrize("apiary", [False, True], ids=["trusted", "apiary"])
def test_eight_connections_over_two_copies_echo_every_byte(apiary):
    design = tcp_contexts.design(width=64, chunk=512, apiary=apiary, **TEST)
    with open_sim(design, "verilator") as sim:
        sim.run(300)
        peers = [Peer(sim, sport=43000 + k) for k in range(8)]
        for p in peers:
            p.connect()
        sent = {}
        for k, p in enumerate(peers):
            data = bytes((k * 41 + i * 7) % 251 for i in range(600 + 300 * k))
            sent[p.sport] = data
            for i in range(0, len(data), p.mss):
                p.send_data(data[i:i + p.mss])
        for _ in range(40):
            run_peers(sim, peers, 2000)
            if all(len(p.stream) >= len(sent[p.sport]) for p in peers):
                break
        for p in peers:
            assert bytes(p.stream) == sent[p.sport], p.sport
        _close_all(sim, peers)
        c = sim.counters()
        total = sum(map(len, sent.values()))
        assert c["app_bytes"] + c["app1_bytes"] == total
        assert c["app_bytes"] > 0 and c["app1_bytes"] > 0
        assert c["app_turns"] + c["app1_turns"] == c["sched_resumes"] == c["sched_yields"]
        assert c["sched_migrations"] > 0
        assert c["app_closed"] + c["app1_closed"] == 8
        assert c["sched_overflow"] == c["sched_bad_yield"] == c["sched_mem_errors"] == 0
        assert c["tcp_rx_closed"] == 8
        if apiary:
            for tile in ("tcp_rx", "tcp_tx", "sched", "app", "app1"):
                assert f"{tile}_monitor_faults" not in c or c[f"{tile}_monitor_faults"] == 0
            assert c["sched_alloc_failed"] == c["sched_grant_failed"] == 0
            # Each connection's two rings went to both copies.
            assert c["mm_derives"] >= 8 * (1 + 2 * 2)
