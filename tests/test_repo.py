"""The repository keeps its promises: CI runs exactly the README's test command, with the
tested versions of every dependency."""

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
