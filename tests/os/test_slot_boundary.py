"""Slot boundaries (Coyote's partition pins): with ``MonitorConfig(slot_registers=True)`` no
combinational path crosses the boundary between an untrusted tile (a slot) and its monitor.

Structural check, by simulation: while real traffic flows both ways, every cycle the signals the
tile drives (``tile_out.valid``/``payload``, ``tile_in.ready``) are set to random values and
back; no output of the monitor (towards the tile or the NoC) may change within the cycle. The
same check finds the combinational paths of the default monitor (a negative control). Traffic
still arrives whole and in order, 1 cycle later each way. The U200 project's XDC gets a Pblock
per slot, each in a clock region of its own.
"""

import random
import sys
from pathlib import Path

import pytest

from apiary.noc.header import Fbits
from apiary.os.monitor import Monitor, MonitorConfig
from apiary.stream.testbench import simulate
from apiary.tile import TileEnv

sys.path.insert(0, str(Path(__file__).parent))
from monitor_bench import ERRORS, MANAGER, MEMORY, PEER, SOURCE, TILE, ipc_message  # noqa: E402


def probe(width, config, messages=8, seed=1):
    """Drive allowed traffic both ways through a monitor, perturbing the tile's inputs every
    cycle; return ``(cycles on which an output moved, flits out to the NoC, flits out to the
    tile)``."""
    rng = random.Random(seed)
    env = TileEnv(width=width, x=TILE[0], y=TILE[1])
    dut = Monitor(env, config, ipc_out=[(*PEER, None)], ipc_in=[(*SOURCE, Fbits.LOCAL0)],
                  kernel=[MANAGER, ERRORS, MEMORY], manager=MANAGER, errors=ERRORS)
    from_tile = [f for k in range(messages) for f in ipc_message(width, PEER, bytes([k]) * 40)]
    from_noc = [f for k in range(messages)
                for f in ipc_message(width, TILE, bytes([k]) * 30, src=SOURCE)]
    sent = {"noc": list(from_tile), "tile": list(from_noc)}
    got = {"noc": [], "tile": []}
    moved = []
    outputs = [dut.tile_in.valid, dut.tile_in.payload, dut.tile_out.ready, dut.tile_reset,
               dut.noc_out.valid, dut.noc_out.payload, dut.noc_in.ready]

    def flit(queue):
        return {"data": queue[0][0], "last": queue[0][1]} if queue else {"data": 0, "last": 0}

    async def tb(ctx):
        for cycle in range(600):
            real = [(dut.tile_out.valid, int(bool(from_tile))),
                    (dut.tile_out.payload, flit(from_tile)),
                    (dut.tile_in.ready, int(rng.random() < 0.7)),
                    (dut.noc_in.valid, int(bool(from_noc))),
                    (dut.noc_in.payload, flit(from_noc)),
                    (dut.noc_out.ready, int(rng.random() < 0.7))]
            for sig, value in real:
                ctx.set(sig, value)
            before = [ctx.get(o) for o in outputs]
            for sig, value in real[:3]:             # the tile's inputs, anything else
                ctx.set(sig, {"data": rng.getrandbits(width), "last": rng.getrandbits(1)}
                        if sig is dut.tile_out.payload else 1 - value)
            if [ctx.get(o) for o in outputs] != before:
                moved.append(cycle)
            for sig, value in real[:3]:
                ctx.set(sig, value)
            if ctx.get(dut.tile_out.valid) and ctx.get(dut.tile_out.ready):
                from_tile.pop(0)
            if ctx.get(dut.noc_in.valid) and ctx.get(dut.noc_in.ready):
                from_noc.pop(0)
            for side, port in (("noc", dut.noc_out), ("tile", dut.tile_in)):
                if ctx.get(port.valid) and ctx.get(port.ready):
                    p = ctx.get(port.payload)
                    got[side].append((p.data, p.last))
            await ctx.tick()

    simulate(dut, tb, timeout=2000)
    return moved, got, sent


@pytest.mark.parametrize("width", [64, 512])
def test_no_combinational_path_crosses_a_registered_slot_boundary(width):
    moved, got, sent = probe(width, MonitorConfig(slot_registers=True))
    assert moved == []
    assert got == sent                      # everything through, whole and in order


@pytest.mark.parametrize("width", [64, 512])
def test_the_check_finds_the_default_monitors_combinational_paths(width):
    moved, got, sent = probe(width, MonitorConfig())
    assert moved                            # the default monitor passes heads through
    assert got == sent


def test_u200_project_gets_a_pblock_per_slot():
    from apiary.bench.slots import slot_design
    from platforms.vivado.slots import slot_pblocks, slot_regions
    design = slot_design(4, 512, MonitorConfig(slot_registers=True))
    regions = slot_regions(design, "u200")
    assert list(regions) == ["slot0", "slot1", "slot2", "slot3"]
    assert len(set(regions.values())) == 4
    xdc = slot_pblocks(design, "u200", design.guard.config_of)
    for name, (cx, cy) in regions.items():
        assert f"create_pblock slot_{name}\n" in xdc
        assert (f"add_cells_to_pblock [get_pblocks slot_{name}] "
                f"[get_cells -hierarchical {name}]") in xdc
        assert f"{{CLOCKREGION_X{cx}Y{cy}:CLOCKREGION_X{cx}Y{cy}}}" in xdc
    assert "slot_mm" not in xdc and "no slot registers" not in xdc
    unregistered = slot_pblocks(slot_design(1, 512), "u200", design.guard.config_of)
    assert "slot_slot0" in unregistered
    with pytest.raises(ValueError, match="no clock-region grid"):
        slot_regions(design, "versa_ecp5")
