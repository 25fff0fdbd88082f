"""Every ```python block of README.md and docs/*.md runs as printed (issue 40, "Docs that run").

One test per block, its id the block's file and first line (``docs/simulation.md:12``). The
conventions, in the spirit of doctest:

* The blocks of one document run in order in one namespace, so a block may use what an earlier
  block of its document defined, in a fresh temporary working directory holding a link to the
  repository's ``examples/`` (the docs write ``load_design("examples/udp_echo.py")``). A block's
  test runs the earlier blocks first if they have not run yet (pytest may order tests otherwise).
* An HTML comment on the line just before the opening fence marks a block:

  - ``<!-- doc-test: slow -->``: it needs minutes (a cold Verilator build of a big design, a long
    simulation); it runs in the slow tier only (``@pytest.mark.slow``). A block the fast tier
    runs never sees what a slow block defined: the fast blocks of a document share one namespace,
    and each slow block runs, after every earlier block, in a namespace of the slow tier's own.
  - ``<!-- doc-test: skip: REASON -->``: it cannot run in CI (a board, a licence, a cluster); the
    test is skipped with REASON, and later blocks must not need it.
  - ``<!-- doc-test: excerpt FILE -->``: it quotes lines of FILE (a path in the repository:
    "the lines of its design() that add them"), which the tests run; the test checks that every
    line of code in the block is a line of FILE, in the same order (comments and indentation
    aside), and does not run it.

  Any other ``doc-test`` comment fails the block's test, naming its file and line.
* A failing block's test names the document and the line in it that failed, with the traceback.
* docs/writing-a-tile.md is left out: tests/test_upper_echo.py runs and compares its blocks.
"""

import io
import linecache
import os
import pathlib
import re
import tokenize
import traceback

import pytest

from fences import fences

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Covered elsewhere, and by which test: their blocks are not run here.
COVERED = {"docs/writing-a-tile.md": "tests/test_upper_echo.py"}
MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->")
KINDS = ("slow", "skip", "excerpt")


def documents():
    """README.md and docs/*.md, as paths relative to the repository."""
    return ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


class Block:
    """A ```python block: where it is, its source, and its marker (kind, reason), if any."""

    def __init__(self, doc, fence):
        self.doc, self.line, self.source = doc, fence.line, "\n".join(fence.lines) + "\n"
        marker = MARKER.search(fence.before)
        text = marker.group(1) if marker else ""
        kind, _, reason = text.partition(":")
        if kind.startswith("excerpt"):
            kind, _, reason = text.partition(" ")
        self.kind, self.reason = kind.strip() or None, reason.strip()
        self.problem = None
        if "doc-test" in fence.before and marker is None:
            self.problem = f"a malformed marker: {fence.before!r}"
        elif self.kind is not None and self.kind not in KINDS:
            self.problem = f"an unknown marker {text!r} (known: {', '.join(KINDS)})"
        elif self.kind == "skip" and not self.reason:
            self.problem = "a skip without its reason (<!-- doc-test: skip: REASON -->)"
        elif self.kind == "excerpt" and not (ROOT / self.reason).is_file():
            self.problem = f"an excerpt of {self.reason!r}, which is no file of the repository"

    @property
    def where(self):
        return f"{self.doc}:{self.line}"


def blocks(doc):
    """The ```python blocks of ``doc`` (a path relative to the repository), in order."""
    return [Block(doc, f) for f in fences((ROOT / doc).read_text()) if f.info == "python"]


def every_block():
    return [b for doc in documents() if doc not in COVERED for b in blocks(doc)]


class Session:
    """The namespace one chain of a document's blocks runs in, and its working directory."""

    def __init__(self, folder):
        self.folder, self.namespace, self.ran = folder, {"__name__": "__doc_test__"}, set()
        os.symlink(ROOT / "examples", folder / "examples")

    def run(self, block):
        """Run ``block`` here (once); a failure fails the test, naming the document's line."""
        if block.where in self.ran:
            return
        self.ran.add(block.where)
        path = str(ROOT / block.doc)
        # The block's source at its own lines of the document: tracebacks give the doc's line.
        source = "\n" * (block.line - 1) + block.source
        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
        cwd = os.getcwd()
        os.chdir(self.folder)
        try:
            exec(compile(source, path, "exec"), self.namespace)
        except Exception as e:
            line = failing_line(e, path)
            pytest.fail(f"{block.doc}:{line} (the block at {block.where}) raised "
                        f"{type(e).__name__}: {e}\n"
                        + "".join(traceback.format_exception(e)), pytrace=False)
        finally:
            os.chdir(cwd)
            linecache.cache.pop(path, None)


def code_lines(text):
    """``text``'s lines of code, each without its comment and indentation (blank ones left
    out), for comparing an excerpt with its source."""
    comments = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
    lines = text.splitlines()
    return [code for n, line in enumerate(lines, 1)
            if (code := line[:comments.get(n, len(line))].strip())]


def missing_from(excerpt, source):
    """The first line of ``excerpt``'s code not found in ``source``'s after the previous one
    (``None`` if every line is there, in order)."""
    wanted, have = code_lines(excerpt), iter(code_lines(source))
    for line in wanted:
        if not any(line == other for other in have):
            return line
    return None


def failing_line(error, path):
    """The line of the document (``path``) that ``error`` came from: its innermost frame there."""
    if isinstance(error, SyntaxError) and error.filename == path:
        return error.lineno
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == path]
    return frames[-1].lineno if frames else "?"


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """One session per (document, tier), made when first needed."""
    made = {}

    def session(doc, tier):
        if (doc, tier) not in made:
            made[doc, tier] = Session(tmp_path_factory.mktemp(f"{pathlib.Path(doc).stem}-{tier}"))
        return made[doc, tier]
    return session


def params():
    return [pytest.param(b, id=b.where, marks=[pytest.mark.slow] if b.kind == "slow" else [])
            for b in every_block()]


@pytest.mark.parametrize("block", params())
def test_a_python_block_runs_as_printed(block, sessions):
    if block.problem:
        pytest.fail(f"{block.where}: {block.problem}", pytrace=False)
    if block.kind == "skip":
        pytest.skip(f"{block.where}: {block.reason}")
    if block.kind == "excerpt":
        line = missing_from(block.source, (ROOT / block.reason).read_text())
        assert line is None, (f"{block.where} quotes {block.reason}, which has no line "
                              f"{line!r} after the ones before it")
        return
    earlier = blocks(block.doc)
    earlier = earlier[:[b.where for b in earlier].index(block.where)]
    tier = "slow" if block.kind == "slow" else "fast"
    session = sessions(block.doc, tier)
    for b in earlier:
        if b.problem is None and (b.kind is None or (b.kind == "slow" and tier == "slow")):
            # (an excerpt is not run: it is not part of the document's program)
            session.run(b)
    session.run(block)


def test_the_docs_have_python_blocks_and_the_covered_ones_are_run_elsewhere():
    assert len(every_block()) >= 25
    for doc, test in COVERED.items():
        assert blocks(doc), f"{doc} has no python block: drop it from COVERED"
        assert doc in (ROOT / test).read_text(), f"{test} does not say it runs {doc}'s blocks"


def test_a_marker_is_read_and_an_unknown_one_is_an_error():
    def block(before):
        return Block("x.md", fences(f"{before}\n```python\npass\n```\n")[0])
    assert (block("").kind, block("").problem) == (None, None)
    assert block("<!-- doc-test: slow -->").kind == "slow"
    skip = block("<!-- doc-test: skip: needs a board: a Colorlight 5A-75B -->")
    assert (skip.kind, skip.reason, skip.problem) == ("skip", "needs a board: a Colorlight 5A-75B",
                                                      None)
    assert "unknown marker 'later'" in block("<!-- doc-test: later -->").problem
    assert "without its reason" in block("<!-- doc-test: skip -->").problem
    assert "malformed" in block("<!-- doc-test slow -->").problem
    assert block("").where == "x.md:3"


def test_a_failure_names_the_line_of_the_document(tmp_path):
    block = Block("README.md", fences("intro\n\n```python\nx = 1\n\ny = x / 0\n```\n")[0])
    with pytest.raises(pytest.fail.Exception, match=r"README.md:6 \(the block at README.md:4\) "
                                                    r"raised ZeroDivisionError"):
        Session(tmp_path).run(block)


def test_an_excerpt_is_checked_line_by_line_in_order():
    source = "def f(d):\n    d.add('a')   # first\n    d.add('b')\n    return d\n"
    assert missing_from("d.add('a')\nd.add('b')  # then b\n", source) is None
    assert missing_from("d.add('b')\nd.add('a')\n", source) == "d.add('a')"   # out of order
    assert missing_from("d.add('c')\n", source) == "d.add('c')"
    block = Block("x.md", fences("<!-- doc-test: excerpt examples/nat_echo.py -->\n"
                                 "```python\npass\n```\n")[0])
    assert (block.kind, block.reason, block.problem) == ("excerpt", "examples/nat_echo.py", None)
    assert "no file" in Block("x.md", fences("<!-- doc-test: excerpt nowhere.py -->\n"
                                             "```python\npass\n```\n")[0]).problem
