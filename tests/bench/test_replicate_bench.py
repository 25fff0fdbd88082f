"""The replication benchmark (harness.bench.replicate), small: 1 and 2 copies at 64 bits on
Verilator, 40 requests each (few enough that none is dropped). Every reply comes back, the
copies share the load as the hash says, two copies echo more packets per cycle than one, and
neither beats the bound of the shared tiles."""

import pytest
from scapy.layers.inet import IP

from harness.bench import replicate
from harness.bench.echo import request
from beehive.nf.balancer import flow_tuple, hash_replica
from beehive.proto.addresses import ipv4_to_int

PACKETS = 40


def test_bounds():
    """A 64-byte payload: a 106-byte frame (14 words at 64 bits, 2 at 512); Ethernet RX's
    message is the 92-byte IPv4 packet behind a header and the Ethernet level's metadata:
    2 + 2 + 12 flits at 64 bits, 1 + 0 + 1 at 512 (the metadata and the packet's first 37
    bytes ride in the header flit)."""
    assert replicate.bounds(64) == {"mac": 14, "shared": 16}
    assert replicate.bounds(512) == {"mac": 2, "shared": 2}


@pytest.fixture(scope="module")
def rows():
    return replicate.replicate_table((64,), (1, 2), packets=PACKETS)


@pytest.mark.slow
def test_two_copies_echo_more_packets_per_cycle_than_one(rows):
    one, two = rows
    assert (one["copies"], two["copies"]) == (1, 2)
    for r in rows:
        assert r["echoed"] == PACKETS and r["dropped"] == {}      # every reply, checked
        assert r["cycles_per_packet"] >= r["bound_shared"]         # no copy count beats it
    # One stack: W + 5 (64-bit headers pipelined, Ethernet-level messages 2 metadata flits).
    assert one["cycles_per_packet"] == 19
    assert two["packets_per_cycle"] > one["packets_per_cycle"]
    assert two["speedup"] == one["cycles_per_packet"] / two["cycles_per_packet"] > 1
    # The load balancer sent each request to the copy its 4-tuple hashes to.
    want = [0, 0]
    for seq in range(PACKETS):
        ip = IP(request(64, seq, "02:00:00:00:00:02", "10.0.0.2")[14:])
        flow = flow_tuple(ipv4_to_int(ip.src), ipv4_to_int(ip.dst), ip.sport, ip.dport)
        want[hash_replica(flow, 2)] += 1
    assert two["per_copy"] == want and one["per_copy"] == [PACKETS]
    table = replicate.render_markdown(rows)
    assert table.count("\n| 64-bit |") == 2
    assert one["clock_mhz"] == 125 and "Rates at 125 MHz." in table    # the 64-bit clock


APP_PACKETS = 24
APP_CYCLES = 16
#: At 64 bits the shared path takes 16 flits a packet: an application of 40 cycles is the
#: bottleneck for one copy and for two (20 cycles a packet each).
APP_CYCLES_64 = 40


@pytest.mark.parametrize("copies", [1, 2, 4])
def test_the_replicated_app_is_deadlock_free(copies):
    """``examples/replicated_app.py`` passes every check (``apiary check``) with 1, 2, 4 copies."""
    from apiary.load import load_design
    d = load_design(str(replicate.APP_DESIGN), width=512, copies=copies, cycles=APP_CYCLES)
    d.check()
    assert [n for n in d.tiles if n.startswith("app_")] == [f"app_{k}" for k in range(copies)]


@pytest.mark.slow
def test_two_copies_of_a_slow_app_echo_twice_the_packets_per_cycle():
    """The application (40 cycles per message) is the bottleneck: one copy echoes a packet
    every 40 cycles, two copies (round robin) at least 1.8 times as many packets per cycle;
    every request gets its reply, checked byte for byte, each copy half of them. 64 bits on
    Verilator (`python -m harness.bench.replicate --app-cycles 16` measures 512 bits)."""
    rows = replicate.replicate_table((64,), (1, 2), packets=APP_PACKETS,
                                     policy="round_robin", app_cycles=APP_CYCLES_64)
    one, two = rows
    for r in rows:
        assert r["echoed"] == APP_PACKETS and r["dropped"] == {}
        assert r["cycles_per_packet"] >= r["bound_shared"]
    assert one["cycles_per_packet"] == APP_CYCLES_64 == one["bound"]
    assert one["per_copy"] == [APP_PACKETS] and two["per_copy"] == [APP_PACKETS // 2] * 2
    assert two["packets_per_cycle"] >= 1.8 * one["packets_per_cycle"]
    table = replicate.render_markdown(rows)
    assert table.count("\n| 64-bit |") == 2 and "application (40 / 2)" in table
