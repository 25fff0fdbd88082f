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

from ..core import CACHE_DIR as DEFAULT_CACHE_DIR   # shared with the other flows and apiary sim
from .boards import get_board


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
            found = "it has " + ", ".join(f"{p.name} ({p.rx}/{p.tx})" for p in ports)
        raise VivadoError(
            f"the Vivado flow wires exactly one Ethernet frame port (a tile's mac_rx/mac_tx "
            f"payload streams) to the board's QSFP28 MAC; design {design.name!r}: {found}")
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

_HEADER = """\
// {top}: {design} on the {title} ({part}).
//
// Generated by platforms/vivado/project.py ({when}); regenerating overwrites it, so copy the
// project directory before editing. What is here, from the pins inward:
//
//   sysclk {sysclk_mhz} MHz: {sysclk_note}
//     -> IBUFDS -> MMCME4_BASE -> {core_mhz} MHz core_clk (Beehive),
//                                 {init_mhz} MHz init_clk (CMAC init/DRP)
//   {qsfp}: 4 x 25G lanes (GT group {gt_group}), reference clock {ref_mhz} MHz
//     -> {cmac} (cmac_usplus on {cmac_site}, CAUI-4, 512-bit AXI4-Stream, RS-FEC off)
//     -> both user interfaces on gt_txusrclk2 (mac_clk, 322.265625 MHz; rx_clk is tied to it)
//   RX: CMAC rx_axis (never back-pressured) -> xpm_fifo_axis (mac_clk -> core_clk)
//       -> tkeep -> nbytes -> {core}.{rx}
//   TX: {core}.{tx} -> nbytes -> tkeep, frames under 60 bytes zero-padded to 60
//       -> xpm_fifo_axis in packet mode (core_clk -> mac_clk: a frame starts only once it is
//          whole, so the CMAC never underruns mid-frame) -> CMAC tx_axis
//   Resets: core_rst and init_rst are ~MMCM-locked, synchronised by xpm_cdc_async_rst.
//   CMAC: receive enabled; until stat_rx_aligned the transmitter sends remote-fault (RFI),
//         then it is enabled (PG203's bring-up sequence).
//
// The frames on both sides exclude preamble and FCS: the CMAC strips the FCS on receive and
// appends it on transmit. Frames whose FCS was wrong (rx_axis_tuser on the last word) are
// passed on to the core like any other (Beehive checks the IP/UDP/ICMP checksums); the core's
// counters ({ncounters} 32-bit outputs) are left unconnected: wire them to an ILA/VIO to watch.
"""


def _wrapper(board, top, core, port, core_ports, counters, design_name):
    q = board.qsfp
    mm = mmcm_settings(board.sysclk.mhz, board.core_mhz, board.init_mhz)
    width = port.width
    nb = (width // 8).bit_length()           # 7
    kw = width // 8                          # 64
    pw = width + nb + 1                      # 520
    rx_w = core_ports[f"{port.rx}__payload"][1]
    tx_w = core_ports[f"{port.tx}__payload"][1]
    if rx_w != pw or tx_w != pw:
        raise VivadoError(f"the frame port's payload is {rx_w}/{tx_w} bits, expected {pw} "
                          f"({{data: {width}, nbytes: {nb}, last: 1}})")
    L = []
    w = L.append
    w(_HEADER.format(
        top=top, design=design_name, title=board.title, part=board.part,
        when=time.strftime("%Y-%m-%d"), sysclk_mhz=f"{board.sysclk.mhz:g}",
        sysclk_note=board.sysclk.comment, core_mhz=f"{board.core_mhz:g}",
        init_mhz=f"{board.init_mhz:g}", qsfp=q.name, gt_group=q.gt_group,
        ref_mhz=_mhz(q.refclk.mhz), cmac=CMAC_MODULE, cmac_site=q.cmac_site, core=core,
        rx=port.rx, tx=port.tx, ncounters=len(counters)))
    w("`timescale 1ns / 1ps")
    w("`default_nettype none")
    w("")
    w(f"module {top} (")
    ports = [
        ("input  wire      ", "sysclk_p", f"{board.sysclk.mhz:g} MHz, {board.sysclk.p}"),
        ("input  wire      ", "sysclk_n", board.sysclk.n),
        ("input  wire      ", "qsfp_refclk_p", f"{_mhz(q.refclk.mhz)} MHz, {q.refclk.p}"),
        ("input  wire      ", "qsfp_refclk_n", q.refclk.n),
        ("input  wire [3:0]", "qsfp_rx_p", "GT lanes: placed by the CMAC IP's GT LOCs"),
        ("input  wire [3:0]", "qsfp_rx_n", ""),
        ("output wire [3:0]", "qsfp_tx_p", ""),
        ("output wire [3:0]", "qsfp_tx_n", ""),
    ]
    for pin in board.outputs:
        ports.append(("output wire      ", pin.name, f"{pin.loc}: {pin.comment}".rstrip(": ")))
    for i, (decl, name, comment) in enumerate(ports):
        sep = "," if i < len(ports) - 1 else ""
        text = f"    {decl} {name}{sep}"
        w(f"{text:<44}// {comment}" if comment else text)
    w(");")
    w("")
    w(f"    localparam DATA_W = {width};          // the MAC's AXI stream and the core's data lane")
    w(f"    localparam KEEP_W = {kw};")
    w(f"    localparam NB_W   = {nb};            // nbytes: 0..{kw}")
    w("")
    w("    // ---------------------------------------------------------------- clocks and resets")
    w("    wire sysclk;")
    w("    IBUFDS sysclk_ibufds (.I(sysclk_p), .IB(sysclk_n), .O(sysclk));")
    w("")
    w("    wire mmcm_fb, mmcm_core, mmcm_init, mmcm_locked;")
    w(f"    // VCO = {board.sysclk.mhz:g} * {mm['mult']:g} / {mm['divclk']} = {mm['vco']:g} MHz; "
      f"CLKOUT0 = {board.core_mhz:g} MHz, CLKOUT1 = {board.init_mhz:g} MHz")
    w("    MMCME4_BASE #(")
    w(f"        .CLKIN1_PERIOD({_fmt(1000.0 / board.sysclk.mhz)}),")
    w(f"        .DIVCLK_DIVIDE({mm['divclk']}),")
    w(f"        .CLKFBOUT_MULT_F({_fmt(mm['mult'])}),")
    w(f"        .CLKOUT0_DIVIDE_F({_fmt(mm['div0'])}),")
    w(f"        .CLKOUT1_DIVIDE({mm['div1']})")
    w("    ) core_mmcm (")
    w("        .CLKIN1(sysclk),")
    w("        .CLKFBIN(mmcm_fb),")
    w("        .CLKFBOUT(mmcm_fb),")
    w("        .CLKOUT0(mmcm_core),")
    w("        .CLKOUT1(mmcm_init),")
    w("        .LOCKED(mmcm_locked),")
    w("        .PWRDWN(1'b0),")
    w("        .RST(1'b0)")
    w("    );")
    w("")
    w("    wire core_clk, init_clk;")
    w("    BUFG core_clk_bufg (.I(mmcm_core), .O(core_clk));")
    w("    BUFG init_clk_bufg (.I(mmcm_init), .O(init_clk));")
    w("")
    w("    // Asynchronous assertion, synchronous release in each clock domain.")
    w("    wire core_rst, init_rst;")
    for name, clk in (("core_rst", "core_clk"), ("init_rst", "init_clk")):
        w("    xpm_cdc_async_rst #(")
        w("        .DEST_SYNC_FF(4),")
        w("        .INIT_SYNC_FF(0),")
        w("        .RST_ACTIVE_HIGH(1)")
        w(f"    ) {name}_sync (")
        w("        .src_arst(~mmcm_locked),")
        w(f"        .dest_clk({clk}),")
        w(f"        .dest_arst({name})")
        w("    );")
    w("")
    w("    // ------------------------------------------------------------------ 100G MAC (CMAC)")
    w("    wire              mac_clk;          // gt_txusrclk2: TX and (via rx_clk) RX user clock")
    w("    wire              mac_rx_rst, mac_tx_rst;")
    w("    wire              rx_aligned;")
    w("    wire              cmac_rx_tvalid, cmac_rx_tlast, cmac_rx_tuser;")
    w("    wire [DATA_W-1:0] cmac_rx_tdata;")
    w("    wire [KEEP_W-1:0] cmac_rx_tkeep;")
    w("    wire              cmac_tx_tvalid, cmac_tx_tready, cmac_tx_tlast;")
    w("    wire [DATA_W-1:0] cmac_tx_tdata;")
    w("    wire [KEEP_W-1:0] cmac_tx_tkeep;")
    w("")
    w("    // PG203 bring-up: receive on; send remote fault until the receiver is aligned, then")
    w("    // enable the transmitter. stat_rx_aligned is in the RX clock domain, which is mac_clk.")
    w("    reg rx_aligned_q = 1'b0;")
    w("    always @(posedge mac_clk) rx_aligned_q <= rx_aligned;")
    w("")
    cmac = [
        ("gt_rxp_in", "qsfp_rx_p"), ("gt_rxn_in", "qsfp_rx_n"),
        ("gt_txp_out", "qsfp_tx_p"), ("gt_txn_out", "qsfp_tx_n"),
        ("gt_ref_clk_p", "qsfp_refclk_p"), ("gt_ref_clk_n", "qsfp_refclk_n"),
        ("gt_loopback_in", "12'd0"),
        ("gtwiz_reset_tx_datapath", "1'b0"), ("gtwiz_reset_rx_datapath", "1'b0"),
        ("sys_reset", "init_rst"), ("init_clk", "init_clk"),
        ("gt_txusrclk2", "mac_clk"),
        None,
        ("rx_clk", "mac_clk"), ("core_rx_reset", "1'b0"), ("usr_rx_reset", "mac_rx_rst"),
        ("rx_axis_tvalid", "cmac_rx_tvalid"), ("rx_axis_tdata", "cmac_rx_tdata"),
        ("rx_axis_tkeep", "cmac_rx_tkeep"), ("rx_axis_tlast", "cmac_rx_tlast"),
        ("rx_axis_tuser", "cmac_rx_tuser"), ("rx_preambleout", ""),
        ("stat_rx_aligned", "rx_aligned"),
        ("ctl_rx_enable", "1'b1"), ("ctl_rx_force_resync", "1'b0"),
        ("ctl_rx_test_pattern", "1'b0"),
        None,
        ("core_tx_reset", "1'b0"), ("usr_tx_reset", "mac_tx_rst"),
        ("tx_axis_tvalid", "cmac_tx_tvalid"), ("tx_axis_tready", "cmac_tx_tready"),
        ("tx_axis_tdata", "cmac_tx_tdata"), ("tx_axis_tkeep", "cmac_tx_tkeep"),
        ("tx_axis_tlast", "cmac_tx_tlast"), ("tx_axis_tuser", "1'b0"),
        ("tx_preamblein", "56'd0"), ("tx_ovfout", ""), ("tx_unfout", ""),
        ("ctl_tx_enable", "rx_aligned_q"), ("ctl_tx_send_rfi", "~rx_aligned_q"),
        ("ctl_tx_send_lfi", "1'b0"), ("ctl_tx_send_idle", "1'b0"),
        ("ctl_tx_test_pattern", "1'b0"),
        None,
        ("core_drp_reset", "1'b0"), ("drp_clk", "init_clk"), ("drp_addr", "10'd0"),
        ("drp_di", "16'd0"), ("drp_en", "1'b0"), ("drp_we", "1'b0"), ("drp_do", ""),
        ("drp_rdy", ""),
    ]
    _instance(w, CMAC_MODULE, "cmac", cmac)
    w("")
    w("    // ----------------------------------------------------------------------- receive")
    w("    // The CMAC cannot be back-pressured. The core takes a word every core_clk cycle")
    w(f"    // ({board.core_mhz:g} MHz x {width} bits > 100 Gb/s), so this FIFO only absorbs the")
    w("    // clock difference; a word that finds it full is lost (and sets rx_overflow_seen).")
    w("    wire              rx_fifo_ready;")
    w("    reg               rx_overflow_seen = 1'b0;")
    w("    always @(posedge mac_clk)")
    w("        if (cmac_rx_tvalid && !rx_fifo_ready) rx_overflow_seen <= 1'b1;")
    w("")
    w("    wire              core_rx_tvalid, core_rx_tready, core_rx_tlast;")
    w("    wire [DATA_W-1:0] core_rx_tdata;")
    w("    wire [KEEP_W-1:0] core_rx_tkeep;")
    _fifo(w, "rx_fifo", "false", "mac_clk", "~mac_rx_rst", "core_clk",
          s=dict(tvalid="cmac_rx_tvalid", tready="rx_fifo_ready", tdata="cmac_rx_tdata",
                 tkeep="cmac_rx_tkeep", tlast="cmac_rx_tlast"),
          m=dict(tvalid="core_rx_tvalid", tready="core_rx_tready", tdata="core_rx_tdata",
                 tkeep="core_rx_tkeep", tlast="core_rx_tlast"))
    w("")
    w("    // tkeep (contiguous from byte 0) -> nbytes; payload = {last, nbytes, data}, byte i of")
    w("    // the frame in data[8i+7:8i] on both sides.")
    w("    wire [DATA_W+NB_W:0] core_rx_payload;")
    w("    beehive_keep_to_nbytes #(.KEEP_W(KEEP_W), .NB_W(NB_W)) rx_nbytes (")
    w("        .keep(core_rx_tkeep),")
    w("        .nbytes(core_rx_payload[DATA_W +: NB_W])")
    w("    );")
    w("    assign core_rx_payload[DATA_W-1:0]    = core_rx_tdata;")
    w("    assign core_rx_payload[DATA_W + NB_W] = core_rx_tlast;")
    w("")
    w("    // ---------------------------------------------------------------------- transmit")
    w("    wire              core_tx_valid, core_tx_ready;")
    w("    wire [DATA_W+NB_W:0] core_tx_payload;")
    w("    wire              pad_tvalid, pad_tready, pad_tlast;")
    w("    wire [DATA_W-1:0] pad_tdata;")
    w("    wire [KEEP_W-1:0] pad_tkeep;")
    w("    beehive_nbytes_to_keep #(.DATA_W(DATA_W), .NB_W(NB_W), .MIN_FRAME(60)) tx_keep (")
    w("        .clk(core_clk),")
    w("        .rst(core_rst),")
    w("        .s_valid(core_tx_valid),")
    w("        .s_ready(core_tx_ready),")
    w("        .s_payload(core_tx_payload),")
    w("        .m_tvalid(pad_tvalid),")
    w("        .m_tready(pad_tready),")
    w("        .m_tdata(pad_tdata),")
    w("        .m_tkeep(pad_tkeep),")
    w("        .m_tlast(pad_tlast)")
    w("    );")
    w("")
    _fifo(w, "tx_fifo", "true", "core_clk", "~core_rst", "mac_clk",
          s=dict(tvalid="pad_tvalid", tready="pad_tready", tdata="pad_tdata",
                 tkeep="pad_tkeep", tlast="pad_tlast"),
          m=dict(tvalid="cmac_tx_tvalid", tready="cmac_tx_tready", tdata="cmac_tx_tdata",
                 tkeep="cmac_tx_tkeep", tlast="cmac_tx_tlast"))
    w("")
    w("    // ---------------------------------------------------------------------- the core")
    conns = []
    for name in core_ports:
        if name == "clk":
            conns.append((name, "core_clk"))
        elif name == "rst":
            conns.append((name, "core_rst"))
    conns.append(None)
    conns += [(f"{port.rx}__valid", "core_rx_tvalid"), (f"{port.rx}__ready", "core_rx_tready"),
              (f"{port.rx}__payload", "core_rx_payload"),
              (f"{port.tx}__valid", "core_tx_valid"), (f"{port.tx}__ready", "core_tx_ready"),
              (f"{port.tx}__payload", "core_tx_payload")]
    known = {c[0] for c in conns if c}
    rest = [n for n in core_ports if n not in known]
    unexpected = [n for n in rest if core_ports[n][0] != "output"]
    if unexpected:
        raise VivadoError(f"the design has inputs the board wrapper cannot drive: "
                          f"{', '.join(unexpected)}")
    if rest:
        conns.append(None)
        conns.append("counters (32-bit): unconnected")
        conns += [(n, "") for n in rest]
    _instance(w, core, "core", conns)
    w("")
    w("    // ------------------------------------------------------------------------ status")
    w("    reg [26:0] heartbeat_count = 27'd0;")
    w("    always @(posedge core_clk)")
    w("        if (core_rst) heartbeat_count <= 27'd0;")
    w("        else          heartbeat_count <= heartbeat_count + 27'd1;")
    w("    wire heartbeat = heartbeat_count[26];")
    for pin in board.outputs:
        w(f"    assign {pin.name} = {pin.drive};" + (f"  // {pin.comment}" if pin.comment else ""))
    w("")
    w("endmodule")
    w("")
    w(_HELPERS)
    w("`default_nettype wire")
    return "\n".join(L) + "\n"


def _instance(w, module, name, conns):
    w(f"    {module} {name} (")
    items = [c for c in conns if isinstance(c, tuple)]
    last = items[-1]
    width = max(len(c[0]) for c in items) + 2
    for c in conns:
        if c is None:
            w("")
        elif isinstance(c, str):
            w(f"        // {c}")
        else:
            sep = "" if c is last else ","
            w(f"        .{c[0]:<{width}}({c[1]}){sep}")
    w("    );")


def _fifo(w, name, packet, s_clk, s_resetn, m_clk, s, m):
    w("    xpm_fifo_axis #(")
    params = [
        ("CLOCKING_MODE", '"independent_clock"'), ("FIFO_DEPTH", "512"),
        ("FIFO_MEMORY_TYPE", '"auto"'), ("PACKET_FIFO", f'"{packet}"'),
        ("TDATA_WIDTH", "DATA_W"), ("TUSER_WIDTH", "1"), ("TID_WIDTH", "1"),
        ("TDEST_WIDTH", "1"), ("CDC_SYNC_STAGES", "3"), ("ECC_MODE", '"no_ecc"'),
        ("RELATED_CLOCKS", "0"), ("USE_ADV_FEATURES", '"0000"'),
    ]
    for i, (k, v) in enumerate(params):
        sep = "," if i < len(params) - 1 else ""
        w(f"        .{k:<17}({v}){sep}")
    conns = [("s_aclk", s_clk), ("s_aresetn", s_resetn)]
    conns += [(f"s_axis_{k}", v) for k, v in s.items()]
    conns += [("s_axis_tstrb", "{KEEP_W{1'b1}}"), ("s_axis_tuser", "1'b0"),
              ("s_axis_tid", "1'b0"), ("s_axis_tdest", "1'b0"), None,
              ("m_aclk", m_clk)]
    conns += [(f"m_axis_{k}", v) for k, v in m.items()]
    conns += [None, ("injectsbiterr_axis", "1'b0"), ("injectdbiterr_axis", "1'b0")]
    w(f"    ) {name} (")
    items = [c for c in conns if c]
    for c in conns:
        if c is None:
            w("")
            continue
        sep = "" if c is items[-1] else ","
        w(f"        .{c[0]:<19}({c[1]}){sep}")
    w("    );")


_HELPERS = """\
// tkeep -> nbytes: the number of valid bytes, counted from byte 0 (tkeep is contiguous).
module beehive_keep_to_nbytes #(
    parameter KEEP_W = 64,
    parameter NB_W   = 7
) (
    input  wire [KEEP_W-1:0] keep,
    output reg  [NB_W-1:0]   nbytes
);
    integer i;
    always @(*) begin
        nbytes = {NB_W{1'b0}};
        for (i = 0; i < KEEP_W; i = i + 1)
            if (keep[i]) nbytes = i + 1;
    end
endmodule

// Beehive payload {last, nbytes, data} -> AXI4-Stream with tkeep. A frame shorter than
// MIN_FRAME bytes (always a single word here) is zero-padded to MIN_FRAME: the CMAC does not
// pad. Combinational; `first` tracks frame boundaries.
module beehive_nbytes_to_keep #(
    parameter DATA_W    = 512,
    parameter NB_W      = 7,
    parameter MIN_FRAME = 60
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   s_valid,
    output wire                   s_ready,
    input  wire [DATA_W+NB_W:0]   s_payload,
    output wire                   m_tvalid,
    input  wire                   m_tready,
    output wire [DATA_W-1:0]      m_tdata,
    output wire [DATA_W/8-1:0]    m_tkeep,
    output wire                   m_tlast
);
    localparam KEEP_W = DATA_W / 8;

    wire [DATA_W-1:0] data   = s_payload[DATA_W-1:0];
    wire [NB_W-1:0]   nbytes = s_payload[DATA_W +: NB_W];
    wire              last   = s_payload[DATA_W + NB_W];

    reg first = 1'b1;                           // the next word starts a frame
    always @(posedge clk)
        if (rst)                       first <= 1'b1;
        else if (s_valid && s_ready)   first <= last;

    wire short = first && last && (nbytes < MIN_FRAME);

    reg [KEEP_W-1:0] valid_bytes, keep;
    reg [DATA_W-1:0] data_mask;
    integer i;
    always @(*) begin
        for (i = 0; i < KEEP_W; i = i + 1) begin
            valid_bytes[i]          = (i < nbytes);
            keep[i]                 = (i < nbytes) || (short && i < MIN_FRAME);
            data_mask[8*i +: 8]     = {8{valid_bytes[i]}};
        end
    end

    assign m_tvalid = s_valid;
    assign s_ready  = m_tready;
    assign m_tdata  = data & data_mask;         // padding bytes are zero
    assign m_tkeep  = keep;
    assign m_tlast  = last;
endmodule
"""


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
  {rel(project.wrapper_v):<34} board wrapper: clocks, resets, CMAC, CDC FIFOs, tkeep/nbytes
  {rel(project.ip_tcl):<34} CMAC IP configuration (create_ip + CONFIG.*)
  {rel(project.xdc):<34} pins, clocks, bitstream options
  build.tcl                          batch flow
  create_project.tcl                 project-mode flow (GUI)

Clocks
------
  sysclk   {board.sysclk.mhz:g} MHz on {board.sysclk.p}/{board.sysclk.n} ({board.sysclk.comment})
           -> MMCM -> core_clk {board.core_mhz:g} MHz (Beehive),
                      init_clk {board.init_mhz:g} MHz (CMAC)
  refclk   {_mhz(q.refclk.mhz)} MHz on {q.refclk.p}/{q.refclk.n} ({q.refclk.comment})
  mac_clk  322.265625 MHz from the CMAC (gt_txusrclk2); both MAC user interfaces run on it

Data path
---------
  The design's frame port {port.name} ({port.rx} in, {port.tx} out) carries frames without
  preamble and FCS, byte i of the frame in data bits 8i+7..8i, nbytes valid bytes on the last
  word. The wrapper converts nbytes <-> tkeep, pads frames shorter than 60 bytes (the CMAC does
  not), and crosses clock domains with xpm_fifo_axis (TX in packet mode so the CMAC never
  underruns). The {len(project.counters)} counter outputs of the design are left unconnected.

Check before trusting the bitstream
-----------------------------------
  - Timing: reports/timing_summary.rpt must say "All user specified timing constraints are
    met." The core runs at {board.core_mhz:g} MHz.
  - Frames with a bad FCS (rx_axis_tuser) reach the core; it relies on IP/UDP checksums.
{notes}
Pin and site sources
--------------------
{sources}"""


# -------------------------------------------------------------------------------- writing

def write_project(design, board, out_dir, *, progress=print, cache_dir=DEFAULT_CACHE_DIR):
    """Write the Vivado project for ``design`` on ``board`` (a :class:`~.boards.Board` or
    ``"u200"``/``"enzian"``) into ``out_dir``; return a :class:`VivadoProject`.

    The design must be 512 bits wide and have exactly one frame port
    (:class:`VivadoError` otherwise). ``cache_dir`` (``None`` to disable) caches the Verilog
    conversion as ``apiary sim`` does.
    """
    from apiary.sim.core import find_counters, find_ports
    from apiary.top import DesignTop, design_verilog, top_name

    board = get_board(board)
    progress = progress or (lambda msg: None)
    _check_width(design, board)
    t0 = time.monotonic()
    # The hardware top: not apiary.sim.elaborate(), which puts simulation memory models inside.
    # A tile's memory port stays a top-level port, and the wrapper refuses it (below).
    top_obj = DesignTop(design)
    ports, counters = find_ports(top_obj), find_counters(top_obj)
    port = _check_ports(design, ports)
    core = top_name(design)
    top = f"{core}_{board.name}_top"

    progress(f"converting {design.name} to Verilog ({design.width} bits)")
    text = design_verilog(top_obj, cache_dir=os.path.expanduser(cache_dir) if cache_dir else None)
    progress(f"  Verilog ready in {time.monotonic() - t0:.1f} s")
    core_ports = verilog_ports(text, core)

    out_dir = os.path.abspath(out_dir)
    for sub in ("rtl", "ip", "constraints"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    rel = {
        "core_v": f"rtl/{core}.v",
        "wrapper_v": f"rtl/{top}.v",
        "ip_tcl": f"ip/{CMAC_MODULE}.tcl",
        "xdc": f"constraints/{board.name}.xdc",
    }
    contents = {
        "core_v": text,
        "wrapper_v": _wrapper(board, top, core, port, core_ports, counters, design.name),
        "ip_tcl": _ip_tcl(board),
        "xdc": _xdc(board, top),
        "build_tcl": _build_tcl(board, top, rel["core_v"], rel["wrapper_v"], rel["xdc"],
                                rel["ip_tcl"]),
        "create_tcl": _create_tcl(board, top, rel["core_v"], rel["wrapper_v"], rel["xdc"],
                                  rel["ip_tcl"]),
    }
    rel.update(build_tcl="build.tcl", create_tcl="create_project.tcl", readme="README.txt")
    paths = {k: os.path.join(out_dir, v) for k, v in rel.items()}
    project = VivadoProject(
        board=board, out_dir=out_dir, top=top, core_top=core,
        core_v=paths["core_v"], wrapper_v=paths["wrapper_v"], xdc=paths["xdc"],
        ip_tcl=paths["ip_tcl"], create_tcl=paths["create_tcl"], build_tcl=paths["build_tcl"],
        readme=paths["readme"], port=port, counters=list(counters))
    contents["readme"] = _readme(board, project, design.name, port)
    for key in ("core_v", "wrapper_v", "ip_tcl", "xdc", "build_tcl", "create_tcl", "readme"):
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
    tail = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen([exe, "-mode", "batch", "-source", "build.tcl"], cwd=out_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
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
    result = {"returncode": rc, "log": log_path, "seconds": seconds, "bitstream": None,
              "utilization": {}, "timing": {}}
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
