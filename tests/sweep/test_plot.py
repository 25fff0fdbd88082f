"""apiary.sweep.plot: a sweep's table drawn as PNG and SVG, from outcomes built here (no
simulation): the points plotted are the table's, failed points left out."""

import pathlib

import pytest

from apiary.sweep import Echo, Outcome, Sweep
from apiary.sweep.plot import plot, series

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
    from apiary.sweep.page import write_page
    (tmp_path / "plots").mkdir()
    plots = plot(outcomes, "width", "echo latency_cycles", str(tmp_path / "plots" / "latency"))
    page = pathlib.Path(write_page(str(tmp_path / "sweep.html"), outcomes, "a <sweep>", plots))
    text = page.read_text()
    assert "<title>a &lt;sweep&gt;</title>" in text
    assert "<th>echo latency_cycles</th>" in text and "<td>16</td>" in text
    assert "<td>echo: boom</td>" in text                    # the failed point's error
    assert text.count("<img ") == 1 and 'src="plots/latency.svg"' in text
    assert (tmp_path / "plots" / "latency.svg").is_file()
