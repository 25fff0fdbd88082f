"""The control plane's costs: ``apiary bench control [--area]``.

Cycle counts come from Amaranth's simulator, exact: a controller
(:class:`~apiary.tiles.ControlPortTile`) at (0, 0) reads a word from the control agent of a tile
``h`` hops east on a 64-bit control plane, and the count runs from the cycle the request's first
flit enters the control NoC to the cycle the answer's last flit leaves it; a write is the same
trip. With ``--area``, Yosys ``synth_xilinx`` of one control agent (serving 8 32-bit counters
and one 16-entry, 128-bit table: a NAT-sized map) and of one 64-bit control-plane router.
"""

import argparse
import sys
import warnings
from typing import Any

from ..control.addrmap import TileMap
from ..control.agent import ControlAgent
from ..control.messages import CtlMeta, CtlMsgType, ctl_message_flits
from ..design import Design
from ..noc.router import Router
from ..sim import open_sim
from ..stream.counters import CounterSignature
from ..stream.registers import RegisterSignature, Table
from ..tiles import ControlPortTile, ForwardTile
from ..tiles.raw_port import message_frame


__all__ = ["round_trip", "areas", "markdown", "main"]


def round_trip(hops: int, write: bool = False) -> int:
    """Cycles from a request's first flit entering the control NoC to its answer's last flit
    leaving it, for an agent ``hops`` positions east of the controller."""
    d = Design("ctl_trip", cols=hops + 1, rows=1, width=64)
    d.add("ctl", ControlPortTile, at=(0, 0))
    d.add("far", ForwardTile, at=(hops, 0))
    kind = CtlMsgType.CTL_WRITE if write else CtlMsgType.CTL_READ
    flits = ctl_message_flits(64, kind, CtlMeta(addr=0, tag=1), dst=(hops, 0))
    with warnings.catch_warnings(), open_sim(d, "pysim") as sim:
        warnings.simplefilter("ignore")
        sim.run(10)
        sim.send(message_frame(flits, 64))
        sim.run(until_idle=True)
        request, = sim.sent()
        answer, = sim.received()
    return answer.cycle_last - request.cycle_first


def areas() -> dict[str, dict]:
    from .noc import design_area
    counters = CounterSignature({f"c{i}": f"counter {i}" for i in range(8)})
    registers = RegisterSignature({"rules": Table(16, 128, "a NAT-sized table")})
    tmap = TileMap.build("t", 1, 0, [("", counters)], registers)
    return {
        "control agent (8 counters, a 16 × 128-bit table)":
            design_area(ControlAgent(64, tmap, [("", counters)], registers)),
        "control-plane router (64 bits)": design_area(Router(64, 1, 1)),
    }


def markdown(trips: dict[int, tuple[int, int]], area: dict | None) -> str:
    lines = ["| what | cycles / area |", "|---|---:|"]
    for hops, (read, write) in trips.items():
        lines.append(f"| read a word {hops} hop{'s' if hops != 1 else ''} away: request in → "
                     f"answer out | {read} |")
        lines.append(f"| write a word {hops} hop{'s' if hops != 1 else ''} away | {write} |")
    for name, a in (area or {}).items():
        lines.append(f"| {name}: LUTs / LUTRAM / FFs (Yosys `synth_xilinx`) | "
                     f"{a['luts']:,} / {a['lutram']:,} / {a['ffs']:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apiary bench control",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--hops", default="1,4", metavar="H,H",
                        help="distances to measure a round trip at (default 1,4)")
    parser.add_argument("--area", action="store_true", help="also synthesise (Yosys, slow)")
    args = parser.parse_args(argv)
    try:
        hops = [int(h) for h in args.hops.split(",")]
    except ValueError:
        parser.error(f"--hops takes comma-separated hop counts, not {args.hops!r}")
    if any(not 1 <= h <= 254 for h in hops):
        parser.error("--hops: each distance is 1 to 254 hops")
    trips: dict[int, Any] = {h: (round_trip(h), round_trip(h, write=True)) for h in hops}
    area = areas() if args.area else None
    command = "apiary bench control" + (" --area" if args.area else "")
    print(f"Produced by `{command}` (Amaranth's simulator; areas from Yosys).\n")
    print(markdown(trips, area))
    return 0


if __name__ == "__main__":
    sys.exit(main())
