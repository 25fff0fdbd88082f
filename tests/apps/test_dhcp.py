"""The DHCP client (beehive/apps/dhcp.py) in examples/dhcp_echo.py on Verilator at 64 bits,
against a DHCP server played with scapy, its seconds 1,000 cycles long: DISCOVER, OFFER,
REQUEST, ACK; nothing answered before the lease, the echo and a gratuitous ARP at the leased
address after it; renewal at T1 (unicast to the server); a NAK that takes the address away and
starts again; replies for another transaction or MAC ignored and counted."""

import pytest
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from apiary.load import load_design
from apiary.sim import open_sim
from beehive.proto.addresses import DEFAULT_MAC, mac_to_int

SERVER_MAC, SERVER_IP = "52:54:00:00:00:01", "10.0.0.1"
LEASED = "10.0.0.50"
BROADCAST = "ff:ff:ff:ff:ff:ff"
SECOND = 1000                       # cycles in one of the lease's seconds


#: Every frame the design sent in the test, in order.
SENT = []


def frames(sim, cycles):
    sim.run(cycles)
    out = [Ether(f.data) for f in sim.received(clear=True)]
    SENT.extend(out)
    return out


def dhcp_sent(packets, kind=None):
    """The DHCP messages among ``packets`` (of message type ``kind`` only, if given)."""
    return [p for p in packets if DHCP in p and kind in (None, options(p)["message-type"])]


def next_dhcp(sim, kind, limit):
    """Run until the client sends a DHCP message of type ``kind`` (at most ``limit`` cycles, a
    second at a time); return it and the cycles it took."""
    ran = 0
    while ran < limit:
        found = dhcp_sent(frames(sim, SECOND), kind)
        ran += SECOND
        if found:
            return found[0], ran
    raise AssertionError(f"no DHCP message of type {kind} in {limit} cycles")


def options(p):
    return {o[0]: o[1:] if len(o) > 2 else o[1] for o in p[DHCP].options
            if isinstance(o, tuple)}


def reply(request, kind, *, lease=100, to=BROADCAST, ip_to="255.255.255.255", xid=None,
          chaddr=None, **extra):
    """The server's answer of ``kind`` to the client's ``request``."""
    opts = [("message-type", kind), ("server_id", SERVER_IP)]
    if kind != "nak":
        opts += [("lease_time", lease), ("subnet_mask", "255.255.255.0"),
                 ("router", SERVER_IP)]
    opts += [(k, v) for k, v in extra.items()] + ["end"]
    chaddr = chaddr or request[BOOTP].chaddr
    return (Ether(dst=to, src=SERVER_MAC) / IP(src=SERVER_IP, dst=ip_to)
            / UDP(sport=67, dport=68)
            / BOOTP(op=2, xid=request[BOOTP].xid if xid is None else xid,
                    yiaddr=LEASED if kind != "nak" else "0.0.0.0", chaddr=chaddr)
            / DHCP(options=opts))


def echo(ip, payload):
    return Ether(dst=DEFAULT_MAC, src=SERVER_MAC) / IP(src=SERVER_IP, dst=ip) \
        / UDP(sport=5000, dport=7) / payload


def echoes(packets):
    return [(p[IP].src, bytes(p[UDP].payload)) for p in packets
            if UDP in p and p[UDP].sport == 7]


@pytest.mark.slow
def test_a_lease_is_taken_renewed_and_lost_to_a_nak():
    SENT.clear()
    d = load_design("examples/dhcp_echo.py", width=64, clock_hz=SECOND)
    with open_sim(d, "verilator") as sim:
        [discover] = dhcp_sent(frames(sim, 2000))
        assert (discover.dst, discover[IP].src, discover[IP].dst) == (
            BROADCAST, "0.0.0.0", "255.255.255.255")
        assert (discover[UDP].sport, discover[UDP].dport) == (68, 67)
        assert discover[BOOTP].op == 1 and discover[BOOTP].flags == 0x8000
        assert discover[BOOTP].chaddr[:6] == mac_to_int(DEFAULT_MAC).to_bytes(6, "big")
        assert options(discover)["message-type"] == 1
        assert list(options(discover)["param_req_list"]) == [1, 3, 51, 58, 59]

        # No address yet: an echo to any address is not answered.
        sim.send(echo(LEASED, b"too early"))
        assert echoes(frames(sim, 2000)) == []

        # Not ours (another transaction, another MAC): ignored, no REQUEST (the DISCOVER is
        # sent again every 4 seconds, with the same transaction ID). Then the offer.
        sim.send(reply(discover, "offer", xid=discover[BOOTP].xid ^ 1))
        again = frames(sim, 1000)
        sim.send(reply(discover, "offer", chaddr=b"\x02" + b"\x00" * 15))
        again += frames(sim, 1000)
        assert dhcp_sent(again, 3) == []
        assert all(p[BOOTP].xid == discover[BOOTP].xid for p in dhcp_sent(again))
        sim.send(reply(discover, "offer"))
        [request] = dhcp_sent(frames(sim, 2000), 3)
        assert request[BOOTP].xid == discover[BOOTP].xid
        assert options(request)["message-type"] == 3
        assert options(request)["requested_addr"] == LEASED
        assert options(request)["server_id"] == SERVER_IP

        sim.send(reply(request, "ack"))
        acked = sim.cycle
        bound = frames(sim, 3000)
        announced = [p for p in bound if ARP in p and p[ARP].psrc == p[ARP].pdst == LEASED]
        assert announced and announced[0].dst == BROADCAST
        sim.send(echo(LEASED, b"leased"))
        assert echoes(frames(sim, 2000)) == [(LEASED, b"leased")]

        # T1 is half the lease (no option 58): 50 seconds after the ACK, a REQUEST to the
        # server, unicast, with the address in ciaddr.
        renew, _ = next_dhcp(sim, 3, 60 * SECOND)
        assert 50 * SECOND <= sim.cycle - acked <= 52 * SECOND
        assert (renew.dst, renew[IP].dst, renew[IP].src) == (SERVER_MAC, SERVER_IP, LEASED)
        assert renew[BOOTP].ciaddr == LEASED and "requested_addr" not in options(renew)
        sim.send(reply(renew, "ack", to=DEFAULT_MAC, ip_to=LEASED))
        frames(sim, 500)
        sim.send(echo(LEASED, b"renewed"))
        assert echoes(frames(sim, 2000)) == [(LEASED, b"renewed")]

        # The next renewal is refused: the address goes, and the client starts again.
        renew, _ = next_dhcp(sim, 3, 60 * SECOND)
        sim.send(reply(renew, "nak", to=DEFAULT_MAC, ip_to=LEASED))
        after = dhcp_sent(frames(sim, 3000))
        assert [options(p)["message-type"] for p in after] == [1]
        sim.send(echo(LEASED, b"gone"))
        assert echoes(frames(sim, 2000)) == []

        c = sim.counters()
        sent = [options(p)["message-type"] for p in dhcp_sent(SENT)]
        assert {k: c.get(f"dhcp_{k}", 0) for k in ("discovers", "offers", "requests", "acks",
                                                    "naks", "ignored", "busy")} == {
            "discovers": sent.count(1), "offers": 1, "requests": sent.count(3), "acks": 2,
            "naks": 1, "ignored": 2, "busy": 0}
        assert sent.count(1) >= 2 and sent.count(3) >= 3


def bind(sim):
    """DISCOVER, OFFER, REQUEST, ACK (lease 100 s); returns the cycle of the ACK."""
    discover, _ = next_dhcp(sim, 1, 10 * SECOND)
    sim.send(reply(discover, "offer"))
    request, _ = next_dhcp(sim, 3, 10 * SECOND)
    sim.send(reply(request, "ack"))
    acked = sim.cycle
    frames(sim, 500)
    return acked


@pytest.mark.slow
def test_rebinding_the_lease_running_out_and_a_release():
    """Renewals unanswered: from T2 (7/8 of the lease) the REQUEST is broadcast, and an ACK to it
    binds again; unanswered to the end, the address goes (``expired``) and the client starts
    again. Then a release written through the controller: RELEASE to the server, the address
    gone, and a new DISCOVER ``retry_seconds`` later."""
    from apiary.top import control_map
    from beehive.control_client import ControlClient, SimTransport

    SENT.clear()
    d = load_design("examples/dhcp_echo.py", width=64, clock_hz=SECOND)
    with open_sim(d, "verilator") as sim:
        acked = bind(sim)
        rebind, _ = next_dhcp(sim, 3, 100 * SECOND)
        while rebind.dst != BROADCAST:                  # the renewals, unicast, unanswered
            assert rebind.dst == SERVER_MAC
            rebind, _ = next_dhcp(sim, 3, 100 * SECOND)
        assert 87 * SECOND <= sim.cycle - acked <= 89 * SECOND
        assert (rebind[IP].dst, rebind[BOOTP].ciaddr) == ("255.255.255.255", LEASED)
        sim.send(reply(rebind, "ack"))
        acked = sim.cycle
        frames(sim, 500)
        sim.send(echo(LEASED, b"rebound"))
        assert echoes(frames(sim, 2000)) == [(LEASED, b"rebound")]

        # Nothing answered to the end of the lease: the address goes, DISCOVER again.
        discover, _ = next_dhcp(sim, 1, 110 * SECOND)
        assert 100 * SECOND <= sim.cycle - acked <= 102 * SECOND
        sim.send(echo(LEASED, b"expired"))
        assert echoes(frames(sim, 2000)) == []
        assert sim.counters()["dhcp_expired"] == 1

        # Bound again, then released through the controller.
        sim.send(reply(discover, "offer"))
        request, _ = next_dhcp(sim, 3, 10 * SECOND)
        sim.send(reply(request, "ack"))
        frames(sim, 500)
        link = SimTransport(sim, client_mac=SERVER_MAC, client_ip=SERVER_IP)
        link.ip = LEASED
        client = ControlClient(control_map(d), link)
        assert client.read("dhcp.acks") == 3
        client.write("dhcp.release", 1)
        released = sim.cycle
        release, _ = next_dhcp(sim, 7, 2 * SECOND)
        assert (release.dst, release[IP].dst, release[IP].src, release[BOOTP].ciaddr) == (
            SERVER_MAC, SERVER_IP, LEASED, LEASED)
        assert options(release)["server_id"] == SERVER_IP
        sim.send(echo(LEASED, b"released"))
        assert echoes(frames(sim, 2000)) == []
        # retry_seconds (4) later the client starts again, for a new lease.
        next_dhcp(sim, 1, 10 * SECOND)
        assert 4 * SECOND <= sim.cycle - released <= 5 * SECOND
        assert sim.counters()["dhcp_releases"] == 1
