"""End-to-end builds: the smallest design of each open-toolchain flow, through the same code
path as `apiary build`, to a bitstream. These are the slowest tests (minutes each); they keep the
flows from rotting."""

import json
import os

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
    assert c["target_mhz"] == pytest.approx(12.0, abs=0.01) and c["met"] and c["fmax_mhz"] > 12.0


def test_versa_ecp5_soc_with_liteeth_and_litedram_bitstream(tmp_path, loopback_dram):
    """The LiteX flow: LiteEth + LiteDRAM + a reduced core on the ECP5 Versa, to a bitstream."""
    out = str(tmp_path / "versa")
    # Seed 3: the system clock's critical path is LiteDRAM's own controller (bank machines,
    # tFAW), about 14 ns against 13.3; placement decides it. Measured on this design with
    # nextpnr seeds 1 to 4: 70.8, 76.9, 81.2, 80.8 MHz (target 75).
    report = build(loopback_dram(), "versa_ecp5", out, seed=3)
    _check_report(out, report, 200_000)
    assert any("LiteDRAM ECP5DDRPHY" in p for p in report.parts)
    assert any("LiteEth MAC" in p for p in report.parts)
    luts = report.resources["LUT4s"]
    assert 2000 < luts["used"] <= luts["available"] == 43848
    assert report.resources["block RAMs (DP16KD)"]["used"] >= 1
    # The PHY's 125 MHz receive clock and the 75 MHz system clock both close timing.
    assert report.clocks["sys_clk"]["target_mhz"] == pytest.approx(75, abs=0.1)
    assert all(c["met"] for c in report.clocks.values()), report.clocks
    assert any("eth_clocks0_rx" in net for net in report.clocks)


def test_colorlight_udp_echo_fits_the_25f_with_every_clock_met(tmp_path):
    """The cheapest Ethernet board: the whole 64-bit UDP echo stack (9 tiles, routers pruned to
    its routes) with LiteEth on the Colorlight 5A-75B's LFE5U-25F, to a bitstream. It fits
    since the routers were pruned (27,637 LUT4s before: the build then said so in one line);
    the PHY's 125 MHz clock closes on the speed-6 part since LiteEth's crossings are 32 bits
    wide and its transmit stages registered (97.58 MHz before, when the build failed). The
    board's design options (no IP options, UDP and ICMP checksums not verified) took it from
    19,150 LUT4s to 14,882 (2026-11-29), and the core's smaller netlist (values used per lane
    behind one net) to 14,741, and Ethernet RX's buffer_full counter (2026-11-30) to 14,747.
    The PHY clock's critical path was the MAC's transmit crossing's read side (Gray counter, LUT
    RAM), routing-bound: seeds 1 to 6 reached 121.01 to 126.20 MHz (target 125), and seed 2,
    pinned here, fell to 113.26 when the core's netlist moved (CI, 2026-11-30). With that
    crossing read at a register (RegisteredReadCrossing) and register slices between the
    receive stages (14,860 LUT4s), seeds 1 to 4 reach 127.75, 138.85, 128.63 and 126.92 MHz
    (2026-11-30): seed 2, the best. The board's design settings (router FIFOs in registers, one
    packet decided ahead per layer, 11-bit lengths, no 802.1Q tags, no input register queues;
    2026-12-01) take it to about 10,200 LUT4s, under issue 35's mark of twice the 5,436 of
    LiteEth's own UDP echo on this part, which this test holds. When the core's netlist moved
    (2026-12-05) seed 2 fell to 115.58 MHz on LiteEth's padding stage, then to 126.09 on its
    receive crossing's write side: with our PaddingInserter and a RegisteredReadCrossing both
    ways, seeds 2 and 3 reach 128.30 and 141.68 MHz."""
    target = resolve("colorlight_5a_75b")
    design = load_design("examples/udp_echo.py", defaults=target.design_defaults())
    assert design.width == 64 and target.clock_hz == 50e6
    assert design.tiles["ip_rx"].cls_name == "Ipv4RxNoOptionsTile"
    assert design.settings["verify_checksums"] is False
    out = str(tmp_path / "colorlight")
    report = build(design, target, out, seed=2)             # a missed clock would raise
    _check_report(out, report, 200_000)                     # 278,763 bytes on 2026-12-01
    assert report.device.startswith("LFE5U-25F")
    assert design.settings["header_queue_depth"] == 1 and design.settings["vlan"] is False
    assert any(p.startswith("the board's design settings: router_depth=2") for p in report.parts)
    luts = report.resources["LUT4s"]
    assert 8_000 < luts["used"] <= 2 * 5_436 and luts["available"] == 24_288
    # The core runs on sys (LiteEth's MAC domain) at 50 MHz: the PLL's own output.
    assert report.clocks["apiarysoc_crg_clkout"]["target_mhz"] == pytest.approx(50, abs=0.1)
    assert report.clocks["eth_clocks0_rx"]["target_mhz"] == pytest.approx(125, abs=0.1)
    assert all(c["met"] for c in report.clocks.values()), report.clocks
