"""LiteEth's UDP echo, the reference our stack is compared with: its latency bench in migen's
simulator and its SoC's Verilog (no place and route here)."""

import os

import pytest

pytest.importorskip("liteeth")
pytest.importorskip("litex_boards")

from platforms.litex_soc import liteeth_ref  # noqa: E402


@pytest.mark.slow
def test_echo_latency_is_checked_and_deterministic():
    first = liteeth_ref.measure_liteeth_latency((1, 100), dw=64)
    assert [r["payload_bytes"] for r in first] == [1, 100]
    for r in first:
        # Replies are checked byte for byte inside (check_echo); here the sizes and figures.
        assert r["reply_bytes"] == 42 + r["payload_bytes"]
        assert r["request_bytes"] == max(60, 42 + r["payload_bytes"])
        for key in ("first_in_first_out", "first_in_last_out"):
            assert isinstance(r[key], int) and r[key] > 0
        assert r["first_in_last_out"] >= r["first_in_first_out"]
    again = liteeth_ref.measure_liteeth_latency((1,), dw=64)
    assert again[0] == first[0]


def test_check_echo_rejects_a_wrong_reply():
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    req = liteeth_ref.udp_request(5, 3)
    q = Ether(req)
    good = bytes(Ether(src=q.dst, dst=q.src) / IP(src=q[IP].dst, dst=q[IP].src)
                 / UDP(sport=q[UDP].dport, dport=q[UDP].sport, chksum=0)
                 / bytes(q[UDP].payload)[:5])
    liteeth_ref.check_echo(req, good)
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(AssertionError):
        liteeth_ref.check_echo(req, bytes(bad))
    bad = bytearray(good)
    bad[24] ^= 1                      # IPv4 header checksum
    with pytest.raises(AssertionError):
        liteeth_ref.check_echo(req, bytes(bad))


def test_soc_elaborates_for_versa(tmp_path):
    report = liteeth_ref.build_liteeth_reference("versa_ecp5", str(tmp_path), run_tools=False)
    gateware = tmp_path / "gateware"
    verilog = gateware / "apiary_soc.v"
    assert verilog.exists() and (gateware / "apiary_soc.lpf").exists()
    text = verilog.read_text()
    # LiteEth's UDP RX and TX, and the IP, ARP and ICMP layers under them.
    for name in ("liteethudprx", "liteethudptx", "_ip_tx", "_ip_rx", "_arp_table", "_icmp_"):
        assert name in text, name
    assert "LUT4s" not in report.markdown()          # no tools were run
    assert report.width == liteeth_ref.DEFAULT_DW == 8
    assert os.path.exists(tmp_path / "report.json")


def test_unknown_board():
    with pytest.raises(ValueError, match="unknown LiteX board"):
        liteeth_ref.build_liteeth_reference("nope", "/nonexistent", run_tools=False)
