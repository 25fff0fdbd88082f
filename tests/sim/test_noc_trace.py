"""NoC traces from simulation: a UDP echo through the Beehive stack, tapped at every tile's
output, checked against the message specification on the way, written as a pcap (link type
148) and decoded by the generated scapy dissectors into the expected messages, in order."""

import importlib.util
import re
import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from fences import fence_at, fences

from apiary.noc.checker import MessageCheckError
from apiary.noc.dissect import LINKTYPE_NOC_TRACE, scapy_layers
from apiary.sim import SimError, open_sim
from apiary.sim.trace import NocTrace
from beehive.model import echo_reply
from beehive.proto.addresses import mac_to_int

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


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
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
    if width == 64:                 # docs/enzian.md quotes this trace: cycle, type, source, bytes
        found = fences((ROOT / "docs" / "enzian.md").read_text())
        quoted = [line.split()[:5] for line in found[fence_at(found, "MsgType.ETH_RX_FRAME")].lines]
        assert quoted == [[str(c), t, str(x), str(y), str(n)]
                          for c, (t, (x, y), _, n) in zip(cycles, golden(width))]

    # Each message carries its level of the metadata: Ethernet RX's the Ethernet fields, IPv4
    # RX's the addresses too.
    frame = packets[0][layers.meta["eth_meta"]]
    assert (frame.peer_mac, frame.ethertype) == (mac_to_int(REQUEST[Ether].src), 0x0800)
    assert packets[1][layers.meta["ip_meta"]].peer_ip == 0x0A000001
    # Payloads: the datagram, the UDP segment's payload, as the stack carried them.
    assert bytes(frame.payload) == bytes(REQUEST[IP])
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


def test_kernel_messages_are_checked_and_decoded_in_a_quarantine():
    """examples/vr_witness.py on pysim, every tile's ports tapped both ways: revoking the
    witness's capability to send to UDP TX (over the kernel's control port) and sending it a
    PREPARE makes the kernel speak (IPC_GRANT to the witness's monitor, FAULT to the error
    manager, FAULT_READ and FAULT_ENTRY for the log): every message passes the checkers and
    decodes by its format."""
    from apiary.load import load_design
    from apiary.os.uapi import FaultKind, IpcDir, KernelMsgType
    from beehive.apps.kernel_ctl import fault_request, ipc_request, parse_reply
    from beehive.apps.vr_witness import VrMessage, VrType
    from beehive.vr.links import SimWitness

    design = load_design(str(ROOT / "examples/vr_witness.py"), width=64)
    (x, y), (tx_x, tx_y) = design.tiles["vr0"].at, design.tiles["udp_tx"].at
    with open_sim(design, "pysim") as sim:
        trace = NocTrace(sim, directions=("out", "in"))
        at_router = NocTrace(sim, ["vr0"], side="router")
        link = SimWitness(sim, 9000)
        revoke = ipc_request(x, y, IpcDir.OUT, tx_x, tx_y, grant=False)
        assert parse_reply(link.exchange(revoke, dport=7100))["status"] == 0
        assert link.request(VrMessage(VrType.PREPARE, op=1).pack()) is None    # it faults
        fault = parse_reply(link.exchange(fault_request(0), dport=7100))
    assert (fault["x"], fault["y"], fault["kind"]) == (x, y, FaultKind.NO_IPC_CAP)
    kernel = {t.value for t in KernelMsgType}
    seen = [(m.tap, KernelMsgType(m.decoded.header.msg_type).name, m.decoded.fields())
            for m in trace.messages() if m.decoded.header.msg_type in kernel]
    kinds = [kind for _, kind, _ in seen]
    for kind in ("IPC_GRANT", "FAULT", "FAULT_READ", "FAULT_ENTRY"):
        assert kind in kinds, kind
    grant = next(f for _, kind, f in seen if kind == "IPC_GRANT")
    assert (grant["status"], grant["perm"], grant["peer_x"], grant["peer_y"]) == \
        (0, IpcDir.OUT, tx_x, tx_y)
    faults = [(tap, f) for tap, kind, f in seen if kind == "FAULT"]
    assert faults[0][0] == "errors noc_in" and faults[0][1]["op"] == FaultKind.NO_IPC_CAP
    # On the router side of the witness's monitor only the monitor's FAULT left, where the
    # witness's reply would have.
    leaving = [(m.tap, m.decoded.header.msg_type) for m in at_router.messages()]
    assert leaving == [("vr0 monitor noc_out", KernelMsgType.FAULT.value)]


def test_control_plane_messages_are_checked_and_decoded():
    """examples/udp_echo_ctl.py: reading a counter over UDP makes the controller send a
    CTL_READ on the control plane and take the agent's CTL_ACK; taps on the controller's
    control ports check and decode both."""
    from apiary.control.messages import CtlStatus
    from apiary.load import load_design
    from apiary.top import control_map
    from beehive.control_client import ControlClient, SimTransport

    design = load_design(str(ROOT / "examples/udp_echo_ctl.py"), width=64)
    with open_sim(design, "pysim") as sim:
        trace = NocTrace(sim, ["ctl"], planes=("ctl",), directions=("out", "in"))
        sim.send(REQUEST)
        sim.run(150)
        client = ControlClient(control_map(design), SimTransport(sim, step=32))
        # The echo request, then the control request itself, passed Ethernet RX.
        assert client.read("eth_rx.forwarded") == 2
    seen = [(m.tap, m.decoded) for m in trace.messages()]
    assert [(tap, d.header.msg_type) for tap, d in seen] == [("ctl ctl_out", 48),
                                                            ("ctl ctl_in", 50)]
    read, ack = (d.fields() for _, d in seen)
    assert ack["tag"] == read["tag"] and ack["addr"] == read["addr"]
    assert ack["status"] == CtlStatus.OK and ack["data"] == 2
    assert all(m.width == design.ctl_width for m in trace.messages())


def test_apiary_sim_writes_the_noc_trace(tmp_path, capsys):
    from scapy.utils import wrpcap
    from apiary.cli import main
    wrpcap(str(tmp_path / "in.pcap"), [REQUEST])
    argv = ["sim", str(ROOT / "examples/udp_echo.py"), "--width", "64",
            "--pcap-in", str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "out.pcap")]
    assert main([*argv, "--backend", "pysim", "--noc-trace", str(tmp_path / "noc.pcap")]) == 0
    assert "6 NoC messages, every one well formed, to " in capsys.readouterr().out
    layers = scapy_layers()
    got = [(p[layers.header].sprintf("%msg_type%"), (p.src_x, p.src_y), (p.dst_x, p.dst_y),
            p.payload_bytes) for p in rdpcap(str(tmp_path / "noc.pcap"))]
    assert got == golden(64)
    assert main([*argv, "--noc-trace", str(tmp_path / "noc.pcap")]) == 2
    assert "--noc-trace goes with --pcap-in and --backend pysim" in capsys.readouterr().err


def test_apiary_sim_stops_at_a_malformed_message_with_one_line(tmp_path, capsys):
    from scapy.utils import wrpcap
    from apiary.cli import main
    from apiary.noc.header import NocHeader
    from apiary.tiles.raw_port import message_frame
    (tmp_path / "raw.py").write_text(
        "from apiary.design import Design\n"
        "from apiary.tiles.raw_port import RawPortTile\n"
        "def design(width=64):\n"
        "    d = Design('raw', cols=2, rows=1, width=width)\n"
        "    d.add('port', RawPortTile, at=(0, 0))\n"
        "    d.add('sink', RawPortTile, at=(1, 0))\n"
        "    d.route('port', 'sink')\n"
        "    return d\n")
    bad = NocHeader(dst_x=1, msg_type=201, msg_len=1)
    wrpcap(str(tmp_path / "in.pcap"), [Ether(message_frame(bad.pack(64), 64))])
    assert main(["sim", str(tmp_path / "raw.py"), "--port", "port", "--backend", "pysim",
                 "--pcap-in", str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "o.pcap"),
                 "--noc-trace", str(tmp_path / "noc.pcap")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert re.match(r"apiary sim: port noc_out, cycle \d+: a malformed 2-flit message \(201\): "
                    r"field msg_type: 201 is not a registered message type$", err[-1]), err
