"""Fairness counters on a flit stream (Coyote's per-vFPGA counters, OSDI'20 §6.3): what one port
carried and how long it waited.

A :class:`FlitMeter` watches a flit stream without touching it (its inputs are copies of the
stream's ``valid``, ``ready`` and payload) and counts, in 32-bit counters that wrap:

============  ==================================================================================
counter       counts
============  ==================================================================================
``flits``     flits transferred (``valid & ready``)
``messages``  messages transferred (their ``last`` flit)
``bytes``     payload bytes of the messages transferred (the header's ``payload_bytes``, added
              when the header's flit holding it is transferred)
``stalls``    cycles a flit was offered and not taken (``valid & ~ready``): back-pressure
============  ==================================================================================

Latency 0 (it only watches), no effect on throughput, drops nothing. :meth:`counter_names`
gives the names with a prefix (``out_``, ``in_``), for a component that meters several ports.
"""

from typing import Any

from amaranth import Module, Signal
from amaranth.lib.wiring import Component, In, Out

from ..stream.counters import CounterSignature
from ..stream.layout import check_width
from .header import field_location, noc_header
from ..stream.counters import count


__all__ = ["FlitMeter", "METER_COUNTERS", "meter"]

METER_COUNTERS = {
    "flits": "flits transferred",
    "messages": "messages transferred",
    "bytes": "payload bytes of the messages transferred",
    "stalls": "cycles a flit waited (offered, not taken)",
}


class FlitMeter(Component):
    """Count a flit stream's flits, messages, payload bytes and stall cycles (see the module
    docstring).

    Members
    -------
    valid, ready, last : In(1)
    data : In(width)
    counters : Out(CounterSignature(METER_COUNTERS))
    """

    def __init__(self, width: int) -> None:
        self._width = check_width(width)
        super().__init__({
            "valid": In(1), "ready": In(1), "last": In(1), "data": In(width),
            "counters": Out(CounterSignature(METER_COUNTERS)),
        })

    @staticmethod
    def counter_names(prefix: str) -> dict[str, str]:
        """``METER_COUNTERS`` with ``prefix`` on every name and ``(prefix)`` in the text."""
        return {f"{prefix}{name}": f"{text} ({prefix.rstrip('_')})"
                for name, text in METER_COUNTERS.items()}

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        w, c = self._width, self.counters
        flit_index, lsb = field_location(w, "payload_bytes")
        size = noc_header(w).width("payload_bytes")
        index = Signal(range(flit_index + 2))       # flit of the message being transferred
        taken = self.valid & self.ready
        with m.If(taken):
            count(m, c.flits)
            with m.If(index <= flit_index):         # count up to one past the header's flit
                m.d.sync += index.eq(index + 1)
            with m.If(index == flit_index):
                count(m, c.bytes, self.data[lsb:lsb + size])
            with m.If(self.last):
                m.d.sync += [c.messages.eq(c.messages + 1), index.eq(0)]
        with m.If(self.valid & ~self.ready):
            count(m, c.stalls)
        return m


def meter(m: Module, name: str, width: int, port: Any, counters: Any, prefix: str) -> None:
    """Add a :class:`FlitMeter` (submodule ``name`` of ``m``) on stream ``port`` and drive the
    ``prefix``-named members of ``counters`` (a :meth:`FlitMeter.counter_names` set) from it."""
    m.submodules[name] = fm = FlitMeter(width)
    m.d.comb += [fm.valid.eq(port.valid), fm.ready.eq(port.ready),
                 fm.last.eq(port.payload.last), fm.data.eq(port.payload.data)]
    for counter in METER_COUNTERS:
        m.d.comb += getattr(counters, prefix + counter).eq(getattr(fm.counters, counter))
