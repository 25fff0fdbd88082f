"""The control plane on a whole design, on both back ends: a controller (here a test tile that
turns frames into control messages) reads every counter of every tile through the control
agents the top builds, and the values equal the counter bank's; registers written over the
control NoC reach the tile; table entries commit and load back; unknown addresses and
read-only words are refused. A design without a controller gets no control plane at all.
The controller here is ControlPortTile: control messages as frames.

    (0,0) ctl (ControlPortTile) ⇢ control NoC ⇢ every agent
    (1,0) src ─▶ (2,0) fwd ─▶ (2,1) dst          (1,1) regs
"""

import pytest
from amaranth import Array, Module, Signal

from apiary.control.addrmap import COUNTER_BASE
from apiary.control.messages import (AGENT_FBITS, CtlMeta, CtlMsgType, CtlStatus, ctl_message_flits,
                                     decode_ctl_message)
from apiary.design import Design
from apiary.noc.header import Message, NocHeader
from apiary.sim import open_sim
from apiary.stream.registers import Register, Table
from apiary.tile import Tile
from apiary.tiles import ControlPortTile, ForwardTile, RawPortTile
from apiary.tiles.raw_port import frame_message, message_frame
from apiary.top import DesignTop, control_map


class RegTile(Tile):
    """A tile with a register and a table, both visible as counters (``key_low``) so the test
    can see what the tile sees."""

    def __init__(self, env=None):
        super().__init__(env, counters={"key_seen": "the key register as the tile sees it",
                                        "rule2_seen": "entry 2 of the table, low 32 bits"},
                         registers={"key": Register(32, "a key", reset=5),
                                    "rules": Table(4, 40, "rules")})

    def elaborate(self, platform):
        m = Module()
        rules = Array(Signal(40, name=f"rule{i}") for i in range(4))
        t = self.regs.rules
        with m.If(t.w_valid):
            m.d.sync += rules[t.w_index].eq(t.w_data)
        m.d.comb += [t.r_data.eq(rules[t.r_index]), self.counters.key_seen.eq(self.regs.key),
                     self.counters.rule2_seen.eq(rules[2][:32]), self.noc_in.ready.eq(1)]
        return m


def design(width=64, controller=True):
    d = Design("ctl_plane", cols=3, rows=2, width=width)
    if controller:
        d.add("ctl", ControlPortTile, at=(0, 0))
    d.add("src", RawPortTile, at=(1, 0))
    d.add("fwd", ForwardTile, at=(2, 0))
    d.add("dst", RawPortTile, at=(2, 1))
    d.add("regs", RegTile, at=(1, 1))
    d.route("src", "fwd")
    d.route("fwd", "dst")
    return d


class Controller:
    """Requests through the test controller's frame port, one at a time."""

    def __init__(self, sim, d):
        self.sim, self.d = sim, d
        self.dmap = control_map(d)
        self.tag = 0

    def request(self, tile, addr, data=None):
        tmap = self.dmap.tile(tile)
        self.tag = (self.tag + 1) & 0xFF
        kind = CtlMsgType.CTL_READ if data is None else CtlMsgType.CTL_WRITE
        flits = ctl_message_flits(self.d.ctl_width, kind,
                                  CtlMeta(data=data or 0, addr=addr, tag=self.tag),
                                  dst=(tmap.x, tmap.y), src=(0, 0))
        self.sim.send(message_frame(flits, self.d.ctl_width), port="ctl")
        self.sim.run(until_idle=True)
        frames = self.sim.received("ctl", clear=True)
        assert len(frames) == 1
        hdr, meta = decode_ctl_message(frame_message(frames[0].data, self.d.ctl_width),
                                       self.d.ctl_width)
        assert (hdr.src_x, hdr.src_y, meta.tag, meta.addr) == (tmap.x, tmap.y, self.tag, addr)
        assert hdr.msg_type == CtlMsgType.CTL_ACK.value
        return meta.status, meta.data

    def read(self, name):
        tmap, entry = self.dmap.lookup(name)
        value = 0
        for w in range(entry.words):
            status, word = self.request(tmap.name, entry.addr + w)
            assert status == CtlStatus.OK
            value |= word << 32 * w
        return value


def data_message(width, payload):
    hdr = NocHeader(dst_x=2, dst_y=0, src_x=1, src_y=0, msg_type=12)
    return message_frame(Message(hdr, [], payload).flits(width), width)


def send_three(sim, d):
    """Three 20-byte messages from src through fwd to dst; the counter bank after them."""
    for k in range(3):
        sim.send(data_message(d.width, bytes([k]) * 20), port="src")
    sim.run(until_idle=True)
    assert len(sim.received("dst")) == 3
    return sim.counters()


@pytest.mark.parametrize("backend", ["pysim", pytest.param("verilator", marks=pytest.mark.slow)])
def test_counters_registers_and_tables_over_the_control_plane(backend):
    d = design()
    with open_sim(d, backend, seed=3) as sim:
        ctl = Controller(sim, d)
        bank = send_three(sim, d)
        # Every counter of every tile, over the control plane, equals the bank.
        names = [f"{t.name}.{e.name}" for t in ctl.dmap for e in t.of_kind("counter")]
        assert "fwd.dropped" in names and "src.rx_messages" in names
        for name in names:
            tile, what = name.split(".")
            assert ctl.read(name) == bank[f"{tile}_{what}"], name
        assert ctl.read("src.rx_messages") == 3 and ctl.read("dst.tx_messages") == 3
        # A register: reset value, written, seen by the tile.
        assert ctl.read("regs.key") == 5 == ctl.read("regs.key_seen")
        key = ctl.dmap.tile("regs")["key"]
        assert ctl.request("regs", key.addr, 0xC0FFEE) == (CtlStatus.OK, 0xC0FFEE)
        assert ctl.read("regs.key") == 0xC0FFEE == ctl.read("regs.key_seen")
        # A table entry: staging words, COMMIT, then LOAD and read back.
        rules = ctl.dmap.tile("regs")["rules"]
        value = 0xAB_1234_5678
        assert ctl.request("regs", rules.addr, value & 0xFFFF_FFFF)[0] == CtlStatus.OK
        assert ctl.request("regs", rules.addr + 1, value >> 32)[0] == CtlStatus.OK
        assert ctl.request("regs", rules.commit, 2)[0] == CtlStatus.OK
        assert ctl.read("regs.rule2_seen") == value & 0xFFFF_FFFF
        assert ctl.request("regs", rules.addr, 0)[0] == CtlStatus.OK
        assert ctl.request("regs", rules.addr + 1, 0)[0] == CtlStatus.OK
        assert ctl.request("regs", rules.load, 2)[0] == CtlStatus.OK
        assert ctl.request("regs", rules.addr) == (CtlStatus.OK, value & 0xFFFF_FFFF)
        assert ctl.request("regs", rules.addr + 1) == (CtlStatus.OK, value >> 32)
        # Refusals.
        assert ctl.request("fwd", COUNTER_BASE, 1)[0] == CtlStatus.READ_ONLY
        assert ctl.request("fwd", 0x0777)[0] == CtlStatus.BAD_ADDR
        # The controller's own counters are served by its own agent.
        assert ctl.read("ctl.data_in") == 0
        assert sim.counters()["ctl_agents_dropped"] == 0
        # Anything but a read or a write is discarded by the agent, unanswered, and counted.
        stray = Message(NocHeader(dst_x=2, dst_y=0, dst_fbits=AGENT_FBITS, msg_type=77), [0])
        sim.send(message_frame(stray.flits(d.ctl_width), d.ctl_width), port="ctl")
        sim.run(until_idle=True)
        assert sim.received("ctl") == [] and sim.counters()["ctl_agents_dropped"] == 1
        assert ctl.read("fwd.dropped") == 0


def test_router_meters_over_the_control_plane():
    """With ``router_meters`` each tile's agent also serves its router's input-port meters
    (``<tile>.router_<port>_in_<counter>``), equal to the counter bank: fwd's router took the
    three messages from src on its west input and fwd's three replies on its local one."""
    d = design()
    d.settings["router_meters"] = True
    with open_sim(d, "verilator", seed=3) as sim:
        ctl = Controller(sim, d)
        bank = send_three(sim, d)
        names = [f"{t.name}.{e.name}" for t in ctl.dmap for e in t.of_kind("counter")
                 if e.name.startswith("router_")]
        assert "src.router_p_in_bytes" in names and "dst.router_n_in_flits" in names
        for name in names:
            tile, what = name.split(".")
            x, y = d.tiles[tile].x, d.tiles[tile].y
            assert ctl.read(name) == bank[f"data_r{x}_{y}_{what[len('router_'):]}"], name
        assert ctl.read("fwd.router_w_in_messages") == 3 == ctl.read("fwd.router_p_in_messages")
        assert ctl.read("dst.router_n_in_messages") == 3
        assert ctl.read("src.router_p_in_bytes") == 3 * 20


def test_no_controller_no_control_plane():
    d = design(controller=False)
    top = DesignTop(d)
    assert not top.control_map.tiles and top.planes == ["data"]
    assert "control plane:" not in d.check().summary()


def test_control_routes_are_in_the_deadlock_check():
    g = design().check()
    assert g.controllers == ["ctl"]
    assert len(g.control_routes) == 2 * 4 + 1       # and the controller to its own agent
    assert "control plane: controller ctl" in g.summary()
    assert set(control_map(design()).tiles) == {"ctl", "src", "fwd", "dst", "regs"}
