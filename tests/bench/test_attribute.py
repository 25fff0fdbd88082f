"""apiary/bench/attribute.py: a netlist's LUTs counted towards the state and outputs they feed."""

from amaranth import Module, Mux, Signal
from amaranth.lib.wiring import Component, In, Out

from apiary.bench.attribute import lut_sinks, main
from apiary.bench.noc import design_area


class TwoSinks(Component):
    """8 LUTs feed a register (three inputs XOR-ed), 8 feed an output (a 2:1 multiplexer)."""

    a: In(8)
    b: In(8)
    c: In(8)
    sel: In(1)
    o: Out(8)

    def elaborate(self, platform):
        m = Module()
        held = Signal(8)
        m.d.sync += held.eq(self.a ^ self.b ^ self.c)
        m.d.comb += self.o.eq(Mux(self.sel, self.a, self.b) ^ held)
        return m


def test_each_lut_goes_to_what_it_feeds_and_the_table_sums_to_the_netlist():
    counts = lut_sinks(TwoSinks())
    assert sum(counts.values()) == design_area(TwoSinks())["luts"]
    assert counts == {"FDRE held": 8, "port o": 8}


def test_the_command_prints_a_tiles_table(capsys):
    assert main(["examples/udp_echo.py", "--width", "64", "--tile", "echo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("echo (UdpEchoTile): ")
    assert "| LUTs | feeds |" in out


def test_an_unknown_tile_is_one_readable_error(capsys):
    try:
        main(["examples/udp_echo.py", "--width", "64", "--tile", "nope"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("an unknown tile was accepted")
    err = capsys.readouterr().err
    assert "has no tile 'nope'" in err and "udp_rx" in err
