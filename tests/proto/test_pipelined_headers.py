"""Pipelined headers (``pipelined_headers``, on at 64 bits by default): the same frames out and
the same counters as the one-cycle tiles, a fixed number of cycles later."""

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether

from apiary.load import load_design
from apiary.sim import open_sim
from beehive.model import echo_reply
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


PEER = "02:00:00:00:00:01"


def requests():
    base = Ether(dst=DEFAULT_MAC, src=PEER) / IP(src="10.0.0.1", dst=DEFAULT_IPV4)
    good = base / UDP(sport=4000, dport=7) / b"pipelined"
    bad = bytearray(bytes(good))
    bad[-1] ^= 0xFF                                   # the UDP checksum no longer matches
    options = Ether(dst=DEFAULT_MAC, src=PEER) / IP(
        src="10.0.0.1", dst=DEFAULT_IPV4, options=b"\x01\x01\x01\x00") / UDP(
        sport=4001, dport=7) / b"with IP options"
    return [good, bytes(bad), base / ICMP(id=3, seq=4) / b"ping", options,
            base / UDP(sport=4002, dport=7) / (b"x" * 300)]


def echo_each(design):
    """``(frames, latencies, counters)``: the replies of ``design`` (in Amaranth's simulator)
    to :func:`requests`, sent one at a time into the idle design, each reply's cycles from its
    request's send to its own end, and the counters at the end."""
    frames = []
    latencies = []
    with open_sim(design, "pysim") as sim:
        for request in requests():
            start = sim.cycle
            sim.send(request)
            sim.run()
            reply = sim.received(clear=True)
            frames += reply
            latencies += [f.cycle_last - start for f in reply]
        counters = sim.counters()
    return frames, latencies, counters


def _echo(pipelined):
    design = load_design("examples/udp_echo.py", width=64)
    design.settings["pipelined_headers"] = pipelined
    return echo_each(design)


def test_same_replies_and_counters_a_fixed_number_of_cycles_later():
    plain_frames, plain_latency, plain_counters = _echo(False)
    staged_frames, staged_latency, staged_counters = _echo(True)
    expected = [r for r in (echo_reply(q)[0] for q in requests()) if r is not None]
    assert len(expected) == 4                           # all but the bad checksum
    assert [f.data for f in plain_frames] == [f.data for f in staged_frames] == expected
    assert staged_counters == plain_counters
    assert staged_counters["udp_rx_bad_checksum"] == 1
    # Each reply is later by the cycles of the stages its request and it pass, none of them
    # per byte: a UDP echo by 20 (69 -> 89 cycles for the first: 13 in header stages, 5 in
    # the input queues of the five tiles it enters from the NoC, and 2 that the one-cycle
    # tiles save where a packet buffer's first word leaves with its descriptor, in Ethernet
    # RX and UDP RX) whatever its size or IP options, a ping (no UDP tiles; ICMP's own buffer
    # instead) by 16.
    assert plain_latency[0] == 69
    assert [s - p for p, s in zip(plain_latency, staged_latency)] == [20, 16, 20, 20]
