"""Per-slot Pblock hints for the Vivado projects: one Pblock per untrusted tile (a *slot*, Coyote's
vFPGA), so that a later Dynamic Function eXchange (partial reconfiguration) flow can make each
slot a reconfigurable partition.

Each untrusted tile gets one clock region of its own, the one under its place on the mesh
(the mesh spread over the die's clock-region grid), or the next free one. The monitors, routers
and everything else stay outside the Pblocks, in the static region. The tile's ports cross into
its monitor through registers when the monitor has ``MonitorConfig(slot_registers=True)``; the
hints say so when a slot's monitor does not.

These are hints: written into the project's XDC, not checked by Vivado here (no Vivado in CI).
"""

from typing import Any


__all__ = ["CLOCK_REGIONS", "slot_regions", "slot_pblocks"]

#: Clock-region grid ``(columns, rows)`` of each board's part: the U200's XCU200 and Enzian's
#: XCVU9P share the VU9P die, X0..X5, Y0..Y14 (three SLRs of five rows).
CLOCK_REGIONS = {"u200": (6, 15), "enzian": (6, 15)}


def slot_regions(design: Any, board: str) -> dict[str, tuple[int, int]]:
    """``{tile: (x, y)}``: the clock region of each untrusted tile of ``design``, all distinct.

    Raises
    ------
    ValueError
        If the board's grid is unknown, or has fewer clock regions than the design has slots.
    """
    if board not in CLOCK_REGIONS:
        raise ValueError(f"no clock-region grid for board {board!r} (have "
                         f"{sorted(CLOCK_REGIONS)})")
    cols, rows = CLOCK_REGIONS[board]
    slots = design.untrusted()
    if len(slots) > cols * rows:
        raise ValueError(f"design {design.name!r} has {len(slots)} slots; the {board} has "
                         f"{cols * rows} clock regions, one per slot at most")
    taken: set[tuple[int, int]] = set()
    out = {}
    for name in slots:
        x, y = design.tiles[name].at
        want = (min(cols - 1, x * cols // design.cols), min(rows - 1, y * rows // design.rows))
        order = sorted(((cx, cy) for cx in range(cols) for cy in range(rows)),
                       key=lambda r: (abs(r[0] - want[0]) + abs(r[1] - want[1]), r))
        region = next(r for r in order if r not in taken)
        taken.add(region)
        out[name] = region
    return out


def slot_pblocks(design: Any, board: str, monitor_config: Any = None) -> str:
    """XDC lines: a Pblock per untrusted tile of ``design`` (empty without any). ``monitor_config``
    is a callable ``tile -> MonitorConfig`` (a kernel's ``config_of``) to say which slots
    lack boundary registers."""
    if not design.untrusted():
        return ""
    regions = slot_regions(design, board)
    lines = ["", "# Slots: one Pblock per untrusted tile (platforms/vivado/slots.py), hints for a",
             "# later partial-reconfiguration (DFX) flow; the monitors stay in the static region."]
    for name, (cx, cy) in regions.items():
        block = f"slot_{name}"
        lines += [f"create_pblock {block}",
                  f"add_cells_to_pblock [get_pblocks {block}] [get_cells -hierarchical {name}]",
                  f"resize_pblock [get_pblocks {block}] -add "
                  f"{{CLOCKREGION_X{cx}Y{cy}:CLOCKREGION_X{cx}Y{cy}}}",
                  f"set_property SNAPPING_MODE ON [get_pblocks {block}]",
                  f"# for DFX: set_property HD.RECONFIGURABLE true "
                  f"[get_cells -hierarchical {name}]"]
        if monitor_config is not None and not monitor_config(name).slot_registers:
            lines.append(f"# {name}: its monitor has no slot registers "
                         f"(MonitorConfig(slot_registers=True) adds them)")
    return "\n".join(lines) + "\n"
