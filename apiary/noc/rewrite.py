"""Rewrite fixed header fields of messages passing through a flit stream."""

from collections.abc import Mapping
from typing import Any

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .flit import flit_signature
from .header import field_location, header_flits, noc_header


__all__ = ["HeaderRewriter"]


class HeaderRewriter(wiring.Component):
    """Set header fields of every message on ``i`` to constants, pass everything else through.

    ``fields`` maps NoC header field names (``dst_x``, ``src_y``, ...) to the values to write.
    Latency: 0 cycles (combinational). Throughput: one flit per cycle. Drops nothing.
    """

    def __init__(self, width: int, fields: Mapping[str, int]) -> None:
        hdr = noc_header(width)
        for name, value in fields.items():
            if name not in hdr.names:
                raise ValueError(f"the NoC header has no field {name!r}")
            if not 0 <= int(value) < (1 << hdr.width(name)):
                raise ValueError(f"{name}={value} does not fit in {hdr.width(name)} bits")
        self._width = width
        self._fields = dict(fields)
        super().__init__({"i": In(flit_signature(width)), "o": Out(flit_signature(width))})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nh = header_flits(self._width)
        hdr = noc_header(self._width)
        index = Signal(range(nh + 1))  # position of the current flit within its message
        with m.If(self.i.valid & self.i.ready):
            with m.If(self.i.payload.last):
                m.d.sync += index.eq(0)
            with m.Elif(index < nh):
                m.d.sync += index.eq(index + 1)

        data = Signal(self._width)
        m.d.comb += data.eq(self.i.payload.data)
        for name, value in self._fields.items():
            flit, lsb = field_location(self._width, name)
            with m.If(index == flit):
                m.d.comb += data[lsb:lsb + hdr.width(name)].eq(value)
        m.d.comb += [
            self.o.valid.eq(self.i.valid),
            self.o.payload.data.eq(data),
            self.o.payload.last.eq(self.i.payload.last),
            self.i.ready.eq(self.o.ready),
        ]
        return m
