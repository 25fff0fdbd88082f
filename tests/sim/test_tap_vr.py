"""Linux runs the VR group against the witness tile of examples/vr_witness.py through `apiary
sim --tap`: the leader and replica in a Python process inside a network namespace, the witness
reached with a plain UDP socket (beehive.vr.links.UdpWitness) at 10.0.0.2:9000. A seeded
workload gives the dict's results with the witness voting; then the witness's capability to
send to UDP TX is revoked over the kernel's control port (7100), it is quarantined at its next
reply, and the group keeps completing requests on the replica's votes.

Everything happens inside a network namespace this test creates and deletes; the only process
it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in conftest.py).
Needs root: without it the test fails, it does not skip.
"""

import json
import os
import sys

import pytest

TAP = f"vrw{os.getpid() % 100000}"  # unique to this run
HOST, DESIGN = "10.0.0.1", "10.0.0.2"

# Runs inside the namespace: n ops of the seeded workload, the witness's send capability revoked
# halfway (the witness at tile x, y; UDP TX at tx, ty). Prints the outcome as JSON.
CLIENT = r"""
import json, sys
from apiary.os.uapi import IpcDir
from beehive.apps.kernel_ctl import ipc_request, parse_reply
from beehive.vr.group import Group, run_workload
from beehive.vr.kv import reference_results, workload
from beehive.vr.links import UdpWitness
host, n, (x, y, tx, ty) = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
ops = list(workload(21, n, keys=8))
group = Group(UdpWitness((host, 9000), timeout=1.0))
results = list(run_workload(group, ops[:n // 2]))
before = dict(group.stats)
ctl = UdpWitness((host, 7100), timeout=2.0)
status = parse_reply(ctl.request(ipc_request(x, y, IpcDir.OUT, tx, ty, grant=False)))["status"]
results += run_workload(group, ops[n // 2:])
print(json.dumps({"same": results == reference_results(ops), "before": before,
                  "after": group.stats, "revoke": status}))
"""


@pytest.mark.slow
def test_linux_runs_the_group_against_the_witness_and_survives_its_quarantine(bridge):
    stack = bridge("examples/vr_witness.py", TAP, "--width", "64")
    stack.wait_ready(900)               # a cold Verilog conversion and Verilator build first
    stack.address(HOST)
    # vr0 at (3, 0), UDP TX at (2, 1): examples/vr_witness.py's layout with one shard.
    client = stack.netns_run(sys.executable, "-c", CLIENT, DESIGN, "20",
                             json.dumps([3, 0, 2, 1]), timeout=300, check=False)
    assert client.returncode == 0, client.stdout + client.stderr + stack.text
    got = json.loads(client.stdout)
    assert got["same"] and got["revoke"] == 0, got
    assert got["before"]["witness_acks"] == 10, got          # the witness voted on every op
    assert got["after"]["witness_acks"] == 10, got           # ... and never again
    assert got["after"]["replica_acks"] == 20, got
    out = stack.apiary("faults", DESIGN)
    assert "(3,0)" in out and "NO_IPC_CAP" in out, out
    assert stack.stop() == 0, stack.text
