"""python -m flexdriver.bench: the echo's round trip through the NIC model, FLD and FLD-E is made
of the modelled DMA latencies (it moves with them, cycle for cycle in a fixed pattern), a light
load is answered whole, FLD's memories are counted from the elaborated design, and its area
comes from Yosys."""

import pytest

from apiary.stream.sizing import LinkSizing, flexdriver_memory
from flexdriver.bench import echo_run, measure, memories, table_3_rows
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
    assert found["tx_path.buffer"] == f.pages * f.page_bytes * 8
    assert found["tx_path.pool.pool"] == f.pool_entries * 64           # 8-byte descriptors
    assert sum(v for k, v in found.items() if ".table.bank" in k) > 0   # the cuckoo table


def test_at_table_2a_fld_holds_what_table_3_says_within_5_percent():
    """FLD built at Table 2a's parameters: 512 queues, rings and a pool of 2,048, 2,442 pages of
    256 bytes (2 × 305 KiB), 4 striding buffers of 32 KiB; its memories, counted from the
    elaborated design, within 5 % of Table 3's 832.7 KiB, row by row where the design is the
    paper's."""
    f = FldMap.sized()
    assert (f.queues, f.pool_entries, f.ring_entries, f.pages, f.buffers) == \
        (512, 2048, 2048, 2442, 4)
    rows = table_3_rows(memories(512, f))
    paper = flexdriver_memory()
    assert abs(rows["total"] - paper["total"]) / paper["total"] < 0.05
    assert rows["other"] == 0                               # every memory in a row
    assert rows["tx_buffers"] >= 2 * LinkSizing().tx_bdp      # the pages hold 2 BDPs
    # (the pool's free list, 2.75 KiB, is not in the paper's row)
    assert abs(rows["tx_rings"] - paper["tx_rings"]) / paper["tx_rings"] < 0.15
    assert abs(rows["rx_buffers"] - paper["rx_buffers"]) / paper["rx_buffers"] < 0.05


def test_fld_at_table_2a_echoes():
    """The same map runs: frames of 1,500 bytes at 100 Gb/s through FLD at 512 bits, every
    one answered, each on its own send queue of the 512."""
    run = echo_run(512, latency=125, size=1500, frames=8, gap=30, fld_map=FldMap.sized())
    assert len(run["answered"]) == 8 and run["queues"] == 8
    assert run["nic_dropped"] == run["fld_dropped"] == run["echo_overflow"] == 0


@pytest.mark.slow
def test_the_command_prints_its_tables(capsys):
    assert measure(["--widths", "64", "--sizes", "64", "--queues", "2", "--frames", "4",
                    "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 64 | 2 | 2 | 64 |" in out and "| total |" in out
    assert "Table 2a" in out and "400 Gb/s" in out
    small, table_2a = out.split("synth_xilinx")[1].splitlines()[4:6]     # the area's rows
    luts = [int(row.split("|")[2].replace(",", "")) for row in (small, table_2a)]
    assert 500 < luts[0] < luts[1] < 60_000
