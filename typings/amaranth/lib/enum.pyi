# Amaranth's enums are Python enums whose metaclass also knows a shape. Typed as such, members
# are members (not the ints an `Any` base makes of them), `.value`/`.name` and iteration work.
import enum as py_enum
from enum import auto as auto, unique as unique
from typing import Any

class EnumType(py_enum.EnumMeta):
    def as_shape(cls) -> Any: ...
    def const(cls, init: Any) -> Any: ...
    def from_bits(cls, bits: int) -> Any: ...
    def format(cls, value: Any, format_spec: str) -> Any: ...
    # An Amaranth value gives a view of it, a constant the member.
    def __call__(cls, value: Any, *args: Any, **kwargs: Any) -> Any: ...

EnumMeta = EnumType

# `shape=` and `view_class=` are the metaclass's keywords; declared here, where mypy looks.
class Enum(py_enum.Enum, metaclass=EnumType):  # type: ignore[misc]
    def __init_subclass__(cls, *, shape: Any = ..., view_class: Any = ...,
                          **kwargs: Any) -> None: ...

class IntEnum(py_enum.IntEnum, metaclass=EnumType):  # type: ignore[misc]
    def __init_subclass__(cls, *, shape: Any = ..., view_class: Any = ...,
                          **kwargs: Any) -> None: ...

class Flag(py_enum.Flag, metaclass=EnumType):  # type: ignore[misc]
    def __init_subclass__(cls, *, shape: Any = ..., view_class: Any = ...,
                          **kwargs: Any) -> None: ...

class IntFlag(py_enum.IntFlag, metaclass=EnumType):  # type: ignore[misc]
    def __init_subclass__(cls, *, shape: Any = ..., view_class: Any = ...,
                          **kwargs: Any) -> None: ...

def __getattr__(name: str) -> Any: ...
