"""`apiary sim DESIGN --pcap-in/--pcap-out` and its errors."""

import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

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


def test_usage_errors_exit_2_with_the_usage(tmp_path, capsys):
    for argv, message in [
            ([], "give either --pcap-in/--pcap-out or --tap"),
            (["--pcap-in", "x.pcap"], "--pcap-in and --pcap-out go together"),
            (["--pcap-in", "a", "--pcap-out", "b", "--vcd-window", "7"],
             "--vcd-window takes START:END in cycles, not '7'"),
            (["--pcap-in", "a", "--pcap-out", "b", "--clock-mhz", "0"],
             "a clock must be above 0 MHz, not 0")]:
        assert main(["sim", LOOPBACK, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("usage: apiary sim ") and message in err, err
        assert "Traceback" not in err


def test_sim_errors_are_one_line(tmp_path, capsys):
    assert main(["sim", LOOPBACK, "--pcap-in", str(tmp_path / "missing.pcap"),
                 "--pcap-out", str(tmp_path / "o.pcap"), "--backend", "pysim"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"apiary sim: no such pcap file: {tmp_path / 'missing.pcap'}"
    assert "Traceback" not in err
    assert main(["sim", LOOPBACK, "--tap", "x" * 20]) == 1
    assert "must be 1 to 15 characters" in capsys.readouterr().err


def test_impairment_options_are_checked(capsys):
    for option, value in (("--loss", "1.5"), ("--reorder", "-0.1"), ("--duplicate", "2")):
        assert main(["sim", LOOPBACK, "--pcap-in", "a", "--pcap-out", "b", option, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: apiary sim ")
        assert err.endswith(f"apiary sim: error: argument {option}: a probability is from 0 "
                            f"to 1, not {value}\n")
    assert main(["sim", LOOPBACK, "--tap", "t0", "--loss", "lots"]) == 2
    assert ("argument --loss: expected a probability from 0 to 1, not 'lots'"
            in capsys.readouterr().err)


def test_bad_option_values_exit_2_naming_the_option_before_any_work(tmp_path, capsys):
    """Each bad value is refused by the parser, with the usage and the option's name, before
    the design is loaded (so before any conversion, build or run: no settings line)."""
    pcap = ["--pcap-in", "a.pcap", "--pcap-out", str(tmp_path / "o.pcap")]
    for options, message in [
            (["--width", "63"], "argument --width: expected 64, 128, 256, 512 (bits), not '63'"),
            (["--max-cycles", "-5"], "argument --max-cycles: must be at least 1, not -5"),
            (["--stall", "1.5"], "argument --stall: a probability is from 0 to 1, not 1.5"),
            (["--pcap-in", "a", "--pcap-out", str(tmp_path / "no" / "o.pcap")],
             f"--pcap-out {tmp_path / 'no' / 'o.pcap'}: no such directory {tmp_path / 'no'}"),
            (["--pcap-in", "a", "--pcap-out", str(tmp_path)],
             f"--pcap-out {tmp_path}: is a directory, not a file"),
            (["--tap", "t0", "--vcd", str(tmp_path)], f"--vcd {tmp_path}: is a directory"),
            (["--tap", "t0", "--idle-hz", "-1"], "argument --idle-hz: must be at least 0, not -1"),
            (["--idle-hz", "1000"], "--idle-hz goes with --tap")]:
        argv = ["sim", ECHO, *(pcap if "--pcap-in" not in options and "--tap" not in options
                                else []), *options]
        assert main(argv) == 2, options
        err = capsys.readouterr().err
        assert err.startswith("usage: apiary sim ") and message in err, err
        assert "udp_echo: width" not in err and "Traceback" not in err
    assert main(["verilog", ECHO, "-o", str(tmp_path / "no" / "echo.v")]) == 2
    assert "-o " + str(tmp_path / "no" / "echo.v") in capsys.readouterr().err


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
    # The second frame lost on the way in and the third of what comes back on the way out,
    # by number.
    out, text = sim("picked.pcap", "--drop-to-design", "2", "--drop-from-design", "2,9")
    assert [bytes(p) for p in out] == [sent[0]]
    assert "to design: 3 frames, 1 lost, 0 reordered, 0 duplicated; " \
           "from design: 2 frames, 1 lost, 0 reordered, 0 duplicated" in text
    for bad in ("0", "two", "1,,2"):
        assert main(["sim", LOOPBACK, "--tap", "t0", "--drop-from-design", bad]) == 2
        assert (f"argument --drop-from-design: expected frame numbers (1 for the first), "
                f"separated by commas, not '{bad}'") in capsys.readouterr().err


ECHO = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "udp_echo.py")


def test_unanswered_frames_are_explained(tmp_path, capsys):
    """Requests the design drops: every counter that moved is printed, by name, and the
    summary says plainly that nothing came back (still exit 0: dropping is a result)."""
    frames = [Ether(dst="02:00:00:00:00:02") / IP(dst="10.0.0.2") / UDP(dport=9) / b"no one",
              Ether(dst="02:00:00:00:00:02") / IP(dst="10.0.0.2") / UDP(dport=9) / b"here",
              Ether(dst="02:00:00:00:00:77") / IP(dst="10.0.0.2") / UDP(dport=7) / b"not us"]
    wrpcap(str(tmp_path / "in.pcap"), frames)
    assert main(["sim", ECHO, "--width", "64", "--backend", "pysim", "--pcap-in",
                 str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "out.pcap")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("3 frames in, 0 frames out to ")
    assert out[1] == "counters that moved:"
    table = {line.split()[0]: line.split()[1] for line in out[4:] if len(line.split()) == 2}
    assert out[2].split() == ["counter", "value"] and set(out[3]) == {"-", " "}
    assert table["udp_rx_no_route"] == "2" and table["eth_rx_not_for_us"] == "1"
    assert "udp_tx_forwarded" not in table              # only counters that moved
    assert out[-1] == ("no frame answered: the design sent nothing back for 3 frames in; "
                       "see the counters above")


def test_answered_frames_print_no_such_line(tmp_path, capsys):
    wrpcap(str(tmp_path / "in.pcap"), [Ether(dst="02:00:00:00:00:02") / (b"x" * 50)])
    assert main(["sim", LOOPBACK, "--width", "64", "--backend", "pysim", "--pcap-in",
                 str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "out.pcap")]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "1 frames in, 1 frames out" in out and "no frame answered" not in out
    assert "counters that moved:" in out
    # The run is not silent: off a terminal, one line when it is done.
    assert re.search(r"^simulated \d+ cycles in [\d.]+ s \(pysim\)$", captured.err, re.M)


def test_first_line_says_width_clock_and_back_end(tmp_path, capsys):
    """The clock follows the width unless --clock-mhz is given; both say where they came
    from, and so does the back end. (A broken pcap stops each run right after that line.)"""
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a pcap file at all")
    pcap = ["--pcap-in", str(bad), "--pcap-out", str(tmp_path / "o.pcap")]
    cases = [
        (["--width", "64", "--backend", "pysim"],
         "frame_loopback: width 64 bits (--width), clock 125 MHz (default for 64 bits; "
         "--clock-mhz to change), back end pysim"),
        ([], "udp_echo: width 512 bits (the design's default), clock 250 MHz (default for "
             "512 bits; --clock-mhz to change), back end verilator (default; --backend to "
             "change)"),
        (["--width", "256", "--clock-mhz", "156.25", "--backend", "verilator"],
         "frame_loopback: width 256 bits (--width), clock 156.25 MHz (--clock-mhz), back end "
         "verilator")]
    for options, line in cases:
        assert main(["sim", ECHO if line.startswith("udp_echo") else LOOPBACK, *options,
                     *pcap]) == 1
        err = capsys.readouterr().err.splitlines()
        assert err[0] == line and err[-1].startswith(f"apiary sim: {bad} is not a pcap file")


def test_default_clock_times_the_output_at_125_mhz_for_64_bits(tmp_path, capsys):
    wrpcap(str(tmp_path / "in.pcap"), [Ether(dst="02:00:00:00:00:02") / (b"x" * 50)])
    assert main(["sim", LOOPBACK, "--width", "64", "--backend", "pysim", "--pcap-in",
                 str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "out.pcap")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    cycles, us = re.search(r"in (\d+) cycles \(([\d.]+) us at 125 MHz, pysim\)", first).groups()
    assert float(us) == pytest.approx(int(cycles) * 0.008)          # 8 ns a cycle
    last = rdpcap(str(tmp_path / "out.pcap"))[0]
    assert float(last.time) * 1e9 % 8 == pytest.approx(0, abs=1e-3)


def _model_loaded(pid):
    """Whether process ``pid`` has a Verilator model (a cached ``model.so``) mapped."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "model.so" in f.read()
    except FileNotFoundError:
        return False


def test_ctrl_c_stops_a_verilator_run_at_once_and_the_cache_stays_usable(tmp_path):
    """SIGINT in the middle of a long Verilator run (2,000 frames into an output that stalls
    99 % of cycles: tens of seconds) ends it at once, exit 130 and one line; the model it was
    running is then taken from the cache as it is. "At once" is within 5 s: under 1 s on an idle
    machine, 1.97 s with four processes on two cores (2026-11-30), against the tens of seconds
    the run has left."""
    wrpcap(str(tmp_path / "in.pcap"), [Ether(dst="02:00:00:00:00:02") / (b"x" * 1400)] * 2000)
    out = tmp_path / "out.pcap"
    argv = [sys.executable, "-m", "apiary.cli", "sim", LOOPBACK, "--pcap-in",
            str(tmp_path / "in.pcap"), "--pcap-out", str(out)]
    # SIGINT as a terminal sends it (a background shell's children would ignore it).
    run = subprocess.Popen([*argv, "--stall", "0.99", "--max-cycles", str(10**9)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 600           # a cold cache builds the model first
        while not _model_loaded(run.pid):
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the model never loaded"
            time.sleep(0.05)
        time.sleep(1.0)                             # frames pushed, well into the run
        assert run.poll() is None
        run.send_signal(signal.SIGINT)
        sent = time.monotonic()
        stdout, stderr = run.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130 and took < 5.0, (run.returncode, took, stderr)
    assert stderr.splitlines()[-1] == "interrupted" and "Traceback" not in stderr
    assert stdout == "" and not out.exists()        # nothing half-written
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "built " not in again.stderr and "converted " not in again.stderr, again.stderr
    assert again.stdout.startswith("2000 frames in, ") and "eth_tx_frames" in again.stdout
