"""Estimation: the least-squares estimate of a consistency group's detail from its noisy measurements.

One job: per place, the weighted least-squares detail behind a group's noisy marginals
(weights 1/Var(noise)), combined bottom-up with the sum of its children's (Hay, Rastogi,
Miklau and Suciu 2010), and, top-down, the residual that makes children add up to their
parent spread in proportion to the children's variances (the GLS solution on a tree). Also
the group's structure the estimate needs: its geographic levels, the marginalisation
matrices, the noise variances and the detail cells that are variables (not structural zeros).
No non-negativity and no rounding here (:mod:`.fitting`, :mod:`.rounding`).

May import numpy, scipy and :mod:`dprelease.spec` (the declared domains and geography);
never the data readers (:mod:`dprelease.data`): it sees noisy measurements only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.mechanisms.discrete_laplace import variance as laplace_variance
import scipy.linalg
import scipy.sparse

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


def marginal_matrix(sizes: list[int], subset: list[int]) -> scipy.sparse.csr_matrix:
    """0/1 matrix mapping a detail histogram (row-major over ``sizes``) to the marginal on ``subset``."""
    d = math.prod(sizes)
    if not sizes:  # a group of tables with no dimension but geography: one cell per place
        return scipy.sparse.csr_matrix(np.ones((1, 1)))
    coords = np.unravel_index(np.arange(d), sizes)
    marginal_sizes = [sizes[i] for i in subset]
    rows = np.ravel_multi_index([coords[i] for i in subset], marginal_sizes) if subset else np.zeros(d, int)
    m = math.prod(marginal_sizes) if subset else 1
    return scipy.sparse.csr_matrix((np.ones(d), (rows, np.arange(d))), shape=(m, d))


def group_levels(spec: Spec, table: Table) -> list[Level]:
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


def unstructural_detail(tables: list[Table], marginals: dict, structural: dict,  # type: ignore[type-arg]
                        first_level: str | None) -> np.ndarray | None:
    """Detail cells outside every table's structural cells (None: no table has any)."""
    keep = None
    for t in tables:
        mask = structural.get((t.name, first_level))  # the root (or only) level: the group_by cells alone
        if mask is None or not mask.any():
            continue
        hit = np.asarray(marginals[t.name].T @ mask.astype(np.float64)).ravel() > 0
        keep = ~hit if keep is None else keep & ~hit
    return keep


def least_squares(tables: list[Table], levels: list[Level], noisy: dict, variances: dict,  # type: ignore[type-arg]
                  marginals: dict, d: int) -> tuple[list[np.ndarray], list[np.ndarray]]:  # type: ignore[type-arg]
    """Per level, each place's weighted least-squares detail (:func:`_wls`) combined with the sum
    of its children's (:func:`_bottom_up`). Returns the combined details and their variances."""
    own = [_wls(tables, level, noisy, variances, marginals, d) for level in levels]
    variance = [1 / sum(1 / variances[(t.name, level.name)] for t in tables) for level in levels]
    return _bottom_up(levels, own, variance)


def _bottom_up(levels: list[Level], own: list[np.ndarray], variance: list[float]
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each place's estimate combined with the sum of its children's (inverse-variance weights),
    from the finest level up (Hay, Rastogi, Miklau and Suciu 2010). Returns the combined details
    and their variances per place."""
    combined = list(own)
    var = [np.full(level.units, v) for level, v in zip(levels, variance)]
    for i in range(len(levels) - 2, -1, -1):
        parent = levels[i + 1].parent
        assert parent is not None
        sums = np.zeros_like(own[i])
        np.add.at(sums, parent, combined[i + 1])
        sum_var = np.bincount(parent, weights=var[i + 1], minlength=levels[i].units)
        precision = 1 / variance[i] + 1 / sum_var
        combined[i] = (own[i] / variance[i] + sums / sum_var[:, None]) / precision[:, None]
        var[i] = 1 / precision
    return combined, var


def _wls(tables, level, noisy, variances, marginals, d) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Per unit, the unconstrained weighted least-squares detail (minimum norm where not identified)."""
    q = np.zeros((d, d))
    b = np.zeros((level.units, d))
    for t in tables:
        key = (t.name, level.name)
        w = 1 / variances[key]
        a = marginals[t.name]
        q += w * (a.T @ a).toarray()
        y = noisy[key].reshape(level.units, -1).astype(float)
        b += w * np.asarray((a.T @ y.T).T)
    return b @ scipy.linalg.pinvh(q)  # minimum-norm detail: unbiased fitted marginals


def spread_to_children(variance: np.ndarray, parents_detail: np.ndarray, parent: np.ndarray,
                       pattern: np.ndarray) -> np.ndarray:
    """Children's details that add up, cell by cell, to their parents': each child's ``pattern``
    plus the parent's residual spread over its children in proportion to their ``variance``
    (the GLS solution on a tree)."""
    n_parents = parents_detail.shape[0]
    sum_var = np.bincount(parent, weights=variance, minlength=n_parents)
    sums = np.zeros_like(parents_detail, dtype=float)
    np.add.at(sums, parent, pattern)
    return pattern + ((parents_detail - sums)[parent]) * (variance / sum_var[parent])[:, None]
