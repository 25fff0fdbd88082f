"""FLD's compressed descriptors: 8-byte transmit descriptors expanded into the NIC's 64-byte WQEs
as the NIC reads them, and the NIC's 64-byte completions kept as 15 bytes (FlexDriver, §5 and
Table 2b: "FLD ... internally uses a compressed descriptor/completion representation and
converts them as needed").

FLD's transmit queues always point into its own on-chip buffer, so a descriptor needs only a
buffer offset, a length, the queue and the offload flags (:data:`TX_DESC`, 64 bits); the WQE's
index is where the NIC reads it, and its 64-bit address is the buffer's window in the NIC's view
plus the offset. A completion keeps what the accelerator and the ring managers use
(:data:`CQE_COMPACT`, 120 bits); its owner bit is not kept (FLD follows the queue's phase
itself) nor are the zero bytes.

:class:`WqeExpander` and :class:`CqeCompressor` are the two conversions in Amaranth, one a cycle
(combinational); :func:`expand_tx` and :func:`compress_cqe` / :func:`expand_cqe` are the same in
Python. A 64-byte value is the bytes in lane order: byte ``i`` in bits ``8i`` to ``8i + 7``.
"""

from amaranth import Cat, Const, Module, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fields import field_of
from .formats import CQE_BYTES, OP_SEND, WQE_BYTES, Cqe, TxWqe


__all__ = ["TX_DESC", "CQE_COMPACT", "BUFFER_UNIT", "expand_tx", "compress_cqe", "expand_cqe",
           "WqeExpander", "CqeCompressor", "CqeWindow", "pcie_write_layout"]

#: Bytes per unit of a descriptor's buffer offset.
BUFFER_UNIT = 64
_UNIT_BITS = 6

#: A transmit descriptor as FLD keeps it: 8 bytes.
TX_DESC = data.StructLayout({
    "buffer": 24,           # offset in the transmit buffer's window, in BUFFER_UNITs (1 GiB)
    "length": 15,           # the packet's bytes (up to 32 KiB - 1)
    "queue": 12,            # the send queue (4,096)
    "flags": 3,             # SIGNALED, L3_CSUM, L4_CSUM
    "_zero": 10,
})

#: A completion as FLD keeps it: 15 bytes.
CQE_COMPACT = data.StructLayout({
    "opcode": 4, "counter": 16, "queue": 12, "length": 14, "rss_hash": 32, "context": 24,
    "checks": 6, "error": 4, "stride": 8,
})
assert TX_DESC.size == 64 and CQE_COMPACT.size == 120


def expand_tx(desc: dict[str, int], index: int, window: int) -> TxWqe:
    """The WQE the NIC reads at ring position ``index`` for descriptor ``desc`` (its fields),
    the transmit buffer at ``window`` in the NIC's address space."""
    return TxWqe(index=index & 0xFFFF, queue=desc["queue"],
                 address=window + desc["buffer"] * BUFFER_UNIT, length=desc["length"],
                 flags=desc["flags"], opcode=OP_SEND)


def compress_cqe(cqe: Cqe) -> dict[str, int]:
    """The fields FLD keeps of ``cqe``."""
    return {"opcode": cqe.opcode, "counter": cqe.counter, "queue": cqe.queue & 0xFFF,
            "length": cqe.length & 0x3FFF, "rss_hash": cqe.rss_hash,
            "context": cqe.context & 0xFF_FFFF, "checks": cqe.checks & 0x3F,
            "error": cqe.error & 0xF, "stride": cqe.stride & 0xFF}


def expand_cqe(compact: dict[str, int], owner: int = 0) -> Cqe:
    """The completion again (with the ``owner`` phase the reader expects)."""
    return Cqe(compact["opcode"], owner, compact["counter"], compact["queue"],
               compact["length"], compact["rss_hash"], compact["context"], compact["checks"],
               compact["error"], compact["stride"])


def _be(value: Value, nbytes: int) -> list[Value]:
    """The bytes of ``value`` (zero-extended to ``nbytes``) most significant first: a packed
    big-endian field."""
    wide = Cat(value, Const(0, 8 * nbytes - len(value))) if len(value) < 8 * nbytes else value
    return [wide[8 * (nbytes - 1 - i):8 * (nbytes - i)] for i in range(nbytes)]


class WqeExpander(wiring.Component):
    """``desc`` (:data:`TX_DESC`) at ring position ``index`` → ``wqe``, the 64 bytes the NIC
    reads (as :meth:`TxWqe.pack` lays them out), for a transmit buffer at ``window``."""

    def __init__(self, window: int) -> None:
        self.window = window
        super().__init__({"desc": In(TX_DESC), "index": In(16), "wqe": Out(8 * WQE_BYTES)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        d = self.desc
        address = (Const(self.window, 64) + Cat(Const(0, _UNIT_BITS), d.buffer))[:64]
        zero = [Const(0, 8)]
        fields = (_be(self.index, 2) + _be(Const(OP_SEND, 8), 1) + _be(d.flags, 1)
                  + _be(d.queue, 4) + _be(Const(0, 16), 2) + zero * 18
                  + _be(d.length, 4) + _be(address, 8) + zero * 24)
        assert len(fields) == WQE_BYTES
        m.d.comb += self.wqe.eq(Cat(*fields))
        return m


class CqeCompressor(wiring.Component):
    """``cqe``, the 64 bytes the NIC writes → ``compact`` (:data:`CQE_COMPACT`) and ``owner``,
    its phase bit."""

    def __init__(self) -> None:
        super().__init__({"cqe": In(8 * CQE_BYTES), "compact": Out(CQE_COMPACT),
                          "owner": Out(1)})

    def elaborate(self, platform: object) -> Module:
        m = Module()

        def field(offset: int, nbytes: int) -> Value:
            return field_of(self.cqe, offset, nbytes)

        c = self.compact
        m.d.comb += [
            c.opcode.eq(field(0, 1)), self.owner.eq(field(1, 1)), c.counter.eq(field(2, 2)),
            c.queue.eq(field(4, 4)), c.length.eq(field(8, 4)), c.rss_hash.eq(field(12, 4)),
            c.context.eq(field(16, 4)), c.checks.eq(field(20, 1)), c.error.eq(field(21, 1)),
            c.stride.eq(field(22, 2)),
        ]
        return m


def pcie_write_layout(width: int) -> data.StructLayout:
    """A NIC's DMA write as FLD takes it: one aligned word, ``width // 8`` bytes of ``data`` at
    ``address``."""
    return data.StructLayout({"address": 64, "data": width})


class CqeWindow(wiring.Component):
    """The NIC's completions, written word by word into a window of ``entries`` 64-byte CQEs
    at ``base`` (in the NIC's view): ``writes`` (the NIC's DMA writes, every one taken; those
    outside the window are ignored) → ``complete``, one cycle, with the completion whose last
    word came the cycle before, compressed (``compact``, :data:`CQE_COMPACT`). The NIC writes a
    CQE's words in order, whole."""

    def __init__(self, *, width: int, base: int, entries: int) -> None:
        self.width, self.base, self.entries = width, base, entries
        super().__init__({"writes": In(stream.Signature(pcie_write_layout(width))),
                          "in_window": Out(1),
                          "complete": Out(1), "compact": Out(CQE_COMPACT)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        nb = self.width // 8
        w = self.writes
        cqe_words = CQE_BYTES // nb                 # (1 to 8: the widths are 64 to 512 bits)
        cqe = Signal(8 * CQE_BYTES)
        offset = Signal(64)
        m.d.comb += [w.ready.eq(1), offset.eq(w.payload.address - self.base),
                     self.in_window.eq((w.payload.address >= self.base)
                                       & (offset < self.entries * CQE_BYTES))]
        word_of_cqe = offset[nb.bit_length() - 1:] % cqe_words if cqe_words > 1 else 0
        got = Signal(range(cqe_words + 1))
        with m.If(w.valid & self.in_window):
            for k in range(cqe_words):
                with m.If(word_of_cqe == k):
                    m.d.sync += cqe[k * self.width:(k + 1) * self.width].eq(w.payload.data)
            with m.If(got == cqe_words - 1):
                m.d.sync += [got.eq(0), self.complete.eq(1)]
            with m.Else():
                m.d.sync += [got.eq(got + 1), self.complete.eq(0)]
        with m.Else():
            m.d.sync += self.complete.eq(0)
        m.submodules.compress = compress = CqeCompressor()
        m.d.comb += [compress.cqe.eq(cqe), self.compact.eq(compress.compact)]
        return m
