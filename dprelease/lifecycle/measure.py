"""Measurement: the only step that spends privacy budget (and the only one that draws noise).

Structural zeros (``TablePlan.structural``, a function of the spec alone: see
:mod:`dprelease.plan.structural`) are not measured: no noise is drawn for them and they are
returned as exact zeros (a mode's as −1: no category). They are 0 on every dataset the spec
allows, so they carry no information; the measured cells' noise, sensitivity and ε are those
of the full histogram.
"""

from __future__ import annotations

import numpy as np

from dprelease.mechanisms.sampling import Entropy

from fractions import Fraction

from dprelease.errors import InternalError
from dprelease.plan import TablePlan
from dprelease.plan.measurements import Mean


def measure_counts(counts: np.ndarray, table: TablePlan, *, rng: Entropy | None = None) -> np.ndarray:
    """Add discrete Laplace noise of scale Δ/ε to every cell of a full-domain histogram.

    Neighbouring relation: the release's (``Spec.neighbouring``): add/remove one row (one row
    per person), or change one record when the spec publishes invariants. Sensitivity: the
    caller passes a histogram over the declared domain, whose L1 sensitivity is
    ``table.sensitivity`` (1: one row is in at most one cell; 2 under change one record: a
    row leaves one cell and enters another). Guarantee: the returned vector is
    ``table.epsilon``-DP (pure), every cell with independent noise; with the discrete Gaussian
    (σ² = ``table.scale`` in units of the granularity, Δ₂² = ``table.sensitivity``) it is
    Δ₂²/(2σ²)-zCDP, which the planner chose to fit the table's ρ or (ε, δ). With the truncated geometric
    mechanism each cell is clamped to the declared [0, upper] first (neighbours stay within Δ)
    and the noisy result clamped again (post-processing): outputs lie in [0, upper]. A sum's
    ``counts`` are in units of its granularity g (values clamped and discretised, see
    :func:`dprelease.data.histogram.histogram`), its noise is drawn in those units with scale
    (Δ/g)/ε, and the result is returned in value units (× g). ``rng`` is the test-only
    seam of :func:`~dprelease.mechanisms.discrete_laplace`; release code never passes it.
    """
    if counts.dtype != np.int64:
        raise TypeError("counts must be int64")
    if counts.size != table.cells:
        raise ValueError(f"table {table.name}: {counts.size} cells, the plan says {table.cells}")
    keep = measured_mask(table)
    if keep is None:
        return _noisy(counts, table, rng)
    check_structural(counts, table)
    out = np.zeros(counts.size, dtype=np.int64)  # structural cells: exact zeros, no noise drawn
    out[keep] = _noisy(np.ascontiguousarray(counts[keep]), table, rng)
    return out


def measured_mask(table: TablePlan) -> np.ndarray | None:
    """Cells that get noise (None: every cell): all but the plan's structural cells."""
    if not table.structural:
        return None
    keep = np.ones(table.cells, dtype=bool)
    keep[np.asarray(table.structural, dtype=np.int64)] = False
    return keep


def check_structural(counts: np.ndarray, table: TablePlan) -> None:
    """Every structural cell holds nothing (over its last dimension too: a mode's categories, a
    mean's parts). Structural cells are derived from the spec and the data was checked against
    its rules, so a failure here is a bug, reported before any noise is drawn."""
    if not table.structural:
        return
    cells = np.asarray(table.structural, dtype=np.int64)
    view = counts.reshape(-1, table.cells) if counts.ndim == 2 else counts.reshape(table.cells, -1).T
    if view[:, cells].any():
        raise AssertionError(f"bug: a structural cell of {table.key} holds rows; please report it (nothing is "
                             "published)")


def _noisy(counts: np.ndarray, table: TablePlan, rng: Entropy) -> np.ndarray:
    """The plan's noise (:mod:`dprelease.plan.measurements`) drawn for ``counts``, in value units."""
    return table.noise.draw(counts, rng=rng)


def measure_mean(parts: np.ndarray, table: TablePlan, *, rng: Entropy | None = None) -> np.ndarray:
    """A mean's two measurements: ``parts`` is (centred sums in units of the granularity, row
    counts) over the same rows (:func:`dprelease.data.histogram.histogram`); returns them noisy,
    stacked the same way, the sum in value units.

    Neighbouring relation: the release's. Sensitivities: the sum part's is that of
    :meth:`MeanMeasure.centred_sum` and the count part's a count's; the plan's
    :class:`~dprelease.plan.measurements.Mean` holds each part's noise, at its own scale, and
    draws both. Guarantee: each part is DP at its share of the table's budget (as
    :func:`measure_counts` states), so the pair is the table's ε (ρ; ε and δ) by sequential
    composition; any mean computed from them is post-processing. Structural cells (no possible
    row, in either part) get no noise: exact zeros.
    """
    if not isinstance(table.noise, Mean):
        raise InternalError(f"{table.key} is measured as a mean but planned with the {table.mechanism}")
    if parts.dtype != np.int64:
        raise TypeError("counts must be int64")
    if parts.shape != (2, table.cells):
        raise ValueError(f"table {table.name}: a mean needs (sum, count) histograms of {table.cells} cells")
    keep = measured_mask(table)
    if keep is None:
        return table.noise.draw(parts, rng=rng)
    check_structural(parts, table)
    out = np.zeros(parts.shape, dtype=np.int64)  # structural cells: exact zeros, no noise drawn
    out[:, keep] = table.noise.draw(parts[:, keep], rng=rng)
    return out


def measure_mode(counts: np.ndarray, table: TablePlan, categories: int, q: Fraction | None = None, *,
                 rng: Entropy | None = None) -> np.ndarray:
    """Per cell, the code of the chosen category: permute-and-flip on the cell's category counts
    (a mode), or on quantile utilities built from them when ``q`` is given (see ModeMeasure).

    Neighbouring relation: the release's. Utility: the counts (row-major cells × categories), or
    the quantile utilities; sensitivity Δu = ``table.sensitivity`` (:func:`~dprelease.plan.measurements.utility_sensitivity`:
    K for a mode, K·max(a, b − a) for a q = a/b quantile, doubled under change one record, with K
    the contribution bound); the plan's :class:`~dprelease.plan.measurements.PermuteAndFlip`
    holds the temperature, Δu/ε (a mode under add/remove: monotone) or 2Δu/ε. Guarantee: the vector of choices is ε-DP (ε = ``table.mechanism_epsilon``):
    each cell's choice is (r/K)·ε-DP in the r ≤ K rows a person has there, the cells' choices
    are independent, so the losses add up to at most ε whatever the split of a person's rows.
    Exact Bernoulli(exp(−x)) flips from the OS CSPRNG (``rng``: test-only seam).
    Structural cells (no possible row) are not measured: −1, no category.
    """
    utilities = counts.reshape(table.cells, categories)
    keep = measured_mask(table)
    if keep is not None:
        check_structural(counts, table)
        out = np.full(table.cells, -1, dtype=np.int64)
        out[keep] = measure_mode(np.ascontiguousarray(utilities[keep]).reshape(-1),
                                 _measured_only(table), categories, q, rng=rng)
        return out
    if q is not None:  # quantile: −|b·#{x < o} − a·n| per candidate o (declared order)
        below = np.cumsum(utilities, axis=1) - utilities
        n = utilities.sum(axis=1, keepdims=True)
        utilities = -np.abs(q.denominator * below - q.numerator * n)
    return table.noise.draw(utilities, rng=rng)  # PermuteAndFlip at the ε the plan runs it at


def _measured_only(table: TablePlan) -> TablePlan:
    from dataclasses import replace

    return replace(table, cells=table.measured_cells, structural=())
