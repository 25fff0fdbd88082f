"""The Verilog cache key: the packages it hashes are passed in (or found from the tiles)."""

import os

from apiary.design import Design
from apiary.fingerprint import design_fingerprint, import_closure, package_sources, packages_of
from apiary.load import load_design
from apiary.tiles import ForwardTile, PortTile


def plain():
    d = Design("plain", cols=2, rows=1, width=64)
    d.add("a", PortTile, at=(0, 0), route=True)
    d.add("b", ForwardTile, at=(1, 0))
    d.chain("a", "b")
    return d


def test_packages_come_from_the_tile_classes_and_their_bases():
    assert packages_of(plain()) == ["amaranth", "apiary"]
    assert "beehive" in packages_of(load_design("examples/udp_echo.py", width=64))
    files = package_sources(["apiary"])
    assert any(f.endswith("apiary/top.py") for f in files)
    assert not any("beehive" in f for f in files)


def test_key_covers_the_packages_passed_and_the_extra():
    d = plain()
    a = design_fingerprint(d, ["apiary"])
    assert a == design_fingerprint(d, ["apiary"]) and len(a) == 64
    assert design_fingerprint(d, ["apiary", "beehive"]) != a
    assert design_fingerprint(d, ["apiary"], extra="MacOptions(pad_to=60)") != a
    d.settings["mac"] = "02:00:00:00:00:09"
    assert design_fingerprint(d, ["apiary"]) != a


def test_no_key_for_a_parameter_without_a_stable_text_form():
    d = plain()
    d.tiles["b"].params["msg_type"] = object()
    assert design_fingerprint(d, ["apiary"]) is None


def test_by_default_the_key_covers_what_the_tiles_import_and_nothing_else():
    d = load_design("examples/tcp_echo.py", width=64)
    files = import_closure(["beehive.apps.tcp_echo", "apiary.top"], packages_of(d))
    names = {f.split("/", f.count("/") - 2)[-1] for f in files}
    # The tile's own module, what it imports at any depth (the TCP engine's interface, the
    # kernel's memory messages, the NoC), the packages above them, and the elaborator.
    for name in ("beehive/apps/tcp_echo.py", "apps/tcp_app.py", "proto/tcp/app.py",
                 "apiary/os/memory_tile.py", "apiary/noc/framing.py", "beehive/__init__.py",
                 "apiary/top.py"):
        assert any(n.endswith(name) for n in names), name
    # Not the benchmarks, the command line or the simulators: editing them converts nothing.
    assert not any("/bench/" in f or f.endswith("cli.py") or "/sim/" in f for f in files)
    assert design_fingerprint(d) == design_fingerprint(d) is not None


def test_source_files_are_keyed_by_their_package_path_not_the_checkout(tmp_path):
    """Two checkouts in different folders (a CI clone beside a developer's) give the same key
    for the same files: each file counts by its path below its top-level package's folder."""
    from apiary.fingerprint import package_path
    keys = []
    for checkout in ("a", "b/c"):
        pkg = tmp_path / checkout / "pkg" / "sub"
        pkg.mkdir(parents=True)
        for folder in (pkg.parent, pkg):
            (folder / "__init__.py").write_text("")
        (pkg / "mod.py").write_text("x = 1\n")
        (tmp_path / checkout / "script.py").write_text("")
        keys.append((package_path(str(pkg / "mod.py")),
                     package_path(str(tmp_path / checkout / "script.py"))))
    assert keys[0] == keys[1] == ("pkg/sub/mod.py", "script.py")


def test_a_package_is_followed_only_where_something_is_taken_from_it(tmp_path, monkeypatch):
    """``beehive/proto/__init__.py`` gathers every protocol's tiles: a module below it (the
    TCP engine) does not depend on all of them, a ``from beehive.proto import UdpRxTile``
    does."""
    pkg = tmp_path / "fpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .gathered import Thing\n")
    (pkg / "gathered.py").write_text("Thing = 1\n")
    (pkg / "leaf.py").write_text("import os\n")
    (pkg / "by_parent.py").write_text("from fpkg import leaf\nfrom . import leaf as again\n")
    (pkg / "by_name.py").write_text("from fpkg import Thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    def names(module):
        return sorted(os.path.basename(f) for f in import_closure([module], ["fpkg"]))
    assert names("fpkg.by_parent") == ["__init__.py", "by_parent.py", "leaf.py"]
    assert names("fpkg.by_name") == ["__init__.py", "by_name.py", "gathered.py"]
    # In the tree: the UDP echo's key does not cover the TCP engine or the TCP applications.
    d = load_design("examples/udp_echo.py", width=64)
    files = import_closure(["beehive.proto.udp", "beehive.apps.echo", "apiary.top"],
                           packages_of(d))
    assert any(f.endswith("beehive/proto/udp.py") for f in files)
    assert not any("/proto/tcp/" in f or "apps/tcp_" in f for f in files)


def test_comments_and_docstrings_do_not_change_the_key(tmp_path):
    from apiary.fingerprint import code_of
    source = tmp_path / "tile.py"
    def code(text):
        source.write_text(text)
        os.utime(source, ns=(0, len(text)))        # a new version, whatever the clock's grain
        return code_of(str(source))
    base = code('"""A tile."""\n\nclass T:\n    """Its contract."""\n    x = 1  # one\n')
    assert code('"""A tile, said better."""\n\n# A comment.\nclass T:\n    """Reworded."""\n'
                '    x = 1\n') == base
    assert code('"""A tile."""\n\nclass T:\n    """Its contract."""\n    x = 2\n') != base
