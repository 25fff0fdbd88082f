"""Message types: the NoC carries an 8-bit ``msg_type`` in every header and defines none of its own.

The packages that define messages register their types here, as an
:class:`amaranth.lib.enum.Enum` of shape 8 decorated with :func:`register_msg_types`::

    @register_msg_types
    class MemMsgType(enum.Enum, shape=8):
        LOAD_MEM = 19
        ...

Registration checks that the enum fits the header field and that no value is already taken by
another package's type, so two packages can never give one value two meanings by accident; it
also lets tools name a type in a trace (:func:`msg_type_name`). The value 0 is :data:`UNTYPED`,
what protocol-free tiles (placeholders, test ports) send unless told otherwise.
"""

from amaranth.hdl import Shape
from amaranth.lib import enum

from .header import routing_header


__all__ = ["UNTYPED", "register_msg_types", "msg_type_name", "registered_msg_types"]

#: ``msg_type`` of messages that carry no declared meaning.
UNTYPED = 0

_registry: dict[int, enum.Enum] = {}


def register_msg_types(cls: type[enum.Enum]) -> type[enum.Enum]:
    """Register every member of the enum ``cls`` as a message type; returns ``cls`` (a decorator).

    Raises
    ------
    TypeError
        If ``cls`` is not an Amaranth enum whose shape is the header's ``msg_type`` field.
    ValueError
        If one of its values is 0 (:data:`UNTYPED`) or already registered by another enum.
    """
    width = routing_header().width("msg_type")
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)
            and Shape.cast(cls.as_shape()) == Shape(width)):
        raise TypeError(f"{cls!r} is not an amaranth.lib.enum.Enum of shape {width}; message "
                        f"types must fit the header's {width}-bit msg_type field")
    for member in cls:
        if member.value == UNTYPED:
            raise ValueError(f"{_describe(member)} uses msg_type 0, which is reserved for "
                             f"untyped messages")
        taken = _registry.get(member.value)
        if taken is not None and type(taken) is not cls and _key(taken) != _key(member):
            raise ValueError(f"{_describe(member)} and {_describe(taken)} both claim msg_type "
                             f"{member.value}; give one of them another value")
    for member in cls:
        _registry.setdefault(member.value, member)
    return cls


def _key(member: enum.Enum) -> tuple[str, str, str]:
    """The same enum defined again (a module reloaded) registers as itself."""
    return (type(member).__module__, type(member).__qualname__, member.name)


def _describe(member: enum.Enum) -> str:
    return f"{type(member).__module__}.{type(member).__qualname__}.{member.name}"


def msg_type_name(value: int) -> str:
    """``"MsgType.ETH_RX_FRAME"`` for a registered value, ``"UNTYPED"`` for 0, else the number."""
    if value == UNTYPED:
        return "UNTYPED"
    member = _registry.get(value)
    if member is None:
        return str(value)
    return f"{type(member).__qualname__}.{member.name}"


def registered_msg_types() -> dict[int, enum.Enum]:
    """Every registered type, by value (those of the packages imported so far)."""
    return dict(sorted(_registry.items()))
