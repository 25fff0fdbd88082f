"""Declared message ports: the framing built from a tile's ``inputs`` and ``outputs``, and the
layout check that refuses a route joining a sender to a tile that takes none of its types."""

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from apiary.design import Design, DesignError
from apiary.noc.flit import flit_signature
from apiary.noc.framing import meta_message_flits
from apiary.noc.header import Fbits, NocHeader
from apiary.noc.ports import Receive, Send, build_ports, route_problem, route_types
from apiary.noc.testbench import recv_flits, send_flits
from apiary.os.error_manager import ErrorManagerTile
from apiary.os.memory_tile import MEM_FORMAT, MemMsgType, MemoryTile, mem_message_flits
from apiary.os.uapi import KERNEL_FORMAT, KernelMsgType
from apiary.stream.testbench import simulate
from apiary.tile import Tile

LOAD, STORE = MemMsgType.LOAD_MEM, MemMsgType.STORE_MEM
LOAD_ACK = MemMsgType.LOAD_MEM_ACK


class Ports(wiring.Component):
    """``build_ports`` between two flit ports, every receiver's outputs always taken."""

    def __init__(self, width, inputs, outputs, merge="round_robin"):
        self.width, self._inputs, self._outputs, self._merge = width, inputs, outputs, merge
        super().__init__({"noc_in": In(flit_signature(width)),
                          "noc_out": Out(flit_signature(width))})

    def elaborate(self, platform):
        m = Module()
        self.ports = build_ports(m, self.width, self._inputs, self._outputs,
                                 noc_in=self.noc_in, noc_out=self.noc_out, merge=self._merge)
        return m


def mem_flits(width, msg_type, addr, fbits=Fbits.LOCAL0):
    return mem_message_flits(width, msg_type.value, addr, 8, dst_fbits=fbits)


def kernel_flits(width, msg_type, handle):
    return meta_message_flits(width, NocHeader(msg_type=msg_type.value),
                              KERNEL_FORMAT.pack(handle=handle), KERNEL_FORMAT.size)


def headers(dut, name, seen):
    """A background testbench that takes every header the input ``name`` delivers and notes
    ``(name, msg_type, meta)`` in ``seen``."""
    async def tb(ctx):
        rx = getattr(dut.ports, name)
        ctx.set(rx.o_hdr.ready, 1)
        async for _, _, valid, t, meta in ctx.tick().sample(
                rx.o_hdr.valid, rx.o_hdr.payload.msg_type, rx.o_hdr.payload.meta):
            if valid:
                seen.append((name, t, meta))
    return tb


@pytest.mark.parametrize("width", [64, 512])
def test_inputs_split_by_type_with_the_last_taking_the_rest(width):
    """Two inputs on one sub-port: each typed one gets its types, the last every other type,
    in order, each with its own metadata format."""
    dut = Ports(width, [Receive("mem", LOAD, STORE, meta=MEM_FORMAT),
                        Receive("kernel", meta=KERNEL_FORMAT)], [])
    sent = [("mem", mem_flits(width, LOAD, 0x40)), ("kernel", kernel_flits(width,
            KernelMsgType.FAULT, 7)), ("mem", mem_flits(width, STORE, 0x80)),
            ("kernel", kernel_flits(width, KernelMsgType.CAP_RESULT, 9))]
    seen = []

    async def source(ctx):
        for _, flits in sent:
            await send_flits(ctx, dut.noc_in, flits)

    async def wait(ctx):
        await ctx.tick().repeat(20 * len(sent) * (1 + 512 // width))

    simulate(dut, source, wait, background=[headers(dut, "mem", seen),
                                            headers(dut, "kernel", seen)])
    got = {name: [(t, meta) for n, t, meta in seen if n == name] for name in ("mem", "kernel")}
    assert [t for t, _ in got["mem"]] == [LOAD.value, STORE.value]
    assert [MEM_FORMAT.unpack(m)["addr"] for _, m in got["mem"]] == [0x40, 0x80]
    assert [t for t, _ in got["kernel"]] == [KernelMsgType.FAULT.value,
                                             KernelMsgType.CAP_RESULT.value]
    assert [KERNEL_FORMAT.unpack(m)["handle"] for _, m in got["kernel"]] == [7, 9]


def test_inputs_split_by_sub_port():
    width = 64
    dut = Ports(width, [Receive("a", LOAD, meta=MEM_FORMAT, fbits=Fbits.LOCAL0),
                        Receive("b", LOAD, meta=MEM_FORMAT, fbits=Fbits.LOCAL1)], [])
    seen = []

    async def source(ctx):
        for fbits, addr in [(Fbits.LOCAL1, 8), (Fbits.LOCAL0, 16), (Fbits.LOCAL1, 24)]:
            await send_flits(ctx, dut.noc_in, mem_flits(width, LOAD, addr, fbits))

    async def wait(ctx):
        await ctx.tick().repeat(60)

    simulate(dut, source, wait, background=[headers(dut, "a", seen), headers(dut, "b", seen)])
    assert [(name, MEM_FORMAT.unpack(meta)["addr"]) for name, _, meta in seen] == \
        [("b", 8), ("a", 16), ("b", 24)]


def test_outputs_are_merged_a_message_at_a_time():
    """Two senders, each with a message offered at once: both leave whole, one after the
    other."""
    width = 64
    dut = Ports(width, [], [Send("x", LOAD, meta=MEM_FORMAT), Send("y", LOAD_ACK,
                                                                   meta=MEM_FORMAT)])
    out = []

    def offer(name, addr):
        async def tb(ctx):
            tx = getattr(dut.ports, name)
            ctx.set(tx.i_hdr.payload.msg_type, LOAD.value if name == "x" else LOAD_ACK.value)
            ctx.set(tx.i_hdr.payload.meta, MEM_FORMAT.pack(addr=addr, size=8))
            ctx.set(tx.i_hdr.payload.dst_fbits, Fbits.LOCAL0)
            ctx.set(tx.i_hdr.payload.src_fbits, Fbits.LOCAL0)
            ctx.set(tx.i_hdr.valid, 1)
            await ctx.tick().until(tx.i_hdr.ready)
            ctx.set(tx.i_hdr.valid, 0)
        return tb

    async def sink(ctx):
        for _ in range(2):
            out.append(await recv_flits(ctx, dut.noc_out))

    simulate(dut, offer("x", 1), offer("y", 2), sink, timeout=200)
    assert sorted(out) == sorted([mem_flits(width, LOAD, 1), mem_flits(width, LOAD_ACK, 2)])


def test_bad_declarations_are_refused_with_a_sentence():
    with pytest.raises(ValueError, match="declares message port.*twice"):
        Ports(64, [Receive("a", LOAD)], [Send("a", LOAD_ACK)]).elaborate(None)
    with pytest.raises(ValueError, match="takes any type, so it must be the last"):
        Ports(64, [Receive("any"), Receive("load", LOAD)], []).elaborate(None)
    with pytest.raises(ValueError, match="each name their fbits"):
        Ports(64, [Receive("a", LOAD, fbits=Fbits.LOCAL1), Receive("b", STORE)],
              []).elaborate(None)
    with pytest.raises(ValueError, match="merge must be one of"):
        Ports(64, [], [Send("a"), Send("b")], merge="fair").elaborate(None)
    with pytest.raises(ValueError, match="meta must be a Format"):
        Receive("a", meta=64)
    with pytest.raises(ValueError, match="8-bit value or a registered message type"):
        Send("a", 300)


def test_route_types_follow_keys_and_sub_ports():
    outs = [Send("req", LOAD, keys=["mem"]), Send("log", KernelMsgType.FAULT, keys=["log"])]
    ins = [Receive("r", LOAD, fbits=Fbits.LOCAL1), Receive("k", KernelMsgType.FAULT,
                                                             fbits=Fbits.LOCAL0)]
    assert route_types(outs, ins, key="mem", fbits=Fbits.LOCAL1) == ({LOAD.value}, {LOAD.value})
    assert route_types(outs, ins, key="log", fbits=Fbits.LOCAL1) == \
        ({KernelMsgType.FAULT.value}, {LOAD.value})
    assert route_types([Send("any")], ins, fbits=Fbits.LOCAL0)[0] is None


def test_the_layout_check_refuses_a_route_of_mismatched_types():
    """The memory tile answers with acks; the error manager takes faults and reads: a route
    from one to the other carries nothing the other takes, and the check names both tiles and
    the types."""
    d = Design("mismatch", cols=2, rows=1, width=64)
    d.add("mem", MemoryTile, at=(0, 0), size_bytes=1024)
    d.add("errors", ErrorManagerTile, at=(1, 0))
    d.route("mem", "errors")
    with pytest.raises(DesignError) as e:
        d.check()
    text = str(e.value)
    assert "mem (MemoryTile) sends MemMsgType.LOAD_MEM_ACK, MemMsgType.STORE_MEM_ACK" in text
    assert "errors (ErrorManagerTile) takes KernelMsgType.FAULT" in text
    assert "route mem → errors" in text


def test_a_route_of_a_type_both_ends_declare_passes():
    class Faulter(Tile):
        outputs = (Send("faults", KernelMsgType.FAULT, meta=KERNEL_FORMAT),)

    d = Design("matched", cols=2, rows=1, width=64)
    d.add("src", Faulter, at=(0, 0))
    d.add("errors", ErrorManagerTile, at=(1, 0))
    d.route("src", "errors")
    d.check()
    assert route_problem("src", Faulter, "errors", ErrorManagerTile) is None
    assert "takes" in route_problem("src", Faulter, "mem", MemoryTile)


def test_a_message_for_no_sub_port_is_dropped_and_counted():
    """Inputs split by sub-port: a message whose ``dst_fbits`` no input names is discarded
    whole, the others still delivered, and ``ports.dropped`` counts it (0 without a split)."""
    width = 64
    dut = Ports(width, [Receive("a", LOAD, meta=MEM_FORMAT, fbits=Fbits.LOCAL0),
                        Receive("b", LOAD, meta=MEM_FORMAT, fbits=Fbits.LOCAL1)], [])
    seen, dropped = [], []

    async def source(ctx):
        for fbits, addr in [(Fbits.LOCAL2, 8), (Fbits.LOCAL0, 16), (Fbits.LOCAL2, 24),
                            (Fbits.LOCAL1, 32)]:
            await send_flits(ctx, dut.noc_in, mem_flits(width, LOAD, addr, fbits))

    async def wait(ctx):
        await ctx.tick().repeat(80)
        dropped.append(ctx.get(dut.ports.dropped))

    simulate(dut, source, wait, background=[headers(dut, "a", seen), headers(dut, "b", seen)])
    assert [(name, MEM_FORMAT.unpack(meta)["addr"]) for name, _, meta in seen] == \
        [("a", 16), ("b", 32)]
    assert dropped == [2]
    one = Ports(width, [Receive("a", LOAD, meta=MEM_FORMAT)], [])
    one.elaborate(None)
    assert one.ports.dropped.value == 0
