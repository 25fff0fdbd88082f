"""The transmit engine's round-trip estimator: RFC 6298's smoothed round trip, its variation and
the retransmission timeout of each flow, updated in a pipeline beside the engine.

:class:`RttEstimator` keeps, per flow slot, SRTT in eighths of a timer tick, RTTVAR in quarters
(fixed point, each update truncating, as Linux keeps them) and the RTO in ticks (0: no sample
yet, the engine's initial timeout applies). A ``sample`` (the slot and ``R``, ticks from the
timed segment's sending to its ACK) updates them: the first SRTT = R, RTTVAR = R / 2; later
RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R| (with the SRTT before) and SRTT = 7/8 SRTT + 1/8 R; then
RTO = SRTT + max(G, 4 RTTVAR), G one tick, kept within ``floor`` and ``ceiling``. A sample with
``clear`` forgets the flow's (a new connection in the slot).

Ports: ``sample`` (In stream, always ready: ``slot``, ``rtt``, ``clear``), ``addr`` (In) and
``rto`` (Out: the RTO of slot ``addr`` in the cycle after, as the engine's record memory
answers), ``peek_addr`` (In) and ``peek`` (Out, the same way: SRTT, RTTVAR and RTO, for tests).
Latency: a sample's RTO is read 4 cycles after it is taken (read, difference, update, timeout,
each a cycle, so that no cycle has more than two additions in series). Throughput: a sample a
cycle; two samples of one flow must be 4 cycles apart (one timed segment at a time is).
"""

from typing import Any

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .state import slot_bits


__all__ = ["RttEstimator", "RTT_SAMPLE", "RTT_STATE"]

#: A flow's estimate: SRTT in eighths of a tick, RTTVAR in quarters, the RTO in ticks.
RTT_STATE = data.StructLayout({"srtt": 32, "rttvar": 32, "rto": 32})


def RTT_SAMPLE(flows: int) -> data.StructLayout:  # noqa: N802 (a layout, named as one)
    """A sample: the flow ``slot``, ``rtt`` in ticks; ``clear``: forget the flow's instead."""
    return data.StructLayout({"slot": slot_bits(flows), "rtt": 32, "clear": 1})


class RttEstimator(wiring.Component):
    """See the module docstring: ``flows`` slots, the RTO within ``floor`` and ``ceiling``
    ticks."""

    def __init__(self, flows: int, *, floor: int, ceiling: int) -> None:
        self._flows, self._floor, self._ceiling = flows, floor, ceiling
        sb = slot_bits(flows)
        super().__init__({"sample": In(stream.Signature(RTT_SAMPLE(flows))),
                          "addr": In(sb), "rto": Out(32),
                          "peek_addr": In(sb), "peek": Out(RTT_STATE)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.estimates = mem = Memory(shape=RTT_STATE, depth=self._flows, init=[])
        engine_rd, peek_rd = mem.read_port(transparent_for=()), mem.read_port(transparent_for=())
        own_rd, wr = mem.read_port(transparent_for=()), mem.write_port()
        m.d.comb += [engine_rd.addr.eq(self.addr), self.rto.eq(engine_rd.data.rto),
                     peek_rd.addr.eq(self.peek_addr), self.peek.eq(peek_rd.data),
                     self.sample.ready.eq(1)]
        s = self.sample
        # 1: the flow's estimate is read.
        take = Signal(RTT_SAMPLE(self._flows))
        valid = Signal(4)                           # a sample in each stage
        m.d.comb += own_rd.addr.eq(s.payload.slot)
        m.d.sync += [take.eq(s.payload), valid.eq(Cat(s.valid, valid[:-1]))]
        old = own_rd.data
        # 2: the difference from SRTT, and the decayed RTTVAR.
        delta = Signal(signed(34))
        first = Signal()
        keep = Signal(RTT_STATE)
        two = Signal(RTT_SAMPLE(self._flows))
        m.d.sync += [delta.eq(take.rtt - (old.srtt >> 3)), first.eq(old.rto == 0),
                     keep.srtt.eq(old.srtt), keep.rttvar.eq(old.rttvar - (old.rttvar >> 2)),
                     two.eq(take)]
        # 3: the new SRTT and RTTVAR.
        srtt, rttvar = Signal(34), Signal(34)
        three = Signal(RTT_SAMPLE(self._flows))
        magnitude = Mux(delta < 0, -delta, delta)
        m.d.sync += [srtt.eq(Mux(first, two.rtt << 3, keep.srtt + delta)),
                     rttvar.eq(Mux(first, two.rtt << 1, keep.rttvar + magnitude)),
                     three.eq(two)]
        # 4: the timeout, and the estimate written back.
        rto = Signal(34)
        m.d.comb += rto.eq((srtt >> 3) + Mux(rttvar == 0, 1, rttvar))
        clamped = Mux(rto < self._floor, self._floor, Mux(rto > self._ceiling, self._ceiling, rto))
        m.d.comb += [wr.addr.eq(three.slot), wr.en.eq(valid[2]),
                     wr.data.srtt.eq(Mux(three.clear, 0, srtt)),
                     wr.data.rttvar.eq(Mux(three.clear, 0, rttvar)),
                     wr.data.rto.eq(Mux(three.clear, 0, clamped))]
        return m

