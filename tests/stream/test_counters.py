"""Counters declared as a signature, and the design's counter bank collected from them."""

import pytest

from apiary.counters import CounterBank
from apiary.design import Design
from apiary.stream.counters import CounterSignature
from apiary.tile import Tile
from apiary.tiles import ForwardTile, PortTile
from apiary.top import DesignTop


def test_signature_has_an_out_port_and_a_description_per_counter():
    sig = CounterSignature({"dropped": "what was dropped", "wide": (48, "a wide one")})
    assert list(sig.members) == ["dropped", "wide"]
    assert sig.members["dropped"].flow.name == "Out" and sig.members["wide"].shape.width == 48
    assert sig.descriptions == {"dropped": "what was dropped", "wide": "a wide one"}
    assert sig == CounterSignature({"dropped": "what was dropped", "wide": (48, "a wide one")})
    assert sig != CounterSignature({"dropped": "something else", "wide": (48, "a wide one")})


def test_bad_counters_are_readable_errors():
    with pytest.raises(ValueError, match="a counter's name must be a Python identifier"):
        CounterSignature({"no good": "x"})
    with pytest.raises(ValueError, match="counter 'c' must be 1 to 64 bits wide, not 65"):
        CounterSignature({"c": (65, "x")})
    with pytest.raises(ValueError, match="counter 'c' needs a description"):
        CounterSignature({"c": (8, None)})


def test_tile_counters_are_a_member_of_their_own():
    class Counting(Tile):
        def __init__(self, env=None):
            super().__init__(env, counters={"seen": "messages seen"})
    tile = Counting()
    assert isinstance(tile.signature.members["counters"].signature, CounterSignature)
    assert Tile.external_members(tile.signature) == []

    class Clashing(Tile):
        def __init__(self, env=None):
            super().__init__(env, {"counters": PortTile(None).signature.members["tx"]},
                             counters={"seen": "messages seen"})
    with pytest.raises(ValueError, match="a member named 'counters' clashes"):
        Clashing()


def test_bank_collects_every_tile_and_the_meshes_in_order():
    d = Design("bank", cols=3, rows=1, width=64)
    d.add("src", PortTile, at=(0, 0), route=True)
    d.add("a", ForwardTile, at=(1, 0))
    d.add("b", ForwardTile, at=(2, 0))
    d.chain("src", "a", "b")
    top = DesignTop(d)
    assert top.bank.names == ["a_dropped", "b_dropped", "data_route_dropped"]
    assert [c.owner for c in top.bank] == ["a", "b", "data mesh"]
    assert "| 0 | `a_dropped` | 32 |" in top.bank.table()


def test_bank_refuses_two_counters_of_one_name():
    bank = CounterBank()
    bank.add("x", CounterSignature({"y_z": "one"}))
    with pytest.raises(ValueError, match="two counters are named 'x_y_z'"):
        bank.add("x_y", CounterSignature({"z": "another"}))


def test_count_adds_on_the_next_edge_under_its_condition_and_wraps():
    from amaranth import Module, Signal
    from amaranth.sim import Simulator

    from apiary.stream.counters import count

    m = Module()
    hit, events, bytes_ = Signal(), Signal(2), Signal(8)
    with m.If(hit):
        count(m, events)
        count(m, bytes_, by=5)
    seen = []

    async def tb(ctx):
        for k in range(10):
            ctx.set(hit, k % 3 != 2)            # 7 hits in 10 cycles
            await ctx.tick()
            seen.append(ctx.get(events))
        assert ctx.get(bytes_) == 35

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [1, 2, 2, 3, 0, 0, 1, 2, 2, 3]     # 2 bits: 4 wraps to 0
