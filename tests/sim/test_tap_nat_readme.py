"""README's NAT walk-through, run as printed: its `apiary sim ... --tap`, `ip` and `apiary
ctl/log` lines inside a network namespace this test creates (``demo`` and ``tap0`` become the
test's own names, the pcap goes to a temporary folder), then Linux's connected UDP socket sends
to the new public port and gets its echo back, which it would drop if the reply came from the
old port (README once changed only the inbound table).

Needs root: without it the test fails, it does not skip (fixtures in conftest.py).
"""

import os
import pathlib
import shlex
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Appended, not prepended: tests/ has a conftest.py, which must not shadow this folder's.
sys.path.append(str(ROOT / "tests"))
from fences import fenced_blocks  # noqa: E402

TAP = f"nat{os.getpid() % 100000}"

CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], int(sys.argv[2])))
s.settimeout(5)
s.send(b"after the walk-through")
print(s.recv(2048).decode())
"""


def walk_through():
    """The README block that runs examples/nat_echo.py, as argument lists (``ip netns exec
    demo`` and comments left off, the bridge's trailing ``&`` too)."""
    block, = [b for b in fenced_blocks((ROOT / "README.md").read_text())
              if any("examples/nat_echo.py --tap" in line for line in b)]
    prefix = ["ip", "netns", "exec", "demo"]
    commands = []
    for line in block:
        args = shlex.split(line, comments=True)
        assert args[:4] == prefix, line
        commands.append([a for a in args[4:] if a != "&"])
    return commands


@pytest.mark.slow
def test_readmes_nat_walk_through_as_printed(bridge, tmp_path):
    first, *rest = walk_through()
    assert first[:3] == ["apiary", "sim", "examples/nat_echo.py"]
    assert first[3:5] == ["--tap", "tap0"]
    stack = bridge(first[2], TAP, *first[5:])
    stack.wait_ready(900)                    # a cold conversion and Verilator build first
    tables = []
    for args in rest:
        args = [TAP if a == "tap0" else str(tmp_path / a) if a.endswith(".pcap") else a
                for a in args]
        if args[0] == "ip":
            stack.netns_run(*args)
        else:
            assert args[0] == "apiary", args
            out = stack.apiary(*args[1:])
            if "table" in args:
                tables.append(args[args.index("table") + 1])
    assert tables == ["nat_in.rules", "nat_out.rules"]
    reply = stack.netns_run(sys.executable, "-c", CLIENT, "10.0.0.2", "6000", timeout=60,
                            check=False)
    assert reply.returncode == 0, reply.stdout + reply.stderr + stack.text
    assert reply.stdout.strip() == "after the walk-through"
    assert (tmp_path / "nat.pcap").stat().st_size > 24 and out.startswith("log: ")
    assert stack.stop() == 0
