"""The Amaranth simulator back end.

One async testbench drives every Ethernet port by the cycle rules of :mod:`apiary.sim.core`. The
simulation advances only while :meth:`Sim.run` asks for cycles: after the last requested cycle
the testbench waits a quarter clock period (before the next rising edge) and the driver stops
calling :meth:`Simulator.advance`, so frames queued between runs are seen on the very next cycle,
as on the Verilator back end.
"""

import os
import shutil
import tempfile

from amaranth.sim import Simulator

from ..stream.testbench import end_testbenches
from .base import Sim, PortState
from .core import Frame, SimError, Xorshift32, frame_words, seed_state
from .vcd import crop_vcd


__all__ = ["PysimSim"]


class PysimSim(Sim):
    backend = "pysim"

    def __init__(self, design, top, ports, counter_names, *, vcd=None, vcd_window=None, **kw):
        super().__init__(design, top, ports, counter_names, **kw)
        nb = design.width // 8
        self._nb = nb
        self._state = [PortState(nb, Xorshift32(seed_state(self.seed, 2 * i)),
                                 Xorshift32(seed_state(self.seed, 2 * i + 1)))
                       for i in range(len(ports))]
        self._rx = [getattr(top, p.member).rx for p in ports]
        self._tx = [getattr(top, p.member).tx for p in ports]
        self._counter_signals = [getattr(top.counters, n) for n in counter_names]
        self._counters = [s.init for s in self._counter_signals]
        self._cycle = 0
        self._quiet = 0
        self._request: tuple[int, bool] | None = None     # (end cycle, until idle) of run()
        self._paused = True
        self._period = 1.0 / self.clock_hz
        self._sim = Simulator(top)
        self._sim.add_clock(self._period)
        self._started = False     # the testbench is added on the first run
        self._vcd = vcd
        self._vcd_window = vcd_window
        self._vcd_cm = None
        if vcd is not None:
            fd, self._vcd_tmp = tempfile.mkstemp(suffix=".vcd", prefix="apiary-")
            os.close(fd)
            self._vcd_cm = self._sim.write_vcd(self._vcd_tmp)
            self._vcd_cm.__enter__()

    @property
    def cycle(self):
        return self._cycle

    @property
    def idle(self):
        return self._idle()

    def add_process(self, process):
        """Add an Amaranth async process (a :class:`~apiary.noc.checker.FlitTap`'s, say) that
        watches the design; before the first run, so that its cycles count as the
        simulation's do."""
        if self._started:
            raise SimError("add processes before the simulation's first run")
        self._sim.add_process(process)

    def _push(self, index, frames):
        self._state[index].queue.extend(frames)

    def _idle(self):
        return (self._quiet >= self.idle_cycles
                and all(not s.queue and s.words is None for s in self._state))

    def _run(self, cycles, until_idle, max_cycles):
        if cycles == 0 or (until_idle and self._idle()):
            return 0
        start = self._cycle
        if not self._started:
            self._sim.add_testbench(self._bench)
            self._started = True
        self._request = (start + cycles, until_idle)
        self._paused = False
        while not self._paused:
            self._sim.advance()
        return self._cycle - start

    def _collect(self):
        received = [s.received for s in self._state]
        sent = [s.sent for s in self._state]
        for s in self._state:
            s.received, s.sent = [], []
        return received, sent

    def _read_counters(self):
        return list(self._counters)

    async def _bench(self, ctx):
        states, rxs, txs = self._state, self._rx, self._tx
        gap_t, stall_t = self.gap_threshold, self.stall_threshold
        names = [p.name for p in self.ports]
        while True:
            # Drive this cycle.
            ready_out = []
            for s, rx, tx in zip(states, rxs, txs):
                r = s.rx_rng.next()
                q = s.tx_rng.next()
                if not s.offering:
                    if s.words is None and s.queue:
                        s.frame = s.queue.popleft()
                        s.words = frame_words(s.frame, s.nb)
                        s.word = 0
                    if s.words is not None and not r < gap_t:
                        s.offering = True
                        d, n, last = s.words[s.word]
                        ctx.set(rx.payload.data, d)
                        ctx.set(rx.payload.keep, (1 << n) - 1)
                        ctx.set(rx.payload.last, last)
                    ctx.set(rx.valid, s.offering)
                ready = not q < stall_t
                ctx.set(tx.ready, ready)
                ready_out.append(ready)
            # Sample what moves on this cycle's edge.
            active = False
            moves = []
            for s, rx, tx, ready in zip(states, rxs, txs, ready_out):
                took = s.offering and ctx.get(rx.ready)
                if took:
                    active = True   # quiet counts from the last word in or out
                out = None
                if ctx.get(tx.valid):
                    active = True
                    if ready:
                        out = (ctx.get(tx.payload.data),
                               int(ctx.get(tx.payload.keep)).bit_length(),
                               ctx.get(tx.payload.last))
                moves.append((took, out))
            await ctx.tick()
            t = self._cycle
            for s, name, (took, out) in zip(states, names, moves):
                if took:
                    if s.word == 0:
                        s.first = t
                    s.word += 1
                    s.offering = False
                    assert s.words is not None      # a word was offered
                    if s.word == len(s.words):
                        s.sent.append(Frame(s.frame, s.first, t, name))
                        s.words = None
                if out is not None:
                    d, n, last = out
                    if not s.out:
                        s.out_first = t
                    s.out += int(d).to_bytes(s.nb, "little")[:n]
                    if last:
                        s.received.append(Frame(bytes(s.out), s.out_first, t, name))
                        s.out = bytearray()
            self._cycle = t + 1
            self._quiet = 0 if active else self._quiet + 1
            assert self._request is not None
            end, until_idle = self._request
            if self._cycle >= end or (until_idle and self._idle()):
                self._counters = [ctx.get(sig) for sig in self._counter_signals]
                self._paused = True
                await ctx.delay(self._period / 4)

    def _close(self):
        end_testbenches(self._sim)      # the bench and the processes, waiting for a next run
        if self._vcd_cm is not None:
            self._vcd_cm.__exit__(None, None, None)
            self._vcd_cm = None
            try:
                if self._vcd_window is None:
                    shutil.copyfile(self._vcd_tmp, self._vcd)
                else:
                    start, end = self._vcd_window
                    crop_vcd(self._vcd_tmp, self._vcd, self._edge_time(start) - self._half(),
                             self._edge_time(end) + self._half())
            finally:
                os.unlink(self._vcd_tmp)

    def _half(self):
        return 0.5 / self.clock_hz

    def _edge_time(self, cycle):
        """Seconds at which cycle ``cycle`` ends (its rising edge)."""
        return (cycle + 0.5) / self.clock_hz
