"""Python views of Amaranth struct layouts: a dataclass whose fields are a
:class:`~amaranth.lib.data.StructLayout`'s, packed to and unpacked from the layout's integer.

    @dataclass
    class CtlMeta(StructValues, layout=CTL_META):
        data: int = 0
        addr: int = 0

``pack`` checks that every field fits its width (:class:`ValueError` otherwise); ``unpack``
takes each field's bits of an integer. Fields of the layout that the dataclass does not name
are packed as zero and ignored when unpacking.
"""

from dataclasses import fields
from typing import Any, ClassVar, Self

from amaranth.lib import data


__all__ = ["StructValues"]


class StructValues:
    """Base of a dataclass that is the Python view of the struct layout given as the class
    keyword ``layout`` (its field names must be the layout's)."""

    layout: ClassVar[data.StructLayout]

    def __init_subclass__(cls, *, layout: data.StructLayout, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.layout = layout

    def pack(self) -> int:
        """The layout's integer of these values."""
        value = 0
        for f in fields(self):          # type: ignore[arg-type]
            spec = self.layout[f.name]
            v = int(getattr(self, f.name))
            if not 0 <= v < 1 << spec.width:
                raise ValueError(f"{f.name}={v} does not fit in {spec.width} bits")
            value |= v << spec.offset
        return value

    @classmethod
    def unpack(cls, value: int) -> Self:
        """The values in the layout's integer ``value``."""
        return cls(**{f.name: value >> cls.layout[f.name].offset
                      & (1 << cls.layout[f.name].width) - 1
                      for f in fields(cls)})  # type: ignore[arg-type]
