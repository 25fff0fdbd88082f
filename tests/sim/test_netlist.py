"""The netlist is what we simulated: the cores of examples/udp_echo.py and examples/tcp_echo.py as
Yosys's ``synth_ecp5`` leaves them (``open_sim(..., netlist="ecp5")``, :mod:`apiary.sim.netlist`),
on Verilator with the ECP5 cells' models, answer the scapy tests of their RTL with the same
frames on the same cycles as the RTL model, and the same counters.

Each test first checks that its model was built from the netlist: a flat module of LUT4s,
TRELLIS_FFs and block RAMs, none of the RTL's modules left (but the memory models the simulators
attach, which stay RTL). The ECP5 cells' own models are tested in ``test_ecp5_cells.py``.

Cold, each design costs a Yosys synthesis and a Verilator build of its netlist (minutes: see
docs/simulation.md); both are cached.
"""

import os
import pathlib
import re
import sys

import pytest

from apiary.sim import open_sim
from apiary.sim.netlist import ECP5, cell_counts, inlined_counts
from apiary.top import top_name
from harness.bench.tcp_peer import Peer

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "proto"))
sys.path.insert(0, str(TESTS / "tcp"))

from test_tcp_engine import TEST, handshake_echo_and_close, tcp_echo  # noqa: E402
from test_udp_echo import (assert_counters, echo_design, expected, protocol_mix,  # noqa: E402
                           zero_checksum_udp)

pytestmark = pytest.mark.slow


def assert_built_from_the_netlist(sim, kept=(), tiles=None):
    """``sim``'s model is the design's ECP5 netlist (of ``tiles`` only, when given): one flat
    module of ECP5 cells, beside it only the modules ``kept`` (RTL) and the cell models."""
    assert sim.source is ECP5 if tiles is None else sim.source.name.endswith(", ".join(tiles))
    with open(os.path.join(os.path.dirname(sim.model_path), "top.v")) as f:
        text = f.read()
    name = top_name(sim.design)
    inline = inlined_counts(text)             # the logic cells, written inline
    assert inline["LUT4"] > 1000 and inline["TRELLIS_FF"] > 1000 and inline["CCU2C"] > 100
    assert cell_counts(text)["DP16KD"] >= 1 and "LUT4" not in cell_counts(text)
    modules = re.findall(r"^module\s+\\?(\S+?)\s*\(", text, re.M)
    assert modules.count(name) == 1
    rtl = {m for m in modules if m.startswith(name + ".")}
    assert {m.split(".")[1] for m in rtl} == set(kept), sorted(rtl)
    assert "DP16KD" in modules


def run_both(design, scenario, kept=(), tiles=None, **kw):
    """Run ``scenario(sim)`` on ``design()``'s ECP5 netlist (of ``tiles`` only, when given;
    checked to be one, beside the RTL modules ``kept``), then on its RTL; return both runs'
    (frames out with their cycles, counters), netlist first."""
    runs = []
    for netlist in ("ecp5", None):
        extra = dict(netlist_tiles=tiles) if netlist and tiles else {}
        with open_sim(design(), "verilator", netlist=netlist, **extra, **kw) as sim:
            if netlist:
                assert_built_from_the_netlist(sim, kept, tiles)
            scenario(sim)
            runs.append(([(f.data, f.cycle_first, f.cycle_last) for f in sim.received()],
                         sim.counters()))
    return runs


def test_udp_echo_netlist_answers_arp_ping_and_udp():
    """The protocol mix of tests/proto/test_udp_echo.py (ARP, ping, UDP, IP options, VLAN tags)
    at 64 bits: every reply the model's, counted where the model says, on the netlist."""
    frames = protocol_mix() + [zero_checksum_udp(b"no checksum here")]
    replies, counts = expected(frames)
    assert counts["arp_forwarded"] == 2 and counts["icmp_forwarded"] == 4

    def scenario(sim):
        sim.send_many(frames)
        sim.run()
        assert sorted(f.data for f in sim.received()) == sorted(replies)
        assert_counters(sim, counts)
    netlist, rtl = run_both(lambda: echo_design(width=64), scenario, idle_cycles=300)
    assert netlist == rtl


#: The tiles of tcp_echo.py that the UDP echo has not: its netlist test synthesises these only.
TCP_TILES = ("tcp_rx", "tcp_tx", "tcp_echo", "rx_mem", "tx_mem")


def test_tcp_echo_netlist_handshakes_echoes_and_closes():
    """tests/tcp/test_tcp_engine.py's handshake, echo and close at 64 bits, on the netlist of
    the TCP engine, its echo and its buffer memories' tiles; the tiles the UDP echo shares with
    it (whose netlist the test above covers) and the mesh stay RTL (``netlist_tiles``), which
    halves the synthesis and the model. The design is tcp_echo.py with that test's small
    configuration (TEST: 8 flows, 4 KiB rings, a 20,000-cycle RTO...), whose rings are in the
    memory models (RTL, as LiteDRAM is outside the core on a board), not in block RAM."""
    def scenario(sim):
        handshake_echo_and_close(Peer(sim))
    design = tcp_echo.design(width=64, **TEST)
    rtl_tiles = [t for t in design.tiles if t not in TCP_TILES]
    assert {"eth_rx", "ip_rx", "udp_rx", "arp", "icmp"} <= set(rtl_tiles)
    kept = ("rx_mem_mem_model", "tx_mem_mem_model", "data_mesh", "eth_mac", *rtl_tiles)
    netlist, rtl = run_both(lambda: tcp_echo.design(width=64, **TEST), scenario, kept=kept,
                            tiles=TCP_TILES)
    assert netlist == rtl
