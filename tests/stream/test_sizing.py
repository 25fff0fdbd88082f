"""The BDP sizing calculator against FlexDriver's Tables 2 and 3, and the TCP rings it sizes."""

import math

import pytest

from apiary.stream.sizing import (KiB, MiB, LinkSizing, flexdriver_memory, main, pow2_at_least,
                                  ring_bytes, software_memory)
from beehive.proto.tcp import TcpConfig


def test_table_2a_as_printed():
    """The paper's Table 2a: 45 Mpps, 1133 / 227 descriptors, 305 / 61 KiB."""
    link = LinkSizing()
    assert round(link.packet_rate / 1e6) == 45
    assert (link.tx_descriptors, link.rx_descriptors) == (1133, 227)
    assert round(link.tx_bdp / KiB) == 305 and round(link.rx_bdp / KiB) == 61
    # Exactly: 100e9 / (276 * 8) packets per second; 312,500 and 62,500 bytes.
    assert link.packet_rate == pytest.approx(100e9 / 2208)
    assert (link.tx_bdp, link.rx_bdp) == (pytest.approx(312_500), pytest.approx(62_500))


def test_table_3_rows_as_printed():
    sw, fld = software_memory(), flexdriver_memory()
    # Software: 64 MiB, 17.7 MiB, 3.5 MiB, 144 KiB, 4 KiB, 2052 B.
    assert sw["tx_rings"] == 64 * MiB
    assert round(sw["tx_buffers"] / MiB, 1) == 17.7
    assert round(sw["rx_buffers"] / MiB, 1) == 3.5
    assert sw["completion_queue"] == 144 * KiB
    assert sw["rx_ring"] == 4 * KiB
    assert sw["producer_indices"] == fld["producer_indices"] == 2052
    # FlexDriver: 32 KiB, 643 KiB, 122 KiB, 33.75 KiB.
    assert round(fld["tx_rings"] / KiB) == 32
    assert round(fld["tx_buffers"] / KiB) == 643
    assert round(fld["rx_buffers"] / KiB) == 122
    assert fld["completion_queue"] == 33.75 * KiB
    # The shrink ratios: x28.2, x29.8, x4.27.
    assert round(sw["tx_buffers"] / fld["tx_buffers"], 1) == 28.2
    assert round(sw["rx_buffers"] / fld["rx_buffers"], 1) == 29.8
    assert round(sw["completion_queue"] / fld["completion_queue"], 2) == 4.27
    assert math.floor(sw["tx_rings"] / fld["tx_rings"]) == 2080


def test_table_3_totals_as_printed():
    """85.3 MiB against 832.7 KiB, x105.

    FlexDriver's 832.7 KiB is the exact sum of its rows. The software total the paper prints,
    85.3 MiB, is the sum of its rows *as printed* (64 + 17.7 + 3.5 MiB + 144 + 4 KiB + 2052 B =
    85.35 MiB); the exact sum of the same rows is 85.40 MiB (89,544,708 bytes), 0.06 % more."""
    sw, fld = software_memory(), flexdriver_memory()
    assert round(fld["total"] / KiB, 1) == 832.7
    assert sw["total"] == 89_544_708
    printed_rows = (64 * MiB + round(sw["tx_buffers"] / MiB, 1) * MiB
                    + round(sw["rx_buffers"] / MiB, 1) * MiB + sw["completion_queue"]
                    + sw["rx_ring"] + sw["producer_indices"])
    assert round(printed_rows / MiB, 1) == 85.3
    assert round(sw["total"] / fld["total"]) == 105


def test_other_links_follow_the_formulas():
    link = LinkSizing(rate_bps=400e9, queues=2048, min_packet=64)
    assert link.packet_rate == pytest.approx(400e9 / (84 * 8))
    assert link.tx_descriptors == math.ceil(400e9 / (84 * 8) * 25e-6)
    sw, fld = software_memory(link), flexdriver_memory(link)
    assert sw["tx_rings"] == 2048 * pow2_at_least(link.tx_descriptors) * 64
    assert fld["rx_buffers"] == 2 * 400e9 * 5e-6 / 8
    assert sw["total"] / fld["total"] > 105          # the gap grows with rate and queues


def test_power_of_two_rounding():
    assert [pow2_at_least(n) for n in (0, 1, 2, 3, 1133, 1024, 1025)] == [
        1, 1, 2, 4, 2048, 1024, 2048]


@pytest.mark.parametrize("rate, rtt", [(1e9, 100e-6), (10e9, 25e-6), (100e9, 25e-6),
                                       (25e9, 1e-3)])
def test_tcp_rings_follow_the_bdp(rate, rtt):
    """``TcpConfig.for_link`` picks f(B * RTT): the smallest power of two at least the BDP."""
    cfg = TcpConfig.for_link(rate, rtt, flows=16)
    bdp = rate * rtt / 8
    assert cfg.rx_ring == cfg.tx_ring == ring_bytes(rate, rtt, at_least=2 * cfg.mss)
    assert cfg.rx_ring >= bdp and (cfg.rx_ring < 2 * bdp or cfg.rx_ring == 4096)
    assert cfg.rx_ring & (cfg.rx_ring - 1) == 0
    assert cfg.link_rate(rtt) >= rate
    assert cfg.flows == 16 and cfg.rx_memory_bytes() == 16 * cfg.rx_ring


def test_tcp_small_bdp_keeps_two_segments():
    cfg = TcpConfig.for_link(1e6, 1e-6, mss=1460)           # 0.125 bytes in flight
    assert cfg.rx_ring == 4096                                # 2 * mss, rounded up


def test_tcp_for_link_errors():
    with pytest.raises(ValueError, match="picks rx_ring"):
        TcpConfig.for_link(1e9, 1e-3, rx_ring=4096)
    with pytest.raises(ValueError, match="more than a ring holds"):
        TcpConfig.for_link(400e9, 1.0)
    with pytest.raises(ValueError, match="rate .* must be a positive number"):
        TcpConfig.for_link(-1, 1e-3)


def test_link_sizing_errors():
    with pytest.raises(ValueError, match="max_packet .* must be at least min_packet"):
        LinkSizing(min_packet=2048, max_packet=1024)
    with pytest.raises(ValueError, match="queues must be a positive integer"):
        LinkSizing(queues=0)


def test_command_line_prints_the_table(capsys):
    main([])
    out = capsys.readouterr().out
    assert "| descriptors N_txdesc / N_rxdesc | 1133 / 227 |" in out
    assert "| total | 85.40 MiB | 832.68 KiB | ×105.0 |" in out
    main(["--rate", "400", "--queues", "2048"])
    assert "| transmit queues N_q | 2048 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--queues", "0"])
