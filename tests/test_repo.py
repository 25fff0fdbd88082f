"""The repository keeps its promises: CI runs exactly the README's test command, with the
tested versions of every dependency."""

import os
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def readme_commands():
    return re.findall(r"```\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_readme_opens_with_demo_and_test_commands():
    demo, tests = readme_commands()[:2]
    assert "examples/" in demo
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command():
    tests = readme_commands()[1]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert tests in ci


def test_constraints_pin_every_dependency_inside_its_range():
    """pyproject.toml gives compatible ranges; constraints.txt (which CI installs with) pins one
    tested version for each of them, inside the range, and nothing else."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        wanted += [Requirement(r) for r in extra]
    ranges = {canonicalize_name(r.name): r.specifier for r in wanted
              if canonicalize_name(r.name) != canonicalize_name(project["name"])}
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            pin = Requirement(line)
            (spec,) = pin.specifier
            assert spec.operator == "==", f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(pin.name)] = spec.version
    assert pins.keys() == ranges.keys()
    for name, version in pins.items():
        assert ranges[name].contains(version), f"{name}=={version} is outside {ranges[name]}"
    # Ranges, not pins: a user may install beside other packages.
    assert not [n for n, s in ranges.items() if any(x.operator == "==" for x in s)]


GROUPED_TESTS = '''
import os
import pytest

@pytest.mark.parametrize("group", [
    pytest.param(g, marks=pytest.mark.xdist_group(g), id=f"{g}-{i}")
    for g in ("red", "blue") for i in range(6)])
def test_worker(group, request):
    ran = request.config.rootpath / f"{group}-{os.environ['PYTEST_XDIST_WORKER']}"
    with open(ran, "a") as f:
        print("ran", file=f)
'''


def test_xdist_groups_run_on_one_worker(tmp_path):
    """Tests sharing a Verilator model are grouped with ``xdist_group`` so that one worker builds
    it; with the pinned pytest and pytest-xdist, each group's tests all run on one worker."""
    import subprocess
    import sys
    (tmp_path / "test_grouped.py").write_text(GROUPED_TESTS)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(tmp_path),
         str(tmp_path / "test_grouped.py")],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    ran = {f.name: len(f.read_text().split()) for f in tmp_path.glob("*-gw*")}
    assert sum(ran.values()) == 12, run.stdout
    assert sorted(name.split("-")[0] for name in ran) == ["blue", "red"], ran
