"""Fairness of a shared service, as Coyote measures it (OSDI'20 §6.3): the mean absolute
deviation (MAD) of what N identical tiles got, relative to their mean.

::

    from apiary.bench.fairness import fairness
    share = fairness(sim.counters(), ["app0", "app1", "app2", "app3"])
    share.mad            # 0.0: all equal; 0.5: on average half the mean away from it

The per-tile figures come from the monitors' fairness counters
(``MonitorConfig(fairness=True)``: ``<tile>_monitor_out_bytes``, ``..._out_flits``,
``..._out_stalls``, ``..._in_*``), which the counter bank, the simulators and the control plane
read like every other counter.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


__all__ = ["mean_absolute_deviation", "Fairness", "fairness"]


def mean_absolute_deviation(values: Sequence[float]) -> float:
    """``mean(|v - mean|) / mean`` of ``values`` (0 when every value is equal).

    Raises
    ------
    ValueError
        If ``values`` is empty, or its mean is not positive.
    """
    values = list(values)
    if not values:
        raise ValueError("the mean absolute deviation of no values is undefined")
    mean = sum(values) / len(values)
    if mean <= 0:
        raise ValueError(f"the mean absolute deviation relative to the mean needs a positive "
                         f"mean; these values have mean {mean}: {values}")
    return sum(abs(v - mean) for v in values) / len(values) / mean


@dataclass(frozen=True)
class Fairness:
    """What each tile got (``per_tile``, by name), their mean and their relative MAD."""
    counter: str
    per_tile: dict[str, int]
    mean: float
    mad: float


def fairness(counters: Mapping[str, int], tiles: Sequence[str],
             counter: str = "out_bytes") -> Fairness:
    """The fairness of ``counter`` (a monitor fairness counter) over ``tiles``, from a
    counter-bank reading (``Sim.counters()``).

    Raises
    ------
    ValueError
        If a tile's monitor has no such counter (its monitor has no fairness counters, or the
        tile is trusted and has no monitor).
    """
    per_tile = {}
    for tile in tiles:
        name = f"{tile}_monitor_{counter}"
        if name not in counters:
            raise ValueError(f"no counter {name!r}: is {tile!r} untrusted, with "
                             f"MonitorConfig(fairness=True)?")
        per_tile[tile] = counters[name]
    values = list(per_tile.values())
    return Fairness(counter, per_tile, sum(values) / len(values),
                    mean_absolute_deviation(values))
