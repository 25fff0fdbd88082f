"""A store-and-forward packet FIFO on payload streams, with an optional per-packet verdict.

Whole packets are stored in a ring buffer (one ``Memory`` word per payload word) and sent on
only once complete and judged: a tile that learns at a packet's end whether to keep it (a
checksum, a MAC's FCS) or that must know a packet's length before its first byte (a NoC
header) puts one of these in front of its cut-through logic.
"""

from typing import Any

from amaranth import Module, Signal, Cat, Mux
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort
from amaranth.lib.wiring import In, Out

from .counters import count
from .layout import check_width, payload_signature, payload_words


__all__ = ["PacketBuffer", "PacketWriter", "PacketQueue", "PacketReader"]


def _check_int(value: object, name: str, low: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"PacketBuffer: {name} must be {what}, not {value!r}")
    return value


class PacketBuffer(wiring.Component):
    """Store each packet whole, then send it on with a descriptor if its verdict says so.

    **In.** Packets arrive on ``i`` as payload words (byte ``k`` in lane ``k``, every word but
    the last full, the last with ``nbytes`` 1 to ``width // 8``; an empty packet is one word with
    ``nbytes == 0``). A last word with ``nbytes == 0`` after full words is accepted too: it ends
    the packet without adding bytes. Lanes past ``nbytes`` may hold anything (they are stored as
    zeros).

    **Stored or dropped.** In the cycle a packet's last word is taken on ``i``, exactly one of
    ``accepted`` (the packet is stored) and ``i_dropped`` (the buffer dropped it) is high; both
    are combinational from ``i``. The buffer drops, counting each packet once in ``overflow``:

    * packets longer than ``max_bytes`` or shorter than ``min_bytes``;
    * packets with a malformed word: a word before the last that is not full, or ``nbytes``
      above ``width // 8`` (but see ``aborted``);
    * with ``always_ready``, packets that find no room: no free buffer word for one of their
      words, or, at their last word, ``max_queued`` packets already waiting (see
      ``max_queued``); with ``count_no_room`` these count in ``no_room`` instead.

    A packet whose last word has ``nbytes == width // 8 + 1`` (the abort of
    :func:`~apiary.stream.layout.abort_nbytes`: its sender, a MAC that saw a bad FCS, says it is
    garbage) is dropped and counted in ``aborted`` instead, whatever else was wrong with it.
    A dropped packet's words are taken and discarded up to its ``last`` and the space it used is
    given back at once. Without ``always_ready`` nothing is dropped for lack of room:
    ``i.ready`` is low while the buffer is full or ``max_queued`` packets wait (it depends on
    the buffer's state only, never on ``i``), and high while a packet is being discarded. A
    stored packet takes ``ceil(bytes / (width // 8))`` buffer words, an empty one 1.

    **Verdict** (with ``verdict=True``). ``verdict`` carries exactly one transfer per *stored*
    packet (one per ``accepted`` pulse), in packet order; none for packets the buffer dropped.
    ``ok = 0`` discards the packet (counted in ``rejected``); ``ok = 1`` sends it on with
    ``info``. A packet's verdict may be presented from the cycle of its ``accepted`` pulse on
    (``verdict.ready`` is then high: it rises combinationally with ``accepted`` when no older
    packet waits for its verdict), never earlier. Up to ``max_queued`` stored packets may wait
    for their verdicts while the next packets keep arriving on ``i``; the verdict logic must not
    wait for later packets' words, nor for ``o``. With ``late_verdicts``, a verdict may be
    presented only from the cycle after its ``accepted`` pulse: ``verdict.ready`` then comes
    from registers, not from ``i`` (for verdicts that take cycles to compute anyway). A verdict
    computed for *every* packet (say a
    checksum result some cycles after each last word) is matched to it by queueing ``accepted``
    at each last word and presenting only the results whose flag is set. With
    ``verdict=False`` there is no ``verdict`` member and every stored packet is sent on.

    **Out.** For each packet with an ``ok`` verdict, one transfer on ``o_desc`` (its byte count
    and ``info``), then, strictly after that transfer (with ``first_word_with_desc``: its first
    word at the earliest in the same cycle), its words on ``o``: every word full but
    the last, which has ``last`` and ``nbytes`` 1 to ``width // 8``; an empty packet gives one
    word with ``nbytes == 0``. Lanes past ``nbytes`` are zero. The next packet's descriptor may
    be offered while the previous packet's words are still on ``o``. Rejected packets are
    skipped, one cycle each.

    Latency, when no packet is queued or being sent before it: a packet's descriptor is valid
    on ``o_desc`` 2 cycles after the cycle its verdict is taken (with ``verdict=False``, or a
    verdict given with the last word: the cycle its last word is taken), and its first word is
    valid on ``o`` 3 cycles after that cycle if ``o_desc`` is taken at once (with
    ``first_word_with_desc``, 2: with its descriptor, if nothing is being read). Throughput: one
    word per cycle in and out; with ``o_desc`` and ``o`` always ready, stored and judged
    packets leave back to back without idle cycles on ``o``, one-word and empty packets
    included (each rejected packet between them costs one cycle). ``o`` comes from a synchronous
    ``Memory`` read port (the port's data register is the output register); ``o_desc`` is
    registered.

    Inside, three components share the ring: :class:`PacketWriter` (drops, and writes what it
    keeps), :class:`PacketQueue` (byte counts and verdicts in order) and
    :class:`PacketReader` (descriptors, then words).

    Parameters
    ----------
    width : int
        Word width in bits (64, 128, 256 or 512).
    max_bytes : int
        Longest packet accepted, in bytes (at least 1).
    buffer_bytes : int or None
        Buffer size in bytes, at least ``max_bytes``; rounded up to a power of two of words
        (at least two). Default ``2 * max_bytes``, so one packet can be received while the
        previous one is sent.
    max_queued : int
        Stored packets that may wait at once, for their verdict or for their turn on
        ``o_desc``; the packet whose descriptor is offered or whose words are being read no
        longer counts.
    info_width : int
        Bits of ``info`` carried from each verdict to the packet's descriptor; 0 for none
        (no ``info`` field). Needs ``verdict=True``.
    min_bytes : int
        Shortest packet accepted, 0 to ``max_bytes`` (default 0: empty packets pass).
    verdict : bool
        Whether packets wait for a ``verdict`` transfer.
    always_ready : bool
        ``i.ready`` is always 1 (the source, a MAC, cannot wait); packets that find no room are
        dropped.
    late_verdicts : bool
        Verdicts come at the earliest in the cycle after their packet's ``accepted`` pulse.
    count_no_room : bool
        With ``always_ready``: count the packets dropped only for want of room in ``no_room``,
        apart from ``overflow`` (a receiver that tells a full buffer from a bad packet).
    first_word_with_desc : bool
        A packet's first word is read as its descriptor is loaded, when nothing else is being
        read, and may then be taken on ``o`` in the cycle ``o_desc`` is taken (a cycle earlier):
        ``o.valid`` then depends on ``o_desc.ready``, so ``o_desc.ready`` must not depend on
        ``o.valid``.

    Members
    -------
    i : In(payload_signature(width))
        Packets in.
    accepted : Out(1)
        High in the cycle the last word of a packet the buffer stores is taken on ``i``.
    i_dropped : Out(1)
        High in the cycle the last word of a packet the buffer drops is taken on ``i``.
    verdict : In(stream.Signature(PacketBuffer.verdict_layout(info_width)))
        One ``{ok, info}`` per stored packet, in order (only with ``verdict=True``).
    o_desc : Out(stream.Signature(PacketBuffer.desc_layout(max_bytes, info_width)))
        One ``{bytes, info}`` per packet sent on ``o``, before its words.
    o : Out(payload_signature(width))
        The words of the packets sent on.
    rejected : Out(32)
        Verdicts with ``ok = 0``.
    overflow : Out(32)
        Packets the buffer dropped itself (one ``i_dropped`` pulse each), aborted ones excepted
        (and, with ``count_no_room``, those dropped for want of room).
    aborted : Out(32)
        Packets ended by an abort word, dropped (one ``i_dropped`` pulse each).
    no_room : Out(32)
        Packets dropped because they found no room (only with ``count_no_room``): a packet
        counts under the first reason it meets, word by word, so one that finds no room for
        its first word counts here even if it would have been too long, and one whose word is
        both malformed (or too long) and without room counts in ``overflow``.
    packets : Out(32)
        Packets sent on ``o`` (counted at their last word).

    Attributes
    ----------
    buffer_words, buffer_bytes : int
        The buffer's size after rounding.

    Raises
    ------
    ValueError
        If the width is not supported or a size is out of range.
    """

    @staticmethod
    def verdict_layout(info_width: int = 0) -> data.StructLayout:
        """``{ok: 1, info: info_width}``, without ``info`` when ``info_width`` is 0."""
        fields = {"ok": unsigned(1)}
        if info_width:
            fields["info"] = unsigned(info_width)
        return data.StructLayout(fields)

    @staticmethod
    def desc_layout(max_bytes: int, info_width: int = 0) -> data.StructLayout:
        """``{bytes: 0..max_bytes, info: info_width}``, without ``info`` when ``info_width``
        is 0."""
        fields = {"bytes": range(max_bytes + 1)}
        if info_width:
            fields["info"] = unsigned(info_width)
        return data.StructLayout(fields)

    def __init__(self, width: int, *, max_bytes: int, buffer_bytes: int | None = None,
                 max_queued: int = 16, info_width: int = 0, min_bytes: int = 0,
                 verdict: bool = True, always_ready: bool = False,
                 late_verdicts: bool = False, count_no_room: bool = False,
                 first_word_with_desc: bool = False) -> None:
        self._width = check_width(width)
        _check_int(max_bytes, "max_bytes", 1, "a positive integer")
        if buffer_bytes is None:
            buffer_bytes = 2 * max_bytes
        _check_int(buffer_bytes, "buffer_bytes", max_bytes,
                   f"an integer of at least max_bytes ({max_bytes})")
        _check_int(max_queued, "max_queued", 1, "a positive integer")
        _check_int(info_width, "info_width", 0, "a non-negative integer")
        _check_int(min_bytes, "min_bytes", 0, f"an integer from 0 to max_bytes ({max_bytes})")
        if min_bytes > max_bytes:
            raise ValueError(f"PacketBuffer: min_bytes must be an integer from 0 to max_bytes "
                             f"({max_bytes}), not {min_bytes!r}")
        if info_width and not verdict:
            raise ValueError("PacketBuffer: info_width needs verdict=True (info comes with "
                             "each packet's verdict)")
        if count_no_room and not always_ready:
            raise ValueError("PacketBuffer: count_no_room needs always_ready=True (without it "
                             "a packet waits for room and is never dropped for want of it)")
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.max_queued = max_queued
        self.info_width = info_width
        self.has_verdict = bool(verdict)
        self.always_ready = bool(always_ready)
        self.late_verdicts = bool(late_verdicts)
        self.count_no_room = bool(count_no_room)
        self.first_word_with_desc = bool(first_word_with_desc)
        nb = width // 8
        words = -(-buffer_bytes // nb)
        self.buffer_words = 1 << max(1, (words - 1).bit_length())
        self.buffer_bytes = self.buffer_words * nb

        members = {
            "i": In(payload_signature(width)),
            "accepted": Out(1),
            "i_dropped": Out(1),
        }
        if verdict:
            members["verdict"] = In(stream.Signature(self.verdict_layout(info_width)))
        members.update({
            "o_desc": Out(stream.Signature(self.desc_layout(max_bytes, info_width))),
            "o": Out(payload_signature(width)),
            "rejected": Out(32),
            "overflow": Out(32),
            "aborted": Out(32),
            "packets": Out(32),
        })
        if count_no_room:
            members["no_room"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        depth = self.buffer_words
        m.submodules.mem = mem = Memory(shape=self._width, depth=depth, init=[])
        m.submodules.writer = writer = PacketWriter(
            self._width, depth=depth, max_bytes=self.max_bytes, min_bytes=self.min_bytes,
            always_ready=self.always_ready, count_no_room=self.count_no_room)
        m.submodules.queue = queue = PacketQueue(
            max_bytes=self.max_bytes, max_queued=self.max_queued, info_width=self.info_width,
            verdict=self.has_verdict, late_verdicts=self.late_verdicts)
        m.submodules.reader = reader = PacketReader(
            self._width, depth=depth, max_bytes=self.max_bytes, info_width=self.info_width,
            verdict=self.has_verdict, first_word_with_desc=self.first_word_with_desc)

        wiring.connect(m, buffer=wiring.flipped(self.i), writer=writer.i)
        wiring.connect(m, writer=writer.words, memory=mem.write_port())
        wiring.connect(m, reader=reader.words, memory=mem.read_port(transparent_for=()))
        wiring.connect(m, writer=writer.stored, queue=queue.push)
        if self.has_verdict:
            wiring.connect(m, buffer=wiring.flipped(self.verdict), queue=queue.verdict)
            m.d.comb += self.rejected.eq(queue.rejected)
        wiring.connect(m, queue=queue.head, reader=reader.head)
        wiring.connect(m, reader=reader.o_desc, buffer=wiring.flipped(self.o_desc))
        wiring.connect(m, reader=reader.o, buffer=wiring.flipped(self.o))
        m.d.comb += [
            writer.rptr.eq(reader.rptr),
            writer.queue_room.eq(queue.room),
            queue.accepted.eq(writer.accepted),
            self.accepted.eq(writer.accepted),
            self.i_dropped.eq(writer.i_dropped),
            self.overflow.eq(writer.overflow),
            self.aborted.eq(writer.aborted),
            self.packets.eq(reader.packets),
        ]
        if self.count_no_room:
            m.d.comb += self.no_room.eq(writer.no_room)
        return m


def _queue_bits(max_queued: int) -> int:
    """Bits of an index into the queue of stored packets (its memories have ``1 << bits``
    entries)."""
    return max(1, (max_queued - 1).bit_length())


class PacketWriter(wiring.Component):
    """A :class:`PacketBuffer`'s receive side: judge each packet on ``i`` and write the words of
    those it keeps into the ring.

    Each word taken on ``i`` that the packet keeps is written through ``words`` (a write port of
    the ring's ``Memory``, combinational: in the cycle the word is taken) at the next free word,
    its lanes past ``nbytes`` zeroed; an empty packet takes one word, a last word with
    ``nbytes == 0`` after full words none. In the cycle a packet's last word is taken exactly
    one of ``accepted`` and ``i_dropped`` is high (combinational from ``i``); with
    ``accepted``, ``stored`` carries the packet's byte count (``stored.valid`` is that cycle's
    pulse, never refused). A packet is dropped as :class:`PacketBuffer` says (too long, too
    short, malformed, aborted; with ``always_ready`` also for want of a ring word or of
    ``queue_room``), its words up to ``last`` discarded and its ring words given back at once;
    each drop counts once, in ``aborted`` if its last word is an abort, else (with
    ``count_no_room``) in ``no_room`` if nothing but room dropped it, else in ``overflow``
    (registered: one cycle after ``i_dropped``).

    The ring is full when the writer is ``depth`` words ahead of ``rptr`` (the reader's next
    word; pointers carry one bit more than an address). Without ``always_ready``, ``i.ready``
    is low while the ring is full (unless the packet already holds ``max_bytes``) or while
    ``queue_room`` is low, high while a dropped packet is being discarded; it depends on
    registers and ``queue_room`` only. Throughput: one word per cycle.

    Parameters
    ----------
    width : int
        Word width in bits.
    depth : int
        Ring words, a power of two.
    max_bytes, min_bytes, always_ready, count_no_room
        As for :class:`PacketBuffer`.

    Members
    -------
    i : In(payload_signature(width))
        Packets in.
    accepted, i_dropped : Out(1)
        The packet whose last word is taken is stored, or dropped.
    stored : Out(stream.Signature(range(max_bytes + 1), always_ready=True))
        The byte count of each stored packet, with ``accepted``.
    words : In(WritePort.Signature(addr_width=log2(depth), shape=width))
        The ring's write port, driven.
    rptr : In(log2(depth) + 1)
        The reader's pointer: ring words from it on up to the writer's are in use.
    queue_room : In(1)
        The queue of stored packets can take one more.
    overflow, aborted, no_room : Out(32)
        Dropped packets, as for :class:`PacketBuffer` (``no_room`` only with
        ``count_no_room``).
    """

    def __init__(self, width: int, *, depth: int, max_bytes: int, min_bytes: int = 0,
                 always_ready: bool = False, count_no_room: bool = False) -> None:
        self._width = check_width(width)
        self._depth = depth
        self._max_bytes = max_bytes
        self._min_bytes = min_bytes
        self._always_ready = bool(always_ready)
        self._count_no_room = bool(count_no_room)
        abits = (depth - 1).bit_length()
        members = {
            "i": In(payload_signature(width)),
            "accepted": Out(1),
            "i_dropped": Out(1),
            "stored": Out(stream.Signature(range(max_bytes + 1), always_ready=True)),
            "words": In(WritePort.Signature(addr_width=abits, shape=width)),
            "rptr": In(abits + 1),
            "queue_room": In(1),
            "overflow": Out(32),
            "aborted": Out(32),
        }
        if count_no_room:
            members["no_room"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        depth = self._depth
        abits = (depth - 1).bit_length()
        wr = self.words

        # Word pointers carry one extra bit so that a full buffer differs from an empty one.
        wptr = Signal(abits + 1)      # next word to write
        commit = Signal(abits + 1)    # first word of the packet being received
        used = Signal(abits + 1)
        m.d.comb += used.eq(wptr - self.rptr)
        room = Signal()
        m.d.comb += room.eq(used != depth)
        qroom = self.queue_room

        i = self.i
        word = i.payload
        fbytes = Signal(range(self._max_bytes + 1))    # bytes of the packet so far
        dropping = Signal()                            # discarding the rest of a packet
        dropped_full = Signal()         # ... dropped for want of room alone
        nbytes = word.nbytes
        total = Signal(range(self._max_bytes + (1 << len(nbytes))))
        m.d.comb += total.eq(fbytes + nbytes)
        stores = Signal()       # the word takes a buffer word: it has bytes or is an empty packet
        m.d.comb += stores.eq((nbytes != 0) | (fbytes == 0))
        bad = ((nbytes > nb) | (~word.last & (nbytes != nb)) | (total > self._max_bytes))
        if self._min_bytes:
            bad |= word.last & (total < self._min_bytes)
        full = Signal()         # no room for this word, or for the packet in the queue
        if self._always_ready:
            m.d.comb += full.eq((stores & ~room) | (word.last & ~qroom))
            m.d.comb += i.ready.eq(1)
        else:
            # A packet that already holds max_bytes needs no more room: its next word either
            # ends it without bytes or makes it too long.
            m.d.comb += i.ready.eq(dropping | (qroom & (room | (fbytes >= self._max_bytes))))

        only_full = Signal()    # the word drops its packet for want of room alone
        m.d.comb += only_full.eq(full & ~bad)
        bad = bad | full

        masked = Cat(Mux(nbytes > lane, word.data[8 * lane:8 * lane + 8], 0)
                     for lane in range(nb))
        m.d.comb += [
            wr.addr.eq(wptr[:abits]),
            wr.data.eq(masked),
            self.stored.payload.eq(total),
        ]
        taken = i.valid & i.ready
        m.d.comb += [
            self.accepted.eq(taken & word.last & ~dropping & ~bad),
            self.i_dropped.eq(taken & word.last & (dropping | bad)),
        ]
        with m.If(taken):
            with m.If(dropping):
                with m.If(word.last):
                    m.d.sync += dropping.eq(0)
            with m.Elif(bad):
                m.d.sync += [wptr.eq(commit), fbytes.eq(0), dropping.eq(~word.last)]
                if self._count_no_room:
                    m.d.sync += dropped_full.eq(only_full)
            with m.Else():
                m.d.comb += wr.en.eq(stores)
                with m.If(word.last):
                    m.d.comb += self.stored.valid.eq(1)
                    m.d.sync += [
                        wptr.eq(wptr + stores),
                        commit.eq(wptr + stores),
                        fbytes.eq(0),
                    ]
                with m.Else():
                    m.d.sync += [wptr.eq(wptr + 1), fbytes.eq(total)]
        aborted = word.last & (nbytes == nb + 1)
        # Counters count under a condition (an enable) rather than adding it, so that their
        # carry chains start at their own registers, not at the end of the input's logic.
        if self._count_no_room:
            no_room = Signal()
            m.d.comb += no_room.eq(Mux(dropping, dropped_full, only_full))
            with m.If(self.i_dropped & ~aborted & ~no_room):
                count(m, self.overflow)
            with m.If(self.i_dropped & ~aborted & no_room):
                count(m, self.no_room)
        else:
            with m.If(self.i_dropped & ~aborted):
                count(m, self.overflow)
        with m.If(self.i_dropped & aborted):
            count(m, self.aborted)
        return m


class PacketQueue(wiring.Component):
    """A :class:`PacketBuffer`'s queue of stored packets: each one's byte count and, with
    ``verdict``, its verdict, from the writer to the reader in order.

    ``push`` adds a packet (its byte count; never refused: the writer checks ``room``, low
    while ``max_queued`` packets are queued, the one on ``head`` included until it is taken).
    With ``verdict``, each pushed packet takes one transfer on ``verdict``, in order;
    ``verdict.ready`` is high while a pushed packet waits for its verdict, and (without
    ``late_verdicts``) also with ``accepted``, the writer's pulse in the cycle of the push.
    Verdicts with ``ok = 0`` count in ``rejected``.

    ``head`` offers the oldest packet whose verdict is known (without ``verdict``: the oldest
    pushed), its byte count and verdict read combinationally from the queue's memories
    (``ok`` and ``info`` only with ``verdict``, ``info`` only with ``info_width``); taking it
    pops it. A push or verdict shows on ``head`` the cycle after it.

    Parameters
    ----------
    max_bytes, max_queued, info_width, verdict, late_verdicts
        As for :class:`PacketBuffer`.

    Members
    -------
    push : In(stream.Signature(range(max_bytes + 1), always_ready=True))
        The byte count of each stored packet.
    room : Out(1)
        Fewer than ``max_queued`` packets are queued.
    accepted : In(1)
        A packet is pushed in this cycle (verdicts may come with it).
    verdict : In(stream.Signature(PacketBuffer.verdict_layout(info_width)))
        One verdict per pushed packet, in order (only with ``verdict``).
    head : Out(stream.Signature(PacketQueue.head_layout(max_bytes, info_width, verdict)))
        The oldest packet ready to send or skip.
    rejected : Out(32)
        Verdicts with ``ok = 0``.
    """

    @staticmethod
    def head_layout(max_bytes: int, info_width: int = 0,
                    verdict: bool = True) -> data.StructLayout:
        """``{bytes, ok, info}``: ``ok`` only with ``verdict``, ``info`` only with
        ``info_width``."""
        fields: dict[str, Any] = {"bytes": range(max_bytes + 1)}
        if verdict:
            fields.update(PacketBuffer.verdict_layout(info_width).members)
        return data.StructLayout(fields)

    def __init__(self, *, max_bytes: int, max_queued: int, info_width: int = 0,
                 verdict: bool = True, late_verdicts: bool = False) -> None:
        self._max_bytes = max_bytes
        self._max_queued = max_queued
        self._info_width = info_width
        self._verdict = bool(verdict)
        self._late_verdicts = bool(late_verdicts)
        members = {
            "push": In(stream.Signature(range(max_bytes + 1), always_ready=True)),
            "room": Out(1),
            "accepted": In(1),
        }
        if verdict:
            members["verdict"] = In(stream.Signature(PacketBuffer.verdict_layout(info_width)))
        members.update({
            "head": Out(stream.Signature(self.head_layout(max_bytes, info_width, verdict))),
            "rejected": Out(32),
        })
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        qbits = _queue_bits(self._max_queued)
        # Per stored packet, by queue index: its byte count, and (with a verdict) ok and info.
        m.submodules.lengths = lengths = Memory(shape=range(self._max_bytes + 1),
                                                depth=1 << qbits, init=[])
        len_w = lengths.write_port()
        len_r = lengths.read_port(domain="comb")
        # Queue pointers (extra bit too): packets [qrd, qvd) are judged, [qvd, qwr) wait for
        # their verdicts.
        qwr = Signal(qbits + 1)
        qvd = Signal(qbits + 1)
        qrd = Signal(qbits + 1)
        queued = Signal(qbits + 1)
        m.d.comb += queued.eq(qwr - qrd)
        m.d.comb += self.room.eq(queued != self._max_queued)

        m.d.comb += [
            len_w.addr.eq(qwr[:qbits]),
            len_w.data.eq(self.push.payload),
            len_w.en.eq(self.push.valid),
        ]
        with m.If(self.push.valid):
            m.d.sync += qwr.eq(qwr + 1)

        head = self.head
        if self._verdict:
            v = self.verdict
            m.submodules.verdicts = verdicts = Memory(
                shape=PacketBuffer.verdict_layout(self._info_width), depth=1 << qbits, init=[])
            ver_w = verdicts.write_port()
            ver_r = verdicts.read_port(domain="comb")
            judged = Signal()
            m.d.comb += [
                v.ready.eq((qvd != qwr) if self._late_verdicts else
                           ((qvd != qwr) | self.accepted)),
                judged.eq(v.valid & v.ready),
                ver_w.addr.eq(qvd[:qbits]),
                ver_w.data.eq(v.payload),
                ver_w.en.eq(judged),
                ver_r.addr.eq(qrd[:qbits]),
            ]
            with m.If(judged):
                m.d.sync += qvd.eq(qvd + 1)
            with m.If(judged & ~v.payload.ok):
                count(m, self.rejected)
            m.d.comb += [head.valid.eq(qrd != qvd), head.payload.ok.eq(ver_r.data.ok)]
            if self._info_width:
                m.d.comb += head.payload.info.eq(ver_r.data.info)
        else:
            m.d.comb += head.valid.eq(qrd != qwr)

        m.d.comb += [
            len_r.addr.eq(qrd[:qbits]),
            head.payload.bytes.eq(len_r.data),
        ]
        with m.If(head.ready):
            m.d.sync += qrd.eq(qrd + 1)
        return m


class PacketReader(wiring.Component):
    """A :class:`PacketBuffer`'s send side: send each packet ``head`` offers with an ``ok``
    verdict as a descriptor on ``o_desc`` and then its words on ``o``, skip the others.

    A packet is started (taken from ``head``, its descriptor loaded into the ``o_desc``
    register) once the previous packet's last word is being read; its words are then read, in
    ring order from ``rptr``, through ``words`` (a synchronous read port of the ring's
    ``Memory``, whose data register drives ``o``), each held there while its own packet's
    descriptor is still on ``o_desc``. A packet with ``ok = 0`` is taken from ``head`` and its
    ring words passed over, one cycle per packet. Every word on ``o`` is full but the last
    (``nbytes`` from the byte count); an empty packet is one word with ``nbytes == 0``.

    Latency: a packet on ``head`` while nothing is being read has its descriptor valid on
    ``o_desc`` the next cycle, and its first word valid on ``o`` the cycle after ``o_desc`` is
    taken (with ``first_word_with_desc``, read at once, valid in the cycle ``o_desc`` is
    taken). Throughput: one word per cycle, back to back packets without idle cycles when
    ``o_desc`` and ``o`` are always ready. ``packets`` counts the packets sent (at their last
    word).

    Parameters
    ----------
    width : int
        Word width in bits.
    depth : int
        Ring words, a power of two.
    max_bytes, info_width, verdict, first_word_with_desc
        As for :class:`PacketBuffer` (without ``verdict`` every packet on ``head`` is sent).

    Members
    -------
    head : In(stream.Signature(PacketQueue.head_layout(max_bytes, info_width, verdict)))
        The next packet to send or skip.
    words : In(ReadPort.Signature(addr_width=log2(depth), shape=width))
        The ring's read port, driven (``transparent_for=()``).
    rptr : Out(log2(depth) + 1)
        The next ring word to read: the words before it are free.
    o_desc, o, packets
        As for :class:`PacketBuffer`.
    """

    def __init__(self, width: int, *, depth: int, max_bytes: int, info_width: int = 0,
                 verdict: bool = True, first_word_with_desc: bool = False) -> None:
        self._width = check_width(width)
        self._early = bool(first_word_with_desc)
        self._depth = depth
        self._max_bytes = max_bytes
        self._info_width = info_width
        self._verdict = bool(verdict)
        abits = (depth - 1).bit_length()
        super().__init__({
            "head": In(stream.Signature(PacketQueue.head_layout(max_bytes, info_width,
                                                                verdict))),
            "words": In(ReadPort.Signature(addr_width=abits, shape=width)),
            "rptr": Out(abits + 1),
            "o_desc": Out(stream.Signature(PacketBuffer.desc_layout(max_bytes, info_width))),
            "o": Out(payload_signature(width)),
            "packets": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self._width
        nb = width // 8
        abits = (self._depth - 1).bit_length()
        max_words = -(-self._max_bytes // nb)
        rd = self.words
        rptr = self.rptr
        head_valid = self.head.valid
        head_ok = self.head.payload.ok if self._verdict else 1
        head_info = self.head.payload.info if self._info_width else None

        # The packet at the queue head is started (its descriptor loaded into `desc_*`, its
        # words counted in `left`) once the previous packet's last word is being read; its words
        # are then read into the read port's data register, which is `o`. A word waits there
        # (`hold`) while its own packet's descriptor is still on `o_desc`: `parity` tells the
        # started packet from the one whose word is on `o`.
        hbytes = self.head.payload.bytes
        hwords, htail = payload_words(hbytes, width)
        empty = hbytes == 0
        skip_words = Mux(empty, 1, hwords)

        desc = self.o_desc
        desc_valid = Signal()
        left = Signal(range(max_words + 1))            # words of the started packet to read
        tail = Signal(range(nb + 1))                   # bytes in its last word
        parity = Signal()                              # flips at each start
        out_valid = Signal()
        out_last = Signal()
        out_nbytes = Signal(range(nb + 1))
        out_parity = Signal()

        o = self.o
        hold = Signal()
        held = desc_valid & (out_parity == parity)
        m.d.comb += [
            hold.eq(held & ~desc.ready if self._early else held),
            o.valid.eq(out_valid & ~hold),
            o.payload.data.eq(rd.data),
            o.payload.nbytes.eq(out_nbytes),
            o.payload.last.eq(out_last),
            desc.valid.eq(desc_valid),
        ]
        advance = ~out_valid | (o.valid & o.ready)
        fetch = Signal()
        m.d.comb += [
            fetch.eq(advance & (left != 0)),
            rd.en.eq(advance),
            rd.addr.eq(rptr[:abits]),
        ]
        fetched = (left == 0) | ((left == 1) & fetch)  # the started packet is read out
        start = Signal()
        skip = Signal()
        m.d.comb += [
            start.eq(head_valid & head_ok & fetched & (~desc_valid | desc.ready)),
            skip.eq(head_valid & ~head_ok & fetched),
        ]
        out_next = [fetch, left == 1, Mux(left == 1, tail, nb), parity]
        read, count_from = fetch, skip_words
        if self._early:
            # A packet started while the read port is idle has its first word read in the
            # same cycle (`rptr` is at it: every earlier word is read).
            first = Signal()
            only = skip_words == 1
            m.d.comb += first.eq(start & (left == 0) & advance)
            out_next = [fetch | first, Mux(first, only, left == 1),
                        Mux(first, Mux(only, Mux(empty, 0, htail), nb), out_next[2]),
                        parity ^ first]
            read, count_from = fetch | first, skip_words - first
        with m.If(advance):
            m.d.sync += [reg.eq(value) for reg, value in
                         zip((out_valid, out_last, out_nbytes, out_parity), out_next)]
        with m.If(fetch):
            m.d.sync += left.eq(left - 1)
        m.d.sync += rptr.eq(rptr + read + Mux(skip, skip_words, 0))
        with m.If(desc.valid & desc.ready):
            m.d.sync += desc_valid.eq(0)
        with m.If(start):
            m.d.sync += [
                desc_valid.eq(1),
                desc.payload.bytes.eq(hbytes),
                left.eq(count_from),
                tail.eq(Mux(empty, 0, htail)),
                parity.eq(~parity),
            ]
            if head_info is not None:
                m.d.sync += desc.payload.info.eq(head_info)
        m.d.comb += self.head.ready.eq(start | skip)
        with m.If(o.valid & o.ready & o.payload.last):
            count(m, self.packets)
        return m
