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
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2.0)
sent = [bytes([i % 251]) * (1 + (i * 37) % 1400) for i in range(int(sys.argv[1]))]
got, lost = [], 0
for data in sent:
    s.sendto(data, ("10.0.0.2", 7))
    try:
        reply, peer = s.recvfrom(2048)
        got.append(reply == data and peer == ("10.0.0.2", 7))
    except TimeoutError:
        lost += 1
        if lost == 5:
            break
print(json.dumps({"intact": sum(got), "wrong": len(got) - sum(got), "lost": lost}))
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
    assert "ARP replies 0," not in stopped[0] and "FLD dropped 0;" in stopped[0], out
