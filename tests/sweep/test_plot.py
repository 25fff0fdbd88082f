"""harness.sweep.plot: a sweep's table drawn as PNG and SVG, from outcomes built here (no
simulation): the points plotted are the table's, failed points left out."""

import pathlib

import pytest

from harness.sweep import Echo, Outcome, Sweep
from harness.sweep.plot import plot, series

ROOT = pathlib.Path(__file__).resolve().parents[2]
ECHO = str(ROOT / "examples" / "udp_echo.py")


@pytest.fixture(scope="module")
def outcomes():
    tasks = Sweep(ECHO, grid={"ip_options": [True, False], "width": [64, 128, 256]},
                  jobs=[Echo()]).tasks()
    made = []
    for task in tasks:
        w = task.point["width"]
        if task.point == {"ip_options": False, "width": 256}:
            made.append(Outcome(task, error="boom"))
        else:
            made.append(Outcome(task, {"latency_cycles": 1000 // w + task.point["ip_options"]}))
    return made


def test_series_are_the_table_columns_by_a_third_without_failed_points(outcomes):
    lines = series(outcomes, "width", "echo latency_cycles", by="ip_options")
    assert lines == {"ip_options=True": [(64, 16.0), (128, 8.0), (256, 4.0)],
                     "ip_options=False": [(64, 15.0), (128, 7.0)]}
    [(label, points)] = series(outcomes, "width", "echo latency_cycles").items()
    assert label == "echo latency_cycles" and len(points) == 5
    with pytest.raises(ValueError, match="no column 'echo gbps'; its columns are ip_options, "):
        series(outcomes, "width", "echo gbps")


def test_plot_writes_a_png_and_an_svg(tmp_path, outcomes):
    written = plot(outcomes, "width", "echo latency_cycles", str(tmp_path / "latency"),
                   by="ip_options", title="latency against width")
    png, svg = (pathlib.Path(p) for p in written)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text
    for words in ("latency against width", "ip_options=True", "ip_options=False"):
        assert f"<!-- {words} -->" in text            # matplotlib names each text it draws


def test_the_page_shows_the_table_and_the_svg_plots(tmp_path, outcomes):
    from harness.sweep.page import write_page
    (tmp_path / "plots").mkdir()
    plots = plot(outcomes, "width", "echo latency_cycles", str(tmp_path / "plots" / "latency"))
    page = pathlib.Path(write_page(str(tmp_path / "sweep.html"), outcomes, "a <sweep>", plots))
    text = page.read_text()
    assert "<title>a &lt;sweep&gt;</title>" in text
    assert "<th>echo latency_cycles</th>" in text and "<td>16</td>" in text
    assert "<td>echo: boom</td>" in text                    # the failed point's error
    assert text.count("<img ") == 1 and 'src="plots/latency.svg"' in text
    assert (tmp_path / "plots" / "latency.svg").is_file()


def test_rows_of_a_job_make_a_long_table_to_plot_against_payload_size():
    """Echo(per_size=True) gives a row per payload size, each with the point's other columns
    (here an area), so throughput can be drawn against payload size, a line per width."""
    from harness.sweep import Area
    from harness.sweep.table import table
    tasks = Sweep(ECHO, grid={"width": [64, 512]},
                  jobs=[Echo(sizes=(64, 1472), per_size=True), Area()]).tasks()
    made = []
    for task in tasks:
        w = task.point["width"]
        if task.job.kind == "echo":
            made.append(Outcome(task, {"latency_cycles": 40, "rows": [
                {"payload": 64, "gbps": w / 10}, {"payload": 1472, "gbps": w / 5}]}))
        else:
            made.append(Outcome(task, {"luts": w * 100}))
    columns, rows = table(made)
    assert columns == ["width", "echo latency_cycles", "echo payload", "echo gbps", "area luts"]
    assert rows == [
        {"width": 64, "echo latency_cycles": 40, "echo payload": 64, "echo gbps": 6.4,
         "area luts": 6400},
        {"width": 64, "echo latency_cycles": 40, "echo payload": 1472, "echo gbps": 12.8,
         "area luts": 6400},
        {"width": 512, "echo latency_cycles": 40, "echo payload": 64, "echo gbps": 51.2,
         "area luts": 51200},
        {"width": 512, "echo latency_cycles": 40, "echo payload": 1472, "echo gbps": 102.4,
         "area luts": 51200}]
    assert series(made, "echo payload", "echo gbps", by="width") == {
        "width=64": [(64, 6.4), (1472, 12.8)], "width=512": [(64, 51.2), (1472, 102.4)]}


def test_the_pareto_front_keeps_the_points_nothing_beats():
    from harness.sweep.plot import pareto_front
    points = [(10, 1.0), (20, 3.0), (15, 0.5), (30, 3.0), (40, 5.0), (20, 3.0), (25, 2.0)]
    # (15, 0.5) is beaten by (10, 1); (30, 3) and (25, 2) by (20, 3); (20, 3) twice is once.
    assert pareto_front(points) == [(10, 1.0), (20, 3.0), (40, 5.0)]
    assert pareto_front([]) == []


def test_pareto_writes_a_png_and_an_svg_naming_each_point(tmp_path, outcomes):
    from harness.sweep.plot import pareto
    written = pareto(outcomes, "width", "echo latency_cycles", str(tmp_path / "front"),
                     label="ip_options")
    assert written == [str(tmp_path / "front.png"), str(tmp_path / "front.svg")]
    svg = (tmp_path / "front.svg").read_text()
    assert "Pareto front" in svg and "ip_options=True" in svg
    assert (tmp_path / "front.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="no column 'area luts'"):
        pareto(outcomes, "area luts", "echo latency_cycles", str(tmp_path / "x"))
