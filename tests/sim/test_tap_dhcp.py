"""A real DHCP server (dnsmasq) leases the simulated design its address over TAP
(examples/dhcp_echo.py, `apiary sim --tap`, the lease's seconds 20,000 cycles long): the
design announces the address by gratuitous ARP (Linux, with arp_accept, files it before it
sends anything), answers UDP echo and ping there and LiteX's `litex_server --udp` (a counter
read with `litex_cli` equals `apiary ctl`'s), renews at T1 (dnsmasq's second ACK), and when
dnsmasq is restarted with another range, the next renewal is refused (NAK): the design drops
the address, asks again and answers at the new one, not at the old.

Everything happens inside a network namespace the test creates and deletes; the processes it
ends are the ones it started (the bridge, the dnsmasq instances), by their PIDs. Needs root,
and dnsmasq: where it is missing the test installs Debian's dnsmasq-base with apt-get (as CI
installs the Python packages, on first use); without root or apt-get it fails, it does not
skip.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WIDTH = "64"
HOST = "10.0.0.1"
DESIGN = str(ROOT / "examples" / "dhcp_echo.py")
MAC = "02:00:00:00:00:02"
SECOND = 20_000                     # cycles in one of the lease's seconds

# Runs inside the namespace: `count` UDP datagrams to the echo; prints how many came back.
ECHO = r"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], 7))
s.settimeout(2)
back = 0
for i in range(int(sys.argv[2])):
    s.send(b"dhcp %d" % i)
    try:
        back += s.recv(2048) == b"dhcp %d" % i
    except socket.timeout:
        pass
print(json.dumps(back))
"""

# Runs inside the namespace (as root): one ICMP echo request; prints whether the reply came.
PING = r"""
import json, os, socket, struct, sys, time
def checksum(data):
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
ident = os.getpid() & 0xFFFF
body = b"apiary dhcp ping"
header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
packet = struct.pack("!BBHHH", 8, 0, checksum(header + body), ident, 1) + body
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.settimeout(3)
s.sendto(packet, (sys.argv[1], 0))
ok = False
try:
    while not ok:
        data, (src, _) = s.recvfrom(2048)
        icmp = data[(data[0] & 0xF) * 4:]
        ok = src == sys.argv[1] and icmp[0] == 0 and icmp[4:6] == packet[4:6] \
            and icmp[8:] == body
except socket.timeout:
    pass
print(json.dumps(ok))
"""


class Dnsmasq:
    """dnsmasq serving DHCP (only) on the bridge's TAP device, in its namespace."""

    def __init__(self, stack, tmp, first, last):
        install_dnsmasq()
        self.leases = tmp / f"leases-{first}"
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", stack.netns, "dnsmasq", "--no-daemon", "--conf-file=/dev/null",
             f"--interface={stack.tap}", "--bind-interfaces", "--port=0", "--log-dhcp",
             "--log-facility=-", "--dhcp-authoritative", f"--dhcp-leasefile={self.leases}",
             f"--pid-file={tmp / f'dnsmasq-{first}.pid'}",
             f"--dhcp-range={first},{last},255.255.255.0,2m"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def lease(self, timeout):
        """The address leased to the design's MAC, once dnsmasq has written it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            if self.leases.exists():
                for line in self.leases.read_text().splitlines():
                    fields = line.split()
                    if len(fields) >= 3 and fields[1] == MAC:
                        return fields[2]
            time.sleep(0.2)
        raise AssertionError("no lease for the design within {timeout} s:\n" + self.log())

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(10)

    def log(self):
        self.stop()
        return self.process.stdout.read()


def install_dnsmasq():
    """dnsmasq, installed from Debian (dnsmasq-base) if it is not there yet."""
    if shutil.which("dnsmasq") is None and shutil.which("apt-get") and os.geteuid() == 0:
        for args in (["update", "-qq"], ["install", "-y", "-qq", "dnsmasq-base"]):
            subprocess.run(["apt-get", *args], capture_output=True, timeout=600,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if shutil.which("dnsmasq") is None:
        pytest.fail("this test needs dnsmasq (Debian package dnsmasq-base), and could not "
                    "install it (it needs root and apt-get)")


def ctl(stack, ip, *args):
    out = stack.apiary("ctl", DESIGN, "--width", WIDTH, "--set", f"clock_hz={SECOND}",
                       ip, *args)
    return dict(line.split() for line in out.splitlines())


def echoed(stack, ip, count):
    result = stack.netns_run(sys.executable, "-c", ECHO, ip, str(count), timeout=60,
                             check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def wait_until(what, check, timeout):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s ({value!r})"
        time.sleep(0.5)
    return value


@pytest.mark.slow
def test_a_lease_from_dnsmasq_renewed_then_refused(bridge, tmp_path):
    stack = bridge("examples/dhcp_echo.py", f"dh{os.getpid() % 100000}", "--width", WIDTH,
                   "--set", f"clock_hz={SECOND}")
    stack.wait_ready(900)
    stack.address(HOST)
    stack.netns_run("sysctl", "-qw", f"net.ipv4.conf.{stack.tap}.arp_accept=1")
    servers = [Dnsmasq(stack, tmp_path, "10.0.0.50", "10.0.0.59")]
    try:
        leased = servers[0].lease(60)
        # The announcement: Linux has the design's MAC for the address before talking to it.
        wait_until("the gratuitous ARP in Linux's neighbour table",
                   lambda: MAC in stack.netns_run("ip", "neigh", "show", leased).stdout, 20)
        assert echoed(stack, leased, 3) == 3
        ping = stack.netns_run(sys.executable, "-c", PING, leased, timeout=30, check=False)
        assert json.loads(ping.stdout) is True, ping.stdout + ping.stderr

        # LiteX's tools at the leased address: the client's counters over Etherbone.
        csr = tmp_path / "csr.csv"
        csr.write_text(stack.apiary("ctl", DESIGN, "--width", WIDTH, "csr"))
        with stack.litex_server(leased):
            read = stack.litex("litex_client", "--csr-csv", str(csr), "--read", "dhcp_offers")
        assert re.search(r"0x0*1\b", read), read
        assert ctl(stack, leased, "read", "dhcp.offers") == {"dhcp.offers": "1"}

        # dnsmasq's lease is 2 minutes, T1 one (1,200,000 cycles): the renewal's ACK.
        wait_until("a renewal", lambda: int(ctl(stack, leased, "read", "dhcp.acks")
                                             ["dhcp.acks"]) >= 2, 60)

        # Another range: dnsmasq refuses the next renewal; the design asks again.
        servers[0].stop()
        servers.append(Dnsmasq(stack, tmp_path, "10.0.0.70", "10.0.0.79"))
        moved = servers[1].lease(90)
        assert moved != leased and moved.startswith("10.0.0.7")
        assert wait_until("the echo at the new address", lambda: echoed(stack, moved, 1), 30)
        assert echoed(stack, leased, 2) == 0
        counters = ctl(stack, moved, "read", "dhcp.naks", "dhcp.acks", "arp.announced")
        assert int(counters["dhcp.naks"]) >= 1 and int(counters["dhcp.acks"]) >= 3, counters
        assert int(counters["arp.announced"]) >= 4, counters    # each address twice
        log = servers[1].log()
        assert "DHCPNAK" in log and "DHCPACK" in log, log
    finally:
        for server in servers:
            server.stop()
    assert stack.stop() == 0, stack.text
    stack.stopped()
