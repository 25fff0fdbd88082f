"""`apiary bench slots` (apiary/bench/slots.py) without Yosys: the slot designs pass the layout
check at 1, 2, 4 and 8 slots; the parts added up are the kernel's tiles, one monitor per slot and
every router, identical netlists synthesised once; the least-squares fit recovers a base and a
per-slot cost; the table puts Coyote's Table 1 beside the figures."""

import pytest

from apiary.bench import slots as bench


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_slot_designs_pass_the_layout_check(n):
    d = bench.slot_design(n, 64)
    d.check()
    assert d.untrusted() == [f"slot{i}" for i in range(n)]


def test_parts_and_cache(monkeypatch):
    calls = []

    def fake_area(dut, target):
        calls.append(type(dut).__name__)
        return {"luts": 100, "lutram": 0, "ffs": 10, "cells": {"RAMB36E2": 1}}

    monkeypatch.setattr(bench, "design_area", fake_area)
    cache = {}
    parts = bench.slot_areas(2, 64, cache=cache)
    names = set(parts)
    assert {"mm", "errors", "mem0", "slot0 monitor", "slot1 monitor"} <= names
    routers = [p for p in names if p.startswith("router")]
    assert len(routers) == 2 * 3                 # every mesh position has one
    assert all(p == {"luts": 100, "ffs": 10, "brams": 1} for p in parts.values())
    assert calls.count("Monitor") == 2
    # the same design again: everything from the cache
    before = len(calls)
    bench.slot_areas(2, 64, cache=cache)
    assert len(calls) == before


def test_fit_and_table():
    totals = {n: {"luts": 5000 + 1200 * n, "ffs": 3000 + 700 * n, "brams": 2.0}
              for n in (1, 2, 4)}
    line = bench.fit(totals)
    assert line["luts"] == pytest.approx((5000, 1200))
    assert line["ffs"] == pytest.approx((3000, 700))
    assert line["brams"] == pytest.approx((2, 0))
    table = bench.markdown(totals, 512, "apiary bench slots")
    assert "| 4 | 9,800 |" in table and "6 % / 7 % / 4 %" in table
    assert "per extra slot: 1,200 luts" in table
    with pytest.raises(ValueError, match="at least two slot counts"):
        bench.fit({1: totals[1]})
    with pytest.raises(ValueError, match="slots must be 1 to 16"):
        bench.slot_design(0)
