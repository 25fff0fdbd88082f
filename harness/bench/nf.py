"""The network-function tiles' costs: ``apiary bench nf [--widths 64,512] [--area]``.

Cycles come from Amaranth's simulator, exact (:func:`beehive.nf.cost.nf_costs`: each tile alone,
back-to-back UDP datagrams with 64-byte payloads, output always ready); with ``--area``, Yosys
``synth_xilinx`` of each tile with its default 16-entry table.
"""

import argparse
import contextlib
import gc
import io
import sys
import warnings
from typing import Any

from apiary.bench.noc import design_area
from apiary.tile import TileEnv

from beehive.nf.cost import nf_costs
from beehive.nf import IpipDecapTile, IpipEncapTile, NatTile, VxlanDecapTile, VxlanEncapTile


__all__ = ["areas", "markdown", "main"]

_TILES = {"NatTile": NatTile, "IpipEncapTile": IpipEncapTile, "IpipDecapTile": IpipDecapTile,
          "VxlanEncapTile": VxlanEncapTile, "VxlanDecapTile": VxlanDecapTile}


def areas(width: int) -> dict[str, dict]:
    """Yosys area of each tile at ``width`` bits (default parameters, 16 entries)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, cls in _TILES.items():
            out[name] = design_area(cls(TileEnv(width=width, x=1, y=0)))
    return out


def markdown(rows: list[dict], area: dict[int, dict] | None) -> str:
    widths = sorted({r["width"] for r in rows})
    head = " | ".join(f"latency / cycles per packet, {w} bits" for w in widths)
    lines = [f"| tile | bytes in | {head} |" + ("".join(
        f" LUTs / LUTRAM / FFs, {w} bits |" for w in sorted(area)) if area else ""),
        "|---|---:|" + "---:|" * len(widths) + ("---:|" * len(area) if area else "")]
    for tile in dict.fromkeys(r["tile"] for r in rows):
        cells = {r["width"]: r for r in rows if r["tile"] == tile}
        line = f"| {tile} | {cells[widths[0]]['bytes']} | " + " | ".join(
            f"{cells[w]['latency']} / {cells[w]['cycles_per_packet']:g}" for w in widths) + " |"
        for _, by_tile in sorted((area or {}).items()):
            a = by_tile[tile.split(' ')[0]]
            line += f" {a['luts']:,} / {a['lutram']:,} / {a['ffs']:,} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apiary bench nf", description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,512", metavar="W,W",
                        help="data-plane widths (default 64,512)")
    parser.add_argument("--area", action="store_true", help="also synthesise (Yosys, slow)")
    args = parser.parse_args(argv)
    try:
        widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        parser.error(f"--widths takes comma-separated widths, not {args.widths!r}")
    rows = nf_costs(tuple(widths))
    with contextlib.redirect_stderr(io.StringIO()):
        gc.collect()        # the simulators' finished background testbenches, quietly
    area: Any = {w: areas(w) for w in widths} if args.area else None
    command = "apiary bench nf" + (" --area" if args.area else "")
    print(f"Produced by `{command}` (Amaranth's simulator; areas from Yosys).\n")
    print(markdown(rows, area))
    return 0


if __name__ == "__main__":
    sys.exit(main())
