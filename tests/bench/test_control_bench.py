"""`apiary bench control`: a register round trip on the control plane grows by two cycles per
hop (one each way: a router hop per cycle), reads and writes cost the same, and the command
prints the table."""

from apiary.bench.control import main, round_trip


def test_round_trip_grows_one_cycle_per_hop_each_way():
    one, three = round_trip(1), round_trip(3)
    assert three - one == 4
    assert round_trip(1, write=True) == one
    assert one <= 12        # header (2 flits) + metadata, two routers, the agent's turn-around


def test_command_prints_the_table(capsys):
    assert main(["--hops", "1"]) == 0
    out = capsys.readouterr().out
    assert "| read a word 1 hop away: request in → answer out |" in out


def test_apiary_bench_lays_the_table_out_for_a_terminal_unless_markdown(capsys):
    """Through `apiary bench control`: plain aligned text by default (no Markdown pipes,
    emphasis or backticks, no line over 100 characters), the Markdown with --markdown."""
    from apiary.cli import main as apiary
    assert apiary(["bench", "control", "--hops", "1"]) == 0
    text = capsys.readouterr().out
    assert "read a word 1 hop away" in text and "|" not in text and "`" not in text
    assert "**" not in text and max(map(len, text.splitlines())) <= 100
    assert apiary(["bench", "control", "--hops", "1", "--markdown"]) == 0
    assert "| read a word 1 hop away: request in → answer out |" in capsys.readouterr().out
