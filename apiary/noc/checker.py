"""A tap on a flit stream in an Amaranth simulation: it records every message that passes, with
its cycles, and (as the simulation-time assertion checker of the message specification) fails
on the first message that breaks it.

::

    tap = FlitTap(router_port, width=64, name="udp_rx out")
    sim.add_process(tap.process)        # any amaranth.sim.Simulator, before it runs
    sim.run()
    tap.messages                        # [Tapped(cycle_first, cycle_last, flits, name)]

A message is checked when its last flit passes (:func:`~apiary.noc.spec.message_problems`:
lengths against the flit count, an unregistered type, metadata where its format puts it, no
stray bits, field values its format allows); a bad one raises :class:`MessageCheckError`,
which names the tap, the cycle, the message type and each field at fault, and stops the
simulation there. The tap only reads signals: it changes nothing of the design.
"""

from dataclasses import dataclass
from typing import Any

from .header import NocHeader, header_flits
from .msgtype import msg_type_name
from .spec import message_problems


__all__ = ["FlitTap", "Tapped", "MessageCheckError"]


class MessageCheckError(AssertionError):
    """A message that breaks the specification passed a checking :class:`FlitTap`."""


@dataclass(frozen=True)
class Tapped:
    """One message a tap saw: the cycles its first and last flits moved, its flits' data, and
    the tap's name."""
    cycle_first: int
    cycle_last: int
    flits: tuple[int, ...]
    tap: str


class FlitTap:
    """Record (and with ``check``, check) the messages on ``stream``, a flit stream
    (``valid``, ``ready``, ``payload.data``, ``payload.last``) of ``width`` bits. ``name`` says
    where it is in error messages and traces. Add :meth:`process` to the simulator before it
    runs: cycles count from the simulation's start, as :mod:`apiary.sim` numbers them."""

    def __init__(self, stream: Any, width: int, name: str, *, check: bool = True) -> None:
        self.stream = stream
        self.width = width
        self.name = name
        self.check = check
        self.messages: list[Tapped] = []

    async def process(self, ctx: Any) -> None:
        s = self.stream
        cycle, first = 0, 0
        flits: list[int] = []
        async for _, _, valid, ready, data, last in ctx.tick().sample(
                s.valid, s.ready, s.payload.data, s.payload.last):
            if valid and ready:
                if not flits:
                    first = cycle
                flits.append(int(data))
                if last:
                    self._message(first, cycle, flits)
                    flits = []
            cycle += 1

    def _message(self, first: int, cycle: int, flits: list[int]) -> None:
        if self.check:
            problems = message_problems(flits, self.width)
            if problems:
                kind = ""
                if len(flits) >= header_flits(self.width):
                    msg_type = NocHeader.unpack(flits, self.width).msg_type
                    kind = f" ({msg_type_name(msg_type)})"
                lines = "; ".join(f"field {field}: {text}" for field, text in problems)
                raise MessageCheckError(f"{self.name}, cycle {cycle}: a malformed "
                                        f"{len(flits)}-flit message{kind}: {lines}")
        self.messages.append(Tapped(first, cycle, tuple(flits), self.name))
