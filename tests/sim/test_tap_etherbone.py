"""LiteX's own host tools on a simulated design over TAP: `litex_server --udp` talks Etherbone to
the controller of examples/udp_echo_ctl.py (run by `apiary sim --tap`), `litex_cli --regs` lists
every counter and register of the csr.csv that `apiary ctl DESIGN csr` wrote, a counter it reads
equals the one `apiary ctl` reads, and a register `litex_cli --write` sets reads back through
`apiary ctl`.

Everything happens inside a network namespace this test creates and deletes; the processes it
ends are the bridge and the litex_server it started, by their PIDs (fixtures ``netns`` and
``bridge`` in conftest.py). Needs root: without it the test fails, it does not skip.
"""

import json
import os
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAP = f"ebt{os.getpid() % 100000}"  # unique to this run
WIDTH = "64"                         # the quicker cold build
HOST, DESIGN_IP = "10.0.0.1", "10.0.0.2"
DESIGN = str(ROOT / "examples" / "udp_echo_ctl.py")
CLOSED_PORT, DATAGRAMS = 9999, 5

# Runs inside the namespace: `count` datagrams to a port the design has no route for.
SEND = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    s.sendto(b"nobody listens here %d" % i, (sys.argv[1], int(sys.argv[2])))
"""


def ctl_read(stack, name):
    out = stack.apiary("ctl", DESIGN, "--width", WIDTH, DESIGN_IP, "read", name, "--json")
    return json.loads(out)[name]


@pytest.mark.slow
def test_litex_cli_reads_and_writes_over_etherbone(bridge, tmp_path):
    stack = bridge("examples/udp_echo_ctl.py", TAP, "--width", WIDTH)
    stack.wait_ready(900)               # a cold Verilog conversion and Verilator build first
    stack.address(HOST)
    csr = tmp_path / "csr.csv"
    csr.write_text(stack.apiary("ctl", DESIGN, "--width", WIDTH, "csr"))
    registers = [line.split(",")[1] for line in csr.read_text().splitlines()
                 if line.startswith("csr_register,")]
    assert "udp_rx_no_route" in registers and "audit_rearm" in registers

    stack.netns_run(sys.executable, "-c", SEND, DESIGN_IP, str(CLOSED_PORT), str(DATAGRAMS))
    with stack.litex_server(DESIGN_IP):
        dump = stack.litex("litex_client", "--csr-csv", str(csr), "--regs")
        values = {m[3]: int(m[2], 16) for m in
                  re.finditer(r"^0x([0-9a-f]{8}) : 0x([0-9a-f]{8}) (\w+)$", dump, re.M)}
        assert sorted(values) == sorted(registers), dump
        assert values["udp_rx_no_route"] == DATAGRAMS == ctl_read(stack, "udp_rx.no_route")
        assert values["audit_rearm"] == 0

        stack.litex("litex_client", "--csr-csv", str(csr), "--write", "audit_rearm", "1")
        assert ctl_read(stack, "audit.rearm") == 1
        read = stack.litex("litex_client", "--csr-csv", str(csr), "--read", "audit_rearm")
        assert re.search(r"0x0*1\b", read), read

    # The Etherbone requests went past the audit log (routed straight to the controller), the
    # `apiary ctl` ones through it.
    assert ctl_read(stack, "ctl.reads") >= len(registers)
