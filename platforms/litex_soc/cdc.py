"""A clock-domain crossing for LiteX streams whose read side addresses its RAM from a register.

LiteX's ``stream.ClockDomainCrossing`` (Migen's ``AsyncFIFO``) reads its memory at the *next*
read address: the Gray-code compare that says a word is there, the read enable, the Gray to
binary increment, and then the address fanned out to every LUT RAM cell, all in one cycle of
the read clock. On the LFE5U-25F's speed-6 part that path, at the PHY's 125 MHz, was the MAC's
critical path (113 to 126 MHz across nextpnr seeds: more than half of them missed).
:class:`RegisteredReadCrossing` reads its LUT RAM asynchronously at the read pointer itself,
a register, into an output register: a word moves to the output when the RAM has one and the
output is empty or being taken. The longest read-side paths are then a register through the
RAM into the output register, and the "a word is there" compare into the output's enables.
"""

from migen import If, Memory, Module, Record, Signal
from migen.genlib.cdc import MultiReg


__all__ = ["RegisteredReadCrossing"]


def _gray(value):
    return value ^ (value >> 1)


class RegisteredReadCrossing(Module):
    """``sink`` (in ``cd_from``) to ``source`` (in ``cd_to``), ``depth`` words in LUT RAM (a
    power of two) and one more in the output register.

    The same contract as LiteX's ``stream.ClockDomainCrossing`` (``buffered=False``, each side
    reset by its own domain's reset): every word, with its ``first``, ``last``, payload and
    parameters, in order. A word written appears on ``source`` three ``cd_to`` cycles later at
    the earliest (two to synchronise the write pointer, one to load the output), and
    ``source`` gives a word every ``cd_to`` cycle while the RAM has them."""

    def __init__(self, description, cd_from="sys", cd_to="eth_tx", depth=16):
        from litex.soc.interconnect import stream
        bits = (depth - 1).bit_length()
        if depth < 2 or 1 << bits != depth:
            raise ValueError(f"depth must be a power of two, at least 2, not {depth}")
        self.sink = sink = stream.Endpoint(description)
        self.source = source = stream.Endpoint(description)
        fields = [("payload", description.payload_layout), ("param", description.param_layout),
                  ("first", 1), ("last", 1)]
        word_in, word_out = Record(fields), Record(fields)
        self.comb += [word_in.payload.eq(sink.payload), word_in.param.eq(sink.param),
                      word_in.first.eq(sink.first), word_in.last.eq(sink.last),
                      source.payload.eq(word_out.payload), source.param.eq(word_out.param),
                      source.first.eq(word_out.first), source.last.eq(word_out.last)]
        storage = Memory(len(word_in.raw_bits()), depth)
        write = storage.get_port(write_capable=True, clock_domain=cd_from)
        read = storage.get_port(async_read=True, clock_domain=cd_to)
        self.specials += storage, write, read

        # Write side: binary and Gray pointers, both registers; full against the read pointer.
        wr_ptr, wr_gray = Signal(bits + 1), Signal(bits + 1)
        rd_gray_w = Signal(bits + 1)
        wr_gray.attr.add("no_retiming")
        full = Signal()
        top = (1 << bits) | (1 << (bits - 1))   # full: the two top bits differ, the rest equal
        self.comb += [
            full.eq(wr_gray == (rd_gray_w ^ top)),
            sink.ready.eq(~full),
            write.adr.eq(wr_ptr[:bits]), write.dat_w.eq(word_in.raw_bits()),
            write.we.eq(sink.valid & ~full),
        ]
        wr_next = Signal(bits + 1)
        self.comb += wr_next.eq(wr_ptr + 1)
        sync_from = getattr(self.sync, cd_from)
        sync_from += If(sink.valid & ~full, wr_ptr.eq(wr_next), wr_gray.eq(_gray(wr_next)))

        # Read side: the RAM read at the read pointer (a register) into the output register.
        rd_ptr, rd_gray = Signal(bits + 1), Signal(bits + 1)
        rd_gray.attr.add("no_retiming")
        self.specials += MultiReg(rd_gray, rd_gray_w, cd_from)
        wr_gray_r = Signal(bits + 1)
        self.specials += MultiReg(wr_gray, wr_gray_r, cd_to)
        there = Signal()                        # the RAM has a word for the output
        load = Signal()
        rd_next = Signal(bits + 1)
        data = Signal(len(word_in.raw_bits()))
        self.comb += [
            there.eq(rd_gray != wr_gray_r),
            load.eq(there & (~source.valid | source.ready)),
            read.adr.eq(rd_ptr[:bits]),
            rd_next.eq(rd_ptr + 1),
            word_out.raw_bits().eq(data),
        ]
        sync_to = getattr(self.sync, cd_to)
        sync_to += If(load, data.eq(read.dat_r), source.valid.eq(1),
                      rd_ptr.eq(rd_next), rd_gray.eq(_gray(rd_next))
                      ).Elif(source.ready, source.valid.eq(0))
