"""NoC traces from simulation: a UDP echo through the Beehive stack, tapped at every tile's
output, checked against the message specification on the way, written as a pcap (link type
148) and decoded by the generated scapy dissectors into the expected messages, in order."""

import importlib.util
import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from apiary.noc.checker import MessageCheckError
from apiary.noc.dissect import LINKTYPE_NOC_TRACE, scapy_layers
from apiary.sim import SimError, open_sim
from apiary.sim.trace import NocTrace
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("udp_echo", ROOT / "examples/udp_echo.py")
udp_echo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(udp_echo)

PAYLOAD = b"golden trace"
REQUEST = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
           / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=4000, dport=7) / PAYLOAD)


def golden(width):
    """What the trace must hold: each message's type, source, destination and payload length,
    in the order the stack sends them (tiles at udp_echo's places)."""
    ip, udp = len(REQUEST[IP]), len(REQUEST[UDP])
    return [
        ("MsgType.ETH_RX_FRAME", (0, 0), (1, 0), ip),
        ("MsgType.IP_RX_DATAGRAM", (1, 0), (2, 0), udp),
        ("MsgType.UDP_RX_SEGMENT", (2, 0), (2, 2), len(PAYLOAD)),
        ("MsgType.UDP_TX_SEGMENT", (2, 2), (2, 1), len(PAYLOAD)),
        ("MsgType.IP_TX_DATAGRAM", (2, 1), (1, 1), udp),
        ("MsgType.ETH_TX_FRAME", (1, 1), (0, 1), ip),
    ]


@pytest.mark.parametrize("width", [64, 512])
def test_udp_echo_golden_trace(tmp_path, width):
    with open_sim(udp_echo.design(width=width), "pysim") as sim:
        trace = NocTrace(sim)                       # checks every message as it passes
        sim.send(REQUEST)
        sim.run(120)
        replies = [f.data for f in sim.received()]
    assert replies == [echo_reply(REQUEST)[0]]

    path = tmp_path / "noc.pcap"
    assert trace.write_pcap(path) == 6
    layers = scapy_layers()
    packets = rdpcap(str(path))
    assert all(isinstance(p, layers.record) for p in packets)
    got = [(p[layers.header].sprintf("%msg_type%"), (p.src_x, p.src_y), (p.dst_x, p.dst_y),
            p.payload_bytes) for p in packets]
    assert got == golden(width)

    # Each record: where it was tapped, its width, cycles in order, the metadata decoded.
    assert [(p.tap_x, p.tap_y) for p in packets] == [src for _, src, _, _ in golden(width)]
    assert {p.width for p in packets} == {width}
    cycles = [p.cycle for p in packets]
    assert cycles == sorted(cycles) and len(set(cycles)) == 6
    assert [int(p.time * 250e6 + 0.5) for p in packets] == cycles   # pcap time = cycle at 250 MHz
    segment = packets[2][layers.meta["packet_meta"]]
    assert (segment.peer_port, segment.local_port, segment.peer_ip) == (4000, 7, 0x0A000001)
    # Payloads: the datagram, the UDP segment's payload, as the stack carried them.
    assert bytes(packets[0][layers.meta["packet_meta"]].payload) == bytes(REQUEST[IP])
    assert bytes(segment.payload) == PAYLOAD

    # The Python view of the same trace.
    messages = trace.messages()
    assert [m.tap for m in messages] == ["eth_rx noc_out", "ip_rx noc_out", "udp_rx noc_out",
                                         "echo noc_out", "udp_tx noc_out", "ip_tx noc_out"]
    assert all(m.decoded.formatted for m in messages)


def test_both_directions_see_each_message_twice():
    with open_sim(udp_echo.design(width=64), "pysim") as sim:
        trace = NocTrace(sim, ["udp_rx", "echo"], directions=("out", "in"))
        sim.send(REQUEST)
        sim.run(120)
    messages = trace.messages()
    seen = [(m.tap, m.decoded.header.msg_type) for m in messages]
    assert seen == [("udp_rx noc_in", 2), ("udp_rx noc_out", 26), ("echo noc_in", 26),
                    ("echo noc_out", 13)]
    # The segment udp_rx sent is the one echo took; echo is cut-through (same cycle out).
    assert messages[1].flits[2:] == messages[2].flits[2:]
    assert messages[2].cycle_first == messages[3].cycle_first


def test_a_malformed_message_stops_the_run_naming_tap_cycle_and_field():
    """A tile that sends a message with an unregistered type (a frame port's raw messages: the
    frame is the message) trips the checker at its output."""
    from apiary.design import Design
    from apiary.noc.header import NocHeader
    from apiary.tiles.raw_port import RawPortTile, message_frame

    d = Design("raw", cols=2, rows=1, width=64)
    d.add("port", RawPortTile, at=(0, 0))
    d.add("peer", RawPortTile, at=(1, 0))
    d.route("port", "peer")
    d.route("peer", "port")
    header = NocHeader(dst_x=1, dst_y=0, msg_type=201, msg_len=1)
    with open_sim(d, "pysim") as sim:
        NocTrace(sim)
        sim.send(message_frame(header.pack(64), 64), port="port")
        with pytest.raises(MessageCheckError, match=r"^port noc_out, cycle \d+: .*field "
                                                    r"msg_type: 201 is not a registered"):
            sim.run(100)


def test_taps_need_pysim_and_a_fresh_simulation():
    with open_sim(udp_echo.design(width=64), "pysim") as sim:
        with pytest.raises(SimError, match="no tile 'nope' to tap; tiles are eth_rx"):
            NocTrace(sim, ["nope"])
        sim.run(1)
        with pytest.raises(SimError, match="before the simulation's first run"):
            NocTrace(sim)
    assert LINKTYPE_NOC_TRACE == 148
