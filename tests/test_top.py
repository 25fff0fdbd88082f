"""Elaboration of a whole design: tiles on their routers, top-level ports, empty positions."""

import random

import pytest
from amaranth import Module
from amaranth.lib.wiring import In, Out

from apiary.design import Design, DesignError
from apiary.load import load_design
from apiary.noc import Message, NocHeader, flit_signature
from apiary.noc.testbench import recv_message, send_message
from apiary.stream.testbench import recv_mac_frame, send_mac_frame, simulate
from apiary.tile import Tile, WiresSignature
from apiary.tiles import ForwardTile, PortTile
from apiary.top import DesignTop


def chain_design(width, full_routers=False):
    """Fig. 5b's chain on a 3×2 mesh, so that two positions stay empty (router only)."""
    d = Design("chain", cols=3, rows=2, width=width, full_routers=full_routers)
    d.add("eth", PortTile, at=(0, 0), route=True)
    d.add("ip", ForwardTile, at=(1, 0))
    d.add("udp", ForwardTile, at=(2, 0))
    d.add("app", PortTile, at=(2, 1))
    d.add("spare", PortTile, at=(1, 1))
    d.chain("eth", "ip", "udp", "app")
    return d


def test_top_level_ports_are_named_after_tiles():
    top = DesignTop(chain_design(64))
    members = set(top.signature.members)
    assert {"eth_tx", "eth_rx", "app_tx", "app_rx", "counters"} <= members
    assert not any(name.startswith(("ip_noc", "eth_noc")) for name in members)
    # The counters are a bank, collected from what the tiles declare, not from port names.
    assert top.bank.names == ["ip_dropped", "udp_dropped", "data_route_dropped"]
    assert set(top.signature.members["counters"].signature.members) == set(top.bank.names)
    assert [c.index for c in top.bank] == [0, 1, 2]
    assert DesignTop(chain_design(64, full_routers=True)).bank.names == [
        "ip_dropped", "udp_dropped", "data_edge_dropped", "data_empty_dropped"]
    assert top.bank["ip_dropped"].owner == "ip" and top.bank["ip_dropped"].width == 32
    assert "next hop" in top.bank["ip_dropped"].description


@pytest.mark.parametrize("full_routers", [False, True], ids=["specialised", "full"])
@pytest.mark.parametrize("width", [64, 512])
def test_messages_follow_the_chain_and_strays_are_counted(width, full_routers):
    """Strays (messages on no declared route) never reach a tile: specialised routers drop
    them where their path leaves the declared ones, full routers at the mesh edge or at the
    position without a tile."""
    top = DesignTop(chain_design(width, full_routers))
    rng = random.Random(width)
    msgs = [Message(NocHeader(msg_type=i), meta=[rng.getrandbits(width)] * (i % 2),
                    payload=rng.randbytes(rng.randrange(0, 300))) for i in range(12)]

    async def source(ctx):
        for msg in msgs:
            await send_message(ctx, top.eth_tx, msg, width, rng=rng, stall=0.3)

    async def stray(ctx):
        # Raw messages from the spare port: to the empty position (0, 1), and off the mesh.
        await send_message(ctx, top.spare_tx, Message(NocHeader(dst_x=0, dst_y=1)), width)
        await send_message(ctx, top.spare_tx, Message(NocHeader(dst_x=7, dst_y=0),
                                                      payload=bytes(99)), width)
        if not full_routers:
            # To a tile, but on no declared route (spare has none): dropped at spare's router,
            # and the chain's messages after it still arrive.
            await send_message(ctx, top.spare_tx, Message(NocHeader(dst_x=2, dst_y=1),
                                                          payload=bytes(77)), width)

    async def sink(ctx):
        for msg in msgs:
            got = await recv_message(ctx, top.app_rx, width, rng=rng, stall=0.3)
            assert got.payload == msg.payload and got.meta == msg.meta
            assert got.header.msg_type == msg.header.msg_type
            assert (got.header.src_x, got.header.src_y) == (2, 0)     # udp forwarded it
            assert (got.header.dst_x, got.header.dst_y) == (2, 1)
        await ctx.tick().repeat(20)
        if full_routers:
            assert ctx.get(top.counters.data_empty_dropped) == 1
            assert ctx.get(top.counters.data_edge_dropped) == 1
        else:
            assert ctx.get(top.counters.data_route_dropped) == 3
        assert ctx.get(top.counters.ip_dropped) == 0 and ctx.get(top.counters.udp_dropped) == 0

    simulate(top, sink, background=[source, stray], timeout=20_000)


class CtlPortTile(Tile):
    """A tile on the control plane only, its port brought out (like PortTile on the data plane)."""
    planes = ("ctl",)

    def __init__(self, env=None):
        super().__init__(env, {"tx": In(flit_signature(env.ctl_width)),
                               "rx": Out(flit_signature(env.ctl_width))})

    def elaborate(self, platform):
        m = Module()
        for src, dst in ((self.tx, self.ctl_out), (self.ctl_in, self.rx)):
            m.d.comb += [dst.valid.eq(src.valid), dst.payload.eq(src.payload),
                         src.ready.eq(dst.ready)]
        return m


def test_data_and_control_planes_are_separate_meshes():
    d = Design("planes", cols=2, rows=2, width=512)
    d.add("a", PortTile, at=(0, 0))
    d.add("b", PortTile, at=(1, 1))
    d.add("c", CtlPortTile, at=(1, 0))
    d.add("e", CtlPortTile, at=(0, 1))
    d.route("a", "b")
    d.route("c", "e", plane="ctl")
    top = DesignTop(d)
    assert top.planes == ["data", "ctl"]
    assert len(top.c_tx.payload.data) == 64 and len(top.a_tx.payload.data) == 512
    data_msg = Message(NocHeader(dst_x=1, dst_y=1, src_x=0, src_y=0), payload=bytes(range(100)))
    ctl_msg = Message(NocHeader(dst_x=0, dst_y=1, src_x=1, src_y=0), payload=b"ctl")

    async def senders(ctx):
        await send_message(ctx, top.a_tx, data_msg, 512)
        await send_message(ctx, top.c_tx, ctl_msg, 64)

    async def receivers(ctx):
        assert await recv_message(ctx, top.e_rx, 64) == Message.from_flits(ctl_msg.flits(64), 64)
        assert (await recv_message(ctx, top.b_rx, 512)
                == Message.from_flits(data_msg.flits(512), 512))
        # Nothing leaked across planes or off a declared route.
        assert ctx.get(top.counters.data_route_dropped) == 0
        assert ctx.get(top.counters.ctl_route_dropped) == 0

    simulate(top, receivers, background=[senders], timeout=2_000)


def echo_request(payload, sport):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    return bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
                 / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=sport, dport=7) / payload)


@pytest.mark.parametrize("enables", ["keep", "last_be"])
def test_mac_port_with_byte_enables_and_a_frame_the_mac_marks_bad(enables):
    """The UDP echo design behind its MAC edge: byte enables in and out (either convention), a
    frame whose FCS the MAC found wrong is dropped and counted by Ethernet RX as ``bad_fcs``,
    and the next request is echoed; the edge pads replies to 60 bytes when asked."""
    from apiary.load import load_design
    from apiary.stream.mac import MacOptions, MacPort
    from beehive.model import echo_reply
    width = 64
    design = load_design("examples/udp_echo.py", width=width)
    top = DesignTop(design, mac=MacOptions(byte_enables=enables, pad_to=60))
    assert [p.member for p in top.mac_ports] == ["eth_mac"]
    assert top.signature.members["eth_mac"].signature == MacPort(width, byte_enables=enables)
    good, bad, after = (echo_request(b"x" * n, 5000 + n) for n in (3, 30, 1))
    got, counters = [], {}

    async def wire(ctx):
        for frame, error in ((good, False), (bad, True), (after, False)):
            await send_mac_frame(ctx, top.eth_mac.rx, frame, width, enables, error=error)

    async def sink(ctx):
        for _ in range(2):
            got.append(await recv_mac_frame(ctx, top.eth_mac.tx, width, enables))
        for name in ("eth_rx_bad_fcs", "eth_rx_oversized", "eth_tx_forwarded"):
            counters[name] = ctx.get(getattr(top.counters, name))

    simulate(top, sink, background=[wire], timeout=5_000)
    assert got == [echo_reply(f)[0].ljust(60, b"\0") for f in (good, after)]
    assert counters == {"eth_rx_bad_fcs": 1, "eth_rx_oversized": 0, "eth_tx_forwarded": 2}


# -- dedicated wires between tiles (Design.wire) -----------------------------------------------

class _Pair(WiresSignature):
    def __init__(self):
        super().__init__({"value": Out(16), "echo": In(16)})


class _Driver(Tile):
    """Drives ``wires.value`` with its parameter and shows what comes back on ``seen``."""

    def __init__(self, env=None, *, value=0):
        super().__init__(env, {"wires": Out(_Pair()), "seen": Out(16)})
        self.value = value

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.wires.value.eq(self.value), self.seen.eq(self.wires.echo)]
        return m


class _Echo(Tile):
    """Sends back what it is given, plus one."""

    def __init__(self, env=None):
        super().__init__(env, {"wires": In(_Pair())})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.wires.echo.eq(self.wires.value + 1)
        return m


def wired(join=True, driver=_Driver, echo=_Echo):
    d = Design("wired", cols=2, rows=1, width=64)
    d.add("a", driver, at=(0, 0), value=1234)
    d.add("b", echo, at=(1, 0))
    if join:
        d.wire("a", "b")
    return d


def test_wires_join_two_tiles_and_are_not_top_level_ports():
    top = DesignTop(wired())
    assert "a_seen" in top.signature.members
    assert not any("wires" in name for name in top.signature.members)
    seen = []

    async def bench(ctx):
        await ctx.tick()
        seen.append(ctx.get(top.a_seen))

    simulate(top, bench)
    assert seen == [1235]


def test_wires_joined_to_nothing_or_to_a_misfit_are_one_readable_error():
    with pytest.raises(DesignError, match=r"tile 'a' .* has wires 'wires' to a partner tile "
                                          r"that are joined to nothing; add d.wire\('a'"):
        DesignTop(wired(join=False))
    with pytest.raises(DesignError, match=r"do not fit each other"):
        DesignTop(wired(echo=_Driver))
    d = wired(join=False)
    d.wire("a", "nobody")
    with pytest.raises(DesignError, match=r"wires a.wires ⇄ nobody.wires .* name tile 'nobody', "
                                          r"which is not declared"):
        d.check()
    d = wired(join=False)
    d.wire("a", "b", member="state")
    with pytest.raises(DesignError, match=r"tiles 'a' and 'b' have no wires member 'state'"):
        DesignTop(d)


def test_router_depth_setting_sizes_the_data_planes_router_fifos():
    """`router_depth` sets the data plane's router FIFOs (registers at 2); the control plane
    keeps 4. The echo design gives the same replies and counters with either."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from apiary.sim import open_sim
    from apiary.top import router_depths
    from beehive.model import echo_reply
    from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC

    design = load_design("examples/udp_echo.py", width=64)
    assert router_depths(design, "data") == {"depth": 4, "local_depth": 4}
    request = (Ether(dst=DEFAULT_MAC, src="02:00:00:00:00:01") / IP(src="10.0.0.1",
               dst=DEFAULT_IPV4) / UDP(sport=4000, dport=7) / (b"d" * 100))
    replies, counters = [], []
    for depth in (4, 2):
        design = load_design("examples/udp_echo.py", width=64)
        design.settings["router_depth"] = depth
        assert router_depths(design, "data") == {"depth": depth, "local_depth": depth}
        assert router_depths(design, "ctl") == {"depth": 4, "local_depth": 4}
        with open_sim(design, "pysim") as sim:
            sim.send(request)
            sim.send(request)
            sim.run()
            replies.append([f.data for f in sim.received()])
            counters.append(sim.counters())
    assert replies[0] == replies[1] == [echo_reply(request)[0]] * 2
    assert counters[0] == counters[1] and counters[1]["udp_rx_forwarded"] == 2
