"""No testbench is left waiting when a simulation ends: :func:`simulate` (and the Amaranth
back end of :mod:`apiary.sim`) end the ones still waiting, and the test configuration
(``filterwarnings`` in pyproject.toml) fails a test that leaves one for the garbage collector."""

import gc
import pathlib
import subprocess
import sys
import textwrap

import pytest
from amaranth import Module, Signal
from amaranth.lib import stream
from amaranth.sim import Simulator

from apiary.stream.testbench import end_testbenches, simulate, stream_get, stream_put


ROOT = pathlib.Path(__file__).resolve().parents[2]


class Loop:
    """Two streams no design drives: a ``stream_put`` on ``port`` (its ``ready`` never set) or a
    ``stream_get`` on ``other`` (its ``valid`` never set) waits forever in
    ``await ctx.tick().until(...)``."""

    def __init__(self):
        self.m = Module()
        self.m.d.sync += Signal().eq(1)         # (a sync domain for the clock)
        self.port = stream.Signature(8).create()
        self.other = stream.Signature(8).create()


@pytest.fixture
def unraisable():
    """What Python could only print ("Exception ignored in ...") while the test ran, with a
    garbage collection at its end."""
    seen, previous = [], sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        yield seen
        gc.collect()
    finally:
        sys.unraisablehook = previous


def waiting_forever(port, ended):
    async def tb(ctx):
        try:
            await stream_put(ctx, port, 1)
        finally:
            ended.append(True)
    return tb


def test_simulate_ends_a_background_testbench_left_waiting(unraisable):
    loop, ended, got = Loop(), [], []

    async def main(ctx):
        await ctx.tick().repeat(5)
        got.append(True)

    simulate(loop.m, main, background=[waiting_forever(loop.port, ended)])
    assert got == [True] and ended == [True]        # ended before simulate returned
    gc.collect()
    assert unraisable == []


def test_simulate_ends_the_others_when_a_testbench_fails(unraisable):
    loop, ended = Loop(), []

    async def failing(ctx):
        await ctx.tick().repeat(3)
        raise AssertionError("the design is wrong")

    async def receiving(ctx):                       # a critical one, still waiting
        try:
            await stream_get(ctx, loop.other)
        finally:
            ended.append(True)

    with pytest.raises(AssertionError, match="the design is wrong"):
        simulate(loop.m, failing, receiving, background=[waiting_forever(loop.port, ended)])
    assert ended == [True, True]
    gc.collect()
    assert unraisable == []


def test_end_testbenches_of_a_simulator_never_run(unraisable):
    loop = Loop()
    sim = Simulator(loop.m)
    sim.add_clock(1e-8)
    sim.add_testbench(waiting_forever(loop.port, []))
    sim.add_process(waiting_forever(loop.port, []))
    end_testbenches(sim)
    del sim
    gc.collect()
    assert unraisable == []


PLANTED = '''
import gc

from amaranth import Module, Signal
from amaranth.sim import Simulator

from apiary.stream.testbench import end_testbenches


def run(background, *, end=False, run=True):
    m = Module()
    ready = Signal()
    m.d.sync += Signal().eq(1)

    async def waiting(ctx):
        await ctx.tick().until(ready)

    async def main(ctx):
        await ctx.tick().repeat(3)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(waiting, background=background)
    if run:
        sim.add_testbench(main)
        sim.run()
    if end:
        end_testbenches(sim)
    del sim
    gc.collect()


def test_{name}():
    run({args})
'''


@pytest.mark.parametrize("name, args, fails", [
    ("left_waiting", "background=True", "aclose(): asynchronous generator is already running"),
    ("never_run", "background=False, run=False", "was never awaited"),
    ("ended", "background=True, end=True", None),
    ("never_run_ended", "background=False, run=False, end=True", None),
])
def test_the_configuration_fails_a_test_that_leaves_a_testbench_waiting(tmp_path, name, args,
                                                                        fails):
    """A tiny test run with this project's pytest configuration: a testbench left waiting in
    ``until`` (or never run) for the garbage collector fails it; ended, it passes."""
    test = tmp_path / f"test_{name}.py"
    test.write_text(textwrap.dedent(PLANTED.format(name=name, args=args)))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
         str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(test)],
        capture_output=True, text=True, cwd=tmp_path)
    if fails is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "1 failed" in proc.stdout and fails in proc.stdout, proc.stdout
