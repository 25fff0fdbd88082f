"""examples/udp_flexdriver.py against scapy: with the slow application stalled, its requests
are dropped at its receive guard, counted, and every request to the other two applications is
still echoed; replies sent with credits are never dropped for want of room."""

import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.sim import open_sim
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"
FAST, SLOW, ECHO = 9, 8, 7


def request(dport, k):
    return (Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4)
            / UDP(sport=40000 + k, dport=dport) / (bytes([k]) * (8 + k)))


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])   # ~20 s
def test_stalled_application_drops_only_its_own_requests(width):
    design = load_design(str(ROOT / "examples" / "udp_flexdriver.py"), width=width,
                         slow_cycles=1_000_000, guard_flits=16, queue_flits=32)
    design.check()
    frames = [request((SLOW, FAST, ECHO)[k % 3], k) for k in range(30)]
    with open_sim(design) as sim:
        sim.send_many(frames)
        sim.run()
        replies = [f.data for f in sim.received()]
        counters = sim.counters()
    to_slow = [f for f in frames if f[UDP].dport == SLOW]
    slow_replies = [r for r in replies if Ether(r)[UDP].sport == SLOW]
    # Every request to the running applications is answered, in order per application,
    # exactly as the model says.
    for port in (FAST, ECHO):
        expect = [echo_reply(bytes(f), port=port)[0] for f in frames if f[UDP].dport == port]
        assert [r for r in replies if Ether(r)[UDP].sport == port] == expect
    # The stalled one answers at most its first request; the rest are taken by its guard
    # (stored while there is room, then dropped and counted), none is lost silently.
    assert len(slow_replies) <= 1
    held = counters["slow_rx_guard_passed"]
    assert counters["slow_rx_guard_dropped"] > 0
    assert held + counters["slow_rx_guard_dropped"] == len(to_slow)
    # Replies go through the credited queues: nothing dropped there, every one forwarded.
    assert counters["credits_no_credit"] == 0 and counters["credits_unknown_source"] == 0
    to_fast = [f for f in frames if f[UDP].dport == FAST]
    assert counters["credits_forwarded"] == len(to_fast) + len(slow_replies)
