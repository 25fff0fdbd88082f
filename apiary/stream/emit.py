"""A message held whole in a wide value, sent a payload word per cycle; values as bytes in
network order. Shared by the tiles that build their replies in place (the kernel's control
service, the DHCP client)."""

from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal


__all__ = ["network_bytes", "send_words"]


def network_bytes(value: Any, nbytes: int) -> list[Any]:
    """The bytes of ``value`` (``nbytes`` wide, zero-extended), most significant first
    (network order), for ``Cat`` into a message whose byte ``k`` is in bits ``8k..8k+7``."""
    value = Cat(value, Const(0, max(0, 8 * nbytes - len(value))))
    return [value[8 * k:8 * k + 8] for k in reversed(range(nbytes))]


def send_words(m: Module, o: Any, start: Any, message: Any, *, final: Any,
               final_nbytes: Any) -> None:
    """Send ``message`` (its byte ``k`` in bits ``8k..8k+7``, zero-padded to whole words of
    ``o``, a :func:`~apiary.stream.layout.payload_signature` stream) from its first word on:
    ``start`` (a cycle's pulse) raises ``o.valid`` in the next cycle, and it stays high, one
    word per cycle while ``o`` is ready, until word ``final`` (its ``last`` set, its
    ``nbytes`` ``final_nbytes``, every other word's the full width) is taken. ``o.valid`` does
    not wait for ``o.ready``; ``message`` must stay put while it is sent."""
    width = len(o.payload.data)
    words = -(-len(message) // width)
    padded = Cat(message, Const(0, words * width - len(message)))
    index = Signal(range(words))
    sending, last = Signal(), Signal()
    m.d.comb += last.eq(index == final)
    with m.Switch(index):
        for k in range(words):
            with m.Case(k):
                m.d.comb += o.payload.data.eq(padded[k * width:(k + 1) * width])
    m.d.comb += [o.valid.eq(sending), o.payload.last.eq(last),
                 o.payload.nbytes.eq(Mux(last, final_nbytes, width // 8))]
    with m.If(o.valid & o.ready):
        m.d.sync += index.eq(index + 1)
        with m.If(last):
            m.d.sync += sending.eq(0)
    with m.If(start):
        m.d.sync += [sending.eq(1), index.eq(0)]
