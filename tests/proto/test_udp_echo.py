"""The UDP echo design (examples/udp_echo.py) against scapy and the Python model of the stack:
ARP, ping, UDP echo for every payload size at both widths, VLAN tags, IP options, and a
bad-input suite in which every malformed frame is dropped and counted where the model says,
with a good request right behind it that is still echoed.

Verilator runs the long sweeps; Amaranth's simulator runs the protocol mix too, and both back
ends must give the same frames on the same cycles.
"""

import pathlib
import random
import struct
from collections import Counter

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from apiary.load import load_design
from apiary.stream.checksum import internet_checksum
from apiary.sim import open_sim
from beehive.model import echo_reply

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAC, IPV4 = "02:00:00:00:00:02", "10.0.0.2"
PEER_MAC, PEER_IP = "52:54:00:12:34:56", "10.0.0.1"
#: The 512-bit tests share one Verilator model (tests/proto/test_pcaps.py's too): one xdist
#: worker builds it (--dist loadgroup).
W512 = pytest.param(512, marks=pytest.mark.xdist_group("udp512"), id="512")
SLOW_W512 = pytest.param(512, marks=[pytest.mark.slow, *W512.marks], id="512")
WIDTHS = [64, W512]


def echo_design(**overrides):
    return load_design(str(ROOT / "examples" / "udp_echo.py"), **overrides)


def udp(payload, sport=40000, dport=7, **ip):
    return Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4, **ip) / UDP(
        sport=sport, dport=dport) / payload


def ping(payload=b"abcdefgh", seq=1, **ip):
    return Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4, **ip) / ICMP(
        id=0x4242, seq=seq) / payload


def arp_request(pdst=IPV4, op=1):
    return Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER_MAC) / ARP(
        op=op, hwsrc=PEER_MAC, psrc=PEER_IP, pdst=pdst)


def exchange(sim, frames, batch=16):
    """Send ``frames`` a batch at a time (so that the input never outruns the buffers), each
    batch run to idle; return every reply in order."""
    for k in range(0, len(frames), batch):
        sim.send_many(frames[k:k + batch])
        sim.run()
    return [f.data for f in sim.received(clear=True)]


def expected(frames, **design):
    """The model's replies to ``frames`` and its count of each counter, for the design built
    with ``design`` (``ip_options``, ``verify_checksums``)."""
    results = [echo_reply(bytes(f), **design) for f in frames]
    replies = [r for r, _ in results if r is not None]
    return replies, Counter(c for _, c in results)


def assert_counters(sim, counts):
    got = sim.counters()
    for name, count in counts.items():
        assert got.get(name) == count, f"{name}: {got.get(name)} != {count} (model)"


def test_design_is_checked_and_drawn():
    from apiary.show import render_svg
    design = echo_design()
    design.check()
    svg = render_svg(design)
    for tile in ("eth_rx", "ip_rx", "udp_rx", "echo", "udp_tx", "ip_tx", "eth_tx", "arp", "icmp"):
        assert tile in svg
    other = echo_design(width=64, mac="02:00:00:00:00:09", ipv4="192.168.7.2")
    assert other.settings == {"mac": "02:00:00:00:00:09", "ipv4": "192.168.7.2",
                              "verify_checksums": True, "low_latency": False}


def test_cli_checks_and_draws_it(tmp_path, capsys):
    from apiary.cli import main
    script = str(ROOT / "examples" / "udp_echo.py")
    assert main(["check", script]) == 0
    assert "udp_echo" in capsys.readouterr().out
    svg = tmp_path / "echo.svg"
    assert main(["show", script, "-o", str(svg)]) == 0
    assert "eth_rx" in svg.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_udp_echo_every_payload_size(width):
    """Payloads of 0 to 1472 bytes (the most a 1500-byte MTU carries), each echoed intact."""
    rng = random.Random(width)
    frames = [udp(rng.randbytes(n), sport=1024 + n) for n in range(1473)]
    replies, counts = expected(frames)
    assert len(replies) == len(frames)
    with open_sim(echo_design(width=width), "verilator") as sim:
        got = exchange(sim, frames, batch=24)
        assert got == replies
        assert_counters(sim, counts)
        assert sim.counters()["eth_tx_forwarded"] == len(frames)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_udp_echo_payload_sizes_on_amaranth_simulator(width):
    """The same sweep on Amaranth's simulator, over a spread of sizes (every one would take
    minutes there; Verilator runs them all above, and the two back ends are compared cycle for
    cycle below)."""
    sizes = sorted({0, 1, 7, 8, 9, 63, 64, 65, 1471, 1472, *range(0, 1473, 97)})
    rng = random.Random(width + 3)
    frames = [udp(rng.randbytes(n), sport=3000 + n) for n in sizes]
    replies, counts = expected(frames)
    with open_sim(echo_design(width=width), "pysim", idle_cycles=250) as sim:
        sim.send_many(frames)
        sim.run()
        assert [f.data for f in sim.received()] == replies
        assert_counters(sim, counts)


def protocol_mix():
    rng = random.Random(5)
    return [
        arp_request(),
        arp_request(pdst="10.0.0.77"),                      # another host: no reply
        ping(),
        ping(rng.randbytes(56), seq=2),                     # what ping sends by default
        ping(b"", seq=3),
        udp(b"hello"),
        udp(b""),
        udp(rng.randbytes(100), sport=5353),
        udp(rng.randbytes(65), ihl=7, options=b"\x01" * 8),  # IP options (NOPs) are skipped
        udp(rng.randbytes(30), ihl=15, options=b"\x01" * 40),   # the longest IPv4 header
        Ether(dst=MAC, src=PEER_MAC) / Dot1Q(vlan=42, prio=5) / IP(src=PEER_IP, dst=IPV4)
        / UDP(sport=777, dport=7) / b"tagged",             # the reply keeps the tag
        Ether(dst=MAC, src=PEER_MAC) / Dot1Q(vlan=7) / IP(src=PEER_IP, dst=IPV4)
        / ICMP(id=1, seq=1) / b"tagged ping",
        Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER_MAC) / Dot1Q(vlan=9) / ARP(
            op=1, hwsrc=PEER_MAC, psrc=PEER_IP, pdst=IPV4),
    ]


def zero_checksum_udp(payload):
    frame = bytearray(bytes(udp(payload)))
    frame[14 + 20 + 6:14 + 20 + 8] = b"\0\0"                # "no checksum"
    return bytes(frame)


@pytest.mark.parametrize("width", [64, SLOW_W512])
def test_protocol_mix_on_both_backends(width):
    """ARP, ping, UDP, IP options and VLAN tags: replies equal the model's byte for byte, and
    both back ends give the same frames on the same cycles."""
    frames = protocol_mix() + [zero_checksum_udp(b"no checksum here")]
    replies, counts = expected(frames)
    assert counts["arp_forwarded"] == 2 and counts["icmp_forwarded"] == 4
    runs = {}
    for backend in ("pysim", "verilator"):
        with open_sim(echo_design(width=width), backend, idle_cycles=300) as sim:
            sim.send_many(frames)
            sim.run()
            got = sim.received()
            # Different protocols take different paths, so replies may overtake each other.
            assert sorted(f.data for f in got) == sorted(replies)
            assert_counters(sim, counts)
            runs[backend] = [(f.data, f.cycle_first, f.cycle_last) for f in got]
    assert runs["pysim"] == runs["verilator"]


def test_without_ip_options_support():
    """``ip_options=False`` (IPv4 RX without options, for small boards): the protocol mix's two
    datagrams with options are dropped and counted in ``ip_rx_options``, and every other frame
    gets the model's reply (Amaranth's simulator, 64 bits)."""
    frames = protocol_mix()
    with_options = [f for f in frames if IP in f and f[IP].ihl and f[IP].ihl > 5]
    assert len(with_options) == 2
    replies, counts = expected([f for f in frames if f not in with_options])
    design = echo_design(width=64, ip_options=False)
    assert design.tiles["ip_rx"].cls_name == "Ipv4RxNoOptionsTile"
    with open_sim(design, "pysim", idle_cycles=300) as sim:
        sim.send_many(frames)
        sim.run()
        assert sorted(f.data for f in sim.received()) == sorted(replies)
        assert_counters(sim, counts)
        assert sim.counters()["ip_rx_options"] == 2


def test_the_25f_stack_checks_no_udp_or_icmp_checksum():
    """The Colorlight's design as the board builds it (``colorlight_5a_75b``: no IP options,
    checksums not verified, and its design settings: router FIFOs in registers, one packet
    decided ahead per layer, 11-bit lengths, no 802.1Q tags, no input register queues): a
    UDP datagram or ping with a
    wrong checksum is answered like any other, the UDP reply with checksum 0 and the ICMP
    reply with the request's checksum updated (still wrong, so the sender sees it), and no
    checksum counter exists; the tagged frames are dropped and counted in
    ``eth_rx_no_route``; a 1,472-byte datagram (a full 1,514-byte frame) is echoed; every
    other frame gets the model's reply (Amaranth's simulator, 64 bits)."""
    from platforms import resolve
    target = resolve("colorlight_5a_75b")
    defaults = target.design_defaults()
    assert defaults["ip_options"] is False and defaults["verify_checksums"] is False
    design = load_design(str(ROOT / "examples" / "udp_echo.py"), defaults=defaults)
    given = target.apply_design_settings(design)
    assert given == {"router_depth": 2, "header_queue_depth": 1, "max_message_bytes": 2047,
                     "vlan": False, "registered_inputs": False}
    assert design.width == 64 and design.settings["verify_checksums"] is False
    options = dict(ip_options=False, verify_checksums=False, vlan=False)
    good = bytes(udp(b"0123456789abcdef"))
    bad_udp = patch(good, 14 + 20 + 6, b"\xbe\xef")
    bad_ping = patch(bytes(ping()), 14 + 20 + 2, b"\x00\x01")
    full = bytes(udp(random.Random(3).randbytes(1472)))
    assert len(full) == 1514
    frames = protocol_mix() + [zero_checksum_udp(b"no checksum here"), bad_udp, bad_ping, full]
    replies, counts = expected(frames, **options)
    assert counts["udp_rx_forwarded"] == 6 and counts["icmp_forwarded"] == 4
    assert counts["eth_rx_no_route"] == 3
    by_request = {bytes(f): echo_reply(bytes(f), **options)[0] for f in (bad_udp, bad_ping)}
    assert Ether(by_request[bad_udp])[UDP].chksum == 0
    assert Ether(by_request[bad_udp])[UDP].load == b"0123456789abcdef"
    assert internet_checksum(bytes(Ether(by_request[bad_ping])[ICMP])) != 0
    with open_sim(design, "pysim", idle_cycles=300) as sim:
        sim.send_many(frames)
        sim.run()
        assert sorted(f.data for f in sim.received()) == sorted(replies)
        assert_counters(sim, counts)
        got = sim.counters()
        assert "udp_rx_bad_checksum" not in got and "icmp_bad_checksum" not in got
        assert got["ip_rx_options"] == 2


def with_ip(frame, **changes):
    """``frame`` (an Ether/IP packet) rebuilt with IPv4 header fields changed and every
    checksum recomputed, unless a checksum is among the changes."""
    pkt = Ether(bytes(frame))
    for key, value in changes.items():
        setattr(pkt[IP], key, value)
    if "chksum" not in changes:
        del pkt[IP].chksum
    for layer in (UDP, ICMP):
        if layer in pkt:
            del pkt[layer].chksum
    return bytes(pkt)


def with_udp_length(frame, length):
    """``frame`` (Ether/IPv4 without options/UDP) with the UDP length field set to ``length``
    and the checksum recomputed as a receiver checks it: the pseudo-header carries the field."""
    frame = bytearray(bytes(frame))
    start = 14 + 20
    frame[start + 4:start + 8] = struct.pack("!HH", length, 0)
    pseudo = frame[26:34] + bytes([0, 17]) + struct.pack("!H", length)
    checksum = internet_checksum(bytes(pseudo + frame[start:])) or 0xFFFF
    frame[start + 6:start + 8] = struct.pack("!H", checksum)
    return bytes(frame)


def patch(frame, offset, data):
    frame = bytearray(bytes(frame))
    frame[offset:offset + len(data)] = data
    return bytes(frame)


def bad_frames():
    rng = random.Random(99)
    good = bytes(udp(b"0123456789abcdef"))
    ip_csum = 14 + 10
    udp_len = 14 + 20 + 4
    frames = {
        "runt": good[:10],
        "only an Ethernet header": good[:14],
        "IPv4 header cut short": good[:30],
        "UDP header cut short": good[:40],
        "oversized frame": bytes(udp(rng.randbytes(1600))),
        "foreign destination MAC": patch(good, 0, b"\x02\x99\x99\x99\x99\x99"),
        "unknown EtherType (IPv6)": patch(good, 12, b"\x86\xdd"),
        "unknown EtherType (local)": patch(good, 12, b"\x88\xb5"),
        "wrong IPv4 checksum": patch(good, ip_csum, b"\x12\x34"),
        "wrong UDP checksum": patch(good, udp_len + 2, b"\xbe\xef"),
        "wrong ICMP checksum": patch(bytes(ping()), 14 + 20 + 2, b"\x00\x01"),
        "IP version 6 in an IPv4 frame": with_ip(good, version=6),
        "IHL below 5": with_ip(good, ihl=4),
        "total length longer than the frame": with_ip(good, len=200),
        "total length shorter than the header": with_ip(good, len=12),
        "total length cuts the UDP datagram": with_ip(good, len=40),
        # The UDP checksum is recomputed with the lying length, so the length check catches it.
        "UDP length longer than the datagram": with_udp_length(udp(b"x" * 20), 40),
        "UDP length shorter than the datagram": with_udp_length(udp(b"x" * 20), 12),
        "UDP length below 8": with_udp_length(udp(b"x" * 20), 4),
        "UDP length lies, checksum kept": patch(bytes(udp(b"x" * 20)), udp_len,
                                                struct.pack("!H", 12)),
        "fragment (more fragments)": with_ip(good, flags="MF"),
        "fragment (offset)": with_ip(good, frag=100),
        "TTL 0": with_ip(good, ttl=0),
        "another destination IP": with_ip(good, dst="10.0.0.99"),
        "unknown protocol (TCP)": bytes(Ether(dst=MAC, src=PEER_MAC)
                                        / IP(src=PEER_IP, dst=IPV4) / TCP(dport=7)),
        "unknown protocol (47)": with_ip(good, proto=47),
        "UDP datagram under 8 bytes": bytes(Ether(dst=MAC, src=PEER_MAC)
                                            / IP(src=PEER_IP, dst=IPV4, proto=17)
                                            / b"\x00\x07\x00\x07"),
        "UDP port with no listener": bytes(udp(b"nobody", dport=9)),
        "ARP reply": bytes(arp_request(op=2)),
        "ARP for another address": bytes(arp_request(pdst="10.0.0.3")),
        "ARP cut short": bytes(arp_request())[:30],
        "ARP for another protocol": patch(bytes(arp_request()), 16, b"\x86\xdd"),
        "ICMP that is not an echo request": bytes(Ether(dst=MAC, src=PEER_MAC)
                                                  / IP(src=PEER_IP, dst=IPV4) / ICMP(type=13)),
        "ICMP cut short": with_ip(bytes(Ether(dst=MAC, src=PEER_MAC) / IP(src=PEER_IP, dst=IPV4)
                                        / b"\x08\x00\xf7\xff"), proto=1),
    }
    for k in range(12):
        frames[f"random bytes {k}"] = rng.randbytes(rng.randrange(1, 300))
    for k in range(4):                      # random bytes behind a valid Ethernet header
        frames[f"random IPv4 {k}"] = good[:14] + rng.randbytes(rng.randrange(1, 120))
    return frames


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_bad_input_is_dropped_counted_and_the_next_request_is_echoed(width):
    cases = bad_frames()
    frames = []
    for k, frame in enumerate(cases.values()):
        frames += [frame, bytes(udp(f"after bad frame {k}".encode(), sport=2000 + k))]
    replies, counts = expected(frames)
    for name, frame in cases.items():
        assert echo_reply(frame)[0] is None, f"{name}: the model answers it"
    # The suite reaches every drop counter of every tile.
    reasons = {echo_reply(frame)[1] for frame in cases.values()}
    assert {"udp_rx_bad_length", "udp_rx_truncated", "udp_rx_bad_checksum", "ip_rx_bad_length",
            "ip_rx_fragment", "ip_rx_bad_checksum", "eth_rx_runt", "eth_rx_oversized",
            "icmp_bad_checksum", "arp_not_request"} <= reasons
    with open_sim(echo_design(width=width), "verilator") as sim:
        got = exchange(sim, frames, batch=2)
        assert got == replies
        assert_counters(sim, counts)
        total_drops = sum(v for k, v in sim.counters().items()
                          if not k.endswith("forwarded") and k.split("_")[0] in
                          ("eth", "ip", "udp", "arp", "icmp"))
        assert total_drops == len(cases)


@pytest.mark.parametrize("width", [64, SLOW_W512])
def test_backpressure_and_gaps_lose_nothing(width):
    """A random mix of requests with the wire holding mac_tx back 30 % of the time and gaps
    between input words: every reply still arrives, intact."""
    rng = random.Random(width + 1)
    makers = [
        lambda: udp(rng.randbytes(rng.randrange(0, 1473)), sport=rng.randrange(1, 65536)),
        lambda: ping(rng.randbytes(rng.randrange(0, 1000)), seq=rng.randrange(65536)),
        lambda: arp_request(),
        lambda: Ether(dst=MAC, src=PEER_MAC) / Dot1Q(vlan=rng.randrange(4096)) / IP(
            src=PEER_IP, dst=IPV4) / UDP(sport=9999, dport=7) / rng.randbytes(rng.randrange(200)),
    ]
    frames = [rng.choice(makers)() for _ in range(300)]
    replies, counts = expected(frames)
    with open_sim(echo_design(width=width), "verilator", seed=width, stall=0.3,
                  gaps=0.3) as sim:
        got = exchange(sim, frames, batch=8)
        assert sorted(got) == sorted(replies)
        assert_counters(sim, counts)


def mutate(frame, rng):
    """``frame`` with a few random bytes changed, or cut short, or extended with junk."""
    frame = bytearray(frame)
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.randrange(1, 4)):
            frame[rng.randrange(len(frame))] = rng.randrange(256)
    elif kind == 1:
        frame = frame[:rng.randrange(1, len(frame))]
    elif kind == 2:
        frame += rng.randbytes(rng.randrange(1, 64))
    else:                           # a byte in the headers, where parsing decides
        frame[rng.randrange(min(len(frame), 60))] ^= 1 << rng.randrange(8)
    return bytes(frame)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_mutated_requests_match_the_model(width):
    """Valid requests with random corruption: the design answers exactly what the model does
    and counts every frame where the model does, and never wedges."""
    rng = random.Random(width * 7)
    makers = [
        lambda: udp(rng.randbytes(rng.randrange(0, 300))),
        lambda: ping(rng.randbytes(rng.randrange(0, 100))),
        lambda: arp_request(),
        lambda: udp(rng.randbytes(rng.randrange(0, 60)), ihl=6, options=b"\x01" * 4),
        lambda: Ether(dst=MAC, src=PEER_MAC) / Dot1Q(vlan=3) / IP(src=PEER_IP, dst=IPV4)
        / UDP(sport=5, dport=7) / rng.randbytes(rng.randrange(0, 80)),
    ]
    frames = [mutate(bytes(rng.choice(makers)()), rng) for _ in range(600)]
    replies, counts = expected(frames)
    with open_sim(echo_design(width=width), "verilator") as sim:
        got = exchange(sim, frames, batch=4)
        assert sorted(got) == sorted(replies)
        assert_counters(sim, counts)
        sim.send(udp(b"still alive"))
        sim.run()
        assert [f.data for f in sim.received()] == [echo_reply(bytes(udp(b"still alive")))[0]]
