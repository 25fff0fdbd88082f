"""What a build reports: resources, Fmax per clock, step times; as JSON and as Markdown."""

import json
import os
import re
from dataclasses import dataclass, field, asdict

from apiary.synth import ECP5_CELLS


__all__ = ["BuildReport", "CELL_NAMES", "ecp5_resources", "ice40_resources", "nextpnr_clocks"]

#: nextpnr cell types → the names a user knows them by.
_ECP5_CELLS = {**ECP5_CELLS, "TRELLIS_IO": "I/O pins", "EHXPLLL": "PLLs"}
_ICE40_CELLS = {"ICESTORM_LC": "logic cells (LUT4+FF)", "ICESTORM_RAM": "block RAMs",
                "ICESTORM_DSP": "DSPs", "SB_IO": "I/O pins", "ICESTORM_PLL": "PLLs"}
CELL_NAMES = {**_ECP5_CELLS, **_ICE40_CELLS}


@dataclass
class BuildReport:
    design: str
    platform: str
    flow: str
    device: str
    width: int
    out_dir: str
    parts: list = field(default_factory=list)
    resources: dict = field(default_factory=dict)   # name -> {"used", "available"}
    clocks: dict = field(default_factory=dict)      # net -> {"fmax_mhz", "target_mhz", "met"}
    times: dict = field(default_factory=dict)       # step -> seconds
    bitstream: str | None = None
    project: str | None = None                      # Vivado flows: the project directory
    notes: list = field(default_factory=list)
    seed: int | None = None                         # the place-and-route seed kept
    seeds: dict = field(default_factory=dict)       # with --seeds: seed -> clocks, every seed
    wns_ns: float | None = None                     # Vivado: worst negative slack

    def spread(self):
        """With several seeds: ``{clock: (lowest Fmax, highest Fmax)}`` over the seeds."""
        fmax: dict[str, list[float]] = {}
        for clocks in self.seeds.values():
            for net, c in clocks.items():
                fmax.setdefault(net, []).append(c["fmax_mhz"])
        return {net: (min(v), max(v)) for net, v in fmax.items()}

    def timing_failures(self):
        """One line per clock that missed its target (net, Fmax reached, target), and Vivado's
        worst negative slack if below zero; empty when timing was met."""
        lines = [f"{net}: {c['fmax_mhz']:.2f} MHz reached, target {c['target_mhz']:.2f} MHz"
                 for net, c in self.clocks.items() if not c["met"]]
        if self.wns_ns is not None and self.wns_ns < 0:
            lines.append(f"worst negative slack {self.wns_ns:+.3f} ns (Vivado)")
        return lines

    def markdown(self):
        lines = [f"# {self.design} on {self.platform}", "",
                 f"- device: `{self.device}`, flow: {self.flow}, NoC width {self.width} bits"]
        lines += [f"- {p}" for p in self.parts]
        if self.bitstream:
            lines.append(f"- bitstream: `{os.path.relpath(self.bitstream, self.out_dir)}`")
        if self.project:
            lines.append(f"- project: `{self.project}`")
        if self.seed is not None:
            lines.append(f"- place-and-route seed {self.seed}")
        lines += [f"- {n}" for n in self.notes]
        if self.resources:
            lines += ["", "| resource | used | available | % |", "|---|---:|---:|---:|"]
            for name, r in self.resources.items():
                pct = f"{100 * r['used'] / r['available']:.1f}" if r["available"] else "-"
                lines.append(f"| {name} | {r['used']:,} | {r['available']:,} | {pct} |")
        if self.clocks:
            lines += ["", "| clock | Fmax (MHz) | target (MHz) | met |", "|---|---:|---:|---|"]
            for net, c in self.clocks.items():
                target = f"{c['target_mhz']:.2f}" if c["target_mhz"] else "-"
                lines.append(f"| {net} | {c['fmax_mhz']:.2f} | {target} | "
                             f"{'yes' if c['met'] else 'NO'} |")
        if len(self.seeds) > 1:
            nets = list(self.clocks)
            lines += ["", f"Seeds tried: {len(self.seeds)}, seed {self.seed} kept (the best worst "
                      f"clock). Fmax (MHz) per seed:", "",
                      "| seed | " + " | ".join(nets) + " | all met |",
                      "|---:|" + "---:|" * len(nets) + "---|"]
            for seed, clocks in self.seeds.items():
                fmax = [f"{clocks[n]['fmax_mhz']:.2f}" if n in clocks else "-" for n in nets]
                met = all(c["met"] for c in clocks.values())
                lines.append(f"| {seed} | " + " | ".join(fmax) + f" | {'yes' if met else 'NO'} |")
            lines += ["", "Spread: " + "; ".join(f"{lo:.2f}-{hi:.2f} MHz on {net}"
                                                 for net, (lo, hi) in self.spread().items())]
        if self.times:
            lines += ["", "| step | seconds |", "|---|---:|"]
            lines += [f"| {k} | {v:.1f} |" for k, v in self.times.items()]
            lines.append(f"| total | {sum(self.times.values()):.1f} |")
        return "\n".join(lines) + "\n"

    def write(self):
        with open(os.path.join(self.out_dir, "report.json"), "w") as f:
            json.dump(asdict(self), f, indent=2)
        with open(os.path.join(self.out_dir, "report.md"), "w") as f:
            f.write(self.markdown())


def _resources(pnr, names):
    util = pnr.get("utilization", {})
    return {label: {"used": util[cell]["used"], "available": util[cell]["available"]}
            for cell, label in names.items() if cell in util}


def ecp5_resources(pnr):
    """Utilisation from a nextpnr-ecp5 ``--report`` JSON."""
    return _resources(pnr, _ECP5_CELLS)


def ice40_resources(pnr):
    """Utilisation from a nextpnr-ice40 ``--report`` JSON."""
    return _resources(pnr, _ICE40_CELLS)


def nextpnr_clocks(pnr):
    """``{clock net: {"fmax_mhz", "target_mhz", "met"}}`` from a nextpnr ``--report`` JSON."""
    clocks = {}
    for net, c in sorted(pnr.get("fmax", {}).items()):
        target = c.get("constraint")
        net = re.sub(r"^\$glbnet\$|\$TRELLIS_IO_IN$|\$SB_IO_IN$", "", net)
        clocks[net] = {"fmax_mhz": c["achieved"], "target_mhz": target,
                       "met": target is None or c["achieved"] >= target}
    return clocks
