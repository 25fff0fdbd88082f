"""A sweep: a design, the points (parameter values) to build it at, and the jobs per point.

``Sweep(design, grid={...}, points=[...], jobs=[...])`` lists its tasks (one per point and
job) with :meth:`Sweep.tasks`, which loads and checks the design at every point first: an
unknown parameter, a value the design refuses or an unknown job is one :class:`ValueError`
naming the point, before anything runs.
"""

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from apiary.design import DesignError
from apiary.fingerprint import design_fingerprint
from apiary.load import load_design
from .jobs import Job, as_job


__all__ = ["Sweep", "Task", "Point", "describe"]

#: One point: the design function's keyword arguments.
Point = dict[str, Any]


@dataclass(frozen=True)
class Task:
    """One job at one point: what a worker runs, and the key its result is cached under
    (``None``: not cacheable, the design's description has no stable text)."""
    index: int
    point: Point
    job: Job
    design: str | None
    key: str | None


def describe(point: Point) -> str:
    """A point as ``width=64, port=7`` (``(defaults)`` for none)."""
    return ", ".join(f"{k}={v!r}" for k, v in point.items()) or "(defaults)"


@dataclass
class Sweep:
    """A design swept over points, with ``jobs`` at each.

    ``design`` is what :func:`apiary.load.load_design` takes (a script path, ``path:function``
    or ``module:function``; a relative path is taken from ``base``, by default the working
    directory). The points are the cartesian product of ``grid`` (``{parameter: [values]}``)
    followed by ``points`` (a list of ``{parameter: value}``), each point once; with neither,
    one point at the design's defaults. ``jobs`` are :class:`~harness.sweep.jobs.Job` objects or
    the names of those that need no parameters (``"echo"``, ``"area"``). ``timeout`` (seconds)
    bounds each job. ``plots`` are the plots ``apiary sweep`` draws from the table: ``(x, y)``
    or ``(x, y, by)`` column names (see :func:`harness.sweep.plot.plot`); ``paretos`` its
    Pareto fronts, ``(x, y)`` or ``(x, y, label)``: less ``x`` and more ``y`` is better (see
    :func:`harness.sweep.plot.pareto`).

    With ``design=None`` the sweep has one point and only jobs that name what they measure
    (:class:`~harness.sweep.jobs.Bench`): a set of benchmarks run together.
    """
    design: str | None
    grid: dict[str, list[Any]] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    jobs: list[Job | str] = field(default_factory=lambda: ["echo"])
    name: str = "sweep"
    timeout: float | None = None
    plots: list[tuple[str, ...]] = field(default_factory=list)
    paretos: list[tuple[str, ...]] = field(default_factory=list)
    base: str | None = None

    def all_points(self) -> list[Point]:
        """The grid's points (cartesian product, in the grid's order), then ``points``."""
        if not isinstance(self.grid, dict) or any(
                not isinstance(v, (list, tuple)) or not v for v in self.grid.values()):
            raise ValueError(f"sweep {self.name!r}: grid must map each parameter to a non-empty "
                             f"list of values, not {self.grid!r}")
        if not isinstance(self.points, (list, tuple)) or any(
                not isinstance(p, dict) for p in self.points):
            raise ValueError(f"sweep {self.name!r}: points must be a list of "
                             f"{{parameter: value}} dicts, not {self.points!r}")
        names = list(self.grid)
        grid = ([dict(zip(names, values)) for values in itertools.product(*self.grid.values())]
                if names else [])
        points: list[Point] = []
        for point in grid + [dict(p) for p in self.points]:
            if point not in points:                 # a point given twice runs once
                points.append(point)
        return points or [{}]

    def design_spec(self) -> str | None:
        """The design as an absolute spec (workers may run elsewhere on a shared file system)."""
        if self.design is None:
            return None
        spec = os.fspath(self.design)
        path, sep, func = spec.partition(":") if ".py" in spec else (spec, "", "")
        candidate = os.path.join(self.base or os.getcwd(), path)
        if os.path.exists(candidate):
            return os.path.abspath(candidate) + sep + func
        return spec

    def tasks(self) -> list[Task]:
        """Every (point, job) task, checked: loads the design at each point (its function's
        parameters and :meth:`~apiary.design.Design.check`). Raises :class:`ValueError` with one
        readable message for the first bad point or job."""
        try:
            jobs = [as_job(j).resolved(self.base) for j in self.jobs]
        except ValueError as e:
            raise ValueError(f"sweep {self.name!r}: {e}") from None
        if not jobs:
            raise ValueError(f"sweep {self.name!r} has no jobs")
        spec = self.design_spec()
        if spec is None:
            needing = sorted({j.kind for j in jobs if j.needs_design})
            if needing:
                raise ValueError(f"sweep {self.name!r} has no design, but its "
                                 f"{', '.join(needing)} job(s) measure one")
            if self.grid or self.points:
                raise ValueError(f"sweep {self.name!r} has no design, so no parameters to "
                                 f"sweep: give its jobs their arguments instead")
        else:
            # Designs are loaded here to be checked, never elaborated: that is not a mistake.
            import warnings
            from amaranth.hdl import UnusedElaboratable
            warnings.filterwarnings("ignore", category=UnusedElaboratable)
        labels = [label for label in (j.label() for j in jobs) if label is not None]
        if len(labels) != len(set(labels)):
            raise ValueError(f"sweep {self.name!r}: two jobs have the same name "
                             f"{next(x for x in labels if labels.count(x) > 1)!r}")
        digests = [job.source_digest() for job in jobs]
        tasks: list[Task] = []
        for i, point in enumerate(self.all_points()):
            fingerprint: str | None = "no design"
            if spec is not None:
                try:
                    design = load_design(spec, **point)
                    design.check()
                except DesignError as e:
                    raise ValueError(f"sweep {self.name!r}, point {i} ({describe(point)}): "
                                     f"{e}") from None
                # (the elaborator's sources too, as design_verilog's key has them)
                fingerprint = design_fingerprint(design, roots=["apiary.top"])
            for job, digest in zip(jobs, digests):
                key = None
                if fingerprint is not None:
                    text = json.dumps([fingerprint, job.kind, job.params(), digest],
                                      sort_keys=True, default=repr)
                    key = hashlib.sha256(text.encode()).hexdigest()
                tasks.append(Task(len(tasks), point, job, spec, key))
        return tasks
