"""Linux reads and writes the simulated design's counters and registers by name with `apiary ctl
--tcp`, over a TCP connection through the controller's TCP front end (examples/tcp_ctl.py run by
`apiary sim --tap`), and over UDP in the same run: every counter that moved, a register written
over TCP and read back over UDP, Linux's own TCP echo traffic counted, and a Python client that
holds one connection for many requests, then closes it and sees the design close its side.

Everything happens inside a network namespace this test creates and deletes; the only process
it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in conftest.py).
Needs root: without it the test fails, it does not skip.
"""

import json
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAP = f"ctt{os.getpid() % 100000}"  # unique to this run
WIDTH = "64"                         # the quicker cold build
HOST, DESIGN_IP = "10.0.0.1", "10.0.0.2"
DESIGN = str(ROOT / "examples" / "tcp_ctl.py")

# Runs inside the namespace: one TCP connection to the controller, `count` reads of
# ctl_tcp.records (x=1, y=3, its first counter word), each reply checked; then the client
# closes and waits for the design's FIN (recv returns b""). Prints the values read, as JSON.
HOLD = r"""
import json, socket, struct, sys
from apiary.top import control_map
from apiary.load import load_design
from beehive.control_client import ControlClient, tcp_transport
design = load_design(sys.argv[1], width=int(sys.argv[2]))
client = ControlClient(control_map(design), tcp_transport(sys.argv[3], timeout=60))
values = [client.read("ctl_tcp.records") for _ in range(int(sys.argv[4]))]
sock = client.transport.sock
sock.shutdown(socket.SHUT_WR)
sock.settimeout(60)
print(json.dumps({"values": values, "closed": sock.recv(100) == b""}))
"""

# Runs inside the namespace: echo `size` bytes over TCP port 7; prints whether they came back.
ECHO = r"""
import json, socket, sys
data = bytes(k % 251 for k in range(int(sys.argv[2])))
s = socket.create_connection((sys.argv[1], 7), timeout=60)
s.sendall(data)
got = b""
while len(got) < len(data):
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
s.close()
print(json.dumps(got == data))
"""


def run_py(stack, script, *args):
    result = stack.netns_run(sys.executable, "-c", script, *args, timeout=300, check=False,
                             cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr + stack.text
    return json.loads(result.stdout)


def ctl(stack, *args):
    return stack.apiary("ctl", DESIGN, "--width", WIDTH, DESIGN_IP, *args)


@pytest.mark.slow
def test_linux_reads_and_writes_by_name_over_tcp(bridge):
    stack = bridge("examples/tcp_ctl.py", TAP, "--width", WIDTH)
    stack.wait_ready(900)               # a cold Verilog conversion and Verilator build first
    stack.address(HOST)

    # Every counter that moved, over one TCP connection: the requests came through the TCP
    # engine and the front end (after the kernel's ARP request).
    moved = json.loads(ctl(stack, "--tcp", "counters", "--json"))
    assert moved["ctl_tcp.flows"] == 1 and moved["tcp_rx.opened"] == 1, moved
    assert moved["tcp_rx.stored"] >= 2 and moved["tcp_rx.segments"] >= 3, moved
    assert moved["ctl.requests"] >= 10 and moved["arp.forwarded"] >= 1, moved
    assert not any(k.startswith("ctl_tcp.") and k not in ("ctl_tcp.flows", "ctl_tcp.records")
                   for k in moved), moved

    # A register written over TCP, read back over UDP, and its effect kept.
    assert json.loads(ctl(stack, "--tcp", "write", "ctl_tcp.reply_timeout", "0x400000",
                          "--json")) == {"ctl_tcp.reply_timeout": 0x400000}
    assert json.loads(ctl(stack, "read", "ctl_tcp.reply_timeout", "--json")) == \
        {"ctl_tcp.reply_timeout": 0x400000}

    # Linux's TCP echo still works beside the controller; one connection holds many requests,
    # and the design closes its side when Linux closes.
    assert run_py(stack, ECHO, DESIGN_IP, "3000") is True
    held = run_py(stack, HOLD, DESIGN, WIDTH, DESIGN_IP, "5")
    assert held["closed"] is True
    first = held["values"][0]
    assert held["values"] == list(range(first, first + 5))
    after = json.loads(ctl(stack, "counters", "--json"))        # over UDP
    assert after["ctl_tcp.flows"] == 3 and after["ctl_tcp.closed"] == 3, after
    assert after["tcp_echo.flows"] == 1 and after["ctl_tcp.records"] == first + 5, after
    assert not any(after.get(f"ctl_tcp.{k}") for k in ("timeouts", "oversized", "truncated",
                                                        "bad_replies", "dropped")), after

    assert stack.stop() == 0, stack.text
    stack.stopped()
