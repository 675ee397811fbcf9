"""A consistency group's geography and its measurements' noise variances: what the estimate
(:mod:`.gls`) needs besides the noisy values. May import numpy and :mod:`dprelease.spec` (the
declared domains and geography); never the data readers (:mod:`dprelease.data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.mechanisms.discrete_laplace import variance as laplace_variance
from dprelease.spec import ROOT, RollupColumn, Spec, Table


@dataclass(frozen=True)
class Level:
    name: str | None  # None: a group without geography (root only)
    units: int
    parent: np.ndarray | None  # per unit, its parent unit at the previous level (None at the root)


def noise_variance(mechanism: str, scale: Fraction) -> float:
    """The variance of a count measurement's noise, from the mechanism and scale its plan (or its
    manifest entry) records: the discrete Laplace's (:func:`dprelease.mechanisms.discrete_laplace.variance`,
    as :meth:`dprelease.plan.measurements.DiscreteLaplace.variance`), or for the discrete Gaussian
    (``scale`` is then σ²) σ², which bounds the discrete Gaussian's from above."""
    return float(scale) if mechanism == "discrete_gaussian" else laplace_variance(scale)


def group_levels(spec: Spec, table: Table) -> list[Level]:
    """The group's levels, coarsest first: the root, then each declared geographic level with
    each place's parent (one root-only level for tables without geography)."""
    if not table.levels:
        return [Level(None, 1, None)]
    levels = [Level(ROOT, 1, None)]
    for i, name in enumerate(spec.geography):
        units = spec.column(name).size
        if i == 0:
            parent = np.zeros(units, dtype=np.int64)
        else:
            up = spec.column(spec.geography[i - 1])
            assert isinstance(up, RollupColumn) and up.source == name
            parent = np.asarray(up.parent_of, dtype=np.int64)
        levels.append(Level(name, units, parent))
    return levels
