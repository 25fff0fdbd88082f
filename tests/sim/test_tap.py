"""`apiary sim --tap` moves frames both ways between the Linux network stack and a simulated
design. Everything happens inside a network namespace this test creates and deletes; the only
process it ends is the bridge it started, by its PID.

Needs root (CI runs as root): without it the test fails, it does not skip.
"""

import json
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAP = "tap0"
ETHERTYPE = 0x88B5          # IEEE local experimental EtherType: nothing else in the namespace uses it

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


def sh(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.fail("the TAP bridge test needs root to create a network namespace and a TAP "
                    "device (CI runs as root)")
    if shutil.which("ip") is None:
        pytest.fail("the TAP bridge test needs the `ip` command (Debian package iproute2)")
    name = f"apiary-tap-{os.getpid()}"
    sh("ip", "netns", "add", name)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_tap_bridge_moves_frames_both_ways(netns):
    bridge = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-m", "apiary.cli", "sim",
         str(ROOT / "examples" / "frame_loopback.py"), "--tap", TAP],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in bridge.stdout], daemon=True).start()
    output = []
    try:
        deadline = time.monotonic() + 300          # a cold Verilator build is part of this
        while not any("bridging" in l for l in output):
            assert bridge.poll() is None, "the bridge exited early:\n" + "".join(output)
            assert time.monotonic() < deadline, "the bridge did not start:\n" + "".join(output)
            try:
                output.append(lines.get(timeout=1))
            except queue.Empty:
                pass
        sh("ip", "netns", "exec", netns, "ip", "link", "set", TAP, "up")

        count = 20
        client = sh("ip", "netns", "exec", netns, sys.executable, "-c", CLIENT,
                    str(count), str(ETHERTYPE), TAP, timeout=120)
        result = json.loads(client.stdout)
        assert len(result["got"]) == count, f"{len(result['got'])} of {count} frames came back"
        assert result["got"] == result["sent"]

        bridge.send_signal(signal.SIGINT)
        assert bridge.wait(timeout=30) == 0
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()
    while not lines.empty():
        output.append(lines.get())
    text = "".join(output)
    stopped = [l for l in output if l.startswith("stopped:")]
    assert stopped, text
    frames_in = int(stopped[0].split("frames in ")[1].split(",")[0])
    frames_out = int(stopped[0].split("frames out ")[1].split(",")[0])
    assert frames_in >= count and frames_out >= count, text


def test_bridge_announces_the_design_addresses():
    from types import SimpleNamespace
    from apiary.design import Design
    from apiary.sim.tap import TapBridge
    design = Design("echo", cols=1, rows=1)
    sim = SimpleNamespace(design=design)
    assert TapBridge(sim, tap=None).addresses() == ""
    design.settings.update(mac="02:00:00:00:00:02", ipv4="10.0.0.2")
    assert TapBridge(sim, tap=None).addresses() == "mac 02:00:00:00:00:02, ipv4 10.0.0.2"
