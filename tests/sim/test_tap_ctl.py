"""Linux reads and writes the simulated design's counters and registers by name with
`apiary ctl`, over UDP through its controller (examples/udp_echo_ctl.py run by `apiary sim
--tap`): every counter that moved, a drop counter that Linux's own datagrams to a closed port
move, a register written (the audit log's rearm) whose effect shows in a counter and in the log
table, all while the design still echoes; and a read of a tile position where no agent answers
gets its 0xFE (time-out) reply with no other traffic on the link, because the bridge keeps
simulated time running while the design is idle (the design sets no ``idle_hz``: the back end's
default rate does it). And the design's addresses, written with `apiary ctl`: a new MAC is
announced by gratuitous ARP, which Linux takes into its neighbour table, so that its datagrams
keep being echoed without Linux asking; a new IPv4 address is answered at once, the old one no
more.

Everything happens inside a network namespace this test creates and deletes; the only process
it ends is the bridge it started, by its PID (fixtures ``netns`` and ``bridge`` in conftest.py).
Needs root: without it the test fails, it does not skip.
"""

import json
import os
import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAP = f"ctl{os.getpid() % 100000}"  # unique to this run
WIDTH = "64"                         # the quicker cold build
HOST, DESIGN_IP = "10.0.0.1", "10.0.0.2"
DESIGN = str(ROOT / "examples" / "udp_echo_ctl.py")

# Runs inside the namespace: send `count` datagrams to `port`, and when `echo` wait for each
# to come back; print (as JSON) how many came back equal.
CLIENT = r"""
import json, socket, sys
host, port, count, echo = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((host, port))
s.settimeout(3)
back = 0
for i in range(count):
    payload = f"datagram {i}".encode()
    s.send(payload)
    if echo:
        try:
            back += s.recv(2048) == payload
        except socket.timeout:
            pass
print(json.dumps(back))
"""


# Runs inside the namespace: read one word at tile position (x, y) through the controller, one
# try of `wait` seconds; print (as JSON) the error and the seconds it took.
SILENT_READ = r"""
import json, sys, time
from beehive.control_client import ControlClient, ControlError, udp_transport
host, x, y, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with udp_transport(host, timeout=wait, retries=0) as transport:
    start = time.monotonic()
    try:
        ControlClient(None, transport).read_words((x, y), 0, 1)
        error = None
    except ControlError as e:
        error = str(e)
print(json.dumps({"error": error, "seconds": time.monotonic() - start}))
"""
SILENT = (3, 2)                       # the one position of the 4 x 3 mesh without a tile


def datagrams(stack, port, count, echo, ip=DESIGN_IP):
    result = stack.netns_run(sys.executable, "-c", CLIENT, ip, str(port), str(count),
                             "1" if echo else "0", timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr + stack.text
    return json.loads(result.stdout)


def ctl(stack, *args, ip=DESIGN_IP):
    return stack.apiary("ctl", DESIGN, "--width", WIDTH, ip, *args)


def values(text):
    """``{name: text}`` of `apiary ctl` lines ``NAME  VALUE``."""
    return dict(line.split() for line in text.splitlines())


@pytest.mark.slow
@pytest.mark.xdist_group("udp_echo_ctl64")   # one model, built once
def test_linux_reads_counters_and_writes_a_register_by_name(bridge):
    stack = bridge("examples/udp_echo_ctl.py", TAP, "--width", WIDTH)
    stack.wait_ready(900)               # a cold Verilog conversion and Verilator build first
    stack.address(HOST)

    # Every counter that moved: the control requests themselves went through the stack (after
    # the kernel's ARP request, which the ARP tile answered).
    moved = json.loads(ctl(stack, "counters", "--json"))
    assert moved["ctl.reads"] >= 10 and moved["udp_rx.forwarded"] >= 2, moved
    assert moved["arp.forwarded"] >= 1, moved
    assert not any(k.startswith("ctl.") and k not in ("ctl.requests", "ctl.reads")
                   for k in moved), moved
    every = json.loads(ctl(stack, "counters", "--all", "--json"))
    assert every.keys() > moved.keys() and every["udp_rx.bad_checksum"] == 0

    # Linux's datagrams to a closed port are dropped by UDP RX, and counted; echo still works.
    before = int(values(ctl(stack, "read", "udp_rx.no_route"))["udp_rx.no_route"])
    assert datagrams(stack, 9, 3, echo=False) == 0
    assert datagrams(stack, 7, 5, echo=True) == 5
    after = values(ctl(stack, "read", "udp_rx.no_route", "echo.dropped"))
    assert after == {"udp_rx.no_route": str(before + 3), "echo.dropped": "0"}, after

    # A register: rearm empties the audit log of control requests; `write` prints it read back
    # (that read is logged), and the next read of the count is the second entry.
    assert int(values(ctl(stack, "read", "audit.written"))["audit.written"]) > 10
    assert values(ctl(stack, "write", "audit.rearm", "7")) == {"audit.rearm": "0x7"}
    assert values(ctl(stack, "read", "audit.written")) == {"audit.written": "2"}
    entry = int(values(ctl(stack, "table", "audit.log", "0"))["audit.log[0]"], 16)
    assert entry >> 112 & 0xFF == 26            # a UDP_RX_SEGMENT: the request reading rearm
    assert entry >> 64 & 0xFFFF == 8            # of 8 bytes

    # No agent at SILENT: the controller answers 0xFE after reply_timeout (1,024) cycles, which
    # pass only while the bridge simulates idle time (with idle_hz 0 the one try below times out
    # with no answer: "no answer from the controller after 1 try").
    assert "while idle, simulated time runs at up to 1,000,000 cycles/s" in stack.text, \
        stack.text
    result = stack.netns_run(sys.executable, "-c", SILENT_READ, DESIGN_IP, *map(str, SILENT),
                             "5", timeout=60, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    silent = json.loads(result.stdout)
    assert silent["error"] == (f"reading ({SILENT[0]},{SILENT[1]}) words 0x0000..0x0000: "
                               f"TIMEOUT (the tile's control agent did not answer)"), silent
    assert silent["seconds"] < 2.0, silent      # measured 0.65 s (2026-11-30)

    assert stack.stop() == 0, stack.text
    stack.stopped()


def announced(stack, count, ip=DESIGN_IP, wait=10):
    """Wait until the ARP tile has sent ``count`` gratuitous ARP requests, and no more."""
    deadline = time.monotonic() + wait
    while (sent := int(values(ctl(stack, "read", "arp.announced", ip=ip))["arp.announced"])) \
            != count:
        assert sent < count and time.monotonic() < deadline, (sent, count)
        time.sleep(0.2)


def neighbour(stack, ip):
    """Linux's neighbour entry for ``ip`` in the namespace (`ip neigh show`), or ''."""
    return stack.netns_run("ip", "neigh", "show", ip).stdout.strip()


@pytest.mark.slow
@pytest.mark.xdist_group("udp_echo_ctl64")   # one model, built once
def test_linux_follows_the_designs_new_addresses(bridge):
    stack = bridge("examples/udp_echo_ctl.py", f"{TAP}n", "--width", WIDTH)
    stack.wait_ready(900)
    stack.address(HOST)
    assert datagrams(stack, 7, 2, echo=True) == 2
    assert "lladdr 02:00:00:00:00:02" in neighbour(stack, DESIGN_IP)
    assert values(ctl(stack, "read", "arp.mac", "arp.ipv4", "arp.netmask")) == {
        "arp.mac": "02:00:00:00:00:02", "arp.ipv4": DESIGN_IP, "arp.netmask": "0.0.0.0"}

    # A new MAC: frames to the old one are dropped from the write on, and the gratuitous ARP
    # moves Linux's entry (without it Linux would keep sending to the old MAC: no echo).
    assert values(ctl(stack, "write", "arp.mac", "02:00:00:00:00:42")) == {
        "arp.mac": "02:00:00:00:00:42"}
    deadline = time.monotonic() + 10
    while "lladdr 02:00:00:00:00:42" not in neighbour(stack, DESIGN_IP):
        assert time.monotonic() < deadline, neighbour(stack, DESIGN_IP) + stack.text
        time.sleep(0.2)
    assert datagrams(stack, 7, 3, echo=True) == 3
    announced(stack, 2)                 # twice, 250,000 cycles apart

    # A new IPv4 address: `write` reads it back at the new address; the old one is answered no
    # more (IPv4 RX drops Linux's datagrams as not for us), the new one echoes.
    assert values(ctl(stack, "write", "arp.ipv4", "10.0.0.7")) == {"arp.ipv4": "10.0.0.7"}
    assert datagrams(stack, 7, 2, echo=True) == 0
    assert datagrams(stack, 7, 3, echo=True, ip="10.0.0.7") == 3
    assert values(ctl(stack, "read", "ip_rx.not_for_us", ip="10.0.0.7")) == {
        "ip_rx.not_for_us": "2"}
    announced(stack, 4, ip="10.0.0.7")
    assert stack.stop() == 0, stack.text
    stack.stopped()
