"""The layers of docs/architecture.md, enforced: no module imports a layer it may not, no two
modules import each other in a cycle, every module belongs to a layer, every entry point names a
module of a layer, and ``apiary`` imports without the packages above it.

The rules are read from the ``import-rules`` block of docs/architecture.md, so the document and
the check cannot disagree. Every ``import`` statement counts, at module level or inside a
function; so does a call of ``importlib.import_module`` or ``__import__`` with a constant name,
and so does any constant string that names a project module exactly (``"harness.bench.runner"``,
``"harness.bench.runner:measure"``): a module reached by its name is imported all the same.

Each check is a function of a tree's root folder (the repository by default) that returns its
problems, one sentence each; the self-test runs them on a copy of the tree with problems planted.
``python tests/test_architecture.py`` prints what each layer imports.
"""

import ast
import functools
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass

import pytest

from apiary.layout import strongly_connected

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("apiary", "beehive", "flexdriver", "harness", "platforms")
LITEX_FAMILY = ("migen", "litex", "liteeth", "litedram", "liteiclink", "litex_boards")
#: A constant string that names a project module, optionally with an attribute
#: (``package.module``, ``package.module:function``; a bare package needs the attribute).
_MODULE_STRING = re.compile(
    r"(?P<module>(?:%s)(?:\.[A-Za-z_]\w*)*)(?::[A-Za-z_][\w.]*)?" % "|".join(PACKAGES))


# -- the rules -------------------------------------------------------------------------------------

@dataclass
class Rules:
    """The ``import-rules`` block: ``layers`` in order (bottom first), ``entries`` (``{module
    entry: layer}``, an entry ``a.b`` the module ``a.b`` only, ``a.b.*`` the package ``a.b`` and
    everything under it), ``allowed`` (``{layer: set of layers it may import}``) and
    ``duplicates`` (entries named twice)."""
    layers: list
    entries: dict
    allowed: dict
    duplicates: list


def _is_entry(word):
    return "." in word or word in PACKAGES


def read_rules(root=ROOT):
    """The rules of ``root``'s docs/architecture.md. A layer's line is its name, its module
    entries, then the layers it may import (``-``: none); a line starting with spaces adds
    entries to the layer above it."""
    text = (pathlib.Path(root) / "docs" / "architecture.md").read_text()
    block = re.search(r"```import-rules\n(.*?)```", text, re.S).group(1)
    rules = Rules([], {}, {}, [])

    def add(entry, layer):
        if entry in rules.entries:
            rules.duplicates.append(entry)
        rules.entries[entry] = layer

    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith(" "):                     # more modules of the layer above
            for entry in line.split():
                add(entry, rules.layers[-1])
            continue
        name, *rest = line.split()
        rules.layers.append(name)
        n = 0
        while n < len(rest) and _is_entry(rest[n]):
            add(rest[n], name)
            n += 1
        rules.allowed[name] = {w for w in rest[n:] if w != "-"}
    return rules


def _covers(entry, module):
    """Whether the rule entry ``entry`` covers ``module``, and how specifically (a sort key:
    the longer the named module, the more specific; an exact name before a ``.*`` of the same
    package), or ``None``."""
    if entry.endswith(".*"):
        base = entry[:-2]
        if module == base or module.startswith(base + "."):
            return (base.count("."), 0)
        return None
    return (entry.count("."), 1) if module == entry else None


def layer_of(module, rules):
    """The layer of the most specific entry of ``rules`` (a :class:`Rules`, or its
    ``{entry: layer}``) that covers ``module``, or ``None``: ``apiary`` covers the package's
    ``__init__`` only, ``apiary.stream.*`` the package and all its modules, and
    ``harness.bench.cli`` beats ``harness.bench.*``."""
    entries = rules.entries if isinstance(rules, Rules) else rules
    best, layer = None, None
    for entry, name in entries.items():
        key = _covers(entry, module)
        if key is not None and (best is None or key > best):
            best, layer = key, name
    return layer


# -- the tree --------------------------------------------------------------------------------------

def project_modules(root=ROOT):
    """``{module name: path}`` of every module of the project's packages under ``root``."""
    root = pathlib.Path(root)
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name, package, level):
    """``name`` (relative by ``level`` dots, as in ``from ..x import y``) made absolute."""
    if not level:
        return name
    base = package.split(".")
    base = base[:len(base) - level + 1]
    return ".".join(base + ([name] if name else []))


def _called_import(node, package):
    """The module that ``node`` imports if it is ``importlib.import_module("x")``,
    ``import_module("x")`` or ``__import__("x")`` with a constant name, else ``None``."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if name not in ("import_module", "__import__") or not (
            isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    target = first.value
    if name == "import_module" and target.startswith("."):
        anchor = node.args[1] if len(node.args) > 1 else None
        if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
            package = anchor.value
        elif not (isinstance(anchor, ast.Name) and anchor.id in ("__package__", "__name__")):
            return None
        level = len(target) - len(target.lstrip("."))
        return _resolve(target[level:], package, level)
    return target


@functools.lru_cache(maxsize=None)
def _read(module, is_package, text):
    """What a module's text says (cached by text: a copy of the tree costs nothing more):
    ``(imports, strings, defined)``, as :func:`imports_of`, :func:`module_strings` and
    :func:`_top_level_names` give them."""
    tree = ast.parse(text)
    package = module if is_package else module.rpartition(".")[0]
    imports, strings = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            prefix = _resolve(node.module, package, node.level)
            imports.add(prefix)
            imports.update(f"{prefix}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _MODULE_STRING.fullmatch(node.value)
            if match and ("." in match.group("module") or ":" in node.value):
                strings.add(match.group("module"))
        else:
            called = _called_import(node, package)
            if called:
                imports.add(called)
    return frozenset(imports), frozenset(strings), frozenset(_top_level_names(tree.body))


def _analysis(module, path):
    path = pathlib.Path(path)
    return _read(module, path.name == "__init__.py", path.read_text())


def imports_of(module, path):
    """Absolute names of everything ``module`` imports, anywhere in its file: its ``import``
    statements and its calls of ``importlib.import_module``/``__import__`` with a constant
    name."""
    return set(_analysis(module, path)[0])


def module_strings(module, path):
    """The project module names that constant strings of the file name (``"a.b"``,
    ``"a.b:f"``, ``"a:f"``); which of them are modules is for the caller to say."""
    return set(_analysis(module, path)[1])


def graph(root=ROOT):
    """``(modules, edges)``: ``{module: path}`` and ``{module: set of project modules it
    imports}``; a statement's names resolved to the longest existing module, a string's only if
    it names one exactly. A string naming the module's own package (or one above it) is no
    edge: Python imports a module's packages before the module whatever it says, and such a
    name is an anchor (``importlib.resources.files("apiary.sim")``), not a use of what the
    package defines."""
    found = project_modules(root)
    edges = {}
    for module, path in found.items():
        targets = set()
        for name in imports_of(module, path):
            while name and name not in found:
                name = name.rpartition(".")[0]
            if name:
                targets.add(name)
        targets |= {name for name in module_strings(module, path)
                    if name in found and not module.startswith(name + ".")}
        targets.discard(module)
        edges[module] = targets
    return found, edges


# -- the checks: each returns its problems ---------------------------------------------------------

def rule_problems(root=ROOT):
    """The rules themselves: a layer may import only layers below it, named once each."""
    rules = read_rules(root)
    problems = [f"{entry} is named twice in the rules" for entry in rules.duplicates]
    if not rules.layers or rules.layers[0] != "stream" or rules.layers[-1] != "platforms":
        problems.append(f"the layers run from stream to platforms, not {rules.layers}")
    for i, layer in enumerate(rules.layers):
        wrong = rules.allowed[layer] - set(rules.layers[:i])
        if wrong:
            problems.append(f"layer {layer} may import {sorted(wrong)}, which are not below it")
    return problems


def membership_problems(root=ROOT):
    """Every module in a layer; every entry of the rules an existing module (or package, for
    ``.*``)."""
    rules = read_rules(root)
    found = project_modules(root)
    problems = [f"{m} is in no layer" for m in found if layer_of(m, rules) is None]
    for entry in rules.entries:
        name = entry[:-2] if entry.endswith(".*") else entry
        if name not in found:
            problems.append(f"the rules name {entry}, which does not exist")
        elif entry.endswith(".*") and found[name].name != "__init__.py":
            problems.append(f"the rules name {entry}, but {name} is a module, not a package")
    return problems


def import_problems(root=ROOT):
    """Imports against the rules: a module (in a layer) importing one of a layer it may not.
    A module in no layer is :func:`membership_problems`'."""
    rules = read_rules(root)
    _, edges = graph(root)
    problems = []
    for module, targets in sorted(edges.items()):
        layer = layer_of(module, rules)
        if layer is None:
            continue
        for target in sorted(targets):
            other = layer_of(target, rules)
            if other is not None and other != layer and other not in rules.allowed[layer]:
                problems.append(f"{module} ({layer}) imports {target} ({other})")
    return problems


def litex_problems(root=ROOT):
    """Migen and the LiteX family, imported outside ``platforms``."""
    return [f"{module} imports {name}" for module, path in sorted(project_modules(root).items())
            if module.split(".")[0] != "platforms"
            for name in sorted(imports_of(module, path))
            if name.split(".")[0] in LITEX_FAMILY]


def cycle_problems(root=ROOT):
    """Modules that import each other in a cycle (through any number of modules)."""
    _, edges = graph(root)
    cycles = sorted(sorted(c) for c in strongly_connected(edges) if len(c) > 1)
    return ["import cycle: " + " ⇄ ".join(c) for c in cycles]


def _top_level_names(body):
    """The names a module's ``body`` defines at its top level (in ``if``/``try``/``with`` blocks
    too)."""
    names = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo += getattr(node, field, [])
        elif isinstance(node, ast.ExceptHandler):
            todo += node.body
    return names


def entry_points(root=ROOT):
    """``[(what, value)]``: pyproject.toml's ``[project.scripts]`` and
    ``[project.entry-points.*]``, ``what`` as ``group:name``."""
    project = tomllib.loads((pathlib.Path(root) / "pyproject.toml").read_text())["project"]
    found = [(f"scripts:{name}", value) for name, value in project.get("scripts", {}).items()]
    for group, points in project.get("entry-points", {}).items():
        found += [(f"{group}:{name}", value) for name, value in points.items()]
    return found


def entry_point_problems(root=ROOT):
    """Every entry point names an existing module of a layer and an attribute it defines."""
    rules = read_rules(root)
    found = project_modules(root)
    problems = []
    for what, value in entry_points(root):
        module, _, attribute = value.split("[")[0].strip().partition(":")
        module, attribute = module.strip(), attribute.strip().split(".")[0]
        where = f"entry point {what} = {value!r}"
        if module not in found:
            problems.append(f"{where}: no module {module}")
            continue
        if layer_of(module, rules) is None:
            problems.append(f"{where}: {module} is in no layer")
        if not attribute:
            problems.append(f"{where}: names no attribute of {module}")
        elif attribute not in _analysis(module, found[module])[2]:
            problems.append(f"{where}: {module} defines no {attribute}")
    return problems


CHECKS = {
    "rules": rule_problems,
    "membership": membership_problems,
    "imports": import_problems,
    "litex": litex_problems,
    "cycles": cycle_problems,
    "entry_points": entry_point_problems,
}


# -- the tests -------------------------------------------------------------------------------------

def test_the_rules_are_well_formed():
    problems = rule_problems()
    assert not problems, "docs/architecture.md's rules:\n" + "\n".join(problems)


def test_every_module_belongs_to_a_layer():
    problems = membership_problems()
    assert not problems, "docs/architecture.md against the tree:\n" + "\n".join(problems)


def test_no_module_imports_a_layer_above_or_beside_it():
    problems = import_problems()
    assert not problems, "imports against docs/architecture.md:\n" + "\n".join(problems)


def test_only_platforms_import_litex_or_migen():
    problems = litex_problems()
    assert not problems, "\n".join(problems)


def test_no_import_cycles():
    problems = cycle_problems()
    assert not problems, "\n".join(problems)


def test_entry_points_name_modules_of_layers():
    assert dict(entry_points())["scripts:apiary"] == "apiary.cli:main"
    problems = entry_point_problems()
    assert not problems, "pyproject.toml:\n" + "\n".join(problems)


#: Imports every module under apiary/ (the root is argv[1]) with the packages above it
#: unimportable; prints the modules that fail, exits 1 if any does.
_APIARY_ALONE = textwrap.dedent("""
    import importlib, importlib.abc, pathlib, sys, traceback

    ABOVE = {"beehive", "flexdriver", "harness", "platforms"}

    class Above(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ABOVE:
                raise ImportError(f"{name}: apiary may not import the packages above it")
            return None

    sys.meta_path.insert(0, Above())
    root = pathlib.Path(sys.argv[1])
    sys.path.insert(0, str(root))
    failed = []
    names = []
    for path in sorted((root / "apiary").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as e:
            failed.append(f"{name}: {type(e).__name__}: {e}")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ABOVE)
    print(f"{len(names)} modules imported; loaded from above: {loaded}")
    print("\\n".join(failed))
    sys.exit(1 if failed or loaded else 0)
""")


def test_apiary_imports_without_the_packages_above():
    """Every module of ``apiary`` imports with ``beehive``, ``harness`` and ``platforms``
    blocked: ``apiary`` installs and works without them."""
    done = subprocess.run([sys.executable, "-c", _APIARY_ALONE, str(ROOT)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    apiary = [m for m in project_modules() if m.split(".")[0] == "apiary"]
    assert done.stdout.startswith(f"{len(apiary)} modules imported;"), done.stdout


# -- the self-test: problems planted in a copy of the tree are found -------------------------------

def _copy_tree(root, dest):
    """The parts of ``root`` the checks read: the packages' modules, the rules, pyproject.toml."""
    for path in project_modules(root).values():
        target = dest / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    (dest / "docs").mkdir()
    shutil.copyfile(pathlib.Path(root) / "docs" / "architecture.md",
                    dest / "docs" / "architecture.md")
    shutil.copyfile(pathlib.Path(root) / "pyproject.toml", dest / "pyproject.toml")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A copy of the tree, which every check passes (as the tests above say of the tree)."""
    dest = tmp_path_factory.mktemp("tree")
    _copy_tree(ROOT, dest)
    assert {name: check(dest) for name, check in CHECKS.items()} == \
        {name: [] for name in CHECKS}
    return dest


def _plant(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _add_entry_point(root, line):
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    group = '[project.entry-points."apiary.commands"]\n'
    assert group in text
    pyproject.write_text(text.replace(group, group + line + "\n"))


PLANTED = {
    "a cycle in one layer": (
        {"apiary/stream/cyc_a.py": "from .cyc_b import B\nA = 1\n",
         "apiary/stream/cyc_b.py": "B = 2\n\ndef f():\n"
                                   "    from . import cyc_a\n    return cyc_a\n"},
        None,
        "cycles", ["import cycle: apiary.stream.cyc_a ⇄ apiary.stream.cyc_b"]),
    "an upward import": (
        {"apiary/stream/up.py": "def f():\n    import beehive.proto.udp\n"
                                "    return beehive.proto.udp\n"},
        None,
        "imports", ["apiary.stream.up (stream) imports beehive.proto.udp (proto)"]),
    "an upward import by a string": (
        {"apiary/noc/by_name.py": 'RUNNER = "harness.bench.runner:measure"\n'},
        None,
        "imports", ["apiary.noc.by_name (noc) imports harness.bench.runner (benches)"]),
    "an upward import by import_module": (
        {"apiary/os/loads.py": "import importlib\n\n"
                               "def f():\n    return importlib.import_module('beehive.nf.nat')\n"},
        None,
        "imports", ["apiary.os.loads (os) imports beehive.nf.nat (nf)"]),
    "a module in no layer": (
        {"apiary/stray.py": "X = 1\n"},
        None,
        "membership", ["apiary.stray is in no layer"]),
    "an entry point to a missing attribute": (
        {},
        'nope = "harness.bench.cli:NO_SUCH_COMMAND"',
        "entry_points", ["entry point apiary.commands:nope = 'harness.bench.cli:NO_SUCH_COMMAND': "
                         "harness.bench.cli defines no NO_SUCH_COMMAND"]),
    "an entry point to a module in no layer": (
        {"apiary/stray_cli.py": "COMMAND = None\n"},
        'stray = "apiary.stray_cli:COMMAND"',
        "entry_points", ["entry point apiary.commands:stray = 'apiary.stray_cli:COMMAND': "
                         "apiary.stray_cli is in no layer"]),
}


@pytest.mark.parametrize("case", PLANTED)
def test_the_checker_sees_a_bad_import(case, pristine, tmp_path):
    """The checks are real: a problem planted in a copy of the tree is reported by the check it
    concerns, exactly, naming the modules, and by no other (but a module in no layer, which the
    entry-point check also reports)."""
    files, entry_point, check, expected = PLANTED[case]
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    _plant(root, files)
    if entry_point:
        _add_entry_point(root, entry_point)
    found = {name: run(root) for name, run in CHECKS.items()}
    assert found[check] == expected
    others = {name: problems for name, problems in found.items() if name != check and problems}
    if case == "an entry point to a module in no layer":
        assert others == {"membership": ["apiary.stray_cli is in no layer"]}
    else:
        assert not others


def test_the_rules_mean_what_they_say():
    rules = read_rules()
    assert layer_of("apiary.stream.mac", rules) == "stream"
    assert layer_of("apiary.stream", rules) == "stream"           # (the package, by .*)
    assert layer_of("apiary.tiles.frame_port", rules) == "core"
    assert layer_of("apiary", rules) == "core"                    # the __init__ only
    assert layer_of("apiary.no_such_module", rules) is None
    assert layer_of("beehive", rules) == "proto"
    assert layer_of("beehive.no_such_module", rules) is None
    assert layer_of("harness.bench.cli", rules) == "benchcmd"     # beats harness.bench.*
    assert layer_of("harness.bench.echo", rules) == "benches"
    assert layer_of("harness.sweep.jobs", rules) == "sweep"
    assert "proto" not in rules.allowed["core"] and "core" in rules.allowed["proto"]
    # apiary stands alone: a layer of its modules may import only layers of apiary's.
    package = {layer: {e.split(".")[0] for e, name in rules.entries.items() if name == layer}
               for layer in rules.layers}
    for layer in rules.layers:
        if package[layer] == {"apiary"}:
            assert all(package[other] == {"apiary"} for other in rules.allowed[layer]), layer
    names = module_strings("harness.sweep.jobs", ROOT / "harness" / "sweep" / "jobs.py")
    assert {"harness.bench.runner", "harness.bench.echo"} <= names


def test_what_counts_as_an_import(tmp_path):
    path = tmp_path / "x.py"
    path.write_text(textwrap.dedent('''
        """Mentions beehive.proto.udp and harness.bench.runner:measure in prose: no import."""
        import importlib
        from ..noc.header import noc_header

        GROUP = "apiary.commands"                 # not a module: no edge (see graph)
        RUNNER = "harness.bench.runner:measure"
        BENCHES = {"nf": "beehive.nf"}
        MAIN = "platforms:main"
        PACKAGE = "apiary"                        # a bare package name: a word, not a module

        def f():
            importlib.import_module("beehive.proto.udp")
            importlib.import_module(".sim.core", "apiary")
            importlib.import_module(".checksum", __package__)
            return __import__("harness.sweep")
    '''))
    assert imports_of("apiary.stream.x", path) >= {
        "apiary.noc.header", "beehive.proto.udp", "apiary.sim.core", "apiary.stream.checksum",
        "harness.sweep"}
    assert module_strings("apiary.stream.x", path) == {
        "apiary.commands", "harness.bench.runner", "beehive.nf", "platforms",
        "beehive.proto.udp", "harness.sweep"}


if __name__ == "__main__":
    rules = read_rules()
    _, edges = graph()
    by_layer = {}
    for module, targets in edges.items():
        layer = layer_of(module, rules)
        for target in targets:
            other = layer_of(target, rules)
            if other != layer:
                by_layer.setdefault(layer, set()).add(other)
    for layer in rules.layers:
        print(f"{layer:10} imports {', '.join(sorted(by_layer.get(layer, ()))) or '-'}")
    problems = [p for check in CHECKS.values() for p in check()]
    print("\n".join(problems) if problems else "no problems")
