"""The layers of docs/architecture.md, enforced: no module imports a layer it may not, no two
modules import each other in a cycle, every module belongs to a layer.

The rules are read from the ``import-rules`` block of docs/architecture.md, so the document and
the check cannot disagree. Every ``import`` statement counts, at module level or inside a
function. ``python tests/test_architecture.py`` prints what each layer imports.
"""

import ast
import pathlib
import re

from apiary.layout import strongly_connected

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("apiary", "beehive", "platforms")
LITEX_FAMILY = ("migen", "litex", "liteeth", "litedram", "liteiclink", "litex_boards")


def read_rules():
    """``(layers, modules, allowed)``: layer names in order, ``{module prefix: layer}``,
    ``{layer: set of layers it may import}``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```import-rules\n(.*?)```", text, re.S).group(1)
    layers, modules, allowed = [], {}, {}
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith(" "):                     # more modules of the layer above
            for module in line.split():
                modules[module] = layers[-1]
            continue
        name, *rest = line.split()
        layers.append(name)
        names = [w for w in rest if w != "-"]
        mods = [w for w in names if "." in w or w in PACKAGES]
        for module in mods:
            modules[module] = name
        allowed[name] = set(names[len(mods):])
    return layers, modules, allowed


def project_modules():
    """``{module name: path}`` of every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(module, path):
    """Absolute names of everything ``module`` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def layer_of(module, modules):
    """The layer of the longest module prefix that covers ``module``, or ``None``."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        layer = modules.get(".".join(parts[:k]))
        if layer is not None:
            return layer
    return None


def graph():
    """``{module: set of project modules it imports}`` (names resolved to existing modules)."""
    found = project_modules()
    edges = {}
    for module, path in found.items():
        targets = set()
        for name in imports_of(module, path):
            while name and name not in found:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        edges[module] = targets
    return found, edges


def test_the_rules_are_well_formed():
    layers, modules, allowed = read_rules()
    assert layers[0] == "stream" and layers[-1] == "platforms"
    for layer, below in allowed.items():
        assert below <= set(layers[:layers.index(layer)]), \
            f"layer {layer} may import {below - set(layers[:layers.index(layer)])}, which are " \
            f"not below it"


def test_every_module_belongs_to_a_layer():
    _, modules, _ = read_rules()
    found = project_modules()
    lost = sorted(m for m in found if layer_of(m, modules) is None)
    assert not lost, f"modules in no layer of docs/architecture.md: {lost}"
    stale = sorted(m for m in modules if m not in found and not any(
        f.startswith(m + ".") for f in found))
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_no_module_imports_a_layer_above_or_beside_it():
    _, modules, allowed = read_rules()
    found, edges = graph()
    wrong = []
    for module, targets in sorted(edges.items()):
        layer = layer_of(module, modules)
        for target in sorted(targets):
            other = layer_of(target, modules)
            if other != layer and other not in allowed[layer]:
                wrong.append(f"{module} ({layer}) imports {target} ({other})")
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(wrong)


def test_only_platforms_import_litex_or_migen():
    found = project_modules()
    wrong = [f"{module} imports {name}" for module, path in sorted(found.items())
             if not module.startswith("platforms")
             for name in sorted(imports_of(module, path))
             if name.split(".")[0] in LITEX_FAMILY]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    _, edges = graph()
    cycles = [sorted(c) for c in strongly_connected(edges) if len(c) > 1]
    assert not cycles, "modules that import each other in a cycle: " + "; ".join(
        " ⇄ ".join(c) for c in cycles)


def test_the_checker_sees_a_bad_import(tmp_path, monkeypatch):
    """The checks are real: an upward import and a cycle planted in a copy are found."""
    _, modules, allowed = read_rules()
    assert layer_of("apiary.stream.mac", modules) == "stream"
    assert layer_of("apiary.tiles.frame_port", modules) == "core"
    assert "proto" not in allowed["core"] and "core" in allowed["proto"]
    fake = tmp_path / "apiary" / "stream"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from ..noc.header import noc_header\n"
                                 "def f():\n    import beehive.proto.udp\n")
    names = imports_of("apiary.stream.bad", fake / "bad.py")
    assert {"apiary.noc.header", "beehive.proto.udp"} <= names
    assert layer_of("apiary.noc.header", modules) not in allowed["stream"]


if __name__ == "__main__":
    _, modules, _ = read_rules()
    _, edges = graph()
    by_layer = {}
    for module, targets in edges.items():
        layer = layer_of(module, modules)
        for target in targets:
            other = layer_of(target, modules)
            if other != layer:
                by_layer.setdefault(layer, set()).add(other)
    for layer in read_rules()[0]:
        print(f"{layer:10} imports {', '.join(sorted(by_layer.get(layer, ()))) or '-'}")
