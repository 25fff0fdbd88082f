"""The flit stream: what every NoC link and tile port carries.

A *flit stream* carries one flit per transfer; ``last`` marks the final flit of a message, so
routers and mergers release an output without counting ``msg_len``. What a tile's logic sees
once NoC framing is removed is a payload stream (:mod:`apiary.stream.layout`).
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, stream

from ..stream.layout import check_width


__all__ = ["flit_layout", "flit_signature"]


def flit_layout(width: int) -> data.StructLayout:
    """``{data: width, last: 1}``, the payload of every NoC link."""
    check_width(width)
    return data.StructLayout({"data": unsigned(width), "last": unsigned(1)})


def flit_signature(width: int) -> stream.Signature:
    """``stream.Signature(flit_layout(width))``: build a matching port without the component."""
    return stream.Signature(flit_layout(width))
