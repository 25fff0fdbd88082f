"""Linux talks to the simulated Beehive stack (examples/udp_echo.py) through `apiary sim --tap`:
the kernel resolves the design's address by ARP on its own, ICMP echo requests sent through the
kernel's IPv4 stack (a raw ICMP socket: what `ping` does, without needing the `ping` binary) get
every reply with its identifier, sequence number and payload intact, and a plain UDP socket gets
every datagram echoed back byte for byte on port 7.

Everything happens inside a network namespace this test creates and deletes; the only process
it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in conftest.py).
Needs root and `ip` (iproute2): without either the test fails, it does not skip.
"""

import json
import os
import sys

TAP = f"echo{os.getpid()}"  # unique to this run (at most 11 of the 15 characters allowed)
WIDTH = "64"                # as robust as 512 bits here, and its cold build is the quicker one
HOST, PEER = "10.0.0.1", "10.0.0.2"
DESIGN_MAC = "02:00:00:00:00:02"
PING_SIZES = (56, 0, 1, 1000, 1472)   # ICMP data bytes; 56 is ping's default, 1472 fills 1500
PINGS = len(PING_SIZES)
DATAGRAMS = 300

# Runs inside the namespace: `ping` in Python. One ICMP echo request at a time through a raw
# socket (the kernel adds the IPv4 header, routes it and resolves the address by ARP, as for
# `ping`); each reply must come from the host pinged, carry a valid checksum, our identifier, the
# request's sequence number and its payload. Prints (as JSON) what never came back or came back
# different.
PING = r"""
import json, os, random, socket, struct, sys, time

def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF

host, sizes = sys.argv[1], json.loads(sys.argv[2])
ident, rng = os.getpid() & 0xFFFF, random.Random(3)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
result = {"sent": 0, "replied": 0, "missing": [], "wrong": []}
for seq, size in enumerate(sizes, start=1):
    payload = bytes(rng.getrandbits(8) for _ in range(size))
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    header = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq)
    s.sendto(header + payload, (host, 0))
    result["sent"] += 1
    deadline = time.monotonic() + 5
    while True:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            packet, (source, _) = s.recvfrom(65536)
        except socket.timeout:
            result["missing"].append({"seq": seq, "size": size})
            break
        icmp = packet[(packet[0] & 0x0F) * 4:]          # after the IPv4 header and its options
        kind, _, _, their_ident, their_seq = struct.unpack("!BBHHH", icmp[:8])
        if kind != 0 or their_ident != ident or source != host:
            continue                                    # not a reply to us
        if their_seq == seq and icmp[8:] == payload and checksum(icmp) == 0:
            result["replied"] += 1
        else:
            result["wrong"].append({"seq": seq, "size": size, "got_seq": their_seq,
                                    "got": len(icmp) - 8, "checksum_ok": checksum(icmp) == 0})
        break
print(json.dumps(result))
"""

# Runs inside the namespace: send UDP datagrams one at a time to the echo port, wait for each
# echo, print (as JSON) which never came back and which came back different.
CLIENT = r"""
import json, random, socket, sys, time
count, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = random.Random(7)
edges = [0, 1, 2, 7, 8, 17, 18, 45, 46, 64, 1024, 1471, 1472]   # 1472: a full 1500-byte packet
sizes = edges + [rng.randrange(0, 1473) for _ in range(count - len(edges))]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((host, port))
result = {"sent": 0, "echoed": 0, "missing": [], "wrong": [], "seconds": 0.0}
start = time.monotonic()
for i, size in enumerate(sizes):
    if len(result["missing"]) >= 5:                # the stack is broken: say so without waiting on
        break
    payload = bytes(rng.getrandbits(8) for _ in range(size))
    s.send(payload)
    result["sent"] += 1
    deadline = time.monotonic() + 5
    while True:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = s.recv(65536)
        except socket.timeout:
            result["missing"].append({"index": i, "size": size})
            break
        except ConnectionRefusedError:            # an ICMP port unreachable came back
            result["missing"].append({"index": i, "size": size, "refused": True})
            break
        if data == payload:
            result["echoed"] += 1
            break
        first = next((j for j, (a, b) in enumerate(zip(data, payload)) if a != b),
                     min(len(data), len(payload)))
        result["wrong"].append({"index": i, "size": size, "got": len(data), "first_diff": first})
result["seconds"] = round(time.monotonic() - start, 3)
print(json.dumps(result))
"""


def test_linux_pings_and_udp_echoes_through_the_simulated_stack(bridge):
    stack = bridge("examples/udp_echo.py", TAP, "--width", WIDTH)
    stack.wait_ready(600)               # a cold Verilog conversion and Verilator build come first
    stack.netns_run("ip", "link", "set", TAP, "up")
    stack.netns_run("ip", "addr", "add", f"{HOST}/24", "dev", TAP)
    stack.netns_run("ip", "link", "set", "lo", "up")
    # No neighbour entry yet: the kernel has to ask by ARP, and the design's ARP tile answers.
    assert stack.netns_run("ip", "neigh", "show", PEER).stdout.strip() == ""

    ping = stack.netns_run(sys.executable, "-c", PING, PEER, json.dumps(PING_SIZES),
                           timeout=120)
    result = json.loads(ping.stdout)
    assert not result["missing"] and not result["wrong"], f"{result}\n{stack.text}"
    assert result["replied"] == result["sent"] == PINGS, result

    client = stack.netns_run(sys.executable, "-c", CLIENT, str(DATAGRAMS), PEER, "7",
                             timeout=300)
    result = json.loads(client.stdout)
    assert not result["missing"] and not result["wrong"], f"{result}\n{stack.text}"
    assert result["echoed"] == result["sent"] == DATAGRAMS, result

    neigh = stack.netns_run("ip", "neigh", "show", PEER).stdout
    assert f"lladdr {DESIGN_MAC}" in neigh, neigh
    state = neigh.split()[-1]
    assert state in ("REACHABLE", "STALE", "DELAY", "PROBE"), f"not learnt dynamically: {neigh}"

    assert stack.stop() == 0, stack.text
    frames_in, frames_out, line = stack.stopped()
    # Out: one ARP reply (more if the kernel re-confirmed the entry), the echo replies, the UDP
    # echoes; the design only ever answers. In: all of that's requests plus the kernel's own
    # IPv6 chatter (router solicitations, MLD reports, DAD), which the design drops.
    answers = 1 + PINGS + DATAGRAMS
    assert answers <= frames_out <= answers + 5, stack.text
    assert frames_out <= frames_in, stack.text
    assert "refused" not in line, stack.text
    # The counters that moved are listed; this design counts only drops beside what it
    # forwards, and nothing the client sent is among them.
    dropped = dict(item.split("=") for item in line.split("counters: ")[1].split(", ")) \
        if "counters: " in line else {}
    assert set(dropped) <= {"eth_rx_not_for_us", "eth_rx_no_route"}, line
    assert frames_in - frames_out == sum(int(v) for v in dropped.values()), line
