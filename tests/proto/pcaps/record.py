"""Record the golden pcap: the Linux kernel talking to the simulated UDP echo stack.

    python tests/proto/pcaps/record.py          # as root; writes tests/proto/pcaps/linux_echo.pcap

Creates a network namespace, starts ``apiary sim examples/udp_echo.py --tap`` inside it (the
design is 10.0.0.2, 02:00:00:00:00:02; the TAP gets 10.0.0.1/24), captures everything on the
TAP device while the kernel resolves the design's address (ARP), pings it at three sizes and
sends UDP datagrams of 0, 1, 100 and 1472 bytes to port 7, then stops the bridge it started (by
its PID) and deletes the namespace. ``tests/proto/test_pcaps.py`` replays what the kernel sent
and expects the design's replies byte for byte.
"""

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
OUT = os.path.join(HERE, "linux_echo.pcap")
NETNS, TAP = f"apiary-record-{os.getpid()}", "rec0"
HOST, DESIGN = "10.0.0.1", "10.0.0.2"
PING_SIZES = (56, 0, 1000)
UDP_SIZES = (0, 1, 100, 1472)


def inside():
    """In the namespace: bridge, capture, traffic."""
    import socket
    from scapy.all import AsyncSniffer, wrpcap

    bridge = subprocess.Popen([sys.executable, "-m", "apiary.cli", "sim", "examples/udp_echo.py",
                               "--tap", TAP], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        for line in bridge.stdout:
            if "bridging" in line:
                break
        else:
            raise SystemExit("the bridge did not start")
        subprocess.run(["ip", "link", "set", TAP, "up"], check=True)
        subprocess.run(["ip", "addr", "add", f"{HOST}/24", "dev", TAP], check=True)
        sniffer = AsyncSniffer(iface=TAP)
        sniffer.start()
        time.sleep(1)
        for size in PING_SIZES:
            subprocess.run(["ping", "-c", "1", "-W", "5", "-s", str(size), DESIGN], check=True,
                           stdout=subprocess.DEVNULL)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5)
        for size in UDP_SIZES:
            payload = bytes((i * 13 + size) & 0xFF for i in range(size))
            s.sendto(payload, (DESIGN, 7))
            data, _ = s.recvfrom(2048)
            assert data == payload, f"{size}-byte echo differs"
        time.sleep(1)
        frames = sniffer.stop()
        wrpcap(OUT, frames)
        print(f"wrote {OUT}: {len(frames)} frames")
    finally:
        bridge.send_signal(signal.SIGINT)
        try:
            bridge.wait(timeout=30)
        except subprocess.TimeoutExpired:
            bridge.kill()


def main():
    if os.geteuid() != 0:
        raise SystemExit("recording needs root (a network namespace and a TAP device)")
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"],
                       check=True)
        subprocess.run(["ip", "netns", "exec", NETNS, sys.executable, __file__, "--inside"],
                       check=True)
    finally:
        subprocess.run(["ip", "netns", "del", NETNS])


if __name__ == "__main__":
    inside() if sys.argv[1:] == ["--inside"] else main()
