"""A CPU-less LiteX SoC around the Amaranth core: LiteEth's MAC and RGMII PHY on the Ethernet
port, LiteDRAM's DDR3 controller on every memory port.

The core is the design's Verilog (:func:`apiary.top.design_verilog`) as a black-box ``Instance``
in its own ``core`` clock domain (the board's ``core_clk_freq``, from a spare output of the board
PLL; the 64-bit UDP echo stack reaches about 44 MHz on an ECP5-8, below the 75 MHz ``sys`` clock
that the DDR3 PHY sets). Around it:

* **Ethernet.** ``LiteEthMACCore`` (preamble, FCS, padding to 60 bytes) with its datapath at the
  PHY's 8 bits in the PHY's 125 MHz ``eth_rx``/``eth_tx`` domains, then the 8-bit → ``width``
  conversion and the clock-domain crossing into ``sys`` (LiteEth's own choice for gigabit; its
  datapath in ``sys`` at 64 bits would make the FCS a 64-bit CRC, about 13,000 XOR gates), then
  a 16-word FIFO into ``core`` each way. The stream adapters between
  it and the core are combinational: LiteEth's ``last_be`` (one-hot, last valid byte) becomes the
  core's ``nbytes`` and back. A frame the MAC marks bad (FCS error) is handed on with an invalid
  last word (``nbytes`` past the width), which the core's receive buffer drops as malformed
  (counted in ``<eth rx tile>_oversized``); the SoC counts it too.
* **DRAM.** One LiteDRAM native port per memory port of the design (``get_port``, width-converted
  to the tile's data width and crossed into ``core``). With no CPU to run the BIOS, a
  :class:`~.dram_init.DFIInitSequencer` initialises the DDR3 in hardware; commands wait until
  it is done.
* **LEDs** (when the board has them): DRAM initialised, a toggle per received frame, a toggle
  per sent frame, a heartbeat.

The core's counters are not brought out (a CPU-less SoC has no bus to read them on); Yosys
removes their logic.
"""

from migen import (Module, Signal, Instance, If, Cat, ClockSignal, ResetSignal, Constant,
                   ClockDomain, ClockDomainsRenamer)
from migen.genlib.cdc import MultiReg

from litex.soc.integration.soc_core import SoCMini

from .dram_init import DFIInitSequencer


__all__ = ["ApiarySoC", "LiteEthAdapter", "CoreStreamPort", "stream_ports", "payload_fields"]


def payload_fields(layout):
    """``{field: (offset, width)}`` of a packed Amaranth ``StructLayout``."""
    return {name: (field.offset, field.width) for name, field in layout}


def stream_ports(prefix, signature):
    """The Verilog port names of an Amaranth stream member ``prefix``:
    ``(valid, ready, payload, payload_fields)``."""
    layout = signature.members["payload"].shape
    return (f"{prefix}__valid", f"{prefix}__ready", f"{prefix}__payload", payload_fields(layout))


class CoreStreamPort:
    """Migen signals for one Amaranth stream port of the core."""

    def __init__(self, prefix, signature):
        valid, ready, payload, fields = stream_ports(prefix, signature)
        self.names = (valid, ready, payload)
        self.fields = fields
        self.valid = Signal(name=valid)
        self.ready = Signal(name=ready)
        width = max(o + w for o, w in fields.values())
        self.payload = Signal(width, name=payload)

    def field(self, name):
        offset, width = self.fields[name]
        return self.payload[offset:offset + width]

    def instance_args(self, into_core):
        i, o = ("i_", "o_") if into_core else ("o_", "i_")
        valid, ready, payload = self.names
        return {i + valid: self.valid, o + ready: self.ready, i + payload: self.payload}


class LiteEthAdapter(Module):
    """LiteEth MAC streams (``source``: frames from the wire, ``sink``: frames to it) to and
    from the core's payload streams ``rx``/``tx`` (:class:`CoreStreamPort` objects: ``valid``,
    ``ready``, ``field(name)``), all ``width`` bits. Combinational, no latency.

    ``last_be`` (one-hot, the last valid byte) ⇄ ``nbytes``. A frame with ``error`` set on any
    word (LiteEth's FCS check) ends with ``nbytes = width/8 + 1``, a malformed word the core's
    receive buffer drops; ``fcs_errors`` counts such frames. ``rx_toggle``/``tx_toggle`` flip
    per frame.
    """

    def __init__(self, source, sink, rx, tx, width):
        self.fcs_errors = Signal(32)
        self.rx_toggle, self.tx_toggle = Signal(), Signal()
        nb = width // 8
        in_frame_error = Signal()
        error = Signal()
        last_index = Signal(max=nb)
        for i in range(nb):
            self.comb += If(source.last_be[i], last_index.eq(i))
        self.comb += [
            error.eq(in_frame_error | (source.error != 0)),
            rx.valid.eq(source.valid),
            source.ready.eq(rx.ready),
            rx.field("data").eq(source.data),
            rx.field("last").eq(source.last),
            If(source.last,
                If(error, rx.field("nbytes").eq(nb + 1)).Else(rx.field("nbytes").eq(last_index + 1))
            ).Else(rx.field("nbytes").eq(nb)),
        ]
        self.sync += If(source.valid & source.ready,
            in_frame_error.eq(~source.last & error),
            If(source.last,
                self.rx_toggle.eq(~self.rx_toggle),
                If(error, self.fcs_errors.eq(self.fcs_errors + 1))))

        nbytes = tx.field("nbytes")
        self.comb += [
            sink.valid.eq(tx.valid),
            tx.ready.eq(sink.ready),
            sink.data.eq(tx.field("data")),
            sink.last.eq(tx.field("last")),
            sink.error.eq(0),
        ]
        for i in range(nb):
            self.comb += sink.last_be[i].eq(tx.field("last") & (nbytes == i + 1))
        self.sync += If(tx.valid & tx.ready & tx.field("last"), self.tx_toggle.eq(~self.tx_toggle))


class ApiarySoC(SoCMini):
    """The SoC for ``board`` (a :class:`~platforms.litex_soc.boards.LiteXBoard`) and the core
    ``core`` (a :class:`~platforms.core.CoreInfo`)."""

    def __init__(self, board, core, *, sys_clk_freq=None, core_clk_freq=None):
        sys_clk_freq = int(sys_clk_freq or board.sys_clk_freq)
        self.core_clk_freq = core_clk_freq = int(core_clk_freq or board.core_clk_freq)
        self.board = board
        platform = board.platform()
        self.crg = board.crg(platform, sys_clk_freq)
        # The core's own clock, from the board PLL's spare output.
        self.cd_core = ClockDomain()
        self.crg.pll.create_clkout(self.cd_core, core_clk_freq)     # with its reset synchroniser
        SoCMini.__init__(self, platform, sys_clk_freq, ident=f"Apiary {core.name} on {board.name}",
                         ident_version=False)
        self.core_info = core
        platform.add_source(core.verilog_path)
        args = {"i_clk": ClockSignal("core"), "i_rst": ResetSignal("core")}

        # Ethernet ------------------------------------------------------------------------------
        self.fcs_errors = Signal(32)
        self.rx_toggle, self.tx_toggle = Signal(), Signal()
        if len(core.frame_ports) > 1:
            raise ValueError(f"{board.name} has one Ethernet port; the design has "
                             f"{len(core.frame_ports)}")
        for port in core.frame_ports:
            from liteeth.mac.core import LiteEthMACCore
            self.ethphy = board.eth_phy(platform)
            from liteeth.common import eth_phy_description
            from litex.soc.interconnect import stream
            self.ethmac = mac = LiteEthMACCore(self.ethphy, core.width, with_sys_datapath=False)
            # MAC (sys) <-> core clock.
            self.rx_cdc = rx_cdc = stream.ClockDomainCrossing(
                eth_phy_description(core.width), cd_from="sys", cd_to="core", depth=16)
            self.tx_cdc = tx_cdc = stream.ClockDomainCrossing(
                eth_phy_description(core.width), cd_from="core", cd_to="sys", depth=16)
            self.comb += [mac.source.connect(rx_cdc.sink), tx_cdc.source.connect(mac.sink)]
            rx = CoreStreamPort(port.rx, core.signature.members[port.rx].signature)
            tx = CoreStreamPort(port.tx, core.signature.members[port.tx].signature)
            args.update(rx.instance_args(into_core=True))
            args.update(tx.instance_args(into_core=False))
            self.eth_adapter = adapter = ClockDomainsRenamer({"sys": "core"})(
                LiteEthAdapter(rx_cdc.source, tx_cdc.sink, rx, tx, core.width))
            self.comb += [self.rx_toggle.eq(adapter.rx_toggle), self.tx_toggle.eq(adapter.tx_toggle),
                          self.fcs_errors.eq(adapter.fcs_errors)]

        # DRAM ----------------------------------------------------------------------------------
        self.dram_done = Signal()
        if core.memory_ports:
            if board.dram is None:
                raise ValueError(f"the design has memory ports ({', '.join(core.memory_ports)}) "
                                 f"and {board.name} has no DRAM")
            phy_cls, module_cls, rate = board.dram()
            self.ddrphy = phy_cls(platform.request("ddram"), sys_clk_freq=sys_clk_freq)
            self.comb += self.crg.stop.eq(self.ddrphy.init.stop)
            self.comb += self.crg.reset.eq(self.ddrphy.init.reset)
            self.add_sdram("sdram", phy=self.ddrphy, module=module_cls(sys_clk_freq, rate),
                           with_soc_interconnect=False)
            self.dram_init = DFIInitSequencer(self.sdram.dfii, self.ddrphy.settings,
                                              self.sdram.controller.settings.timing)
            self.specials += MultiReg(self.dram_init.done, self.dram_done, odomain="core")
            for name, (data_width, addr_width) in core.memory_ports.items():
                args.update(self._memory_port(name, core.signature.members[name].signature,
                                              data_width, addr_width))

        self.specials += Instance(core.top_name, **args)
        self._leds(platform, sys_clk_freq)

    def _memory_port(self, name, signature, data_width, addr_width):
        port = self.sdram.crossbar.get_port(mode="both", data_width=data_width,
                                            clock_domain="core")
        cmd = CoreStreamPort(f"{name}__cmd", signature.members["cmd"].signature)
        wdata = CoreStreamPort(f"{name}__wdata", signature.members["wdata"].signature)
        rdata = CoreStreamPort(f"{name}__rdata", signature.members["rdata"].signature)
        if addr_width > len(port.cmd.addr):
            raise ValueError(f"memory port {name} addresses {2 ** addr_width} words of "
                             f"{data_width} bits; the DRAM has {2 ** len(port.cmd.addr)}")
        self.comb += [
            port.cmd.valid.eq(cmd.valid & self.dram_done),
            cmd.ready.eq(port.cmd.ready & self.dram_done),
            port.cmd.we.eq(cmd.field("we")),
            port.cmd.addr.eq(cmd.field("addr")),
            port.wdata.valid.eq(wdata.valid),
            wdata.ready.eq(port.wdata.ready),
            port.wdata.data.eq(wdata.field("data")),
            port.wdata.we.eq(wdata.field("we")),
            rdata.valid.eq(port.rdata.valid),
            port.rdata.ready.eq(rdata.ready),
            rdata.field("data").eq(port.rdata.data),
        ]
        args = {}
        args.update(cmd.instance_args(into_core=False))
        args.update(wdata.instance_args(into_core=False))
        args.update(rdata.instance_args(into_core=True))
        return args

    def _leds(self, platform, sys_clk_freq):
        try:
            leds = platform.request_all("user_led")
        except Exception:
            return
        beat = Signal(max=int(sys_clk_freq))
        heartbeat = Signal()
        self.sync += If(beat == 0, beat.eq(int(sys_clk_freq) // 2 - 1),
                        heartbeat.eq(~heartbeat)).Else(beat.eq(beat - 1))
        states = [self.dram_done, self.rx_toggle, self.tx_toggle, heartbeat]
        n = min(len(leds), len(states))
        invert = (1 << n) - 1 if self.board.led_active_low else 0
        self.comb += leds[:n].eq(Cat(*states[:n]) ^ Constant(invert, n))
