"""docs/simulation.md's first example runs as printed, from the repository's root, and the
design answers it."""

import contextlib
import io
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "simulation.md"


def test_the_first_example_gets_its_echo(monkeypatch):
    first = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(first, str(DOC), "exec"), {})
    printed = out.getvalue().splitlines()
    # One frame back (its cycles and bytes), then sent() and counters() as printed.
    first_cycle, last_cycle, reply = printed[0].split()
    assert int(first_cycle) <= int(last_cycle) and reply.endswith(b"hello".hex())
    assert "'udp_tx_forwarded': 1" in printed[-1] and "'eth_rx_not_for_us': 0" in printed[-1]
