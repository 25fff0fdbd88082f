"""`apiary bench timing`: a design's core placed and routed out of context, its Fmax and
critical paths read from nextpnr's report."""

import pathlib

import pytest

from apiary.bench.timing import core_timing, critical_path, main
from apiary.load import load_design

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOPBACK = str(ROOT / "examples" / "frame_loopback.py")


def _step(kind, cell, delay, to=None):
    return {"type": kind, "delay": delay, "from": {"cell": cell, "port": "A"},
            "to": {"cell": to or cell, "port": "F"}}


def test_a_path_is_split_into_logic_routing_and_the_modules_it_passes():
    path = {"from": "posedge clk", "to": "posedge clk", "path": [
        _step("clk-to-q", "a.peek.head_FF", 0.5),
        _step("routing", "a.peek.head_FF", 1.0, "a.peek.x_LUT4"),
        _step("logic", "a.peek.x_LUT4", 0.25),
        _step("routing", "a.peek.x_LUT4", 1.0, "a.strip.y_LUT4"),
        _step("logic", "a.strip.y_LUT4", 0.25),
        _step("logic", "a.strip.z_CCU2C", 0.25),
        _step("routing", "a.strip.z_CCU2C", 2.0, "mesh.router_0_0.fifo_p.head_FF"),
        _step("setup", "mesh.router_0_0.fifo_p.head_FF", 0.125),
    ]}
    p = critical_path(path)
    assert (p.start, p.end) == ("a.peek.head_FF", "mesh.router_0_0.fifo_p.head_FF")
    assert (p.ns, p.routing_ns, p.logic_ns, p.levels) == (5.375, 4.0, 1.375, 3)
    assert p.modules == [["a.peek", 1], ["a.strip", 2]]


@pytest.mark.slow
def test_the_loopback_core_is_routed_and_its_critical_path_named(tmp_path):
    report = core_timing(load_design(LOOPBACK, width=64), out_dir=str(tmp_path))
    assert 20 < report.fmax_mhz < 1000
    assert report.used["LUT4s"] > 100 and report.used["FFs"] > 10
    assert (tmp_path / "report.json").exists() and (tmp_path / "nextpnr.log").exists()
    worst = report.paths[0]
    assert worst.levels >= 1 and worst.ns == pytest.approx(1000 / report.fmax_mhz, rel=0.05)
    # Cells are named by the design's hierarchy: a tile or the mesh, not Yosys's numbers.
    assert all(m.split(".")[0] in ("eth", "reflect", "data_mesh", "eth_mac", "(top)")
               for m, _ in worst.modules)


@pytest.mark.slow
def test_command_prints_the_fmax_and_the_path(capsys):
    assert main([LOOPBACK, "--width", "64", "--mhz", "100"]) == 0
    out = capsys.readouterr().out
    assert "apiary bench timing" in out and "--mhz 100" in out
    assert "**Fmax " in out and "(target 100 MHz" in out
    assert "| critical path | ns |" in out


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match="part must be one of 25f, 45f, 85f"):
        core_timing(load_design(LOOPBACK, width=64), part="12f")
