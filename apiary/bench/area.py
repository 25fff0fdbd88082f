"""Area of a design, tile by tile, from Yosys: ``python -m apiary.bench.area DESIGN``.

Each tile's logic is synthesised on its own (without its router), then the design's data-plane
routers as it builds them (each specialised to its routes, or with ``--full-routers`` one full
router, counted once per mesh position); the design's total is the tiles plus the routers.
Xilinx figures come from ``synth_xilinx -family xcup`` (UltraScale+, the Alveo U200's family),
ECP5 figures from ``synth_ecp5``; see :func:`apiary.bench.noc.design_area` for what is
counted. Yosys is not Vivado: it maps one output per LUT (no LUT6_2 packing), so Vivado's counts
for the same logic are usually lower. Slow: about a minute per 512-bit tile.
"""

import argparse
import sys
import time
import warnings

from ..load import add_design_arguments, design_arguments, load_from_args
from ..noc.router import Router
from ..top import router_depths
from .noc import design_area, yosys_version


__all__ = ["tile_areas", "main"]

#: Beehive's Table V (Vivado, Alveo U200): LUTs of its UDP stack and of some of its parts.
BEEHIVE_TABLE_V = {
    "UDP stack (full)": 58540,
    "UDP RX tile (with router)": 10054,
    "UDP TX tile (with router)": 10128,
    "router": 5946,
}


def _rams(cells):
    """Block RAMs: RAMB36 count as 1, RAMB18 as 0.5 (Xilinx); DP16KD as 1 (ECP5)."""
    return sum(v * (0.5 if k.startswith("RAMB18") else 1) for k, v in cells.items()
               if k.startswith(("RAMB36", "RAMB18", "DP16KD")))


def _routers(design):
    """``(label, [Router, ...])``: the data-plane routers ``design`` builds, or one full router
    standing for every position."""
    positions = design.cols * design.rows
    if design.full_routers:
        return (f"{positions} routers, full (one synthesised)",
                [Router(design.width, 1, 1, **router_depths(design, "data"))])
    paths = design.check().router_paths("data")
    depths = router_depths(design, "data")
    return (f"{positions} routers, specialised",
            [Router(design.width, x, y, paths=p, **depths) for (x, y), p in sorted(paths.items())])


def tile_areas(design, target="xilinx", progress=None, only=None):
    """``[(name, class name, {"luts", "lutram", "ffs", "brams"})]`` for every tile of
    ``design``, then ``("routers", label, ...)``: the sum of the design's specialised routers,
    or one full router with ``design.full_routers``. With ``only``, just the tiles it names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # tiles built here are elaborated one by one
        tiles = design.build_tiles()
    if only is not None:
        unknown = sorted(set(only) - set(tiles))
        if unknown:
            raise SystemExit(f"design {design.name!r} has no tile {', '.join(unknown)}")
        tiles = {name: tile for name, tile in tiles.items() if name in only}
    rows = []
    for name, tile in tiles.items():
        start = time.monotonic()
        area = design_area(tile, target)
        area["brams"] = _rams(area["cells"])
        rows.append((name, type(tile).__name__, area))
        if progress:
            progress(f"{name}: {area['luts']} LUTs ({time.monotonic() - start:.0f} s)")
    if only is not None:
        return rows
    label, routers = _routers(design)
    start = time.monotonic()
    total = {"luts": 0, "lutram": 0, "ffs": 0, "brams": 0}
    for router in routers:
        area = design_area(router, target)
        area["brams"] = _rams(area["cells"])
        for k in total:
            total[k] += area[k]
    rows.append(("routers", label, total))
    if progress:
        progress(f"routers: {total['luts']} LUTs ({time.monotonic() - start:.0f} s)")
    return rows


def markdown(design, rows, target, command=None):
    positions = design.cols * design.rows
    command = command or f"python -m apiary.bench.area {design.name} --target {target}"
    lines = [f"Measured by `{command}` (Yosys {yosys_version()}), {design.width}-bit data plane, "
             f"design {design.name!r}:", "",
             "| tile | class | LUTs | LUTs as RAM | FFs | block RAMs |",
             "|---|---|---|---|---|---|"]
    for name, cls, a in rows:
        lines.append(f"| {name} | {cls} | {a['luts']:,} | {a['lutram']:,} | {a['ffs']:,} | "
                     f"{a['brams']:g} |")
    tiles = [a for name, _, a in rows if name != "routers"]
    if rows and rows[-1][0] == "routers":
        routers = rows[-1][2]
        each = positions if design.full_routers else 1
        total = {k: sum(a[k] for a in tiles) + each * routers[k]
                 for k in ("luts", "lutram", "ffs", "brams")}
        lines.append(f"| **total**: tiles + {positions} routers | | **{total['luts']:,}** | "
                     f"{total['lutram']:,} | {total['ffs']:,} | {total['brams']:g} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="apiary bench area",
                                     description=__doc__.splitlines()[0])
    add_design_arguments(parser)
    parser.add_argument("--target", choices=["xilinx", "ecp5"], default="xilinx")
    parser.add_argument("--tiles", metavar="NAME,...", default=None,
                        help="only these tiles (no routers, no design total)")
    args = parser.parse_args(argv)
    # Tiles are built here to be synthesised one by one, never elaborated as a design.
    from amaranth.hdl import UnusedElaboratable
    warnings.filterwarnings("ignore", category=UnusedElaboratable)
    design = load_from_args(args)
    design.check()
    only = args.tiles.split(",") if args.tiles else None
    rows = tile_areas(design, args.target, progress=lambda s: print(s, file=sys.stderr),
                      only=only)
    command = " ".join(["apiary bench area", *design_arguments(args), f"--target {args.target}",
                        *([f"--tiles {args.tiles}"] if args.tiles else [])])
    print(markdown(design, rows, args.target, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
