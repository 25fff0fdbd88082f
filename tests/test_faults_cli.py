"""`apiary faults` (beehive/ctl_cli.py) against a fake control service: a UDP server in a thread
on 127.0.0.1 that answers like KernelCtlTile (its replies built with kernel_ctl's own
fault_reply/status_reply), and can drop, repeat or time out answers."""

import json
import socket
import threading

import pytest

from apiary.cli import commands, main
from apiary.os.uapi import FaultKind, KernelMeta, Perm
from beehive.apps.kernel_ctl import (OP_FAULT_READ, STATUS_BAD_REQUEST, STATUS_NO_ENTRY,
                                     STATUS_OK, STATUS_TIMEOUT, fault_reply, fault_request,
                                     release_request, request_ok, status_reply)

OOB = KernelMeta(mem_x=3, mem_y=0, op=FaultKind.OUT_OF_BOUNDS, handle=0x11, addr=4092, size=12,
                 perm=Perm.WRITE, peer_x=4, peer_y=2, peer_fbits=8, user=20)
INBOUND = KernelMeta(mem_x=3, mem_y=1, op=FaultKind.INBOUND, peer_x=2, peer_y=0, peer_fbits=8,
                     user=26 | 1 << 8)


class FakeCtl:
    """Answers fault reads from ``entries`` and releases with status ``release_status``.
    Datagrams numbered in ``drop`` (0 the first received) get no answer, those in ``timeout``
    a read answered with STATUS_TIMEOUT; with ``repeat`` every answer is sent twice."""

    def __init__(self, entries=(), *, total=None, drop=(), timeout=(), repeat=False,
                 release_status=STATUS_OK, silent=False):
        self.entries, self.total = list(entries), total
        self.drop, self.timeout, self.repeat = set(drop), set(timeout), repeat
        self.release_status, self.silent = release_status, silent
        self.requests = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def answer(self, request):
        total = len(self.entries) if self.total is None else self.total
        if not request_ok(request):
            return status_reply(request, STATUS_BAD_REQUEST)
        if request[0] != OP_FAULT_READ:
            return status_reply(request, self.release_status)
        index = int.from_bytes(request[1:3], "big")
        if len(self.requests) - 1 in self.timeout:
            return fault_reply(index, STATUS_TIMEOUT, 0)
        if index >= len(self.entries):
            return fault_reply(index, STATUS_NO_ENTRY, total)
        return fault_reply(index, STATUS_OK, total, self.entries[index])

    def _serve(self):
        while not self._stop.is_set():
            try:
                request, client = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            self.requests.append(request)
            if self.silent or len(self.requests) - 1 in self.drop:
                continue
            for _ in range(2 if self.repeat else 1):
                self.sock.sendto(self.answer(request), client)

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def ctl():
    servers = []

    def start(*args, **kw):
        servers.append(FakeCtl(*args, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def run(server, *args, timeout="0.2"):
    return main(["faults", "127.0.0.1", "--port", str(server.port), "--timeout", timeout,
                 *args])


def test_registered_through_the_entry_point():
    assert commands()["faults"].run.__module__ == "beehive.ctl_cli"


def test_prints_every_entry_and_stops_at_no_entry(ctl, capsys):
    server = ctl([OOB, INBOUND])
    assert run(server) == 0
    out, err = capsys.readouterr()
    assert err == ""
    head, first, second, summary = out.splitlines()
    assert head.split() == ["index", "tile", "kind", "handle", "addr", "size", "perm", "peer",
                            "msg_type", "inbound"]
    assert first.split() == ["0", "(3,0)", "OUT_OF_BOUNDS", "0x11", "0xffc", "12", "W", "to",
                             "(4,2):8", "MemMsgType.STORE_MEM", "no"]
    assert second.split() == ["1", "(3,1)", "INBOUND", "0x00", "0x0", "0", "-", "from",
                              "(2,0):8", "MsgType.UDP_RX_SEGMENT", "yes"]
    assert summary == "2 faults in the log"
    assert server.requests == [fault_request(0), fault_request(1), fault_request(2)]


def test_an_empty_log_and_a_full_one(ctl, capsys):
    assert run(ctl()) == 0
    assert capsys.readouterr().out == "0 faults in the log\n"
    assert run(ctl([OOB], total=5)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "1 fault in the log; 5 since reset (4 not stored: the log is full)"


def test_a_dropped_answer_or_a_service_timeout_is_asked_again(ctl, capsys):
    server = ctl([OOB, INBOUND], drop={1}, timeout={3})
    assert run(server) == 0
    out = capsys.readouterr().out
    assert "OUT_OF_BOUNDS" in out and "INBOUND" in out and out.endswith("2 faults in the log\n")
    assert server.requests == [fault_request(0), fault_request(1), fault_request(1),
                               fault_request(2), fault_request(2)]


def test_repeated_answers_are_not_taken_for_the_next_entry(ctl, capsys):
    server = ctl([OOB, INBOUND], repeat=True)
    assert run(server, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert [e["index"] for e in result["entries"]] == [0, 1]
    assert server.requests == [fault_request(0), fault_request(1), fault_request(2)]


def test_json(ctl, capsys):
    server = ctl([OOB])
    assert run(server, "--json", "--release", "3,0") == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {
        "host": "127.0.0.1", "port": server.port, "total": 1, "released": [3, 0],
        "entries": [{"index": 0, "tile": [3, 0], "kind": "OUT_OF_BOUNDS", "handle": 0x11,
                     "addr": 4092, "size": 12, "perm": "W", "peer": [4, 2, 8],
                     "msg_type": "MemMsgType.STORE_MEM", "inbound": False}]}


def test_release_after_the_log(ctl, capsys):
    server = ctl([OOB], drop={2})           # the release's first answer is lost
    assert run(server, "--release", "3,0") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-2:] == ["1 fault in the log", "released tile (3,0)"]
    assert server.requests == [fault_request(0), fault_request(1), release_request(3, 0),
                               release_request(3, 0)]


def test_a_refused_release_fails(ctl, capsys):
    server = ctl(release_status=STATUS_BAD_REQUEST)
    assert run(server, "--release", "3,0") == 1
    out, err = capsys.readouterr()
    assert out == "0 faults in the log\n"
    assert err == f"apiary faults: 127.0.0.1:{server.port}: releasing (3,0): status 0xff\n"


def test_no_answer_is_one_line_and_releases_nothing(ctl, capsys):
    server = ctl(silent=True)
    assert run(server, "--retries", "1", "--release", "3,0", timeout="0.1") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"apiary faults: 127.0.0.1:{server.port}: no answer after 2 tries of 0.1 s\n"
    assert server.requests == [fault_request(0)] * 2


def test_unknown_host(capsys):
    assert main(["faults", "no-such-host.invalid", "--timeout", "0.1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("apiary faults: no-such-host.invalid:7100: unknown host")
    assert err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--release", "3"], "--release takes a tile as X,Y (e.g. 3,0), not '3'"),
    (["--release", "a,b"], "--release takes a tile as X,Y (e.g. 3,0), not 'a,b'"),
    (["--release", "300,0"], "--release: tile coordinates are 0 to 255, not '300,0'"),
    (["--retries", "-1"], "--port is 1 to 65535, --timeout above 0, --retries 0 or more"),
    (["--timeout", "0"], "--port is 1 to 65535, --timeout above 0, --retries 0 or more"),
])
def test_bad_arguments_are_usage_errors(ctl, capsys, args, message):
    server = ctl([OOB])
    assert main(["faults", "127.0.0.1", "--port", str(server.port), *args]) == 2
    assert capsys.readouterr().err == f"apiary faults: {message}\n"
    assert server.requests == []


def test_a_missing_host_is_a_usage_error(capsys):
    assert main(["faults"]) == 2
    assert "HOST" in capsys.readouterr().err
