"""Load a design from a script: ``path/to/design.py``, ``path/to/design.py:function`` or
``package.module:function``.

A design script defines ``def design(width=512) -> Design`` (any keyword parameters it likes), or a
module-level ``design`` that already is a :class:`~apiary.design.Design`. :func:`load_design`
calls the function with the overrides the command line gives (``--width 64`` becomes
``design(width=64)``).

Whatever goes wrong (no such file, a syntax error, an exception in the script, a function that
does not take an override, a return value that is not a Design) becomes one
:class:`~apiary.design.DesignError` naming the file and line in the *user's* script, not a
traceback from inside Amaranth.
"""

import argparse
import importlib
import importlib.util
import inspect
import itertools
import os
import sys
import traceback
from typing import Any

from .design import Design, DesignError, _show_path
from .stream.layout import SUPPORTED_WIDTHS, check_width


__all__ = ["load_design", "load_script", "sibling", "add_design_arguments", "design_arguments",
           "load_from_args", "design_parameter"]

_counter = itertools.count()


def _split_spec(spec):
    """``(path, None, function)`` for a file, ``(None, module, function)`` for a module."""
    spec = os.fspath(spec)
    if spec.endswith(".py") or os.path.exists(spec):
        return spec, None, None
    if ":" in spec:
        left, func = spec.rsplit(":", 1)
        if left.endswith(".py") or os.path.exists(left):
            return left, None, func or None
        return None, left, func or None
    if os.sep in spec or "/" in spec:
        return spec, None, None          # a path without .py; reported as missing below
    return None, spec, None


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _locate(exc, script):
    """``(where_in_script, where_raised)`` for an exception: the innermost traceback frame in
    ``script``, and the innermost frame overall if it is elsewhere (else ``None``)."""
    frames = traceback.extract_tb(exc.__traceback__)
    in_script = [f for f in frames if script and _same_file(f.filename, script)]
    here = in_script[-1] if in_script else (frames[-1] if frames else None)
    where = f"{_show_path(here.filename)}:{here.lineno}" if here else _show_path(script or "?")
    inner = frames[-1] if frames else None
    raised = None
    if inner is not None and inner is not here:
        raised = f"{_show_path(inner.filename)}:{inner.lineno}"
    return where, raised


def _exception_text(exc):
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _raised(exc, script, what):
    where, raised = _locate(exc, script)
    inside = f" (raised inside {raised})" if raised else ""
    return DesignError(f"{where}: {what} raised {_exception_text(exc)}{inside}")


def _syntax_error(exc, path=None):
    if exc.lineno is None:          # not text at all: null bytes, say
        return DesignError(f"design file {_show_path(exc.filename or path or '?')!r} is not a "
                           f"Python script ({exc.msg})")
    where = f"{_show_path(exc.filename or path or '?')}:{exc.lineno}"
    lines = [f"{where}: syntax error in the design script: {exc.msg}"]
    if exc.text:
        text = exc.text.rstrip("\n")
        stripped = text.lstrip()
        lines.append(f"    {stripped}")
        if exc.offset:
            col = max(0, exc.offset - 1 - (len(text) - len(stripped)))
            lines.append("    " + " " * col + "^")
    return DesignError("\n".join(lines))


def _load_file(path):
    if not os.path.exists(path):
        return None, DesignError(f"design file {_show_path(path)!r} does not exist.")
    if os.path.isdir(path):
        return None, DesignError(f"design file {_show_path(path)!r} is a directory; give the "
                                 f"path of a Python file that defines design().")
    name = f"_apiary_design_{next(_counter)}_{os.path.splitext(os.path.basename(path))[0]}"
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None, DesignError(f"design file {_show_path(path)!r} cannot be loaded as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[name]
        return None, _syntax_error(e, path)
    except DesignError:
        del sys.modules[name]
        raise
    except Exception as e:              # noqa: BLE001 -- the user's script failed
        del sys.modules[name]
        return None, _raised(e, path, "the design script")
    return module, None


def load_script(path):
    """A Python file (a design script, say) as a module; a missing or broken file raises
    :class:`~apiary.design.DesignError` with one readable message."""
    module, error = _load_file(os.fspath(path))
    if error is not None:
        raise error
    return module


def sibling(file, name):
    """The script ``name`` in the folder of ``file`` (a script's own ``__file__``), as a module:
    how one example builds on another (the examples are scripts, not a package)."""
    return load_script(os.path.join(os.path.dirname(os.path.abspath(file)), name))


def _import_module(modname):
    try:
        return importlib.import_module(modname), None
    except SyntaxError as e:
        return None, _syntax_error(e)
    except ModuleNotFoundError as e:
        if e.name and (modname == e.name or modname.startswith(e.name + ".")):
            return None, DesignError(f"cannot load design {modname!r}: there is no file of that "
                                     f"name and no module {e.name!r} to import.")
        return None, _raised(e, None, f"importing {modname!r}")
    except DesignError:
        raise
    except Exception as e:              # noqa: BLE001
        spec = importlib.util.find_spec(modname)
        return None, _raised(e, spec.origin if spec else None, f"importing {modname!r}")


def _where_defined(fn, fallback):
    code = getattr(fn, "__code__", None)
    if code is None:
        return fallback
    return f"{_show_path(code.co_filename)}:{code.co_firstlineno}"


def load_design(spec, defaults=None, **overrides):
    """Load the design named by ``spec`` and return it (unchecked; call ``check()``).

    ``overrides`` (e.g. ``width=64``) are passed to the design function as keyword arguments.
    ``defaults`` (a dict) are passed too, but only those the function takes and ``overrides``
    does not set (a build passes the board's ``clock_hz`` this way).

    Raises
    ------
    DesignError
        For every failure, with one readable message naming the script's file and line.
    """
    path, modname, func = _split_spec(spec)
    # A script may import its neighbours; a module is looked up from the working directory too.
    script_dir = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    if script_dir in sys.path:
        script_dir = None
    if script_dir:
        sys.path.insert(0, script_dir)
    try:
        if path is not None:
            module, error = _load_file(path)
            label = _show_path(path)
        else:
            module, error = _import_module(modname)
            label = f"module {modname!r}"
        if error is not None:
            raise error
        script = getattr(module, "__file__", None)
        if path is None and script:
            label = f"module {modname!r} ({_show_path(script)})"
        attr = func or "design"
        if not hasattr(module, attr):
            if func:
                raise DesignError(f"{label} has no {attr!r}; define a function {attr}() that "
                                  f"returns an apiary Design.")
            raise DesignError(f"{label} defines no design() function; a design script defines "
                              f"`def design(width=512)` returning an apiary Design (or a "
                              f"module-level `design = Design(...)`).")
        obj = getattr(module, attr)
        if isinstance(obj, Design):
            return _check_static(obj, attr, label, overrides)
        if not callable(obj):
            raise DesignError(f"{label}: {attr} is a {type(obj).__name__}, not a function "
                              f"returning an apiary Design.")
        where = _where_defined(obj, label)
        overrides = {**_accepted(obj, defaults or {}), **overrides}
        _check_overrides(obj, attr, where, overrides)
        try:
            result = obj(**overrides)
        except DesignError:
            raise
        except Exception as e:          # noqa: BLE001 -- the user's design function failed
            raise _raised(e, script, f"{attr}()") from None
        if not isinstance(result, Design):
            shown = repr(result)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            raise DesignError(f"{attr}() at {where} returned {type(result).__name__} ({shown}), "
                              f"not an apiary Design.")
        return result
    finally:
        if script_dir and script_dir in sys.path:
            sys.path.remove(script_dir)


def _accepted(fn, values):
    """The items of ``values`` that ``fn`` names as keyword parameters. A ``**more`` takes none
    of them: such a function passes its extra keywords on (``tcp_echo.design``'s go to
    ``TcpConfig``), and a board's ``clock_hz`` there was a TypeError from deep inside."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in values.items()
            if k in params and params[k].kind in (params[k].POSITIONAL_OR_KEYWORD,
                                                  params[k].KEYWORD_ONLY)}


def _check_overrides(fn, attr, where, overrides):
    if not overrides:
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(**overrides)
    except TypeError:
        params = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        bad = [k for k in overrides if k not in {p.name for p in params}]
        given = ", ".join(f"{k}={overrides[k]!r}" for k in (bad or overrides))
        raise DesignError(f"{attr}() at {where} does not accept {given}; its parameters are "
                          f"{sig}.") from None


def _check_static(design, attr, label, overrides):
    for key, value in overrides.items():
        if getattr(design, key, object()) != value:
            raise DesignError(f"{label}: {attr} is a Design object, not a function, so it cannot "
                              f"be rebuilt with {key}={value!r}; define `def design({key}=...)` "
                              f"to make it a parameter.")
    return design


# -- the command line's design arguments ---------------------------------------------------------

_DESIGN_HELP = ("a design: path/to/script.py (its design() function), path/to/script.py:function, "
                "or package.module:function")
_WIDTH_HELP = "data-plane flit width, passed to the design function as width=N (64, 128, 256, 512)"


def add_design_arguments(parser):
    """``DESIGN``, ``--width``, ``--set`` and ``--full-routers``, as every design command takes
    them."""
    parser.add_argument("design", metavar="DESIGN", help=_DESIGN_HELP)
    parser.add_argument("--width", type=_width, metavar="N", help=_WIDTH_HELP)
    parser.add_argument("--set", action="append", default=[], type=design_parameter,
                        metavar="NAME=VALUE", dest="params",
                        help="a parameter of the design function (repeatable), e.g. "
                             "--set encoders=4; VALUE is a Python literal (a number, a "
                             "tuple...) or else a string")
    parser.add_argument("--full-routers", action="store_true",
                        help="build every router in full (all ports, FIFOs and crossbar paths) "
                             "instead of specialised to the design's routes: for debugging a "
                             "message that a router drops (<plane>_route_dropped)")


def design_arguments(args: Any) -> list[str]:
    """The arguments of :func:`add_design_arguments` that ``args`` holds, as a command line
    would give them (for a report to say what it measured)."""
    return [args.design,
            *([f"--width {args.width}"] if args.width else []),
            *(f"--set {k}={v!r}" for k, v in args.params),
            *(["--full-routers"] if args.full_routers else [])]


def _width(text):
    try:
        return check_width(int(text), "a width")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {', '.join(map(str, SUPPORTED_WIDTHS))} (bits), not {text!r}") from None


def design_parameter(text):
    """``(name, value)`` of a ``--set NAME=VALUE`` argument: VALUE as a Python literal, or
    else the string."""
    import ast
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def load_from_args(args: Any, **defaults: Any) -> Design:
    """The design that ``args.design`` names, with ``--width`` if given (over ``defaults``)."""
    overrides = dict(getattr(args, "params", None) or [])
    if args.width is not None:
        overrides["width"] = args.width
    design = load_design(args.design, defaults=defaults or None, **overrides)
    if getattr(args, "full_routers", False):
        design.full_routers = True
    return design
