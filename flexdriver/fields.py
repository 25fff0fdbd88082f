"""Packet header fields in a word of byte lanes (byte ``i`` in bits ``8i`` to ``8i + 7``, as FLD's
streams carry packets): read as big-endian numbers, and numbers laid out as bytes."""

from typing import Any

from amaranth import Cat, Const, Module, Signal


__all__ = ["field_of", "lanes_of", "head_with_word"]


def field_of(value: Any, first: int, n: int) -> Any:
    """Bytes ``first`` .. ``first + n - 1`` of ``value`` as a big-endian field: the first byte
    most significant."""
    return Cat(*(value[8 * (first + n - 1 - k):8 * (first + n - k)] for k in range(n)))


def lanes_of(number: int, n: int) -> Any:
    """``number`` as ``n`` bytes in lane order, big-endian (the first byte its most
    significant)."""
    return Const(int.from_bytes(number.to_bytes(n, "big"), "little"), 8 * n)


def head_with_word(m: Module, head: Any, index: Any, word: Any) -> Any:
    """The first ``len(head) // 8`` bytes of a packet (``head``, kept so far) with word number
    ``index`` of it, ``word``, in its place: a signal, for a decision in the cycle the word
    comes."""
    width = len(word)
    out = Signal(len(head))
    m.d.comb += out.eq(head)
    for k in range(-(-len(head) // width)):
        with m.If(index == k):
            lo, hi = k * width, min((k + 1) * width, len(head))
            m.d.comb += out[lo:hi].eq(word[:hi - lo])
    return out
