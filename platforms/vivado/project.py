"""A complete Vivado project for a Beehive design on a board with a 100G QSFP28 port.

:func:`write_project` writes, into one directory::

    rtl/<core>.v                 the design (Amaranth -> Verilog, as `apiary sim` converts it)
    rtl/<core>_<board>_top.v     board wrapper: clocks, resets, CMAC, CDC FIFOs, tkeep <-> nbytes
    ip/cmac_usplus_0.tcl         the 100G MAC's IP configuration (sourced by both scripts below)
    constraints/<board>.xdc      pins, clocks, bitstream options
    build.tcl                    non-project batch flow: synth, place, route, reports, bitstream
    create_project.tcl           the same sources as a Vivado project (.xpr) to open in the GUI
    README.txt                   what is where, how to run it, what to check

:func:`run_vivado` runs ``vivado -mode batch -source build.tcl`` there when Vivado is on ``PATH``
and parses its utilization and timing reports.
"""

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from amaranth import Cat, ClockDomain, ClockSignal, Const, Module, ResetSignal, Signal
from amaranth.back import verilog
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from apiary.stream.mac import MacOptions
from apiary.top import DesignTop, top_name

from ..core import CACHE_DIR as DEFAULT_CACHE_DIR   # shared with the other flows and apiary sim
from ..core import CoreInfo, write_core
from .boards import get_board
from .slots import slot_pblocks


__all__ = ["VivadoError", "VivadoProject", "write_project", "run_vivado",
           "parse_utilization", "parse_timing_summary", "MAC_WIDTH", "CMAC_MODULE",
           "DEFAULT_CACHE_DIR"]


MAC_WIDTH = 512
CMAC_MODULE = "cmac_usplus_0"
BUILD_LOG = "build.log"


class VivadoError(Exception):
    """The design does not fit the Vivado flow, or Vivado is missing or failed. ``str()`` is one
    readable message."""


@dataclass
class VivadoProject:
    """The files :func:`write_project` wrote (absolute paths)."""
    board: object
    out_dir: str
    top: str                 # the wrapper module (Vivado's top)
    core_top: str            # the design's module
    core_v: str
    wrapper_v: str
    xdc: str
    ip_tcl: str
    create_tcl: str
    build_tcl: str
    readme: str
    files: list = field(default_factory=list)
    port: object = None      # the FramePort wired to the MAC
    counters: list = field(default_factory=list)

    @property
    def reports_dir(self):
        return os.path.join(self.out_dir, "reports")

    @property
    def bitstream(self):
        return os.path.join(self.out_dir, "build", f"{self.top}.bit")


# --------------------------------------------------------------------------------- checking

def _check_width(design, board):
    if design.width != MAC_WIDTH:
        raise VivadoError(
            f"the {board.title}'s 100G MAC has a {MAC_WIDTH}-bit AXI stream; build the design "
            f"with --width {MAC_WIDTH} (design {design.name!r} is {design.width} bits wide)")


def _check_ports(design, ports):
    if len(ports) != 1:
        if not ports:
            found = "it has none"
        else:
            found = "it has " + ", ".join(
                f"{p.name} ({p.rx[0]}.{p.rx[1]}/{p.tx[0]}.{p.tx[1]})" for p in ports)
        raise VivadoError(
            f"the Vivado flow wires exactly one Ethernet frame port (a tile's mac_rx/mac_tx "
            f"frame streams) to the board's QSFP28 MAC; design {design.name!r}: {found}")
    return ports[0]


# --------------------------------------------------------------------------- core Verilog

_MODULE_RE = re.compile(r"^\s*module\s+(\\?\S+?)\s*\(", re.M)


def verilog_ports(text, module):
    """``{port: (direction, width)}`` of ``module`` in Verilog ``text`` (Amaranth's output:
    a non-ANSI header, then one ``input``/``output`` declaration per port)."""
    m = re.search(rf"^\s*module\s+{re.escape(module)}\s*\(", text, re.M)
    if not m:
        raise VivadoError(f"module {module!r} not found in the design's Verilog")
    end = text.find("endmodule", m.end())
    body = text[m.end():end if end >= 0 else len(text)]
    ports = {}
    for d in re.finditer(r"^\s*(input|output|inout)\s+(?:wire\s+|reg\s+|signed\s+)*"
                         r"(?:\[(\d+):(\d+)\]\s*)?(\\?[\w$.]+)\s*;", body, re.M):
        direction, hi, lo, name = d.groups()
        width = abs(int(hi) - int(lo)) + 1 if hi is not None else 1
        ports[name] = (direction, width)
    return ports


# ------------------------------------------------------------------------------- clocking

def mmcm_settings(in_mhz, core_mhz, init_mhz):
    """MMCME4 settings (``DIVCLK_DIVIDE``, ``CLKFBOUT_MULT_F``, ``CLKOUT0_DIVIDE_F``,
    ``CLKOUT1_DIVIDE``) for exact ``core_mhz`` on CLKOUT0 and ``init_mhz`` on CLKOUT1 with the
    VCO in 800..1600 MHz (UltraScale+, every speed grade)."""
    for d in range(1, 5):
        for m8 in range(16, 1025):                 # CLKFBOUT_MULT_F 2.000..128.000, step 1/8
            mult = m8 / 8
            vco = in_mhz * mult / d
            if not 800 <= vco <= 1600:
                continue
            div0 = vco / core_mhz
            div1 = vco / init_mhz
            if abs(div0 * 8 - round(div0 * 8)) < 1e-9 and 2 <= div0 <= 128 \
                    and abs(div1 - round(div1)) < 1e-9 and 1 <= div1 <= 128:
                return {"divclk": d, "mult": mult, "div0": round(div0 * 8) / 8,
                        "div1": int(round(div1)), "vco": vco}
    raise VivadoError(f"no MMCM setting makes {core_mhz} and {init_mhz} MHz from {in_mhz} MHz")


def _fmt(x):
    return f"{x:.3f}"


def _mhz(x):
    """A frequency in MHz, every digit kept (161.1328125, not 161.133)."""
    return f"{x:.10g}"


# -------------------------------------------------------------------------------- wrapper

#: How the core's MAC edge is built for the CMAC: AXI-Stream ``tkeep``, frames padded to 60
#: bytes (the CMAC does not pad), in the core's clock (the XPM FIFOs cross to the MAC's).
VIVADO_MAC = MacOptions(byte_enables="keep", pad_to=60)

#: The wrapper's status signals a board pin may show (``Pin.drive``).
STATUS = {
    "rx_aligned": "the CMAC's receiver is aligned (link up)",
    "heartbeat": "bit 26 of a counter on the core clock: the core is clocked and out of reset",
    "rx_overflow_seen": "a received word found the RX FIFO full and was lost (sticky)",
}


def _fifo_params(packet):
    return {
        "p_CLOCKING_MODE": "independent_clock", "p_FIFO_DEPTH": 512,
        "p_FIFO_MEMORY_TYPE": "auto", "p_PACKET_FIFO": "true" if packet else "false",
        "p_TDATA_WIDTH": MAC_WIDTH, "p_TUSER_WIDTH": 1, "p_TID_WIDTH": 1, "p_TDEST_WIDTH": 1,
        "p_CDC_SYNC_STAGES": 3, "p_ECC_MODE": "no_ecc", "p_RELATED_CLOCKS": 0,
        "p_USE_ADV_FEATURES": "0000",
        "i_s_axis_tstrb": Const(-1, MAC_WIDTH // 8), "i_s_axis_tid": 0, "i_s_axis_tdest": 0,
        "i_injectsbiterr_axis": 0, "i_injectdbiterr_axis": 0,
    }


class BoardWrapper(wiring.Component):
    """The board's top level around the core (a black-box instance of the design's Verilog):

    * ``sysclk`` → IBUFDS → MMCME4_BASE → BUFG: the core clock (the board's ``core_mhz``) and the
      CMAC's init clock (``init_mhz``); ``xpm_cdc_async_rst`` gives each a reset, asserted while
      the MMCM is unlocked and released synchronously.
    * The CMAC (``cmac_usplus_0``, instance ``cmac``, CAUI-4, 512-bit AXI4-Stream): both user
      interfaces on its ``gt_txusrclk2`` (``mac_clk``); receive enabled; until ``stat_rx_aligned``
      the transmitter sends remote fault, then it is enabled (PG203's bring-up).
    * Receive: the CMAC's ``rx_axis`` (never back-pressured) → ``xpm_fifo_axis`` (``mac_clk`` →
      core clock; a word that finds it full is lost and sets ``rx_overflow_seen``) → the core's
      MAC port ``rx``: ``tdata``, ``tkeep``, ``tlast`` and ``tuser`` (the CMAC's FCS error, on a
      frame's last word) are its payload's ``data``, ``keep``, ``last`` and ``error``.
    * Transmit: the core's MAC port ``tx`` → ``xpm_fifo_axis`` in packet mode (core clock →
      ``mac_clk``: a frame starts only once it is whole, so the CMAC never underruns inside one)
      → the CMAC's ``tx_axis``.

    The wrapper converts nothing: the core's MAC edge (built with :data:`VIVADO_MAC`) turns
    ``tkeep`` into byte counts and back, pads frames to 60 bytes and aborts frames with an FCS
    error. The core's counters (its counter bank) are outputs left unconnected.

    Members: the board's pins (``sysclk_p/n``, ``qsfp_refclk_p/n``, ``qsfp_rx_p/n``,
    ``qsfp_tx_p/n`` and each of ``board.outputs``).
    """

    def __init__(self, board, core: CoreInfo):
        self._board = board
        self._core = core
        self._port = core.mac_ports[0]
        members = {
            "sysclk_p": In(1), "sysclk_n": In(1),
            "qsfp_refclk_p": In(1), "qsfp_refclk_n": In(1),
            "qsfp_rx_p": In(4), "qsfp_rx_n": In(4),
            "qsfp_tx_p": Out(4), "qsfp_tx_n": Out(4),
        }
        for pin in board.outputs:
            if not isinstance(pin.drive, int) and pin.drive not in STATUS:
                raise VivadoError(f"{board.name}: pin {pin.name} shows {pin.drive!r}, which is "
                                  f"neither 0, 1 nor a status signal ({', '.join(STATUS)})")
            members[pin.name] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        board = self._board
        mm = mmcm_settings(board.sysclk.mhz, board.core_mhz, board.init_mhz)
        nb = MAC_WIDTH // 8

        # Clocks and resets.
        sysclk, fb, core_mmcm, init_mmcm, locked = (Signal(name=n) for n in (
            "sysclk", "mmcm_fb", "mmcm_core", "mmcm_init", "mmcm_locked"))
        core_clk, init_clk, core_rst, init_rst, mac_clk = (Signal(name=n) for n in (
            "core_clk", "init_clk", "core_rst", "init_rst", "mac_clk"))
        m.submodules.sysclk_ibufds = Instance("IBUFDS", i_I=self.sysclk_p, i_IB=self.sysclk_n,
                                              o_O=sysclk)
        m.submodules.core_mmcm = Instance(
            "MMCME4_BASE",
            p_CLKIN1_PERIOD=round(1000.0 / board.sysclk.mhz, 3), p_DIVCLK_DIVIDE=mm["divclk"],
            p_CLKFBOUT_MULT_F=float(mm["mult"]), p_CLKOUT0_DIVIDE_F=float(mm["div0"]),
            p_CLKOUT1_DIVIDE=mm["div1"],
            i_CLKIN1=sysclk, i_CLKFBIN=fb, o_CLKFBOUT=fb, o_CLKOUT0=core_mmcm,
            o_CLKOUT1=init_mmcm, o_LOCKED=locked, i_PWRDWN=0, i_RST=0)
        m.submodules.core_clk_bufg = Instance("BUFG", i_I=core_mmcm, o_O=core_clk)
        m.submodules.init_clk_bufg = Instance("BUFG", i_I=init_mmcm, o_O=init_clk)
        for name, clk, rst in (("core_rst_sync", core_clk, core_rst),
                               ("init_rst_sync", init_clk, init_rst)):
            m.submodules[name] = Instance(
                "xpm_cdc_async_rst", p_DEST_SYNC_FF=4, p_INIT_SYNC_FF=0, p_RST_ACTIVE_HIGH=1,
                i_src_arst=~locked, i_dest_clk=clk, o_dest_arst=rst)
        m.domains.core = ClockDomain("core")
        m.domains.mac = ClockDomain("mac", reset_less=True)
        m.d.comb += [ClockSignal("core").eq(core_clk), ResetSignal("core").eq(core_rst),
                     ClockSignal("mac").eq(mac_clk)]

        # The CMAC.
        rx_valid, rx_last, rx_user, rx_aligned, tx_ready = (Signal(name=f"cmac_{n}") for n in (
            "rx_tvalid", "rx_tlast", "rx_tuser", "rx_aligned", "tx_tready"))
        rx_data, tx_data = Signal(MAC_WIDTH, name="cmac_rx_tdata"), \
            Signal(MAC_WIDTH, name="cmac_tx_tdata")
        rx_keep, tx_keep = Signal(nb, name="cmac_rx_tkeep"), Signal(nb, name="cmac_tx_tkeep")
        tx_valid, tx_last = Signal(name="cmac_tx_tvalid"), Signal(name="cmac_tx_tlast")
        mac_rx_rst, mac_tx_rst = Signal(name="mac_rx_rst"), Signal(name="mac_tx_rst")
        rx_aligned_q = Signal(name="rx_aligned_q")
        m.d.mac += rx_aligned_q.eq(rx_aligned)
        m.submodules.cmac = Instance(
            CMAC_MODULE,
            i_gt_rxp_in=self.qsfp_rx_p, i_gt_rxn_in=self.qsfp_rx_n,
            o_gt_txp_out=self.qsfp_tx_p, o_gt_txn_out=self.qsfp_tx_n,
            i_gt_ref_clk_p=self.qsfp_refclk_p, i_gt_ref_clk_n=self.qsfp_refclk_n,
            i_gt_loopback_in=Const(0, 12),
            i_gtwiz_reset_tx_datapath=0, i_gtwiz_reset_rx_datapath=0,
            i_sys_reset=init_rst, i_init_clk=init_clk, o_gt_txusrclk2=mac_clk,
            i_rx_clk=mac_clk, i_core_rx_reset=0, o_usr_rx_reset=mac_rx_rst,
            o_rx_axis_tvalid=rx_valid, o_rx_axis_tdata=rx_data, o_rx_axis_tkeep=rx_keep,
            o_rx_axis_tlast=rx_last, o_rx_axis_tuser=rx_user, o_stat_rx_aligned=rx_aligned,
            i_ctl_rx_enable=1, i_ctl_rx_force_resync=0, i_ctl_rx_test_pattern=0,
            i_core_tx_reset=0, o_usr_tx_reset=mac_tx_rst,
            i_tx_axis_tvalid=tx_valid, o_tx_axis_tready=tx_ready, i_tx_axis_tdata=tx_data,
            i_tx_axis_tkeep=tx_keep, i_tx_axis_tlast=tx_last, i_tx_axis_tuser=0,
            i_tx_preamblein=Const(0, 56),
            i_ctl_tx_enable=rx_aligned_q, i_ctl_tx_send_rfi=~rx_aligned_q,
            i_ctl_tx_send_lfi=0, i_ctl_tx_send_idle=0, i_ctl_tx_test_pattern=0,
            i_core_drp_reset=0, i_drp_clk=init_clk, i_drp_addr=Const(0, 10),
            i_drp_di=Const(0, 16), i_drp_en=0, i_drp_we=0)

        # Receive: CMAC (mac_clk) -> FIFO -> the core's MAC port.
        port = self._port.member
        core_rx_valid, core_rx_ready, core_rx_last, core_rx_user = (
            Signal(name=f"core_rx_{n}") for n in ("tvalid", "tready", "tlast", "tuser"))
        core_rx_data, core_rx_keep = Signal(MAC_WIDTH, name="core_rx_tdata"), \
            Signal(nb, name="core_rx_tkeep")
        rx_fifo_ready = Signal(name="rx_fifo_ready")
        rx_overflow_seen = Signal(name="rx_overflow_seen")
        with m.If(rx_valid & ~rx_fifo_ready):
            m.d.mac += rx_overflow_seen.eq(1)
        m.submodules.rx_fifo = Instance(
            "xpm_fifo_axis", **_fifo_params(packet=False),
            i_s_aclk=mac_clk, i_s_aresetn=~mac_rx_rst, i_m_aclk=core_clk,
            i_s_axis_tvalid=rx_valid, o_s_axis_tready=rx_fifo_ready, i_s_axis_tdata=rx_data,
            i_s_axis_tkeep=rx_keep, i_s_axis_tlast=rx_last, i_s_axis_tuser=rx_user,
            o_m_axis_tvalid=core_rx_valid, i_m_axis_tready=core_rx_ready,
            o_m_axis_tdata=core_rx_data, o_m_axis_tkeep=core_rx_keep,
            o_m_axis_tlast=core_rx_last, o_m_axis_tuser=core_rx_user)

        # Transmit: the core's MAC port -> FIFO in packet mode -> CMAC (mac_clk).
        core_tx_valid, core_tx_ready, core_tx_last = (
            Signal(name=f"core_tx_{n}") for n in ("tvalid", "tready", "tlast"))
        core_tx_data, core_tx_keep = Signal(MAC_WIDTH, name="core_tx_tdata"), \
            Signal(nb, name="core_tx_tkeep")
        m.submodules.tx_fifo = Instance(
            "xpm_fifo_axis", **_fifo_params(packet=True),
            i_s_aclk=core_clk, i_s_aresetn=~core_rst, i_m_aclk=mac_clk,
            i_s_axis_tvalid=core_tx_valid, o_s_axis_tready=core_tx_ready,
            i_s_axis_tdata=core_tx_data, i_s_axis_tkeep=core_tx_keep,
            i_s_axis_tlast=core_tx_last, i_s_axis_tuser=0,
            o_m_axis_tvalid=tx_valid, i_m_axis_tready=tx_ready, o_m_axis_tdata=tx_data,
            o_m_axis_tkeep=tx_keep, o_m_axis_tlast=tx_last)

        # The core: its MAC port's payloads are {data, keep, last, error}, LSB first.
        tx_payload = Signal(MAC_WIDTH + nb + 2, name="core_tx_payload")
        m.d.comb += Cat(core_tx_data, core_tx_keep, core_tx_last).eq(tx_payload[:-1])
        m.submodules.core = Instance(
            self._core.top_name, i_clk=core_clk, i_rst=core_rst,
            **{f"i_{port}__rx__valid": core_rx_valid, f"o_{port}__rx__ready": core_rx_ready,
               f"i_{port}__rx__payload": Cat(core_rx_data, core_rx_keep, core_rx_last,
                                             core_rx_user),
               f"o_{port}__tx__valid": core_tx_valid, f"i_{port}__tx__ready": core_tx_ready,
               f"o_{port}__tx__payload": tx_payload})

        # Status.
        heartbeat_count = Signal(27, name="heartbeat_count")
        m.d.core += heartbeat_count.eq(heartbeat_count + 1)
        status = {"rx_aligned": rx_aligned, "heartbeat": heartbeat_count[26],
                  "rx_overflow_seen": rx_overflow_seen}
        for pin in board.outputs:
            value = pin.drive if isinstance(pin.drive, int) else status[pin.drive]
            m.d.comb += getattr(self, pin.name).eq(value)
        return m


def _wrapper_verilog(board, top, core):
    """The wrapper's Verilog, with a header saying what it is."""
    text = verilog.convert(BoardWrapper(board, core), name=top, emit_src=False)
    header = (f"// {top}: {core.name} on the {board.title} ({board.part}).\n"
              f"// Generated by platforms/vivado/project.py from platforms.vivado.project."
              f"BoardWrapper ({time.strftime('%Y-%m-%d')}); edit that, not this file.\n"
              f"// The core's {len(core.counters)} counters are left unconnected: their list is "
              f"counters.md.\n")
    return header + text


# ------------------------------------------------------------------------------ constraints

def _xdc(board, top):
    q = board.qsfp
    L = [f"# {top}: pins and clocks for the {board.title} ({board.part}).",
         "# Generated by platforms/vivado/project.py. Sources:"]
    L += [f"#   {s}" for s in board.sources]
    L += ["", f"# {board.sysclk.comment}",
          f"set_property -dict {{PACKAGE_PIN {board.sysclk.p} IOSTANDARD "
          f"{board.sysclk.iostandard}}} [get_ports sysclk_p]",
          f"set_property -dict {{PACKAGE_PIN {board.sysclk.n} IOSTANDARD "
          f"{board.sysclk.iostandard}}} [get_ports sysclk_n]",
          f"create_clock -period {board.sysclk.period_ns} -name sysclk [get_ports sysclk_p]",
          "", f"# {q.name}, {q.comment}: GT reference clock, {q.refclk.comment}",
          f"set_property PACKAGE_PIN {q.refclk.p} [get_ports qsfp_refclk_p]",
          f"set_property PACKAGE_PIN {q.refclk.n} [get_ports qsfp_refclk_n]",
          f"create_clock -period {q.refclk.period_ns} -name qsfp_refclk "
          f"[get_ports qsfp_refclk_p]",
          "",
          f"# The four lanes (qsfp_rx_p/n, qsfp_tx_p/n) are placed by the CMAC IP: "
          f"GT_GROUP_SELECT {q.gt_group},",
          f"# CMAC_CORE_SELECT {q.cmac_site} (ip/{CMAC_MODULE}.tcl). For reference, lane k:"]
    for k, (lane, rx, tx) in enumerate(zip(q.lanes, q.rx_pins, q.tx_pins)):
        L.append(f"#   lane {k}: GTYE4_CHANNEL_{lane}  rx_p {rx:<5} tx_p {tx}")
    if board.outputs:
        L += ["", "# Outputs driven by the wrapper (constants and status)"]
        for pin in board.outputs:
            line = (f"set_property -dict {{PACKAGE_PIN {pin.loc} IOSTANDARD {pin.iostandard}}} "
                    f"[get_ports {pin.name}]")
            L.append(f"{line:<80} ;# {pin.comment}" if pin.comment else line)
        names = " ".join(p.name for p in board.outputs)
        L += [f"set_false_path -to [get_ports {{{names}}}]"]
    L += ["", "# The clock domains (core_clk, init_clk, mac_clk) meet only in XPM CDC cells, which "
          "carry", "# their own constraints.", ""]
    L += ["# Bitstream"]
    L += [f"set_property {p.split(' ', 1)[0]} {p.split(' ', 1)[1]} [current_design]"
          for p in board.bitstream]
    if board.notes:
        L += ["", "# Notes"] + [f"#   {n}" for n in board.notes]
    return "\n".join(L) + "\n"


def _ip_tcl(board):
    q = board.qsfp
    lanes = "".join(f"    CONFIG.LANE{i + 1}_GT_LOC {{{lane}}} \\\n"
                    for i, lane in enumerate(q.lanes))
    return f"""\
# The 100G MAC: cmac_usplus on {q.cmac_site}, {q.name} ({q.comment}).
# CAUI-4 (4 x 25.78125G), 512-bit AXI4-Stream user interface, RS-FEC off, no AXI4-Lite (the
# ctl_* inputs are ports, tied in the wrapper), no pause-frame flow control.
# Sourced by build.tcl and create_project.tcl with ip_dir set.
if {{![info exists ip_dir]}} {{ set ip_dir [file join [pwd] build ip] }}
file mkdir $ip_dir
create_ip -name cmac_usplus -vendor xilinx.com -library ip -module_name {CMAC_MODULE} \\
    -dir $ip_dir -force
set_property -dict [list \\
    CONFIG.CMAC_CAUI4_MODE {{1}} \\
    CONFIG.NUM_LANES {{4x25}} \\
    CONFIG.USER_INTERFACE {{AXIS}} \\
    CONFIG.GT_REF_CLK_FREQ {{{_mhz(q.refclk.mhz)}}} \\
    CONFIG.GT_DRP_CLK {{{board.init_mhz:g}}} \\
    CONFIG.INCLUDE_RS_FEC {{0}} \\
    CONFIG.ENABLE_AXI_INTERFACE {{0}} \\
    CONFIG.TX_FLOW_CONTROL {{0}} \\
    CONFIG.RX_FLOW_CONTROL {{0}} \\
    CONFIG.ENABLE_PIPELINE_REG {{1}} \\
    CONFIG.CMAC_CORE_SELECT {{{q.cmac_site}}} \\
    CONFIG.GT_GROUP_SELECT {{{q.gt_group}}} \\
{lanes}] [get_ips {CMAC_MODULE}]
"""


def _build_tcl(board, top, core_v, wrapper_v, xdc, ip_tcl):
    return f"""\
# Batch build (non-project mode) of {top} for the {board.title}:
#   vivado -mode batch -source build.tcl
# Outputs: build/{top}.bit, build/*.dcp, reports/utilization.rpt, reports/timing_summary.rpt.
# Lines starting "beehive:" mark the steps (platforms.vivado.run_vivado reports them).
set here [file dirname [file normalize [info script]]]
cd $here
set part {board.part}
set top  {top}
file mkdir build reports

puts "beehive: reading sources for $top ($part)"
create_project -in_memory -part $part
set_property target_language Verilog [current_project]
read_verilog {core_v}
read_verilog {wrapper_v}

puts "beehive: generating the CMAC IP"
set ip_dir [file join $here build ip]
source {ip_tcl}
generate_target all [get_ips]
synth_ip [get_ips]

read_xdc {xdc}

puts "beehive: synth_design"
synth_design -top $top -part $part
write_checkpoint -force build/post_synth.dcp
report_utilization -file reports/post_synth_utilization.rpt

puts "beehive: opt_design"
opt_design
puts "beehive: place_design"
place_design
phys_opt_design
puts "beehive: route_design"
route_design
write_checkpoint -force build/post_route.dcp

puts "beehive: reports"
report_utilization -file reports/utilization.rpt
report_timing_summary -max_paths 10 -file reports/timing_summary.rpt

puts "beehive: write_bitstream"
write_bitstream -force build/$top.bit
puts "beehive: done build/$top.bit"
"""


def _create_tcl(board, top, core_v, wrapper_v, xdc, ip_tcl):
    return f"""\
# A Vivado project (project mode) with the same sources as build.tcl, to open in the GUI:
#   vivado -mode batch -source create_project.tcl
#   vivado vivado_project/{top}.xpr
# Then Flow > Generate Bitstream (or launch_runs impl_1 -to_step write_bitstream).
set here [file dirname [file normalize [info script]]]
cd $here
set part {board.part}
set top  {top}

create_project $top vivado_project -part $part -force
set_property target_language Verilog [current_project]
add_files -norecurse {core_v}
add_files -norecurse {wrapper_v}
set_property top $top [current_fileset]

set ip_dir [file join $here vivado_project ip]
source {ip_tcl}
generate_target all [get_ips]

add_files -fileset constrs_1 -norecurse {xdc}
update_compile_order -fileset sources_1
puts "beehive: project vivado_project/$top.xpr created"
"""


def _readme(board, project, design_name, port):
    q = board.qsfp
    rel = lambda p: os.path.relpath(p, project.out_dir)  # noqa: E731
    notes = "".join(f"  - {n}\n" for n in board.notes)
    sources = "".join(f"  - {s}\n" for s in board.sources)
    return f"""\
Beehive on the {board.title}: {design_name}
{"=" * (len(design_name) + len(board.title) + 16)}

A complete Vivado project: the design ({project.core_top}, Verilog from Amaranth), a board
wrapper ({project.top}) with the 100G MAC (CMAC, {q.cmac_site}) on {q.name}, and the
scripts. Part: {board.part}.

Build a bitstream (batch, non-project mode, ~1-3 hours):

    cd {project.out_dir}
    vivado -mode batch -source build.tcl

  -> build/{project.top}.bit, reports/utilization.rpt, reports/timing_summary.rpt

Or create a project to open in the Vivado GUI:

    vivado -mode batch -source create_project.tcl
    vivado vivado_project/{project.top}.xpr

From Python, platforms.vivado.run_vivado(project) runs build.tcl and parses the reports.

Files
-----
  {rel(project.core_v):<34} the design (regenerate it rather than edit it)
  {rel(project.wrapper_v):<34} board wrapper: clocks, resets, CMAC, CDC FIFOs (written by
  {"":<34} Amaranth from platforms.vivado.project.BoardWrapper)
  {rel(project.ip_tcl):<34} CMAC IP configuration (create_ip + CONFIG.*)
  {rel(project.xdc):<34} pins, clocks, bitstream options
  build.tcl                          batch flow
  create_project.tcl                 project-mode flow (GUI)
  counters.md                        the design's counters (its counter bank)

Clocks
------
  sysclk   {board.sysclk.mhz:g} MHz on {board.sysclk.p}/{board.sysclk.n} ({board.sysclk.comment})
           -> MMCM -> core_clk {board.core_mhz:g} MHz (Beehive),
                      init_clk {board.init_mhz:g} MHz (CMAC)
  refclk   {_mhz(q.refclk.mhz)} MHz on {q.refclk.p}/{q.refclk.n} ({q.refclk.comment})
  mac_clk  322.265625 MHz from the CMAC (gt_txusrclk2); both MAC user interfaces run on it

Data path
---------
  The design's Ethernet port {port.name} (the core's {port.member}__rx / __tx) takes the CMAC's
  AXI4-Stream as it is: tdata, tkeep, tlast and tuser (FCS error) are its payload's data,
  keep, last and error; frames exclude preamble and FCS. The core's own MAC edge turns tkeep
  into byte counts, pads frames shorter than 60 bytes (the CMAC does not) and drops frames
  with an FCS error (counted in its Ethernet RX tile's bad_fcs). The wrapper only crosses
  clock domains, with xpm_fifo_axis (TX in packet mode so the CMAC never underruns). The
  design's {len(project.counters)} counters (counters.md) are outputs left unconnected.

Check before trusting the bitstream
-----------------------------------
  - Timing: reports/timing_summary.rpt must say "All user specified timing constraints are
    met." The core runs at {board.core_mhz:g} MHz.
  - Frames with a bad FCS (rx_axis_tuser) are dropped by the core and counted.
{notes}
Pin and site sources
--------------------
{sources}"""


# -------------------------------------------------------------------------------- writing

def _has_inputs(member):
    """Whether a top-level member has an input port (a member's signature is seen from it)."""
    if member.is_port:
        return member.flow == wiring.In
    return any(m.flow == wiring.In for _, m in member.signature.members.flatten() if m.is_port)


def _check_inputs(top, port):
    """Refuse a top with inputs the wrapper cannot drive (memory ports, UART pins...)."""
    extra = [name for name, member in top.signature.members.items()
             if name not in (port.member, "counters") and _has_inputs(member)]
    if extra:
        raise VivadoError(f"the design has inputs the board wrapper cannot drive: "
                          f"{', '.join(extra)} (memory ports would need the boards' DDR4, not "
                          f"written)")


def write_project(design, board, out_dir, *, progress=print, cache_dir=DEFAULT_CACHE_DIR):
    """Write the Vivado project for ``design`` on ``board`` (a :class:`~.boards.Board` or
    ``"u200"``/``"enzian"``) into ``out_dir``; return a :class:`VivadoProject`.

    The design must be 512 bits wide, have exactly one Ethernet (MAC) port and no other port
    but its counters (:class:`VivadoError` otherwise, before anything is written). The core is
    built with :data:`VIVADO_MAC`; ``cache_dir`` (``None`` to disable) caches its Verilog
    conversion as ``apiary sim`` does.
    """
    board = get_board(board)
    progress = progress or (lambda msg: None)
    _check_width(design, board)
    t0 = time.monotonic()
    # The hardware top: not apiary.sim.elaborate(), which puts simulation memory models inside.
    top_obj = DesignTop(design, mac=VIVADO_MAC)
    port = _check_ports(design, top_obj.mac_ports)
    _check_inputs(top_obj, port)
    name = top_name(design)
    top = f"{name}_{board.name}_top"

    out_dir = os.path.abspath(out_dir)
    for sub in ("rtl", "ip", "constraints"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    progress(f"converting {design.name} to Verilog ({design.width} bits)")
    core = write_core(top_obj, os.path.join(out_dir, "rtl"),
                      cache_dir=os.path.expanduser(cache_dir) if cache_dir else None)
    progress(f"  Verilog ready in {time.monotonic() - t0:.1f} s")
    rel = {
        "core_v": f"rtl/{name}.v",
        "wrapper_v": f"rtl/{top}.v",
        "ip_tcl": f"ip/{CMAC_MODULE}.tcl",
        "xdc": f"constraints/{board.name}.xdc",
    }
    contents = {
        "wrapper_v": _wrapper_verilog(board, top, core),
        "ip_tcl": _ip_tcl(board),
        "xdc": _xdc(board, top) + slot_pblocks(
            design, board.name, getattr(design.guard, "config_of", None)),
        "build_tcl": _build_tcl(board, top, rel["core_v"], rel["wrapper_v"], rel["xdc"],
                                rel["ip_tcl"]),
        "create_tcl": _create_tcl(board, top, rel["core_v"], rel["wrapper_v"], rel["xdc"],
                                  rel["ip_tcl"]),
        "counters": f"# The counters of {design.name}\n\nOutputs `counters__<name>` of the core "
                    f"({name}), left unconnected by the wrapper; wire the ones you need to an "
                    f"ILA or VIO.\n\n{core.counters.table()}\n",
    }
    rel.update(build_tcl="build.tcl", create_tcl="create_project.tcl", readme="README.txt",
               counters="counters.md")
    paths = {k: os.path.join(out_dir, v) for k, v in rel.items()}
    project = VivadoProject(
        board=board, out_dir=out_dir, top=top, core_top=name,
        core_v=paths["core_v"], wrapper_v=paths["wrapper_v"], xdc=paths["xdc"],
        ip_tcl=paths["ip_tcl"], create_tcl=paths["create_tcl"], build_tcl=paths["build_tcl"],
        readme=paths["readme"], port=port, counters=list(core.counters.names))
    project.files.append(paths["core_v"])
    contents["readme"] = _readme(board, project, design.name, port)
    for key in ("wrapper_v", "ip_tcl", "xdc", "build_tcl", "create_tcl", "counters", "readme"):
        _write(paths[key], contents[key])
        project.files.append(paths[key])
    progress(f"wrote the {board.title} Vivado project ({board.part}) to {out_dir} "
             f"in {time.monotonic() - t0:.1f} s")
    return project


def _write(path, text):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# -------------------------------------------------------------------------------- running

def run_vivado(project, *, progress=print, vivado="vivado", timeout=None):
    """Run ``vivado -mode batch -source build.tcl`` in the project directory.

    Vivado's output goes to ``build.log`` there; the ``beehive:`` step lines and ``ERROR:``
    lines are passed to ``progress``. Returns ``{"returncode", "log", "bitstream",
    "utilization", "timing", "seconds"}`` (the report dicts empty if a report is missing).

    Raises :class:`VivadoError` if Vivado is not on ``PATH`` (the message says how to run the
    ready project by hand) or exits with an error (the message quotes the log's last lines).
    """
    progress = progress or (lambda msg: None)
    out_dir = project.out_dir if isinstance(project, VivadoProject) else os.path.abspath(project)
    exe = shutil.which(vivado)
    if exe is None:
        raise VivadoError(f"Vivado is not on PATH; the project in {out_dir} is ready: run "
                          f"`vivado -mode batch -source build.tcl` there")
    log_path = os.path.join(out_dir, BUILD_LOG)
    t0 = time.monotonic()
    progress(f"running {exe} -mode batch -source build.tcl in {out_dir} (log: {log_path})")
    tail: list[str] = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen([exe, "-mode", "batch", "-source", "build.tcl"], cwd=out_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        assert proc.stdout is not None      # stdout=PIPE
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                tail = (tail + [line.rstrip("\n")])[-30:]
                if line.startswith(("beehive:", "ERROR:", "CRITICAL WARNING:")):
                    progress(line.rstrip("\n"))
            rc = proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    seconds = time.monotonic() - t0
    if rc != 0:
        raise VivadoError(f"Vivado failed (exit {rc}) after {seconds:.0f} s; log: {log_path}\n"
                          + "\n".join(tail[-15:]))
    reports = os.path.join(out_dir, "reports")
    result: dict[str, Any] = {"returncode": rc, "log": log_path, "seconds": seconds,
                              "bitstream": None, "utilization": {}, "timing": {}}
    util = os.path.join(reports, "utilization.rpt")
    timing = os.path.join(reports, "timing_summary.rpt")
    if os.path.exists(util):
        with open(util, errors="replace") as f:
            result["utilization"] = parse_utilization(f.read())
    if os.path.exists(timing):
        with open(timing, errors="replace") as f:
            result["timing"] = parse_timing_summary(f.read())
    top = project.top if isinstance(project, VivadoProject) else None
    bits = [os.path.join(out_dir, "build", n) for n in sorted(os.listdir(
        os.path.join(out_dir, "build"))) if n.endswith(".bit")] \
        if os.path.isdir(os.path.join(out_dir, "build")) else []
    if top and os.path.join(out_dir, "build", f"{top}.bit") in bits:
        result["bitstream"] = os.path.join(out_dir, "build", f"{top}.bit")
    elif bits:
        result["bitstream"] = bits[0]
    t = result["timing"]
    summary = [f"Vivado finished in {seconds:.0f} s"]
    if t.get("wns") is not None:
        summary.append(f"WNS {t['wns']:+.3f} ns ({'met' if t.get('met') else 'NOT met'})")
    luts = result["utilization"].get("CLB LUTs", {}).get("used")
    if luts is not None:
        summary.append(f"{luts} LUTs")
    if result["bitstream"]:
        summary.append(f"bitstream {result['bitstream']}")
    progress("; ".join(summary))
    return result


def _number(text):
    text = text.strip().rstrip("%")
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_utilization(text):
    """``{site_type: {"used", "available", "util%", ...}}`` from ``report_utilization`` text
    (every table whose header has "Site Type" and "Used"; the first occurrence of a name
    wins)."""
    result = {}
    header = None
    for line in text.splitlines():
        line = line.rstrip()
        if not line.startswith("|"):
            if not line.startswith("+"):
                header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "Used" in cells and ("Site Type" in cells or "Ref Name" in cells):
            header = [c.lower() for c in cells]
            continue
        if header is None or len(cells) != len(header):
            continue
        name = cells[0]
        if not name or name in result:
            continue
        row = {header[i]: _number(cells[i]) for i in range(1, len(cells))}
        result[name] = row
    return result


def parse_timing_summary(text):
    """``{"wns", "tns", "failing_endpoints", "whs", "ths", "met"}`` from
    ``report_timing_summary`` text (the Design Timing Summary table); ``{}`` if absent."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "WNS(ns)" in line and "TNS(ns)" in line:
            names = re.split(r"\s{2,}", line.strip())
            for values_line in lines[i + 1:i + 6]:
                if values_line.strip() and not set(values_line.strip()) <= set("- "):
                    values = values_line.split()
                    break
            else:
                return {}
            row = dict(zip(names, values))
            out = {
                "wns": _float(row.get("WNS(ns)")),
                "tns": _float(row.get("TNS(ns)")),
                "failing_endpoints": _int(row.get("TNS Failing Endpoints")),
                "whs": _float(row.get("WHS(ns)")),
                "ths": _float(row.get("THS(ns)")),
            }
            out["met"] = "All user specified timing constraints are met" in text
            return out
    return {}


def _float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _int(x):
    try:
        return int(x)
    except (TypeError, ValueError):
        return None
