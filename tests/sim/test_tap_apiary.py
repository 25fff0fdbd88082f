"""Linux drives the Apiary fault-isolation example (examples/apiary_fault.py) through
`apiary sim --tap`: plain UDP sockets write and read through both untrusted memory applications
(ports 7001 and 7002), a write past app_a's 4096-byte segment gets it quarantined while app_b
keeps serving, `apiary faults` reads the fault log over UDP (port 7100) and names the tile and
the kind, and `apiary faults --release` brings app_a back.

Everything happens inside a network namespace this test creates and deletes; the only process
it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in conftest.py).
Needs root: without it the test fails, it does not skip.
"""

import json
import os
import sys

import pytest

TAP = f"flt{os.getpid() % 100000}"  # unique to this run
WIDTH = "64"                         # the quicker cold build
HOST, DESIGN = "10.0.0.1", "10.0.0.2"
PORTS = {"app_a": 7001, "app_b": 7002}
SEGMENT = 4096

# Runs inside the namespace: the requests given as JSON ([app port, "write", addr, text] or
# [port, "read", addr, length]), one at a time, each sent up to `tries` times until answered
# within `timeout` seconds. Prints (as JSON) per request the reply (status, and the data of a
# read, as text) or null when none came.
CLIENT = r"""
import json, socket, sys
from beehive.apps.mem_server import OP_READ, OP_WRITE, mem_request, parse_mem_reply
host, requests, timeout, tries = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), \
    int(sys.argv[4])
results = []
for port, op, addr, arg in requests:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, port))
    s.settimeout(timeout)
    request = mem_request(OP_WRITE, addr, arg.encode()) if op == "write" else \
        mem_request(OP_READ, addr, arg)
    reply = None
    for _ in range(tries):
        s.send(request)
        try:
            reply = parse_mem_reply(s.recv(2048))
            break
        except socket.timeout:
            pass
    s.close()
    results.append(None if reply is None else
                   {"status": reply["status"], "data": reply["data"].decode(errors="replace")})
print(json.dumps(results))
"""


def requests(stack, *reqs, timeout=2.0, tries=3):
    client = stack.netns_run(sys.executable, "-c", CLIENT, DESIGN, json.dumps(reqs),
                             str(timeout), str(tries), timeout=120, check=False)
    assert client.returncode == 0, client.stdout + client.stderr + stack.text
    return json.loads(client.stdout)


def write_read(app, addr, text):
    return [(PORTS[app], "write", addr, text), (PORTS[app], "read", addr, len(text))]


def served(text):
    return [{"status": 0, "data": ""}, {"status": 0, "data": text}]


def faults(stack, *args):
    result = stack.netns_run(sys.executable, "-m", "apiary.cli", "faults", DESIGN, *args,
                             timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr + stack.text
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.slow
def test_linux_sees_a_tile_fault_reads_the_log_and_releases_it(bridge):
    stack = bridge("examples/apiary_fault.py", TAP, "--width", WIDTH)
    stack.wait_ready(900)               # a cold Verilog conversion and Verilator build first
    stack.netns_run("ip", "link", "set", TAP, "up")
    stack.netns_run("ip", "addr", "add", f"{HOST}/24", "dev", TAP)
    stack.netns_run("ip", "link", "set", "lo", "up")

    # Both applications serve, each in its own segment (the same offset, different data).
    got = requests(stack, *write_read("app_a", 0, "from linux to a"),
                   *write_read("app_b", 0, "from linux to b"))
    assert got == served("from linux to a") + served("from linux to b"), f"{got}\n{stack.text}"

    # A write past app_a's segment: sunk by its monitor, no answer, app_a quarantined.
    got = requests(stack, (PORTS["app_a"], "write", SEGMENT - 4, "past the end"), timeout=1.0,
                   tries=1)
    assert got == [None], got
    got = requests(stack, (PORTS["app_a"], "read", 0, 15), *write_read("app_b", 64, "b again"),
                   timeout=1.0, tries=2)
    assert got == [None] + served("b again"), f"{got}\n{stack.text}"

    out = faults(stack)
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][:3] == ["index", "tile", "kind"], out
    assert rows[1][:3] == ["0", "(3,0)", "OUT_OF_BOUNDS"], out
    assert f"{SEGMENT - 4:#x}" in rows[1] and "12" in rows[1], out
    assert out.splitlines()[-1] == "1 fault in the log", out

    out = faults(stack, "--release", "3,0")
    assert out.splitlines()[-1] == "released tile (3,0)", out
    # app_a starts again from reset with a fresh segment (its data is gone), app_b is untouched.
    got = requests(stack, *write_read("app_a", 0, "a is back"), (PORTS["app_b"], "read", 0, 15))
    assert got == served("a is back") + [{"status": 0, "data": "from linux to b"}], \
        f"{got}\n{stack.text}"

    assert stack.stop() == 0, stack.text
    stack.stopped()
