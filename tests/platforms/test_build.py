"""End-to-end builds: the smallest design of each open-toolchain flow, through the same code
path as `apiary build`, to a bitstream. These are the slowest tests (minutes each); they keep the
flows from rotting."""

import json
import os
import subprocess
import sys

import pytest

from apiary.load import load_design
from platforms import build, resolve


pytestmark = pytest.mark.slow


def _check_report(out_dir, report, bitstream_bytes):
    assert os.path.getsize(report.bitstream) >= bitstream_bytes
    with open(os.path.join(out_dir, "report.json")) as f:
        saved = json.load(f)
    assert saved["resources"] == report.resources
    assert set(report.times) >= {"core", "synth", "pnr", "pack"}
    md = open(os.path.join(out_dir, "report.md")).read()
    assert "| clock | Fmax (MHz) |" in md and "| resource | used |" in md


def test_icebreaker_slip_loopback_bitstream(tmp_path):
    """The amaranth-boards flow: SLIP loopback at 64 bits on an iCE40 UP5K."""
    target = resolve("amaranth:icebreaker")
    design = load_design("examples/slip_loopback.py", defaults=target.design_defaults())
    assert design.settings["clock_hz"] == 12_000_000        # the board's clock reached the design
    out = str(tmp_path / "ice")
    report = build(design, target, out)
    _check_report(out, report, 100_000)                     # an UP5K image is 104,090 bytes
    logic = report.resources["logic cells (LUT4+FF)"]
    assert 1000 < logic["used"] <= logic["available"] == 5280
    (clock, c), = report.clocks.items()
    assert c["target_mhz"] == 12.0 and c["met"] and c["fmax_mhz"] > 12.0
