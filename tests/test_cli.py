"""The loader and the ``apiary`` command line: exit codes, messages, files written."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import types
import xml.etree.ElementTree as ET

import pytest

from apiary.cli import main
from apiary.design import Design, DesignError, _show_path
from apiary.load import load_design

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIG5A = str(EXAMPLES / "deadlock_fig5a.py")
FIG5B = str(EXAMPLES / "deadlock_fig5b.py")
MESH = str(EXAMPLES / "mesh_3x3.py")


def script(tmp_path, body, name="design_script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def load_error(spec, **kw):
    with pytest.raises(DesignError) as info:
        load_design(str(spec), **kw)
    return str(info.value)


# -- loader ----------------------------------------------------------------------------------------

GOOD = """\
    from apiary.design import Design
    from apiary.tiles import ForwardTile

    def design(width=512):
        d = Design("good", cols=2, rows=1, width=width)
        d.add("a", ForwardTile, at=(0, 0))
        d.add("b", ForwardTile, at=(1, 0))
        d.route("a", "b")
        return d

    def other():
        d = Design("other", cols=1, rows=1)
        return d
"""


def test_load_file_and_overrides(tmp_path):
    path = script(tmp_path, GOOD)
    d = load_design(str(path))
    assert isinstance(d, Design) and d.name == "good" and d.width == 512
    assert load_design(path, width=64).width == 64
    assert d.tiles["a"].where == f"{_show_path(str(path))}:6"
    assert load_design(f"{path}:other").name == "other"


def test_load_module_function(tmp_path, monkeypatch):
    pkg = tmp_path / "loader_pkg_for_tests"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    script(pkg, GOOD, "designs.py")
    monkeypatch.chdir(tmp_path)
    try:
        assert load_design("loader_pkg_for_tests.designs:design", width=128).width == 128
        assert load_design("loader_pkg_for_tests.designs:other").name == "other"
        text = load_error("loader_pkg_for_tests.designs:nothing")
        assert "module 'loader_pkg_for_tests.designs' (" in text
        assert "has no 'nothing'" in text
    finally:
        for name in [m for m in sys.modules if m.startswith("loader_pkg_for_tests")]:
            del sys.modules[name]
    assert "no module 'no_such_module_xyz' to import" in load_error("no_such_module_xyz:design")


def test_load_missing_file(tmp_path):
    path = tmp_path / "nope.py"
    assert load_error(path) == f"design file {_show_path(str(path))!r} does not exist."
    assert "is a directory" in load_error(tmp_path)


def test_load_syntax_error_names_line_and_column(tmp_path):
    path = script(tmp_path, """\
        from apiary.design import Design

        def design(width=512):
            d = Design("x", cols=1, rows=1
            return d
    """)
    text = load_error(path)
    assert text.startswith(f"{_show_path(str(path))}:4: syntax error in the design script: ")
    assert "Traceback" not in text


def test_a_binary_design_file_is_named_as_not_a_script(tmp_path):
    path = tmp_path / "design.py"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00" + bytes(range(256)))
    assert load_error(path) == (f"design file {_show_path(str(path))!r} is not a Python "
                                f"script (source code string cannot contain null bytes)")


def test_load_script_raising_at_import(tmp_path):
    path = script(tmp_path, """\
        import math

        value = math.sqrt(-1)
    """)
    text = load_error(path)
    assert text.startswith(f"{_show_path(str(path))}:3: the design script raised ValueError: "
                           f"math domain error")


def test_load_design_function_raising_deep_inside(tmp_path):
    path = script(tmp_path, """\
        from amaranth import Signal

        def design(width=512):
            helper = 1
            return Signal(-3)
    """)
    text = load_error(path)
    assert text.startswith(f"{_show_path(str(path))}:5: design() raised TypeError: ")
    assert "(raised inside " in text and "amaranth" in text
    assert "Traceback" not in text


def test_load_design_error_from_the_script_passes_through(tmp_path):
    path = script(tmp_path, """\
        from apiary.design import Design

        def design(width=512):
            return Design("x", cols=0, rows=1)
    """)
    assert load_error(path) == (f"design 'x': cols must be an integer from 1 to 255, not 0 "
                                f"({_show_path(str(path))}:4).")


def test_load_wrong_return_type(tmp_path):
    path = script(tmp_path, """\
        def design(width=512):
            return {"tiles": []}
    """)
    assert load_error(path) == (f"design() at {_show_path(str(path))}:1 returned dict "
                                f"({{'tiles': []}}), not an apiary Design.")


def test_load_no_design_function(tmp_path):
    path = script(tmp_path, "x = 1\n")
    assert "defines no design() function" in load_error(path)
    assert _show_path(str(path)) in load_error(path)
    path2 = script(tmp_path, "design = 42\n", "d2.py")
    assert "design is a int, not a function returning an apiary Design" in load_error(path2)


def test_load_override_not_accepted(tmp_path):
    path = script(tmp_path, """\
        from apiary.design import Design

        def design():
            return Design("x", cols=1, rows=1)
    """)
    assert load_design(path).name == "x"
    assert load_error(path, width=64) == (f"design() at {_show_path(str(path))}:3 does not "
                                          f"accept width=64; its parameters are ().")


def test_defaults_go_only_to_named_parameters(tmp_path):
    """A board's defaults (``width``, ``clock_hz``) reach a design function that names them,
    not its ``**more``, which passes them on (``examples/tcp_echo.py``'s go to ``TcpConfig``:
    ``apiary build examples/tcp_echo.py --platform ecpix5`` failed with a TypeError there)."""
    path = script(tmp_path, """\
        from apiary.design import Design

        def design(width=512, **more):
            assert not more, more
            return Design("x", cols=1, rows=1, width=width)
    """)
    design = load_design(path, defaults={"width": 64, "clock_hz": 75_000_000})
    assert design.width == 64
    tcp = load_design("examples/tcp_echo.py", defaults={"width": 64, "clock_hz": 37_500_000})
    assert tcp.width == 64


def test_load_module_level_design_object(tmp_path):
    path = script(tmp_path, """\
        from apiary.design import Design
        design = Design("static", cols=1, rows=1, width=256)
    """)
    assert load_design(path).name == "static"
    assert load_design(path, width=256).width == 256
    assert "is a Design object, not a function, so it cannot be rebuilt with width=64" in \
        load_error(path, width=64)


def test_load_script_imports_its_neighbour(tmp_path):
    script(tmp_path, "N = 3\n", "neighbour_for_loader_test.py")
    path = script(tmp_path, """\
        from neighbour_for_loader_test import N
        from apiary.design import Design

        def design(width=512):
            return Design("n", cols=N, rows=1)
    """)
    try:
        assert load_design(path).cols == 3
    finally:
        sys.modules.pop("neighbour_for_loader_test", None)


# -- check -----------------------------------------------------------------------------------------

def test_check_sound_design(capsys):
    assert main(["check", FIG5B]) == 0
    out, err = capsys.readouterr()
    assert "design 'fig5b': 4×1 mesh, 512-bit data plane, 64-bit control plane" in out
    assert "4 tiles, 0 router-only positions, 3 routes" in out
    assert "plane 'data': 3 routes" in out
    assert "no deadlock" in out
    assert err == ""


def test_check_deadlock(capsys):
    assert main(["check", FIG5A]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("design 'fig5a': deadlock on plane 'data': udp.out → link (1,0)→E → "
                          "ip.in → ip.out → link (2,0)→W → udp.in → udp.out\n")
    assert "deadlock_fig5a.py:" in err and "Traceback" not in err


def test_check_width(capsys):
    assert main(["check", FIG5B, "--width", "64"]) == 0
    assert "64-bit data plane" in capsys.readouterr().out
    # A bad --width is the flag's fault: usage, exit 2, before the design is loaded.
    assert main(["check", FIG5B, "--width", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: apiary check ")
    assert err.endswith("apiary check: error: argument --width: expected 64, 128, 256, 512 "
                        "(bits), not '100'\n")


def test_design_parameters_on_the_command_line(capsys):
    rs = str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "rs_apiary.py")
    assert main(["check", rs, "--set", "encoders=3", "--set", "memories=2"]) == 0
    out = capsys.readouterr().out
    assert "app, app1, app2, sched" in out and "app3" not in out
    # A value that is not a Python literal is a string; a bad one is one readable error.
    assert main(["check", rs, "--set", "name=other"]) == 0
    assert "design 'other'" in capsys.readouterr().out
    assert main(["check", rs, "--set", "encoders=9"]) == 1
    assert "encoders must be 1 to 4, not 9" in capsys.readouterr().err
    assert main(["check", rs, "--set", "4"]) == 2
    assert "expected NAME=VALUE, not '4'" in capsys.readouterr().err


def test_check_reports_the_routers(capsys):
    echo = str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "udp_echo.py")
    assert main(["check", echo]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "routers:" in x)
    used, every = map(int, re.search(r"(\d+) of (\d+) crossbar paths", line).groups())
    assert every == 9 * 17 and 0 < used < every // 3
    assert main(["check", echo, "--full-routers"]) == 0
    assert "routers: full, all 153 crossbar paths" in capsys.readouterr().out


def test_check_user_errors_are_one_message(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.py")]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("missing.py' does not exist.") and "Traceback" not in err
    bad = script(tmp_path, """\
        from apiary.design import Design
        from apiary.tiles import ForwardTile

        def design(width=512):
            d = Design("bad", cols=2, rows=1, width=width)
            d.add("a", ForwardTile, at=(0, 0))
            d.add("b", ForwardTile, at=(0, 0))
            d.route("a", "c")
            return d
    """)
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    where = _show_path(str(bad))
    assert err.startswith("design 'bad' has 2 problems:\n")
    assert f"tiles 'a' (ForwardTile, {where}:6) and 'b' (ForwardTile, {where}:7) are both " \
           f"placed at (0,0)" in err
    assert f"route a → c ({where}:8) names tile 'c', which is not declared" in err


def test_check_elaborates_every_tile_and_names_the_broken_line(tmp_path, capsys):
    """A tile whose elaborate() fails inside Amaranth is found by `apiary check`, before any
    conversion: one error naming the tile, the line of the tile's code and Amaranth's message."""
    bad = script(tmp_path, """\
        from amaranth import Module, Signal
        from apiary.design import Design
        from apiary.tiles import ForwardTile

        class BrokenTile(ForwardTile):
            def elaborate(self, platform):
                m = super().elaborate(platform)
                m.d.comb += Signal(4).eq("four")
                return m

        def design(width=64):
            d = Design("broken", cols=2, rows=1, width=width)
            d.add("a", ForwardTile, at=(0, 0))
            d.add("b", BrokenTile, at=(1, 0))
            d.route("a", "b")
            return d
    """)
    assert main(["check", str(bad)]) == 1
    captured = capsys.readouterr()
    where = _show_path(str(bad))
    assert captured.err == (f"design 'broken': tile 'b' (BrokenTile, {where}:14) does not "
                            f"elaborate at {where}:8: TypeError: Object 'four' cannot be "
                            f"converted to an Amaranth value\n")
    assert "every tile elaborates" not in captured.out
    assert main(["check", FIG5B, "--width", "64"]) == 0
    assert capsys.readouterr().out.endswith("every tile elaborates (4 tiles, 64 bits)\n")


def test_usage_errors_and_help(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["check"]) == 2
    capsys.readouterr()
    assert main(["show", "--help"]) == 0
    out = capsys.readouterr().out
    assert "still drawn" in " ".join(out.split()) and "exit status is 0" in " ".join(out.split())
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("apiary ")


# -- show ------------------------------------------------------------------------------------------

def test_show_writes_svg(tmp_path, capsys):
    out = tmp_path / "fig5b.svg"
    assert main(["show", FIG5B, "-o", str(out)]) == 0
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    stdout, err = capsys.readouterr()
    assert f"wrote {out}" in stdout and err == ""


def test_show_deadlock_writes_and_warns(tmp_path, capsys):
    out = tmp_path / "fig5a.svg"
    assert main(["show", FIG5A, "--output", str(out), "--width", "64"]) == 0
    assert out.exists() and "Deadlock on plane" in out.read_text()
    stdout, err = capsys.readouterr()
    assert err.startswith("warning: design 'fig5a': deadlock on plane 'data': udp.out")
    assert f"drawn in red in {out}" in err


def test_show_default_output_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["show", MESH]) == 0
    assert (tmp_path / "mesh_3x3.svg").exists()


def test_show_refuses_broken_layout(tmp_path, capsys):
    bad = script(tmp_path, """\
        from apiary.design import Design
        from apiary.tiles import ForwardTile

        def design(width=512):
            d = Design("bad", cols=1, rows=1)
            d.add("a", ForwardTile, at=(1, 0))
            return d
    """)
    out = tmp_path / "bad.svg"
    assert main(["show", str(bad), "-o", str(out)]) == 1
    assert not out.exists()
    assert "outside the 1×1 mesh" in capsys.readouterr().err


def test_show_unwritable_output(tmp_path, capsys):
    assert main(["show", FIG5B, "-o", str(tmp_path / "no" / "dir" / "x.svg")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: apiary show ") and "Traceback" not in err
    assert err.endswith(f"-o {tmp_path / 'no' / 'dir' / 'x.svg'}: no such directory "
                        f"{tmp_path / 'no' / 'dir'}\n")


# -- verilog, bench --------------------------------------------------------------------------------

def test_verilog_refuses_deadlock(tmp_path, capsys):
    out = tmp_path / "fig5a.v"
    assert main(["verilog", FIG5A, "-o", str(out)]) == 1
    assert not out.exists()
    assert "deadlock on plane 'data'" in capsys.readouterr().err


def test_verilog_says_what_it_converts(tmp_path, capsys):
    """The conversion (seconds to minutes) is reported on stderr, not done in silence."""
    out = tmp_path / "loop.v"
    assert main(["verilog", str(ROOT / "examples" / "frame_loopback.py"), "--width", "64",
                 "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert re.fullmatch(r"converted 'frame_loopback' to Verilog in [\d.]+ s\n", captured.err)
    assert captured.out.startswith(f"wrote {out} (")


def test_verilog_of_the_3x3_mesh(tmp_path, capsys):
    out = tmp_path / "mesh.v"
    saved = os.environ.get("YOSYS")
    try:
        assert main(["verilog", MESH, "-o", str(out), "--width", "64"]) == 0
    finally:
        if saved is None:
            os.environ.pop("YOSYS", None)
        else:
            os.environ["YOSYS"] = saved
    text = out.read_text()
    assert "module mesh_3x3(" in text
    for x in range(3):
        for y in range(3):
            assert f"port_{x}_{y}_tx__payload" in text and f"port_{x}_{y}_rx__payload" in text
    assert f"wrote {out}" in capsys.readouterr().out


def test_bench_noc_delegates(monkeypatch, tmp_path):
    monkeypatch.setenv("APIARY_SWEEP_CACHE", str(tmp_path))    # (the fake's report stays here)
    calls = []
    bench = types.ModuleType("apiary.bench")
    noc = types.ModuleType("apiary.bench.noc")
    noc.main = lambda argv: calls.append(argv) or 3
    bench.noc = noc
    monkeypatch.setitem(sys.modules, "apiary.bench", bench)
    monkeypatch.setitem(sys.modules, "apiary.bench.noc", noc)
    assert main(["bench", "noc", "--width", "64", "--quick"]) == 3
    assert calls == [["--width", "64", "--quick"]]
    noc.main = lambda argv: None
    assert main(["bench", "noc"]) == 0


# -- the installed entry point ---------------------------------------------------------------------

def test_console_script_entry_point(tmp_path):
    exe = shutil.which("apiary")
    assert exe, "the apiary console script is not installed (pip install -e .)"
    result = subprocess.run([exe, "check", FIG5A], capture_output=True, text=True, cwd=ROOT,
                            timeout=120)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(
        "design 'fig5a': deadlock on plane 'data': udp.out → link (1,0)→E → ip.in")
    assert "examples/deadlock_fig5a.py:" in result.stderr
    assert "Traceback" not in result.stderr


def test_commands_from_other_packages_are_registered_not_imported():
    """`bench` and `build` come from the packages above apiary through the entry-point group;
    the CLI module itself names neither package."""
    import ast
    import pathlib
    from apiary.cli import ENTRY_POINT_GROUP, Command, commands
    found = commands()
    assert {"check", "show", "verilog", "sim", "bench", "build"} <= set(found)
    assert all(isinstance(c, Command) for c in found.values())
    assert found["bench"].run.__module__ == "harness.bench.cli"
    assert found["build"].run.__module__ == "platforms.cli"
    tree = ast.parse(pathlib.Path(main.__code__.co_filename).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] in ("beehive", "platforms")]
    assert ENTRY_POINT_GROUP == "apiary.commands"
