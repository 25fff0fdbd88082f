"""LiteDRAM's refresh logic with the ZQ-calibration timer's pulse from a register.

In every ECPIX-5 build with DRAM, `sys`'s critical path started at LiteDRAM's ZQ-calibration
timer: its ``done`` is a comparison of a 27-bit down-counter with zero, and it reaches the bank
machines and the command multiplexer through the refresher's state machine (the refresh
command's ``valid`` and ``last``) in the same cycle: 13.8-14.7 ns against 13.33 at 75 MHz
(docs/platforms.md). :class:`RegisteredZqRefresher` is LiteDRAM's refresher built from
LiteDRAM's own parts (``RefreshTimer``, ``RefreshPostponer``, ``RefreshSequencer``,
``ZQCSExecuter``) with one change: the ZQ timer is a :class:`PulseTimer`, whose pulse is a
flip-flop set the cycle before the counter reaches zero, so it is high in exactly the cycles
LiteDRAM's ``done`` is. The commands are the same, cycle for cycle
(``tests/platforms/test_refresh.py``). It is passed to LiteDRAM as
``ControllerSettings(refresh_cls=RegisteredZqRefresher)``.

(LiteDRAM's ZQ timer pulses for one cycle per period and the state machine looks at it only in
the cycle a refresh ends, so a ZQ calibration is rare; that is LiteDRAM's behaviour, kept.)
"""

from migen import FSM, If, Module, NextState, Signal
from litex.soc.interconnect import stream
from litedram.common import cmd_request_rw_layout
from litedram.core.refresher import (RefreshPostponer, RefreshSequencer, RefreshTimer,
                                     ZQCSExecuter)
from migen.fhdl.bitcontainer import log2_int


__all__ = ["PulseTimer", "RegisteredZqRefresher"]


class PulseTimer(Module):
    """LiteDRAM's ``RefreshTimer`` (``wait``, ``done``: counts ``period`` cycles while ``wait``,
    ``done`` high for one cycle when it gets to zero, then starts again), with ``done`` a
    flip-flop: set from the count the cycle before, so that it is high in the same cycles."""

    def __init__(self, period: int) -> None:
        if period < 2:
            raise ValueError(f"PulseTimer needs a period of 2 cycles or more, not {period}")
        self.wait = Signal()
        self.done = Signal()
        count = Signal(max=period, reset=period - 1)
        counting = self.wait & ~self.done
        self.sync += [
            If(counting, count.eq(count - 1)).Else(count.eq(count.reset)),
            # The count is 0 next cycle when it is 1 now and counts; a restart loads
            # period - 1, never 0.
            self.done.eq(counting & (count == 1)),
        ]


class RegisteredZqRefresher(Module):
    """LiteDRAM's ``Refresher`` (same constructor, same ``cmd`` endpoint, same commands), its
    ZQ-calibration timer a :class:`PulseTimer`."""

    def __init__(self, settings, clk_freq, zqcs_freq=1e0, postponing=1) -> None:
        timing = settings.timing
        bank_bits = settings.geom.bankbits + log2_int(settings.phy.nranks)
        self.cmd = cmd = stream.Endpoint(cmd_request_rw_layout(a=settings.geom.addressbits,
                                                               ba=bank_bits))
        if timing.tREFI < 100:
            raise ValueError("tREFI is under 100 cycles: raise the clock or disable refresh")
        self.submodules.timer = timer = RefreshTimer(timing.tREFI)
        self.submodules.postponer = postponer = RefreshPostponer(postponing)
        self.submodules.sequencer = sequencer = RefreshSequencer(cmd, timing.tRP, timing.tRFC,
                                                                 postponing)
        self.comb += [timer.wait.eq(~timer.done), postponer.req_i.eq(timer.done)]
        zq = None
        if timing.tZQCS is not None:
            self.submodules.zq_timer = zq_timer = PulseTimer(int(clk_freq / zqcs_freq))
            self.submodules.zq = zq = ZQCSExecuter(cmd, timing.tRP, timing.tZQCS)
            self.comb += zq_timer.wait.eq(~zq.done)

        self.submodules.fsm = fsm = FSM()
        fsm.act("IDLE", If(settings.with_refresh & postponer.req_o,
                           NextState("WAIT-BANK-MACHINES")))
        fsm.act("WAIT-BANK-MACHINES",
                cmd.valid.eq(1),
                If(cmd.ready, sequencer.start.eq(1), NextState("DO-REFRESH")))
        finish = [cmd.valid.eq(0), cmd.last.eq(1), NextState("IDLE")]
        if zq is None:
            fsm.act("DO-REFRESH", cmd.valid.eq(1), If(sequencer.done, *finish))
        else:
            fsm.act("DO-REFRESH",
                    cmd.valid.eq(1),
                    If(sequencer.done,
                       If(zq_timer.done, zq.start.eq(1), NextState("DO-ZQCS")).Else(*finish)))
            fsm.act("DO-ZQCS", cmd.valid.eq(1), If(zq.done, *finish))
