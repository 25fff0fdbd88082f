"""Shared by the TAP bridge tests: a network namespace the test creates and deletes, and an
`apiary sim --tap` bridge started inside it. The only process a test ends is the bridge it
started, by its PID.

These tests need root (CI runs as root): without it they fail, they do not skip.
"""

import contextlib
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kw)


@pytest.fixture
def netns(request):
    """A fresh network namespace, named after this process and test (unique under xdist)."""
    if os.geteuid() != 0:
        pytest.fail("the TAP bridge tests need root to create a network namespace and a TAP "
                    "device (CI runs as root)")
    if shutil.which("ip") is None:
        pytest.fail("the TAP bridge tests need the `ip` command (Debian package iproute2)")
    name = f"apiary-{os.getpid()}-{request.node.name}"
    sh("ip", "netns", "add", name)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class Bridge:
    """``apiary sim DESIGN --tap TAP [ARGS...]`` running inside namespace ``netns``.

    Tests get one from the ``bridge`` fixture, which kills it (by its PID) if still running.
    """

    def __init__(self, netns, design, tap, *args):
        self.netns, self.tap = netns, tap
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-m", "apiary.cli", "sim",
             str(ROOT / design), "--tap", tap, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.output = []

    def _read(self):
        for line in self.process.stdout:
            self._lines.put(line)

    def _drain(self):
        while not self._lines.empty():
            self.output.append(self._lines.get())

    @property
    def text(self):
        self._drain()
        return "".join(self.output)

    def wait_ready(self, timeout):
        """Wait for the "bridging" line (a cold Verilator build may come first)."""
        deadline = time.monotonic() + timeout
        while not any("bridging" in line for line in self.output):
            assert self.process.poll() is None, "the bridge exited early:\n" + self.text
            assert time.monotonic() < deadline, \
                f"the bridge did not start within {timeout} s:\n" + self.text
            try:
                self.output.append(self._lines.get(timeout=1))
            except queue.Empty:
                pass

    def netns_run(self, *args, **kw):
        """Run a command inside the bridge's namespace (raising if it fails, unless
        ``check=False``)."""
        return sh("ip", "netns", "exec", self.netns, *args, **kw)

    def address(self, ip):
        """Bring the TAP device (and loopback) up in the namespace, with address ``ip``/24."""
        self.netns_run("ip", "link", "set", self.tap, "up")
        self.netns_run("ip", "addr", "add", f"{ip}/24", "dev", self.tap)
        self.netns_run("ip", "link", "set", "lo", "up")

    def apiary(self, *args, timeout=300):
        """Run ``apiary ARGS...`` inside the namespace; it must succeed without a traceback.
        Returns its standard output."""
        result = self.netns_run(sys.executable, "-m", "apiary.cli", *args, timeout=timeout,
                                check=False, cwd=ROOT)
        assert result.returncode == 0, result.stdout + result.stderr + self.text
        assert "Traceback" not in result.stderr
        return result.stdout

    def wait_for(self, pattern, timeout):
        """Wait for a line of the bridge's output matching ``pattern`` (a regular expression);
        return the match."""
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            for line in self.output:
                if m := re.search(pattern, line):
                    return m
            assert self.process.poll() is None, "the bridge exited:\n" + self.text
            assert time.monotonic() < deadline, \
                f"no line matching {pattern!r} within {timeout} s:\n" + self.text
            time.sleep(0.2)

    def stop(self, timeout=30):
        """SIGINT the bridge; return its exit code."""
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=timeout)
        # The reader thread ends at EOF, which follows the exit: give it a moment to finish.
        deadline = time.monotonic() + 5
        while not any(line.startswith("stopped:") for line in self.output) and \
                time.monotonic() < deadline:
            try:
                self.output.append(self._lines.get(timeout=0.1))
            except queue.Empty:
                pass
        self._drain()
        return code

    def stopped(self):
        """``(frames_in, frames_out, line)`` from the bridge's "stopped:" line."""
        lines = [line for line in self.output if line.startswith("stopped:")]
        assert lines, "the bridge printed no 'stopped:' line:\n" + self.text
        match = re.search(r"frames in (\d+), frames out (\d+)", lines[0])
        assert match, lines[0]
        return int(match[1]), int(match[2]), lines[0]

    def litex(self, tool, *args):
        """Run LiteX's ``tool`` (``litex_cli``...) in the namespace; return its standard
        output (it must succeed without a traceback)."""
        result = self.netns_run(sys.executable, "-m", f"litex.tools.{tool}", *args,
                                timeout=120, check=False, cwd=ROOT)
        assert result.returncode == 0 and "Traceback" not in result.stderr, \
            result.stdout + result.stderr + self.text
        return result.stdout

    @contextlib.contextmanager
    def litex_server(self, ip, timeout=60):
        """LiteX's ``litex_server --udp`` to the design at ``ip``, in the namespace, from when
        it has probed the design and listens for its clients (TCP port 1234) to the end of the
        ``with`` block; then it is killed, by its PID."""
        server = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, sys.executable, "-m",
             "litex.tools.litex_server", "--udp", "--udp-ip", ip],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        try:
            deadline = time.monotonic() + timeout
            while self.netns_run("ss", "-Hltn", "sport = :1234").stdout.strip() == "":
                assert server.poll() is None, "litex_server exited:\n" + server.stdout.read()
                assert time.monotonic() < deadline, "litex_server did not start listening"
                time.sleep(0.2)
            yield server
        finally:
            server.kill()
            server.wait()

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def bridge(netns):
    """``bridge(design, tap, *args)`` starts a :class:`Bridge` in ``netns``; any still running
    when the test ends is killed (by its PID) before the namespace is deleted."""
    started = []

    def start(design, tap, *args):
        started.append(Bridge(netns, design, tap, *args))
        return started[-1]

    try:
        yield start
    finally:
        for b in started:
            b.kill()
