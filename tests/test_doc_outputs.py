"""What the docs quote of `apiary check` is what it prints today: each quoted run (a fenced
block line ``$ apiary check ARGS``) is run, and its lines up to the next ``$`` or the end of the
block are compared with stdout and stderr together, and ``$ echo $?`` with the exit status."""

import pathlib
import shlex

import pytest

from apiary.cli import main
from fences import fenced_blocks

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
