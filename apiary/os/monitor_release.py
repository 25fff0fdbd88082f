"""A monitor's quarantine and its release (:mod:`apiary.os.monitor`)."""

from typing import Any

from amaranth import Module, Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out, Component

from ..noc.header import Fbits
from .monitor_messages import REQUEST, request_payload
from .monitor_tables import command, walk_lookup
from .uapi import KernelMsgType as K


__all__ = ["Release"]


class Release(Component):
    """The tile's quarantine, and the ``RELEASE`` that ends it.

    ``fault`` (a violation) sets ``quarantined`` at the next clock edge. ``start`` (a
    ``RELEASE`` taken) sets ``releasing`` (the tile's reset) at the next clock edge, and
    ``quarantined`` too if it was not (a *kill*: a tile that hangs without a fault is released
    the same way); it is ignored while releasing. While releasing, the release walks the
    segment table one row per cycle in which ``to_kernel`` is ready (``walk`` shows the row):
    it gives back an owned row's memory (``MM_FREE`` of its root to the manager, on
    ``to_kernel``) and drops every valid row (``clear``). The cycle after the last row,
    ``releasing`` and ``quarantined`` fall together: ``entries + 1`` cycles without
    back-pressure.

    Members
    -------
    fault, start : In(1)
    quarantined, releasing : Out(1)
    walk : Out(walk_lookup(entries))
    clear : Out(command(slot=range(entries)))
    to_kernel : Out(stream.Signature(REQUEST))
    """

    def __init__(self, entries: int, manager: tuple[int, int]) -> None:
        if not isinstance(entries, int) or entries < 1:
            raise ValueError(f"a release walks a table of at least one row, not {entries!r}")
        self._entries = entries
        self._manager = (*manager, Fbits.LOCAL0)
        super().__init__({
            "fault": In(1), "start": In(1),
            "quarantined": Out(1), "releasing": Out(1),
            "walk": Out(walk_lookup(entries)),
            "clear": Out(command(slot=range(entries))),
            "to_kernel": Out(stream.Signature(REQUEST)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        walk = Signal(range(self._entries + 1))
        row = self.walk.entry
        m.d.comb += [self.walk.active.eq(self.releasing), self.walk.slot.eq(walk),
                     self.clear.slot.eq(walk)]
        with m.If(self.fault):
            m.d.sync += self.quarantined.eq(1)
        with m.If(self.start & ~self.releasing):
            m.d.sync += [self.releasing.eq(1), self.quarantined.eq(1), walk.eq(0)]
        with m.If(self.releasing):
            with m.If(walk == self._entries):
                m.d.sync += [self.releasing.eq(0), self.quarantined.eq(0)]
            with m.Elif(self.to_kernel.ready):
                m.d.sync += walk.eq(walk + 1)
                with m.If(row.valid & row.owner):
                    m.d.comb += self.to_kernel.valid.eq(1)
                m.d.comb += self.clear.en.eq(1)
        m.d.comb += request_payload(self.to_kernel, K.MM_FREE, self._manager, root=row.root)
        return m
