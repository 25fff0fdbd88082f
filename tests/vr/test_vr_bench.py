"""python -m harness.vr_bench: its table (kops/s from cycles at the stated clock, beside the
paper's Table 4.3), its arguments, and a short real run on Verilator."""

import pytest

from harness.vr_bench import BEEHIVE_TABLE_4_3, main, render


def test_the_table_converts_cycles_at_the_clock_and_quotes_the_paper():
    rows = [{"shards": 1, "ops": 3, "round_trip": [40, 42, 44], "rounds": [50, 50, 60]},
            {"shards": 2, "ops": 3, "round_trip": [40, 42, 44], "rounds": [50, 50, 60]}]
    text = render(rows, 250.0, 512)
    lines = text.splitlines()
    assert "512-bit data plane, 250 MHz, 3 ops per shard" in lines[0]
    one, two = lines[-2], lines[-1]
    assert "| 1 | 42 / 44 | 0.168 | 50 | 5,000 | 35, 99 |" == one      # 1 / 50 cycles at 250 MHz
    assert "| 2 | 42 / 44 | 0.168 | 50 | 10,000 | 54, 130 |" == two
    assert BEEHIVE_TABLE_4_3[4] == (83, 118)


def test_bad_arguments_are_usage_errors(capsys):
    for argv in (["--shards", "0"], ["--shards", "x"], ["--ops", "0"], ["--shards", "9"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    assert "shard" in capsys.readouterr().err


@pytest.mark.slow
def test_a_short_run_on_verilator(capsys):
    assert main(["--shards", "1", "--ops", "3", "--width", "64"]) == 0
    out = capsys.readouterr().out
    assert "64-bit data plane, 125 MHz, 3 ops per shard" in out and "| 1 |" in out
