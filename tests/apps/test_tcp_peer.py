"""An application under Apiary learns each connection's peer (TcpAppTile's context module,
beehive/apps/tcp_app.py), in Amaranth's simulator at 64 and 512 bits. The tile is a probe that
answers every TCP_NEW_FLOW_NOTIF it is handed with a TCP_OPEN_REQ carrying that notification's
flow, kind and tuple, so the testbench reads what the application was told: the capability of a
receive ring is held until the engine answers the module's TCP_PEER_REQ (nothing reaches the
application before), then both rings' notifications carry the answer's tuple; an answer about
another flow is not taken for it, and with no answer the notification goes after
PEER_TIMEOUT cycles with a zero peer."""

import pytest
from amaranth import Module
from amaranth.lib import data

from apiary.noc.framing import meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.uapi import KERNEL_META, KernelMsgType
from apiary.stream.queue import Queue
from apiary.stream.testbench import simulate
from apiary.tile import Endpoint, TileEnv
from beehive.apps.tcp_app import PEER_TIMEOUT, TcpAppTile
from beehive.proto.messages import MsgType
from beehive.proto.tcp import TcpConfig
from beehive.proto.tcp.app import BufferKind, app_message_flits, decode_app_message, flow_handle
from beehive.proto.tcp.segments import GRANT_USER

APP, RX, TX = (1, 1), (2, 1), (3, 1)
CONFIG = TcpConfig(flows=4, rx_ring=256, tx_ring=256, mss=64)
PEER_IP, PEER_PORT, LOCAL_PORT = 0x0A00_0001, 40123, 7
_TOLD = data.StructLayout({"flow": 16, "kind": 2, "peer_ip": 32, "peer_port": 16,
                           "local_port": 16})


class PeerProbe(TcpAppTile):
    """Tells back, as a TCP_OPEN_REQ to the receive tile, each notification it is handed."""

    def elaborate(self, platform):
        m = Module()
        io = self.ports(m)
        app = io.app
        m.d.comb += io.mem.data.ready.eq(1)
        m.submodules.told = told = Queue(_TOLD, 4)
        m.d.comb += [told.i.valid.eq(app.valid & (app.type == MsgType.TCP_NEW_FLOW_NOTIF))]
        for name in _TOLD.members:
            m.d.comb += getattr(told.i.payload, name).eq(getattr(app.meta, name))
        t = told.o.payload
        with m.If(told.o.valid):
            m.d.comb += told.o.ready.eq(self.app_request(
                m, io.app_tx[0].i_hdr, MsgType.TCP_OPEN_REQ, self.tcp_rx, flow=t.flow,
                kind=t.kind, peer_ip=t.peer_ip, peer_port=t.peer_port,
                local_port=t.local_port))
        return m


def probe(width):
    routes = {"tcp_rx": [Endpoint("tcp_rx", *RX, Fbits.LOCAL2)],
              "tcp_tx": [Endpoint("tcp_tx", *TX)]}
    env = TileEnv(name="app", x=APP[0], y=APP[1], width=width, routes={"data": routes},
                  trusted=False)
    return PeerProbe(env, config=CONFIG)


def cap_notify(width, flow, kind, handle):
    """The monitor's CAP_NOTIFY of a ring the receive tile sent (its GRANT_USER word)."""
    user = GRANT_USER.const({"flow": flow, "kind": kind, "size_log2": 8}).as_value().value
    meta = KERNEL_META.const({"handle": handle, "user": user}).as_value().value
    header = NocHeader(dst_x=APP[0], dst_y=APP[1], dst_fbits=Fbits.LOCAL0, src_x=APP[0],
                       src_y=APP[1], msg_type=KernelMsgType.CAP_NOTIFY.value)
    return meta_message_flits(width, header, meta, KERNEL_META.size)


def peer_resp(width, flow, **fields):
    return app_message_flits(width, MsgType.TCP_PEER_RESP, dst=APP, src=RX, flow=flow, **fields)


async def quiet(ctx, port, cycles):
    """``cycles`` cycles in which ``port`` offers nothing."""
    ctx.set(port.ready, 1)
    for _ in range(cycles):
        _, _, valid = await ctx.tick().sample(port.valid)
        assert not valid
    ctx.set(port.ready, 0)


@pytest.mark.parametrize("width", [64, 512])
def test_notifications_under_apiary_carry_the_peer_the_engine_tells(width):
    tile = probe(width)
    first, second = flow_handle(2, 5), flow_handle(3, 1)

    async def bench(ctx):
        async def out():
            return decode_app_message(await recv_flits(ctx, tile.noc_out), width)

        await send_flits(ctx, tile.noc_in, cap_notify(width, first, BufferKind.RECEIVE, 0x21))
        await send_flits(ctx, tile.noc_in, cap_notify(width, first, BufferKind.SEND, 0x22))
        hdr, ask = await out()
        assert hdr.msg_type == MsgType.TCP_PEER_REQ.value and ask["flow"] == first
        assert (hdr.dst_x, hdr.dst_y, hdr.dst_fbits) == (*RX, Fbits.LOCAL2)
        await quiet(ctx, tile.noc_out, 100)           # the application is told nothing yet
        # An answer about another flow is not this one's.
        await send_flits(ctx, tile.noc_in, peer_resp(width, second, peer_ip=1, peer_port=2))
        await quiet(ctx, tile.noc_out, 20)
        await send_flits(ctx, tile.noc_in, peer_resp(width, first, peer_ip=PEER_IP,
                                                     peer_port=PEER_PORT,
                                                     local_port=LOCAL_PORT))
        for kind in (BufferKind.RECEIVE, BufferKind.SEND):
            hdr, told = await out()
            assert hdr.msg_type == MsgType.TCP_OPEN_REQ.value
            assert (told["flow"], told["kind"]) == (first, kind)
            assert (told["peer_ip"], told["peer_port"], told["local_port"]) == (
                PEER_IP, PEER_PORT, LOCAL_PORT)
        # No answer: after the timeout the notification goes, with no peer.
        await send_flits(ctx, tile.noc_in, cap_notify(width, second, BufferKind.RECEIVE, 0x23))
        hdr, ask = await out()
        assert hdr.msg_type == MsgType.TCP_PEER_REQ.value and ask["flow"] == second
        await quiet(ctx, tile.noc_out, PEER_TIMEOUT - 50)
        assert ctx.get(tile.counters.peer_timeouts) == 0
        hdr, told = await out()
        assert (told["flow"], told["kind"]) == (second, BufferKind.RECEIVE)
        assert (told["peer_ip"], told["peer_port"], told["local_port"]) == (0, 0, 0)
        assert ctx.get(tile.counters.peer_timeouts) == 1

    simulate(tile, bench, timeout=PEER_TIMEOUT + 2_000)
