"""Linux reaches FlexDriver's echo through the NIC model (flexdriver/echo.py) over TAP, in a
network namespace the test creates: ARP resolved, every datagram back intact, the UDP checksum
the NIC model fills in accepted by Linux's own stack (a wrong one would be dropped there). Once
with the echo in software, once in hardware: the FLD module and the FLD-E accelerator in
Amaranth's simulator (``--hardware``), the NIC model's DMA crossing to them a cycle at a time.
The only process a test ends is the echo it started, by its PID."""

import json
import subprocess
import sys
import time

import pytest

from conftest import ROOT, sh

CLIENT = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = [bytes([i % 251]) * (1 + (i * 37) % 1400) for i in range(int(sys.argv[1]))]
intact, wrong, lost = 0, 0, 0
for k, data in enumerate(sent):
    s.sendto(data, ("10.0.0.2", 7))
    deadline = time.monotonic() + 30         # a loaded machine simulates slowly
    while True:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            reply, peer = s.recvfrom(2048)
        except TimeoutError:
            lost += 1
            break
        if reply == data and peer == ("10.0.0.2", 7):
            intact += 1
            break
        if reply not in sent[:k]:            # (a late answer to an earlier one is let go)
            wrong += 1
    if lost == 5:
        break
print(json.dumps({"intact": intact, "wrong": wrong, "lost": lost}))
"""


def echo_over_tap(netns, tap, datagrams, *args):
    """Start the echo on ``tap`` in ``netns`` (``args`` for flexdriver.echo), send it
    ``datagrams`` from Linux; returns the client's counts and the echo's output."""
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-m",
                             "flexdriver.echo", "--tap", tap, "--ip", "10.0.0.2", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    try:
        first = proc.stdout.readline()
        assert first.startswith("bridging the NIC model"), first + proc.stdout.read()
        for cmd in (("ip", "link", "set", tap, "up"),
                    ("ip", "addr", "add", "10.0.0.1/24", "dev", tap),
                    ("ip", "link", "set", "lo", "up")):
            sh("ip", "netns", "exec", netns, *cmd)
        time.sleep(0.5)
        result = sh("ip", "netns", "exec", netns, sys.executable, "-c", CLIENT,
                    str(datagrams), timeout=600)
        counts = json.loads(result.stdout)
    finally:
        proc.send_signal(2)                      # SIGINT: the echo prints its counters
        out, _ = proc.communicate(timeout=60)
    return counts, out


def test_linux_reaches_the_echo_through_the_nic_model(netns):
    counts, out = echo_over_tap(netns, "fld0", 200)
    assert counts == {"intact": 200, "wrong": 0, "lost": 0}, out
    stopped = [line for line in out.splitlines() if line.startswith("stopped:")]
    assert stopped and "echoed 200," in stopped[0] and "errors 0" in stopped[0], out
    assert "ARP replies 0," not in stopped[0]


@pytest.mark.parametrize("width", ["64", "512"])
def test_linux_reaches_fld_e_in_hardware_through_the_nic_model(netns, width):
    """FLD and FLD-E in Amaranth's simulator: Linux's ARP request answered by the accelerator,
    30 datagrams of 1 to 1,400 bytes back intact (a datagram costs thousands of simulated
    cycles: DMA latencies, the echo's store and forward)."""
    counts, out = echo_over_tap(netns, f"fldh{width}", 30, "--hardware", "--width", width,
                                "--latency", "40", "--jitter", "8")
    assert counts == {"intact": 30, "wrong": 0, "lost": 0}, out
    stopped = [line for line in out.splitlines() if line.startswith("stopped:")]
    assert stopped and "echoed 30," in stopped[0], out
    assert "arp replies 1," in stopped[0] and "FLD dropped 0;" in stopped[0], out


RS_CLIENT = """
import json, random, socket, sys
import reedsolo
codec, rng = reedsolo.RSCodec(2), random.Random(7)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(60.0)                       # a loaded machine simulates slowly
right = 0
for _ in range(int(sys.argv[1])):
    data = bytes(rng.getrandbits(8) for _ in range(8 * 64))
    symbols = [codec.encode(bytes(data[i * 64 + k] for i in range(8)))[8:] for k in range(64)]
    s.sendto(data, ("10.0.0.2", 9000))
    reply, peer = s.recvfrom(2048)
    right += reply == bytes(x[0] for x in symbols) + bytes(x[1] for x in symbols)
print(json.dumps(right))
"""


def test_linux_gets_parity_from_the_rs_encoder_behind_fld(netns):
    """Beehive's Reed-Solomon encoder behind FLD, in Amaranth's simulator: Linux sends eight
    64-byte shards to UDP port 9000 and gets back the two parity shards reedsolo computes, in
    datagrams whose checksums the NIC model filled in (Linux's stack checks them). The
    encoder answers no ARP: Linux is given its neighbour entry."""
    tap = "fldrs0"
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-m",
                             "flexdriver.echo", "--tap", tap, "--ip", "10.0.0.2", "--hardware",
                             "--accelerator", "rs", "--latency", "40", "--jitter", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    try:
        first = proc.stdout.readline()
        assert first.startswith("bridging the NIC model (the RS encoder"), \
            first + proc.stdout.read()
        for cmd in (("ip", "link", "set", tap, "up"),
                    ("ip", "addr", "add", "10.0.0.1/24", "dev", tap),
                    ("ip", "neigh", "add", "10.0.0.2", "lladdr", "02:00:00:00:0f:1d", "dev",
                     tap),
                    ("ip", "link", "set", "lo", "up")):
            sh("ip", "netns", "exec", netns, *cmd)
        result = sh("ip", "netns", "exec", netns, sys.executable, "-c", RS_CLIENT, "8",
                    timeout=300)
        right = json.loads(result.stdout)
    finally:
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=60)
    assert right == 8, out
    stopped = [line for line in out.splitlines() if line.startswith("stopped:")]
    assert stopped and "answered 8," in stopped[0] and "FLD dropped 0;" in stopped[0], out
