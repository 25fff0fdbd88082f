"""DRAM initialisation in hardware, for a LiteX SoC without a CPU.

A LiteX SoC normally leaves the SDRAM mode-register sequence to its CPU's BIOS. With no CPU,
:class:`DFIInitSequencer` replays the same sequence, the one LiteDRAM generates for the BIOS
(:func:`litedram.init.get_sdram_phy_init_sequence`), onto the DFI injector's external port, then
hands the DFI back to the controller and raises ``done``. Each step's delay is the BIOS's loop
count, taken as ``delay_scale`` clock cycles per count (the BIOS spends several cycles per count,
so the default 4 is not shorter than what the BIOS waits).

Read levelling (the BIOS's delay scan) is not done: the PHY keeps its reset read delay.
"""

from migen import Module, Signal, If, Memory, Replicate

from litedram.init import get_sdram_phy_init_sequence


__all__ = ["DFIInitSequencer", "init_steps"]

_COMMAND = {"DFII_COMMAND_CS": 0x01, "DFII_COMMAND_WE": 0x02, "DFII_COMMAND_CAS": 0x04,
            "DFII_COMMAND_RAS": 0x08}
_CONTROL = {"DFII_CONTROL_CKE": 0x02, "DFII_CONTROL_ODT": 0x04, "DFII_CONTROL_RESET_N": 0x08}


def init_steps(phy_settings, timing_settings, delay_scale=4):
    """The init sequence as ``[(name, control, command, address, bank, cycles)]``.

    ``control`` is a bit set of CKE (2), ODT (4), RESET_N (8) that holds from this step on;
    ``command`` (CS 1, WE 2, CAS 4, RAS 8) is issued once on phase 0, or is 0 for none;
    ``cycles`` is how long to wait after the step."""
    sequence, _ = get_sdram_phy_init_sequence(phy_settings, timing_settings)
    steps, control = [], 0
    for name, address, bank, cmd, delay in sequence:
        flags = cmd.split("|")
        if all(f in _CONTROL for f in flags):
            control = sum(_CONTROL[f] for f in flags)
            command = 0
        elif all(f in _COMMAND for f in flags):
            command = sum(_COMMAND[f] for f in flags)
        else:
            raise ValueError(f"DRAM init step {name!r}: unknown flags {cmd!r}")
        steps.append((name, control, command, address, bank, max(1, int(delay * delay_scale))))
    return steps


class DFIInitSequencer(Module):
    """Drive ``dfii.ext_dfi`` through :func:`init_steps`, then release it.

    ``done`` rises one cycle after the last step's wait and stays high; until then the
    controller is cut off from the DRAM (its requests wait)."""

    def __init__(self, dfii, phy_settings, timing_settings, delay_scale=4):
        self.done = Signal()
        self.steps = steps = init_steps(phy_settings, timing_settings, delay_scale)
        dfi = dfii.ext_dfi
        abits, bbits = len(dfi.phases[0].address), len(dfi.phases[0].bank)
        wait_bits = max(s[5] for s in steps).bit_length()
        fields = [(4, "control"), (4, "command"), (abits, "address"), (bbits, "bank"),
                  (wait_bits, "wait")]
        width = sum(w for w, _ in fields)
        words = []
        for _, control, command, address, bank, cycles in steps:
            word, shift = 0, 0
            for (w, _), v in zip(fields, (control, command, address, bank, cycles)):
                word |= v << shift
                shift += w
            words.append(word)
        rom = Memory(width, len(words), init=words)
        rd = rom.get_port(async_read=True)
        self.specials += rom, rd

        step = Signal(max=len(words) + 1)
        wait = Signal(wait_bits)
        issue = Signal()
        control = Signal(4)
        entry = {}
        shift = 0
        for w, name in fields:
            entry[name] = rd.dat_r[shift:shift + w]
            shift += w
        self.comb += rd.adr.eq(step)

        self.sync += [
            If(~self.done,
                If(wait != 0,
                    wait.eq(wait - 1),
                ).Elif(step == len(words),
                    self.done.eq(1),
                ).Else(
                    control.eq(entry["control"]),
                    issue.eq(entry["command"] != 0),
                    wait.eq(entry["wait"]),
                    step.eq(step + 1),
                )
            ),
            If(issue, issue.eq(0)),
        ]
        # The command of the step just loaded, held in a register for its one cycle.
        command = Signal(4)
        address = Signal(abits)
        bank = Signal(bbits)
        self.sync += If(~self.done & (wait == 0) & (step != len(words)),
                        command.eq(entry["command"]), address.eq(entry["address"]),
                        bank.eq(entry["bank"]))
        self.comb += dfii.ext_dfi_sel.eq(~self.done)
        for n, phase in enumerate(dfi.phases):
            active = issue if n == 0 else 0
            self.comb += [
                phase.cke.eq(Replicate(control[1], len(phase.cke))),
                phase.reset_n.eq(Replicate(control[3], len(phase.reset_n))),
                phase.address.eq(address),
                phase.bank.eq(bank),
                phase.cs_n.eq(Replicate(~(active & command[0]), len(phase.cs_n))),
                phase.we_n.eq(~(active & command[1])),
                phase.cas_n.eq(~(active & command[2])),
                phase.ras_n.eq(~(active & command[3])),
                phase.wrdata_en.eq(0),
                phase.rddata_en.eq(0),
            ]
            if hasattr(phase, "odt"):
                self.comb += phase.odt.eq(Replicate(control[2], len(phase.odt)))
