"""Area against slot count (Coyote's Table 1): ``apiary bench slots``.

For N = 1, 2, 4 (``--slots``) identical untrusted application tiles (slots) behind monitors,
with the kernel's memory manager, error manager and one memory tile, it synthesises (Yosys
``synth_xilinx -family xcup``, the project's :func:`~apiary.bench.noc.design_area`, at
``--width`` 512 bits) every part of the design that is not the application: the kernel's tiles,
each slot's monitor and every data-plane router as the design builds it (specialised to its
routes), one by one, and adds them up. Identical netlists are synthesised once. A least-squares
line through the totals gives Coyote's shape: a base cost plus a cost per extra slot.

Layout, for N slots: three rows; the slots fill columns from the left, top to bottom, and the
kernel (manager, error manager, memory) is the last column::

    (0,0) slot0  (1,0) slot3  ...  (C,0) mm
    (0,1) slot1  (1,1) slot4  ...  (C,1) errors
    (0,2) slot2  ...               (C,2) mem0

Slow: about a minute per 512-bit part on one core; N = 1, 2, 4 is some 30 parts.
"""

import argparse
import hashlib
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from amaranth.back import rtlil

from ..design import Design
from ..os.kernel import Kernel
from ..os.monitor import MonitorConfig
from ..tiles.raw_port import RawPortTile
from .area import _rams, _routers
from .noc import design_area, yosys_version


__all__ = ["slot_design", "slot_areas", "fit", "markdown", "main", "VU9P", "COYOTE_TABLE_1"]

#: The VU9P (Coyote's VCU118; the Alveo U200 has the same die): LUTs, FFs, BRAM36.
VU9P = {"luts": 1_182_240, "ffs": 2_364_480, "brams": 2_160}

#: Coyote's Table 1 without the network and memory stacks: vFPGAs → (LUT %, BRAM %, FF %).
COYOTE_TABLE_1 = {1: (4, 4, 2), 2: (5, 5, 3), 4: (6, 7, 4)}

KEYS = ("luts", "ffs", "brams")


def slot_design(slots: int, width: int = 512, monitor: MonitorConfig | None = None) -> Design:
    """The design of ``slots`` untrusted tiles behind monitors (see the module docstring), each
    allowed to send to the next, the last to the first. The slots are
    :class:`~apiary.tiles.raw_port.RawPortTile` placeholders (not synthesised: not the shell)."""
    if not isinstance(slots, int) or not 1 <= slots <= 16:
        raise ValueError(f"slots must be 1 to 16, not {slots!r}")
    cols = -(-slots // 3) + 1
    d = Design(f"slots{slots}", cols=cols, rows=3, width=width)
    Kernel(d, manager=(cols - 1, 0), errors=(cols - 1, 1),
           memories={"mem0": ((cols - 1, 2), 1 << 16)}, monitor=monitor)
    names = [f"slot{i}" for i in range(slots)]
    for i, name in enumerate(names):
        d.add(name, RawPortTile, at=(i // 3, i % 3), trusted=False)
    for i, name in enumerate(names):
        if slots > 1:
            d.route(name, names[(i + 1) % slots], allow=True)
    return d


def _key(dut: Any) -> str:
    return hashlib.sha256(rtlil.convert(dut, name="top").encode()).hexdigest()


def slot_areas(slots: int, width: int = 512, *, cache: dict | None = None,
               progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """``{part: {"luts", "ffs", "brams"}}`` of the shell of the ``slots``-slot design: the
    kernel's tiles, the monitors and the routers (not the slots' own logic)."""
    cache = {} if cache is None else cache
    design = slot_design(slots, width)
    design.check()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tiles = design.build_tiles()
    kernel = design.guard
    parts: list[tuple[str, Any]] = [(name, tiles[name]) for name in kernel.kernel_tiles()]
    parts += [(f"{name} monitor", kernel.monitor(design, name, design.env(name)))
              for name in design.untrusted()]
    _, routers = _routers(design)
    parts += [(f"router ({r._x}, {r._y})" if hasattr(r, "_x") else f"router {i}", r)
              for i, r in enumerate(routers)]
    out = {}
    for name, dut in parts:
        key = _key(dut)
        if key not in cache:
            area = design_area(dut, "xilinx")
            cache[key] = {"luts": area["luts"], "ffs": area["ffs"],
                          "brams": _rams(area["cells"])}
            if progress:
                progress(f"{slots} slots: {name}: {cache[key]['luts']:,} LUTs")
        out[name] = cache[key]
    return out


def fit(totals: dict[int, dict]) -> dict[str, tuple[float, float]]:
    """``{key: (base, per_slot)}``: the least-squares line ``base + per_slot * N`` through the
    totals (``{N: {"luts", "ffs", "brams"}}``)."""
    ns = sorted(totals)
    if len(ns) < 2:
        raise ValueError("a base and a per-slot cost need totals for at least two slot counts")
    mean_n = sum(ns) / len(ns)
    out = {}
    for k in KEYS:
        ys = [totals[n][k] for n in ns]
        mean_y = sum(ys) / len(ys)
        slope = (sum((n - mean_n) * (y - mean_y) for n, y in zip(ns, ys))
                 / sum((n - mean_n) ** 2 for n in ns))
        out[k] = (mean_y - slope * mean_n, slope)
    return out


def markdown(totals: dict[int, dict], width: int, command: str) -> str:
    line = fit(totals)

    def pct(value: float, k: str) -> str:
        return f"{100 * value / VU9P[k]:.2f} %"

    lines = [f"Measured by `{command}` (Yosys {yosys_version()} `synth_xilinx -family xcup`, "
             f"{width}-bit data plane; the kernel's tiles, the monitors and the routers, not the "
             f"slots' own logic; % of a VU9P, the U200's and Coyote's VCU118's die):", "",
             "| slots | LUTs | FFs | BRAM36 | LUTs % | FFs % | BRAM % | Coyote (no stacks): "
             "LUT / BRAM / FF % |", "|---|---|---|---|---|---|---|---|"]
    for n in sorted(totals):
        t = totals[n]
        coyote = COYOTE_TABLE_1.get(n)
        ref = " / ".join(f"{v} %" for v in coyote) if coyote else "—"
        lines.append(f"| {n} | {t['luts']:,} | {t['ffs']:,} | {t['brams']:g} | "
                     f"{pct(t['luts'], 'luts')} | {pct(t['ffs'], 'ffs')} | "
                     f"{pct(t['brams'], 'brams')} | {ref} |")
    base = " / ".join(f"{line[k][0]:,.0f} {k}" for k in KEYS)
    per = " / ".join(f"{line[k][1]:,.0f} {k}" for k in KEYS)
    lines += ["", f"Base: {base} ({pct(line['luts'][0], 'luts')} of the LUTs); per extra slot: "
                  f"{per} ({pct(line['luts'][1], 'luts')} of the LUTs). Coyote: a base of "
                  f"2-4 %, \"< 1% for each additional vFPGA\"."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apiary bench slots",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--slots", default="1,2,4", metavar="N,N",
                        help="slot counts (default 1,2,4)")
    parser.add_argument("--width", type=int, default=512, help="data-plane width (512)")
    args = parser.parse_args(argv)
    try:
        counts = [int(n) for n in args.slots.split(",")]
    except ValueError:
        parser.error(f"--slots takes comma-separated slot counts, not {args.slots!r}")
    if len(counts) < 2:
        parser.error("--slots needs at least two slot counts (a base and a per-slot cost)")
    from amaranth.hdl import UnusedElaboratable
    warnings.filterwarnings("ignore", category=UnusedElaboratable)
    cache: dict = {}
    totals = {}
    for n in counts:
        parts = slot_areas(n, args.width, cache=cache,
                           progress=lambda s: print(s, file=sys.stderr, flush=True))
        totals[n] = {k: sum(p[k] for p in parts.values()) for k in KEYS}
        print(f"{n} slots: {totals[n]}", file=sys.stderr, flush=True)
    command = f"apiary bench slots --slots {args.slots} --width {args.width}"
    print(markdown(totals, args.width, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
