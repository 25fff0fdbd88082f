"""Thousands of connections through the whole simulated stack (examples/tcp_echo.py at 64 bits
with 1,024 flow slots, on Verilator): 1,024 peers connect from sequential and from random ports
of one address, every one gets a slot, all are open at once while each echoes a request of its
own, then all close; and a second wave of 1,024 takes the slots the first freed."""

import pathlib
import random

import pytest

from apiary.load import load_script
from apiary.sim import open_sim
from harness.bench.tcp import _close_all, measure_held, measure_setup_rate
from harness.bench.tcp_peer import run_peers

pytestmark = pytest.mark.slow        # a Verilator model of the whole design

FLOWS = 1024
#: 1 KiB rings (1 MiB in each buffer memory), a 512-byte MSS: each request fits one segment.
MANY = dict(flows=FLOWS, ring=1024, mss=512, rto=20_000, linger=30_000)

tcp_echo = load_script(pathlib.Path(__file__).resolve().parents[2] / "examples" / "tcp_echo.py")


def test_1024_connections_each_exchange_data_at_once_then_close_and_come_again():
    design = tcp_echo.design(width=64, **MANY)
    with open_sim(design, "verilator") as sim:
        for wave, ports in enumerate((None, random.Random(7).sample(range(1024, 65536), FLOWS))):
            before = sim.counters()
            rate, peers = measure_setup_rate(sim, design, FLOWS, ports=ports)
            assert rate["opened"] == FLOWS and len(peers) == FLOWS, rate
            c = sim.counters()
            assert c["tcp_rx_opened"] - before.get("tcp_rx_opened", 0) == FLOWS
            assert c.get("tcp_rx_syn_dropped", 0) == 0
            # All open: each echoes 64 bytes of its own (checked byte for byte), none closes.
            held = measure_held(sim, peers)
            assert held["connections"] == FLOWS
            assert all(len(p.stream) == 64 for p in peers)
            _close_all(sim, peers)
            # The peers' last ACKs: some were dropped in the burst (the Ethernet receive tile's
            # buffer full); the design sends those FINs again after its timeout, backing off.
            for _ in range(400):
                c = sim.counters()
                if c["tcp_rx_closed"] - before.get("tcp_rx_closed", 0) == FLOWS:
                    break
                run_peers(sim, peers, 1000)
            assert c["tcp_rx_closed"] - before.get("tcp_rx_closed", 0) == FLOWS, wave
            assert c.get("tcp_rx_reset", 0) == 0
