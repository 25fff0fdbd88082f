# Amaranth ships no type information: everything is Any except `amaranth.lib.enum` (see there).
from typing import Any

def __getattr__(name: str) -> Any: ...
