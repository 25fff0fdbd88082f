"""`apiary sim --tap` moves frames both ways between the Linux network stack and a simulated
design. Everything happens inside a network namespace this test creates and deletes; the only
process it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in
conftest.py).

Needs root (CI runs as root): without it the test fails, it does not skip.
"""

import json
import os
import sys

TAP = f"loop{os.getpid()}"  # unique to this run, like the namespace it lives in
ETHERTYPE = 0x88B5          # IEEE local experimental EtherType: nothing else here uses it

# Runs inside the namespace: send frames one at a time from a raw socket on the TAP device, wait
# for each to come back through the simulated loopback design, print what came back.
CLIENT = r"""
import json, random, socket, sys, time
count, ethertype, tap = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype))
s.bind((tap, 0))
mac = s.getsockname()[4]
rng = random.Random(1)
result = {"sent": [], "got": []}
for i in range(count):
    payload = bytes([i]) + bytes(rng.getrandbits(8) for _ in range(rng.randrange(45, 1400)))
    frame = b"\xff" * 6 + mac + ethertype.to_bytes(2, "big") + payload
    s.send(frame)
    result["sent"].append(frame.hex())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, addr = s.recvfrom(65536)
        except socket.timeout:
            break
        if addr[2] != socket.PACKET_OUTGOING:
            result["got"].append(data.hex())
            break
print(json.dumps(result))
"""


def test_tap_bridge_moves_frames_both_ways(bridge):
    loopback = bridge("examples/frame_loopback.py", TAP)
    loopback.wait_ready(300)            # a cold Verilator build is part of this
    loopback.netns_run("ip", "link", "set", TAP, "up")

    count = 20
    client = loopback.netns_run(sys.executable, "-c", CLIENT, str(count), str(ETHERTYPE), TAP,
                                timeout=120)
    result = json.loads(client.stdout)
    assert len(result["got"]) == count, f"{len(result['got'])} of {count} frames came back"
    assert result["got"] == result["sent"]

    assert loopback.stop() == 0, loopback.text
    frames_in, frames_out, _ = loopback.stopped()
    assert frames_in >= count and frames_out >= count, loopback.text


def test_bridge_announces_the_design_addresses():
    from types import SimpleNamespace
    from apiary.design import Design
    from apiary.sim.tap import TapBridge
    design = Design("echo", cols=1, rows=1)
    sim = SimpleNamespace(design=design, backend="pysim")
    assert TapBridge(sim, tap=None).addresses() == ""
    design.settings.update(mac="02:00:00:00:00:02", ipv4="10.0.0.2")
    assert TapBridge(sim, tap=None).addresses() == "mac 02:00:00:00:00:02, ipv4 10.0.0.2"
