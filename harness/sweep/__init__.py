"""Sweeps: a design at many points (parameter values), jobs at each point (the echo benchmark's
figures, area, a board build, a test), run on Dask distributed with every result cached, and
one table of results. See docs/sweeps.md."""

from .jobs import JOBS, Area, Bench, Build, Echo, Job, Test
from .run import Outcome, ResultCache, run_sweep
from .spec import Sweep, Task
from .table import to_csv, to_markdown


__all__ = ["Sweep", "Task", "Job", "Echo", "Area", "Build", "Test", "Bench", "JOBS", "Outcome",
           "ResultCache", "run_sweep", "to_csv", "to_markdown"]
