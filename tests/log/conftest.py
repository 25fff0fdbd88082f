"""The TAP fixtures (``netns``, ``bridge``) of tests/sim/conftest.py, for `apiary log` over TAP."""

import importlib.util
import pathlib

_path = pathlib.Path(__file__).resolve().parents[1] / "sim" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tap_fixtures", _path)
_tap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tap)

netns = _tap.netns
bridge = _tap.bridge
