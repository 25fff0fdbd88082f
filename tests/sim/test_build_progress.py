"""`apiary sim` on a design whose Verilator model is not built yet: one summary line per long
step off a terminal, nothing from the cache; Ctrl-C in the middle of the build ends in one
line, exit status 130, no compiler left running and nothing half-built in the cache."""

import os
import pathlib
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


def _sim(tmp_path, cache, **popen):
    wrpcap(str(tmp_path / "in.pcap"), [Ether(dst="02:00:00:00:00:02") / (b"x" * 50)])
    env = dict(os.environ, APIARY_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "apiary.cli", "sim", LOOPBACK, "--pcap-in",
         str(tmp_path / "in.pcap"), "--pcap-out", str(tmp_path / "out.pcap")],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, **popen)


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


def test_ctrl_c_during_a_build_then_a_build_then_the_cache(tmp_path):
    cache, models = _fresh_cache(tmp_path)

    # Interrupted while the model's compilers run (its work directory has Verilator's output).
    proc = _sim(tmp_path, cache)
    deadline = time.monotonic() + 300
    while not any((d / "obj").is_dir() for d in models.glob("*.tmp-*")
                  if not d.name.startswith("runtime")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.endswith("\ninterrupted\n") and "Traceback" not in err
    time.sleep(0.2)
    assert _processes_under(cache) == []                 # no compiler left running
    assert list(models.glob("*.tmp-*")) == []            # no half-built model left behind
    assert list(models.glob("*/model.so")) == []

    # Built: the settings line, then one line per long step, each saying where it is kept.
    proc = _sim(tmp_path, cache)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    assert lines[0].startswith("frame_loopback: width 64 bits")
    assert lines[-1].startswith("built Verilator model of 'frame_loopback' in ")
    so, = models.glob("*/model.so")
    assert lines[-1].endswith(f" s (cached at {so.parent})")
    assert "1 frames in, 1 frames out" in out

    # From the cache: nothing but the settings line.
    proc = _sim(tmp_path, cache)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and err.splitlines() == lines[:1]
    assert "1 frames in, 1 frames out" in out
