"""The design's addresses changed while it runs (beehive/proto/addresses.py): examples/
udp_echo_ctl.py on Verilator at 64 bits, its ARP tile's registers written through its
controller with scapy frames (SimTransport). A new IPv4 address and a new MAC each take effect
from the write on (the old one answered no more, the new one answered, frames leaving from it)
and are announced by gratuitous ARP, twice."""

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from apiary.load import load_design
from apiary.sim import open_sim
from apiary.top import control_map
from beehive.control_client import ControlClient, SimTransport
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC, ipv4_to_int, mac_to_int

CLIENT_MAC, CLIENT_IP = "02:00:00:00:00:01", "10.0.0.1"
NEW_IP, NEW_MAC = "10.0.0.7", "02:00:00:00:00:42"
BROADCAST = "ff:ff:ff:ff:ff:ff"


def echo(mac, ip, payload):
    return Ether(dst=mac, src=CLIENT_MAC) / IP(src=CLIENT_IP, dst=ip) \
        / UDP(sport=5001, dport=7) / payload


def who_has(ip):
    return Ether(dst=BROADCAST, src=CLIENT_MAC) / ARP(op=1, hwsrc=CLIENT_MAC, psrc=CLIENT_IP,
                                                      pdst=ip)


def out(sim, cycles=3000):
    """The frames the design sent in ``cycles`` more cycles, as scapy packets."""
    sim.run(cycles)
    return [Ether(f.data) for f in sim.received(clear=True)]


def announcements(frames):
    return [(f.src, f[ARP].hwsrc, f[ARP].psrc) for f in frames
            if ARP in f and f.dst == BROADCAST and f[ARP].op == 1
            and f[ARP].psrc == f[ARP].pdst]


def echoes(frames):
    return [(f.src, f[IP].src, bytes(f[UDP].payload)) for f in frames
            if UDP in f and f[UDP].sport == 7]


def arp_replies(frames):
    return [(f.src, f[ARP].psrc) for f in frames if ARP in f and f[ARP].op == 2]


@pytest.mark.slow
@pytest.mark.xdist_group("udp_echo_ctl64")   # one model, built once
def test_a_new_address_and_mac_take_effect_at_once_and_are_announced():
    d = load_design("examples/udp_echo_ctl.py", width=64)
    with open_sim(d, "verilator") as sim:
        link = SimTransport(sim)
        client = ControlClient(control_map(d), link)
        assert client.read("arp.ipv4") == ipv4_to_int(DEFAULT_IPV4)
        assert client.read("arp.mac") == mac_to_int(DEFAULT_MAC)
        assert client.read("arp.netmask") == client.read("arp.gateway") == 0
        out(sim)

        client.write("arp.ipv4", ipv4_to_int(NEW_IP))
        link.ip = NEW_IP
        sim.send_many([echo(DEFAULT_MAC, DEFAULT_IPV4, b"old"), who_has(DEFAULT_IPV4),
                       echo(DEFAULT_MAC, NEW_IP, b"new"), who_has(NEW_IP)])
        frames = out(sim)
        assert echoes(frames) == [(DEFAULT_MAC, NEW_IP, b"new")]
        assert arp_replies(frames) == [(DEFAULT_MAC, NEW_IP)]
        assert announcements(frames) == [(DEFAULT_MAC, DEFAULT_MAC, NEW_IP)]
        assert client.read("ip_rx.not_for_us") == 1 and client.read("arp.not_for_us") == 1
        # The second announcement, retry_cycles (250,000) later.
        assert announcements(out(sim, 250_000)) == [(DEFAULT_MAC, DEFAULT_MAC, NEW_IP)]
        assert client.read("arp.announced") == 2

        client.write("arp.mac", mac_to_int(NEW_MAC))             # two words, one request
        link.mac = NEW_MAC
        sim.send_many([echo(DEFAULT_MAC, NEW_IP, b"old mac"), echo(NEW_MAC, NEW_IP, b"new mac")])
        frames = out(sim)
        assert echoes(frames) == [(NEW_MAC, NEW_IP, b"new mac")]
        assert announcements(frames) == [(NEW_MAC, NEW_MAC, NEW_IP)]
        assert client.read("eth_rx.not_for_us") == 1
        assert client.read("arp.mac") == mac_to_int(NEW_MAC)
        assert client.read("arp.announced") == 3
