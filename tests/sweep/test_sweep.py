"""harness.sweep: sweeps of the 64-bit echo design on Dask, embedded and as separate processes.

The echo figures in the tables are compared with the same job run directly (no Dask); a re-run
is checked against the cache's record of executed jobs; a failing point must not stop the
others; a bad sweep must fail before any cluster is contacted."""

import csv
import io
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from apiary.load import load_design
from harness.sweep import Bench, Echo, ResultCache, Sweep, Test, run_sweep, to_csv, to_markdown
from harness.sweep.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
ECHO = str(ROOT / "examples" / "udp_echo.py")
JOB = Echo(sizes=(64,), packets=2)
CHECK = "tests/sweep/sweep_point_check.py::test_width_is_64"
#: An address where no scheduler listens: a sweep that contacted it would fail to connect.
NOWHERE = "tcp://127.0.0.1:9"


def echo_sweep():
    return Sweep(ECHO, grid={"width": [64], "ip_options": [True, False]}, jobs=[JOB],
                 name="echo64")


@pytest.fixture(scope="module")
def direct():
    """The echo job's columns at each point, run in this process without Dask."""
    return {ip_options: JOB.run(load_design(ECHO, width=64, ip_options=ip_options), ECHO,
                                {"width": 64, "ip_options": ip_options})
            for ip_options in (True, False)}


def check_table(outcomes, direct):
    assert [o.ok for o in outcomes] == [True, True], [o.error for o in outcomes]
    rows = list(csv.DictReader(io.StringIO(to_csv(outcomes))))
    assert [r["ip_options"] for r in rows] == ["True", "False"]
    for row, ip_options in zip(rows, (True, False)):
        want = direct[ip_options]
        assert want["latency_cycles"] > 0
        for name, value in want.items():
            assert float(row[f"echo {name}"]) == pytest.approx(value), name
    markdown = to_markdown(outcomes).splitlines()
    assert markdown[0].startswith("| width | ip_options | echo latency_cycles |")
    assert markdown[1].startswith("|---:|---|---:|")
    assert len(markdown) == 2 + len(rows)


@pytest.mark.slow
def test_embedded_cluster_then_a_rerun_from_the_cache(tmp_path, direct):
    cache = str(tmp_path / "cache")
    log = io.StringIO()
    outcomes = run_sweep(echo_sweep(), workers=2, cache_dir=cache, stream=log)
    check_table(outcomes, direct)
    assert not any(o.cached for o in outcomes)
    assert len(ResultCache(cache).executed()) == 2
    assert log.getvalue().count(" ok in ") == 2          # one line per job, not a terminal
    # The same sweep again: everything from the cache, no cluster needed (none can be reached).
    again = run_sweep(echo_sweep(), scheduler=NOWHERE, cache_dir=cache, stream=io.StringIO())
    assert all(o.cached for o in again)
    assert len(ResultCache(cache).executed()) == 2
    assert to_csv(again) == to_csv(outcomes)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_workers(address, n, deadline):
    from distributed import Client
    with Client(address, timeout=deadline - time.monotonic()) as client:
        client.wait_for_workers(n, timeout=deadline - time.monotonic())


@pytest.mark.slow
def test_a_scheduler_and_two_workers_as_separate_processes(tmp_path, direct):
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask", "scheduler"]        # `dask scheduler`, this Python's
    worker = [sys.executable, "-m", "dask", "worker"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    logs = open(tmp_path / "dask.log", "w")
    procs = []
    try:
        procs.append(subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", str(port),
                                       "--dashboard-address", ":0"], env=env, stdout=logs,
                                      stderr=logs))
        for _ in range(2):
            procs.append(subprocess.Popen([*worker, address, "--nthreads", "1", "--no-dashboard",
                                           "--local-directory", str(tmp_path)],
                                          env=env, stdout=logs, stderr=logs))
        wait_for_workers(address, 2, time.monotonic() + 60)
        outcomes = run_sweep(echo_sweep(), scheduler=address, cache_dir=str(tmp_path / "c"),
                             stream=io.StringIO())
        check_table(outcomes, direct)
        assert not any(o.cached for o in outcomes)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        logs.close()


def widths_sweep(path, widths):
    path.write_text(
        "from harness.sweep import Sweep, Test\n"
        f"sweep = Sweep({ECHO!r}, grid={{'width': {widths!r}}}, name='widths',\n"
        f"              jobs=[Test(node={CHECK!r}, cwd={str(ROOT)!r})])\n")
    return str(path)


def test_a_failing_point_is_reported_and_the_others_finish(tmp_path):
    sweep_file = widths_sweep(tmp_path / "widths.py", [64, 128, 64])
    out = tmp_path / "out"
    command = [sweep_file, "--workers", "2", "--out", str(out), "--cache", str(tmp_path / "c"),
               "--plot", "width:test passed", "--open"]
    assert main(command) == 1
    page = (out / "widths.html").read_text()          # --open: the table and the plot
    assert "<td>128</td>" in page and "not 64 bits wide" in page
    assert '<img src="widths-test_passed-vs-width.svg"' in page
    svg = (out / "widths-test_passed-vs-width.svg").read_text()
    assert "<!-- test passed against width -->" in svg
    assert (out / "widths-test_passed-vs-width.png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(open(out / "widths.csv")))
    assert [r["width"] for r in rows] == ["64", "128"]        # the same point once
    assert rows[0]["test passed"] == "True" and not rows[0]["errors"]
    assert rows[1]["test passed"] == "" and "not 64 bits wide" in rows[1]["errors"]
    markdown = (out / "widths.md").read_text()
    assert markdown.startswith(f"Measured by `apiary sweep {sweep_file}`")
    assert "| 128 |" in markdown
    executed = ResultCache(str(tmp_path / "c")).executed()
    assert sorted(e["point"]["width"] for e in executed) == [64, 128]
    # Again with a point more: what passed comes from the cache, what failed and what is new run.
    widths_sweep(tmp_path / "widths.py", [64, 128, 256])
    assert main(command) == 1
    executed = ResultCache(str(tmp_path / "c")).executed()[2:]
    assert sorted(e["point"]["width"] for e in executed) == [128, 256]
    rows = list(csv.DictReader(open(out / "widths.csv")))
    assert [r["test passed"] for r in rows] == ["True", "", ""]


def test_a_job_over_its_time_is_a_failure(tmp_path):
    slow = Test(node="tests/sweep/sweep_point_check.py::test_takes_its_time", cwd=str(ROOT),
                timeout=40)
    sweep = Sweep(ECHO, points=[{"width": 64}], jobs=[slow], timeout=2)
    log = io.StringIO()
    outcomes = run_sweep(sweep, workers=1, cache_dir=str(tmp_path), stream=log)
    assert [o.error for o in outcomes] == ["timed out after 2 s"]
    assert 2 <= outcomes[0].seconds < 20
    assert "FAILED in " in log.getvalue() and ": timed out after 2 s" in log.getvalue()


def test_a_job_whose_worker_dies_runs_again_on_another(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_CHECK_MARKER", str(tmp_path / "killed"))
    killer = Test(node="tests/sweep/sweep_point_check.py::test_kills_its_worker_the_first_time",
                  cwd=str(ROOT))
    outcomes = run_sweep(Sweep(ECHO, points=[{"width": 64}], jobs=[killer]), workers=1,
                         cache_dir=str(tmp_path / "c"), stream=io.StringIO())
    assert (tmp_path / "killed").exists()                     # a worker was lost...
    assert [(o.error, o.columns) for o in outcomes] == [(None, {"passed": True})]   # ...and redone


def test_ctrl_c_cancels_what_is_left_and_keeps_what_finished(tmp_path):
    from harness.sweep.run import Progress

    class Interrupting(Progress):
        def finished(self, outcome, running):
            super().finished(outcome, running)
            if not outcome.cached:
                raise KeyboardInterrupt           # as Ctrl-C would, once one job is in

    slow = Test(node="tests/sweep/sweep_point_check.py::test_takes_its_time", cwd=str(ROOT),
                timeout=40)
    sweep = Sweep(ECHO, points=[{"width": 64}], jobs=[Test(node=CHECK, cwd=str(ROOT)), slow])
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, workers=2, cache_dir=str(tmp_path),
                  progress=Interrupting(2, io.StringIO()))
    assert time.monotonic() - start < 25                    # the 30-s job was not waited for
    assert [e["job"] for e in ResultCache(str(tmp_path)).executed()] == ["test"]
    assert "test_width_is_64" in ResultCache(str(tmp_path)).executed()[0]["params"]["node"]


@pytest.mark.parametrize("sweep, problem", [
    (dict(points=[{"width": 64}, {"widht": 64}]), "point 1 (widht=64): design() at"),
    (dict(grid={"width": [64, 63]}), "point 1 (width=63): design 'udp_echo': data plane width"),
    (dict(jobs=["echo", "benchmark"]), "unknown job 'benchmark'"),
    (dict(jobs=["bench"]), "job 'bench' needs parameters"),
    (dict(jobs=[Bench(args=("nf",), cwd="no/such/folder")]), "no folder"),
    (dict(jobs=[Bench(args=("nf",), name="x"), Bench(args=("kernel",), name="x")]),
     "two jobs have the same name 'x'"),
    (dict(jobs=["build"]), "job 'build' needs parameters"),
    (dict(jobs=[Echo(sizes=(64, 9000))]), "echo sizes must be payload sizes from 0 to 1472"),
    (dict(jobs=[Test(node="tests/sweep/nothing.py::test_x", cwd=str(ROOT))]), "no test file"),
    (dict(grid={"width": 64}), "grid must map each parameter to a non-empty list"),
])
def test_a_bad_sweep_is_one_error_before_any_cluster(sweep, problem, tmp_path):
    with pytest.raises(ValueError) as error:
        run_sweep(Sweep(ECHO, **sweep), scheduler=NOWHERE, cache_dir=str(tmp_path))
    assert problem in str(error.value)


@pytest.mark.parametrize("sweep, problem", [
    (dict(jobs=[Echo()]), "has no design, but its echo job(s) measure one"),
    (dict(jobs=[Bench(args=("nf",))], grid={"width": [64]}), "no parameters to sweep"),
])
def test_a_sweep_without_a_design_takes_only_benchmarks(sweep, problem, tmp_path):
    with pytest.raises(ValueError) as error:
        run_sweep(Sweep(None, **sweep), scheduler=NOWHERE, cache_dir=str(tmp_path))
    assert problem in str(error.value)
    assert str(error.value).startswith("sweep 'sweep'")
    assert not os.path.exists(tmp_path / "executed.jsonl")


def test_the_command_reports_a_bad_sweep_file_in_one_line(tmp_path, capsys):
    sweep_file = tmp_path / "bad.py"
    sweep_file.write_text(f"from harness.sweep import Sweep\nsweep = Sweep({ECHO!r}, "
                          f"grid={{'width': [48]}})\n")
    assert main([str(sweep_file), "--scheduler", NOWHERE]) == 1
    err = capsys.readouterr().err
    assert err.startswith("apiary sweep: sweep 'sweep', point 0 (width=48)") and "Traceback" \
        not in err
    with pytest.raises(SystemExit):
        main([str(sweep_file), "--plot", "width"])
    assert "expected X:Y or X:Y:BY (column names), not 'width'" in capsys.readouterr().err
    (tmp_path / "none.py").write_text("x = 1\n")
    assert main([str(tmp_path / "none.py")]) == 1
    assert "defines no `sweep = Sweep(...)`" in capsys.readouterr().err


def test_the_result_cache_keys_on_the_design_and_the_job(tmp_path):
    base = {t.key for t in echo_sweep().tasks()}
    assert len(base) == 2 and None not in base
    other_job = Sweep(ECHO, grid={"width": [64], "ip_options": [True, False]},
                      jobs=[Echo(sizes=(128,), packets=2)])
    assert not base & {t.key for t in other_job.tasks()}
    assert base == {t.key for t in echo_sweep().tasks()}


def test_the_example_sweep_file_is_a_valid_sweep():
    from harness.sweep.cli import load_sweep
    sweep = load_sweep(str(ROOT / "examples" / "echo_sweep.py"))
    tasks = sweep.tasks()
    assert [t.point for t in tasks] == [{"width": 64, "ip_options": True},
                                        {"width": 64, "ip_options": False}]
    assert tasks[0].design == ECHO and all(isinstance(t.job, Echo) for t in tasks)


def test_the_width_sweep_example_is_a_valid_sweep_with_its_plots():
    from harness.sweep.cli import load_sweep
    sweep = load_sweep(str(ROOT / "examples" / "width_sweep.py"))
    tasks = sweep.tasks()
    assert len(tasks) == 16 and {t.point["width"] for t in tasks} == {64, 128, 256, 512}
    assert sweep.paretos == [("area luts", "echo 64B_gbps", "width,ip_options")]
    assert all(t.key is not None for t in tasks)


def test_progress_is_one_live_line_on_a_terminal():
    from harness.sweep.run import Outcome, Progress
    tasks = Sweep(ECHO, grid={"width": [64, 128, 256]}).tasks()
    screen = io.StringIO()
    progress = Progress(3, screen, live=True)
    progress.finished(Outcome(tasks[0], {"x": 1}), 2)
    progress.finished(Outcome(tasks[1], error="boom"), 1)
    progress.finished(Outcome(tasks[2], {"x": 1}, cached=True), 0)
    lines = screen.getvalue().split("\r")
    assert lines[1].startswith("\x1b[K[######..............] 1/3 done, 2 running or queued, "
                               "0 failed, 0 cached; 0 s, ETA 0 s")
    assert lines[2].startswith("\x1b[K[#############.......] 2/3 done, 1 running or queued, "
                               "1 failed, 0 cached")
    assert lines[3].startswith("\x1b[K[####################] 3/3 done, 0 running or queued, "
                               "1 failed, 1 cached")
    assert "ETA" not in lines[3]                             # nothing left
    assert screen.getvalue().endswith("\n") and screen.getvalue().count("\n") == 1


def test_progress_redraws_while_jobs_run_and_estimates_what_is_left(monkeypatch):
    """The ETA is the jobs left at the pace of the jobs run so far (cached ones excluded)."""
    from harness.sweep import run
    clock = [100.0]
    monkeypatch.setattr(run.time, "monotonic", lambda: clock[0])
    tasks = Sweep(ECHO, grid={"width": [64, 128, 256, 512]}).tasks()
    lines = io.StringIO()
    progress = run.Progress(4, lines, live=False)
    progress.finished(run.Outcome(tasks[0], {"x": 1}, cached=True), 3)
    assert progress.eta() is None                       # nothing has run yet
    clock[0] = 160.0
    progress.finished(run.Outcome(tasks[1], {"x": 1}, seconds=60.0), 2)
    assert progress.eta() == 120.0                      # 60 s per job run, 2 left
    assert lines.getvalue().splitlines()[-1].endswith("ok in 60.0 s (ETA 2 min 00 s)")
    live = run.Progress(2, io.StringIO(), live=True)
    live.submitted(2)
    assert live._ticker is not None and live._ticker.is_alive()   # redraws every second
    live.close()
    assert live._ticker is None


def test_the_sweep_command_is_registered_with_apiary():
    import importlib
    import tomllib
    from apiary.cli import ENTRY_POINT_GROUP, Command
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, name = project["entry-points"][ENTRY_POINT_GROUP]["sweep"].partition(":")
    command = getattr(importlib.import_module(module), name)
    assert isinstance(command, Command) and command.name == "sweep"
    assert not command.takes_design and ValueError in command.errors


def test_a_test_job_runs_from_the_folder_the_sweep_was_run_from(monkeypatch):
    monkeypatch.chdir(ROOT)
    [task] = Sweep(ECHO, jobs=[Test(node=CHECK)]).tasks()
    assert task.job.cwd == str(ROOT)


def test_a_build_job_is_the_apiary_build_command_at_its_point(tmp_path):
    """Wired, not run (a build takes minutes): its command line parses as `apiary build` and
    names the design, the platform, the seed and the point; two points build apart."""
    from apiary.cli import _parser, commands
    from harness.sweep import Build
    job = Build(platform="versa_ecp5", seed=3, root=str(tmp_path))
    argv = job.command(load_design(ECHO, width=128), ECHO, {"width": 128, "ipv4": "10.0.0.7"})
    assert argv[1:4] == ["-m", "apiary.cli", "build"]
    parser, _ = _parser(commands())
    args = parser.parse_args(argv[3:])
    assert (args.design, args.platform, args.seed) == (ECHO, "versa_ecp5", 3)
    assert args.params == [("width", 128), ("ipv4", "10.0.0.7")]
    assert args.output.startswith(str(tmp_path / "udp_echo-versa_ecp5-seed3-"))
    other = job.command(load_design(ECHO, width=64), ECHO, {"width": 64})
    assert other[other.index("-o") + 1] != args.output
    with pytest.raises(ValueError, match="build needs a platform"):
        Sweep(ECHO, jobs=[Build()]).tasks()


def test_an_area_sweep_gives_the_area_benchmark_figures(tmp_path):
    from apiary.bench.area import tile_areas
    from harness.sweep import Area
    sweep = Sweep(ECHO, points=[{"width": 64}], jobs=[Area(tiles=("echo",))])
    outcomes = run_sweep(sweep, workers=1, cache_dir=str(tmp_path), stream=io.StringIO())
    [(_, _, direct)] = tile_areas(load_design(ECHO, width=64), "xilinx", only=["echo"])
    assert outcomes[0].error is None and direct["luts"] > 0
    assert outcomes[0].columns == {"echo_luts": direct["luts"], "luts": direct["luts"]}
