"""LiteX boards the SoC builds for: pin lists from LiteX-Boards, clocking from its targets.

Each board names what the SoC needs and nothing else: the LiteX platform, the clock and reset
generator for DDR3 (its target's: ``sys`` divided from a ``sys2x`` edge clock), the reset button
of the plain PLL clocking used without DRAM (:mod:`.crg`), the Ethernet PHY, the DRAM PHY and
chip, and the nextpnr device arguments.
"""

from dataclasses import dataclass
from typing import Callable, Optional

from apiary.synth import ECP5_PARTS


__all__ = ["LiteXBoard", "LITEX_BOARDS", "OWN_CORE_CLK_FREQ"]


#: The core's own clock where a board names none (the ECPIX-5's; any core built with LITEX_MAC
#: on a board that runs its core on sys): 64 bits at 37.5 MHz is 2.4 Gb/s.
OWN_CORE_CLK_FREQ = 37.5e6


@dataclass(frozen=True)
class LiteXBoard:
    name: str
    description: str
    platform: Callable          # () -> LiteX platform
    eth_phy: Callable           # (platform) -> LiteEth PHY
    dram: Optional[Callable]    # () -> (PHY class, module class, rate), or None
    nextpnr_args: tuple         # device and package, e.g. ("--um5g-45k", "--package", "CABGA381")
    dram_crg: Optional[Callable] = None  # (platform, sys_clk_freq) -> CRG with .stop/.reset
    reset_n: Optional[str] = None       # the active-low reset button, for the PLL-only CRG
    lpf: str = ""               # extra LPF lines
    sys_clk_freq: float = 75e6
    # The core's clock: None runs the core on sys, LiteEth's MAC domain, with no clock crossing
    # (the pipelined 64-bit echo stack reaches 85.7 MHz there on the Versa: 75 MHz sys is 4.8
    # Gb/s at 64 bits), except a core with memory ports (soc.litex_mac); a frequency gives it
    # its own PLL output behind crossing FIFOs.
    core_clk_freq: Optional[float] = OWN_CORE_CLK_FREQ
    led_active_low: bool = False
    # Design function arguments for this board, given to a design function that takes them
    # unless the user sets them (platforms.Target.design_defaults).
    design_options: tuple = ()
    # Design settings for this board (design.settings), given to every design built for it
    # unless the design sets them itself (platforms.Target.apply_design_settings).
    design_settings: tuple = ()

    @property
    def core_hz(self) -> float:
        """The core's clock in Hz: its own, or ``sys``'s."""
        return self.core_clk_freq or self.sys_clk_freq

    def crg(self, platform, sys_clk_freq, *, dram=False):
        """The clock and reset generator: the board target's DDR3 one if ``dram``, otherwise
        ``sys`` straight from the PLL (:class:`~.crg.PllCRG`; the DDR3 one's edge clock can be
        unroutable without the DDR3 PHY beside it). Either has the PLL as ``.pll``."""
        if dram:
            assert self.dram_crg is not None, f"{self.name} has no DRAM clock generator"
            return self.dram_crg(platform, sys_clk_freq)
        from .crg import PllCRG
        return PllCRG(platform, sys_clk_freq, reset_n=self.reset_n)


def _versa_platform():
    from litex_boards.platforms import lattice_versa_ecp5
    return lattice_versa_ecp5.Platform(device="LFE5UM5G", toolchain="trellis")


def _versa_crg(platform, sys_clk_freq):
    from litex_boards.targets.lattice_versa_ecp5 import _CRG
    return _CRG(platform, sys_clk_freq)


def _versa_eth(platform):
    from liteeth.phy.ecp5rgmii import LiteEthPHYRGMII
    return LiteEthPHYRGMII(clock_pads=platform.request("eth_clocks", 0),
                           pads=platform.request("eth", 0), tx_delay=0e-9, rx_delay=0e-9)


def _versa_dram():
    from litedram.modules import MT41K64M16
    from litedram.phy import ECP5DDRPHY
    return ECP5DDRPHY, MT41K64M16, "1:2"


def _ecpix5_platform():
    from litex_boards.platforms import lambdaconcept_ecpix5
    return lambdaconcept_ecpix5.Platform(device="85F", toolchain="trellis")


def _ecpix5_crg(platform, sys_clk_freq):
    from litex_boards.targets.lambdaconcept_ecpix5 import _CRG
    return _CRG(platform, sys_clk_freq)


def _ecpix5_eth(platform):
    from liteeth.phy.ecp5rgmii import LiteEthPHYRGMII
    return LiteEthPHYRGMII(clock_pads=platform.request("eth_clocks"),
                           pads=platform.request("eth"), rx_delay=0e-9)


def _ecpix5_dram():
    from litedram.modules import MT41K256M16
    from litedram.phy import ECP5DDRPHY
    return ECP5DDRPHY, MT41K256M16, "1:2"


def _colorlight_5a_75b_platform(revision):
    def platform():
        from litex_boards.platforms import colorlight_5a_75b
        return colorlight_5a_75b.Platform(revision=revision, toolchain="trellis")
    return platform


def _colorlight_eth(platform):
    # As litex-boards' colorlight_5a_75x target: the PHY delays the receive clock itself.
    from liteeth.phy.ecp5rgmii import LiteEthPHYRGMII
    return LiteEthPHYRGMII(clock_pads=platform.request("eth_clocks", 0),
                           pads=platform.request("eth", 0), tx_delay=0e-9)


def _colorlight_5a_75b(revision, name):
    # The 5A-75B's SDR SDRAM (2-8 MiB, 32-bit) is not used: LiteDRAM's GENSDRPHY is not wired
    # up here, so dram=None. Its one LED is also the serial port's TX (litex-boards' serial);
    # its button, reset for litex-boards' CRG, is the serial RX: neither is used.
    return LiteXBoard(
        name=name,
        description=f"Colorlight 5A-75B v{revision} (LFE5U-25F): RGMII gigabit Ethernet "
                    f"(port 0 of 2), no DRAM used",
        platform=_colorlight_5a_75b_platform(revision), eth_phy=_colorlight_eth, dram=None,
        nextpnr_args=ECP5_PARTS["25f"],
        sys_clk_freq=50e6, core_clk_freq=None,
        # The 25F's stack as small as LiteEth's: IPv4 RX without options, UDP and ICMP
        # checksums not verified (examples/udp_echo.py), router FIFOs of 2 flits in registers,
        # one packet decided ahead in each layer, lengths in 11 bits (frames up to 2,047
        # bytes), no 802.1Q tags, no register queue at each layer's input;
        # docs/performance.md gives the areas and the cycles they cost.
        design_options=(("ip_options", False), ("verify_checksums", False)),
        design_settings=(("router_depth", 2), ("header_queue_depth", 1),
                         ("max_message_bytes", 2047), ("vlan", False),
                         ("registered_inputs", False)))


LITEX_BOARDS = {
    "versa_ecp5": LiteXBoard(
        name="versa_ecp5",
        description="Lattice ECP5-5G Versa (LFE5UM5G-45F): RGMII gigabit Ethernet, 128 MiB DDR3",
        platform=_versa_platform, eth_phy=_versa_eth, dram=_versa_dram,
        nextpnr_args=ECP5_PARTS["45f"],
        dram_crg=_versa_crg, reset_n="rst_n", led_active_low=True, core_clk_freq=None),
    "ecpix5": LiteXBoard(
        name="ecpix5",
        description="LambdaConcept ECPIX-5 (LFE5UM5G-85F): RGMII gigabit Ethernet, 512 MiB DDR3",
        platform=_ecpix5_platform, eth_phy=_ecpix5_eth, dram=_ecpix5_dram,
        nextpnr_args=ECP5_PARTS["85f"],
        dram_crg=_ecpix5_crg, reset_n="rst_n", core_clk_freq=None),
    "colorlight_5a_75b": _colorlight_5a_75b("8.0", "colorlight_5a_75b"),
    "colorlight_5a_75b_v7": _colorlight_5a_75b("7.0", "colorlight_5a_75b_v7"),
}
