"""Post-processing: pure functions of the noisy measurements and the declared invariants (free: no budget).

What it sees of the confidential data is the invariants (:class:`Invariants`: exact totals
the release publishes by decision, outside DP), and nothing else; all else is noisy.

``clamp`` (max(0, x) per cell), ``none``, and ``consistent`` (census-style: non-negative
integer tables that agree across geographic levels and across the tables of a group).

Structural zeros (cells the spec makes impossible, :mod:`dprelease.plan.structural`) stay exact
zeros under every method (a mode's stay −1, a mean's empty): they are known, not estimated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dprelease.plan import Plan
from dprelease.plan.structural import measurement_masks
from dprelease.postprocess.consistent import consistent_group
from dprelease.postprocess.parents import FitFailed, Workers
from dprelease.postprocess.topdown import FitWarning
from dprelease.postprocess.invariants import (
    Invariants,
    check_invariants,
    declared_invariants,
)
from dprelease.spec import MeanMeasure, ModeMeasure, Spec, Table

__all__ = ["FitFailed", "FitWarning", "Invariants", "Workers", "check_invariants", "clamp_or_none", "groups", "mean_values", "overridable",
           "postprocess_release", "structural_masks"]

Key = tuple[str, str | None]  # (table, level); level None for a plain table
Masks = dict[Key, "np.ndarray | None"]


def structural_masks(plan: Plan) -> Masks:
    """Per measurement, the plan's structural cells as a boolean mask (None: none)."""
    return {(t.name, t.level): t.structural_mask() for t in plan.tables}


def clamp_or_none(noisy: np.ndarray, method: str) -> np.ndarray:
    """``clamp``: max(0, x) per cell (non-negative, biased upwards near zero); ``none``: as is."""
    match method:
        case "clamp":
            return np.maximum(noisy, 0)
        case "none":
            return noisy.copy()
    raise ValueError(f"unknown post-processing {method!r}")


def mean_values(noisy: np.ndarray, measure: MeanMeasure) -> np.ndarray:
    """A mean table's published values from its noisy (centred sum, count) pair, stacked as
    float64 (mean, count): mean = centre + sum/count clamped to [low, high], and NaN
    (published empty) where the noisy count is below 1, since a count that noise has pushed to
    0 or below says nothing about how many rows the sum is over; count = max(noisy count, 0).
    Means are rounded to a hundredth of the granularity (whole numbers from 100 up)."""
    sums, counts = noisy[0].astype(np.float64), noisy[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        means = np.clip(measure.centre + sums / counts, measure.low, measure.high)
    means[counts < 1] = np.nan
    decimals = max(0, 2 - len(str(measure.granularity)) + 1)  # a hundredth of the granularity, at most 2 places
    return np.stack([np.round(means, decimals), np.maximum(counts, 0).astype(np.float64)])


def overridable(table: Table) -> bool:
    """Whether a ``--method`` override applies: counts with unbiased (discrete Laplace) noise."""
    return table.measure is None and table.mechanism == "discrete_laplace"


def groups(spec: Spec) -> list[list[Table]]:
    """Tables post-processed together: each consistency group, and each other consistent table alone."""
    out: dict[str, list[Table]] = {}
    for t in spec.tables:
        if t.post_process == "consistent":
            out.setdefault(t.consistency or f"\0{t.name}", []).append(t)
    return list(out.values())


def postprocess_release(spec: Spec, noisy: dict[Key, np.ndarray], variances: dict[Key, float],
                        method: str | None = None,
                        invariants: Invariants | None = None,
                        structural: Masks | None = None, timings: dict[str, float] | None = None,
                        workers: int | Workers | None = None,
                        sink: Callable[[Key, np.ndarray], None] | None = None) -> dict[Key, np.ndarray]:
    """The published values of every measurement. ``variances``: each count measurement's noise
    variance, as its plan states it (:meth:`dprelease.plan.Plan.noise_variances`; a published
    release's manifest records its mechanism and scale, :func:`noise_variance`): consistent
    post-processing weights by them. ``method`` overrides the spec's choices for
    the count tables with unbiased noise (discrete Laplace); sums and truncated-geometric tables
    keep their own (consistent post-processing is for counts; a truncated output is clamped).

    ``invariants`` (:class:`Invariants`: exact place totals per level, published outside DP)
    are checked against the spec
    (ValueError) and bind consistent post-processing of every group whose tables count all
    rows (no ``where``): each place's total is then its invariant. Clamped tables are not
    adjusted (clamping is per cell). They are the only values of the data used here.

    ``structural``: the plan's structural cells (:func:`structural_masks`); by default the same
    function of the spec the planner uses. They are published as exact zeros (no category for
    a mode, an empty mean over a zero count).

    ``timings`` (if given) gains the seconds of the consistent groups' estimate
    (``postprocess_estimate``) and top-down fit (``postprocess_fit``); ``workers``: where the fit
    of large levels runs: that many local processes (default one per CPU), or :class:`Workers`
    (e.g. over a Dask cluster's executor, ``distributed.Client.get_executor``: the same chunks,
    so the same integers; the caller closes it). A fit that reached an iteration cap is reported as a
    :class:`.topdown.FitWarning` (the caller records it); a chunk whose fit failed raises
    :class:`.parents.FitFailed` at once (the pending ones are cancelled).

    ``sink``: every measurement's published values are handed to it (key, values) as soon as
    they are final — a consistent group's level by level from the root — and the returned dict
    is empty: a caller that writes each out and drops it holds, of a consistent group, about
    two levels at a time besides the noisy measurements (a census's blocks: about 25 bytes a
    published cell), instead of every published value.
    """
    structural = measurement_masks(spec) if structural is None else structural
    published: dict[Key, np.ndarray] = {}
    tables = {t.name: t for t in spec.tables}

    def final(key: Key, values: np.ndarray) -> None:  # its structural cells stated, then kept or handed over
        mask = structural.get(key)
        if mask is not None:
            _exact_zeros(values, mask, tables[key[0]])
        if sink is None:
            published[key] = values
        else:
            sink(key, values)

    for t in spec.tables:
        if isinstance(t.measure, MeanMeasure):
            for level, _, _ in t.measured():
                final((t.name, level), mean_values(noisy[(t.name, level)], t.measure))
            continue
        chosen = (method if overridable(t) else None) or t.post_process
        if chosen != "consistent":
            for level, _, _ in t.measured():
                final((t.name, level), clamp_or_none(noisy[(t.name, level)], chosen))
    invariants = declared_invariants(spec, invariants)
    consistent = [g for g in groups(spec) if method in (None, "consistent")]
    if method not in (None, "consistent"):  # the tables the method does not override keep their consistency
        consistent = [kept for g in groups(spec) if (kept := [t for t in g if not overridable(t)])]
    if method == "consistent":  # every table, grouped as the spec says or alone
        consistent = [[t] for t in spec.tables if t.post_process != "consistent" and overridable(t)] + groups(spec)
    fit_workers = workers if isinstance(workers, Workers) else Workers(workers)  # started on first use
    try:
        for group in consistent:  # one pool for every group
            binding = invariants if not any(t.where for t in group) else None
            consistent_group(spec, group, noisy, variances, binding, structural, timings, fit_workers, final)
    finally:
        if fit_workers is not workers:
            fit_workers.close()
    return published


def _exact_zeros(values: np.ndarray, mask: np.ndarray, table: Table) -> None:
    """In place: structural cells hold their known value (0; no category for a mode; a mean
    empty over a count of 0). Every method already gives them that; this states it once."""
    if isinstance(table.measure, MeanMeasure):
        values[0, mask], values[1, mask] = np.nan, 0
    elif isinstance(table.measure, ModeMeasure):
        values[mask] = -1
    else:
        values[mask] = 0

