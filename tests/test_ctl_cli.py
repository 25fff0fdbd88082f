"""`apiary ctl` (beehive/ctl_cli.py, beehive/control_client.py) with the names of
examples/udp_echo_ctl.py: `list` without a design running; usage errors (exit 2) and failures
(exit 1) as one readable line; and runs against a fake controller, a UDP server on 127.0.0.1
that answers as ControllerTile does (its replies built with the controller's own helpers) from
a Python model of every agent's address map (counters, registers, a table's staging words,
LOAD and COMMIT), which can also stay silent. Last, `apiary ctl` against the design itself,
simulated (Verilator), through a UDP-to-simulation bridge."""

import gc
import json
import socket
import threading

import pytest

from apiary.cli import commands, main
from apiary.control.messages import CtlStatus
from apiary.load import load_design
from apiary.top import control_map
from beehive.apps.controller import (OP_READ, STATUS_OK, STATUS_TIMEOUT, expected_reply,
                                     request_ok)
from beehive.control_client import ControlClient, ControlError, udp_transport

DESIGN = "examples/udp_echo_ctl.py"


@pytest.fixture(scope="module")
def dmap():
    return control_map(load_design(DESIGN, width=64))


class AgentModel:
    """Every agent of ``dmap``: counters (read-only, values given), registers (at their reset
    values), tables (entries, staging words, LOAD, COMMIT if writable)."""

    def __init__(self, dmap, counters=None):
        self.words, self.tables = {}, {}
        counters = counters or {}
        for tmap in dmap:
            words = self.words[(tmap.x, tmap.y)] = {}
            for e in tmap:
                if e.kind == "table":
                    self.tables[(tmap.x, tmap.y, e.addr)] = (e, [0] * e.entries)
                    for k in range(e.words + 2):
                        words[e.addr + k] = 0
                    continue
                value = counters.get(f"{tmap.name}.{e.name}", e.reset)
                for k in range(e.words):
                    words[e.addr + k] = value >> (32 * k) & 0xFFFFFFFF

    def answer(self, pos, write, addr, value):
        words = self.words.get(pos)
        if words is None:
            return None
        if addr not in words:
            return CtlStatus.BAD_ADDR, 0
        for (x, y, base), (e, entries) in self.tables.items():
            if (x, y) != pos or not base <= addr < base + e.words + 2:
                continue
            if not write:
                return (CtlStatus.OK, words[addr]) if addr < e.commit else \
                    (CtlStatus.BAD_ADDR, 0)
            if addr == e.load:
                v = entries[value] if value < e.entries else 0
                for k in range(e.words):
                    words[base + k] = v >> (32 * k) & 0xFFFFFFFF
            elif not e.writable:
                return CtlStatus.READ_ONLY, value
            elif addr == e.commit:
                if value < e.entries:
                    entries[value] = sum(words[base + k] << (32 * k) for k in range(e.words))
            else:
                words[addr] = value
            return CtlStatus.OK, value
        if not write:
            return CtlStatus.OK, words[addr]
        if addr < 0x1000:
            return CtlStatus.READ_ONLY, value
        words[addr] = value
        return CtlStatus.OK, value

    def serve(self, request):
        if not request_ok(request):
            return expected_reply(request, 0)
        op, x, y, count = request[0], request[2], request[3], request[6]
        addr = int.from_bytes(request[4:6], "big")
        read = []
        for j in range(count):
            value = 0 if op == OP_READ else int.from_bytes(request[8 + 4 * j:12 + 4 * j], "big")
            answer = self.answer((x, y), op != OP_READ, addr + j, value)
            if answer is None:
                return expected_reply(request, STATUS_TIMEOUT, read)
            if answer[0] != CtlStatus.OK:
                return expected_reply(request, answer[0], read)
            read.append(answer[1])
        return expected_reply(request, STATUS_OK, read)


class FakeController:
    """A UDP server on 127.0.0.1 answering with ``model.serve`` (or nothing, if ``silent``)."""

    def __init__(self, model, silent=False, serve=None):
        self.model, self.silent = model, silent
        self.serve = serve or model.serve
        self.requests = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                request, client = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            self.requests.append(request)
            if not self.silent:
                self.sock.sendto(self.serve(request), client)

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def fake(dmap):
    servers = []

    def start(counters=None, **kw):
        servers.append(FakeController(AgentModel(dmap, counters), **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def ctl(capsys, *args):
    # Simulations run earlier in this process may leave testbench coroutines whose collection
    # prints warnings: collect them now, so that only the command's output is checked.
    gc.collect()
    capsys.readouterr()
    code = main(["ctl", DESIGN, "--width", "64", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def at(server, *args, timeout="2"):
    return ("127.0.0.1", *args, "--port", str(server.port), "--timeout", timeout,
            "--retries", "1")


def test_both_commands_are_registered():
    available = commands()
    assert "ctl" in available and "faults" in available


def test_list_prints_the_address_map_without_a_design_running(capsys, dmap):
    code, out, err = ctl(capsys, "list")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["tile", "at", "name", "kind", "address", "width", "description"]
    rows = {tuple(line.split()[:5]) for line in lines[1:]}
    addr = dmap.lookup("udp_rx.bad_checksum")[1].addr
    assert ("udp_rx", "(2,0)", "bad_checksum", "counter", f"{addr:#06x}") in rows
    assert ("audit", "(3,0)", "rearm", "register", "0x1000") in rows
    assert ("audit", "(3,0)", "log", "table-ro", "0x2000") in rows
    assert len(lines) == 1 + sum(len(t.entries) for t in dmap)
    code, out, _ = ctl(capsys, "10.0.0.2", "list", "--json")      # a HOST is allowed, unused
    listed = json.loads(out)
    assert listed["controller"] == [3, 1]
    assert {(r["tile"], r["name"]) for r in listed["map"]} == \
        {(t.name, e.name) for t in dmap for e in t}


def test_csr_prints_litex_csr_csv_without_a_design_running(capsys, dmap, tmp_path):
    """`apiary ctl DESIGN csr`: the map as LiteX's csr.csv, which LiteX's reader takes: every
    counter and register (none of the tables) at its Etherbone address."""
    from litex.tools.remote.csr_builder import CSRBuilder
    from beehive.apps.etherbone import address
    code, out, err = ctl(capsys, "csr")
    assert code == 0, err
    (tmp_path / "csr.csv").write_text(out)
    regs = CSRBuilder(comm=type("Comm", (), {"read": None, "write": None}),
                      csr_csv=str(tmp_path / "csr.csv")).regs.d
    tile, entry = dmap.lookup("udp_rx.bad_checksum")
    assert regs["udp_rx_bad_checksum"].addr == address(tile.x, tile.y, entry.addr)
    assert regs["audit_rearm"].mode == "rw" and "audit_log" not in regs
    assert len(regs) == sum(e.words for t in dmap for e in t if e.kind != "table")
    code, _, err = ctl(capsys, "10.0.0.2", "csr", "extra")
    assert code == 2 and "usage: apiary ctl DESIGN HOST csr" in err


def test_a_design_without_a_controller(capsys):
    gc.collect()
    capsys.readouterr()
    code = main(["ctl", "examples/udp_echo.py", "list"])
    out, _ = capsys.readouterr()
    assert code == 0 and "no control plane" in out
    code = main(["ctl", "examples/udp_echo.py", "127.0.0.1", "counters"])
    _, err = capsys.readouterr()
    assert code == 1 and "has no controller" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    ((), "the following arguments are required"),
    (("127.0.0.1",), "give an action after HOST"),
    (("127.0.0.1", "frob"), "unknown action 'frob'"),
    (("read", "udp_rx.no_route"), "'read' needs the design's HOST"),
    (("127.0.0.1", "read"), "usage: apiary ctl DESIGN HOST read NAME..."),
    (("127.0.0.1", "write", "audit.rearm"), "write NAME VALUE"),
    (("127.0.0.1", "table", "audit.log"), "table NAME INDEX [VALUE | FIELD=VALUE...]"),
    (("127.0.0.1", "counters", "x"), "counters [--all]"),
    (("127.0.0.1", "read", "udp_rx.no_route", "--all"), "--all goes with counters"),
    (("127.0.0.1", "write", "audit.rearm", "five"), "VALUE must be a number"),
    (("127.0.0.1", "table", "audit.log", "-1"), "INDEX must not be negative"),
    (("127.0.0.1", "counters", "--port", "0"), "--port is 1 to 65535"),
])
def test_usage_errors_exit_2(capsys, args, message):
    code, _, err = ctl(capsys, *args)
    assert code == 2
    assert message in err, err


def test_read_write_counters_and_tables(capsys, fake, dmap):
    server = fake(counters={"udp_rx.bad_checksum": 3, "ip_rx.not_for_us": 1 << 31,
                            "ctl.requests": 12})
    code, out, err = ctl(capsys, *at(server, "read", "udp_rx.bad_checksum", "ip_rx.not_for_us"))
    assert code == 0, err
    assert out.split() == ["udp_rx.bad_checksum", "3", "ip_rx.not_for_us", str(1 << 31)]
    code, out, _ = ctl(capsys, *at(server, "--json", "read", "udp_rx.bad_checksum"))
    assert json.loads(out) == {"udp_rx.bad_checksum": 3}

    code, out, err = ctl(capsys, *at(server, "write", "audit.rearm", "0x2a"))
    assert code == 0, err
    assert out.split() == ["audit.rearm", "0x2a"]
    assert server.model.words[(3, 0)][0x1000] == 0x2A

    code, out, _ = ctl(capsys, *at(server, "counters"))
    assert [line.split() for line in out.splitlines()] == [
        ["ip_rx.not_for_us", str(1 << 31)], ["udp_rx.bad_checksum", "3"], ["ctl.requests", "12"]]
    code, out, _ = ctl(capsys, *at(server, "counters", "--all", "--json"))
    every = json.loads(out)
    assert len(every) == sum(len(t.of_kind("counter")) for t in dmap)
    assert every["udp_rx.bad_checksum"] == 3 and every["echo.dropped"] == 0

    log, entries = server.model.tables[(3, 0, 0x2000)]
    entries[5] = (0xABC << 64) | 26 << 112
    code, out, err = ctl(capsys, *at(server, "table", "audit.log", "5"))
    assert code == 0, err
    assert out.split() == ["audit.log[5]", hex(entries[5])]


def test_nothing_moved(capsys, fake):
    server = fake()
    code, out, _ = ctl(capsys, *at(server, "counters"))
    assert code == 0 and out.strip() == "no counter moved (--all shows them all)"


@pytest.mark.parametrize("args, message", [
    (("read", "udp_rx.nope"), "tile 'udp_rx' has no counter, register or table named 'nope'; "
                              "it has truncated, bad_length, no_route"),
    (("read", "nope.x"), "no tile named 'nope' on the control plane; tiles: eth_rx, ip_rx"),
    (("read", "udp_rx"), "name a counter, register or table as <tile>.<name>"),
    (("read", "audit.log"), "audit.log is a table of 64 entries: read an entry"),
    (("write", "udp_rx.no_route", "0"), "udp_rx.no_route is a counter: counters are read-only"),
    (("write", "audit.rearm", "256"), "audit.rearm is 8 bits wide: 256 does not fit"),
    (("table", "audit.log", "64"), "audit.log has entries 0 to 63, not 64"),
    (("table", "audit.log", "1", "5"), "audit.log is a read-only table"),
    (("table", "audit.rearm", "0"), "audit.rearm is a register, not a table"),
])
def test_refusals_exit_1_with_one_line(capsys, fake, args, message):
    server = fake()
    code, _, err = ctl(capsys, *at(server, *args))
    assert code == 1
    assert message in err, err
    assert err.startswith(f"apiary ctl: 127.0.0.1:{server.port}: ")
    assert len(err.splitlines()) == 1


def test_agent_refusals_and_silence(capsys, fake, dmap):
    server = fake()
    client = ControlClient(dmap, udp_transport("127.0.0.1", server.port, 2, 1))
    with pytest.raises(ControlError, match=r"BAD_ADDR \(no such word in the tile's address map\)"):
        client.read_words("udp_rx", 0x0FFF, 1)
    with pytest.raises(ControlError, match=r"READ_ONLY \(a word there is read-only\)"):
        client.write_words("udp_rx", 0, [1])
    with pytest.raises(ControlError, match="TIMEOUT"):
        client.read_words((3, 2), 0, 1)         # no agent there: the controller times out
    assert client.read_words("ctl", 0, 8) == [0] * 8

    silent = fake(silent=True)
    code, _, err = ctl(capsys, *at(silent, "read", "udp_rx.no_route", timeout="0.2"))
    assert code == 1
    assert err.strip() == f"apiary ctl: 127.0.0.1:{silent.port}: no answer from the " \
                          f"controller after 2 tries of 0.2 s"
    assert len(silent.requests) == 2 and silent.requests[0] == silent.requests[1]


def test_late_replies_are_skipped_and_long_runs_are_split(fake, dmap):
    """A reply to an earlier request (another tag) is never taken for a later one's; runs
    above 64 words go as several requests of at most 64."""
    model = AgentModel(dmap)
    late = []

    def one_late(request):                      # every reply comes one request late
        late.append(model.serve(request))
        return late[-2] if len(late) > 1 else b"\x00" * 8

    server = fake(serve=one_late)
    client = ControlClient(dmap, udp_transport("127.0.0.1", server.port, 0.5, 1))
    no_route = dmap.lookup("udp_rx.no_route")[1].addr
    model.words[(2, 0)][no_route] = 1
    assert client.read("udp_rx.no_route") == 1  # try 1 gets junk, try 2 try 1's reply
    model.words[(2, 0)][no_route] = 2
    # The same request but for its tag: try 1 gets the last one's reply (value 1), skipped.
    assert client.read("udp_rx.no_route") == 2
    assert len(server.requests) == 4

    def anything(request):                      # every word answered: its address
        count = request[6]
        addr = int.from_bytes(request[4:6], "big")
        return expected_reply(request, STATUS_OK, list(range(addr, addr + count)))

    server = fake(serve=anything)
    client = ControlClient(dmap, udp_transport("127.0.0.1", server.port, 2, 1))
    assert client.read_words("udp_rx", 0x1000, 130) == list(range(0x1000, 0x1000 + 130))
    client.write_words("udp_rx", 0x1000, list(range(65)))
    sizes = [(int.from_bytes(r[4:6], "big"), r[6], len(r)) for r in server.requests]
    assert sizes == [(0x1000, 64, 8), (0x1040, 64, 8), (0x1080, 2, 8),
                     (0x1000, 64, 8 + 256), (0x1040, 1, 12)]
    assert len({r[1] for r in server.requests}) == 5        # each its own tag


@pytest.mark.slow
@pytest.mark.xdist_group("udp_echo_ctl64")   # one model, built once
def test_against_the_simulated_design(capsys):
    """`apiary ctl` over UDP to the design itself, simulated (Verilator, 64 bits), through a
    bridge on 127.0.0.1 that hands each datagram to a SimTransport: counters, a register
    written and its effect, a table entry."""
    from apiary.sim import open_sim
    from beehive.control_client import SimTransport

    design = load_design(DESIGN, width=64)
    with open_sim(design, "verilator") as sim:
        server = FakeController(None, serve=SimTransport(sim))
        try:
            code, out, err = ctl(capsys, *at(server, "counters"))
            assert code == 0, err
            moved = dict(line.split() for line in out.splitlines())
            assert int(moved["ctl.reads"]) >= 10 and "udp_rx.bad_checksum" not in moved
            code, out, err = ctl(capsys, *at(server, "write", "audit.rearm",
                                             "3"))
            assert (code, out.split()) == (0, ["audit.rearm", "0x3"]), err
            code, out, _ = ctl(capsys, *at(server, "read", "audit.written"))
            assert out.split() == ["audit.written", "2"]
            code, out, _ = ctl(capsys, *at(server, "table", "audit.log", "1"))
            entry = int(out.split()[1], 16)
            assert entry >> 112 & 0xFF == 26 and entry >> 64 & 0xFFFF == 8
        finally:
            server.close()
