"""The NIC model and the FLD module in one simulation: the model's DMA and FLD's doorbells
crossing a PCIe-like link, a cycle at a time, inside an Amaranth testbench.

:class:`FldLink` is the :class:`~flexdriver.nic.Bus` the model sees (its reads handed to the
hardware and answered when the hardware has the bytes, its writes split into words) and the
testbench that moves them: :meth:`FldLink.run` is a background testbench for
:func:`~apiary.stream.testbench.simulate` that advances the model's time with the clock,
feeds FLD its reads and writes a word a cycle, collects its answers, and rings the model's
doorbells as FLD rings them.
"""

from collections.abc import Callable
from typing import Any

from .control import RX_CQ, TX_CQ
from .fld import Doorbell
from .nic import NicModel


__all__ = ["FldLink", "read_count", "buffers_closed"]


def buffers_closed(sizes: list[int], buffer_bytes: int, stride_bytes: int) -> int:
    """How many striding buffers of ``buffer_bytes`` frames of ``sizes`` close (by a filler
    completion, or by a frame ending at the last stride), a frame longer than a buffer taking
    none: the receive doorbells FLD rings for them."""
    strides, at, n = buffer_bytes // stride_bytes, 0, 0
    for size in sizes:
        need = -(-size // stride_bytes)
        if need > strides:
            continue                                    # (an error: no stride taken)
        if at + need > strides:
            n, at = n + 1, 0
        at += need
        if at == strides:
            n, at = n + 1, 0
    return n


def read_count(ctx: Any, select: Any, value: Any, queue: int) -> int:
    """In a testbench: the count ``value`` shows with ``select`` set to ``queue`` (FLD's
    per-queue drops, :class:`~flexdriver.queue_counters.QueueCounters`)."""
    ctx.set(select, queue)
    return int(ctx.get(value))


class FldLink:
    """The link between ``fld`` (an :class:`~flexdriver.fld.Fld`, or any component with its
    ``nic_read``, ``nic_data``, ``pcie_write`` and ``doorbell`` ports, such as a
    :class:`~flexdriver.tx_path.TxPath`) and a NIC model (set :attr:`nic` before running).
    ``doorbell(nic, payload)`` rings the model for each doorbell the hardware sends; by default
    :class:`~flexdriver.fld.Fld`'s (:class:`~flexdriver.fld.Doorbell` kinds)."""

    def __init__(self, fld: Any, doorbell: Callable[[NicModel, Any], None] | None = None
                 ) -> None:
        self.fld, self.nb = fld, fld.width // 8
        self.doorbell = doorbell or self._fld_doorbell
        self.nic: NicModel | None = None
        self.reads: list[tuple[int, int, Callable[[bytes], None]]] = []
        self.words: list[tuple[int, int]] = []
        self.cycle = 0
        self._indexes: dict[tuple[Doorbell, int], int] = {}     # unwrapped, by kind and queue

    def _unwrapped(self, kind: Doorbell, queue: int, value: int) -> int:
        """The 16-bit index ``value`` as a count that never wraps (the NIC model's)."""
        last = self._indexes.get((kind, queue), 0)
        self._indexes[(kind, queue)] = last + ((value - last) & 0xFFFF)
        return self._indexes[(kind, queue)]

    # -- the Bus the NIC model sees -------------------------------------------------------------
    def read(self, address: int, length: int) -> bytes:
        raise AssertionError("FLD's windows are read through the hardware (submit_read)")

    def submit_read(self, address: int, length: int, answer: Callable[[bytes], None]) -> None:
        self.reads.append((address, length, answer))

    def write(self, address: int, data: bytes) -> None:
        data = data + bytes(-len(data) % self.nb)
        for k in range(0, len(data), self.nb):
            self.words.append((address + k, int.from_bytes(data[k:k + self.nb], "little")))

    # -- the testbench ---------------------------------------------------------------------------
    async def run(self, ctx: Any) -> None:
        fld, nic = self.fld, self.nic
        assert nic is not None, "FldLink.nic is not set"
        ctx.set(fld.doorbell.ready, 1)
        ctx.set(fld.nic_data.ready, 1)
        read: tuple[int, int, Callable[[bytes], None]] | None = None
        answer = b""
        while True:
            nic.advance(self.cycle)
            if read is None and self.reads:
                read = self.reads.pop(0)
                ctx.set(fld.nic_read.payload, {"address": read[0], "length": read[1]})
                ctx.set(fld.nic_read.valid, 1)
            if self.words:
                address, word = self.words.pop(0)
                ctx.set(fld.pcie_write.payload, {"address": address, "data": word})
                ctx.set(fld.pcie_write.valid, 1)
            else:
                ctx.set(fld.pcie_write.valid, 0)
            # What passes at this clock edge, sampled before it.
            took = ctx.get(fld.nic_read.valid) and ctx.get(fld.nic_read.ready)
            word_out = ctx.get(fld.nic_data.payload) if ctx.get(fld.nic_data.valid) else None
            ring = ctx.get(fld.doorbell.payload) if ctx.get(fld.doorbell.valid) else None
            await ctx.tick()
            self.cycle += 1
            if took:
                ctx.set(fld.nic_read.valid, 0)
            if word_out is not None and read is not None:
                answer += int(word_out.data).to_bytes(self.nb, "little")
                if word_out.last:
                    read[2](answer[:read[1]])
                    read, answer = None, b""
            if ring is not None:
                self.doorbell(nic, ring)

    def _fld_doorbell(self, nic: NicModel, ring: Any) -> None:
        kind, queue = Doorbell(ring.kind), int(ring.queue)
        value = self._unwrapped(kind, queue, int(ring.value))
        if kind == Doorbell.SQ:
            nic.sq_doorbell(queue, value & 0xFFFF)
        elif kind == Doorbell.TX_CQ:
            nic.cq_doorbell(TX_CQ, value)
        elif kind == Doorbell.RQ:
            nic.rq_doorbell(queue, value)
        else:
            nic.cq_doorbell(RX_CQ, value)
