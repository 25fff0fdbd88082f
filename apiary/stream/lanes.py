"""Byte-lane wiring shared by the payload-stream blocks: masks and byte shifts.

A shift by a variable number of bytes is built as a logarithmic shifter (one 2:1 multiplexer
stage per bit of the amount), not as a ``<<`` of the whole word: the same logic a synthesiser
makes of it, but each output bit depends on a handful of nets instead of every input bit, which
keeps Amaranth's elaboration fast at 512 bits.
"""

from amaranth import Cat, Mux, Value
from amaranth.hdl import ValueLike


__all__ = ["lane_mask", "shift_lanes_up", "shift_lanes_down"]


def lane_mask(nb: int, nbytes: ValueLike) -> Value:
    """Ones in the ``nbytes`` low byte lanes of an ``nb``-byte word (``nbytes`` up to ``nb``
    or beyond: all ones)."""
    nbytes = Value.cast(nbytes)
    return Cat((nbytes > lane).replicate(8) for lane in range(nb))


def shift_lanes_up(value: ValueLike, amount: ValueLike, nb: int) -> Value:
    """``value`` (``nb`` bytes) moved ``amount`` lanes towards the most significant end, zeros
    shifted in, bytes shifted out lost."""
    amount = Value.cast(amount)
    width = 8 * nb
    value = Value.cast(value)[:width]
    for k in range(len(amount)):
        step = 8 << k
        moved = Cat(Value.cast(0).replicate(min(step, width)), value)[:width]
        value = Mux(amount[k], moved, value)
    return value


def shift_lanes_down(value: ValueLike, amount: ValueLike, nb: int) -> Value:
    """``value`` (``nb`` bytes) moved ``amount`` lanes towards lane 0, zeros shifted in."""
    amount = Value.cast(amount)
    width = 8 * nb
    value = Value.cast(value)[:width]
    for k in range(len(amount)):
        step = 8 << k
        moved = Cat(value[step:], Value.cast(0).replicate(min(step, width)))[:width] \
            if step < width else Value.cast(0).replicate(width)
        value = Mux(amount[k], moved, value)
    return value
