"""Vivado projects for Beehive designs on boards with a 100G QSFP28 port (``--platform u200``,
``--platform enzian``).

    from platforms.vivado import write_project, run_vivado
    project = write_project(design, "u200", "build/u200")   # rtl/, ip/, constraints/, *.tcl
    result = run_vivado(project)     # VivadoError if Vivado is not on PATH

See :mod:`platforms.vivado.project` for what is written and :mod:`platforms.vivado.boards` for
the pins and sites (and where each comes from).
"""

from .boards import Board, DiffClock, Pin, QsfpPort, VIVADO_BOARDS, get_board
from .project import (VivadoError, VivadoProject, parse_timing_summary, parse_utilization,
                      run_vivado, write_project)


__all__ = ["Board", "DiffClock", "Pin", "QsfpPort", "VIVADO_BOARDS", "get_board",
           "VivadoError", "VivadoProject", "write_project", "run_vivado",
           "parse_utilization", "parse_timing_summary"]
