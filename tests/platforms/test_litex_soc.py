"""The LiteX side of the ECP5 flow: DRAM init in hardware, the LiteEth ⇄ core stream adapter, and
a SoC whose black-box instance matches the core's Verilog (no place and route here; see
test_build.py)."""

import re

import pytest

from migen import Module, run_simulation                 # noqa: E402

from litedram.common import PhySettings                  # noqa: E402
from litedram.dfii import DFIInjector                    # noqa: E402
from litedram.init import get_sdram_phy_init_sequence    # noqa: E402
from litedram.modules import MT41K64M16                  # noqa: E402
from liteeth.common import eth_phy_description           # noqa: E402
from litex.soc.interconnect import stream                # noqa: E402

from apiary.load import load_design                      # noqa: E402
from apiary.noc.flit import payload_signature           # noqa: E402
from platforms.core import core_info                     # noqa: E402
from platforms.litex_soc.boards import LITEX_BOARDS      # noqa: E402
from platforms.litex_soc.build import SOC_NAME, generate_soc   # noqa: E402
from platforms.litex_soc.dram_init import DFIInitSequencer, init_steps   # noqa: E402
from platforms.litex_soc.soc import CoreStreamPort, LiteEthAdapter     # noqa: E402


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
    for (cycle, address, bank, ras_n, cas_n, we_n), (name, a, ba, cmd, _) in \
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


class _AdapterHarness(Module):
    def __init__(self, width):
        self.source = stream.Endpoint(eth_phy_description(width))   # from the MAC
        self.sink = stream.Endpoint(eth_phy_description(width))     # to the MAC
        self.rx = CoreStreamPort("rx", payload_signature(width))
        self.tx = CoreStreamPort("tx", payload_signature(width))
        self.submodules.adapter = LiteEthAdapter(self.source, self.sink, self.rx, self.tx, width)


@pytest.mark.parametrize("width", [64, 128])
def test_liteeth_adapter(width):
    nb = width // 8
    dut = _AdapterHarness(width)
    # Frames from the MAC: (length, error on the last word?)
    frames = [(nb * 2 + 3, False), (nb, False), (nb + 1, True), (nb * 3, False)]
    seen = []

    def mac_side():
        for length, error in frames:
            data = bytes((length + i) & 0xFF for i in range(length))
            words = [data[i:i + nb] for i in range(0, length, nb)]
            for k, w in enumerate(words):
                last = k == len(words) - 1
                yield dut.source.valid.eq(1)
                yield dut.source.data.eq(int.from_bytes(w, "little"))
                yield dut.source.last.eq(last)
                yield dut.source.last_be.eq(1 << (len(w) - 1) if last else 0)
                yield dut.source.error.eq((1 << nb) - 1 if last and error else 0)
                yield dut.rx.ready.eq(1)
                yield
                assert (yield dut.source.ready)
                seen.append(((yield dut.rx.field("data")), (yield dut.rx.field("nbytes")),
                             (yield dut.rx.field("last")), (yield dut.rx.valid)))
        yield dut.source.valid.eq(0)
        yield
        yield
        assert (yield dut.adapter.fcs_errors) == 1

    run_simulation(dut, mac_side())
    k = 0
    for length, error in frames:
        data = bytes((length + i) & 0xFF for i in range(length))
        n_words = -(-length // nb)
        for j in range(n_words):
            word, nbytes, last, valid = seen[k]
            k += 1
            chunk = data[j * nb:(j + 1) * nb]
            assert valid and last == (j == n_words - 1)
            assert word == int.from_bytes(chunk, "little")
            if not last:
                assert nbytes == nb
            else:
                assert nbytes == (nb + 1 if error else len(chunk))

    # Core → MAC: nbytes becomes one-hot last_be, only on the last word.
    dut = _AdapterHarness(width)
    out = []

    def core_side():
        for nbytes, last in [(nb, 0), (3, 1), (nb, 1), (1, 1)]:
            yield dut.tx.valid.eq(1)
            yield dut.tx.field("nbytes").eq(nbytes)
            yield dut.tx.field("last").eq(last)
            yield dut.tx.field("data").eq(0xAB)
            yield dut.sink.ready.eq(1)
            yield
            out.append(((yield dut.sink.last_be), (yield dut.sink.last), (yield dut.sink.data),
                        (yield dut.tx.ready)))
    run_simulation(dut, core_side())
    assert out == [(0, 0, 0xAB, 1), (1 << 2, 1, 0xAB, 1), (1 << (nb - 1), 1, 0xAB, 1),
                   (1, 1, 0xAB, 1)]


def _module_ports(verilog, module):
    m = re.search(rf"module {module}\s*\((.*?)\);", verilog, re.S)
    assert m, f"module {module} not found"
    return {p.strip() for p in m.group(1).split(",")}


def test_versa_soc_instantiates_the_core(tmp_path):
    design = load_design("examples/udp_echo.py", width=64)
    core = core_info(design, str(tmp_path))
    with open(core.verilog_path) as f:
        core_ports = _module_ports(f.read(), core.top_name)
    soc = generate_soc(LITEX_BOARDS["versa_ecp5"], core, str(tmp_path))
    gateware = tmp_path / "gateware"
    text = (gateware / f"{SOC_NAME}.v").read_text()
    lpf = (gateware / f"{SOC_NAME}.lpf").read_text()
    inst = re.search(rf"\n{core.top_name}\s+\w+\s*\((.*?)\n\);", text, re.S)
    assert inst, "the SoC does not instantiate the core"
    connected = set(re.findall(r"\.(\w+)\s*\(", inst.group(1)))
    # Every input of the core is driven, and every connection names a real core port.
    assert connected <= core_ports
    inputs = {"clk", "rst", "eth_rx_mac_rx__valid", "eth_rx_mac_rx__payload",
              "eth_tx_mac_tx__ready"}
    assert inputs <= connected
    assert {"eth_rx_mac_rx__ready", "eth_tx_mac_tx__valid", "eth_tx_mac_tx__payload"} <= connected
    # The RGMII pins and the 100 MHz clock are constrained; the design has no memory port, so no
    # DRAM controller.
    assert "eth_clocks0_rx" in lpf and "FREQUENCY" in lpf
    assert not hasattr(soc, "sdram") and "ddram" not in lpf


def test_ecpix5_soc_with_a_memory_port_gets_litedram(tmp_path, loopback_dram):
    d = loopback_dram(size_bytes=1 << 16)
    core = core_info(d, str(tmp_path))
    assert core.memory_ports == {"memory_mem": (64, 13)}
    soc = generate_soc(LITEX_BOARDS["ecpix5"], core, str(tmp_path))
    lpf = (tmp_path / "gateware" / f"{SOC_NAME}.lpf").read_text()
    text = (tmp_path / "gateware" / f"{SOC_NAME}.v").read_text()
    assert hasattr(soc, "sdram") and "ddram_a" in lpf
    assert ".memory_mem__cmd__valid" in text and ".memory_mem__rdata__payload" in text
    assert soc.platform.device.startswith("LFE5UM5G-85F")
