"""Per-queue counters kept in a memory, so that hundreds of queues cost memory, not logic.

:class:`QueueCounters` holds one 32-bit count per queue: ``bump`` (In, a pulse) adds one to
the count of ``bump_queue`` in that cycle; ``read_queue`` (In) selects the count ``value``
(Out, combinational) shows. A count read in the cycle it is bumped shows it before the bump.
FLD's receive and transmit sides count their drops this way (FlexDriver at 512 queues would
otherwise need 16,384 flip-flops a side for them).
"""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out


__all__ = ["QueueCounters", "queue_bits"]


def queue_bits(queues: int) -> int:
    """The bits of a queue number among ``queues`` (at least 1)."""
    return max(1, (queues - 1).bit_length())


class QueueCounters(wiring.Component):
    """See the module docstring: ``queues`` counters of 32 bits."""

    def __init__(self, queues: int) -> None:
        self.queues = queues
        qbits = queue_bits(queues)
        super().__init__({"bump": In(1), "bump_queue": In(qbits), "read_queue": In(qbits),
                          "value": Out(32)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.counts = counts = Memory(shape=32, depth=self.queues, init=[])
        now, write = counts.read_port(domain="comb"), counts.write_port()
        read = counts.read_port(domain="comb")
        m.d.comb += [now.addr.eq(self.bump_queue), write.addr.eq(self.bump_queue),
                     write.data.eq(now.data + 1), write.en.eq(self.bump),
                     read.addr.eq(self.read_queue), self.value.eq(read.data)]
        return m
