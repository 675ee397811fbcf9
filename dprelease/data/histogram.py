"""The exact histograms of some encoded rows: a mixed-radix key per row (place and cell in one
integer), counted into partials (:class:`~dprelease.data.partials.Partial`).

Model. A (table, level) histogram has the cells of the cross product of its dimensions' declared
domains (the level's place in front of the table's group_by, a mode's column last), row-major
(last fastest). A row's key is its cell's index; the rows counted are those that satisfy the
table's ``where`` (and, for a mean with ``missing: skip``, those with a value). A count adds 1 per
row, a sum the row's clamped value in units of the granularity, a mean both (its sum of centred
values, and its count). The table's cell index over its group_by is computed once per batch and
shared by its levels (key = place × cells of the group_by + cell).

Privacy contract (a transformation, no noise): under add/remove one row, one row lands in
at most one cell, so the L1 distance between neighbouring histograms is at most 1; under
change one record (releases with invariants) it is at most 2. With a contribution bound
(``privacy.unit.max_rows`` = K, rows beyond it dropped before counting) a person is up to K
rows, so both bounds are K times larger. The shape is the full cross product of the declared
domains, empty cells included, so it never depends on the data: a sparse partial holds only
occupied cells, but every cell of the declared domain is in the histogram it stands for
(:meth:`~dprelease.data.partials.Partial.dense`), and only that dense form reaches the noise.

Cost per batch of n rows and a table of L levels and g group_by columns: O(n·g) for the cell
index, O(n) per level for its keys, then :func:`~dprelease.data.partials.count_keys` (O(n log n)
sparse, O(n + cells) dense). Imports the spec, :class:`~dprelease.data.load.Encoded` (the type of
encoded rows) and :mod:`dprelease.data.partials`.
"""

from __future__ import annotations

import numpy as np

from dprelease.data.load import Encoded
from dprelease.data.partials import Partial, count_keys, exact_sums, key_dtype
from dprelease.spec import ROOT, Condition, MeanMeasure, ModeMeasure, Spec, SumMeasure, Table
from dprelease.spec.conditions import holds


def histogram(spec: Spec, table: Table, data: Encoded, dims: tuple[str, ...] | None = None) -> np.ndarray:
    """Exact counts (int64), cells in row-major order of ``dims`` (last fastest).

    ``dims`` defaults to the table's group_by; a geographic table passes each level's.
    """
    dims = table.group_by if dims is None else dims
    cells = spec.dims_cells(dims)
    rows, weights = selected(table, data, where_mask(spec, table.where, data))
    keys = cell_index(spec, dims, data, rows, key_dtype(cells))
    values = count_keys(keys, cells, weights, _summed(table), _granularity(table)).dense()
    return values[0] if values.shape[0] == 1 else values


def table_partials(spec: Spec, table: Table, data: Encoded) -> dict[str | None, Partial]:
    """Every level's histogram of one table over these rows (a mode's categories as the last
    dimension): the where mask, the weights and the group_by's cell index computed once."""
    inner = table.group_by + ((table.measure.column,) if isinstance(table.measure, ModeMeasure) else ())
    rows, weights = selected(table, data, where_mask(spec, table.where, data))
    m = spec.dims_cells(inner)
    categories = m // spec.dims_cells(table.group_by)  # a mode's column (1 for the other measures)
    cell = cell_index(spec, inner, data, rows, key_dtype(max(histogram_cells(spec, table).values())))
    out: dict[str | None, Partial] = {}
    for level, dims, _ in table.measured():
        cells = spec.dims_cells(dims) * categories
        if level is None or level == ROOT:
            keys = cell
        else:
            place = data.codes[level] if rows is None else data.codes[level][rows]
            keys = place.astype(cell.dtype) * m + cell
        out[level] = count_keys(keys, cells, weights, _summed(table), _granularity(table))
    return out


def histogram_cells(spec: Spec, table: Table) -> dict[str | None, int]:
    """Per level of a table, its histogram's cells (a mode's categories included)."""
    categories = spec.column(table.measure.column).size if isinstance(table.measure, ModeMeasure) else 1
    return {level: spec.dims_cells(dims) * categories for level, dims, _ in table.measured()}


def parts(table: Table) -> int:
    """Integer rows of a table's histogram: 2 for a mean (its sum and count), else 1."""
    return 2 if isinstance(table.measure, MeanMeasure) else 1


def cell_index(spec: Spec, dims: tuple[str, ...], data: Encoded, rows: np.ndarray | None,
               dtype: np.dtype) -> np.ndarray:
    """Each selected row's cell in the row-major cross product of ``dims`` (mixed radix)."""
    n = data.rows if rows is None else int(rows.sum())
    index = np.zeros(n, dtype=dtype)
    for name in dims:
        index *= spec.column(name).size
        index += data.codes[name] if rows is None else data.codes[name][rows]
    return index


def selected(table: Table, data: Encoded, mask: np.ndarray | None) -> tuple[np.ndarray | None,
                                                                          tuple[np.ndarray | None, ...]]:
    """The rows a table counts (None: all) and, per part of its histogram, the weights of those
    rows (None: a count). A mean's parts are its sum and its count over the same rows."""
    measure = table.measure
    if isinstance(measure, SumMeasure):
        return mask, (_sum_units(measure, data.values[measure.column] if mask is None
                                 else data.values[measure.column][mask]),)
    if isinstance(measure, MeanMeasure):
        values = data.values[measure.column]
        if measure.missing == "skip" and np.isnan(values if mask is None else values[mask]).any():
            mask = ~np.isnan(values) if mask is None else mask & ~np.isnan(values)
        return mask, (_mean_units(measure, values if mask is None else values[mask]), None)
    return mask, (None,)


def _summed(table: Table) -> str:
    return table.measure.column if isinstance(table.measure, (SumMeasure, MeanMeasure)) else ""


def _granularity(table: Table) -> int:
    return table.measure.granularity if isinstance(table.measure, (SumMeasure, MeanMeasure)) else 1


def _sum_units(measure: SumMeasure, values: np.ndarray) -> np.ndarray:
    """Each row's contribution to a sum, in units of the granularity (whole numbers, float64).

    Privacy contract: each row's contribution is clamped to [low, high] and rounded (half to
    even) to a multiple of the granularity, or is 0 if missing (only with ``missing: zero``): a
    row-wise map, so adding or removing one row moves one cell by at most M = max(|low|, |high|),
    and changing one row moves the sums by at most 2M in total (max(high − low, M) for one
    cell): the sensitivities the planner uses (:meth:`SumMeasure.sensitivity`).
    """
    g = measure.granularity
    return np.where(np.isnan(values), 0.0, np.rint(np.clip(values, measure.low, measure.high) / g))


def _mean_units(measure: MeanMeasure, values: np.ndarray) -> np.ndarray:
    """Each row's contribution to a mean's sum: the centred value in units of the granularity.

    Privacy contract: each row's value is clamped to [low, high], rounded (half to even) to the
    grid and centred (value − centre), or is 0 clamped to the bounds if missing with ``missing:
    zero``; with ``missing: skip`` a row without a value is in neither histogram (see
    :func:`selected`). A row-wise map: adding or removing one row moves one cell of the sum by at
    most m = max(|low − centre|, |high − centre|) and one cell of the count by 1; changing one
    record moves the sums by at most 2m (max(high − low, m) in a single cell) and the counts by
    2 — the sensitivities of :meth:`MeanMeasure.centred_sum` and of a count, which the planner
    uses for the two parts (times the contribution bound K).
    """
    g = measure.granularity
    clamped = np.clip(np.where(np.isnan(values), 0.0, values), measure.low, measure.high)
    return np.rint(clamped / g) - measure.centre // g


def _sums(measure: SumMeasure, data: Encoded, index: np.ndarray, mask: np.ndarray | None, cells: int) -> np.ndarray:
    """Per cell, the sum of the clamped, discretised values, in units of the granularity (int64):
    dense, exact (see :func:`_sum_units` and :func:`dprelease.data.partials.exact_sums`)."""
    values = data.values[measure.column] if mask is None else data.values[measure.column][mask]
    return exact_sums(_sum_units(measure, values), index, cells, measure.column, measure.granularity)


def where_mask(spec: Spec, conditions: tuple[Condition, ...], data: Encoded) -> np.ndarray | None:
    """Rows that satisfy every condition; a missing value never satisfies one (but a rule's
    ``missing``)."""
    if not conditions:
        return None
    mask = np.ones(data.rows, dtype=bool)
    for condition in conditions:
        mask &= holds(spec.column(condition.column), condition, data.codes[condition.column])
    return mask


def place_partials(spec: Spec, data: Encoded) -> dict[str, Partial]:
    """:func:`place_totals` as partials (sparse where a level has many places against the rows).

    NOT differentially private: the release's declared invariants (see :func:`place_totals`)."""
    out: dict[str, Partial] = {}
    for level in spec.invariant_levels:
        if level == ROOT:
            out[level] = Partial(1, np.array([[data.rows]], dtype=np.int64))
        else:
            out[level] = count_keys(data.codes[level], spec.column(level).size)
    return out


def place_totals(spec: Spec, data: Encoded) -> dict[str, np.ndarray]:
    """The exact number of rows per place at every invariant level (``spec.invariant_levels``).

    NOT differentially private: these are the release's invariants, published exactly because
    the spec's ``invariants:`` block says so. The rows counted are the encoded dataset's (after
    any ``on_out_of_domain: drop``), so every table without a ``where`` adds up to them.
    """
    return {level: p.dense()[0] for level, p in place_partials(spec, data).items()}
