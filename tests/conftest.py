"""Shared by every test:

* the sweep result cache (which ``apiary bench`` also reads) is a fresh folder per test session,
  so a test never reads a result another run stored, nor leaves one in the user's cache;
* the run's summary has one line saying how many Verilator models it built and the seconds that
  took (``pytest -n`` included), so a run after an edit shows what the edit cost to rebuild.
"""

import os
import shutil
import tempfile

import pytest

_builds: list[tuple[str, str, float]] = []


def pytest_configure(config):
    os.environ["APIARY_SWEEP_CACHE"] = tempfile.mkdtemp(prefix="apiary-test-sweep-")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("APIARY_SWEEP_CACHE", ""), ignore_errors=True)


@pytest.fixture(autouse=True)
def _count_verilator_builds(request):
    """Record the Verilator models the test built (key, seconds) on its report."""
    from apiary.sim import verilator
    before = len(verilator.builds)
    yield
    for key, seconds in verilator.builds[before:]:
        request.node.user_properties.append(("verilator_build", (key[:16], seconds)))


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _builds.extend((report.nodeid, *value) for name, value in report.user_properties
                       if name == "verilator_build")


def pytest_terminal_summary(terminalreporter):
    if _builds:
        total = sum(seconds for _, _, seconds in _builds)
        slowest = max(_builds, key=lambda b: b[2])
        terminalreporter.write_line(
            f"Verilator models built: {len(_builds)} in {total:.0f} s "
            f"(at {os.environ.get('APIARY_VERILATOR_OPT', '-O1')}; slowest {slowest[2]:.0f} s, "
            f"for {slowest[0]})")
    else:
        terminalreporter.write_line("Verilator models built: 0 (every model was cached)")
