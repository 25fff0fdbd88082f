"""Every ``apiary build`` line of README.md is a command that works today: the real command line
parses it, resolves its board, loads its design with its ``--set`` parameters at the board's
width and checks it, and hands the build its options (the tools themselves are not run: the
board builds in test_build.py and the figures in docs/platforms.md do that)."""

import pathlib
import re
import shlex
from types import SimpleNamespace

import pytest

import platforms
from apiary.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_builds():
    text = (ROOT / "README.md").read_text()
    lines = re.findall(r"^apiary build (.+)$", text, re.M)
    return [shlex.split(line.split("#")[0]) for line in lines]


def test_the_readme_names_every_board_flow():
    platforms_named = {args[args.index("--platform") + 1] for args in readme_builds()}
    assert {"versa_ecp5", "ecpix5", "colorlight_5a_75b", "u200", "enzian",
            "amaranth:icebreaker"} <= platforms_named


@pytest.mark.parametrize("args", readme_builds(), ids=" ".join)
def test_a_readme_build_line_reaches_the_build_with_its_options(args, monkeypatch, tmp_path):
    handed = {}

    def build(design, target, out_dir, **options):
        handed.update(design=design, target=target, options=options)
        return SimpleNamespace(markdown=lambda: "")

    monkeypatch.setattr(platforms, "build", build)
    assert main(["build", *args, "-o", str(tmp_path)]) == 0
    design, options = handed["design"], handed["options"]
    assert design.name == pathlib.Path(args[0]).stem
    assert options["run_tools"] and not options["allow_timing_failure"]
    assert options["seed"] == (int(args[args.index("--seed") + 1]) if "--seed" in args else 1)
    if "--core-clock" in args:
        assert options["core_clk_freq"] == float(args[args.index("--core-clock") + 1]) * 1e6
    sets = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")
    if "flows" in sets:                     # the ECPIX-5's TCP engine, shrunk to fit
        assert design.tiles["tcp_rx"].params["config"].flows == int(sets["flows"])
