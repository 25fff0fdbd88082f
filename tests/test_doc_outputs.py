"""What the docs quote of `apiary check` is what it prints today: each quoted run (a fenced
block line ``$ apiary check ARGS``) is run, and its lines up to the next ``$`` or the end of the
block are compared with stdout and stderr together, and ``$ echo $?`` with the exit status. The
summary docs/simulation.md quotes of `apiary sim` is its standard output for the capture it
describes, and the error docs/sweeps.md quotes of `apiary sweep` is what it prints for the sweep
file it shows."""

import pathlib
import re
import shlex

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

import pytest

from apiary.cli import main
from fences import fence_at, fenced_blocks, fences

ROOT = pathlib.Path(__file__).resolve().parents[1]


def quoted_checks():
    runs = []
    for doc in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")]):
        for lines in fenced_blocks(doc.read_text()):
            for k, line in enumerate(lines):
                if line.startswith("$ apiary check "):
                    end = next((j for j in range(k + 1, len(lines))
                                if lines[j].startswith("$ ")), len(lines))
                    status = 0
                    if end < len(lines) and lines[end] == "$ echo $?":
                        status = int(lines[end + 1])
                    runs.append(pytest.param(shlex.split(line[2:])[1:], lines[k + 1:end], status,
                                             id=f"{doc.name}:{line[16:]}"))
    return runs


@pytest.mark.parametrize("argv, printed, status", quoted_checks())
def test_a_quoted_check_prints_what_the_doc_says(argv, printed, status, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(argv) == status
    captured = capsys.readouterr()
    assert (captured.out + captured.err).splitlines() == printed


def test_the_docs_quote_checks():
    assert len(quoted_checks()) >= 3


SIM_RUN = "$ apiary sim examples/udp_echo.py --width 64 --pcap-in in.pcap --pcap-out out.pcap"
SIM_CAPTURE = ('wrpcap("in.pcap", [Ether(dst="02:00:00:00:00:02") / IP(dst="10.0.0.2") / '
               'UDP(dport=9) / b"hi"] * 3)')


def test_the_quoted_sim_summary_is_what_it_prints(tmp_path, capsys, monkeypatch):
    doc = (ROOT / "docs" / "simulation.md").read_text()
    assert SIM_CAPTURE in " ".join(doc.split()), "docs/simulation.md no longer makes its capture so"
    found = fences(doc)
    quoted = found[fence_at(found, SIM_RUN)].lines
    assert quoted[0] == SIM_RUN
    monkeypatch.chdir(tmp_path)
    eval(SIM_CAPTURE, {"wrpcap": wrpcap, "Ether": Ether, "IP": IP, "UDP": UDP})
    examples = str(ROOT / "examples" / "udp_echo.py")
    assert main(["sim", examples, *shlex.split(SIM_RUN)[4:]]) == 0
    assert capsys.readouterr().out.splitlines() == quoted[1:]


SWEEP_RUN = "$ apiary sweep widths.py"


def test_the_quoted_sweep_error_is_what_it_prints(tmp_path, capsys, monkeypatch):
    """The sweep file docs/sweeps.md shows (the python block before the quoted run), written as
    widths.py beside a link to examples/: the one error it quotes, exit status 1."""
    doc = (ROOT / "docs" / "sweeps.md").read_text()
    found = fences(doc)
    k = fence_at(found, SWEEP_RUN)
    assert found[k].lines[0] == SWEEP_RUN
    script = found[k - 1]
    assert script.info == "python", script
    (tmp_path / "widths.py").write_text("\n".join(script.lines) + "\n")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "widths.py"]) == 1
    captured = capsys.readouterr()
    assert (captured.out + captured.err).splitlines() == found[k].lines[1:]


# The scripts behind the errors docs/layout.md quotes (each wrong in one way).
BAD_SCRIPTS = {
    "syn.py": 'from apiary.design import Design\n\ndef design(width=64):\n'
              '    d = Design("x", cols=1, rows=1\n',
    "deep.py": "from amaranth import unsigned\n\ndef design(width=64):\n    return unsigned(-3)\n",
    "noarg.py": "def design():\n    pass\n",
}


def test_the_quoted_load_errors_are_what_the_loader_says(tmp_path, monkeypatch):
    """docs/layout.md's three DesignErrors, for three scripts each wrong in one way, loaded as
    `apiary ... --width 64` loads them; ``...`` in the doc stands for a folder it leaves out."""
    from apiary.design import DesignError
    from apiary.load import load_design
    found = fences((ROOT / "docs" / "layout.md").read_text())
    quoted = found[fence_at(found, "syn.py:4: ")].lines
    monkeypatch.chdir(tmp_path)
    printed = []
    for name, source in BAD_SCRIPTS.items():
        (tmp_path / name).write_text(source)
        with pytest.raises(DesignError) as e:
            load_design(name, width=64)
        printed += str(e.value).splitlines()
    assert len(printed) == len(quoted)
    for line, doc in zip(printed, quoted):
        pattern = ".*".join(re.escape(part) for part in doc.split("..."))
        assert re.fullmatch(pattern, line), (line, doc)
