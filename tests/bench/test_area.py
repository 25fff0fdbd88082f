"""`python -m apiary.bench.area`: every tile and a router synthesised, and a total."""

import pathlib

import pytest

from apiary.bench.area import main, tile_areas
from apiary.load import load_design

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOPBACK = str(ROOT / "examples" / "frame_loopback.py")


@pytest.mark.slow
def test_every_tile_and_a_router_are_synthesised():
    design = load_design(LOOPBACK, width=64)
    rows = tile_areas(design)
    assert [name for name, _, _ in rows] == ["eth", "reflect", "router"]
    areas = {name: area for name, _, area in rows}
    # The frame port has logic, LUTRAM-free FIFOs aside; a forwarding tile is (almost) wiring.
    assert areas["eth"]["luts"] > areas["reflect"]["luts"]
    assert areas["router"]["luts"] > 100 and areas["router"]["ffs"] > 0


@pytest.mark.slow
def test_command_prints_a_table_with_a_total(capsys):
    assert main([LOOPBACK, "--width", "64"]) == 0
    out = capsys.readouterr().out
    assert "python -m apiary.bench.area" in out and "--width 64" in out
    assert "| eth | FramePortTile |" in out and "**total**: tiles + 2 routers" in out
