"""The payload stream: the one definition of a packet's bytes on a word-wide stream.

A *payload stream* carries packets as words of ``width`` bits: byte ``i`` of a word in lane ``i``
(bits ``8*i+7 .. 8*i``), every word full but the last, which has ``nbytes`` valid bytes from
lane 0 and ``last`` set. A packet of zero bytes is one word with ``nbytes == 0``. A last word
whose ``nbytes`` is above the width (:func:`abort_nbytes`) *aborts* its packet: receivers that
store packets whole (:class:`~apiary.stream.packet_buffer.PacketBuffer`) discard it, which is how
a MAC's FCS error reaches the first buffer without a field of its own.

Every stream block works at every width in :data:`SUPPORTED_WIDTHS`.
"""

from amaranth import Mux, Value
from amaranth.hdl import ValueLike
from amaranth.hdl import unsigned
from amaranth.lib import data, stream


__all__ = ["SUPPORTED_WIDTHS", "check_width", "payload_layout", "payload_signature",
           "payload_words", "abort_nbytes"]


#: Data widths every stream block, NoC link and tile supports.
SUPPORTED_WIDTHS = (64, 128, 256, 512)


def check_width(width: int, what: str = "flit width") -> int:
    """Raise a readable :class:`ValueError` unless ``width`` is a supported width; return it."""
    if width not in SUPPORTED_WIDTHS:
        raise ValueError(f"{what} must be one of {', '.join(map(str, SUPPORTED_WIDTHS))} bits, "
                         f"not {width!r}")
    return width


def payload_layout(width: int) -> data.StructLayout:
    """``{data: width, nbytes: 0..width/8 (and the abort value), last: 1}``."""
    check_width(width)
    return data.StructLayout({
        "data": unsigned(width),
        "nbytes": unsigned((width // 8).bit_length()),
        "last": unsigned(1),
    })


def payload_signature(width: int) -> stream.Signature:
    """``stream.Signature(payload_layout(width))``: build a matching port without the component."""
    return stream.Signature(payload_layout(width))


def abort_nbytes(width: int) -> int:
    """The ``nbytes`` of a last word that aborts its packet: one more than a word holds."""
    return check_width(width) // 8 + 1


def payload_words(payload_bytes: int | ValueLike,
                  width: int) -> tuple[int, int] | tuple[Value, Value]:
    """``(words, tail)``: how many ``width``-bit words carry ``payload_bytes`` bytes, and how many
    valid bytes the last of them holds (1 to ``width // 8``; meaningless when ``words`` is 0).

    Works on Python ints and on Amaranth values alike.
    """
    nb = width // 8
    shift = nb.bit_length() - 1
    words = (payload_bytes + (nb - 1)) >> shift
    if isinstance(payload_bytes, int):
        return words, (payload_bytes % nb) or nb
    low = Value.cast(payload_bytes)[:shift]
    return words, Mux(low == 0, nb, low)
