"""Non-negativity: the nearest non-negative values with the sums that keep a group consistent.

One job: given real targets (the GLS estimate, :mod:`.gls`) and exact sums fixed earlier (a
parent's cells, a child's separator cells), the Euclidean-nearest non-negative values with those
sums. Two shapes occur (:mod:`.topdown`):

* a vector per block with one sum (:func:`project_segments`): the projection onto the simplex
  {x ≥ 0, Σ x = s} (Duchi et al. 2008), segment by segment, vectorised;
* a matrix per block — children × a table's cells inside one separator cell — whose rows must
  sum to the children's separator cell and whose columns to the parent's cells
  (:func:`project_two_way`): Dykstra's alternating projections (Boyle and Dykstra 1986) between
  the row simplices and the column simplices, which converge to the nearest point of their
  intersection; stopped when every row sum is within ``SUM_TOLERANCE`` of its target (columns
  are exact after every sweep), or after ``MAX_SWEEPS``. The rounding that follows
  (:mod:`.integral`) makes the sums exact whatever is left.

Floats are fine here: this is post-processing of published noisy values. Imports numpy only.
"""

from __future__ import annotations

import numpy as np

SUM_TOLERANCE = 1e-6  # in persons: the row sums' largest distance from their targets to stop at
MAX_SWEEPS = 500


def project_segments(values: np.ndarray, segment: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per segment (``segment[i]`` the segment of ``values[i]``), the Euclidean projection of its
    values onto {x ≥ 0, Σ x = targets[segment]}. ``targets`` must be ≥ 0."""
    if values.size == 0:
        return values.astype(np.float64)
    order = np.lexsort((-values, segment))
    v, s = values[order].astype(np.float64), segment[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    lengths = np.diff(np.r_[starts, s.size])
    start_of = np.repeat(starts, lengths)
    cumulative = np.cumsum(v)
    before = np.where(start_of > 0, cumulative[np.maximum(start_of - 1, 0)], 0.0)
    within = cumulative - before
    k = np.arange(s.size) - start_of + 1
    t = targets[s].astype(np.float64)
    active = v - (within - t) / k > 0
    count = np.add.reduceat(active.astype(np.int64), starts)
    last = starts + np.maximum(count, 1) - 1
    theta = np.where(count > 0, (within[last] - targets[s[starts]]) / np.maximum(count, 1), np.inf)
    out = np.empty_like(v)
    out[order] = np.maximum(v - np.repeat(theta, lengths), 0.0)
    return out


def project_two_way(values: np.ndarray, rows: np.ndarray, row_targets: np.ndarray, cols: np.ndarray,
                    col_targets: np.ndarray, blocks: np.ndarray | None = None) -> np.ndarray:
    """The nearest non-negative ``values`` whose sums per ``rows`` segment and per ``cols``
    segment are the targets (the two must have the same total within each block they share).
    ``blocks``: each value's block (a set of rows and columns no other block touches), if known.

    Starts with the affine projection (``_affine``): in a block where it leaves no negative value
    it is the answer. The other blocks, alone, go to Dykstra's algorithm, rows then columns."""
    x = _affine(values.astype(np.float64), rows, row_targets, cols, col_targets)
    if x.size == 0 or x.min() >= 0:
        return x
    if blocks is not None:  # only the blocks with a negative value need more
        redo = np.isin(blocks, np.unique(blocks[x < 0]))
        used_rows, sub_rows = np.unique(rows[redo], return_inverse=True)
        used_cols, sub_cols = np.unique(cols[redo], return_inverse=True)
        x[redo] = _dykstra(np.asarray(values, dtype=np.float64)[redo], sub_rows, row_targets[used_rows],
                           sub_cols, col_targets[used_cols])
        return x
    return _dykstra(np.asarray(values, dtype=np.float64), rows, row_targets, cols, col_targets)


def _dykstra(x: np.ndarray, rows: np.ndarray, row_targets: np.ndarray, cols: np.ndarray,
             col_targets: np.ndarray) -> np.ndarray:
    """Dykstra's alternating projections between the row and the column simplices, from ``x``."""
    p = np.zeros_like(x)
    q = np.zeros_like(x)
    for _ in range(MAX_SWEEPS):
        y = project_segments(x + p, rows, row_targets)
        p = x + p - y
        x = project_segments(y + q, cols, col_targets)
        q = y + q - x
        if np.abs(np.bincount(rows, weights=x, minlength=row_targets.size) - row_targets).max() < SUM_TOLERANCE:
            break
    return x


def _affine(values: np.ndarray, rows: np.ndarray, row_targets: np.ndarray, cols: np.ndarray,
            col_targets: np.ndarray) -> np.ndarray:
    """The Euclidean projection onto the row and column sums alone, when every row segment and
    every column segment meet in a full block (a complete children × cells grid): each value moves by
    its row's gap over the row's length, plus its column's gap over the column's length, minus the
    block's gap over its size. Assumes full grids: every caller's blocks are (the same cells in
    every child of a parent)."""
    row_len = np.bincount(rows, minlength=row_targets.size).astype(np.float64)
    col_len = np.bincount(cols, minlength=col_targets.size).astype(np.float64)
    row_gap = row_targets - np.bincount(rows, weights=values, minlength=row_targets.size)
    col_gap = col_targets - np.bincount(cols, weights=values, minlength=col_targets.size)
    block_size = row_len[rows] * col_len[cols]  # children × cells of the value's block
    with np.errstate(divide="ignore", invalid="ignore"):
        row_part = np.where(row_len[rows] > 0, row_gap[rows] / row_len[rows], 0.0)
        col_part = np.where(col_len[cols] > 0, col_gap[cols] / col_len[cols], 0.0)
    block_gap = _block_gap(rows, row_gap, cols)
    return values + row_part + col_part - np.where(block_size > 0, block_gap / block_size, 0.0)


def _block_gap(rows: np.ndarray, row_gap: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Per value, the summed gap of the rows that meet its column: in a full grid, each column
    meets every row of its block once, so this is the block's gap."""
    per_col = np.zeros(int(cols.max()) + 1 if cols.size else 0)
    np.add.at(per_col, cols, row_gap[rows])
    return per_col[cols]
