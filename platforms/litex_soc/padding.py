"""A transmit padding stage for LiteEth's MAC whose word counter stops at the minimum frame.

LiteEth's ``LiteEthMACPaddingInserter`` counts every word of a frame in 16 bits and compares
the count with the minimum (``counter >= limit``) in the same cycle as it takes the word: a
carry chain, the compare and the register slice's ``ready`` into the counter's next value, eight
LUTs deep. On the LFE5U-25F's speed-6 part that was the PHY's 125 MHz critical path at
115.58 MHz (nextpnr seed 2, 2026-12-05). :class:`PaddingInserter` counts only up to the minimum
and keeps "the minimum is reached" in a register of its own, so the path from ``ready`` is the
counter's enable and a 6-bit increment.
"""

from migen import FSM, If, Module, NextState, NextValue, Signal


__all__ = ["PaddingInserter"]


class PaddingInserter(Module):
    """``sink`` to ``source`` (LiteEth's ``eth_phy_description(dw)``), each frame padded with
    zero bytes to at least ``padding`` bytes (60: the minimum frame before its FCS).

    The same contract as LiteEth's ``LiteEthMACPaddingInserter``: a frame of ``padding`` bytes
    or more passes unchanged; a shorter one gets zero words after its last word (whose
    ``last_be`` is then 0, so those bytes go out as they came) until its ``padding`` bytes, the
    final word's ``last_be`` at byte ``padding``. A word a cycle either way; no latency."""

    def __init__(self, dw=8, padding=60):
        from litex.soc.interconnect import stream
        from liteeth.common import eth_phy_description
        word_bytes = dw // 8
        if dw not in (8, 16, 32, 64) or padding < 2 * word_bytes:
            raise ValueError(f"PaddingInserter pads {dw}-bit words to {padding} bytes: dw must "
                             f"be 8, 16, 32 or 64 and padding at least two words")
        self.sink = sink = stream.Endpoint(eth_phy_description(dw))
        self.source = source = stream.Endpoint(eth_phy_description(dw))

        limit = -(-padding // word_bytes) - 1         # the index of the word holding byte `padding`
        last_be = 1 << ((padding - 1) % word_bytes)
        index = Signal(max=limit + 1)                  # this word's index, held at `limit`
        reached = Signal()                             # the word's index is `limit` or more
        beyond = Signal()                              # the word's index is past `limit`
        step = [If(~reached, NextValue(index, index + 1), NextValue(reached, index == limit - 1))
                .Else(NextValue(beyond, 1))]
        restart = [NextValue(index, 0), NextValue(reached, 0), NextValue(beyond, 0)]

        self.submodules.fsm = fsm = FSM(reset_state="PASS")
        fsm.act("PASS",
            sink.connect(source),
            If(source.valid & source.ready,
                *step,
                If(sink.last,
                    If(~reached,
                        source.last.eq(0),
                        source.last_be.eq(0),
                        NextState("PAD"),
                    ).Else(
                        *restart,
                        # The word at byte `padding` but ending before it goes out to that byte.
                        If(~beyond & (sink.last_be < last_be),
                            source.last_be.eq(last_be)),
                    ),
                ),
            ),
        )
        fsm.act("PAD",
            source.valid.eq(1),
            source.data.eq(0),
            If(reached, source.last.eq(1), source.last_be.eq(last_be)),
            If(source.ready,
                *step,
                If(reached, *restart, NextState("PASS")),
            ),
        )
