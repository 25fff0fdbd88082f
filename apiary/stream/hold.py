"""Register stages for logic whose inputs hold still until its result is used.

A receive layer decides on a packet from a header that its peek holds in place until the
verdict; a transmit layer builds a header from the head of a queue that stays put until it is
taken. Logic like that can be cut into register stages without a valid bit per stage: register
the values at the cuts (:meth:`HeldStages.stage`), then use the result only once the inputs have
held still for as many cycles as the longest chain of registers (:meth:`HeldStages.settled`).
That is how a tile's one-cycle header checksum becomes three short cycles on a small FPGA, at
the cost of that many cycles of latency per packet.

Disabled (``HeldStages(m, enabled=False)``), :meth:`~HeldStages.stage` returns its value as it
is and :meth:`~HeldStages.settled` its ``valid``: the logic is combinational again, cycle for
cycle the same as without stages.
"""

from amaranth import Module, Signal, Value
from amaranth.hdl import ValueLike


__all__ = ["HeldStages"]


class HeldStages:
    """Pipeline registers for logic whose inputs are constant while ``valid`` (see the module
    docstring).

    Parameters
    ----------
    m : Module
        Where the registers go.
    enabled : bool
        Register at all; without, everything is combinational.
    """

    def __init__(self, m: Module, *, enabled: bool = True) -> None:
        self.m = m
        self.enabled = enabled
        self.depth = 0          # the longest chain of registers so far

    def stage(self, value: ValueLike, level: int = 1) -> Value:
        """``value`` registered, as the ``level``-th register on its longest path from the
        held inputs (1 if it is computed from them directly, 2 if from values staged at level
        1, and so on)."""
        value = Value.cast(value)
        if not self.enabled:
            return value
        if not isinstance(level, int) or level < 1:
            raise ValueError(f"a stage's level is a positive integer, not {level!r}")
        reg = Signal(value.shape(), name=f"held_l{level}", reset_less=True)
        self.m.d.sync += reg.eq(value)
        self.depth = max(self.depth, level)
        return reg

    def outputs(self, *values: ValueLike) -> list[Value]:
        """Each of ``values`` registered once more, after the deepest stage so far (all at the
        same level): the results a consumer takes once :meth:`settled`."""
        level = self.depth + 1
        return [self.stage(value, level) for value in values]

    def settled(self, valid: ValueLike, restart: ValueLike = 0) -> Value:
        """High while ``valid`` is and has been, without a ``restart``, for at least
        :attr:`depth` cycles before this one: every staged value then reflects the inputs.
        ``restart`` marks the last cycle of one set of inputs (the next may follow at once).
        Call it after the last :meth:`stage`."""
        valid = Value.cast(valid)
        if not self.enabled or self.depth == 0:
            return valid
        held = Signal(range(self.depth + 1), name="held_cycles")
        with self.m.If(~valid | restart):
            self.m.d.sync += held.eq(0)
        with self.m.Elif(held != self.depth):
            self.m.d.sync += held.eq(held + 1)
        ok = Signal(name="held_settled")
        self.m.d.comb += ok.eq(valid & (held == self.depth))
        return ok
