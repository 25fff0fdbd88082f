"""``examples/tcp_sink.py``: the TCP engine with the bulk sink and its receive rings in a
duplex on-chip memory, driven through the whole network stack by the scripted peer.

* fast tier, Amaranth's simulator at 64 bits: a 10,000-byte transfer (30,000 in jumbo
  segments of 8,960 bytes with ``mtu=9000``), sent within the window
  the design advertises, is acknowledged whole and read whole by the sink (its ``bytes``
  counter), then the peer's FIN is answered by the sink's close; nothing dropped;
* fast tier, the layout: the receive tile's notifications to the sink pass through no router
  input that its stores to the receive rings use;
* slow tier, the benchmark's own measurement (:func:`harness.bench.sink.measure_sink`) on the
  512-bit Verilator model: every byte sent is acknowledged and read, the goodput is positive
  and within the link's bound, and the report names the figures.
"""

import pathlib
import sys

import pytest

from apiary.layout import xy_path
from apiary.sim import open_sim
from harness.bench.sink import link_bound, measure_sink, render_sink, sink_tile
from harness.bench.tcp_peer import Peer, seq_add, seq_diff

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_tcp_engine import example  # noqa: E402

tcp_sink = example("tcp_sink")

#: Small: 4 flows of 4 KiB rings at 64 bits.
SMALL = dict(flows=4, ring=4096, rto=20_000, linger=30_000)


def delta(sim, before):
    now = sim.counters()
    return {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}


@pytest.mark.parametrize("mtu, ring, size", [(1500, 4096, 10_000), (9000, 32768, 30_000)])
def test_a_transfer_is_read_whole_and_closed_at_64_bits(mtu, ring, size):
    # mtu=9000: jumbo frames, 8,960-byte segments.
    design = tcp_sink.design(width=64, mtu=mtu, **dict(SMALL, ring=ring))
    assert sink_tile(design) == "tcp_sink"
    mss = mtu - 40
    with open_sim(design, "pysim") as sim:
        before = sim.counters()
        p = Peer(sim, sport=41000, dport=tcp_sink.SINK_PORT)
        synack = p.connect(cycles=300)
        window = synack.tcp.window
        assert window == ring
        assert dict(synack.tcp.options)["MSS"] == mss
        data = bytes(k % 253 for k in range(size))
        base, sent = p.snd_nxt, 0
        for _ in range(200):
            acked = seq_diff(p.snd_una, base) if p.snd_una is not None else 0
            while sent < len(data) and sent + min(mss, len(data) - sent) <= acked + window:
                n = min(mss, len(data) - sent)
                p.send_data(data[sent:sent + n])
                sent += n
            if acked == len(data):
                break
            for s in p.run(100):
                if "A" in s.flags and s.tcp.ack == p.snd_una:
                    window = s.tcp.window
        else:
            pytest.fail(f"only {acked} of {len(data)} bytes acknowledged")
        for _ in range(20):                 # the sink reads what was acknowledged
            p.run(500)
            if delta(sim, before).get("tcp_sink_bytes") == len(data):
                break
        assert delta(sim, before).get("tcp_sink_bytes") == len(data)
        # The peer closes; the sink closes its side, once.
        p.send("FA")
        p.snd_nxt = seq_add(p.snd_nxt, 1)
        for _ in range(20):
            p.run(100)
            if p.fin:
                break
        assert [s.flags for s in p.seen if "F" in s.flags] == ["FA"]
        moved = delta(sim, before)
        assert moved["tcp_sink_connections"] == moved["tcp_sink_closed"] == 1
        assert moved["rx_mem_stores"] == moved["tcp_rx_stored"] >= -(-size // mss)
        assert moved["rx_mem_loads"] == moved["tcp_sink_loads"] >= 1
        assert not {k for k in moved if "dropped" in k or "overflow" in k or "error" in k}, moved


@pytest.mark.slow
def test_the_sink_benchmark_reads_every_byte_at_512_bits():
    design = tcp_sink.design()
    with open_sim(design, "verilator") as sim:
        run = measure_sink(sim, design, "tcp_sink", 1, 1460, 128 * 1024)
    assert run["read"] == run["bytes"] == 128 * 1024
    assert 0 < run["bytes_per_cycle"] <= run["link_bound"] == link_bound(1460, 512)
    text = render_sink({"design": "tcp_sink", "width": 512, "clock_mhz": 250.0,
                        "simulator": "Verilator", "sink": [run]}, "markdown")
    assert f"| 1 | 1460 | 131,072 | {int(run['bytes_per_cycle'])}." in text


def test_the_sink_is_told_of_data_on_no_input_that_carries_the_stores():
    # A notification from the receive tile waits in a router for the sink's port while the sink
    # takes a load's answer; on an input the stores also use it held them behind it (45.05
    # against 54.40 bytes/cycle, docs/performance.md).
    at = {name: (t.x, t.y) for name, t in tcp_sink.design().tiles.items()}
    # Links (a router's output towards the next router's input) on the way.
    stores = xy_path(at["tcp_rx"], at["rx_mem"])
    notifications = xy_path(at["tcp_rx"], at["tcp_sink"])
    assert stores and notifications
    assert not set(stores) & set(notifications)
