"""Linux uses the Reed-Solomon encoders under Apiary (examples/rs_apiary.py at 64 bits, two
encoders, 1 KiB requests) through `apiary sim --tap`: examples/rs_client.py, plain sockets in
the namespace, sends requests on two connections at once and checks every parity byte against
the Python model; each connection ends with the encoder's FIN after the client's.

Everything happens inside a network namespace the test creates and deletes; the only process
it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in conftest.py).
Needs root: without it the test fails, it does not skip.
"""

import json
import os
import pathlib
import sys

import pytest

HOST, DESIGN = "10.0.0.1", "10.0.0.2"
ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARD = 128


@pytest.mark.slow
@pytest.mark.xdist_group("rs64")         # the model of tests/tcp/test_rs_apiary.py at 64 bits
def test_linux_gets_reed_solomon_parity_over_tcp(bridge):
    tap = f"rs{os.getpid() % 100000}"
    stack = bridge("examples/rs_apiary.py", tap, "--width", "64", "--set", "encoders=2",
                   "--set", f"shard_bytes={SHARD}")
    stack.wait_ready(900)               # a cold Verilog conversion and Verilator build first
    stack.address(HOST)
    client = stack.netns_run(sys.executable, "examples/rs_client.py", DESIGN, "--requests",
                             "4", "--connections", "2", "--shard-bytes", str(SHARD), "--json",
                             timeout=600, check=False, cwd=ROOT)
    assert client.returncode == 0, client.stdout + client.stderr + stack.text
    res = json.loads(client.stdout)
    assert res["ok"] and res["requests"] == 8, res
    assert stack.stop() == 0, stack.text
    assert "app_requests" in stack.text and "sched_flows" in stack.text, stack.text
