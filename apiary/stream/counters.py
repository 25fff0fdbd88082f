"""Counters as a signature: how a component declares what it counts.

A component that counts events (frames dropped, packets forwarded) declares them as one member
whose signature is a :class:`CounterSignature`: a named ``Out`` port per counter, each with a
sentence saying what it counts. Whoever assembles components collects these members instead of
guessing counters from port names: the design's top level gathers every tile's into one bank
(:mod:`apiary.counters`), which simulation, benchmarks and board wrappers read.
"""

from collections.abc import Mapping
from typing import Any

from amaranth.hdl import unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import Out


__all__ = ["CounterSignature", "COUNTER_WIDTH", "count"]

#: Width of a counter unless declared otherwise.
COUNTER_WIDTH = 32


class CounterSignature(wiring.Signature):
    """One ``Out(unsigned(width))`` member per counter.

    Parameters
    ----------
    counters : mapping
        ``{name: description}`` (a 32-bit counter) or ``{name: (width, description)}``, in
        the order the counters are to be listed.

    Attributes
    ----------
    descriptions : dict of str to str
        What each counter counts.

    Raises
    ------
    ValueError
        If a name is not a Python identifier, a width is not 1 to 64 bits, or a description is
        not a string.
    """

    def __init__(self, counters: Mapping):
        members, self.descriptions = {}, {}
        for name, spec in dict(counters).items():
            width, text = (COUNTER_WIDTH, spec) if isinstance(spec, str) else spec
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"a counter's name must be a Python identifier, not {name!r}")
            if not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= 64:
                raise ValueError(f"counter {name!r} must be 1 to 64 bits wide, not {width!r}")
            if not isinstance(text, str):
                raise ValueError(f"counter {name!r} needs a description (a string), "
                                 f"not {text!r}")
            members[name] = Out(unsigned(width))
            self.descriptions[name] = text
        super().__init__(members)

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and self.members == other.members
                and self.descriptions == other.descriptions)

    def __hash__(self) -> int:
        return hash(tuple(self.members.keys()))

    def __repr__(self) -> str:
        return f"CounterSignature({list(self.members.keys())})"


def count(m: Any, counter: Any, by: Any = 1) -> None:
    """Add ``by`` (default 1) to ``counter`` on the next clock edge (``m.d.sync``), under the
    conditions in force where it is called (``with m.If(...)``): one event counted. A counter
    wraps at its width."""
    m.d.sync += counter.eq(counter + by)
