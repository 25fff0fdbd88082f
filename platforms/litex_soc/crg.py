"""The clocking of a SoC without DDR3: ``sys`` straight from one ECP5 PLL on the board's clock.

LiteX-Boards' targets for DDR3 boards (``lattice_versa_ecp5``, ``lambdaconcept_ecpix5``) make
``sys`` by dividing a ``sys2x`` edge clock (PLL → ``ECLKSYNCB`` → ``CLKDIVF``), which the DDR3
PHY needs. Without the PHY nothing ties the ``ECLKSYNCB`` to a bank, so nextpnr puts it in the
first free one, and the PLL may be unable to reach it: on the ECPIX-5 the PLL sits beside the
100 MHz clock pin (upper right) and the ``ECLKSYNCB`` lands in bank 7 (left), and routing stops
with "Unable to route edge clock source ... using dedicated routing". A design without memory
ports therefore gets this CRG instead (:meth:`~.boards.LiteXBoard.crg`).
"""

from migen import ClockDomain, Signal

from litex.gen import LiteXModule
from litex.soc.cores.clock import ECP5PLL


__all__ = ["PllCRG"]


class PllCRG(LiteXModule):
    """``sys`` at ``sys_clk_freq`` from an ``ECP5PLL`` on the platform's default clock; the PLL
    is ``self.pll`` (the SoC adds the core's clock to it). ``reset_n`` names an active-low
    reset input of the board (a button), or None."""

    def __init__(self, platform, sys_clk_freq, reset_n=None):
        self.rst = Signal()
        self.cd_sys = ClockDomain()
        self.pll = pll = ECP5PLL()
        reset = self.rst
        if reset_n:
            reset = reset | ~platform.request(reset_n)
        self.comb += pll.reset.eq(reset)
        pll.register_clkin(platform.request(platform.default_clk_name),
                           1e9 / platform.default_clk_period)
        pll.create_clkout(self.cd_sys, sys_clk_freq)    # with its reset synchroniser
