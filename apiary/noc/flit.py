"""Flit and payload stream layouts: the one definition every NoC port and tile uses.

A *flit stream* carries one flit per transfer; ``last`` marks the final flit of a message, so
routers and mergers release an output without counting ``msg_len``. A *payload stream* is what a
tile's logic sees once NoC framing is removed: flit-wide words of bytes, byte ``i`` in lane ``i``
(bits ``8*i+7 .. 8*i``), ``nbytes`` valid bytes from lane 0 (the full width on every word but the
last), and ``last`` on the final word.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, stream

from .header import check_width


__all__ = ["flit_layout", "flit_signature", "payload_layout", "payload_signature"]


def flit_layout(width):
    """``{data: width, last: 1}``, the payload of every NoC link."""
    check_width(width)
    return data.StructLayout({"data": unsigned(width), "last": unsigned(1)})


def flit_signature(width):
    """``stream.Signature(flit_layout(width))``: build a matching port without the component."""
    return stream.Signature(flit_layout(width))


def payload_layout(width):
    """``{data: width, nbytes: 0..width/8, last: 1}``, a tile's byte stream."""
    check_width(width)
    return data.StructLayout({
        "data": unsigned(width),
        "nbytes": unsigned((width // 8).bit_length()),
        "last": unsigned(1),
    })


def payload_signature(width):
    return stream.Signature(payload_layout(width))
