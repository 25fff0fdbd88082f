"""The boards the Vivado flow knows: part, clocks, the QSFP28 cage used and its 100G MAC.

Every pin and site below comes from a public source named next to it; nothing is guessed. Where a
value rests on a convention of the board's firmware rather than on the schematic (the Enzian's
programmable clocks), the note says so.

Sources
-------
U200
    ``litex_boards/platforms/xilinx_alveo_u200.py`` (litex-boards 2023.12, installed): the
    ``clk300`` and ``qsfp28`` 0 pins, the user LEDs. Corundum
    ``fpga/mqnic/AU200/fpga_100g/fpga.xdc`` (github.com/corundum/corundum): the same pins with
    their banks (QSFP0 lanes in GTY quad 231 = ``GTYE4_CHANNEL_X1Y48``..``X1Y51``, its reference
    clock ``MGTREFCLK1_231`` from the SI5335 at 161.1328125 MHz when ``FS = 0b10``) and the
    LVCMOS12 standard of the QSFP sideband pins. Corundum
    ``fpga/mqnic/AU200/fpga_100g/ip/cmac_usplus_0.tcl``: ``CMACE4_X0Y8`` with GT group
    ``X1Y48~X1Y51`` for QSFP0.
Enzian
    fpgasystems/Coyote ``hw/constraints/enzian/enzian_net_0.xdc``: "CMAC 0" reference clock on
    ``AV38``/``AV39`` (322.265625 MHz, ``create_clock -period 3.103``), its lanes (commented
    there) on ``AU40``.. ``AP44``. fpgasystems/Coyote ``hw/scripts/ip_inst/network_stack.tcl``
    (``cfg(fdev) eq "enzian"``): ``CMACE4_X0Y2``, GT group ``X0Y8~X0Y11``, 322.265625 MHz.
    fpgasystems/Coyote ``hw/constraints/enzian/enzian_base.xdc``: the programmable fabric clocks
    ``prgc_clk[1]`` on ``AW28``/``AY28``, ``DIFF_SSTL12``. The ETH Enzian shells
    (e.g. KireinaHoro/enzian-pio-nic ``pio_nic_eci``: "prgc1 ... programmed to 300MHz", and
    Coyote's Enzian XDC ``create_clock -period 3.333`` on ``prgc_clk_p[1]``) run PRGC1 at
    300 MHz. Cross-check: Corundum ``fpga/mqnic/XUPP3R/fpga_100g/fpga.xdc`` (same
    ``flgb2104`` package) names ``AV38``/``AV39`` ``MGTREFCLK1P/N_121`` and places quad 120 at
    ``X0Y4``..``X0Y7`` and quad 122 at ``X0Y12``..``X0Y15``, so quad 121 is ``X0Y8``..``X0Y11``,
    matching Coyote's GT group.
"""

from dataclasses import dataclass, field


__all__ = ["Pin", "DiffClock", "QsfpPort", "Board", "VIVADO_BOARDS", "get_board"]


@dataclass(frozen=True)
class Pin:
    """A single-ended top-level port driven to a constant (or from a status signal)."""
    name: str
    loc: str
    iostandard: str
    drive: int | str    # a constant (0 or 1) or a status signal of platforms.vivado.project.STATUS
    comment: str = ""


@dataclass(frozen=True)
class DiffClock:
    """A differential clock input: pins, I/O standard (``None`` for a GT reference clock,
    which has no I/O standard) and frequency."""
    p: str
    n: str
    mhz: float
    iostandard: str | None = None
    comment: str = ""

    @property
    def period_ns(self):
        return round(1000.0 / self.mhz, 3)


@dataclass(frozen=True)
class QsfpPort:
    """One QSFP28 cage used as a 100GBASE-R4 port on a CMAC hard block.

    ``lanes`` are the four GTY channels (``X?Y?``) in lane order; ``rx_pins``/``tx_pins`` the
    P-side package pins of those lanes, for reference only: the GT channel LOCs the IP sets place
    them (the wrapper does not constrain them again).
    """
    name: str
    refclk: DiffClock
    cmac_site: str
    gt_group: str
    lanes: tuple
    rx_pins: tuple
    tx_pins: tuple
    comment: str = ""


@dataclass(frozen=True)
class Board:
    """Everything the Vivado project generator needs to know about a board."""
    name: str
    title: str
    part: str
    sysclk: DiffClock
    qsfp: QsfpPort
    outputs: tuple = ()          # Pins driven by the wrapper (QSFP sideband, LEDs)
    bitstream: tuple = ()        # set_property lines for [current_design]
    sources: tuple = ()
    notes: tuple = ()
    core_mhz: float = 250.0      # Beehive's clock
    init_mhz: float = 100.0      # CMAC init_clk / DRP clock (GT_DRP_CLK)
    extra: dict = field(default_factory=dict)


U200 = Board(
    name="u200",
    title="Alveo U200",
    part="xcu200-fsgd2104-2-e",
    sysclk=DiffClock(
        p="AY37", n="AY38", mhz=300.0, iostandard="DIFF_SSTL12",
        comment="system clock 0 (litex-boards clk300 0; DDR4 C0 bank)"),
    qsfp=QsfpPort(
        name="QSFP28 cage 0",
        refclk=DiffClock(
            p="K11", n="K10", mhz=161.1328125,
            comment="MGTREFCLK1_231 from the SI5335 (FS = 0b10 selects 161.1328125 MHz)"),
        cmac_site="CMACE4_X0Y8",
        gt_group="X1Y48~X1Y51",
        lanes=("X1Y48", "X1Y49", "X1Y50", "X1Y51"),
        rx_pins=("N4", "M2", "L4", "K2"),
        tx_pins=("N9", "M7", "L9", "K7"),
        comment="GTY quad 231"),
    outputs=(
        Pin("qsfp_fs0", "AT20", "LVCMOS12", 0,
            "SI5335 frequency select: FS = 0b10 -> 161.1328125 MHz"),
        Pin("qsfp_fs1", "AU22", "LVCMOS12", 1, ""),
        Pin("qsfp_refclk_reset", "AT22", "LVCMOS12", 0, "SI5335 running"),
        Pin("qsfp_resetl", "BE17", "LVCMOS12", 1, "QSFP module out of reset"),
        Pin("qsfp_lpmode", "BD18", "LVCMOS12", 0, "QSFP module in high-power mode"),
        Pin("qsfp_modsell", "BE16", "LVCMOS12", 0, "QSFP module selected for I2C"),
        Pin("led0", "BC21", "LVCMOS12", "rx_aligned", "CMAC receive aligned (link up)"),
        Pin("led1", "BB21", "LVCMOS12", "heartbeat", "Beehive clock running, out of reset"),
        Pin("led2", "BA20", "LVCMOS12", "rx_overflow_seen",
            "a received word was lost (RX FIFO full), sticky"),
    ),
    bitstream=(
        "CONFIG_VOLTAGE 1.8",
        "CFGBVS GND",
        "BITSTREAM.GENERAL.COMPRESS TRUE",
        "BITSTREAM.CONFIG.OVERTEMPSHUTDOWN ENABLE",
    ),
    sources=(
        "litex_boards/platforms/xilinx_alveo_u200.py (litex-boards 2023.12): clk300 0, "
        "qsfp28 0, user_led",
        "github.com/corundum/corundum fpga/mqnic/AU200/fpga_100g/fpga.xdc: banks, "
        "FS = 0b10 for 161.1328125 MHz, LVCMOS12 sideband",
        "github.com/corundum/corundum fpga/mqnic/AU200/fpga_100g/ip/cmac_usplus_0.tcl: "
        "CMACE4_X0Y8, GT group X1Y48~X1Y51",
    ),
)


ENZIAN = Board(
    name="enzian",
    title="Enzian",
    part="xcvu9p-flgb2104-3-e",
    sysclk=DiffClock(
        p="AW28", n="AY28", mhz=300.0, iostandard="DIFF_SSTL12",
        comment="programmable fabric clock PRGC1, set to 300 MHz by the BMC in the Enzian "
                "shells (not a fixed oscillator: check your BMC's clock setup)"),
    qsfp=QsfpPort(
        name="QSFP28 cage 0 (\"CMAC 0\" in Coyote)",
        refclk=DiffClock(
            p="AV38", n="AV39", mhz=322.265625,
            comment="MGTREFCLK1_121, 322.265625 MHz"),
        cmac_site="CMACE4_X0Y2",
        gt_group="X0Y8~X0Y11",
        lanes=("X0Y8", "X0Y9", "X0Y10", "X0Y11"),
        rx_pins=("AU45", "AT43", "AR45", "AP43"),
        tx_pins=("AU40", "AT38", "AR40", "AP38"),
        comment="GTY quad 121"),
    outputs=(),
    bitstream=(
        "BITSTREAM.GENERAL.COMPRESS TRUE",
    ),
    sources=(
        "github.com/fpgasystems/Coyote hw/constraints/enzian/enzian_net_0.xdc: CMAC 0 refclk "
        "AV38/AV39 (period 3.103 ns), lane pins",
        "github.com/fpgasystems/Coyote hw/scripts/ip_inst/network_stack.tcl (fdev enzian): "
        "CMACE4_X0Y2, GT group X0Y8~X0Y11, GT_REF_CLK_FREQ 322.265625",
        "github.com/fpgasystems/Coyote hw/constraints/enzian/enzian_base.xdc: prgc_clk[1] "
        "AW28/AY28 DIFF_SSTL12",
        "github.com/KireinaHoro/enzian-pio-nic (pio_nic_eci: prgc1 'programmed to 300MHz')",
        "github.com/corundum/corundum fpga/mqnic/XUPP3R/fpga_100g/fpga.xdc (xcvu9p-flgb2104): "
        "AV38/AV39 = MGTREFCLK1_121, quads 120/122 = X0Y4-7/X0Y12-15",
    ),
    notes=(
        "The QSFP28 cages' sideband (reset, low-power mode, I2C) is managed by the Enzian BMC, "
        "not by the FPGA: the wrapper drives no QSFP sideband pins.",
        "PRGC1 runs at 300 MHz only if the BMC programmed it so (the ETH Enzian shells do); if "
        "your BMC sets another frequency, change sysclk in platforms/vivado/boards.py.",
        "Not checked against the Enzian schematic (not public); the values agree between "
        "Coyote's constraints, its CMAC configuration and the flgb2104 package mapping.",
    ),
)


VIVADO_BOARDS = {"u200": U200, "enzian": ENZIAN}


def get_board(board):
    """A :class:`Board` from itself or its name (``"u200"``, ``"enzian"``)."""
    if isinstance(board, Board):
        return board
    try:
        return VIVADO_BOARDS[str(board).lower()]
    except KeyError:
        names = ", ".join(sorted(VIVADO_BOARDS))
        raise ValueError(f"unknown Vivado board {board!r}; known boards: {names}") from None
