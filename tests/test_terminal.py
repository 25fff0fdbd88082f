"""apiary.terminal: tables that fit a terminal, Markdown tables, and the status line of long
steps."""

import io
import time

import pytest

from apiary.terminal import StatusLine, markdown_table, render_tables, text_table


def test_a_narrow_table_is_aligned_under_a_rule():
    text = text_table(["name", "value"], [["eth_rx_forwarded", "3"], ["udp_rx_no_route", "12"]])
    assert text.splitlines() == [
        "name              value",
        "----------------  -----",
        "eth_rx_forwarded  3",
        "udp_rx_no_route   12",
    ]


def test_a_wide_table_fits_the_width():
    header = [f"a long column heading number {i}" for i in range(8)]
    rows = [[f"value {i} of row {r}, with several words in it" for i in range(8)]
            for r in range(3)]
    text = text_table(header, rows, width=100)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    words = " ".join(lines).split()
    for cell in header + [c for r in rows for c in r]:      # nothing lost, only wrapped
        for word in cell.split():
            assert word in words


def test_columns_that_cannot_fit_continue_in_a_block_that_repeats_the_first():
    header = ["key"] + [f"column_{i:02d}_unbreakable" for i in range(8)]
    rows = [[f"row{r}"] + [f"value_{r}_{i}_unbreakable" for i in range(8)] for r in range(2)]
    text = text_table(header, rows, width=100)
    blocks = text.split("\n\n")
    assert len(blocks) >= 2
    assert all(max(len(line) for line in b.splitlines()) <= 100 for b in blocks)
    for block in blocks:
        lines = block.splitlines()
        assert lines[0].startswith("key ") and lines[2].startswith("row0 ")
        assert lines[3].startswith("row1 ") and len(lines) == 4
    for cell in header[1:] + [c for r in rows for c in r[1:]]:
        assert text.count(cell) == 1


def test_cells_wrap_within_their_column():
    text = text_table(["measure", "cycles"],
                      [["first word in → last word out (Beehive's measure)", "33"]], width=30)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 30
    assert lines[2].endswith("33") and lines[2].startswith("first word in")
    assert "(Beehive's" in text and "measure)" in lines[-1]


def test_markdown_table():
    assert markdown_table(["a", "b"], [["1", "**missed**"]]) == \
        "| a | b |\n|---|---|\n| 1 | **missed** |"


def test_render_tables_for_a_terminal_and_as_markdown():
    tables = [("Latency, one request at a time", ["measure", "cycles"], [["first in", "33"]])]
    head = "UDP echo benchmark of 'x': " + "words " * 30
    text = render_tables(head, tables)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "Latency, one request at a time:\nmeasure   cycles\n--------  ------\nfirst in  33" \
        in text and "|" not in text
    md = render_tables("Head", tables, markdown=True, command="apiary bench x.py")
    assert md == ("Measured by `apiary bench x.py`. Head.\n\nLatency, one request at a time:\n\n"
                  "| measure | cycles |\n|---|---|\n| first in | 33 |\n")


def test_status_line_off_a_terminal_prints_only_the_summary():
    stream = io.StringIO()
    status = StatusLine(stream)
    assert not status.live
    with status("building model", lambda s: f"built model in {s:.1f} s"):
        pass
    assert stream.getvalue().startswith("built model in 0.")
    assert stream.getvalue().count("\n") == 1 and "building" not in stream.getvalue()


def test_status_line_on_a_terminal_updates_in_place():
    stream = io.StringIO()
    with StatusLine(stream, live=True, interval=0.05)("building model",
                                                      lambda s: f"built in {s:.1f} s"):
        time.sleep(0.3)
    text = stream.getvalue()
    assert text.count("\r\x1b[Kbuilding model... 0 s") >= 3          # updated, not appended
    assert "\n" not in text.rpartition("\r\x1b[K")[0]                # all on one line
    assert text.endswith("\r\x1b[Kbuilt in 0.3 s\n")                 # cleared, then the summary


def test_a_failed_or_interrupted_step_prints_no_summary():
    stream = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with StatusLine(stream, live=True, interval=0.05)("building", lambda s: "built"):
            raise KeyboardInterrupt
    assert "built" not in stream.getvalue() and stream.getvalue().endswith("\r\x1b[K")
    stream = io.StringIO()
    with pytest.raises(RuntimeError):
        with StatusLine(stream)("building", lambda s: "built"):
            raise RuntimeError("the compiler failed")
    assert stream.getvalue() == ""


def test_status_shows_a_caller_s_own_live_line(monkeypatch):
    """``status(text)`` (a board build's ``synth 12 s  <the tool's latest line>``) replaces the
    live line in place, cut to the terminal so that it stays one line; ``end_status`` clears
    it; off a terminal neither prints anything, only the notes."""
    monkeypatch.setenv("COLUMNS", "40")
    stream = io.StringIO()
    status = StatusLine(stream, live=True)
    status.note("synth: yosys -q")
    status.status("  synth     1 s  pass 1")
    long = "  synth     2 s  " + "a very long line of the tool's log " * 3
    status.status(long)
    status.end_status()
    status.note("  synth done in 2.1 s")
    assert stream.getvalue() == ("synth: yosys -q\n\r\x1b[K  synth     1 s  pass 1"
                                 f"\r\x1b[K{long[:39]}\r\x1b[K  synth done in 2.1 s\n")
    stream = io.StringIO()
    status = StatusLine(stream, live=False)
    status.note("synth: yosys -q")
    status.status("  synth     1 s  pass 1")
    status.end_status()
    status.note("  synth done in 2.1 s")
    assert stream.getvalue() == "synth: yosys -q\n  synth done in 2.1 s\n"


def test_a_markdown_report_for_a_terminal():
    from apiary.terminal import for_terminal
    report = ("Produced by `apiary bench x` (exact).\nIts second line.\n\n## Costs\n"
              "| tile | **cycles** |\n|---|---|\n| nat | **missed** |\n| ipip | 3 |\n\n"
              "- an item\n  that goes on\n- another\nA last paragraph.\n")
    assert for_terminal(report).splitlines() == [
        "Produced by apiary bench x (exact). Its second line.", "", "Costs",
        "tile  cycles", "----  ------", "nat   missed", "ipip  3", "",
        "- an item that goes on", "- another", "A last paragraph."]
