"""examples/logged_echo.py on both back ends: the logs, read over UDP through the controller in
simulation, hold every echo request and reply on the cycles the testbench measured at the MAC
port (a fixed latency away), with their bytes; the two logs pair into latencies; and the
ingress log, replayed in place of what Ethernet RX sends, gives the same replies on the same
cycles."""

import importlib.util
import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.sim import open_sim
from apiary.sim.replay import (log_records, open_replay, trace_from_entries, trace_from_pcap,
                               write_log_pcap)
from apiary.top import control_map
from beehive.control_client import ControlClient, SimTransport
from beehive.log_cli import log_tile, match_latency, read_log
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("logged_echo", ROOT / "examples/logged_echo.py")
logged_echo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(logged_echo)

N = 3


def requests():
    return [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
            / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=4000 + i, dport=7)
            / bytes(range(i, 12 + 9 * i)) for i in range(N)]


def logged_run(width, backend):
    """Send the requests one at a time, then read both logs over UDP: ``(design, frames
    sent, replies, log_in entries, log_out entries)``."""
    design = logged_echo.design(width, entries=16, snap=128)
    with open_sim(design, backend) as sim:
        for frame in requests():           # spaced: each one meets an idle stack
            sim.send(frame)
            sim.run(150)
        sent, replies = sim.sent(), sim.received(clear=True)
        client = ControlClient(control_map(design), SimTransport(sim, step=32))
        ingress, written_in, lost_in = read_log(client, log_tile(design, "log_in"))
        egress, written_out, _ = read_log(client, log_tile(design, "log_out"))
    # The readout's own requests pass log_in (and their replies log_out) after the echoes.
    assert written_in > N and written_out > N and lost_in == 0
    return design, sent, replies, ingress, egress


@pytest.mark.slow
@pytest.mark.parametrize("width,backend", [(64, "pysim"), (64, "verilator")])
def test_logs_read_over_udp_match_the_testbench_and_replay_reproduces_the_run(
        tmp_path, width, backend):
    design, sent, replies, ingress, egress = logged_run(width, backend)
    frames = requests()
    assert [r.data for r in replies] == [echo_reply(f)[0] for f in frames]

    # Cycles: each log entry is a fixed number of cycles after the request's last word went
    # in (Ethernet RX stores a frame whole), or before the reply's first word came out.
    into = {e.cycle - s.cycle_last for e, s in zip(ingress, sent)}
    out = {r.cycle_first - e.cycle for e, r in zip(egress, replies)}
    assert len(into) == 1 and len(out) == 1, (into, out)
    assert 0 < into.pop() < 40 and 0 < out.pop() < 40

    # Bytes: link type 101 gives the IPv4 datagrams of the requests and of the replies.
    assert [r.data for r in log_records(ingress[:N], width, 101)] == \
        [bytes(f[IP]) for f in frames]
    assert [r.data for r in log_records(egress[:N], width, 101)] == \
        [r.data[14:] for r in replies]

    # Latency: each reply pairs with its request, whatever control traffic is in the logs.
    pairs, _, _ = match_latency(ingress, egress, width, 101)
    assert [(a.cycle, b.cycle) for a, b in pairs[:N]] == \
        [(a.cycle, b.cycle) for a, b in zip(ingress, egress)][:N]

    # Replay: the logged requests injected where log_in stood, nothing sent in.
    trace = trace_from_entries(ingress[:N], width)
    write_log_pcap(tmp_path / "in.pcap", ingress[:N], width, 147)
    assert trace_from_pcap(tmp_path / "in.pcap", width) == trace
    with open_replay(design, "log_in", trace, backend) as sim:
        sim.run(trace[-1].cycle + 200)
        again = sim.received()
        counters = sim.counters()
    assert [(r.data, r.cycle_first, r.cycle_last) for r in again] == \
        [(r.data, r.cycle_first, r.cycle_last) for r in replies]
    assert counters["log_in_injected"] == N and counters["log_in_late"] == 0
