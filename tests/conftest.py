"""Shared by every test:

* the sweep result cache (which ``apiary bench`` also reads) is a fresh folder per test session,
  so a test never reads a result another run stored, nor leaves one in the user's cache;
* the run's summary has one line saying how many Verilator models it built and the seconds that
  took (``pytest -n`` included), so a run after an edit shows what the edit cost to rebuild;
* the ``slow`` tests are handed out first, so that under ``pytest -n`` the long ones do not
  start last and leave one worker running alone at the end (xdist hands out the ``xdist_group``
  groups before single tests, the largest first);
* under ``--dist loadgroup``, a test marked ``xdist_group`` must carry its group in its id (which
  is how pytest-xdist sends a group to one worker): when it does not, as with pytest 9.2 and
  pytest-xdist 3.8, the run stops at once instead of building each shared model on both workers.
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


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    result = yield
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "loadgroup", False):
        lost = [item.nodeid for item in items
                if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(
                f"--dist loadgroup had no effect on {len(lost)} tests marked xdist_group (first: "
                f"{lost[0]}): this pytest-xdist cannot add the group to a test's id with this "
                f"pytest; install the versions in constraints.txt")
    return result


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
        again = len(_builds) - len({key for _, key, _ in _builds})
        twice = f", {again} of them built again by another worker" if again else ""
        terminalreporter.write_line(
            f"Verilator models built: {len(_builds)} in {total:.0f} s{twice} "
            f"(at {os.environ.get('APIARY_VERILATOR_OPT', '-O1')}; slowest {slowest[2]:.0f} s, "
            f"for {slowest[0]})")
    else:
        terminalreporter.write_line("Verilator models built: 0 (every model was cached)")
