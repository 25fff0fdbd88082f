"""python -m flexdriver.bench: the echo's round trip through the NIC model, FLD and FLD-E is made
of the modelled DMA latencies (it moves with them, cycle for cycle in a fixed pattern), a light
load is answered whole, FLD's memories are counted from the elaborated design, and its area
comes from Yosys."""

import pytest

from flexdriver.bench import echo_run, measure, memories
from flexdriver.fld import FldMap


def round_trip(latency):
    run = echo_run(64, latency=latency, size=64, frames=1, gap=1)
    return run["answered"][0] - run["arrived"][0]


def test_the_round_trip_is_the_dma_latencies_and_flds_own_cycles():
    # Receive descriptor, packet, completion; doorbell, WQE, packet: 6 latencies in series.
    a, b = round_trip(50), round_trip(150)
    assert b - a == 6 * 100
    assert a > 6 * 50


def test_a_light_load_is_answered_whole():
    run = echo_run(64, latency=40, size=200, frames=6, gap=600)
    assert len(run["answered"]) == 6
    assert run["nic_dropped"] == run["fld_dropped"] == run["echo_overflow"] == 0


def test_memories_are_those_the_design_instantiates():
    f = FldMap()
    found = {path: depth * bits for path, depth, bits in memories(512, f)}
    assert found["rx_path.buffer"] == f.buffers * f.buffer_bytes * 8
    assert found["tx_path.buffer"] == f.slots * f.slot_bytes * 8
    assert found["tx_path.pool.pool"] == f.pool_entries * 64           # 8-byte descriptors
    assert sum(v for k, v in found.items() if ".table.bank" in k) > 0   # the cuckoo table


@pytest.mark.slow
def test_the_command_prints_its_tables(capsys):
    assert measure(["--widths", "64", "--sizes", "64", "--frames", "4", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 64 | 64 |" in out and "| total |" in out
    area = out.split("synth_xilinx")[1].splitlines()[4]         # the area's row
    luts = int(area.split("|")[1].replace(",", ""))
    assert 500 < luts < 20_000
