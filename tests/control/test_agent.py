"""ControlAgent (apiary/control/agent.py) alone, at control-plane widths 64 and 512: requests
in, acks out checked against a Python model of the address map; counters read as they are,
registers written and read back (and seen by the tile), table entries committed whole and
loaded back, read-only words refused, unknown addresses answered BAD_ADDR, stray messages
dropped and counted, all under random stalls."""

import random

import pytest
from amaranth import Array, Module, Signal
from amaranth.lib import wiring

from apiary.control.addrmap import REGISTER_BASE, TABLE_BASE, TileMap
from apiary.control.agent import ControlAgent
from apiary.control.messages import (AGENT_FBITS, CtlMeta, CtlMsgType, CtlStatus,
                                     ctl_message_flits, decode_ctl_message)
from apiary.noc.header import Fbits, Message, NocHeader
from apiary.noc.testbench import recv_flits, send_flits
from apiary.stream.counters import CounterSignature
from apiary.stream.registers import Register, RegisterSignature, Table
from apiary.stream.testbench import simulate


AT = (2, 1)
CONTROLLER = (0, 3)
COUNTERS = CounterSignature({"frames": "frames seen", "bytes": (48, "bytes seen")})
MONITOR = CounterSignature({"faults": "faults"})
REGISTERS = RegisterSignature({
    "key": Register(32, "a key", reset=0x1234),
    "wide": Register(40, "a wide one", reset=0xAB_0000_0001),
    "rules": Table(entries=4, width=70, description="rules"),
    "log": Table(entries=8, width=40, description="a log", writable=False),
})


class Bench(wiring.Component):
    """The agent and a stand-in tile: the rules table in registers (read one cycle late), the
    log table a function of the index, counters driven by the testbench."""

    def __init__(self, width):
        self.tmap = TileMap.build("t", *AT, [("", COUNTERS), ("monitor_", MONITOR)], REGISTERS)
        self.agent = ControlAgent(width, self.tmap, [("", COUNTERS), ("monitor_", MONITOR)],
                                  REGISTERS)
        self.frames, self.nbytes, self.faults = Signal(32), Signal(48), Signal(32)
        self.rules = Array(Signal(70, name=f"rule{i}") for i in range(4))
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.agent = a = self.agent
        m.d.comb += [a.counters_0.frames.eq(self.frames), a.counters_0.bytes.eq(self.nbytes),
                     a.counters_1.faults.eq(self.faults)]
        with m.If(a.regs.rules.w_valid):
            m.d.sync += self.rules[a.regs.rules.w_index].eq(a.regs.rules.w_data)
        m.d.sync += a.regs.rules.r_data.eq(self.rules[a.regs.rules.r_index])
        m.d.comb += a.regs.log.r_data.eq(a.regs.log.r_index * 0x01_0101_0101 + 7)
        return m


class Model:
    def __init__(self, tmap):
        self.tmap = tmap
        self.counters = {"frames": 5, "bytes": 0x12_3456_789A, "monitor_faults": 3}
        self.regs = {"key": 0x1234, "wide": 0xAB_0000_0001}
        self.rules = [0] * 4
        self.staging = {"rules": 0, "log": 0}

    def request(self, write, addr, data):
        """``(status, data)`` of the ack."""
        for e in self.tmap:
            if e.kind == "table":
                if e.addr <= addr < e.addr + e.words:
                    w = addr - e.addr
                    if not write:
                        return CtlStatus.OK, self.staging[e.name] >> 32 * w & 0xFFFF_FFFF
                    if not e.writable:
                        return CtlStatus.READ_ONLY, data
                    mask = 0xFFFF_FFFF << 32 * w
                    self.staging[e.name] = self.staging[e.name] & ~mask | data << 32 * w
                    return CtlStatus.OK, data
                if e.writable and addr == e.commit or addr == e.load:
                    if write and addr == e.commit:
                        self.rules[data & 3] = self.staging[e.name] & (1 << 70) - 1
                    elif write:
                        index = data & (e.entries - 1)
                        self.staging[e.name] = (self.rules[index] if e.name == "rules"
                                                else (index * 0x01_0101_0101 + 7) & (1 << 40) - 1)
                    return CtlStatus.OK, data if write else 0
                continue
            if not e.addr <= addr < e.addr + e.words:
                continue
            w = addr - e.addr
            value = self.counters[e.name] if e.kind == "counter" else self.regs[e.name]
            if not write:
                return CtlStatus.OK, value >> 32 * w & 0xFFFF_FFFF
            if e.kind == "counter":
                return CtlStatus.READ_ONLY, data
            mask = 0xFFFF_FFFF << 32 * w
            self.regs[e.name] = (value & ~mask | data << 32 * w) & (1 << e.width) - 1
            return CtlStatus.OK, data
        return CtlStatus.BAD_ADDR, data


def interesting_addresses(tmap):
    addrs = {0x0FFF, REGISTER_BASE + 7, TABLE_BASE + 0x40, 0xFFFF}
    for e in tmap:
        addrs.update(range(e.addr, e.addr + e.words))
        if e.kind == "table":
            addrs.update({e.commit, e.load})
    return sorted(addrs)


@pytest.mark.parametrize("width", [64, 512])
def test_agent_serves_its_map(width):
    rng = random.Random(width)
    dut = Bench(width)
    model = Model(dut.tmap)
    addrs = interesting_addresses(dut.tmap)
    rules = dut.tmap["rules"]
    requests = []
    for i in range(3):          # whole entries: staging words, COMMIT, LOAD, read back
        value = rng.getrandbits(70)
        requests += [(True, rules.addr + w, value >> 32 * w & 0xFFFF_FFFF) for w in range(3)]
        requests += [(True, rules.commit, i), (True, rules.addr, 0), (True, rules.load, i)]
        requests += [(False, rules.addr + w, 0) for w in range(3)]
    log = dut.tmap["log"]
    requests += [(True, log.load, 5), (False, log.addr, 0), (False, log.addr + 1, 0)]
    for _ in range(150):
        requests.append((rng.random() < 0.5, rng.choice(addrs), rng.getrandbits(32)))
    stall = dict(rng=random.Random(1), stall=0.3)
    got = []
    counters = dict(model.counters)
    expected = [model.request(write, addr, data) for write, addr, data in requests]

    async def tb(ctx):
        ctx.set(dut.frames, counters["frames"])
        ctx.set(dut.nbytes, counters["bytes"])
        ctx.set(dut.faults, counters["monitor_faults"])
        stray = Message(NocHeader(dst_x=AT[0], dst_y=AT[1], dst_fbits=AGENT_FBITS,
                                  msg_type=77), [0]).flits(width)
        await send_flits(ctx, dut.agent.ctl_in, stray, **stall)
        for tag, (write, addr, data) in enumerate(requests):
            kind = CtlMsgType.CTL_WRITE if write else CtlMsgType.CTL_READ
            flits = ctl_message_flits(width, kind, CtlMeta(data=data, addr=addr, tag=tag & 0xFF),
                                      dst=AT, src=CONTROLLER, src_fbits=Fbits.LOCAL1)
            await send_flits(ctx, dut.agent.ctl_in, flits, **stall)
            hdr, meta = decode_ctl_message(await recv_flits(ctx, dut.agent.ctl_out, **stall),
                                           width)
            got.append((hdr, meta))
        assert ctx.get(dut.agent.dropped) == 1
        assert ctx.get(dut.agent.regs.key) == model.regs["key"]
        assert ctx.get(dut.agent.regs.wide) == model.regs["wide"]
        assert [ctx.get(r) for r in dut.rules] == model.rules

    simulate(dut, tb, timeout=60_000)
    assert len(got) == len(requests)
    for tag, ((write, addr, data), (hdr, meta), (status, value)) in enumerate(
            zip(requests, got, expected)):
        assert (hdr.dst_x, hdr.dst_y, hdr.dst_fbits) == (*CONTROLLER, Fbits.LOCAL1)
        assert (hdr.src_x, hdr.src_y, hdr.src_fbits) == (*AT, AGENT_FBITS)
        assert hdr.msg_type == CtlMsgType.CTL_ACK.value
        assert (meta.tag, meta.addr, meta.status, meta.data) == (tag & 0xFF, addr, status, value), \
            f"request {tag}: {'write' if write else 'read'} {addr:#06x} {data:#x}"
    assert any(m.status == CtlStatus.BAD_ADDR for _, m in got)
    assert any(m.status == CtlStatus.READ_ONLY for _, m in got)


def test_registers_reset_values_without_writes():
    dut = Bench(64)

    async def tb(ctx):
        await ctx.tick()
        assert ctx.get(dut.agent.regs.key) == 0x1234
        assert ctx.get(dut.agent.regs.wide) == 0xAB_0000_0001
        assert ctx.get(dut.agent.regs.rules.w_valid) == 0

    simulate(dut, tb, timeout=100)


def test_map_layout():
    tmap = Bench(64).tmap
    assert [(e.name, e.kind, e.addr, e.words) for e in tmap] == [
        ("frames", "counter", 0, 1), ("bytes", "counter", 1, 2),
        ("monitor_faults", "counter", 3, 1),
        ("key", "register", 0x1000, 1), ("wide", "register", 0x1001, 2),
        ("rules", "table", 0x2000, 3), ("log", "table", 0x2040, 2)]
    assert (tmap["rules"].commit, tmap["rules"].load) == (0x2003, 0x2004)
    with pytest.raises(KeyError, match="has no counter, register or table named 'nope'"):
        tmap["nope"]
