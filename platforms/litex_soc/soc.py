"""A CPU-less LiteX SoC around the Amaranth core: LiteEth's MAC and RGMII PHY on the Ethernet
port, LiteDRAM's DDR3 controller on every memory port.

The core is the design's Verilog (:func:`apiary.top.design_verilog`) as a black-box
``Instance``, clocked by ``sys`` itself, the domain of LiteEth's MAC side, when the board's
``core_clk_freq`` is ``None`` (the core built with :data:`LITEX_MAC_SYS`: no clock crossing; the
Versa and the Colorlight, whose 64-bit UDP echo core closes 75 and 50 MHz there), or else in its
own ``core`` domain at ``core_clk_freq`` from a spare output of the board PLL, behind crossing
FIFOs (:data:`LITEX_MAC`; the ECPIX-5). Around it:

* **Ethernet.** ``LiteEthMACCore`` (preamble, FCS, padding to 60 bytes) with its datapath at the
  PHY's 8 bits in the PHY's 125 MHz ``eth_rx``/``eth_tx`` domains, then the 8-bit → ``width``
  conversion and the clock-domain crossing into ``sys`` (LiteEth's own choice for gigabit; its
  datapath in ``sys`` at 64 bits would make the FCS a 64-bit CRC, about 13,000 XOR gates). Its
  ``source`` and ``sink`` are wired straight to the core's MAC port: the core is built with
  LiteEth's ``last_be`` byte enables, so the core's own MAC edge does the byte-enable
  conversion (and with :data:`LITEX_MAC`, whose MAC side is a clock domain ``mac`` that the SoC
  drives with ``sys``, the 16-word crossing into ``core``); there is no adapter here. A frame
  the MAC marks bad (FCS error) is aborted by the edge and dropped and counted by Ethernet RX
  (``<eth rx tile>_bad_fcs``).
* **DRAM.** One LiteDRAM native port per memory port of the design (``get_port``, width-converted
  to the tile's data width and crossed into ``core``). With no CPU to run the BIOS, a
  :class:`~.dram_init.DFIInitSequencer` initialises the DDR3 in hardware; commands wait until
  it is done.
* **LEDs** (when the board has them): DRAM initialised, a toggle per received frame, a toggle
  per sent frame, a heartbeat.

* **Counters** (with ``counters=True``): the core's counter bank as two registers,
  ``core_counters_sel`` (write a counter's index) and ``core_counters_value`` (read it), behind a
  UART bridge (LiteX's UARTBone on the board's ``serial`` port, for ``litex_server --uart``).
  Which index is which counter is the bank's order; the build writes it to ``counters.csv``.
  Without it the counters are not brought out (a CPU-less SoC has no bus to read them on) and
  Yosys removes their logic.

* **The control plane** (when the design's controller has its bus port,
  ``ControllerTile(bridge=True)``): every control agent's registers and counters in a Wishbone
  region of the SoC's bus at :data:`BRIDGE_ORIGIN` (:class:`CoreBridge`), behind the same UART
  bridge, so that ``litex_cli --regs`` over ``litex_server --uart`` reads and writes them by name
  (the build adds them to ``csr.csv``).

The core, its Ethernet and its counters go into the SoC through :func:`add_core`, which puts them
into any LiteX SoC (docs/litex-soc.md).
"""

from migen import (Module, Signal, Instance, If, Case, Cat, ClockSignal, ResetSignal, Constant,
                   ClockDomain, ClockDomainsRenamer)
from migen.genlib.cdc import BusSynchronizer, MultiReg

from litex.soc.integration.soc_core import SoCMini
from litex.soc.interconnect.csr import AutoCSR, CSRStatus, CSRStorage

from apiary.stream.mac import MacOptions

from .boards import OWN_CORE_CLK_FREQ
from .cdc import RegisteredReadCrossing
from .padding import PaddingInserter
from .dram_init import DFIInitSequencer


__all__ = ["ApiarySoC", "add_core", "CoreCounters", "CoreBridge", "CoreStreamPort", "LITEX_MAC",
           "LITEX_MAC_SYS", "BRIDGE_ORIGIN", "litex_mac", "stream_ports", "payload_fields",
           "bridge_address", "bridge_bits", "bridge_csr_lines"]

#: Where :func:`add_core` maps the controller's bus port into the SoC's bus (a byte address).
BRIDGE_ORIGIN = 0x8000_0000
#: The low bits of a :class:`CoreBridge` word address: the word in its agent's address map.
_WORD_BITS = 16

#: How the core's MAC edges are built for LiteEth: ``last_be`` byte enables, LiteEth pads
#: frames itself, and the MAC side runs in its own domain (``mac``, driven by the SoC's ``sys``).
LITEX_MAC = MacOptions(byte_enables="last_be", pad_to=0, domain="mac", fifo_depth=16)
#: The same for a core that runs on ``sys`` itself, LiteEth's MAC domain: no crossing.
LITEX_MAC_SYS = MacOptions(byte_enables="last_be", pad_to=0)


def litex_mac(board, design=None, own_clock=False):
    """The MAC options of a core for ``board``: :data:`LITEX_MAC_SYS` if the board runs its
    core on ``sys`` (``core_clk_freq`` is ``None``), ``design`` (if given) has no memory
    port and no ``own_clock`` is asked for, else :data:`LITEX_MAC`: a core with memory ports
    gets its own clock
    (:data:`~.boards.OWN_CORE_CLK_FREQ`), as LiteDRAM's controller shares ``sys`` and the memory
    service's receive paths do not close at the Versa's 75 MHz (52.78 MHz measured with the
    core on ``sys``)."""
    if own_clock or board.core_clk_freq is not None:
        return LITEX_MAC
    if design is not None:
        from ..core import memory_ports
        if memory_ports(design):
            return LITEX_MAC
    return LITEX_MAC_SYS


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


class CoreCounters(Module, AutoCSR):
    """The core's counter bank behind two CSRs: write a counter's index to ``sel``, read its
    value from ``value`` (a few ``sys`` cycles later: it crosses from the core's clock domain
    through a handshake, so a 32-bit value never arrives torn).

    ``counters`` is ``[(index, signal)]``, the bank's entries as signals in clock domain
    ``domain`` (the core's)."""

    def __init__(self, counters, domain="core"):
        bits = max(1, (len(counters) - 1).bit_length())
        self.sel = CSRStorage(bits, description="Index of the counter to read (counters.csv).")
        self.value = CSRStatus(32, description="Value of the selected counter.")
        sel = Signal(bits)
        value = Signal(32)
        self.specials += MultiReg(self.sel.storage, sel, odomain=domain)
        sync = getattr(self.sync, domain)
        sync += Case(sel, {index: value.eq(signal) for index, signal in counters})
        self.submodules.cdc = cdc = BusSynchronizer(32, domain, "sys")
        self.comb += [cdc.i.eq(value), self.value.status.eq(cdc.o)]


class CoreBridge(Module):
    """The controller's bus port (:data:`beehive.apps.controller.BRIDGE`) as a Wishbone slave
    (``bus``, in ``sys``) of ``2 ** (x_bits + y_bits + 18)`` bytes: the word at byte offset
    ``(x << (y_bits + 16) | y << 16 | word) << 2`` is word ``word`` of the control agent at
    (``x``, ``y``) (:func:`bridge_address`). A bus cycle becomes one request on ``request``
    (``sys``, or crossed into ``domain``); it is acknowledged with the reply's word when
    ``reply`` brings it (0 for a write, or when the agent refused the word or did not answer:
    the controller counts those in ``bridge_failed``). One word at a time: the next cycle waits
    for the reply."""

    def __init__(self, x_bits, y_bits, domain="sys"):
        from litex.soc.interconnect import stream, wishbone
        from beehive.apps.controller import BRIDGE_REPLY, BRIDGE_REQUEST
        self.bus = bus = wishbone.Interface(data_width=32, adr_width=x_bits + y_bits + _WORD_BITS)
        request_layout, reply_layout = (
            [(name, width) for name, (_, width) in payload_fields(layout).items()]
            for layout in (BRIDGE_REQUEST, BRIDGE_REPLY))
        request, reply = stream.Endpoint(request_layout), stream.Endpoint(reply_layout)
        if domain == "sys":
            self.request, self.reply = request, reply
        else:
            self.submodules.request_cdc = to_core = stream.ClockDomainCrossing(
                request_layout, cd_from="sys", cd_to=domain)
            self.submodules.reply_cdc = from_core = stream.ClockDomainCrossing(
                reply_layout, cd_from=domain, cd_to="sys")
            self.comb += [request.connect(to_core.sink), from_core.source.connect(reply)]
            self.request, self.reply = to_core.source, from_core.sink
        asked = Signal()                        # the bus cycle's request was taken
        self.comb += [
            request.valid.eq(bus.cyc & bus.stb & ~asked),
            request.addr.eq(bus.adr[:_WORD_BITS]), request.y.eq(bus.adr[_WORD_BITS:][:y_bits]),
            request.x.eq(bus.adr[_WORD_BITS + y_bits:][:x_bits]),
            request.write.eq(bus.we), request.data.eq(bus.dat_w),
            reply.ready.eq(asked),
            bus.ack.eq(asked & reply.valid), bus.dat_r.eq(reply.data),
        ]
        self.sync += If(request.valid & request.ready, asked.eq(1)).Elif(
            reply.valid & reply.ready, asked.eq(0))


def bridge_address(x, y, word, y_bits, origin=BRIDGE_ORIGIN):
    """The bus address (bytes) of ``word`` of the control agent at (``x``, ``y``) through
    :class:`CoreBridge` mapped at ``origin`` (``y_bits``: its ``y`` field's width)."""
    return origin + ((x << (y_bits + _WORD_BITS) | y << _WORD_BITS | word) << 2)


def bridge_bits(dmap):
    """``(x_bits, y_bits)``: the widths of :class:`CoreBridge`'s ``x`` and ``y`` fields for the
    control map ``dmap`` (an :class:`apiary.control.addrmap.DesignMap`)."""
    return tuple(max(1, max(getattr(t, k) for t in dmap).bit_length()) for k in ("x", "y"))


def add_core(soc, core, *, ethphy=None, clock_domain="core", counters=False, ports=None,
             bridge_origin=BRIDGE_ORIGIN):
    """Put the design's core into the LiteX SoC ``soc`` (any LiteX ``SoC``: :class:`ApiarySoC`
    or one of your own). ``core`` is a :class:`~platforms.core.CoreInfo` built with
    :data:`LITEX_MAC` (``core_info(design, out_dir, mac=LITEX_MAC)``), or with
    :data:`LITEX_MAC_SYS` for a core clocked by ``sys`` (``clock_domain="sys"``).

    * The core's Verilog becomes a source of ``soc.platform`` and a black-box ``Instance``
      clocked by ``clock_domain`` (its ``clk`` and ``rst``: the domain's clock and reset, which
      the SoC provides).
    * Its Ethernet port, if it has one, is wired to ``soc.ethmac``, a LiteEth
      ``LiteEthMACCore`` on the PHY ``ethphy`` (preamble, FCS, padding; the datapath at the
      PHY's width in its clock domains, converted to the core's width and crossed into
      ``sys``; registers between its transmit stages, :func:`_pipeline_tx`). The core's own
      MAC edge runs on ``sys`` (LITEX_MAC's ``mac`` domain) and crosses into
      ``clock_domain``; with LITEX_MAC_SYS there is no crossing.
    * With ``counters``, ``soc.core_counters`` (:class:`CoreCounters`): the counter bank behind
      the CSRs ``core_counters_sel`` and ``core_counters_value``; the SoC must give them a bus
      (a CPU, ``add_uartbone``, Etherbone).
    * If the design's controller has its bus port (``core.bridge``), ``soc.core_bridge``
      (:class:`CoreBridge`): every control agent's registers and counters in the bus region
      ``core_bridge`` at ``bridge_origin``; the SoC must give it a bus master (a CPU,
      ``add_uartbone``, Etherbone), and :func:`bridge_csr_lines` names its words for
      ``csr.csv``.
    * ``ports`` are further ``Instance`` arguments (:class:`ApiarySoC` passes its memory
      ports' there).

    Raises
    ------
    ValueError
        If the core has more than one Ethernet port, was not built with :data:`LITEX_MAC`
        (or :data:`LITEX_MAC_SYS` in ``sys``), has one and ``ethphy`` is missing, or ``soc``
        already has an ``ethmac``, ``core_counters`` or ``core_bridge``.
    """
    if len(core.mac_ports) > 1:
        raise ValueError(f"add_core wires one Ethernet port; the design has "
                         f"{len(core.mac_ports)}")
    for taken in ("ethmac" if core.mac_ports else None, "core_counters" if counters else None,
                  "core_bridge" if core.bridge is not None else None):
        if taken and hasattr(soc, taken):
            raise ValueError(f"the SoC already has a {taken!r}")
    soc.platform.add_source(core.verilog_path)
    args = {"i_clk": ClockSignal(clock_domain), "i_rst": ResetSignal(clock_domain)}
    for port in core.mac_ports:
        if core.mac == LITEX_MAC_SYS and clock_domain != "sys":
            raise ValueError(f"a core built with LITEX_MAC_SYS runs in sys, LiteEth's MAC "
                             f"domain, not in {clock_domain!r}: build it with LITEX_MAC")
        if core.mac not in (LITEX_MAC, LITEX_MAC_SYS):
            raise ValueError(f"the core's MAC edges must be built with LITEX_MAC for LiteEth, "
                             f"not {core.mac}")
        if ethphy is None:
            raise ValueError(f"the design has an Ethernet port ({port.member}): give add_core "
                             f"the LiteEth PHY (ethphy=)")
        soc.ethmac = mac = LiteEthMac(ethphy, core.width)
        sig = core.signature.members[port.member].signature
        rx = CoreStreamPort(f"{port.member}__rx", sig.members["rx"].signature)
        tx = CoreStreamPort(f"{port.member}__tx", sig.members["tx"].signature)
        args.update(rx.instance_args(into_core=True))
        args.update(tx.instance_args(into_core=False))
        if core.mac.domain is not None:
            args.update({f"i_{core.mac.domain}_clk": ClockSignal("sys"),
                         f"i_{core.mac.domain}_rst": ResetSignal("sys")})
        source, sink = mac.source, mac.sink
        soc.comb += [
            rx.valid.eq(source.valid), source.ready.eq(rx.ready),
            rx.field("data").eq(source.data), rx.field("last_be").eq(source.last_be),
            rx.field("last").eq(source.last), rx.field("error").eq(source.error != 0),
            sink.valid.eq(tx.valid), tx.ready.eq(sink.ready),
            sink.data.eq(tx.field("data")), sink.last_be.eq(tx.field("last_be")),
            sink.last.eq(tx.field("last")), sink.error.eq(0),
        ]
    if counters:
        signals = []
        for counter in core.counters:
            signal = Signal(counter.width, name=f"counter_{counter.name}")
            args[f"o_counters__{counter.name}"] = signal
            signals.append((counter.index, signal))
        soc.core_counters = CoreCounters(signals, domain=clock_domain)
    if core.bridge is not None:
        _add_bridge(soc, core, clock_domain, bridge_origin)
        sig = core.signature.members[core.bridge].signature
        request = CoreStreamPort(f"{core.bridge}__request", sig.members["request"].signature)
        reply = CoreStreamPort(f"{core.bridge}__reply", sig.members["reply"].signature)
        args.update(request.instance_args(into_core=True))
        args.update(reply.instance_args(into_core=False))
        bridge = soc.core_bridge
        soc.comb += [request.valid.eq(bridge.request.valid), bridge.request.ready.eq(request.ready),
                     bridge.reply.valid.eq(reply.valid), reply.ready.eq(bridge.reply.ready)]
        soc.comb += [request.field(name).eq(getattr(bridge.request, name))
                     for name in request.fields]
        soc.comb += [getattr(bridge.reply, name).eq(reply.field(name)) for name in reply.fields]
    args.update(ports or {})
    soc.specials += Instance(core.top_name, **args)


def _add_bridge(soc, core, clock_domain, origin):
    from litex.soc.integration.soc import SoCRegion
    x_bits, y_bits = bridge_bits(core.control_map)
    soc.core_bridge = bridge = CoreBridge(x_bits, y_bits, domain=clock_domain)
    soc.bus.add_slave("core_bridge", bridge.bus, SoCRegion(
        origin=origin, size=4 << (x_bits + y_bits + _WORD_BITS), cached=False))


def bridge_csr_lines(dmap, origin=BRIDGE_ORIGIN):
    """``csr.csv`` lines (LiteX's format) naming every counter and register word of the control
    map ``dmap`` at its :class:`CoreBridge` address, for ``litex_cli --regs`` over the SoC's
    bus."""
    from beehive.apps.etherbone import csr_entries
    _, y_bits = bridge_bits(dmap)
    return csr_entries(dmap, lambda x, y, word: bridge_address(x, y, word, y_bits, origin))


class LiteEthMac(Module):
    """LiteEth's MAC core (``LiteEthMACCore``: preamble, FCS and padding at the PHY's 8 bits in
    its 125 MHz domains) on ``ethphy``, with ``sink`` and ``source`` of ``width`` bits in
    ``sys``, as :func:`add_core` wires it to a core:

    * the clock crossings are ``CDC_WIDTH`` (32) bits wide and the transmit one 16 deep
      (LiteEth's default: the core's width, 32 deep), with ``width`` ⇄ 32 converters in ``sys``.
      The transmit crossing's read side, its read address into LUT RAM, was the PHY clock's
      critical path on a slow part (the LFE5U-25F's speed 6): half the width is half the RAM
      that address fans out to, and 16 entries are one LUT RAM cell deep, no read mux; and the
      crossing is a :class:`~.cdc.RegisteredReadCrossing`, whose address is a register; so is
      the receive one (32 deep, as LiteEth's), whose write side is then a compare of two
      registers. 32 bits at ``sys`` keep up with gigabit Ethernet from 31.25 MHz.
    * registers between its transmit stages (:func:`_pipeline_tx`) and between its receive
      stages (:func:`_pipeline_rx`).
    """

    CDC_WIDTH = 32
    TX_CDC_DEPTH = 16
    RX_CDC_DEPTH = 32

    def __init__(self, ethphy, width):
        from litex.soc.interconnect import stream
        from liteeth.common import eth_phy_description
        from liteeth.mac.core import LiteEthMACCore
        cdc_width = min(width, self.CDC_WIDTH)
        self.submodules.core = core = LiteEthMACCore(ethphy, cdc_width, with_sys_datapath=False,
                                                     tx_cdc_depth=self.TX_CDC_DEPTH)
        _pipeline_tx(core, self.TX_CDC_DEPTH)
        _pipeline_rx(core, self.RX_CDC_DEPTH)
        self.sink, self.source = core.sink, core.source
        if width != cdc_width:
            self.submodules.tx_converter = down = stream.StrideConverter(
                eth_phy_description(width), eth_phy_description(cdc_width))
            self.submodules.rx_converter = up = stream.StrideConverter(
                eth_phy_description(cdc_width), eth_phy_description(width))
            self.comb += [down.source.connect(core.sink), core.source.connect(up.sink)]
            self.sink, self.source = down.sink, up.source


def _pipeline_tx(mac, cdc_depth):
    """Registers between the transmit stages of ``mac`` (a ``LiteEthMACCore`` with its datapath
    in the PHY's domains, before it is finalised), and its crossing replaced by a
    :class:`~.cdc.RegisteredReadCrossing` ``cdc_depth`` words deep.

    Left alone, the PHY's ready goes combinationally back through the gap inserter, preamble,
    CRC, padding, ``last_be`` and 64 → 8 converter stages into the CDC's ``AsyncFIFO`` read
    enable, its next read address (Gray to binary, increment) and the LUT RAM behind it: the
    125 MHz clock's critical path on every board (8.6 ns on the Versa, 11 ns on the 5A-75B's
    speed-6 part). A ``PipeReady`` after the CDC ends that path at a register; even so, on the
    5A-75B the valid out of the CRC stage and the ready back into it still crossed the chip
    to the I/O pins and back (10.4 ns, 97.58 MHz), so each stage from padding to the PHY gets
    a register slice (``Buffer``, valid and ready registered, 8 bits wide) before it. Each adds a
    cycle of latency at 125 MHz and none of throughput. Then the crossing's own read side (the
    next read address, computed and fanned out to the LUT RAM in one cycle) was the path, at
    113 to 126 MHz across seeds on the 5A-75B: the crossing is a
    :class:`~.cdc.RegisteredReadCrossing`, whose RAM is read at a register. Then LiteEth's
    padding stage (a 16-bit word count compared with the minimum in the cycle the word is
    taken) was, at 115.58 MHz: it is a :class:`~.padding.PaddingInserter`."""
    datapath = mac.tx_datapath
    pipeline = datapath.pipeline
    cdc = _replace_crossing(datapath, "sys", "eth_tx", cdc_depth)
    # LiteEth's padding stage, replaced the same way: see PaddingInserter.
    pad = next((i for i, m in enumerate(pipeline)
                if type(m).__name__ == "LiteEthMACPaddingInserter"), None)
    if pad is not None:
        from liteeth.common import eth_fcs_length, eth_min_frame_length
        width = len(pipeline[pad].sink.data)
        padding = ClockDomainsRenamer("eth_tx")(
            PaddingInserter(width, eth_min_frame_length - eth_fcs_length))
        datapath.submodules += padding
        pipeline[pad] = padding
    _insert_slice(datapath, cdc + 1, "eth_tx", pipe_valid=False)
    slices = [m for m in pipeline[cdc + 2:] if type(m).__name__ in _SLICED_TX_STAGES]
    for stage in slices + [pipeline[-1]]:       # and before the PHY
        _insert_slice(datapath, pipeline.index(stage), "eth_tx", pipe_valid=True)


def _replace_crossing(datapath, cd_from, cd_to, depth):
    """LiteEth's clock crossing in ``datapath`` (``cd_from`` to ``cd_to``), replaced by a
    :class:`~.cdc.RegisteredReadCrossing` ``depth`` words deep before the pipeline connects it
    (left unconnected, Yosys removes LiteEth's). Returns its index in the pipeline."""
    from litex.soc.interconnect import stream
    from liteeth.common import eth_phy_description
    pipeline = datapath.pipeline
    cdc = next(i for i, m in enumerate(pipeline) if isinstance(m, stream.ClockDomainCrossing))
    width = len(pipeline[cdc].sink.data)
    crossing = RegisteredReadCrossing(eth_phy_description(width), cd_from, cd_to, depth=depth)
    datapath.submodules += crossing
    pipeline[cdc] = crossing
    return cdc


def _insert_slice(datapath, at, domain, *, pipe_valid):
    """A register slice (``stream.Buffer``, ready registered, and valid with ``pipe_valid``)
    into LiteEth's ``datapath`` pipeline before its stage ``at``, in clock domain ``domain``."""
    from litex.soc.interconnect import stream
    from liteeth.common import eth_phy_description
    pipeline = datapath.pipeline
    width = len(pipeline[at - 1].source.data)
    buffer = ClockDomainsRenamer(domain)(stream.Buffer(
        eth_phy_description(width), pipe_valid=pipe_valid, pipe_ready=True))
    datapath.submodules += buffer           # (the Pipeline only connects its stages)
    pipeline.insert(at, buffer)


def _pipeline_rx(mac, cdc_depth):
    """A register slice before each receive stage of ``mac`` from the CRC checker to the clock
    crossing (before it is finalised). The receive stages pass ``ready`` back combinationally,
    from the crossing's Gray-code compare through the 8 → 32 converter into the CRC checker's
    delay FIFO and the preamble checker: on the 5A-75B, once the transmit side was mended,
    that chain was the PHY clock's critical path at some seeds (124.81 MHz of 125). The PHY
    itself never waits, and each slice keeps a byte a cycle: a cycle of latency each, at
    125 MHz, and no drop. Then LiteEth's crossing's write side was (the read pointer, synchronised,
    through its Gray-counter compare into the LUT RAM's write enable: 126.09 MHz, 2026-12-05):
    the crossing is a :class:`~.cdc.RegisteredReadCrossing` ``cdc_depth`` words deep, whose
    "full" is one compare of two registers."""
    datapath = mac.rx_datapath
    _replace_crossing(datapath, "eth_rx", "sys", cdc_depth)
    stages = [m for m in datapath.pipeline if type(m).__name__ in _SLICED_RX_STAGES]
    for stage in stages:
        _insert_slice(datapath, datapath.pipeline.index(stage), "eth_rx", pipe_valid=True)


#: The receive stages of LiteEth's MAC that :func:`_pipeline_rx` puts a register slice before.
_SLICED_RX_STAGES = ("LiteEthMACCRC32Checker", "LiteEthMACPaddingChecker", "LiteEthMACRXLastBE",
                     "StrideConverter", "RegisteredReadCrossing")

#: The transmit stages of LiteEth's MAC that :func:`_pipeline_tx` puts a register slice before.
_SLICED_TX_STAGES = ("PaddingInserter", "LiteEthMACCRC32Inserter",
                     "LiteEthMACPreambleInserter", "LiteEthMACGap")


class ApiarySoC(SoCMini):
    """The SoC for ``board`` (a :class:`~platforms.litex_soc.boards.LiteXBoard`) and the core
    ``core`` (a :class:`~platforms.core.CoreInfo`)."""

    def __init__(self, board, core, *, sys_clk_freq=None, core_clk_freq=None, counters=False):
        sys_clk_freq = int(sys_clk_freq or board.sys_clk_freq)
        # A core built with LITEX_MAC_SYS runs on sys, LiteEth's MAC domain; any other in its
        # own clock domain.
        in_sys = core.mac == LITEX_MAC_SYS
        self.core_domain = domain = "sys" if in_sys else "core"
        self.core_clk_freq = core_clk_freq = (
            sys_clk_freq if in_sys else int(core_clk_freq or board.core_clk_freq
                                            or OWN_CORE_CLK_FREQ))
        self.board = board
        if core.memory_ports and board.dram is None:
            raise ValueError(f"the design has memory ports ({', '.join(core.memory_ports)}) "
                             f"and {board.name} has no DRAM")
        platform = board.platform()
        self.crg = board.crg(platform, sys_clk_freq, dram=bool(core.memory_ports))
        if not in_sys:
            # The core's own clock, from the board PLL's spare output.
            self.cd_core = ClockDomain()
            self.crg.pll.create_clkout(self.cd_core, core_clk_freq)  # with its reset synchroniser
        SoCMini.__init__(self, platform, sys_clk_freq, ident=f"Apiary {core.name} on {board.name}",
                         ident_version=False)
        self.core_info = core
        if len(core.mac_ports) > 1:
            raise ValueError(f"{board.name} has one Ethernet port; the design has "
                             f"{len(core.mac_ports)}")
        if core.mac_ports:
            self.ethphy = board.eth_phy(platform)

        # DRAM ----------------------------------------------------------------------------------
        args = {}
        self.dram_done = Signal()
        if core.memory_ports:
            phy_cls, module_cls, rate = board.dram()
            self.ddrphy = phy_cls(platform.request("ddram"), sys_clk_freq=sys_clk_freq)
            self.comb += self.crg.stop.eq(self.ddrphy.init.stop)
            self.comb += self.crg.reset.eq(self.ddrphy.init.reset)
            # Registered bank-machine command buffers, and the ZQ-calibration timer's pulse
            # from a register (.refresh): `sys`'s critical path on the ECPIX-5 ran through
            # LiteDRAM's controller from that timer (refresh state machine, bank machines,
            # tFAW, tRC): udp_dram.py reached 70-73 MHz of 75 with neither, 75.81 with the
            # buffers, 79.20 with both (docs/platforms.md).
            from litedram.core.controller import ControllerSettings
            from .refresh import RegisteredZqRefresher
            self.add_sdram("sdram", phy=self.ddrphy, module=module_cls(sys_clk_freq, rate),
                           with_soc_interconnect=False,
                           controller_settings=ControllerSettings(
                               cmd_buffer_buffered=True, refresh_cls=RegisteredZqRefresher))
            self.dram_init = DFIInitSequencer(self.sdram.dfii, self.ddrphy.settings,
                                              self.sdram.controller.settings.timing)
            self.specials += MultiReg(self.dram_init.done, self.dram_done, odomain=domain)
            for name, (data_width, addr_width) in core.memory_ports.items():
                args.update(self._memory_port(name, core.signature.members[name].signature,
                                              data_width, addr_width))

        # The core, LiteEth and the counters -------------------------------------------------
        add_core(self, core, ethphy=getattr(self, "ethphy", None), clock_domain=domain,
                 counters=counters, ports=args)
        if counters or core.bridge is not None:
            self.add_uartbone(uart_name="serial", baudrate=115200)
        self.rx_toggle, self.tx_toggle = Signal(), Signal()
        if core.mac_ports:
            source, sink = self.ethmac.source, self.ethmac.sink
            self.sync += [
                If(source.valid & source.ready & source.last, self.rx_toggle.eq(~self.rx_toggle)),
                If(sink.valid & sink.ready & sink.last, self.tx_toggle.eq(~self.tx_toggle)),
            ]
        self._leds(platform, sys_clk_freq)

    def _memory_port(self, name, signature, data_width, addr_width):
        port = self.sdram.crossbar.get_port(mode="both", data_width=data_width,
                                            clock_domain=self.core_domain)
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
