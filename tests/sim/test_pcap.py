"""pcap round trip through examples/frame_loopback.py, and waveform dumps of a window."""

import importlib.util
import pathlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap, wrpcap

from apiary.sim import open_sim, SimError
from apiary.sim.pcap import run_pcap
from apiary.sim.vcd import _timescale

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("frame_loopback", ROOT / "examples/frame_loopback.py")
loopback = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loopback)


def packets():
    return [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(dst="10.0.0.2")
            / UDP(sport=5000 + i, dport=7) / (b"x" * (i * 97)) for i in range(8)]


@pytest.mark.parametrize("backend", ["pysim", "verilator"])
def test_pcap_round_trip_through_loopback(tmp_path, backend):
    pcap_in, pcap_out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(pcap_in), packets())
    summary = run_pcap(loopback.design(512), pcap_in, pcap_out, backend=backend,
                       clock_hz=250e6, seed=3, stall=0.2)
    out = rdpcap(str(pcap_out))
    assert [bytes(p) for p in out] == [bytes(p) for p in packets()]
    assert summary["frames_in"] == summary["frames_out"] == 8 and summary["idle"]
    assert summary["counters"]["eth_tx_frames"] == 8
    # Timestamps are simulated time at 250 MHz: 4 ns per cycle, increasing.
    times = [float(p.time) for p in out]
    assert times == sorted(times) and 0 < times[0] < times[-1] <= summary["seconds"]
    assert all(abs(t * 250e6 - round(t * 250e6)) < 1e-3 for t in times)
    assert out[0].haslayer(UDP)


def test_pcap_max_cycles_cuts_the_run_short(tmp_path):
    pcap_in, pcap_out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(pcap_in), packets())
    summary = run_pcap(loopback.design(512), pcap_in, pcap_out, backend="verilator",
                       max_cycles=30)
    assert summary["cycles"] == 30 and not summary["idle"]
    assert summary["frames_out"] < 8
    assert len(rdpcap(str(pcap_out))) == summary["frames_out"]


def test_missing_pcap_is_a_clear_error(tmp_path):
    with pytest.raises(SimError, match="no such pcap file"):
        run_pcap(loopback.design(512), tmp_path / "nope.pcap", tmp_path / "out.pcap",
                 backend="pysim")


@pytest.mark.parametrize("backend", ["pysim", "verilator"])
def test_vcd_window_is_written(tmp_path, backend):
    path = tmp_path / "wave.vcd"
    with open_sim(loopback.design(512), backend, vcd=path, vcd_window=(10, 20)) as sim:
        sim.send_many(packets()[:3])
        sim.run()
    text = path.read_text()
    assert "$enddefinitions" in text and "eth" in text
    unit = _timescale(text)
    times = [int(line[1:]) * unit for line in text.splitlines() if line.startswith("#")]
    # 250 MHz: a cycle is 4 ns; cycles 10..20 lie between 40 and 84 ns.
    assert times and min(times) >= 39.9e-9 and max(times) <= 84.1e-9
    assert len(set(times)) >= 10


def test_vcd_window_needs_a_file():
    with pytest.raises(SimError, match="vcd_window needs vcd="):
        open_sim(loopback.design(512), "pysim", vcd_window=(0, 5))


# -- captures the reader refuses, each with one message naming the file and the problem --------

def _pcap(path, frames, *, linktype=1, cut=0, snaplen=None, header=None):
    """A classic microsecond pcap of ``frames``, ``cut`` bytes short; a record keeps only
    ``snaplen`` bytes of its frame when given."""
    import struct
    raw = header if header is not None else struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0,
                                                        65535, linktype)
    for i, frame in enumerate(frames):
        kept = frame[:snaplen] if snaplen else frame
        raw += struct.pack("<IIII", i, 0, len(kept), len(frame)) + kept
    path.write_bytes(raw[:len(raw) - cut])
    return path


FRAMES = [bytes(p) for p in packets()[:3]]     # 42, 139 and 236 bytes


@pytest.mark.parametrize("make, message", [
    (lambda p: _pcap(p, FRAMES, cut=100),
     r"req\.pcap: record 3 is cut short: 136 of 236 bytes$"),
    (lambda p: _pcap(p, FRAMES, cut=236 + 10),
     r"req\.pcap: record 3's header is cut short: 6 of 16 bytes$"),
    (lambda p: _pcap(p, FRAMES, linktype=101),
     r"req\.pcap: link type 101 \(raw IP\); the design takes Ethernet frames \(link type 1\)\. "
     r"Give the packets an Ethernet header .* `tcprewrite --dlt=enet --enet-dmac=DESIGN_MAC "),
    (lambda p: _pcap(p, FRAMES, linktype=113), r"req\.pcap: link type 113 \(Linux cooked"),
    (lambda p: _pcap(p, FRAMES, snaplen=64),
     r"req\.pcap: record 2 holds 64 of the packet's 139 bytes \(captured with a snap length\)"),
    (lambda p: _pcap(p, [], header=bytes.fromhex("0a0d0d0a") + bytes(24)),
     r"req\.pcap is a pcapng file; apiary reads classic pcap files\. Convert it with "
     r"`editcap -F pcap .*req\.pcap out\.pcap`"),
    (lambda p: _pcap(p, [], header=b"GET / HTTP/1.1\r\n"),
     r"req\.pcap is not a pcap file: it starts with 47455420, not a pcap magic number"),
    (lambda p: _pcap(p, [], header=bytes.fromhex("d4c3b2a1") + bytes(8)),
     r"req\.pcap: the pcap file header is cut short: 12 of 24 bytes$"),
    (lambda p: _pcap(p, [], header=b""),
     r"req\.pcap is empty, not a pcap file"),
], ids=["cut-in-a-packet", "cut-in-a-record-header", "raw-ip", "linux-cooked", "snap-length",
        "pcapng", "wrong-magic", "cut-in-the-file-header", "empty"])
def test_a_bad_capture_is_one_clear_error(tmp_path, make, message):
    path = make(tmp_path / "req.pcap")
    with pytest.raises(SimError, match=message):
        run_pcap(loopback.design(64), path, tmp_path / "out.pcap", backend="pysim")
    assert not (tmp_path / "out.pcap").exists()


def test_a_good_capture_is_read_whole(tmp_path):
    from apiary.sim.pcap import read_pcap
    assert read_pcap(_pcap(tmp_path / "ok.pcap", FRAMES)) == FRAMES
    assert read_pcap(_pcap(tmp_path / "empty.pcap", [])) == []


def test_the_command_line_reports_a_bad_capture_in_one_line(tmp_path, capsys):
    from apiary.cli import main
    path = _pcap(tmp_path / "req.pcap", FRAMES, cut=100)
    assert main(["sim", str(ROOT / "examples/frame_loopback.py"), "--backend", "pysim",
                 "--pcap-in", str(path), "--pcap-out", str(tmp_path / "out.pcap")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[1:] == [
        f"apiary sim: {path}: record 3 is cut short: 136 of 236 bytes"]
