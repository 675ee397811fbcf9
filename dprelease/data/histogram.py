"""Full-domain histograms in one pass: a mixed-radix cell index and ``numpy.bincount``.

Privacy contract (a transformation, no noise): under add/remove one row, one row lands in
at most one cell, so the L1 distance between neighbouring histograms is at most 1; under
change one record (releases with invariants) it is at most 2. With a contribution bound
(``privacy.unit.max_rows`` = K, rows beyond it dropped before counting) a person is up to K
rows, so both bounds are K times larger. The shape is the full cross product of the declared
domains, empty cells included, so it never depends on the data.
"""

from __future__ import annotations

import numpy as np

from dprelease.arrays import group_starts
from dprelease.data.load import Encoded
from dprelease.errors import DataError
from dprelease.spec import ROOT, Condition, MeanMeasure, Spec, SumMeasure, Table
from dprelease.spec.conditions import holds


def histogram(spec: Spec, table: Table, data: Encoded, dims: tuple[str, ...] | None = None) -> np.ndarray:
    """Exact counts (int64), cells in row-major order of ``dims`` (last fastest).

    ``dims`` defaults to the table's group_by; a geographic table passes each level's.
    """
    dims = table.group_by if dims is None else dims
    sizes = [spec.column(c).size for c in dims]
    cells = int(np.prod(sizes, dtype=object)) if sizes else 1
    index = np.zeros(data.rows, dtype=np.int64)
    for name, size in zip(dims, sizes):
        index *= size
        index += data.codes[name]
    mask = where_mask(spec, table.where, data)
    if mask is not None:
        index = index[mask]
    if isinstance(table.measure, SumMeasure):
        return _sums(table.measure, data, index, mask, cells)
    if isinstance(table.measure, MeanMeasure):
        return _mean_parts(table.measure, data, index, mask, cells)
    return np.bincount(index, minlength=cells).astype(np.int64, copy=False)


def _mean_parts(measure: MeanMeasure, data: Encoded, index: np.ndarray, mask: np.ndarray | None,
                cells: int) -> np.ndarray:
    """A mean's two exact histograms over the same rows, stacked (int64, shape (2, cells)): row 0
    the per-cell sum of the centred values in units of the granularity, row 1 the per-cell row
    count.

    Privacy contract: each row's value is clamped to [low, high], rounded (half to even) to the
    grid and centred (value − centre), or is 0 clamped to the bounds if missing with ``missing:
    zero``; with ``missing: skip`` a row without a value is in neither histogram. A row-wise map:
    adding or removing one row moves one cell of the sum by at most m = max(|low − centre|,
    |high − centre|) and one cell of the count by 1; changing one record moves the sums by at
    most 2m (max(high − low, m) in a single cell) and the counts by 2 — the sensitivities of
    :meth:`MeanMeasure.centred_sum` and of a count, which the planner uses for the two parts
    (times the contribution bound K).
    """
    values = data.values[measure.column] if mask is None else data.values[measure.column][mask]
    present = ~np.isnan(values)
    if measure.missing == "skip" and not present.all():
        index, values, present = index[present], values[present], present[present]
    g = measure.granularity
    clamped = np.clip(np.where(present, values, 0.0), measure.low, measure.high)
    units = np.rint(clamped / g) - measure.centre // g
    sums = _exact_sums(units, index, cells, measure.column, g)
    return np.stack([sums, np.bincount(index, minlength=cells).astype(np.int64)])


def _sums(measure: SumMeasure, data: Encoded, index: np.ndarray, mask: np.ndarray | None, cells: int) -> np.ndarray:
    """Per cell, the sum of the clamped, discretised values, in units of the granularity (int64).

    Privacy contract: each row's contribution is clamped to [low, high] and rounded (half to
    even) to a multiple of the granularity, or is 0 if missing (only with ``missing: zero``): a
    row-wise map, so adding or removing one row moves one cell by at most M = max(|low|, |high|),
    and changing one row moves the sums by at most 2M in total (max(high − low, M) for one
    cell): the sensitivities the planner uses (:meth:`SumMeasure.sensitivity`). Integer sums,
    exact: in float64 only when every partial sum stays below 2^53, else in int64.
    """
    g = measure.granularity
    values = data.values[measure.column] if mask is None else data.values[measure.column][mask]
    units = np.where(np.isnan(values), 0.0, np.rint(np.clip(values, measure.low, measure.high) / g))
    return _exact_sums(units, index, cells, measure.column, g)


def _exact_sums(units: np.ndarray, index: np.ndarray, cells: int, column: str, g: int) -> np.ndarray:
    """Per cell, the exact integer sum of ``units`` (whole numbers held as float64), int64: in
    float64 only when every partial sum stays below 2^53, else in int64; refuses sums that could
    overflow int64."""
    if np.abs(units).sum() < 2.0**53:  # every partial sum is an exact float64 integer
        return np.bincount(index, weights=units, minlength=cells).astype(np.int64)
    if np.abs(units).max(initial=0) * units.size >= 2.0**63:
        raise DataError(f"a sum of {column} could exceed 2^63 units of the granularity {g}: raise the "
                        "granularity or narrow the bounds")
    order = np.argsort(index, kind="stable")
    ordered = index[order]
    starts = group_starts(ordered)
    sums = np.zeros(cells, dtype=np.int64)
    if ordered.size:
        sums[ordered[starts]] = np.add.reduceat(units.astype(np.int64)[order], starts)
    return sums


def where_mask(spec: Spec, conditions: tuple[Condition, ...], data: Encoded) -> np.ndarray | None:
    """Rows that satisfy every condition; a missing value never satisfies one (but a rule's
    ``missing``)."""
    if not conditions:
        return None
    mask = np.ones(data.rows, dtype=bool)
    for condition in conditions:
        mask &= holds(spec.column(condition.column), condition, data.codes[condition.column])
    return mask


def place_totals(spec: Spec, data: Encoded) -> dict[str, np.ndarray]:
    """The exact number of rows per place at every invariant level (``spec.invariant_levels``).

    NOT differentially private: these are the release's invariants, published exactly because
    the spec's ``invariants:`` block says so. The rows counted are the encoded dataset's (after
    any ``on_out_of_domain: drop``), so every table without a ``where`` adds up to them.
    """
    totals: dict[str, np.ndarray] = {}
    for level in spec.invariant_levels:
        if level == ROOT:
            totals[level] = np.array([data.rows], dtype=np.int64)
        else:
            totals[level] = np.bincount(data.codes[level], minlength=spec.column(level).size).astype(np.int64)
    return totals
