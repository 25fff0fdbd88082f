"""Benchmarks as sweep jobs: `apiary bench` runs through the sweep engine (in this process, or
on an embedded Dask cluster), caches its report by the sources it depends on, and a sweep of
benchmarks writes its reports into a document's blocks."""

import io
import os

import pytest

from apiary.cli import main as apiary
from harness.sweep import Bench, ResultCache, Sweep, run_sweep, to_csv, to_markdown
from harness.sweep.cli import main as sweep_main
from harness.sweep.document import Stamp, blocks, stale_blocks, stamps, update_blocks
from harness.sweep.run import today


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTROL = ("control", "--hops", "1")


def test_apiary_bench_is_a_cached_sweep_job(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("APIARY_SWEEP_CACHE", str(tmp_path))
    assert apiary(["bench", *CONTROL, "--markdown"]) == 0
    first = capsys.readouterr()
    assert "| read a word 1 hop away: request in → answer out |" in first.out
    assert "from the sweep cache" not in first.err
    assert [e["params"]["args"] for e in ResultCache(str(tmp_path)).executed()] == [
        [*CONTROL, "--markdown"]]

    # Again: the same report, from the cache (nothing ran).
    assert apiary(["bench", *CONTROL, "--markdown"]) == 0
    again = capsys.readouterr()
    assert again.out == first.out and "from the sweep cache" in again.err
    assert len(ResultCache(str(tmp_path)).executed()) == 1

    # --fresh measures again, wherever it is among the benchmark's options.
    assert apiary(["bench", "control", "--fresh", "--hops", "1", "--markdown"]) == 0
    assert capsys.readouterr().out == first.out
    assert len(ResultCache(str(tmp_path)).executed()) == 2


def test_apiary_bench_on_an_embedded_cluster_prints_the_same_report(tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.setenv("APIARY_SWEEP_CACHE", str(tmp_path))
    assert apiary(["bench", *CONTROL, "--markdown"]) == 0
    here = capsys.readouterr().out
    assert apiary(["bench", *CONTROL, "--markdown", "--workers", "1", "--fresh"]) == 0
    assert capsys.readouterr().out == here
    assert len(ResultCache(str(tmp_path)).executed()) == 2


def test_a_failing_benchmark_is_a_failed_job_and_not_cached(tmp_path):
    sweep = Sweep(None, jobs=[Bench(args=CONTROL, name="good"),
                              Bench(args=("noc", "--width", "63"), name="bad")], name="two")
    outcomes = run_sweep(sweep, workers=1, cache_dir=str(tmp_path), stream=io.StringIO())
    good, bad = outcomes
    assert good.ok and good.columns["status"] == 0 and "read a word" in good.columns["report"]
    assert not bad.ok and "SystemExit" in bad.error        # argparse's, on the worker
    table = to_markdown(outcomes)
    assert table.splitlines()[0] == "| job | bench status | bench report | errors |"
    assert "| good | 0 | " in table and "| bad |" in table
    assert "good" in to_csv(outcomes).splitlines()[1]
    # Only the good one was cached: in this process, it comes from the cache and the bad one
    # runs again (its argparse error now propagates, as under a debugger).
    with pytest.raises(SystemExit):
        run_sweep(sweep, workers=0, cache_dir=str(tmp_path), stream=io.StringIO())
    again = run_sweep(Sweep(None, jobs=[Bench(args=CONTROL, name="good")]), workers=0,
                      cache_dir=str(tmp_path), stream=io.StringIO())
    assert again[0].cached and again[0].columns == good.columns
    assert [e["job"] for e in ResultCache(str(tmp_path)).executed()] == ["bench", "bench"]


DOC = """# Figures

Prose the author wrote.

<!-- sweep: control -->
old table
<!-- end sweep -->

More prose.

<!-- sweep: elsewhere -->
kept
<!-- end sweep -->
"""


def test_update_blocks_rewrites_only_the_named_blocks():
    new, updated = update_blocks(DOC, {"control": "| new |\n|---|\n", "absent": "x"})
    assert updated == ["control"]
    assert "<!-- sweep: control -->\n\n| new |\n|---|\n\n<!-- end sweep -->" in new
    assert "old table" not in new and "kept" in new and "Prose the author wrote." in new
    assert blocks(new) == ["control", "elsewhere"]
    assert update_blocks(new, {"control": "| new |\n|---|\n"})[0] == new     # idempotent
    with pytest.raises(ValueError, match="blocks 'control', 'elsewhere' appear more than once"):
        update_blocks(DOC + DOC, {})


def test_apiary_sweep_update_writes_reports_into_a_document(tmp_path, capsys):
    doc = tmp_path / "figures.md"
    doc.write_text(DOC)
    sweep_file = tmp_path / "benches.py"
    sweep_file.write_text(
        "from harness.sweep import Bench, Sweep\n"
        f"sweep = Sweep(None, jobs=[Bench(args={CONTROL!r} + ('--markdown',), name='control', "
        f"cwd={ROOT!r})], name='benches')\n")
    out = tmp_path / "out"
    assert sweep_main([str(sweep_file), "--workers", "0", "--out", str(out), "--cache",
                       str(tmp_path / "cache"), "--update", str(doc)]) == 0
    err = capsys.readouterr().err
    assert "1 block(s) updated; kept as they were (no report from this sweep): elsewhere" in err
    text = doc.read_text()
    report = (out / "benches-control.md").read_text()
    assert "| read a word 1 hop away: request in → answer out |" in report
    stamp = Bench(args=(*CONTROL, "--markdown"), name="control", cwd=ROOT).source_stamp()
    assert (f"<!-- sweep: control (measured {today()}, sources {stamp}) -->\n\n"
            f"{report.strip()}\n\n<!-- end sweep -->") in text
    assert stale_blocks(text, {"control": stamp, "elsewhere": stamp}) == {
        "elsewhere": "not stamped (written before stamps, or by hand)"}
    assert "kept" in text and "old table" not in text
    # A document that does not exist is a usage error, before anything runs.
    with pytest.raises(SystemExit) as exit:
        sweep_main([str(sweep_file), "--update", str(tmp_path / "none.md")])
    assert exit.value.code == 2 and "none.md' does not exist" in capsys.readouterr().err


def test_apiary_sweep_stale_runs_only_the_stale_blocks(tmp_path, capsys):
    """``--stale``: of a sweep's jobs, only those whose blocks in the ``--update`` document were
    measured on other sources run (not even looked up in the cache) and are rewritten; with
    none stale, nothing runs; without ``--update`` it is a usage error."""
    one, two = (*CONTROL, "--markdown"), ("control", "--hops", "2", "--markdown")
    current = Bench(args=one, name="one", cwd=ROOT).source_stamp()
    doc = tmp_path / "figures.md"
    doc.write_text(f"<!-- sweep: one (measured 2026-12-01, sources {current}) -->\nfirst\n"
                   "<!-- end sweep -->\n\n<!-- sweep: two (measured 2026-12-01, sources "
                   "000000000000) -->\nsecond\n<!-- end sweep -->\n")
    sweep_file = tmp_path / "benches.py"
    sweep_file.write_text(
        "from harness.sweep import Bench, Sweep\n"
        f"sweep = Sweep(None, jobs=[Bench(args={one!r}, name='one', cwd={ROOT!r}), "
        f"Bench(args={two!r}, name='two', cwd={ROOT!r})], name='benches')\n")
    cache = tmp_path / "cache"
    argv = [str(sweep_file), "--workers", "0", "--out", str(tmp_path / "out"), "--cache",
            str(cache), "--update", str(doc), "--stale"]
    assert sweep_main(argv) == 0
    assert "stale: two" in capsys.readouterr().err
    assert [e["params"]["args"] for e in ResultCache(str(cache)).executed()] == [list(two)]
    text = doc.read_text()
    assert "first" in text and "second" not in text
    assert not stale_blocks(text, {"one": current, "two": Bench(
        args=two, name="two", cwd=ROOT).source_stamp()})
    # Everything current now: nothing runs.
    assert sweep_main(argv) == 0
    assert "stale: nothing" in capsys.readouterr().err
    assert len(ResultCache(str(cache)).executed()) == 1
    with pytest.raises(SystemExit) as exit:
        sweep_main([str(sweep_file), "--stale"])
    assert exit.value.code == 2 and "--stale needs --update" in capsys.readouterr().err


def test_a_block_is_stale_when_code_its_benchmark_runs_changes(tmp_path, monkeypatch):
    """A planted change: the stamp follows the code a benchmark imports (not its comments or
    docstrings), and a block stamped before the change is named stale, with both stamps."""
    module = tmp_path / "planted.py"
    module.write_text('"""A benchmark\'s helper."""\nSTEP = 1\n')
    monkeypatch.setattr(Bench, "source_files", lambda self: [str(module)])
    job = Bench(args=CONTROL, name="control", cwd=ROOT)
    before = job.source_stamp()
    elsewhere = Bench(args=CONTROL, name="x", cwd="/elsewhere")   # (another checkout, name)
    assert len(before) == 12 and before == elsewhere.source_stamp()
    doc, _ = update_blocks(DOC, {"control": "| t |"}, {"control": Stamp("2026-11-30", before)})
    assert stamps(doc)["control"] == Stamp("2026-11-30", before)
    assert "control" not in stale_blocks(doc, {"control": before, "elsewhere": before})

    module.write_text('"""Reworded."""\n# a comment\nSTEP = 1\n')       # the same code
    assert job.source_stamp() == before
    module.write_text('"""A benchmark\'s helper."""\nSTEP = 2\n')       # changed code
    after = job.source_stamp()
    assert after != before
    assert stale_blocks(doc, {"control": after, "elsewhere": after})["control"] == (
        f"measured on 2026-11-30 on sources {before}; today's are {after}")
    assert Bench(args=(*CONTROL, "--markdown"), name="control", cwd=ROOT).source_stamp() != after


def _covers(job, suffix):
    return any(f.replace(os.sep, "/").endswith(suffix) for f in job.source_files())


def test_a_stamp_covers_its_own_benchmark_and_designs_and_not_the_others():
    """A benchmark by name depends on its module's imports and the design scripts it builds, a
    design's echo on the UDP or the TCP benchmark it runs: a TCP change re-runs the TCP blocks,
    not the router's; and a design built on a sibling script covers that script too."""
    noc = Bench(args=("noc", "--markdown"), name="noc", cwd=ROOT)
    assert _covers(noc, "apiary/noc/router.py") and not _covers(noc, "beehive/proto/tcp/rx.py")
    assert "examples/udp_echo.py" in noc._files()           # the routers it reports
    udp = Bench(args=("examples/udp_echo.py", "--markdown"), name="udp", cwd=ROOT)
    tcp = Bench(args=("examples/tcp_echo.py", "--tcp", "--markdown"), name="tcp", cwd=ROOT)
    assert _covers(udp, "harness/bench/echo.py") and not _covers(udp, "harness/bench/tcp.py")
    assert not _covers(udp, "beehive/proto/tcp/rx.py")
    assert _covers(tcp, "harness/bench/tcp.py") and _covers(tcp, "beehive/proto/tcp/rx.py")
    rs_area = Bench(args=("area", "examples/rs_apiary.py", "--markdown"), name="a", cwd=ROOT)
    assert "examples/tcp_apiary.py" in rs_area._files()    # sibling(__file__, "tcp_apiary.py")
    assert _covers(rs_area, "beehive/proto/tcp/rx.py") and _covers(rs_area, "apiary/bench/area.py")
    rs = Bench(args=("rs", "--markdown"), name="rs", cwd=ROOT)
    assert {"examples/rs_apiary.py", "examples/tcp_apiary.py"} <= set(rs._files())


def test_a_change_to_a_sibling_script_makes_the_block_stale(tmp_path):
    """A planted change in a script the design script builds on, not named on the command line."""
    (tmp_path / "base.py").write_text("WIDTH = 512\n")
    (tmp_path / "top.py").write_text(
        "from apiary.load import sibling\nbase = sibling(__file__, 'base.py')\n")
    job = Bench(args=("top.py", "--markdown"), name="top", cwd=str(tmp_path))
    before = job.source_stamp()
    (tmp_path / "base.py").write_text("# the same code\nWIDTH = 512\n")
    assert job.source_stamp() == before
    (tmp_path / "base.py").write_text("WIDTH = 64\n")
    assert job.source_stamp() != before


def test_every_performance_md_block_was_measured_on_todays_sources():
    """Each table of docs/performance.md carries the stamp of the sources it was measured on;
    a change to code a benchmark runs makes its block stale until the sweep runs it again."""
    from harness.sweep.cli import load_sweep
    sweep = load_sweep(os.path.join(ROOT, "benchmarks", "performance.py"))
    current = {t.job.label(): t.job.source_stamp() for t in sweep.tasks()}
    with open(os.path.join(ROOT, "docs", "performance.md")) as f:
        stale = stale_blocks(f.read(), current)
    assert not stale, (
        "docs/performance.md has blocks measured on other sources: run `apiary sweep "
        "benchmarks/performance.py --update docs/performance.md --stale --out results/` (it "
        "runs only these) and update the prose around them:\n" + "\n".join(
            f"  {label}: {why}" for label, why in stale.items()))


def test_performance_md_has_a_block_for_every_job_of_its_sweep():
    """benchmarks/performance.py writes docs/performance.md's tables: each of its jobs has one
    block there, every block has its job, and the sweep checks (without running anything)."""
    from harness.sweep.cli import load_sweep
    sweep = load_sweep(os.path.join(ROOT, "benchmarks", "performance.py"))
    tasks = sweep.tasks()
    with open(os.path.join(ROOT, "docs", "performance.md")) as f:
        labels = blocks(f.read())
    assert sorted(labels) == sorted(t.job.label() for t in tasks)
    assert all(t.key is not None for t in tasks)
