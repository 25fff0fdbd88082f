"""The design setting ``low_latency`` (beehive.proto.layer.low_latency): at 512 bits the same
frames out and the same counters as without it, each reply a fixed number of cycles sooner."""

from apiary.load import load_design
from beehive.model import echo_reply

from test_pipelined_headers import echo_each, requests


def _echo(low_latency):
    return echo_each(load_design("examples/udp_echo.py", width=512, low_latency=low_latency))


def test_same_replies_and_counters_a_fixed_number_of_cycles_sooner():
    plain_frames, plain_latency, plain_counters = _echo(False)
    fast_frames, fast_latency, fast_counters = _echo(True)
    expected = [r for r in (echo_reply(q)[0] for q in requests()) if r is not None]
    assert [f.data for f in plain_frames] == [f.data for f in fast_frames] == expected
    assert fast_counters == plain_counters
    assert fast_counters["udp_rx_bad_checksum"] == 1
    # A cycle sooner at each receive layer's descriptor queue (three on every path) and each
    # transmit layer's queues (UDP, IPv4 and Ethernet TX; a ping has no UDP TX), and one more
    # at each receiver given a message that fits in its header flit: 6 for the 300-byte echo;
    # 8 for the ping (ICMP, IPv4 TX, Ethernet TX); 8 with IP options (UDP RX, IPv4 TX: the
    # reply's Ethernet-level message is two flits); 10 for the 9-byte echo, whose unpadded
    # 51-byte frame fits every header flit (IPv4 RX, UDP RX, IPv4 TX, Ethernet TX): 33 -> 23.
    assert plain_latency == [33, 27, 33, 47]
    assert [p - f for p, f in zip(plain_latency, fast_latency)] == [10, 8, 8, 6]
