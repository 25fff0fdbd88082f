"""`python -m apiary.bench.area`: every tile and the design's routers synthesised, and a total."""

import pathlib

import pytest

from apiary.bench.area import main, tile_areas
from apiary.load import load_design

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOPBACK = str(ROOT / "examples" / "frame_loopback.py")
#: Both synthesise the same tiles with YoWASP's Yosys: on one xdist worker, one after the other
#: (run side by side on a fresh machine, each compiled Yosys's WebAssembly: 90 and 123 s, against
#: 114 and 25 s one after the other).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("area_loopback")]


def test_every_tile_and_the_routers_are_synthesised():
    design = load_design(LOOPBACK, width=64)
    rows = tile_areas(design)
    assert [name for name, _, _ in rows] == ["eth", "reflect", "routers"]
    assert rows[-1][1] == "2 routers, specialised"
    areas = {name: area for name, _, area in rows}
    # The frame port has logic, LUTRAM-free FIFOs aside; a forwarding tile is (almost) wiring.
    assert areas["eth"]["luts"] > areas["reflect"]["luts"]
    # Two routers with one path each way (P→E, W→P and P→W, E→P): a fraction of one full one.
    design.full_routers = True
    full = tile_areas(design, only=["eth"]) + [tile_areas(design)[-1]]
    assert full[-1][1] == "2 routers, full (one synthesised)"
    assert 0 < areas["routers"]["luts"] < full[-1][2]["luts"] / 2


def test_command_prints_a_table_with_a_total(capsys):
    assert main([LOOPBACK, "--width", "64"]) == 0
    out = capsys.readouterr().out
    assert "apiary bench area" in out and "--width 64" in out
    assert "| eth | FramePortTile |" in out and "**total**: tiles + 2 routers" in out
    assert "| routers | 2 routers, specialised |" in out
