"""Recorded exchanges with a real peer, as golden files: what the Linux kernel sent the simulated
echo stack over a TAP device (tests/proto/pcaps/record.py made the recording) is replayed, and
the design must answer exactly as it did then, byte for byte, and drop what it dropped."""

import pathlib

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from apiary.load import load_design
from apiary.sim import open_sim
from test_udp_echo import SLOW_W512

ROOT = pathlib.Path(__file__).resolve().parents[2]
PCAP = pathlib.Path(__file__).parent / "pcaps" / "linux_echo.pcap"
DESIGN_MAC = "02:00:00:00:00:02"


def recording():
    """``(requests, replies)``: the frames the kernel sent and those the design sent back."""
    frames = [bytes(p) for p in rdpcap(str(PCAP))]
    requests = [f for f in frames if Ether(f).src != DESIGN_MAC]
    replies = [f for f in frames if Ether(f).src == DESIGN_MAC]
    return requests, replies


def test_the_recording_is_a_real_exchange():
    requests, replies = recording()
    kinds = [Ether(f).sprintf("%Ether.type%") for f in requests]
    assert kinds.count("ARP") == 1 and kinds.count("IPv4") == 7      # 3 pings, 4 datagrams
    assert kinds.count("IPv6") >= 1                                  # the kernel's own chatter
    assert len(replies) == 8


@pytest.mark.parametrize("width", [64, SLOW_W512])     # test_udp_echo.py's 512-bit model
def test_replay_gives_the_recorded_replies(width):
    requests, replies = recording()
    design = load_design(str(ROOT / "examples" / "udp_echo.py"), width=width)
    with open_sim(design, "verilator") as sim:
        sim.send_many(requests)
        sim.run()
        assert [f.data for f in sim.received()] == replies
        counters = sim.counters()
    # The kernel's IPv6 chatter goes to multicast MACs: dropped as not for us, and counted.
    ipv6 = sum(Ether(f).type == 0x86DD for f in requests)
    assert counters["eth_rx_not_for_us"] == ipv6
    assert counters["eth_tx_forwarded"] == len(replies)
