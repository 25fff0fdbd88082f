"""The refresher with a registered ZQ-calibration pulse gives LiteDRAM's refresher's commands,
cycle for cycle (Migen's simulator, both side by side, the same random ``ready``)."""

import random
from types import SimpleNamespace

import pytest
from litedram.core.refresher import Refresher, RefreshTimer
from migen import Module, run_simulation

from platforms.litex_soc.refresh import PulseTimer, RegisteredZqRefresher


def settings(zqcs=8):
    timing = SimpleNamespace(tREFI=128, tRP=3, tRFC=10, tZQCS=zqcs)
    return SimpleNamespace(timing=timing, geom=SimpleNamespace(addressbits=14, bankbits=3),
                           phy=SimpleNamespace(nranks=1), with_refresh=True)


class Pair(Module):
    def __init__(self, zqcs):
        # clk_freq / zqcs_freq: a ZQ period of 150 cycles, so that some refreshes end in a
        # cycle of its pulse.
        kw = dict(clk_freq=150, zqcs_freq=1, postponing=1)
        self.submodules.theirs = Refresher(settings(zqcs), **kw)
        self.submodules.ours = RegisteredZqRefresher(settings(zqcs), **kw)


def command(cmd):
    values = []
    for s in (cmd.valid, cmd.last, cmd.a, cmd.ba, cmd.cas, cmd.ras, cmd.we):
        values.append((yield s))
    return tuple(values)


@pytest.mark.parametrize("zqcs", [8, None])
def test_the_same_commands_as_litedram(zqcs):
    dut = Pair(zqcs)
    rng = random.Random(5)
    trace = {"theirs": [], "ours": []}

    def bench():
        for _ in range(12_000):
            ready = rng.random() < 0.3
            for name in trace:
                cmd = getattr(dut, name).cmd
                yield cmd.ready.eq(ready)
            yield
            for name in trace:
                trace[name].append((yield from command(getattr(dut, name).cmd)))

    run_simulation(dut, bench())
    assert trace["ours"] == trace["theirs"]
    refreshes = sum(1 for c in trace["ours"] if c[0] and c[4] and c[5] and not c[6])
    zq_calibrations = sum(1 for c in trace["ours"] if c[0] and not c[4] and not c[5] and c[6]
                          and c[2] == 0)
    assert refreshes >= 50
    assert (zq_calibrations > 0) == (zqcs is not None)


def test_the_pulse_timer_pulses_when_litedrams_would():
    class Timers(Module):
        def __init__(self):
            self.submodules.theirs = RefreshTimer(7)
            self.submodules.ours = PulseTimer(7)

    dut = Timers()
    rng = random.Random(1)
    seen = []

    def bench():
        for _ in range(400):
            wait = rng.random() < 0.9
            yield dut.theirs.wait.eq(wait)
            yield dut.ours.wait.eq(wait)
            yield
            seen.append(((yield dut.theirs.done), (yield dut.ours.done)))

    run_simulation(dut, bench())
    assert all(a == b for a, b in seen) and sum(a for a, _ in seen) > 20
    with pytest.raises(ValueError, match="a period of 2 cycles or more"):
        PulseTimer(1)
