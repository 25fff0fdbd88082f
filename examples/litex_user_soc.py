"""The core in a LiteX SoC of your own (docs/litex-soc.md walks through it): a CPU-less
``SoCMini`` for the Lattice ECP5 Versa board, with LiteX-Boards' clocking, LiteEth's RGMII PHY,
the UDP echo stack of ``examples/udp_echo.py`` at 64 bits in a clock domain of its own, and the
core's counters on a UART bridge. Writes the SoC's Verilog, pin file and CSR map::

    python examples/litex_user_soc.py build/my_soc     # build/my_soc/gateware/my_soc.v, .lpf

(``apiary build examples/udp_echo.py --platform versa_ecp5`` builds the project's own SoC, with
DRAM and LEDs, all the way to a bitstream.)
"""

import argparse
import os

from migen import ClockDomain

from litex.soc.integration.builder import Builder
from litex.soc.integration.soc_core import SoCMini
from litex_boards.platforms import lattice_versa_ecp5
from litex_boards.targets.lattice_versa_ecp5 import _CRG
from liteeth.phy.ecp5rgmii import LiteEthPHYRGMII

from apiary.load import load_design
from platforms.core import core_info
from platforms.litex_soc.soc import LITEX_MAC, add_core

HERE = os.path.dirname(os.path.abspath(__file__))


class MySoC(SoCMini):
    def __init__(self, core, sys_clk_freq=75e6, core_clk_freq=37.5e6):
        platform = lattice_versa_ecp5.Platform(device="LFE5UM5G", toolchain="trellis")
        self.crg = _CRG(platform, sys_clk_freq)
        SoCMini.__init__(self, platform, sys_clk_freq, ident="my SoC with an Apiary core")

        # The core's clock: a spare output of the board's PLL (its reset comes with it).
        self.cd_core = ClockDomain()
        self.crg.pll.create_clkout(self.cd_core, core_clk_freq)

        self.ethphy = LiteEthPHYRGMII(clock_pads=platform.request("eth_clocks", 0),
                                      pads=platform.request("eth", 0),
                                      tx_delay=0e-9, rx_delay=0e-9)
        add_core(self, core, ethphy=self.ethphy, clock_domain="core", counters=True)
        self.add_uartbone(uart_name="serial", baudrate=115200)    # a bus for the counters


def main(out_dir):
    design = load_design(os.path.join(HERE, "udp_echo.py"), width=64)
    core = core_info(design, out_dir, mac=LITEX_MAC)        # the Verilog, and its ports
    soc = MySoC(core)
    builder = Builder(soc, output_dir=out_dir, compile_software=False, compile_gateware=False,
                      csr_csv=os.path.join(out_dir, "csr.csv"))
    builder.build(build_name="my_soc", run=False)          # run=True: LiteX's own toolchain
    return soc, core


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="build/my_soc")
    main(parser.parse_args().out_dir)
