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


def test_impairment_options_are_checked(capsys):
    for option, value in (("--loss", "1.5"), ("--reorder", "-0.1"), ("--duplicate", "2")):
        assert main(["sim", LOOPBACK, "--pcap-in", "a", "--pcap-out", "b", option, value]) == 1
        err = capsys.readouterr().err
        assert err == f"apiary sim: {option} must be a probability from 0 to 1, not " \
                      f"{float(value)}\n"
    assert main(["sim", LOOPBACK, "--tap", "t0", "--loss", "lots"]) == 2     # argparse
    assert "argument --loss: invalid float value: 'lots'" in capsys.readouterr().err


def test_pcap_through_an_impaired_link(tmp_path, capsys):
    frames = [Ether(dst="02:00:00:00:00:02") / IP(dst="10.0.0.2") / UDP(dport=7) / bytes(n)
              for n in (18, 40, 60)]
    wrpcap(str(tmp_path / "in.pcap"), frames)
    pysim = ["--backend", "pysim", "--width", "64"]

    def sim(out, *options):
        assert main(["sim", LOOPBACK, "--pcap-in", str(tmp_path / "in.pcap"), "--pcap-out",
                     str(tmp_path / out), *pysim, *options]) == 0
        return rdpcap(str(tmp_path / out)), capsys.readouterr().out

    out, text = sim("lost.pcap", "--loss", "1.0")
    assert len(out) == 0 and "3 frames in, 0 frames out" in text
    assert "impaired: to design: 3 frames, 3 lost, 0 reordered, 0 duplicated; " \
           "from design: 0 frames, 0 lost, 0 reordered, 0 duplicated" in text
    # Into the loopback: B B A A C C (the first frame swapped with the second, each twice);
    # out: each copy twice again (swapped with its own twin, which does not show).
    out, text = sim("twice.pcap", "--duplicate", "1", "--reorder", "1", "--seed", "3")
    sent = [bytes(f) for f in frames]
    assert [bytes(p) for p in out] == [sent[i] for i in (1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2)]
    assert "to design: 3 frames, 0 lost, 1 reordered, 3 duplicated; " \
           "from design: 6 frames, 0 lost, 3 reordered, 6 duplicated" in text
