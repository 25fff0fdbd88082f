"""Strip bytes from the front of packets, or prepend header bytes, on payload streams.

Both blocks work on :func:`~apiary.noc.flit.payload_layout` streams at any supported width and
shift the rest of the packet so that its first byte lands in lane 0 again. They are what the
protocol RX tiles use to remove a header (Ethernet, VLAN, IPv4, UDP) and the TX tiles to put one
in front, like litex's ``Depacketizer`` and ``Packetizer``, but with a byte count that may change
from packet to packet and may exceed one word.

Both share one datapath, :class:`_Joiner`: a *carry* register holding ``r`` bytes (``0 <= r <
width/8``) that were left over from the previous word. Each output word is the carry followed by
the first ``width/8 - r`` bytes of the current input word, and the current word's remaining ``r``
bytes become the new carry. When a packet's last input word does not fit in the remaining lanes,
one more *flush* word is sent from the carry alone: that is the one extra word of latency.

Packets on a payload stream: every word but the last is full (``nbytes == width/8``); a packet
of zero bytes is a single word with ``nbytes == 0`` and ``last``. Both blocks zero the byte lanes
past ``nbytes`` of every word they send.
"""

from collections.abc import Iterable, Sequence
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux, Value
from amaranth.hdl import ValueLike, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layout import check_width, payload_signature
from .lanes import lane_mask, rotate_lanes_up, shift_lanes_down, shift_lanes_up, wire


__all__ = ["StreamStrip", "StreamInsert"]


def _check_max_bytes(max_bytes: object, what: str) -> int:
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ValueError(f"{what} needs max_bytes to be a positive number of bytes, "
                         f"not {max_bytes!r}")
    return max_bytes


class _Joiner:
    """The shared realignment datapath, built into ``m`` by :class:`StreamStrip` and
    :class:`StreamInsert`.

    ``carry`` is a register of ``nb`` bytes whose low ``r`` lanes hold the bytes left over from
    the previous word (higher lanes are zero). For the word ``i`` on the input and a carry of
    ``r`` bytes (``r`` is an expression, so a block can start a packet with a value that is not
    registered yet):

    * :attr:`joined` is the carry followed by the first ``nb - r`` bytes of ``i``;
    * :attr:`rest` is the ``r`` bytes of ``i`` that did not fit, in lanes ``0 .. r-1``;
    * :attr:`total` is how many bytes ``joined`` and ``rest`` hold together, ``r + i.nbytes``;
    * :attr:`overflow` is high if ``total > nb``: on a last word, a flush word must follow.
    """

    def __init__(self, m: Module, nb: int, carry: Value, carry_bytes: ValueLike, word: Value,
                 word_bytes: ValueLike, amounts: Sequence[int] | None = None) -> None:
        self.nb = nb
        self.joined = Signal(8 * nb, name="joined")
        self.rest = Signal(8 * nb, name="rest")
        self.total = Signal(range(2 * nb + 1), name="total")
        self.overflow = Signal(name="overflow")
        carry_bytes = wire(m, carry_bytes, "carry_bytes")
        if amounts is not None and len(set(amounts)) <= 2:
            # One or two carries: a choice of fixed shifts (a rotation's lane masks cost more).
            up, down = Const(0, 8 * nb), Const(0, 8 * nb)
            for a in sorted(set(amounts)):
                hit = wire(m, carry_bytes == a, f"carry_is_{a}").replicate(8 * nb)
                up = up | (hit & shift_lanes_up(m, word, a, nb))
                down = down | (hit & shift_lanes_down(m, word, nb - a, nb))
        else:
            # Any carry, or one of many (IPv4's header lengths): one rotation, whose lanes from
            # `r` up are the word shifted up and those below `r` the word shifted down.
            rotated = rotate_lanes_up(m, word, carry_bytes, nb, amounts)
            below = lane_mask(m, nb, carry_bytes)
            up, down = rotated & ~below, rotated & below
        m.d.comb += [
            self.joined.eq(carry | up),
            self.rest.eq(down),
            self.total.eq(carry_bytes + word_bytes),
            self.overflow.eq(self.total > nb),
        ]


class _Realign(wiring.Component):
    """Ports and output logic common to :class:`StreamStrip` and :class:`StreamInsert`."""

    def __init__(self, width: int, max_bytes: int, fixed: bool, members: dict[str, Any],
                 counts: Iterable[int] | None = None) -> None:
        self._width = check_width(width)
        self._max_bytes = _check_max_bytes(max_bytes, type(self).__name__)
        self._fixed = bool(fixed)
        if counts is not None:
            counts = sorted(set(counts))
            if not counts or not all(isinstance(c, int) and not isinstance(c, bool)
                                     and 0 <= c <= max_bytes for c in counts):
                raise ValueError(f"{type(self).__name__} needs counts to be byte counts from 0 "
                                 f"to max_bytes ({max_bytes}), not {counts!r}")
        self._counts = counts
        super().__init__({
            "i": In(payload_signature(width)),
            "o": Out(payload_signature(width)),
            **members,
        })

    def _output(self, m: Module, data_: ValueLike, nbytes: ValueLike, last: ValueLike) -> None:
        """Drive ``o.payload``, zeroing the lanes past ``nbytes``."""
        nb = self._width // 8
        m.d.comb += [
            self.o.payload.data.eq(data_ & lane_mask(m, nb, nbytes)),
            self.o.payload.nbytes.eq(nbytes),
            self.o.payload.last.eq(last),
        ]


class StreamStrip(_Realign):
    """Remove the first ``N`` bytes of every packet and realign the rest to lane 0.

    ``N`` is taken from ``n`` together with each packet's first word (``i.ready`` stays low on
    the first word until ``n`` is valid), or is always ``max_bytes`` with ``fixed=True``. Any
    ``N`` that ``n`` can carry is handled, including several words' worth; words that hold only
    stripped bytes are discarded as they arrive. A packet of exactly ``N`` bytes gives an empty
    packet (one word, ``nbytes == 0``, ``last``).

    Latency: an output word is sent, combinationally, in the cycle the input word holding its
    last byte is on ``i`` (``o`` is not registered; ``i.ready`` follows ``o.ready``), except a
    packet's final word when the last input word does not fit in the lanes the previous output
    word left: it follows one cycle later (the flush word, one extra word of latency).

    Throughput: one input word per cycle. The input stalls one cycle only when a packet that
    ends with a flush word is followed by one whose first output word comes from its first input
    word (``N == 0``, or a packet of one word); with ``N >= width/8`` that never happens.

    Drops: a packet shorter than ``N`` bytes is discarded whole (nothing of it has been sent,
    since no output word exists before byte ``N`` arrives). ``dropped`` pulses in the cycle its
    last word is taken and ``too_short`` counts it; the next packet is not affected.

    With ``head=k`` each packet's first output word is its *head word*: bytes ``N .. N+k-1``
    (fewer if the packet ends sooner) in the word's top ``k`` lanes (byte ``N+i`` in lane
    ``width/8 - k + i``), ``nbytes`` saying how many, the lanes below and past them zero, and
    ``last`` if the packet ends there; the bytes from ``N+k`` follow, realigned to lane 0 as
    above. It is one realignment (by ``N+k``) where a strip and a
    :class:`~apiary.noc.framing.MessageSender` that puts the first ``k`` bytes in its header
    flit would be two: the sender's ``pre_split`` takes this stream as it is. The head word
    leaves in the cycle the input word holding byte ``N+k-1`` (or the packet's last) is taken.

    Parameters
    ----------
    width : int
        Word width in bits (64, 128, 256 or 512).
    max_bytes : int
        Largest ``N``; sets the width of ``n``.
    fixed : bool
        Strip exactly ``max_bytes`` bytes from every packet; there is no ``n`` port. The
        realignment is then wiring, not shifters.
    counts : iterable of int or None
        The only values ``n`` takes (e.g. 14 and 18 for Ethernet): the realignment chooses
        among as many fixed shifts instead of shifting by any amount, which is much smaller for
        a few counts. Any other ``n`` gives wrong data.

    Members
    -------
    i : In(payload_signature(width))
        Packets.
    n : In(stream.Signature(range(max_bytes + 1)))
        Bytes to strip, one transfer per packet, taken with its first word (not with ``fixed``).
    o : Out(payload_signature(width))
        The packets without their first ``N`` bytes.
    dropped : Out(1)
        Pulses once per packet shorter than ``N``.
    too_short : Out(32)
        Packets shorter than ``N``, dropped.

    head : int
        Send each packet's next ``head`` bytes first, in a head word of their own (above);
        ``0 < head < width/8``.

    Raises
    ------
    ValueError
        If the width is not supported, ``max_bytes`` is not a positive integer or ``head`` does
        not fit in a word.
    """

    def __init__(self, width: int, max_bytes: int, *, fixed: bool = False,
                 counts: Iterable[int] | None = None, head: int = 0) -> None:
        members = {"dropped": Out(1), "too_short": Out(32)}
        if not fixed:
            members["n"] = In(stream.Signature(range(_check_max_bytes(max_bytes, "StreamStrip")
                                                     + 1)))
        if not (isinstance(head, int) and 0 <= head < check_width(width) // 8):
            raise ValueError(f"StreamStrip's head is a byte count below a word's "
                             f"{width // 8}, not {head!r}")
        self._head = head
        super().__init__(width, max_bytes, fixed, members, counts)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        log_nb = nb.bit_length() - 1
        i, o = self.i, self.o

        # Per-packet parameters: straight from `n` on the first word, registered after it. With
        # a head the realignment is by N + k, the head being the k bytes before that cut.
        k = self._head
        if self._fixed:
            n_value, n_valid = Const(self._max_bytes + k), Const(1)
        else:
            n_value, n_valid = self.n.payload + k, self.n.valid
        n_skip = ((n_value - 1) >> log_nb)[:max(1, len(n_value) - log_nb)]  # words before word h
        n_r = (nb - n_value[:log_nb])[:log_nb]      # bytes of word h kept: (-N) mod nb
        busy = Signal()                             # past the packet's first word
        skip = Signal.like(n_skip, name="skip")
        r = Signal(range(nb), name="r")
        joining = Signal()                          # the carry holds word h or later
        carry = Signal(8 * nb)
        flushing = Signal()
        flush_bytes = Signal(range(nb + 1))

        cur_skip = Mux(busy, skip, n_skip)
        # With a fixed N the realignment is a constant: the shifters become wiring.
        cur_r = n_r if self._fixed else Mux(busy, r, n_r)
        cur_joining = Mux(busy, joining, n_value == 0) if not k else busy & joining
        params = busy | n_valid

        # A packet with N = 0 starts joining with an empty carry, not the last packet's.
        amounts = None if self._counts is None else [(-(c + k)) % nb for c in self._counts]
        j = _Joiner(m, nb, Mux(busy, carry, 0), cur_r, i.payload.data, i.payload.nbytes,
                    amounts)
        discard = ~cur_joining & (cur_skip != 0)    # a word of stripped bytes only
        first = ~cur_joining & (cur_skip == 0)      # word h: its last r bytes are kept
        kept = Signal(range(-nb, nb + 1))           # bytes of word h kept, if it is the last
        m.d.comb += kept.eq(i.payload.nbytes + cur_r - nb)
        if k:
            # The head is the top k lanes of word h joined to the carry of word h-1 (the
            # rotation puts byte N+k-1-i in lane nb-1-i of both); a packet that ends in word
            # h-1 has its head in that word's rest alone.
            before = discard & (cur_skip == 1)      # word h-1
            head_bytes = Signal(range(-2 * nb, nb + 1))
            m.d.comb += head_bytes.eq(Mux(i.payload.last & (kept < 0) | before,
                                          kept + k - Mux(before, nb, 0), k))
            ends_in_head = i.payload.last & (before | (kept <= 0))
            short = i.payload.last & ~cur_joining & (discard & ~before | (head_bytes < 0))
            emits = cur_joining | ((first | (before & i.payload.last)) & ~short)
        else:
            short = i.payload.last & (discard | (first & (kept < 0)))
            emits = cur_joining | (first & i.payload.last & ~short)

        with m.If(flushing):
            self._output(m, carry, flush_bytes, 1)
            m.d.comb += [
                o.valid.eq(1),
                i.ready.eq(o.ready & params & ~emits),
            ]
        with m.Else():
            with m.If(cur_joining):
                self._output(m, j.joined, Mux(i.payload.last & ~j.overflow, j.total, nb),
                             i.payload.last & ~j.overflow)
            with m.Else():
                if k:
                    top = Mux(first, j.joined, j.rest)[8 * (nb - k):]
                    m.d.comb += [
                        o.payload.data.eq(Cat(Const(0, 8 * (nb - k)),
                                              top & lane_mask(m, k, head_bytes))),
                        o.payload.nbytes.eq(head_bytes),
                        o.payload.last.eq(ends_in_head),
                    ]
                else:
                    self._output(m, j.rest, kept, 1)
            m.d.comb += [
                o.valid.eq(i.valid & params & emits),
                i.ready.eq(params & (o.ready | ~emits)),
            ]
        take = i.valid & i.ready
        if not self._fixed:
            m.d.comb += self.n.ready.eq(take & ~busy)

        with m.If(o.valid & o.ready & flushing):
            m.d.sync += flushing.eq(0)
        with m.If(take):
            m.d.sync += [
                busy.eq(~i.payload.last),
                skip.eq(cur_skip - 1),
                r.eq(cur_r),
                joining.eq(~discard),
            ]
            if k:       # word h-1's rest holds the first head bytes: every word's is kept
                m.d.sync += carry.eq(j.rest)
            else:
                with m.If(~discard):
                    m.d.sync += carry.eq(j.rest)
            with m.If(cur_joining & i.payload.last & j.overflow):
                m.d.sync += [flushing.eq(1), flush_bytes.eq(j.total - nb)]
            if k:
                # Word h ends the packet past its head: the head goes now, the rest next.
                with m.If(first & i.payload.last & (kept > 0)):
                    m.d.sync += [flushing.eq(1), flush_bytes.eq(kept)]
            with m.If(short):
                # The only place data is dropped: a packet that ended within its first N bytes.
                m.d.comb += self.dropped.eq(1)
        m.d.sync += self.too_short.eq(self.too_short + self.dropped)
        return m


class StreamInsert(_Realign):
    """Prepend ``N`` header bytes to every packet and realign the packet behind them.

    For each packet, ``hdr`` carries the header bytes (``data``, first byte in lane 0, i.e.
    bits 7..0; see :func:`~apiary.stream.header.byte_reverse`) and their count ``nbytes`` (``N``,
    at most
    ``max_bytes``; larger counts are taken as ``max_bytes``). With ``fixed=True`` there is no
    ``nbytes`` field and every header is ``max_bytes`` long. ``hdr`` is held until the packet's
    first word is taken.

    Latency: the first output word is on ``o`` in the cycle ``hdr`` is valid if the header fills
    at least one word, otherwise in the cycle the packet's first word arrives. Every later word
    is sent combinationally in the cycle the input word holding its last byte is on ``i``
    (``o`` is not registered), except a packet's final word when the last input word does not
    fit in the lanes the header and previous words left: it follows one cycle later (the flush
    word, one extra word of latency). A header that ends on a word boundary waits for the
    packet's first word, to know whether the header word is the packet's last.

    Throughput: one output word per cycle, without idle cycles between back-to-back packets, as
    long as ``hdr`` and ``i`` keep up: each packet takes ``max(1, ceil((N + L) / (width/8)))``
    cycles. ``i`` is stalled while header and flush words are sent.

    Nothing is dropped.

    Parameters
    ----------
    width : int
        Word width in bits (64, 128, 256 or 512).
    max_bytes : int
        Largest header, in bytes.
    fixed : bool
        Every header is ``max_bytes`` long; ``hdr`` has no ``nbytes`` field. The realignment is
        then wiring, not shifters.
    counts : iterable of int or None
        The only header lengths ``hdr.nbytes`` takes (e.g. 14 and 18 for Ethernet): the
        realignment chooses among as many fixed shifts instead of shifting by any amount. Any
        other length gives wrong data.

    Members
    -------
    i : In(payload_signature(width))
        Packets.
    hdr : In(StreamInsert.header_signature(max_bytes, fixed=fixed))
        One header per packet.
    o : Out(payload_signature(width))
        Header bytes followed by the packet's bytes.

    Raises
    ------
    ValueError
        If the width is not supported or ``max_bytes`` is not a positive integer.
    """

    @staticmethod
    def header_signature(max_bytes: int, *, fixed: bool = False) -> stream.Signature:
        """``stream.Signature`` of ``{data: 8 * max_bytes}`` plus ``nbytes`` unless ``fixed``."""
        fields = {"data": unsigned(8 * _check_max_bytes(max_bytes, "StreamInsert"))}
        if not fixed:
            fields["nbytes"] = range(max_bytes + 1)
        return stream.Signature(data.StructLayout(fields))

    def __init__(self, width: int, max_bytes: int, *, fixed: bool = False,
                 counts: Iterable[int] | None = None) -> None:
        super().__init__(width, max_bytes, fixed,
                         {"hdr": In(self.header_signature(max_bytes, fixed=fixed))}, counts)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        log_nb = nb.bit_length() - 1
        max_words = -(-self._max_bytes // nb)
        i, o, hdr = self.i, self.o, self.hdr

        if self._fixed:
            count = Const(self._max_bytes)
        else:
            count = Signal(range(self._max_bytes + 1), name="count")
            m.d.comb += count.eq(Mux(hdr.payload.nbytes > self._max_bytes, self._max_bytes,
                                     hdr.payload.nbytes))
        padded = Cat(hdr.payload.data, Const(0, 8 * (max_words * nb - self._max_bytes)))
        full_words = count >> log_nb                # header words sent on their own
        tail = count[:log_nb]                       # header bytes in the word shared with data

        index = Signal(range(max_words + 1))        # header word on `o`
        joining = Signal()                          # the header has been taken
        r = Signal(range(nb), name="r")
        carry = Signal(8 * nb)
        flushing = Signal()
        flush_bytes = Signal(range(nb + 1))

        head_carry = (padded.word_select(full_words, 8 * nb)
                      & lane_mask(m, nb, tail))
        # With a fixed header length the realignment is a constant: the shifters become wiring.
        cur_r = tail if self._fixed else Mux(joining, r, tail)
        amounts = None if self._counts is None else [c % nb for c in self._counts]
        j = _Joiner(m, nb, Mux(joining, carry, head_carry), cur_r,
                    i.payload.data, i.payload.nbytes, amounts)
        heading = ~joining & (index < full_words)
        # A header ending on a word boundary, followed by an empty packet, ends the packet.
        empty = i.valid & i.payload.last & (i.payload.nbytes == 0)
        closing = heading & (tail == 0) & (index == full_words - 1)

        with m.If(flushing):
            self._output(m, carry, flush_bytes, 1)
            m.d.comb += o.valid.eq(1)
        with m.Elif(heading):
            self._output(m, padded.word_select(index, 8 * nb), nb, closing & empty)
            m.d.comb += [
                o.valid.eq(hdr.valid & (~closing | i.valid)),
                i.ready.eq(closing & empty & o.ready),
                hdr.ready.eq(closing & empty & o.ready),
            ]
        with m.Else():
            self._output(m, j.joined, Mux(i.payload.last & ~j.overflow, j.total, nb),
                         i.payload.last & ~j.overflow)
            m.d.comb += [
                o.valid.eq(i.valid & (joining | hdr.valid)),
                i.ready.eq(o.ready & (joining | hdr.valid)),
                hdr.ready.eq(~joining & i.valid & o.ready),
            ]

        sent = o.valid & o.ready
        take = i.valid & i.ready
        with m.If(sent):
            with m.If(flushing):
                m.d.sync += flushing.eq(0)
            with m.Elif(heading):
                m.d.sync += index.eq(Mux(closing & empty, 0, index + 1))
        with m.If(take & ~heading):
            m.d.sync += [
                carry.eq(j.rest),
                r.eq(cur_r),
                joining.eq(~i.payload.last),
            ]
            with m.If(i.payload.last):
                m.d.sync += index.eq(0)
                with m.If(j.overflow):
                    m.d.sync += [flushing.eq(1), flush_bytes.eq(j.total - nb)]
        return m
