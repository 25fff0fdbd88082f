"""The Internet checksum (RFC 1071): in Python, as combinational helpers, and as a pipelined tap
on a payload stream. The one place the one's-complement sum is written.

* Python: :func:`ones_complement_sum`, :func:`internet_checksum` (models and tests).
* Hardware, combinational: :func:`ones_sum` (of a few 16-bit values), :func:`word_sum` (of the
  first *n* big-endian 16-bit words of a header in lane order), :func:`fold16`.
* Hardware, streaming: :class:`InternetChecksum` (a whole packet, one word per cycle).

One block serves both directions (liteeth's ``LiteEthIPV4Checksum`` shape): a transmitter sums
the region with its checksum field zero and writes ``~sum``; a receiver sums the region with the
checksum field as received and accepts it if the sum is ``0xFFFF`` (:attr:`ok`).
"""

from collections.abc import Callable
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux, Value
from amaranth.hdl import ValueLike
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layout import check_width, payload_layout
from .lanes import lane_mask


__all__ = ["ones_complement_sum", "internet_checksum", "fold16", "ones_sum", "word_sum",
           "InternetChecksum"]


def _fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def ones_complement_sum(data: bytes, initial: int = 0) -> int:
    """The 16-bit one's-complement sum of ``data`` (big-endian 16-bit words, an odd last byte
    padded with a zero byte) plus ``initial``, folded with end-around carry. It is ``0`` only if
    every word and ``initial`` are zero."""
    data = bytes(data)
    if len(data) % 2:
        data += b"\0"
    return _fold(initial + sum(int.from_bytes(data[k:k + 2], "big")
                               for k in range(0, len(data), 2)))


def internet_checksum(data: bytes, initial: int = 0) -> int:
    """The value for a checksum field: ``~ones_complement_sum(data, initial) & 0xFFFF``.

    ``initial`` is a partial sum to include, such as a UDP pseudo-header's
    (``ones_complement_sum(pseudo_header)``). UDP sends a computed ``0`` as ``0xFFFF``; that rule
    belongs to the UDP tile, not here.
    """
    return ~ones_complement_sum(data, initial) & 0xFFFF


def _swap16(value: Value) -> Value:
    return Cat(value[8:16], value[0:8])


#: ``stage(value, level)``: ``value`` registered as the ``level``-th register on its path (see
#: :meth:`apiary.stream.hold.HeldStages.stage`).
Stage = Callable[[Value, int], Value]

#: Adder levels between two registers of a staged sum: two 17-to-20-bit carry chains and their
#: routing fit 8 ns (125 MHz) on an ECP5.
ADDERS_PER_STAGE = 2


def _adder_tree(values: list[Value], stage: Stage | None = None,
                m: Module | None = None) -> Value:
    """The sum of ``values`` as a balanced tree of two-input adders; with ``stage``, registered
    after every :data:`ADDERS_PER_STAGE` levels of adders that more follow.

    With ``m``, each adder's sum is a signal of its own, kept (``keep``): Yosys then maps each
    adder to a carry chain instead of merging the tree into one multi-operand sum of LUT full
    adders (32 words of 16 bits: 522 LUTs and 156 CARRY4s against 827 LUTs, synth_xilinx)."""
    depth = 0
    while len(values) > 1:
        sums = [a + b for a, b in zip(values[0::2], values[1::2])]
        if m is not None:
            kept = [Signal(len(v), name=f"sum{depth}_{j}", attrs={"keep": 1})
                    for j, v in enumerate(sums)]
            m.d.comb += [k.eq(v) for k, v in zip(kept, sums)]
            sums = kept
        values = sums + values[len(values) & ~1:]
        depth += 1
        if stage is not None and len(values) > 1 and depth % ADDERS_PER_STAGE == 0:
            values = [stage(v, depth // ADDERS_PER_STAGE) for v in values]
    return values[0]


def fold16(value: ValueLike) -> Value:
    """Fold a sum of 16-bit words (below ``2**32``) to 16 bits with end-around carries."""
    value = Value.cast(value)
    for _ in range(2):
        value = value[:16] + value[16:]
    return value[:16]


def ones_sum(*values: ValueLike, stage: Stage | None = None) -> Value:
    """The one's-complement sum of 16-bit values (at most 65,536 of them), as a 16-bit value;
    ``stage`` as for :func:`word_sum`."""
    return fold16(_adder_tree([Value.cast(v) for v in values], stage))


def _be_words(value: Value) -> list[Value]:
    """The big-endian 16-bit words of ``value`` (lane order: byte ``k`` in bits ``8k..8k+7``)."""
    return [_swap16(value[16 * k:16 * k + 16]) for k in range(len(value) // 16)]


def word_sum(value: ValueLike, words: int | ValueLike, *, stage: Stage | None = None,
             m: Module | None = None) -> Value:
    """One's-complement sum of the first ``words`` big-endian 16-bit words of ``value`` (lane
    order), at most ``len(value) // 16`` of them; ``words`` is an int or an Amaranth value (an
    IPv4 header's ``ihl * 2``, say). A header whose checksum field is filled sums to ``0xFFFF``.

    With ``stage`` (a :class:`~apiary.stream.hold.HeldStages`' ``stage``), the adder tree is
    cut by registers at levels 1, 2, ... every :data:`ADDERS_PER_STAGE` adders; the last adder
    and the fold are left to the caller's next stage. With ``m``, each adder is a carry chain
    of its own (see :func:`_adder_tree`): fewer LUTs on Xilinx parts."""
    value = Value.cast(value)
    terms = []
    for k, word in enumerate(_be_words(value)):
        if isinstance(words, int):
            if k < words:
                terms.append(word)
        else:
            terms.append(Mux(words > k, word, 0))
    return fold16(_adder_tree(terms, stage, m) if terms else Const(0, 16))


class InternetChecksum(wiring.Component):
    """Sum a payload stream's bytes, from a start offset to the end of each packet, into the
    16-bit one's-complement sum of RFC 1071.

    ``i`` is a tap: it never stalls (``always_ready``), so drive ``i.valid`` with the transfers of
    the stream being checked (``valid & ready``) and ``i.payload`` with its payload. ``offset``
    and ``initial`` are sampled with each packet's first word: bytes before ``offset`` (counted
    from the packet's first byte) are skipped, and ``initial`` (e.g. a UDP pseudo-header sum) is
    added. Bytes pair into big-endian 16-bit words by their position from ``offset``, not by lane,
    so an odd offset works; an odd byte at the end is padded with zero. Lanes past ``nbytes`` are
    ignored.

    Latency: ``o`` is valid for one cycle, :attr:`LATENCY` (2) cycles after the cycle in which the
    packet's last word is on ``i``: one register stage after the per-word adder tree, one for the
    accumulator and fold. A receiver that flags a packet's last beat delays the data by two words.

    Throughput: one word per cycle; back-to-back packets without idle cycles.

    Nothing is dropped. Sums are exact for packets up to 128 KiB.

    Parameters
    ----------
    width : int
        Word width in bits (64, 128, 256 or 512).
    max_offset : int
        Largest ``offset``, in bytes.
    clean_tail : bool
        The input's lanes past ``nbytes`` are zero (a :class:`~apiary.noc.framing.MessageReceiver`'s
        are): they are summed as they are, not masked (at 512 bits, about 370 LUTs less).

    Members
    -------
    i : In(stream.Signature(payload_layout(width), always_ready=True))
        The words being summed.
    offset : In(range(max_offset + 1))
        Bytes to skip at the start of the packet; sampled with its first word.
    initial : In(16)
        Value added to the sum; sampled with the packet's first word.
    o : Out(stream.Signature(InternetChecksum.result_layout, always_ready=True))
        One transfer per packet: ``sum``, and ``ok`` if ``sum == 0xFFFF``.

    Raises
    ------
    ValueError
        If the width is not supported or ``max_offset`` is not a non-negative integer.
    """

    LATENCY = 2
    result_layout = data.StructLayout({"sum": 16, "ok": 1})

    def __init__(self, width: int, *, max_offset: int = 64, clean_tail: bool = False) -> None:
        self._width = check_width(width)
        if not isinstance(max_offset, int) or isinstance(max_offset, bool) or max_offset < 0:
            raise ValueError(f"InternetChecksum needs max_offset to be a non-negative number of "
                             f"bytes, not {max_offset!r}")
        self._max_offset = max_offset
        self._clean_tail = bool(clean_tail)
        super().__init__({
            "i": In(stream.Signature(payload_layout(width), always_ready=True)),
            "offset": In(range(max_offset + 1)),
            "initial": In(16),
            "o": Out(stream.Signature(self.result_layout, always_ready=True)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        i = self.i

        # Stage 0: which lanes count, and the sum of this word's 16-bit words (lane 2k high).
        busy = Signal()                                   # past the packet's first word
        offset = Signal.like(self.offset, name="offset_reg")
        position = Signal(range(self._max_offset + nb + 1))  # stream byte of lane 0, saturating
        cur_offset = Mux(busy, offset, self.offset)
        cur_position = Mux(busy, position, 0)
        skip = Signal(range(nb + 1))                      # lanes before the offset
        before = cur_offset - cur_position
        m.d.comb += skip.eq(Mux(before <= 0, 0, Mux(before >= nb, nb, before)))
        masked = Signal(8 * nb)
        counted = ~lane_mask(m, nb, skip)
        if not self._clean_tail:
            counted &= lane_mask(m, nb, i.payload.nbytes)
        m.d.comb += masked.eq(i.payload.data & counted)
        word_total = _adder_tree(_be_words(masked), m=m)

        with m.If(i.valid):
            m.d.sync += busy.eq(~i.payload.last)
            with m.If(~busy):
                m.d.sync += offset.eq(self.offset)
            with m.If(~i.payload.last & (cur_position <= self._max_offset)):
                m.d.sync += position.eq(cur_position + nb)

        # Stage 1: registered word sum; the accumulator starts from `initial` on a first word.
        s_valid, s_first, s_last = Signal(), Signal(), Signal()
        s_sum = Signal(len(word_total))
        s_odd = Signal()                                  # offset odd: pairs straddle lanes
        s_initial = Signal(16)
        m.d.sync += [
            s_valid.eq(i.valid),
            s_first.eq(~busy),
            s_last.eq(i.payload.last),
            s_sum.eq(word_total),
        ]
        with m.If(i.valid & ~busy):
            m.d.sync += [s_odd.eq(self.offset[0] if self._max_offset else 0),
                         s_initial.eq(self.initial)]

        # With an odd offset the sum is taken with bytes swapped (RFC 1071 byte-order
        # independence): swap `initial` in, swap the result back.
        acc = Signal(32)
        start = Mux(s_odd, _swap16(s_initial), s_initial)
        total = Signal(33)
        m.d.comb += total.eq(Mux(s_first, start, acc) + s_sum)
        folded = fold16(total)      # total < 2**32 for up to 128 KiB: two folds suffice
        with m.If(s_valid):
            m.d.sync += acc.eq(total)
        m.d.sync += self.o.valid.eq(s_valid & s_last)
        with m.If(s_valid & s_last):
            result = Mux(s_odd, _swap16(folded), folded)
            m.d.sync += [
                self.o.payload.sum.eq(result),
                self.o.payload.ok.eq(result == 0xFFFF),
            ]
        return m
