"""The repository keeps its promises: CI runs exactly the README's test command."""

import pathlib
import re

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
