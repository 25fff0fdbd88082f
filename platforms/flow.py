"""Running the long tools of a build: progress on the terminal, logs in files, errors that say
what went wrong.

:func:`run_step` runs one tool with its output in ``<build dir>/<step>.log``, reporting to an
:class:`apiary.terminal.StatusLine` (the command line's one progress helper). On a terminal it
shows one line that updates each second (step, elapsed time, the tool's latest line); elsewhere
(CI, a pipe) it prints one line when a step starts and one when it ends. A missing tool or a
failing one raises :class:`BuildFailed`: one line with the log's path when the cause is known
(``explain``, e.g. :func:`explain_nextpnr`: the design does not fit), otherwise the command, the
log's path and its last lines.
"""

import os
import re
import subprocess
import threading
import time

from apiary import synth

from .report import CELL_NAMES


__all__ = ["BuildFailed", "TimingFailed", "find_tool", "run_step", "explain_nextpnr"]


class BuildFailed(Exception):
    """A build step failed; the message says which, why, and where its log is."""


class TimingFailed(BuildFailed):
    """Every step ran, but a clock missed its target: the message names each (net, Fmax
    reached, target); ``report`` is the build's :class:`~.report.BuildReport`."""

    def __init__(self, report, message):
        super().__init__(message)
        self.report = report


def find_tool(name):
    """The path of ``name`` on PATH (:func:`apiary.synth.find_tool`, whose ``TOOLS`` says
    where each comes from), or :class:`BuildFailed` saying how to install it."""
    try:
        return synth.find_tool(name)
    except synth.ToolMissing as error:
        raise BuildFailed(str(error)) from None


def _last_lines(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def run_step(title, argv, cwd, log_name, progress, *, explain=None):
    """Run ``argv`` in ``cwd`` (the tool is looked up on PATH first), output to
    ``cwd/log_name``, reporting to ``progress`` (an :class:`apiary.terminal.StatusLine`).
    Returns the elapsed seconds. ``explain(log_text)`` may turn a failure's log into a better
    message (e.g. "the design does not fit")."""
    argv = [find_tool(argv[0])] + list(argv[1:])
    log_path = os.path.join(cwd, log_name)
    progress.note(f"{title}: {' '.join([os.path.basename(argv[0])] + argv[1:])}")
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        done = threading.Event()

        def ticker():
            while not done.wait(1.0):
                last = _last_lines(log_path, 1).strip()
                progress.status(f"  {title} {time.monotonic() - start:5.0f} s  {last}")
        thread = threading.Thread(target=ticker, daemon=True)
        thread.start()
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        finally:
            done.set()
            thread.join()
            progress.end_status()
    elapsed = time.monotonic() - start
    if code != 0:
        with open(log_path, errors="replace") as f:
            text = f.read()
        reason = explain(text) if explain else None
        if reason:          # a known cause: one line
            raise BuildFailed(f"{title} failed after {elapsed:.0f} s: {reason} (log: {log_path})")
        raise BuildFailed(f"{title} failed (exit code {code}) after {elapsed:.0f} s\n"
                          f"log: {log_path}\n--- last lines ---\n{_last_lines(log_path)}")
    progress.note(f"  {title} done in {elapsed:.1f} s")
    return elapsed


def explain_nextpnr(log, device=None):
    """A failed nextpnr run's reason, when it is that the design does not fit ``device`` (the
    part, e.g. ``LFE5U-25F-6BG256C``): "the design needs 27,715 LUT4s, the LFE5U-25F has
    24,288", from the cell counts of the device utilisation nextpnr logs before placing."""
    cells = re.findall(r"^Info:\s+([A-Z][A-Z0-9_]*):\s+(\d+)/\s*(\d+)\s+\d+%", log, re.M)
    full = [(CELL_NAMES.get(cell, cell), int(used), int(avail))
            for cell, used, avail in cells if int(used) > int(avail)]
    failed = re.search(r"Unable to place|failed to place|Unable to find legal placement", log,
                       re.I)
    if not full and not failed:
        return None
    part = "FPGA"
    if device:
        family = re.match(r"LFE5\w*-\d+F", device)     # LFE5U-25F-6BG256C: the LFE5U-25F
        part = family.group(0) if family else device
    if not full:
        return f"the design does not fit the {part}"
    needs = " and ".join(f"{used:,} {name}" for name, used, _ in full)
    has = " and ".join(f"{avail:,}" for _, _, avail in full)
    return f"the design needs {needs}, the {part} has {has}"
