"""The two data paths of the DRAM buffer tile (:class:`~apiary.os.memory_tile.MemoryTile`),
each a component on the memory port of :func:`~apiary.os.memory.memory_port_signature`:
:class:`MemoryLoad` reads a run of words and passes its bytes on as a packet,
:class:`MemoryStore` writes a packet's bytes at a byte offset with byte enables.

Both walk the same word addresses: from a first word on, each next one ``(a + 1) & wmask |
a & ~wmask``, so that the address wraps within an aligned ring of words when ``wmask`` has
only its low bits set (all ones: plain counting).
"""

from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..stream.layout import check_width, payload_signature
from ..stream.realign import StreamInsert, StreamStrip


__all__ = ["MemoryLoad", "MemoryStore", "next_word"]


def next_word(addr: Any, wmask: Any) -> Any:
    """The word address after ``addr``: plain, or wrapping within the ring of words whose
    address bits ``wmask`` selects."""
    return (addr + 1) & wmask | addr & ~wmask


def _offset_bits(width: int) -> int:
    """Bits of a byte offset within a ``width``-bit word (at least 1)."""
    return max(1, (width // 8).bit_length() - 1)


def _word_count_bits(width: int) -> int:
    """Bits of the word count of a run of up to 2**32 bytes."""
    return 32 - ((width // 8).bit_length() - 1)


class MemoryLoad(wiring.Component):
    """Read a run of memory words and send their bytes, from a byte offset in the first to a
    byte count in the last, as one packet on ``o``.

    ``start`` (one cycle) sets a load up: ``addr`` its first word, ``words`` its word count,
    and no read issued; with ``read`` high in the same cycle it also issues the ``words``
    reads. A read command is offered (``read_cmd``, at ``read_addr``; taken in a cycle with
    ``cmd_ready``) while reads remain and fewer than ``read_buffer`` words are in flight or
    held, so ``rdata`` is never refused for want of room: read latencies up to about
    ``read_buffer - 2`` cycles cost no throughput. Each word read goes through the read buffer
    (a ``read_buffer``-word FIFO: 1 cycle) and a :class:`~apiary.stream.realign.StreamStrip`
    that drops the first ``off`` bytes; the packet's last word is the ``words``-th, with
    ``tail`` bytes (1 to ``width // 8``). ``off``, ``tail`` and ``wmask`` must hold until
    the packet is out. Throughput: one word per cycle.

    Parameters
    ----------
    width : int
        Word width in bits.
    addr_width : int
        Bits of a word address.
    read_buffer : int
        Words of the read buffer (at least 2).

    Members
    -------
    start, read : In(1)
        Set a load up; issue its reads.
    addr, wmask : In(addr_width)
        Its first word; the address bits that count (see :func:`next_word`).
    words : In(32 - log2(width / 8))
        Its word count.
    off : In(max(1, log2(width / 8)))
        Bytes of the first word to drop.
    tail : In(range(width // 8 + 1))
        Bytes of the last word to send.
    read_cmd : Out(1)
        A read command is offered.
    read_addr : Out(addr_width)
        Its word address.
    cmd_ready : In(1)
        The memory takes a command.
    rdata : In(stream.Signature({"data": width}))
        The memory's read data.
    o : Out(payload_signature(width))
        The packet.
    """

    def __init__(self, width: int, *, addr_width: int, read_buffer: int) -> None:
        self._width = check_width(width)
        self._read_buffer = read_buffer
        super().__init__({
            "start": In(1),
            "read": In(1),
            "addr": In(addr_width),
            "wmask": In(addr_width),
            "words": In(_word_count_bits(width)),
            "off": In(_offset_bits(width)),
            "tail": In(range(width // 8 + 1)),
            "read_cmd": Out(1),
            "read_addr": Out(addr_width),
            "cmd_ready": In(1),
            "rdata": In(stream.Signature(data.StructLayout({"data": unsigned(width)}))),
            "o": Out(payload_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self._width
        nb = width // 8
        m.submodules.read_buffer = rbuf = fifo.SyncFIFO(width=width, depth=self._read_buffer)
        m.submodules.strip = strip = StreamStrip(width, max(1, nb - 1))
        rd_addr = self.read_addr
        rd_left = Signal.like(self.words)           # reads still to issue
        resp_left = Signal.like(self.words)         # words still to pass to the strip
        reserved = Signal(range(self._read_buffer + 1))  # reads issued, not yet out of the buffer
        issue = Signal()
        m.d.comb += [
            self.read_cmd.eq((rd_left != 0) & (reserved != self._read_buffer)),
            issue.eq(self.read_cmd & self.cmd_ready),
            self.rdata.ready.eq(rbuf.w_rdy),
            rbuf.w_en.eq(self.rdata.valid),
            rbuf.w_data.eq(self.rdata.payload.data),
            strip.i.valid.eq(rbuf.r_rdy),
            strip.i.payload.data.eq(rbuf.r_data),
            strip.i.payload.nbytes.eq(Mux(resp_left == 1, self.tail, nb)),
            strip.i.payload.last.eq(resp_left == 1),
            rbuf.r_en.eq(strip.i.ready),
            strip.n.valid.eq(1),
            strip.n.payload.eq(self.off),
        ]
        connect(m, strip=strip.o, load=flipped(self.o))
        popped = rbuf.r_rdy & rbuf.r_en
        m.d.sync += reserved.eq(reserved + issue - popped)
        with m.If(popped):
            m.d.sync += resp_left.eq(resp_left - 1)
        with m.If(issue):
            m.d.sync += [rd_addr.eq(next_word(rd_addr, self.wmask)), rd_left.eq(rd_left - 1)]
        with m.If(self.start):
            m.d.sync += [rd_addr.eq(self.addr), rd_left.eq(0), resp_left.eq(self.words)]
            with m.If(self.read):
                m.d.sync += rd_left.eq(self.words)
        return m


class MemoryStore(wiring.Component):
    """Take a packet on ``i`` and write its bytes to memory from a byte offset on, or discard
    it.

    ``start`` (one cycle) sets a store up: ``addr`` its first word; ``store`` then takes the
    next packet on ``i`` (``drain`` discards it instead, up to its ``last``, one word per
    cycle). A stored packet is shifted up by ``off`` lanes (a
    :class:`~apiary.stream.realign.StreamInsert` of ``off`` pad bytes) so that each word
    lands on a memory word, and written word by word from ``addr`` (see :func:`next_word`)
    with byte enables that leave the lanes below ``off`` in the first word and past the
    packet's end in the last untouched: a write command (``write_cmd`` at ``write_addr``,
    taken with ``cmd_ready``) and its data in a 4-word write queue towards ``wdata``, so
    commands run up to 4 ahead of their data. A word without a byte to write (an empty
    packet's) is passed over. ``done`` rises once the packet's last word is past the insert
    and the write queue has drained into ``wdata``. ``idle``: no packet is being stored or
    discarded (``i.ready`` is low then). ``off`` and ``wmask`` must hold until ``done``.
    Throughput: one word per cycle, as long as the memory keeps up.

    Parameters
    ----------
    width : int
        Word width in bits.
    addr_width : int
        Bits of a word address.

    Members
    -------
    start, store, drain : In(1)
        Set a store up; take the next packet; discard it.
    addr, wmask : In(addr_width)
        The first word; the address bits that count.
    off : In(max(1, log2(width / 8)))
        The first byte's lane in the first word.
    i : In(payload_signature(width))
        The packet.
    write_cmd : Out(1)
        A write command is offered.
    write_addr : Out(addr_width)
        Its word address.
    cmd_ready : In(1)
        The memory takes a command.
    wdata : Out(stream.Signature({"data": width, "we": width // 8}))
        The words and their byte enables.
    idle, done : Out(1)
        See above.
    issued : Out(1)
        The packet's last write command has been taken (only data may be left to write).
    """

    def __init__(self, width: int, *, addr_width: int) -> None:
        self._width = check_width(width)
        super().__init__({
            "start": In(1),
            "store": In(1),
            "drain": In(1),
            "addr": In(addr_width),
            "wmask": In(addr_width),
            "off": In(_offset_bits(width)),
            "i": In(payload_signature(width)),
            "write_cmd": Out(1),
            "write_addr": Out(addr_width),
            "cmd_ready": In(1),
            "wdata": Out(stream.Signature(data.StructLayout({
                "data": unsigned(width), "we": unsigned(width // 8)}))),
            "idle": Out(1),
            "done": Out(1),
            "issued": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self._width
        nb = width // 8
        m.submodules.insert = ins = StreamInsert(width, max(1, nb - 1))
        m.submodules.write_queue = wq = fifo.SyncFIFO(width=width + nb, depth=4)
        wr_addr = self.write_addr
        wr_first = Signal()                         # the next word is the store's first
        wr_in_done = Signal()                       # the insert has passed the last word
        storing = Signal()                          # the packet goes to the insert
        draining = Signal()                         # the packet is discarded
        m.d.comb += [
            ins.hdr.valid.eq(storing),
            ins.hdr.payload.nbytes.eq(self.off),
            ins.hdr.payload.data.eq(0),
        ]
        word = ins.o.payload
        we = Signal(nb)
        m.d.comb += we.eq(Cat((word.nbytes > lane) & (~wr_first | (self.off <= lane))
                              for lane in range(nb)))
        any_we = Signal()
        m.d.comb += any_we.eq(we != 0)
        m.d.comb += [
            self.write_cmd.eq(ins.o.valid & any_we & wq.w_rdy),
            ins.o.ready.eq(~any_we | (wq.w_rdy & self.cmd_ready)),
            wq.w_data.eq(Cat(word.data, we)),
            wq.w_en.eq(self.write_cmd & self.cmd_ready),
            self.wdata.valid.eq(wq.r_rdy),
            self.wdata.payload.data.eq(wq.r_data[:width]),
            self.wdata.payload.we.eq(wq.r_data[width:]),
            wq.r_en.eq(self.wdata.ready),
        ]
        with m.If(ins.o.valid & ins.o.ready):
            m.d.sync += [wr_addr.eq(next_word(wr_addr, self.wmask)), wr_first.eq(0)]
            with m.If(word.last):
                m.d.sync += wr_in_done.eq(1)

        i = self.i
        with m.If(storing):
            connect(m, store=flipped(i), insert=ins.i)
            with m.If(i.valid & i.ready & i.payload.last):
                m.d.sync += storing.eq(0)
        with m.Elif(draining):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid & i.payload.last):
                m.d.sync += draining.eq(0)
        m.d.comb += [
            self.idle.eq(~draining & ~storing),
            self.done.eq(wr_in_done & ~wq.r_rdy),
            self.issued.eq(wr_in_done),
        ]

        with m.If(self.start):
            m.d.sync += [wr_addr.eq(self.addr), wr_first.eq(1), wr_in_done.eq(0)]
        with m.If(self.store):
            m.d.sync += storing.eq(1)
        with m.If(self.drain):
            m.d.sync += draining.eq(1)
        return m
