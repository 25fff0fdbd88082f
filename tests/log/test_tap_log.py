"""`apiary log` from Linux: examples/logged_echo.py runs under `apiary sim --tap` in a network
namespace, a UDP client gets its echoes, then `apiary log` reads the ingress log through the
design's controller into a pcap (scapy reads it back) and pairs the two logs into latencies.

Needs root (fixtures ``netns`` and ``bridge`` of tests/sim/conftest.py): without it the test
fails, it does not skip.
"""

import json
import os
import sys

import pytest
from scapy.layers.inet import IP, UDP
from scapy.utils import rdpcap

TAP = f"log{os.getpid()}"
HOST, PEER = "10.0.0.1", "10.0.0.2"
CLOCK = 125e6          # apiary log's default at 64 bits, as apiary sim's
PAYLOADS = [b"first", b"second datagram", b"third " * 7]

CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.connect((sys.argv[1], 7))
echoed = []
for payload in json.loads(sys.argv[2]):
    s.send(payload.encode())
    echoed.append(s.recv(2048).decode())
print(json.dumps(echoed))
"""

# `apiary log`, whether or not its entry point is installed yet.
APIARY_LOG = r"""
import sys
import apiary.cli as cli
from beehive.log_cli import COMMAND
found = cli.commands()
cli.commands = lambda: {**found, "log": COMMAND}
sys.exit(cli.main(["log", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_apiary_log_over_tap_reads_the_log_into_a_pcap(bridge, tmp_path):
    stack = bridge("examples/logged_echo.py", TAP, "--width", "64")
    stack.wait_ready(900)
    stack.netns_run("ip", "link", "set", TAP, "up")
    stack.netns_run("ip", "addr", "add", f"{HOST}/24", "dev", TAP)
    stack.netns_run("ip", "link", "set", "lo", "up")
    texts = [p.decode() for p in PAYLOADS]
    client = stack.netns_run(sys.executable, "-c", CLIENT, PEER, json.dumps(texts), timeout=120)
    assert json.loads(client.stdout) == texts

    pcap = tmp_path / "in.pcap"
    common = ["examples/logged_echo.py", PEER, "--width", "64", "--json"]
    run = stack.netns_run(sys.executable, "-c", APIARY_LOG, *common, "--tile", "log_in",
                          "-o", str(pcap), check=False, timeout=300, cwd=stack_root())
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads(run.stdout)
    packets = rdpcap(str(pcap))
    assert len(packets) == summary["entries"] == summary["written"] >= len(PAYLOADS) + 1
    echo = [p for p in packets if UDP in p and p[UDP].dport == 7]
    assert [bytes(p[UDP].payload) for p in echo] == PAYLOADS
    assert all(p[IP].src == HOST for p in echo)
    cycles = [float(p.time) * CLOCK for p in packets]
    assert [round(c) for c in cycles] == summary["cycles"] == sorted(summary["cycles"])
    assert all(abs(c - round(c)) < 1e-6 for c in cycles)

    run = stack.netns_run(sys.executable, "-c", APIARY_LOG, *common, "--latency", "log_in",
                          "log_out", check=False, timeout=300, cwd=stack_root())
    assert run.returncode == 0, run.stdout + run.stderr
    latency = json.loads(run.stdout)
    assert len(latency["pairs"]) >= len(PAYLOADS)
    assert all(0 < out - into < 1000 for into, out in latency["pairs"])
    assert stack.stop() == 0


def stack_root():
    import pathlib
    return pathlib.Path(__file__).resolve().parents[2]
