"""Byte-lane wiring shared by the payload-stream blocks: masks and byte shifts.

A shift by a variable number of bytes is built as a logarithmic shifter (one 2:1 multiplexer
stage per bit of the amount), not as a ``<<`` of the whole word: the same logic a synthesiser
makes of it, but each output bit depends on a handful of nets instead of every input bit.

Every helper here takes the module ``m`` it builds into and puts each value it uses more than
once behind a signal (:func:`wire`). Amaranth copies an expression for every place it is used
when it lowers a design (its value transformers rebuild the tree, and the netlist builder
remembers values by identity), so a byte count used in each of 64 lanes, eight bits apiece,
becomes 512 copies of its logic, and a shifter whose stages each use the previous stage twice
becomes 2^6 copies of its first stage. Behind signals, the 512-bit UDP echo stack converts in
15 CPU-seconds instead of 66 (2026-11-29; synthesis merges the copies either way).
"""

from collections.abc import Sequence

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.hdl import ValueLike


__all__ = ["wire", "lane_mask", "shift_lanes_up", "shift_lanes_down", "rotate_lanes_up"]


def wire(m: Module, value: ValueLike, name: str) -> Value:
    """``value`` as one net: a signal named ``name`` that ``m`` drives combinationally with it;
    a signal or a constant is returned as it is."""
    value = Value.cast(value)
    if isinstance(value, (Signal, Const)):
        return value
    net = Signal(value.shape(), name=name)
    m.d.comb += net.eq(value)
    return net


def _constant(value: ValueLike) -> int | None:
    if isinstance(value, int):
        return value
    value = Value.cast(value)
    return value.value if isinstance(value, Const) else None


def lane_mask(m: Module, nb: int, nbytes: ValueLike) -> Value:
    """Ones in the ``nbytes`` low byte lanes of an ``nb``-byte word (``nbytes`` up to ``nb``
    or beyond: all ones). A constant ``nbytes`` gives a constant."""
    known = _constant(nbytes)
    if known is not None:
        return Const((1 << 8 * max(0, min(nb, known))) - 1, 8 * nb)
    nbytes = wire(m, nbytes, "nbytes")
    lanes = Signal(nb, name="lanes")
    m.d.comb += lanes.eq(Cat(nbytes > lane for lane in range(nb)))
    return Cat(lanes[lane].replicate(8) for lane in range(nb))


def _shift(m: Module, value: ValueLike, amount: ValueLike, nb: int, up: bool) -> Value:
    width = 8 * nb
    value = Value.cast(value)[:width]

    def moved(v: Value, lanes: int) -> Value:
        step = min(8 * lanes, width)
        zeros = Const(0, step)
        return Cat(zeros, v)[:width] if up else Cat(v[step:], zeros)[:width]

    known = _constant(amount)
    if known is not None:
        return moved(value, known)
    amount = wire(m, amount, "amount")
    for k in range(len(amount)):
        value = wire(m, Mux(amount[k], moved(value, 1 << k), value),
                     f"shifted_{'up' if up else 'down'}_{k}")
    return value


def shift_lanes_up(m: Module, value: ValueLike, amount: ValueLike, nb: int) -> Value:
    """``value`` (``nb`` bytes) moved ``amount`` lanes towards the most significant end, zeros
    shifted in, bytes shifted out lost. A constant ``amount`` is wiring."""
    return _shift(m, value, amount, nb, up=True)


def shift_lanes_down(m: Module, value: ValueLike, amount: ValueLike, nb: int) -> Value:
    """``value`` (``nb`` bytes) moved ``amount`` lanes towards lane 0, zeros shifted in. A
    constant ``amount`` is wiring."""
    return _shift(m, value, amount, nb, up=False)


def _rotated(value: Value, lanes: int, nb: int) -> Value:
    step = 8 * (lanes % nb)
    return Cat(value[8 * nb - step:], value[:8 * nb - step]) if step else value


def rotate_lanes_up(m: Module, value: ValueLike, amount: ValueLike, nb: int,
                    amounts: Sequence[int] | None = None) -> Value:
    """``value`` (``nb`` bytes) rotated ``amount`` lanes towards the most significant end:
    lane *L* gets lane ``(L - amount) mod nb``. One rotation gives both halves of a
    realignment (the lanes from ``amount`` up are the word shifted up, those below it the
    word shifted down by ``nb - amount``), so it costs half of two shifters.

    ``amounts``: the only values ``amount`` takes (any other gives wrong data): one 2:1 stage
    per bit in which they differ, the bits they share are wiring (IPv4's header lengths,
    multiples of 4, take four stages instead of six). A constant ``amount`` is wiring."""
    value = Value.cast(value)[:8 * nb]
    known = _constant(amount)
    if known is not None:
        return _rotated(value, known, nb)
    amount = wire(m, amount, "amount")
    if amounts is not None:
        choices = sorted({a % nb for a in amounts})
        varying = 0
        for a in choices:
            varying |= a ^ choices[0]
        value = _rotated(value, choices[0] & ~varying, nb)
        bits = [k for k in range(len(amount)) if varying >> k & 1]
    else:
        bits = list(range(len(amount)))
    for k in bits:
        value = wire(m, Mux(amount[k], _rotated(value, 1 << k, nb), value), f"rotated_{k}")
    return value
