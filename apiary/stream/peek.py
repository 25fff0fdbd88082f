"""Look at the first bytes of each packet, then forward or drop it cut-through.

A protocol RX tile has to see a packet's header (Ethernet, IPv4, UDP...) before it can tell
whether the packet is for it; :class:`PayloadPeek` captures the first ``head_bytes`` bytes of
every packet on a :func:`~apiary.noc.flit.payload_layout` stream into registers, asks the tile
for a keep/drop verdict, and meanwhile lets the packet's words flow into a small FIFO, so that
a kept packet is sent on without waiting for its end.
"""

from typing import Any

from amaranth import Module, Signal, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .layout import check_width, payload_layout, payload_signature
from .lanes import lane_mask


__all__ = ["PayloadPeek"]


class PayloadPeek(wiring.Component):
    """Capture each packet's first ``head_bytes`` bytes, wait for a verdict, then send the whole
    packet on (keep) or discard it (drop).

    Words taken on ``i`` go into a FIFO of ``ceil(head_bytes / (width/8)) + 2`` words; as they
    enter, the bytes of the packet's first ``head_bytes`` are copied into ``head``. Once the
    head is complete (``head_bytes`` bytes seen, or the packet ended earlier) ``head_valid``
    rises and ``verdict`` is ready; the tile answers from ``head`` and ``head_len``, in that
    very cycle if it likes (``verdict.valid`` may be driven combinationally from ``head``).
    While a head waits, later words of the same packet keep entering the FIFO until it is full;
    the next packet's first word is taken at the earliest in the cycle of the current packet's
    verdict (``i.ready`` depends combinationally on ``verdict.valid``). On the output side,
    words leave the FIFO in order: sent on ``o`` if their packet is kept, discarded at one word
    per cycle (``o`` idle) if it is dropped. Verdicts wait in a queue as deep as the FIFO, so the
    output side lagging behind never holds up a verdict or the input.

    Latency: a packet whose head lies in its first ``h`` words (``h = min(ceil(head_bytes /
    (width/8)), words in the packet)``) shows its first word on ``o`` ``h`` cycles after that
    word is taken on ``i``, if the verdict is given in the cycle ``head_valid`` rises and the
    output side is idle. With a head that fits the first word (e.g. 512 bits and
    ``head_bytes <= 64``) that is 1 cycle: the word is on ``o`` in the cycle ``head_valid``
    rises. ``o.payload`` comes from the FIFO's storage; ``o.valid`` follows ``verdict.valid``
    and ``verdict.payload.keep`` combinationally when the verdict is for the packet at the
    FIFO's head, and never depends on ``o.ready``.

    Throughput: one word per cycle on ``i`` and on ``o``. With ``i`` never idle, verdicts given
    in the cycle ``head_valid`` rises and ``o`` always ready, ``i`` never stalls, and ``o``
    is idle only (a) while the words of dropped packets are discarded, one cycle per word, and
    (b) before a packet whose ``h`` is larger than the output's current lag behind the input: the
    lag starts at ``h`` of the first packet and becomes ``max(lag, h)`` with each packet, and a
    packet whose ``h`` exceeds it leaves ``h - lag`` idle cycles before its first word. So with
    ``h`` equal for all packets (in particular with a head that fits in one word, where
    ``h == 1``) there are no idle cycles at all: one-word packets at 512 bits with
    ``head_bytes <= 64`` pass at one packet per cycle. Only idle cycles on ``i`` let the lag
    (and the latency) shrink again.

    Drops: exactly the packets whose verdict has ``keep == 0``, all their words; nothing else
    is lost or reordered. Byte lanes past ``nbytes`` are zeroed on ``o``; everything else of a
    kept word is unchanged.

    Parameters
    ----------
    width : int
        Word width in bits (64, 128, 256 or 512).
    head_bytes : int
        Bytes captured from the front of each packet, at least 1; may span several words.
    slack : int
        FIFO words beyond ``ceil(head_bytes / (width/8)) + 2`` (default 0): room for words that
        keep arriving while what follows ``o`` is still busy with something else (a tile that
        sends a header before the payload), so that ``i`` does not stall meanwhile.

    Members
    -------
    i : In(payload_signature(width))
        Packets.
    head : Out(8 * head_bytes)
        The first ``head_bytes`` bytes of the oldest packet without a verdict, byte ``k`` in
        bits ``8k+7 .. 8k``; bytes past the packet's end are zero. Registered; complete and
        stable while ``head_valid`` is high.
    head_len : Out(range(head_bytes + 1))
        How many bytes of ``head`` are the packet's: ``min(packet length, head_bytes)``.
    head_valid : Out(1)
        The head is complete and waits for its verdict (registered; ``verdict.ready``).
    verdict : In(stream.Signature(StructLayout({"keep": 1})))
        One transfer per packet: ``keep`` sends the packet on ``o``, otherwise it is dropped.
    o : Out(payload_signature(width))
        The kept packets, in order, all their words.
    pending : Out(1)
        A packet has started on ``i`` and has no verdict yet: high from the cycle after its
        first word is taken through the cycle its verdict is taken (registered; for tiles that
        latch side information with a packet's first word).

    Raises
    ------
    ValueError
        If the width is not supported or ``head_bytes`` is not a positive integer.
    """

    def __init__(self, width: int, head_bytes: int, *, slack: int = 0) -> None:
        self._width = check_width(width)
        if not isinstance(slack, int) or isinstance(slack, bool) or slack < 0:
            raise ValueError(f"PayloadPeek needs slack to be a non-negative number of words, "
                             f"not {slack!r}")
        if not isinstance(head_bytes, int) or isinstance(head_bytes, bool) or head_bytes < 1:
            raise ValueError(f"PayloadPeek needs head_bytes to be a positive number of bytes, "
                             f"not {head_bytes!r}")
        self._head_bytes = head_bytes
        self._head_words = -(-head_bytes // (width // 8))
        self.depth = self._head_words + 2 + slack
        super().__init__({
            "i": In(payload_signature(width)),
            "head": Out(8 * head_bytes),
            "head_len": Out(range(head_bytes + 1)),
            "head_valid": Out(1),
            "verdict": In(stream.Signature(data.StructLayout({"keep": 1}))),
            "o": Out(payload_signature(width)),
            "pending": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        hb, hw = self._head_bytes, self._head_words
        layout = payload_layout(self._width)
        i, o, verdict = self.i, self.o, self.verdict

        m.submodules.words = words = SyncFIFO(width=layout.size, depth=self.depth)
        # Verdicts given whose packet has not left the FIFO yet. It cannot overflow: while a
        # packet waits for its verdict it has a word in the FIFO, and so has every earlier
        # packet still queued, hence at most depth - 1 are queued when a verdict arrives.
        m.submodules.verdicts = verdicts = SyncFIFO(width=1, depth=self.depth)

        # -- input side: fill the FIFO and capture the head --------------------------------------
        index = Signal(range(hw + 1))           # word of the packet on `i`, saturating at hw
        fire = Signal()
        m.d.comb += [
            verdict.ready.eq(self.head_valid),
            fire.eq(verdict.valid & verdict.ready),
            # A packet's first word waits until the previous packet has its verdict.
            i.ready.eq(words.w_rdy & ((index != 0) | ~self.head_valid | verdict.valid)),
        ]
        take = i.valid & i.ready
        masked = Signal(8 * nb)
        m.d.comb += masked.eq(i.payload.data & lane_mask(m, nb, i.payload.nbytes))
        w_word = data.View(layout, words.w_data)
        m.d.comb += [
            w_word.data.eq(masked),
            w_word.nbytes.eq(i.payload.nbytes),
            w_word.last.eq(i.payload.last),
            words.w_en.eq(take),
        ]

        # The head's bytes are data: no reset (a reset net reaching every bit of a 60-byte head
        # was the core's critical path on an ECP5).
        head = Signal(8 * hb, reset_less=True)
        m.d.comb += self.head.eq(head)
        with m.If(fire):
            m.d.sync += [self.head_valid.eq(0), self.pending.eq(0)]
        with m.If(take):
            m.d.sync += index.eq(Mux(i.payload.last, 0, Mux(index == hw, hw, index + 1)))
            for j in range(hw):
                lo, hi = j * nb, min((j + 1) * nb, hb)
                with m.If(index == j):
                    if j == 0:
                        # Clears the rest of the head for a packet that ends early.
                        m.d.sync += [head.eq(masked[:8 * hi]), self.pending.eq(1)]
                    else:
                        m.d.sync += head[8 * lo:8 * hi].eq(masked[:8 * (hi - lo)])
                    seen = lo + i.payload.nbytes
                    m.d.sync += self.head_len.eq(Mux(seen >= hb, hb, seen))
                    if j == hw - 1:
                        m.d.sync += self.head_valid.eq(1)
                    else:
                        with m.If(i.payload.last):
                            m.d.sync += self.head_valid.eq(1)

        # -- output side: send or discard words as their verdicts are known ---------------------
        # The oldest unfinished packet's verdict: queued, or being given right now (bypass).
        known = verdicts.r_rdy | fire
        keep = Mux(verdicts.r_rdy, verdicts.r_data[0], verdict.payload.keep)
        r_word = data.View(layout, words.r_data)
        m.d.comb += [
            o.payload.eq(r_word),
            o.valid.eq(words.r_rdy & known & keep),
            words.r_en.eq(known & (o.ready | ~keep)),
        ]
        done = words.r_rdy & words.r_en & r_word.last   # a packet's last word leaves
        m.d.comb += [
            verdicts.w_data.eq(verdict.payload.keep),
            verdicts.w_en.eq(fire & ~(done & ~verdicts.r_rdy)),
            verdicts.r_en.eq(done),
        ]
        return m
