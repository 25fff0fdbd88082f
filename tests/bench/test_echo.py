"""`apiary bench DESIGN`: the UDP echo benchmark (harness.bench.echo), on the 64-bit echo design
with few packets, on Verilator. Its latency and rate are checked against direct open_sim runs."""

import json
import pathlib
import types

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from harness.bench import echo
from apiary.cli import main
from apiary.load import load_design
from apiary.sim import Frame, open_sim
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]
ECHO = str(ROOT / "examples" / "udp_echo.py")
LOOPBACK = str(ROOT / "examples" / "frame_loopback.py")
WIDTH = 64
PACKETS = 150                 # enough for 1-byte requests back to back to overflow Ethernet RX


def udp(payload, ident=0):
    """A request built here, independently of the bench: padded to 60 bytes as on a wire."""
    frame = bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:09")
                  / IP(src="10.0.0.9", dst="10.0.0.2", id=ident) / UDP(sport=5555, dport=7)
                  / payload)
    return frame.ljust(60, b"\0")


@pytest.fixture(scope="module")
def design():
    return load_design(ECHO, width=WIDTH)


@pytest.fixture(scope="module")
def results(design):
    return echo.run_bench(design, sizes=[1, 64], packets=PACKETS, clock_mhz=125.0,
                          latency_requests=3)


@pytest.mark.slow
def test_latency_matches_a_direct_simulation(design, results):
    frame = udp(b"!")
    with open_sim(design, "verilator") as sim:
        sim.send(frame)
        sim.run()
        sent, = sim.sent()
        reply, = sim.received()
    assert reply.data == echo_reply(frame)[0]
    lat = results["latency"]
    assert lat["payload_bytes"] == 1 and lat["request_bytes"] == 60 and lat["reply_bytes"] == 43
    for key, value in [("first_in_last_out", reply.cycle_last - sent.cycle_first),
                       ("first_in_first_out", reply.cycle_first - sent.cycle_first),
                       ("last_in_first_out", reply.cycle_first - sent.cycle_last)]:
        stats = lat[key]
        assert stats["min"] == stats["median"] == stats["max"] == value, key
        assert stats["values"] == [value] * 3
    # An idle design answers every request in the same time; the words in and out add up.
    assert lat["first_in_last_out"]["min"] > lat["first_in_first_out"]["min"] > \
        lat["last_in_first_out"]["min"] > 0


def test_rate_matches_a_direct_simulation(design, results):
    row, = [r for r in results["throughput"] if r["payload_bytes"] == 64]
    frames = [udp(bytes([i]) * 64, i) for i in range(20)]
    with open_sim(design, "verilator") as sim:
        sim.send_many(frames)
        sim.run()
        sent, got = sim.sent(), sim.received()
    assert [g.data for g in got] == [echo_reply(f)[0] for f in frames]
    out = (got[-1].cycle_last - got[0].cycle_last) / (len(got) - 1)
    offered = (sent[-1].cycle_first - sent[0].cycle_first) / (len(sent) - 1)
    assert row["cycles_per_packet"] == out
    assert row["offered_cycles_per_packet"] == offered == -(-106 // (WIDTH // 8))


def test_throughput_figures_are_consistent(results):
    assert results["width"] == WIDTH and results["link_gbps"] == WIDTH * 125 / 1000
    for row in results["throughput"]:
        cpp = row["cycles_per_packet"]
        assert cpp > 0
        assert cpp >= row["offered_cycles_per_packet"] >= row["words_in"]
        assert row["mpps"] == pytest.approx(125.0 / cpp)
        assert row["gbps_frames"] == pytest.approx(row["mpps"] * row["reply_bytes"] * 8 / 1000)
        assert row["gbps_payload"] == pytest.approx(row["mpps"] * row["payload_bytes"] * 8 / 1000)
        assert row["link_fraction"] == pytest.approx(row["gbps_frames"] / results["link_gbps"])
        assert 0 < row["link_fraction"] <= 1
        # Every request is either echoed or counted as dropped.
        assert row["echoed"] + sum(row["dropped"].values()) == row["packets"] == PACKETS
        # The design keeps pace, with no drop, when requests come no faster than it echoes them.
        assert row["zero_drop_spacing"] == pytest.approx(cpp, abs=1)
        assert row["idle_latency"] >= results["latency"]["first_in_last_out"]["min"]
    tiny, = [r for r in results["throughput"] if r["payload_bytes"] == 1]
    # 8 words in, more than 8 out: Ethernet RX's buffer fills, and says so (not "oversized").
    assert set(tiny["dropped"]) == {"eth_rx_buffer_full"}, tiny["dropped"]


def test_trace_accounts_for_the_latency(design, results):
    trace = echo.trace_messages(design, [udp(b"!")], 120)
    (first, _), = trace["mac_rx"]
    (_, last), = trace["mac_tx"]
    assert last - first == results["latency"]["first_in_last_out"]["min"]
    # The request crosses every tile of the echo path, once.
    for tile in ("eth_rx.out", "ip_rx.in", "udp_rx.in", "echo.in", "udp_tx.in", "ip_tx.in",
                 "eth_tx.in"):
        assert len(trace[tile]) == 1, tile
    assert trace["arp.in"] == [] and trace["icmp.in"] == []


def test_render(results):
    text = echo.render(results)
    md = echo.render(results, "markdown", "apiary bench x.py")
    assert "first word in → last word out" in text and "cycles/packet" in text
    assert "cycles/packet out" in md
    assert md.startswith("Measured by `apiary bench x.py`.")
    assert "| UDP payload (B) |" in md and "| 64 | 106 / 106 |" in md
    assert json.loads(echo.render(results, "json"))["latency"] == results["latency"]


def test_text_fits_a_terminal_and_markdown_keeps_its_tables(results):
    text = echo.render(results)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "|" not in text and "**" not in text
    md = echo.render(results, "markdown", "apiary bench x.py")
    assert max(len(line) for line in md.splitlines()) > 100      # one row per line
    assert [line.startswith("|---|") for line in md.splitlines()].count(True) == 2


def test_targets_are_judged_only_at_512_bits(results):
    """The targets are for 512 bits: at 64 bits none is judged; at 512 the verdict shows, in
    bold only in Markdown."""
    for fmt in ("text", "markdown"):
        out = echo.render(results, fmt)
        assert "no target at 64 bits" in out
        assert ": met" not in out and "missed" not in out
    at512 = json.loads(json.dumps(results))
    at512["width"] = 512
    text, md = echo.render(at512), echo.render(at512, "markdown")
    assert "no target" not in text and "no target" not in md
    worst = results["latency"]["first_in_last_out"]["max"]        # 64 bits' cycles, judged
    assert f"≤ 40: {'met' if worst <= 40 else 'missed'}" in text
    assert "≤ 4 cycles: missed" in text and "**" not in text
    assert "≤ 4 cycles: **missed**" in md


def test_a_wrong_reply_is_an_error():
    sim = types.SimpleNamespace(design=types.SimpleNamespace(name="d"))
    frames = [b"a" * 60, b"b" * 60]
    good = [Frame(b"A" * 60, 0, 0), Frame(b"B" * 60, 1, 1)]
    assert [j for j, _ in echo._match(frames, [b"A" * 60, b"B" * 60], good, sim)] == [0, 1]
    assert [j for j, _ in echo._match(frames, [b"A" * 60, b"B" * 60], good[1:], sim)] == [1]
    with pytest.raises(echo.BenchError, match="reply 1 of 2 .* not the echo"):
        echo._match(frames, [b"A" * 60, b"B" * 60], [good[0], Frame(b"C" * 60, 1, 1)], sim)
    with pytest.raises(echo.BenchError, match="not the echo"):        # out of order
        echo._match(frames, [b"A" * 60, b"B" * 60], good[::-1], sim)


# -- the command line ----------------------------------------------------------------------

def test_cli_prints_the_tables(capsys):
    assert main(["bench", ECHO, "--width", "64", "--sizes", "64", "--packets", "5"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "UDP echo benchmark of 'udp_echo': 64-bit data plane at 125 MHz" in out
    assert "first word in → last word out (Beehive's" in out
    assert "cycles/packet" in out and "13.58 cycles (18.4 Mpps)" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert captured.err.splitlines()[0] == (
        "udp_echo: width 64 bits (--width), clock 125 MHz (default for 64 bits; --clock-mhz to "
        "change), back end verilator")


def test_cli_json_and_markdown(capsys):
    assert main(["bench", "--width", "64", ECHO, "--sizes", "64", "--packets", "5",
                 "--clock-mhz", "250", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["width"] == 64 and res["clock_mhz"] == 250 and res["packets"] == 5
    assert [r["payload_bytes"] for r in res["throughput"]] == [64]
    assert res["latency"]["first_in_last_out"]["min"] > 0
    assert main(["bench", ECHO, "--width", "64", "--sizes", "64", "--packets", "5",
                 "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith(f"Measured by `apiary bench {ECHO} --width 64 --sizes 64 --packets 5 "
                         f"--clock-mhz 125 --markdown`.")
    assert "|---|" in md


def test_cli_sets_design_parameters_and_checks_against_the_designs_own_model(capsys):
    """``--set`` after DESIGN reaches the design function; a design whose UDP checksums are not
    verified (its replies carry checksum 0) is measured against the model with that setting."""
    assert main(["bench", ECHO, "--width", "64", "--set", "verify_checksums=False",
                 "--set", "ip_options=False", "--sizes", "64", "--packets", "4", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["echoed"] for r in res["throughput"]] == [4]
    assert res["latency"]["first_in_last_out"]["min"] > 0


def test_cli_rejects_a_design_that_does_not_echo(capsys):
    assert main(["bench", LOOPBACK, "--sizes", "64", "--packets", "4"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()         # what was chosen, any build, then the error
    assert lines[0].startswith("frame_loopback: width 64 bits (the design's default), "
                               "clock 125 MHz")
    message = lines[-1]
    assert message.startswith("apiary bench: design 'frame_loopback' is not a UDP echo on port 7")
    assert "sent the request back unchanged" in message


def test_cli_usage_errors(capsys):
    for argv, message in [
            (["--packets", "1"], "argument --packets: must be at least 2"),
            (["--sizes", "2000"], "argument --sizes: payload sizes must be from 0 to 1472"),
            (["--sizes", "x"], "argument --sizes: expected comma-separated byte counts"),
            (["--clock-mhz", "-5"], "argument --clock-mhz: a clock must be above 0 MHz"),
            (["--frobnicate"], "unrecognized arguments: --frobnicate"),
            (["--connections"], "--connections is an option of the TCP benchmark")]:
        assert main(["bench", ECHO, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("usage: apiary bench") and message in err, err
    assert main(["bench", "--json", "noc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: apiary bench") and "options of `apiary bench noc` go after" in err
