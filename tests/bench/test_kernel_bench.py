"""``apiary bench kernel``: the monitor's added latency and the allocator's, as the benchmark
measures them (the figures docs/performance.md quotes)."""

import subprocess
import sys

import pytest

from apiary.bench.kernel import alloc_latency, markdown, monitor_latency


@pytest.mark.parametrize("width", [64, 512])
def test_monitor_adds_nothing_at_512_and_its_head_below(width):
    lat = monitor_latency(width, count=8)
    if width == 512:
        # Header and metadata share one flit: the check is combinational, the stream unbroken.
        assert (lat["ipc"], lat["store"]) == (0, 0)
        assert lat["ipc_stream"] == lat["wire_stream"] == 2
    else:
        # The head is held while it is checked: 2 header flits (IPC), + 2 metadata (a store).
        assert (lat["ipc"], lat["store"]) == (2, 4)
        assert lat["ipc_stream"] > lat["wire_stream"]


@pytest.mark.parametrize("width", [64, 512])
def test_allocation_takes_at_most_16_cycles(width):
    # A free delays an allocation right behind it (next cycle at 512 bits, 5 flits later at
    # 64) by the coalescing still under way.
    assert alloc_latency(width) == {"worst": 16, "free_block": 4, "one_split": 5,
                                    "free": 1 if width == 64 else 5}


def test_table_and_command():
    lat = {512: monitor_latency(512, count=4)}
    alloc = {512: alloc_latency(512)}
    table = markdown([512], lat, alloc, None)
    assert "| allocate, a free block of the size | 4 |" in table
    out = subprocess.run([sys.executable, "-m", "apiary.cli", "bench", "kernel", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "--area" in out.stdout
