"""Board targets: where ``apiary build DESIGN --platform NAME`` goes.

Three flows, one entry point (:func:`build`):

* **LiteX boards** (``versa_ecp5``, ``ecpix5``): a CPU-less LiteX SoC with LiteEth and LiteDRAM
  around the core, built with Yosys, nextpnr-ecp5 and ecppack from PyPI
  (:mod:`platforms.litex_soc`).
* **Vivado boards** (``u200``, ``enzian``): a complete Vivado project with the 100G MAC IP,
  run when ``vivado`` is on PATH (:mod:`platforms.vivado`).
* **amaranth-boards** (``amaranth:<module>``, e.g. ``amaranth:icebreaker``, or the module name
  alone when no other flow uses it): Amaranth's own build system, for designs that need neither
  LiteEth nor LiteDRAM (:mod:`platforms.amaranth_boards`).

The core is never patched: every flow instantiates the design's Verilog (or elaboratable) and
wraps it.
"""

from dataclasses import dataclass

from .flow import BuildFailed, Progress
from .report import BuildReport


__all__ = ["build", "platform_names", "resolve", "BuildFailed", "BuildReport", "Progress",
           "Target"]


@dataclass(frozen=True)
class Target:
    name: str
    flow: str               # "litex", "vivado" or "amaranth"
    description: str
    default_width: int      # passed to the design function when the user gives no --width
    board: object = None
    clock_hz: float = None  # the core's clock, passed to a design function that takes clock_hz

    def design_defaults(self):
        """Keyword arguments a design function gets if it takes them and the user set none."""
        defaults = {"width": self.default_width}
        if self.clock_hz:
            defaults["clock_hz"] = int(self.clock_hz)
        return defaults


def _litex_targets():
    from .litex_soc.boards import LITEX_BOARDS
    return {n: Target(n, "litex", b.description, 64, b, b.sys_clk_freq)
            for n, b in LITEX_BOARDS.items()}


def _vivado_targets():
    try:
        from .vivado.boards import VIVADO_BOARDS
    except ImportError:
        return {}
    return {n: Target(n, "vivado", getattr(b, "description", n), 512, b)
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
    raise BuildFailed(f"no platform {name!r}: choose one of {', '.join(platform_names())}, or "
                      f"amaranth:<module> for an amaranth-boards board (e.g. amaranth:icebreaker)")


def build(design, target, out_dir, *, progress=None, run_tools=True, **options):
    """Build ``design`` for ``target`` (a :class:`Target` or a name) in ``out_dir``; returns a
    :class:`BuildReport`, also written to ``out_dir/report.json`` and ``report.md``."""
    progress = progress or Progress()
    if isinstance(target, str):
        target = resolve(target)
    if target.flow == "litex":
        from .litex_soc.build import build_litex_board
        report = build_litex_board(design, target.board, out_dir, progress,
                                   run_tools=run_tools, **options)
    elif target.flow == "vivado":
        from .vivado import build_vivado
        report = build_vivado(design, target.board, out_dir, progress, run_tools=run_tools,
                              **options)
    else:
        from .amaranth_boards import build_amaranth_board
        report = build_amaranth_board(design, target.board, out_dir, progress,
                                      run_tools=run_tools, **options)
    report.write()
    return report
