"""Yosys synthesis scripts shared by the area benchmarks and the board flows.

ECP5: Yosys's ``synth_ecp5`` maps LUTs with ``abc9``, which in the WebAssembly Yosys from PyPI is
very slow on large netlists (a UDP echo SoC stayed in ``abc9`` for over an hour; one 64-bit UDP RX
tile takes 45 s). :func:`ecp5_synth` runs ``synth_ecp5`` up to LUT mapping, maps LUTs with
classic ``abc -lut 4``, then finishes ``synth_ecp5``. On that UDP RX tile: 12 s instead of 92 s,
and 1,335 LUT4s instead of 1,347. ``abc`` does not see the delays of carry chains and RAMs as
``abc9`` does, so Fmax may be somewhat lower.
"""

__all__ = ["ecp5_synth"]


def ecp5_synth(top, options=""):
    """Yosys commands (one string) that synthesise module ``top`` for ECP5 with ``options``
    (e.g. ``"-flatten -noiopad"``, ``"-json out.json"``)."""
    return (f"synth_ecp5 {options} -top {top} -run :map_luts; "
            "techmap -map +/lattice/latches_map.v; "
            "abc -lut 4 -dress; clean; "
            f"synth_ecp5 {options} -top {top} -run map_cells:")
