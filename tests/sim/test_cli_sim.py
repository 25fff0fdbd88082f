"""`apiary sim DESIGN --pcap-in/--pcap-out` and its errors."""

import pathlib

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap, wrpcap

from apiary.cli import main

LOOPBACK = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "frame_loopback.py")


def test_pcap_round_trip_through_the_cli(tmp_path, capsys):
    frames = [Ether(dst="02:00:00:00:00:02") / IP(dst="10.0.0.2") / UDP(dport=7) / bytes(n)
              for n in (18, 100, 1472)]
    wrpcap(str(tmp_path / "in.pcap"), frames)
    assert main(["sim", LOOPBACK, "--pcap-in", str(tmp_path / "in.pcap"),
                 "--pcap-out", str(tmp_path / "out.pcap"), "--clock-mhz", "125"]) == 0
    out = rdpcap(str(tmp_path / "out.pcap"))
    assert [bytes(p) for p in out] == [bytes(f) for f in frames]
    stamps = [float(p.time) for p in out]
    assert stamps == sorted(stamps) and all(round(t * 125e6, 3) % 1 == 0 for t in stamps)
    assert "3 frames in, 3 frames out" in capsys.readouterr().out


def test_sim_errors_are_one_line(tmp_path, capsys):
    assert main(["sim", LOOPBACK]) == 1
    assert "give either --pcap-in/--pcap-out or --tap" in capsys.readouterr().err
    assert main(["sim", LOOPBACK, "--pcap-in", "x.pcap"]) == 1
    assert "--pcap-in and --pcap-out go together" in capsys.readouterr().err
    assert main(["sim", LOOPBACK, "--pcap-in", str(tmp_path / "missing.pcap"),
                 "--pcap-out", str(tmp_path / "o.pcap")]) == 1
    err = capsys.readouterr().err
    assert "missing.pcap" in err and "Traceback" not in err
    assert main(["sim", LOOPBACK, "--tap", "x" * 20]) == 1
    assert "must be 1 to 15 characters" in capsys.readouterr().err
    assert main(["sim", LOOPBACK, "--pcap-in", "a", "--pcap-out", "b", "--vcd-window", "7"]) == 1
    assert "--vcd-window takes START:END" in capsys.readouterr().err
