"""The TCP echo benchmark's report (harness.bench.tcp.render_tcp), from results made up here:
tables for a terminal, Markdown for docs/performance.md, the target judged only at 512 bits,
and the connections-only report (``--connections``) without the traffic tables."""

from harness.bench.tcp import render_tcp


def results(width, cycles_per_request):
    return {
        "design": "tcp_echo", "width": width, "clock_mhz": 125.0, "simulator": "Verilator 5",
        "setup": {"syn_to_synack": 95, "syn_to_first_echo": 299},
        "latency": {"requests": 5, "min": 190, "median": 190, "max": 190},
        "rates": [{"flows": n, "requests": 20 * n, "resent": 0, "rounds": 20,
                   "cycles_per_request": cycles_per_request} for n in (1, 16, 32)],
        "bulk": [{"flows": 8, "segment_bytes": 1460, "bytes_per_cycle": 2.63, "resent": 254}],
        "setup_rate": {"connections": 32, "opened": 32, "window": 8, "cycles": 1000,
                       "cycles_per_connection": 31.25, "resent": 3},
        "held": {"connections": 32, "window": 16, "payload_bytes": 64, "cycles": 2000,
                 "cycles_per_request": 62.5, "resent": 1},
    }


def test_text_fits_a_terminal():
    text = render_tcp(results(64, 56.06))
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "|" not in text and "**" not in text
    assert "no target at 64 bits" in text and "missed" not in text


def test_the_target_is_judged_at_512_bits_in_bold_only_in_markdown():
    assert "≤ 20: missed" in render_tcp(results(512, 56.06))
    assert "≤ 20: met" in render_tcp(results(512, 17.05))
    md = render_tcp(results(512, 56.06), "markdown", "apiary bench x.py --tcp")
    assert md.startswith("Measured by `apiary bench x.py --tcp`. TCP echo benchmark of "
                         "'tcp_echo': 512-bit data plane at 125 MHz")
    assert "| 32 | 640 | 0 | 56.06 | 2229 | 93.7 (2,666 kreq/s) | ≤ 20: **missed** |" in md


def test_the_set_up_rate_is_cycles_per_connection_and_connections_per_second():
    md = render_tcp(results(512, 17.05), "markdown")
    # 1,000 cycles for 32 connections: 31.25 cycles each, 4.00 M connections/s at 125 MHz.
    assert "| 32 (32) | 1000 | 31.25 | 4.00 M | 3 |" in md


def test_the_connections_held_table_and_the_connections_only_report():
    md = render_tcp(results(512, 17.05), "markdown")
    # 2,000 cycles for 32 requests: 62.50 cycles each, 2,000 kreq/s at 125 MHz.
    assert "| 32 | 2000 | 62.50 | 2000 | 1 |" in md
    only = dict(results(512, 17.05), setup=None, latency=None, rates=[], bulk=[])
    md = render_tcp(only, "markdown")
    assert "| 32 (32) | 1000 | 31.25 | 4.00 M | 3 |" in md and "| 32 | 2000 |" in md
    assert "Request rate" not in md and "Latency" not in md and "Bulk" not in md


def test_the_sink_report_gives_goodput_beside_the_link_bound():
    from harness.bench.sink import link_bound, render_sink
    run = {"flows": 1, "segment_bytes": 1460, "bytes": 1 << 20, "bytes_per_cycle": 50.004,
           "resent": 2, "link_bound": link_bound(1460, 512)}
    res = {"design": "tcp_sink", "width": 512, "clock_mhz": 250.0, "simulator": "Verilator 5",
           "sink": [run]}
    text = render_sink(res, "markdown", "apiary bench examples/tcp_sink.py --tcp")
    # 1460 bytes in 24 words of 64 bytes: 60.83 bytes a cycle at most; figures rounded down.
    assert "| 1 | 1460 | 1,048,576 | 50.00 | 100.00 | 60.83 | 121.66 | 2 |" in text
    assert "every byte read by the sink" in text
