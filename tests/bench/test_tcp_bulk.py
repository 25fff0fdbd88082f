"""The bulk echo's configuration (``examples/tcp_echo.py``'s ``bulk=True``) and how the TCP
benchmark sizes its bulk transfers from a design (:func:`harness.bench.tcp.bulk_window`): the
peer keeps in flight what the design can hold, and the echo sits where the engine's messages to
it wait in no router in front of the stores."""

import pathlib
import sys

from apiary.layout import xy_path
from apiary.os.memory_tile import MemoryTile
from harness.bench.tcp import bulk_window, render_tcp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tcp"))
from test_tcp_engine import example  # noqa: E402

tcp_echo = example("tcp_echo")


def test_the_default_echo_is_measured_as_before():
    # 8 KiB in flight per connection and 24 segments in all: the default segment buffer.
    assert bulk_window(tcp_echo.design()) == (8192, 24)
    assert bulk_window(tcp_echo.design(width=64)) == (8192, 24)


def test_the_bulk_echo_keeps_a_ring_in_flight():
    design = tcp_echo.design(bulk=True)
    ring = tcp_echo.BULK_RING
    assert bulk_window(design) == (ring, 2 * ring // 1024 * 3 // 4)
    config = design.tiles["tcp_rx"].params["config"]
    assert (config.flows, config.rx_ring, config.tx_ring) == (tcp_echo.BULK_FLOWS, ring, ring)
    assert design.tiles["tcp_echo"].params["chunk"] == tcp_echo.BULK_CHUNK
    for memory in ("rx_mem", "tx_mem"):
        decl = design.tiles[memory]
        assert decl.cls is MemoryTile
        assert decl.params["bram"] and decl.params["duplex"]


def places(design):
    return {name: (t.x, t.y) for name, t in design.tiles.items()}


def test_the_bulk_echo_hears_the_engine_off_the_stores_path():
    at = places(tcp_echo.design(bulk=True))
    stores = set(xy_path(at["tcp_rx"], at["rx_mem"]))
    assert stores
    for engine in ("tcp_rx", "tcp_tx"):
        assert not stores & set(xy_path(at[engine], at["tcp_echo"]))
    # The default layout has them share: what the bulk layout moved away from.
    at = places(tcp_echo.design())
    assert set(xy_path(at["tcp_rx"], at["rx_mem"])) & set(
        xy_path(at["tcp_rx"], at["tcp_echo"]))


def test_the_report_says_what_each_connection_kept_in_flight():
    res = {"design": "tcp_echo", "width": 512, "clock_mhz": 250.0, "simulator": "Verilator 5",
           "setup": {"syn_to_synack": 46, "syn_to_first_echo": 200},
           "latency": {"requests": 5, "min": 111, "median": 111, "max": 111},
           "rates": [{"flows": 1, "requests": 20, "resent": 0, "rounds": 20,
                      "cycles_per_request": 200.0}],
           "bulk": [{"flows": 1, "segment_bytes": 1460, "bytes": 1 << 20, "window": 65536,
                     "bytes_per_cycle": 29.12, "resent": 0}],
           "setup_rate": {"connections": 16, "opened": 16, "window": 8, "cycles": 400,
                          "cycles_per_connection": 25.0, "resent": 0},
           "held": {"connections": 16, "window": 16, "payload_bytes": 64, "cycles": 300,
                    "cycles_per_request": 18.75, "resent": 0}}
    text = render_tcp(res, "markdown")
    assert "up to 65,536 bytes in flight per connection" in text
    assert "| 1 | 1460 | 1,048,576 | 29.12 | 58.24 | 0 |" in text
