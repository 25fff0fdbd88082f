"""The LiteX side of the ECP5 flow: DRAM init in hardware, the counter registers, and a SoC whose
black-box instance matches the core's Verilog, LiteEth wired straight to the core's MAC port (no
place and route here; see test_build.py)."""

import pathlib
import random
import re

import pytest

from migen import Module, passive, run_simulation        # noqa: E402

from litedram.common import PhySettings                  # noqa: E402
from litedram.dfii import DFIInjector                    # noqa: E402
from litedram.init import get_sdram_phy_init_sequence    # noqa: E402
from litedram.modules import MT41K64M16                  # noqa: E402
from migen import Signal                                   # noqa: E402

from apiary.load import load_design                      # noqa: E402
from platforms.core import core_info                     # noqa: E402
from platforms.litex_soc.boards import LITEX_BOARDS      # noqa: E402
from platforms.litex_soc.build import SOC_NAME, generate_soc   # noqa: E402
from platforms.litex_soc.dram_init import DFIInitSequencer, init_steps   # noqa: E402
from platforms.litex_soc.soc import (BRIDGE_ORIGIN, LITEX_MAC, LITEX_MAC_SYS,  # noqa: E402
                                     CoreBridge, CoreCounters, add_core, bridge_address,
                                     litex_mac)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def ddr3_settings():
    phy = PhySettings(phytype="ECP5DDRPHY", memtype="DDR3", databits=16, dfi_databits=32,
                      nranks=1, nphases=2, rdphase=1, wrphase=1, cl=6, cwl=5,
                      read_latency=8, write_latency=1)
    return phy, MT41K64M16(75e6, "1:2").timing_settings


def test_dram_init_replays_litedram_sequence():
    phy, timing = ddr3_settings()
    scale = 0.01
    sequence, _ = get_sdram_phy_init_sequence(phy, timing)
    dfii = DFIInjector(addressbits=13, bankbits=3, nranks=1, databits=32, nphases=2)
    dut = DFIInitSequencer(dfii, phy, timing, delay_scale=scale)
    log = {"commands": [], "control": [], "done": None, "sel": []}

    def bench():
        p0 = dut_phases[0]
        last_control = None
        for cycle in range(2000):
            control = ((yield p0.cke), (yield p0.odt), (yield p0.reset_n))
            if control != last_control:
                log["control"].append((cycle, control))
                last_control = control
            if not (yield p0.cs_n):
                log["commands"].append((cycle, (yield p0.address), (yield p0.bank),
                                        (yield p0.ras_n), (yield p0.cas_n), (yield p0.we_n)))
            for p in dut_phases[1:]:
                assert (yield p.cs_n) == 1, "commands only on phase 0"
            log["sel"].append((yield dfii.ext_dfi_sel))
            if (yield dut.done) and log["done"] is None:
                log["done"] = cycle
            yield

    dut_phases = dfii.ext_dfi.phases
    run_simulation(dut, bench())
    expected = [s for s in sequence if "COMMAND" in s[3]]
    assert len(log["commands"]) == len(expected)
    for (_cycle, address, bank, ras_n, cas_n, we_n), (name, a, ba, cmd, _) in \
            zip(log["commands"], expected):
        assert (address, bank) == (a, ba), name
        assert (not ras_n, not cas_n, not we_n) == \
            ("RAS" in cmd, "CAS" in cmd, "WE" in cmd), name
    # Reset released, then CKE raised a scaled 50,000 counts later, before any command.
    (t_unreset, c1), (t_cke, c2) = log["control"][1], log["control"][2]
    assert c1 == (0, 1, 1) and c2 == (1, 1, 1)
    assert t_cke - t_unreset >= int(50000 * scale)
    assert log["commands"][0][0] - t_cke >= int(10000 * scale)
    # Each mode-register write waits the sequence's delay (at least one cycle) after the last.
    gaps = [b[0] - a[0] for a, b in zip(log["commands"], log["commands"][1:])]
    assert all(g >= max(1, int(d * scale)) for g, (_, _, _, _, d) in zip(gaps, expected))
    # The external DFI is selected until done, and released after.
    assert log["done"] is not None and log["done"] > log["commands"][-1][0]
    assert all(log["sel"][:log["commands"][-1][0] + 1])
    assert not any(log["sel"][log["done"]:])


def test_init_steps_reject_unknown_flags(monkeypatch):
    import platforms.litex_soc.dram_init as dram_init
    monkeypatch.setattr(dram_init, "get_sdram_phy_init_sequence",
                        lambda p, t: ([("odd", 0, 0, "DFII_COMMAND_CS|DFII_FOO", 1)], {}))
    with pytest.raises(ValueError, match="unknown flags"):
        init_steps(*ddr3_settings())


class _CountersHarness(Module):
    def __init__(self, values):
        from migen import ClockDomain
        self.clock_domains.cd_core = ClockDomain()
        self.signals = [Signal(32, reset=v) for v in values]
        self.submodules.counters = CoreCounters(list(enumerate(self.signals)))


def test_core_counters_read_by_index():
    """Writing a counter's index to ``sel`` gives its value on ``value`` (crossed from the
    core's clock by a handshake, a few cycles later); a counter that moves is read anew."""
    values = [7, 0xDEADBEEF, 123456, 1]
    dut = _CountersHarness(values)
    seen = {}

    def bench():
        for index in [2, 0, 3, 1]:
            yield dut.counters.sel.storage.eq(index)
            for _ in range(30):
                yield
            seen[index] = (yield dut.counters.value.status)
        yield dut.signals[1].eq(42)
        for _ in range(30):
            yield
        seen["moved"] = (yield dut.counters.value.status)

    run_simulation(dut, bench(), clocks={"sys": 10, "core": 27})
    assert seen == {0: 7, 1: 0xDEADBEEF, 2: 123456, 3: 1, "moved": 42}


class _BridgeHarness(Module):
    def __init__(self, domain):
        from migen import ClockDomain
        if domain != "sys":
            self.clock_domains.cd_core = ClockDomain()
        self.submodules.bridge = CoreBridge(x_bits=2, y_bits=3, domain=domain)


@pytest.mark.parametrize("domain", ["sys", "core"])
def test_core_bridge_turns_bus_cycles_into_the_controllers_words(domain):
    """Wishbone reads and writes at ``bridge_address(x, y, word)`` become the controller's bus
    port requests (the agent's x, y, the word, write and data), one at a time, crossed into
    the core's clock when it has its own; each cycle is acknowledged with its reply's word,
    however late the reply comes."""
    dut = _BridgeHarness(domain)
    words = {(3, 5, 0x1000): 0xCAFE, (0, 0, 7): 12, (2, 1, 0xFFFF): 0xDEADBEEF}
    asked, got = [], []
    rng = random.Random(1)

    @passive
    def core():                                 # the controller's side: a model of the agents
        request, reply = dut.bridge.request, dut.bridge.reply
        while True:
            yield request.ready.eq(1)
            yield
            while not (yield request.valid):
                yield
            word = []
            for name in ("x", "y", "addr", "write", "data"):
                word.append((yield getattr(request, name)))
            word = tuple(word)
            yield request.ready.eq(0)
            asked.append(word)
            x, y, addr, write, value = word
            if write:
                words[(x, y, addr)] = value
            for _ in range(rng.randint(1, 40)):
                yield
            yield reply.data.eq(0 if write else words.get((x, y, addr), 0))
            yield reply.status.eq(0)
            yield reply.valid.eq(1)
            yield
            while not (yield reply.ready):
                yield
            yield reply.valid.eq(0)

    def bus():
        def at(x, y, word):
            return (bridge_address(x, y, word, 3, origin=0)) >> 2
        got.append((yield from dut.bridge.bus.read(at(3, 5, 0x1000))))
        yield from dut.bridge.bus.write(at(2, 1, 0xFFFF), 0x12345678)
        got.append((yield from dut.bridge.bus.read(at(2, 1, 0xFFFF))))
        got.append((yield from dut.bridge.bus.read(at(0, 0, 7))))
        for _ in range(10):
            yield

    generators = {"sys": [bus()], domain: [core()]} if domain != "sys" else {"sys": [bus(),
                                                                                    core()]}
    run_simulation(dut, generators, clocks={"sys": 10, "core": 7})
    assert got == [0xCAFE, 0x12345678, 12]
    assert [w[:4] + (w[4] if w[3] else None,) for w in asked] == [   # (a read's data unused)
        (3, 5, 0x1000, 0, None), (2, 1, 0xFFFF, 1, 0x12345678), (2, 1, 0xFFFF, 0, None),
        (0, 0, 7, 0, None)]


def test_a_soc_with_the_controllers_bus_port_maps_it_for_the_uart_bridge(tmp_path):
    """udp_echo_ctl's controller has its bus port: the SoC wires it to a CoreBridge mapped at
    BRIDGE_ORIGIN, adds the UART bridge without counters=True, and its csr.csv names every
    counter and register word at its bus address, in a form LiteX's own CSV reader takes."""
    from litex.tools.remote.csr_builder import CSRBuilder
    design = load_design("examples/udp_echo_ctl.py", width=64)
    core = core_info(design, str(tmp_path), mac=LITEX_MAC)
    assert core.bridge == "ctl_bridge"
    soc = generate_soc(LITEX_BOARDS["ecpix5"], core, str(tmp_path))
    assert hasattr(soc, "core_bridge") and hasattr(soc, "uartbone")
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    connected = set(re.findall(r"\.(\w+)\s*\(", inst.group(1)))
    assert {f"ctl_bridge__{s}__{p}" for s in ("request", "reply")
            for p in ("valid", "ready", "payload")} <= connected
    csv = tmp_path / "csr.csv"
    assert f"memory_region,core_bridge,{BRIDGE_ORIGIN:#010x},4194304,io" in csv.read_text()
    bus = []                                    # what RemoteClient would put on the bus

    class Comm:
        def read(self, addr, length=None, burst="incr"):
            bus.append(("read", addr))
            return 0

        def write(self, addr, data):
            bus.append(("write", addr, data))

    regs = CSRBuilder(comm=Comm(), csr_csv=str(csv)).regs
    arp = core.control_map.tile("arp")
    regs.arp_ipv4.write(0x0A000007)
    regs.arp_mac_w1.read()
    regs.ctl_bridge_reads.read()
    ctl = core.control_map.tile("ctl")
    assert bus == [("write", bridge_address(arp.x, arp.y, arp["ipv4"].addr, 2), [0x0A000007]),
                   ("read", bridge_address(arp.x, arp.y, arp["mac"].addr + 1, 2)),
                   ("read", bridge_address(ctl.x, ctl.y, ctl["bridge_reads"].addr, 2))]


def test_a_soc_without_the_bus_port_has_no_bridge(tmp_path):
    design = load_design("examples/udp_echo_ctl.py", width=64, bridge=False)
    core = core_info(design, str(tmp_path), mac=LITEX_MAC)
    assert core.bridge is None
    soc = generate_soc(LITEX_BOARDS["ecpix5"], core, str(tmp_path))
    assert not hasattr(soc, "core_bridge") and not hasattr(soc, "uartbone")
    assert "core_bridge" not in (tmp_path / "csr.csv").read_text()


def _module_ports(verilog, module):
    m = re.search(rf"module {module}\s*\((.*?)\);", verilog, re.S)
    assert m, f"module {module} not found"
    return {p.strip() for p in m.group(1).split(",")}


@pytest.mark.parametrize("mac", ["board", "own"])
def test_versa_soc_instantiates_the_core(tmp_path, mac):
    """The Versa runs its core on sys, LiteEth's MAC domain (no crossing, no clock of its
    own); a core built with LITEX_MAC gets its own clock and crosses from sys."""
    design = load_design("examples/udp_echo.py", width=64)
    board = LITEX_BOARDS["versa_ecp5"]
    options = litex_mac(board) if mac == "board" else LITEX_MAC
    assert (options == LITEX_MAC_SYS) == (mac == "board")
    core = core_info(design, str(tmp_path), mac=options)
    with open(core.verilog_path) as f:
        core_ports = _module_ports(f.read(), core.top_name)
    soc = generate_soc(board, core, str(tmp_path))
    gateware = tmp_path / "gateware"
    text = (gateware / f"{SOC_NAME}.v").read_text()
    lpf = (gateware / f"{SOC_NAME}.lpf").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    assert inst, "the SoC does not instantiate the core"
    connected = dict(re.findall(r"\.(\w+)\s*\(([^)]*)\)", inst.group(1)))
    # Every input of the core is driven, and every connection names a real core port: one MAC
    # port (LiteEth's last_be streams, no adapter), its clock the SoC's sys clock.
    assert set(connected) <= core_ports
    assert {"clk", "rst", "eth_mac__rx__valid", "eth_mac__rx__payload",
            "eth_mac__tx__ready"} <= set(connected)
    assert {"eth_mac__rx__ready", "eth_mac__tx__valid", "eth_mac__tx__payload"} <= set(connected)
    if mac == "board":
        assert connected["clk"].strip() == "sys_clk" and "mac_clk" not in core_ports
        assert not hasattr(soc, "cd_core") and soc.core_clk_freq == 75e6
    else:
        assert connected["clk"].strip() == "core_clk" and soc.core_clk_freq == 37.5e6
        assert connected["mac_clk"].strip() == "sys_clk"
    assert core.signature.members["eth_mac"].signature.byte_enables == "last_be"
    # The counters are not brought out without counters=True; the bank's map is written anyway.
    assert not any(name.startswith("counters__") for name in connected)
    csv = (tmp_path / "counters.csv").read_text().splitlines()
    assert csv[0] == "index,name,bits,description" and len(csv) == 1 + len(core.counters)
    assert csv[1].startswith("0,eth_rx_runt,32,")
    # The RGMII pins and the 100 MHz clock are constrained; the design has no memory port, so no
    # DRAM controller.
    assert "eth_clocks0_rx" in lpf and "FREQUENCY" in lpf
    assert not hasattr(soc, "sdram") and "ddram" not in lpf


def test_versa_soc_with_counters_reads_the_bank_over_uart(tmp_path):
    """With counters=True every counter of the bank is a connected core output, behind the
    CoreCounters registers and a UART bridge (the csr map names them)."""
    design = load_design("examples/udp_echo.py", width=64)
    core = core_info(design, str(tmp_path), mac=LITEX_MAC)
    soc = generate_soc(LITEX_BOARDS["versa_ecp5"], core, str(tmp_path), counters=True)
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    connected = set(re.findall(r"\.(\w+)\s*\(", inst.group(1)))
    assert {f"counters__{c.name}" for c in core.counters} <= connected
    assert hasattr(soc, "core_counters") and hasattr(soc, "uartbone")
    csr = (tmp_path / "csr.csv").read_text()
    assert "core_counters_sel" in csr and "core_counters_value" in csr


def test_ecpix5_soc_with_a_memory_port_gets_litedram(tmp_path, loopback_dram):
    d = loopback_dram(size_bytes=1 << 16)
    core = core_info(d, str(tmp_path), mac=LITEX_MAC)
    assert core.memory_ports == {"memory_mem": (64, 13)}
    soc = generate_soc(LITEX_BOARDS["ecpix5"], core, str(tmp_path))
    lpf = (tmp_path / "gateware" / f"{SOC_NAME}.lpf").read_text()
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    assert hasattr(soc, "sdram") and "ddram_a" in lpf
    assert ".memory_mem__cmd__valid" in text and ".memory_mem__rdata__payload" in text
    assert soc.platform.device.startswith("LFE5UM5G-85F")
    # The DDR3 PHY's clocking (litex-boards' CRG): sys divided from the sys2x edge clock.
    assert "ECLKSYNCB" in text and "CLKDIVF" in text


@pytest.mark.parametrize("board, device", [("ecpix5", "LFE5UM5G-85F"),
                                           ("colorlight_5a_75b", "LFE5U-25F")])
def test_a_soc_without_dram_clocks_sys_from_the_pll(tmp_path, board, device):
    """Without memory ports there is no edge clock: nextpnr could not route the ECPIX-5's
    (its ECLKSYNCB, with no DDR3 pins to anchor it, went to a bank the PLL cannot reach)."""
    design = load_design("examples/udp_echo.py", width=64)
    core = core_info(design, str(tmp_path), mac=LITEX_MAC)
    soc = generate_soc(LITEX_BOARDS[board], core, str(tmp_path))
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    lpf = (tmp_path / "gateware" / f"{SOC_NAME}.lpf").read_text()
    assert soc.platform.device.startswith(device)
    assert "ECLKSYNCB" not in text and "CLKDIVF" not in text and "EHXPLLL" in text
    assert f"\n{core.top_name} " in text and "ddram" not in lpf
    assert re.search(r'FREQUENCY PORT "eth_clocks0?_rx" 125.0 MHz', lpf)


@pytest.mark.parametrize("board", ["versa_ecp5", "ecpix5"])
def test_a_core_with_memory_ports_gets_its_own_clock(tmp_path, loopback_dram, board):
    """Every LiteX board with DRAM runs its core on sys, except a core with memory ports:
    that one is built with LITEX_MAC and gets its own 37.5 MHz clock (LiteDRAM shares sys,
    and the memory service's paths did not close at 75 MHz beside it), and a design that
    takes clock_hz is given that clock."""
    from platforms import resolve
    b = LITEX_BOARDS[board]
    echo = load_design("examples/udp_echo.py", width=64)
    dram = loopback_dram(size_bytes=1 << 16)
    assert b.core_clk_freq is None
    assert litex_mac(b, echo) == LITEX_MAC_SYS and litex_mac(b, dram) == LITEX_MAC
    target = resolve(board)
    assert target.core_clock_hz(echo) == target.clock_hz == 75e6
    assert target.core_clock_hz(dram) == 37.5e6
    core = core_info(dram, str(tmp_path), mac=litex_mac(b, dram))
    soc = generate_soc(b, core, str(tmp_path))
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    connected = dict(re.findall(r"\.(\w+)\s*\(([^)]*)\)", inst.group(1)))
    assert connected["clk"].strip() == "core_clk" and connected["mac_clk"].strip() == "sys_clk"
    assert soc.core_clk_freq == 37.5e6 and hasattr(soc, "sdram")


def test_a_core_clock_of_its_own_on_request(tmp_path):
    """`apiary build --core-clock MHZ`: a core that would run on sys (the UDP echo on the
    ECPIX-5) is built with LITEX_MAC and runs on a clock of its own at that frequency, from
    the board PLL, crossing from sys; the design gets that clock as clock_hz."""
    from platforms import resolve
    b = LITEX_BOARDS["ecpix5"]
    echo = load_design("examples/udp_echo.py", width=64)
    assert litex_mac(b, echo) == LITEX_MAC_SYS
    assert litex_mac(b, echo, own_clock=True) == LITEX_MAC
    assert resolve("ecpix5").core_clock_hz(echo, 50e6) == 50e6
    core = core_info(echo, str(tmp_path), mac=litex_mac(b, echo, own_clock=True))
    soc = generate_soc(b, core, str(tmp_path), core_clk_freq=50e6)
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    connected = dict(re.findall(r"\.(\w+)\s*\(([^)]*)\)", inst.group(1)))
    assert connected["clk"].strip() == "core_clk" and connected["mac_clk"].strip() == "sys_clk"
    assert soc.core_clk_freq == 50e6 and soc.cd_core is not None
    assert not hasattr(soc, "sdram")


def test_the_colorlight_refuses_a_memory_port(tmp_path, loopback_dram):
    from platforms import BuildFailed
    core = core_info(loopback_dram(size_bytes=1 << 16), str(tmp_path), mac=LITEX_MAC)
    with pytest.raises(BuildFailed, match=r"memory ports \(memory_mem\) and colorlight_5a_75b "
                                          r"has no DRAM"):
        generate_soc(LITEX_BOARDS["colorlight_5a_75b"], core, str(tmp_path))


def test_your_own_soc_takes_the_core_with_add_core(tmp_path):
    """examples/litex_user_soc.py, the SoC docs/litex-soc.md shows: add_core puts the core in a
    SoC of the user's own, clocked by the domain it names, its MAC port on LiteEth (whose side
    runs on sys), its counters behind the two CSRs on the SoC's UART bridge."""
    from apiary.load import load_script
    example = load_script(ROOT / "examples" / "litex_user_soc.py")
    soc, core = example.main(str(tmp_path))
    with open(core.verilog_path) as f:
        core_ports = _module_ports(f.read(), core.top_name)
    text = (tmp_path / "gateware" / "my_soc.v").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    assert inst, "the SoC does not instantiate the core"
    connected = {k: v.strip() for k, v in re.findall(r"\.(\w+)\s*\(([^)]*)\)", inst.group(1))}
    assert set(connected) <= core_ports
    assert (connected["clk"], connected["rst"]) == ("core_clk", "core_rst")
    assert (connected["mac_clk"], connected["mac_rst"]) == ("sys_clk", "sys_rst")
    assert {"eth_mac__rx__valid", "eth_mac__rx__payload", "eth_mac__rx__ready",
            "eth_mac__tx__valid", "eth_mac__tx__payload", "eth_mac__tx__ready"} <= set(connected)
    assert {f"counters__{c.name}" for c in core.counters} <= set(connected)
    csr = (tmp_path / "csr.csv").read_text()
    assert "core_counters_sel" in csr and "core_counters_value" in csr
    assert hasattr(soc, "ethmac") and hasattr(soc, "uartbone")
    with pytest.raises(ValueError, match="already has a 'ethmac'"):
        add_core(soc, core, ethphy=soc.ethphy)
    # docs/litex-soc.md shows this SoC class as it is.
    source = (ROOT / "examples" / "litex_user_soc.py").read_text()
    cls = re.search(r"^class MySoC.*?(?=\n\n\n)", source, re.S | re.M).group(0)
    assert cls in (ROOT / "docs" / "litex-soc.md").read_text()


def test_add_core_keeps_a_core_built_for_sys_in_sys(tmp_path):
    from types import SimpleNamespace
    core = core_info(load_design(str(ROOT / "examples" / "udp_echo.py"), width=64),
                     str(tmp_path), mac=LITEX_MAC_SYS)
    soc = SimpleNamespace(platform=SimpleNamespace(add_source=lambda path: None))
    with pytest.raises(ValueError, match=r"LITEX_MAC_SYS runs in sys, LiteEth's MAC domain, "
                                         r"not in 'core'"):
        add_core(soc, core, ethphy=object())


def test_add_core_needs_a_phy_for_an_ethernet_port(tmp_path):
    from types import SimpleNamespace
    core = core_info(load_design(str(ROOT / "examples" / "udp_echo.py"), width=64),
                     str(tmp_path), mac=LITEX_MAC)
    soc = SimpleNamespace(platform=SimpleNamespace(add_source=lambda path: None))
    with pytest.raises(ValueError, match=r"Ethernet port \(eth_mac\): give add_core the "):
        add_core(soc, core)


PREAMBLE = bytes([0x55] * 7 + [0xD5])


def _wire_frame(frame):
    """``frame`` as the PHY sees it: preamble, padded to 60 bytes, FCS."""
    import zlib
    padded = frame + bytes(max(0, 60 - len(frame)))
    return PREAMBLE + padded + zlib.crc32(padded).to_bytes(4, "little")


def test_liteeth_mac_as_add_core_builds_it_carries_frames_both_ways():
    """LiteEth's MAC as add_core builds it (:class:`~platforms.litex_soc.soc.LiteEthMac`):
    64 bits in ``sys``, converted to 32 for the clock crossings, its datapath at the PHY's 8
    bits and 125 MHz with both crossings RegisteredReadCrossings, a register on the ready after
    the transmit one, a register slice before each receive stage from the CRC checker to the
    crossing, our PaddingInserter for LiteEth's, and a register slice before each transmit
    stage from padding to the PHY (the 125 MHz clock's critical paths). On a fake
    8-bit PHY that stalls at random, every frame leaves with its preamble, padding and FCS;
    frames that arrive with them reach the core without, each ending on the right byte
    (``last_be``), whether their last 64-bit word is full, half full or less."""
    import random
    from migen import ClockDomain, run_simulation
    from litex.soc.interconnect import stream
    from liteeth.common import eth_phy_description
    from platforms.litex_soc.soc import LiteEthMac

    class Phy:
        dw, with_preamble_crc, with_padding, integrated_ifg_inserter = 8, True, True, False

        def __init__(self):
            self.sink = stream.Endpoint(eth_phy_description(8))
            self.source = stream.Endpoint(eth_phy_description(8))

    class Bench(Module):
        def __init__(self):
            for name in ("sys", "eth_tx", "eth_rx"):
                setattr(self.clock_domains, f"cd_{name}", ClockDomain(name))
            self.phy = Phy()
            self.submodules.mac = LiteEthMac(self.phy, 64)

    bench = Bench()
    names = [type(m).__name__ for m in bench.mac.core.tx_datapath.pipeline]
    assert names[1:] == [
        "RegisteredReadCrossing", "Buffer", "StrideConverter", "LiteEthMACTXLastBE",
        "Buffer", "PaddingInserter", "Buffer", "LiteEthMACCRC32Inserter",
        "Buffer", "LiteEthMACPreambleInserter", "Buffer", "LiteEthMACGap", "Buffer", "Phy"]
    names = [type(m).__name__ for m in bench.mac.core.rx_datapath.pipeline]
    assert names[1:-1] == [
        "LiteEthMACPreambleChecker", "Buffer", "LiteEthMACCRC32Checker", "Buffer",
        "LiteEthMACPaddingChecker", "Buffer", "LiteEthMACRXLastBE", "Buffer", "StrideConverter",
        "Buffer", "RegisteredReadCrossing"]
    rng = random.Random(5)
    # A word and 5 bytes, 8 words, 3 words and 1 byte, and one padded to 60 bytes.
    frames = [bytes(rng.randrange(256) for _ in range(n)) for n in (61, 64, 25, 14)]
    sent, current = [], bytearray()
    received, words = [], bytearray()

    def send():
        sink = bench.mac.sink
        for frame in frames:
            for i in range(0, len(frame), 8):
                chunk = frame[i:i + 8]
                last = i + 8 >= len(frame)
                yield sink.valid.eq(1)
                yield sink.data.eq(int.from_bytes(chunk, "little"))
                yield sink.last.eq(int(last))
                yield sink.last_be.eq(1 << (len(chunk) - 1) if last else 0)
                yield
                while not (yield sink.ready):
                    yield
            yield sink.valid.eq(0)

    def transmit():
        sink = bench.phy.sink
        while len(sent) < len(frames):
            ready = rng.random() < 0.6
            yield sink.ready.eq(int(ready))
            yield
            if ready and (yield sink.valid):
                current.append((yield sink.data))
                if (yield sink.last):
                    sent.append(bytes(current))
                    current.clear()

    def arrive():
        source = bench.phy.source
        for frame in frames:
            wire = _wire_frame(frame)
            for i, byte in enumerate(wire):
                yield source.valid.eq(1)
                yield source.data.eq(byte)
                yield source.last.eq(int(i == len(wire) - 1))
                yield
            yield source.valid.eq(0)
            for _ in range(12):                     # the inter-frame gap
                yield

    def core():
        source = bench.mac.source
        yield source.ready.eq(1)
        while len(received) < len(frames):
            yield
            if (yield source.valid):
                last_be = yield source.last_be
                data = (yield source.data).to_bytes(8, "little")
                words.extend(data[:last_be.bit_length()] if (yield source.last) else data)
                if (yield source.last):
                    received.append(bytes(words))
                    words.clear()

    run_simulation(bench, {"sys": [send(), core()], "eth_tx": [transmit()],
                           "eth_rx": [arrive()]},
                   clocks={"sys": 10, "eth_tx": 8, "eth_rx": 8})
    assert sent == [_wire_frame(f) for f in frames]
    assert received == [f + bytes(max(0, 60 - len(f))) for f in frames]
