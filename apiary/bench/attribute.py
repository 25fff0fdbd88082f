"""Where a tile's LUTs go: ``python -m apiary.bench.attribute DESIGN --tile NAME``.

The tile is synthesised as ``apiary bench area`` does it (Yosys ``synth_xilinx -family xcup
-flatten``). Each LUT of the netlist is then counted towards the named state it feeds: the
flip-flops, memories, carry chains and output ports it reaches forward through other LUTs.
A LUT that reaches several of them is split evenly between them. They are grouped by the
first ``--depth`` dotted parts of their names (``out_gate.held``, ``tables.seg3``), so the
table says which registers or outputs the logic exists for.

Flattened synthesis lets constants flow across submodules. So a part whose inputs are partly
constant is not overstated, as it is when each submodule is synthesised on its own (kept
apart, each of the Apiary monitor's four 512-bit mergers came out at 520 LUTs; flattened,
all that feeds the monitor's two flit outputs is 489 and 401). The table sums to the tile's
LUT count.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from typing import Any

from amaranth.back import rtlil

from ..load import add_design_arguments, load_from_args
from .noc import _yosys


__all__ = ["lut_sinks", "main"]

_LUT = re.compile(r"LUT[1-6]")
#: Cells that logic passes through on its way to state: LUTs, carry chains, LUT combiners.
_THROUGH = re.compile(r"LUT[1-6]|CARRY[48]|MUXF[789]|INV")


def _netlist(dut: Any) -> dict:
    """The flattened ``synth_xilinx`` netlist of ``dut`` (Yosys's JSON, module ``top``)."""
    with tempfile.TemporaryDirectory(prefix="apiary_attribute_") as tmp:
        with open(os.path.join(tmp, "top.il"), "w") as f:
            f.write(rtlil.convert(dut, name="top"))
        proc = subprocess.run(
            [_yosys(), "-q", "-l", "yosys.log", "-p",
             "read_rtlil top.il; synth_xilinx -family xcup -flatten -noiopad -top top; "
             "write_json net.json"], cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Yosys failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with open(os.path.join(tmp, "net.json")) as f:
            return json.load(f)["modules"]["top"]


def lut_sinks(dut: Any, depth: int = 2) -> dict[str, float]:
    """LUTs of ``dut``'s flattened netlist by what they feed: ``{"FDRE tables.seg3": 27.1,
    "port noc_out__payload": 489.0, ...}`` (a kind, then the first ``depth`` dotted parts of
    the name), summing to the netlist's LUT count."""
    mod = _netlist(dut)
    names: dict[int, str] = {}
    for name, net in mod["netnames"].items():     # prefer a name of the source's own
        for bit in net["bits"]:
            if isinstance(bit, int) and (bit not in names or names[bit].startswith("$")):
                names[bit] = name
    ports = {bit: name for name, port in mod["ports"].items()
             if port["direction"] == "output" for bit in port["bits"] if isinstance(bit, int)}
    readers = collections.defaultdict(list)
    through: dict[str, list[int]] = {}      # a LUT, carry or combiner: its output bits
    for cell_name, cell in mod["cells"].items():
        for pin, bits in cell["connections"].items():
            if cell["port_directions"].get(pin) == "input":
                for bit in bits:
                    if isinstance(bit, int):
                        readers[bit].append(cell_name)
        if _THROUGH.fullmatch(cell["type"]):
            through[cell_name] = [b for pin, bits in cell["connections"].items()
                                  if cell["port_directions"].get(pin) == "output"
                                  for b in bits if isinstance(b, int)]

    def label(kind: str, name: str) -> str:
        parts = name.lstrip("\\").split(".")       # public names start with a backslash
        return f"{kind} {'.'.join(parts[:depth])}"

    def state(reader: str) -> str:
        """The label of a cell that is not a LUT: its kind and the name of its output."""
        cell = mod["cells"][reader]
        outputs = [b for pin, bits in cell["connections"].items()
                   if cell["port_directions"].get(pin) == "output" for b in bits]
        named = next((names[b] for b in outputs if isinstance(b, int) and b in names
                      and not names[b].startswith("$")), "(unnamed)")
        return label(cell["type"], named)

    memo: dict[str, frozenset] = {}

    def sinks(start: str) -> frozenset:
        """What cell ``start`` feeds, through LUTs, carries and combiners (iteratively: the
        chains can be long)."""
        stack = [start]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            outs = through[top]
            pending = [r for b in outs for r in readers.get(b, ())
                       if r in through and r not in memo and r != top]
            if pending:
                stack += pending
                continue
            found = {label("port", ports[b]) for b in outs if b in ports}
            for b in outs:
                for reader in readers.get(b, ()):
                    if reader == top:
                        continue
                    found |= memo[reader] if reader in through else {state(reader)}
            memo[top] = frozenset(found)
            stack.pop()
        return memo[start]

    total: dict[str, float] = collections.defaultdict(float)
    for cell_name, cell in mod["cells"].items():
        if _LUT.fullmatch(cell["type"]):
            found = sinks(cell_name) or {"(nothing)"}
            for key in found:
                total[key] += 1 / len(found)
    return dict(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apiary.bench.attribute",
                                     description=__doc__.splitlines()[0])
    add_design_arguments(parser)
    parser.add_argument("--tile", required=True, help="the tile to synthesise")
    parser.add_argument("--depth", type=int, default=2,
                        help="dotted parts of a name to group by (default 2)")
    parser.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    args = parser.parse_args(argv)
    from amaranth.hdl import UnusedElaboratable
    warnings.filterwarnings("ignore", category=UnusedElaboratable)
    design = load_from_args(args)
    design.check()
    tiles = design.build_tiles()
    if args.tile not in tiles:
        parser.error(f"design {design.name!r} has no tile {args.tile!r}; it has "
                     f"{', '.join(sorted(tiles))}")
    counts = lut_sinks(tiles[args.tile], args.depth)
    rows = sorted(counts.items(), key=lambda kv: -kv[1])
    print(f"{args.tile} ({type(tiles[args.tile]).__name__}): {round(sum(counts.values())):,} "
          f"LUTs, by what they feed\n")
    print("| LUTs | feeds |")
    print("|---|---|")
    for key, luts in rows[:args.top]:
        print(f"| {luts:,.1f} | {key} |")
    if len(rows) > args.top:
        print(f"| {sum(v for _, v in rows[args.top:]):,.1f} | {len(rows) - args.top} others |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
