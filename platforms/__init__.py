"""Board targets: where ``apiary build DESIGN --platform NAME`` goes.

Three flows, one entry point (:func:`build`):

* **LiteX boards** (``versa_ecp5``, ``ecpix5``, ``colorlight_5a_75b``): a CPU-less LiteX SoC
  with LiteEth and (on the DDR3 boards) LiteDRAM around the core, built with Yosys,
  nextpnr-ecp5 and ecppack from PyPI (:mod:`platforms.litex_soc`).
* **Vivado boards** (``u200``, ``enzian``): a complete Vivado project with the 100G MAC IP,
  run when ``vivado`` is on PATH (:mod:`platforms.vivado`).
* **amaranth-boards** (``amaranth:<module>``, e.g. ``amaranth:icebreaker``, or the module name
  alone when no other flow uses it): Amaranth's own build system, for designs that need neither
  LiteEth nor LiteDRAM (:mod:`platforms.amaranth_boards`).

The core is never patched: every flow instantiates the design's Verilog (or elaboratable) and
wraps it.
"""

import os
from dataclasses import dataclass
from typing import Any

from apiary.terminal import StatusLine

from .flow import BuildFailed, TimingFailed
from .report import BuildReport


__all__ = ["build", "judge_timing", "platform_names", "resolve", "BuildFailed", "TimingFailed",
           "BuildReport", "Target"]


@dataclass(frozen=True)
class Target:
    name: str
    flow: str               # "litex", "vivado" or "amaranth"
    description: str
    default_width: int      # passed to the design function when the user gives no --width
    board: Any = None       # the flow's board description
    clock_hz: float | None = None   # the core's clock, passed to a design function taking it

    def design_defaults(self):
        """Keyword arguments a design function gets if it takes them and the user set none."""
        defaults = {"width": self.default_width}
        defaults.update(getattr(self.board, "design_options", ()))
        if self.clock_hz:
            defaults["clock_hz"] = int(self.clock_hz)
        return defaults

    def apply_design_settings(self, design) -> dict:
        """Give ``design`` the board's design settings (``design_settings``: router depths,
        queue depths, length widths for a small FPGA) that it does not set itself; returns
        the settings given."""
        given = {name: value for name, value in getattr(self.board, "design_settings", ())
                 if name not in design.settings}
        design.settings.update(given)
        return given

    def core_clock_hz(self, design, requested: float | None = None) -> float | None:
        """The clock ``design``'s core runs at here: ``requested`` (a LiteX board's core on a
        clock of its own, ``apiary build --core-clock``) if given, else :attr:`clock_hz`,
        except on a LiteX board that runs its core on ``sys`` when the design has memory
        ports, which get the core a clock of its own (:func:`~.litex_soc.soc.litex_mac`)."""
        if requested is not None:
            return requested
        if self.flow == "litex" and self.board.core_clk_freq is None:
            from .litex_soc.boards import OWN_CORE_CLK_FREQ
            from .litex_soc.soc import LITEX_MAC, litex_mac
            if litex_mac(self.board, design) == LITEX_MAC:
                return OWN_CORE_CLK_FREQ
        return self.clock_hz


def _litex_targets():
    from .litex_soc.boards import LITEX_BOARDS
    return {n: Target(n, "litex", b.description, 64, b, b.core_hz)
            for n, b in LITEX_BOARDS.items()}


def _vivado_targets():
    try:
        from .vivado.boards import VIVADO_BOARDS
    except ImportError:
        return {}
    return {n: Target(n, "vivado", f"{b.title} ({b.part})", 512, b)
            for n, b in VIVADO_BOARDS.items()}


def platform_names():
    """Named platforms (LiteX and Vivado boards); amaranth-boards ones are ``amaranth:<module>``."""
    return sorted({**_litex_targets(), **_vivado_targets()})


def resolve(name):
    """The :class:`Target` called ``name``, or :class:`BuildFailed` listing the choices."""
    named = {**_litex_targets(), **_vivado_targets()}
    if name in named:
        return named[name]
    from .amaranth_boards import find_board
    module = name.split(":", 1)[1] if name.startswith("amaranth:") else name
    board = find_board(module)
    if board is not None:
        return Target(name, "amaranth", board.description, 64, board, board.clock_hz)
    if name.startswith("amaranth:"):
        raise BuildFailed(f"no platform {name!r}: amaranth-boards has no module {module!r} "
                          f"(amaranth_boards.{module}) with a board in it; e.g. "
                          f"amaranth:icebreaker")
    raise BuildFailed(f"no platform {name!r}: choose one of {', '.join(platform_names())}, or "
                      f"amaranth:<module> for an amaranth-boards board (e.g. amaranth:icebreaker)")


def _build_vivado(design, board, out_dir, progress, run_tools):
    """Write the Vivado project; run Vivado if it is on PATH (otherwise say how to)."""
    import shutil
    import time
    from .vivado import VivadoError, run_vivado, write_project
    start = time.monotonic()
    try:
        project = write_project(design, board, out_dir, progress=progress.note)
    except VivadoError as e:
        raise BuildFailed(str(e)) from None
    report = BuildReport(design=design.name, platform=board.name, flow="vivado",
                         device=board.part, width=design.width, out_dir=out_dir,
                         parts=[f"core {project.core_top} ({design.width}-bit NoC)",
                                f"CMAC (cmac_usplus) on {board.qsfp.name}, 100GBASE-R4"],
                         project=out_dir)
    report.times["project"] = time.monotonic() - start
    if not run_tools:
        return report
    if shutil.which("vivado") is None:
        report.notes.append("Vivado is not on PATH: the project is ready; run "
                            f"`vivado -mode batch -source build.tcl` in {out_dir}")
        progress.note(report.notes[-1])
        return report
    try:
        result = run_vivado(project, progress=progress.note)
    except VivadoError as e:
        raise BuildFailed(str(e)) from None
    report.times["vivado"] = result["seconds"]
    report.bitstream = result["bitstream"]
    for name, row in result["utilization"].items():
        if name in ("CLB LUTs", "CLB Registers", "Block RAM Tile", "DSPs", "URAM"):
            report.resources[name] = {"used": row.get("used", 0),
                                      "available": row.get("available", 0)}
    timing = result["timing"]
    if timing.get("wns") is not None:
        report.wns_ns = timing["wns"]
        report.notes.append(f"worst negative slack {timing['wns']:+.3f} ns "
                            f"({'met' if timing.get('met') else 'NOT met'})")
    return report


def build(design, target, out_dir, *, progress=None, run_tools=True,
          allow_timing_failure=False, **options):
    """Build ``design`` for ``target`` (a :class:`Target` or a name) in ``out_dir``; returns a
    :class:`BuildReport`, also written to ``out_dir/report.json`` and ``report.md``. It reports
    to ``progress`` (default: a :class:`~apiary.terminal.StatusLine` on stderr). ``options``
    go to the flow: ``seed`` (place and route), ``tries`` (that many seeds from ``seed``, the
    best kept; not Vivado's), ``counters`` and ``core_clk_freq`` (LiteX boards: the core on a
    clock of its own at that many Hz).

    A clock that misses its target fails the build (:func:`judge_timing`): :class:`TimingFailed`
    names each such clock, and the bitstream is deleted unless ``allow_timing_failure``. A
    design with a control plane also gets ``out_dir/control_csr.csv``, its registers and counters
    in LiteX's ``csr.csv`` format, for ``litex_cli`` and ``RemoteClient`` over the controller's
    Etherbone (:func:`beehive.apps.etherbone.csr_csv`; a LiteX board's ``csr.csv`` is its SoC's,
    for the UART bridge)."""
    progress = progress or StatusLine()
    if isinstance(target, str):
        target = resolve(target)
    given = target.apply_design_settings(design)
    _write_csr_csv(design, out_dir)
    if target.flow == "vivado":         # (one Vivado run: its seed is its own)
        options.pop("seed", None)
        if options.pop("tries", 1) != 1:
            raise BuildFailed("--seeds is for the nextpnr flows; Vivado boards build with one "
                              "run")
    if target.flow == "litex":
        from .litex_soc.build import build_litex_board
        report = build_litex_board(design, target.board, out_dir, progress,
                                   run_tools=run_tools, **options)
    elif target.flow == "vivado":
        report = _build_vivado(design, target.board, out_dir, progress, run_tools)
    else:
        from .amaranth_boards import build_amaranth_board
        report = build_amaranth_board(design, target.board, out_dir, progress,
                                      run_tools=run_tools, **options)
    if given:
        report.parts.append("the board's design settings: " +
                            ", ".join(f"{name}={value!r}" for name, value in given.items()))
    judge_timing(report, allow_timing_failure, progress)
    return report


def _write_csr_csv(design, out_dir):
    from apiary.top import control_map
    from beehive.apps.etherbone import csr_csv
    dmap = control_map(design)
    if dmap.tiles:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "control_csr.csv"), "w") as f:
            f.write(csr_csv(dmap, design.name))


def judge_timing(report, allow_failure=False, progress=None):
    """Write ``report``; if a clock missed its target, say so: with ``allow_failure`` in a note
    (the bitstream is kept), otherwise by deleting the bitstream and raising
    :class:`TimingFailed`, one line per failing clock."""
    failures = report.timing_failures()
    if failures and allow_failure:
        report.notes.append(f"timing NOT met on {len(failures)} clock(s); the bitstream is kept "
                            f"(--allow-timing-failure): " + "; ".join(failures))
        if progress is not None:
            progress.note(report.notes[-1])
    elif failures:
        if report.bitstream and os.path.exists(report.bitstream):
            os.remove(report.bitstream)
        report.bitstream = None
        report.notes.append("timing NOT met: no bitstream kept (--allow-timing-failure keeps it)")
    report.write()
    if failures and not allow_failure:
        where = os.path.join(report.out_dir, "report.md")
        raise TimingFailed(report, f"timing not met on {len(failures)} clock(s), so no bitstream "
                           f"(--allow-timing-failure keeps it; report: {where}):\n"
                           + "\n".join(f"  {line}" for line in failures))
