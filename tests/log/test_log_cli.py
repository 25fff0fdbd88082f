"""`apiary log` (beehive/log_cli.py) end to end: over real UDP sockets on 127.0.0.1 to a bridge
thread that hands each datagram to examples/logged_echo.py running in Verilator (through
SimTransport) and sends its reply back; the pcap it writes, read by scapy; latencies; errors."""

import json
import pathlib
import socket
import threading

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

import apiary.cli as cli
from apiary.sim import open_sim
from beehive.control_client import SimTransport
from beehive.log_cli import COMMAND, LogError, log_tile
from beehive.model import echo_reply
from test_log_vcd import read_vcd, value_at

N = 3
CLOCK = 125e6          # apiary log's default at 64 bits, as apiary sim's
DESIGN = """
import importlib.util
spec = importlib.util.spec_from_file_location("logged_echo", {path!r})
logged_echo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(logged_echo)


def design(width=64):
    return logged_echo.design(width, entries=16, snap=128)
"""


@pytest.fixture
def apiary_log(monkeypatch):
    """``main`` with the ``log`` command, registered or not (the entry point is the lead's)."""
    found = cli.commands()
    monkeypatch.setattr(cli, "commands", lambda: {**found, "log": COMMAND})
    return cli.main


@pytest.fixture
def design_file(tmp_path):
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples/logged_echo.py"
    script = tmp_path / "design.py"
    script.write_text(DESIGN.format(path=str(path)))
    return script


class Bridge:
    """A UDP server on 127.0.0.1 whose every datagram is a request into ``sim`` (SimTransport),
    answered with the controller's reply."""

    def __init__(self, sim):
        self.transport = SimTransport(sim, step=32)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                request, client = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            try:
                self.sock.sendto(self.transport(request), client)
            except Exception as e:  # noqa: BLE001 -- reported by the test
                self.errors.append(e)

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


def requests():
    return [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
            / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5000 + i, dport=7)
            / (b"log me %d " % i * (i + 1)) for i in range(N)]


@pytest.mark.slow
def test_apiary_log_writes_a_pcap_with_hardware_timestamps_and_pairs_latencies(
        tmp_path, capsys, apiary_log, design_file):
    from apiary.load import load_design
    design = load_design(str(design_file))
    with open_sim(design, "verilator") as sim:
        for frame in requests():
            sim.send(frame)
            sim.run(150)
        sent, replies = sim.sent(), sim.received(clear=True)
        assert [r.data for r in replies] == [echo_reply(f)[0] for f in requests()]
        bridge = Bridge(sim)
        try:
            common = [str(design_file), "127.0.0.1", "--port", str(bridge.port), "--timeout",
                      "30"]
            pcap = tmp_path / "in.pcap"
            assert apiary_log(["log", *common, "--tile", "log_in", "-o", str(pcap),
                               "--json"]) == 0
            summary = json.loads(capsys.readouterr().out)
            assert apiary_log(["log", *common, "--latency", "log_in", "log_out",
                               "--json"]) == 0
            latency = json.loads(capsys.readouterr().out)
            assert latency["clock_hz"] == CLOCK         # the design's, with no --clock given
            assert apiary_log(["log", *common, "--tile", "log_out", "-o",
                               str(tmp_path / "out.pcap")]) == 0
            text = capsys.readouterr().out
            vcd = tmp_path / "in.vcd"
            assert apiary_log(["log", *common, "--tile", "log_in", "--vcd", str(vcd)]) == 0
            vcd_text = capsys.readouterr().out
        finally:
            bridge.close()
        assert not bridge.errors

    # The pcap: the requests' IPv4 datagrams, stamped with the cycle each passed log_in, a
    # fixed latency after the frame's last word went in; then the readout's own requests.
    assert summary["linktype"] == 101 and summary["entries"] == summary["written"] > N
    packets = rdpcap(str(pcap))
    assert len(packets) == summary["entries"]
    assert [bytes(p) for p in packets[:N]] == [bytes(f[IP]) for f in requests()]
    cycles = [float(p.time) * CLOCK for p in packets]
    assert all(abs(c - round(c)) < 1e-6 for c in cycles)
    assert [round(c) for c in cycles] == summary["cycles"]
    assert len({round(c) - s.cycle_last for c, s in zip(cycles, sent)}) == 1
    assert packets[N][UDP].dport == 7200
    assert text.startswith("log_out: ") and "link type 101" in text

    # The waveform: the same entries, the requests' ports where the pcap has them, no pcap.
    assert vcd_text.startswith("log_in: ") and f"(payloads, link type 101) → {vcd} (" in vcd_text
    assert ".pcap" not in vcd_text and not pathlib.Path("log_in.pcap").exists()
    names, changes = read_vcd(vcd.read_text())
    assert [value_at(names, changes, "log_in.l4.sport", round(c / CLOCK * 1e12))
            for c in summary["cycles"][:N]] == [5000 + i for i in range(N)]
    assert value_at(names, changes, "log_in.entry",
                    round(summary["cycles"][N] / CLOCK * 1e12)) == N

    # Latencies: each echo's, from log_in to log_out, the testbench's less a constant.
    pairs = latency["pairs"][:N]
    measured = [r.cycle_first - s.cycle_last for s, r in zip(sent, replies)]
    assert len({m - (b - a) for m, (a, b) in zip(measured, pairs)}) == 1
    assert pairs[0][0] == summary["cycles"][0]


def test_latency_and_a_waveform_are_one_or_the_other(capsys, apiary_log, design_file):
    assert apiary_log(["log", str(design_file), "127.0.0.1", "--latency", "log_in", "log_out",
                       "--vcd", "x.vcd"]) == 2
    assert "leave out --tile, -o and --vcd" in capsys.readouterr().err


def test_apiary_log_names_a_missing_log_tile(capsys, apiary_log, design_file):
    assert apiary_log(["log", str(design_file), "127.0.0.1", "--tile", "eth_rx",
                       "--timeout", "0.1"]) == 1
    assert capsys.readouterr().err == ("apiary log: design 'logged_echo' has no log tile "
                                       "'eth_rx'; its log tiles: log_in, log_out\n")


def test_apiary_log_reports_a_silent_controller(capsys, apiary_log, design_file):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))            # nobody answers there
    port = sock.getsockname()[1]
    try:
        assert apiary_log(["log", str(design_file), "127.0.0.1", "--port", str(port),
                           "--tile", "log_in", "--timeout", "0.05", "--retries", "1"]) == 1
    finally:
        sock.close()
    err = capsys.readouterr().err
    assert err.startswith(f"apiary log: 127.0.0.1:{port}: no answer from the controller "
                          f"after 2 tries")


def test_a_design_without_log_tiles_is_told_so():
    from apiary.load import load_design
    echo = pathlib.Path(__file__).resolve().parents[2] / "examples" / "udp_echo.py"
    design = load_design(str(echo), width=64)
    with pytest.raises(LogError) as raised:
        log_tile(design, None)
    assert str(raised.value) == ("design 'udp_echo' has no log tile: apiary log reads the trace "
                                 "of a LogTile the design places (examples/logged_echo.py)")


def test_log_tile_needs_a_name_when_there_are_several(design_file):
    from apiary.load import load_design
    design = load_design(str(design_file))
    with pytest.raises(LogError, match="has 2 log tiles \\(log_in, log_out\\); name one"):
        log_tile(design, None)
    tile = log_tile(design, "log_out")
    assert (tile.entries, tile.snap, tile.linktype) == (16, 128, 101)
