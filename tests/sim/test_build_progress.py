"""`apiary sim` on a design whose Verilator model is not built yet: one summary line per long
step off a terminal, nothing from the cache; Ctrl-C in the middle of the build ends in one
line, exit status 130, no compiler left running and nothing half-built in the cache."""

import os
import re
import pathlib
import pty
import shutil
import signal
import subprocess
import sys
import time

from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from apiary.sim.verilator import cache_root

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOOPBACK = str(ROOT / "examples" / "frame_loopback.py")


def _fresh_cache(tmp_path):
    """A cache of its own, with Verilator's runtime (compiled once per toolchain, not what is
    tested here) copied from the usual cache when it is there."""
    cache = tmp_path / "cache"
    models = cache / "verilator"
    models.mkdir(parents=True)
    usual = pathlib.Path(cache_root())
    for runtime in usual.glob("runtime-*") if usual.is_dir() else []:
        if not runtime.name.startswith("runtime.tmp"):
            shutil.copytree(runtime, models / runtime.name)
    return cache, models


def _sim(tmp_path, cache, stderr=subprocess.PIPE):
    wrpcap(str(tmp_path / "in.pcap"), [Ether(dst="02:00:00:00:00:02") / (b"x" * 50)])
    env = dict(os.environ, APIARY_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "apiary.cli", "sim", LOOPBACK, "--pcap-in",
         str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "out.pcap")],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True,
        preexec_fn=_ctrl_c_as_on_a_terminal)


def _ctrl_c_as_on_a_terminal():
    """SIGINT's default in the child, as a shell gives a command it runs in the foreground: a
    pytest started in the background (``nohup ... &``) ignores SIGINT, and its children would
    inherit that, and so ignore the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _processes_under(path):
    """Processes whose working directory or command line is inside ``path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(str(path)) or str(path) in cmdline:
            found.append((pid, cmdline))
    return found


def _read_all(fd):
    """Everything written to a pseudo-terminal until its last writer closes it."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:                 # EIO: no writer left
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode()


def test_ctrl_c_during_a_build_then_a_build_then_the_cache(tmp_path):
    cache, models = _fresh_cache(tmp_path)

    # Interrupted while the model's compilers run (on an idle machine they take about a second
    # for this small design: the signal goes as soon as one is seen).
    proc = _sim(tmp_path, cache)
    deadline = time.monotonic() + 300
    while not any(".cpp" in cmdline for _, cmdline in _processes_under(models)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.endswith("\ninterrupted\n") and "Traceback" not in err
    # Off a terminal, each step that ran is one line when it is done: here the conversion.
    assert err.splitlines()[1].startswith("converted 'frame_loopback' to Verilog in ")
    assert "building" not in err and "\r" not in err
    time.sleep(0.2)
    assert _processes_under(cache) == []                 # no compiler left running
    assert list(models.glob("*.tmp-*")) == []            # no half-built model left behind
    assert list(models.glob("*/model.so")) == []

    # Built, on a terminal: a status line counting the seconds, updated in place, then the
    # summary that says where the model is kept.
    main, tty = pty.openpty()
    proc = _sim(tmp_path, cache, stderr=tty)
    os.close(tty)
    err = _read_all(main).replace("\r\n", "\n")
    out = proc.stdout.read()
    assert proc.wait(timeout=600) == 0, err
    status = "\r\x1b[Kbuilding Verilator model of 'frame_loopback' (64 bits, 2 tiles)... "
    assert err.count(status) >= 1 and f"{status}0 s" in err
    lines = err.rpartition("\r\x1b[K")[2].splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulated ")       # the run's, after its own
    lines = err.split("\r\x1b[Ksimulating 1 frames (verilator)")[0].rpartition("\r\x1b[K")[2]
    lines = lines.splitlines()
    assert len(lines) == 1 and lines[0].startswith("built Verilator model of 'frame_loopback' in ")
    so, = models.glob("*/model.so")
    assert lines[0].endswith(f" s (cached at {so.parent})")
    assert "1 frames in, 1 frames out" in out
    settings = err.splitlines()[0]
    assert settings.startswith("frame_loopback: width 64 bits")

    # From the cache: nothing but the settings line and the run's.
    proc = _sim(tmp_path, cache)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and err.splitlines()[0] == settings
    assert len(err.splitlines()) == 2
    assert re.fullmatch(r"simulated \d+ cycles in [\d.]+ s \(verilator\)", err.splitlines()[1])
    assert "1 frames in, 1 frames out" in out
