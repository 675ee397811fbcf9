"""Non-negativity: the nearest non-negative values with the sums that keep a group consistent.

One job: given real targets (the GLS estimate, :mod:`.gls`) and exact sums fixed earlier (a
parent's cells, a child's separator cells), the Euclidean-nearest non-negative values with those
sums. Two shapes occur (:mod:`.topdown`):

* a vector per block with one sum (:func:`project_segments`): the projection onto the simplex
  {x ≥ 0, Σ x = s} (Duchi et al. 2008), segment by segment, vectorised;
* a matrix per block — children × a table's cells inside one separator cell — whose rows must
  sum to the children's separator cell and whose columns to the parent's cells
  (:func:`project_two_way`): each block projected exactly and on its own by
  :func:`.transport.fit_blocks` (semismooth Newton on the dual; the top-down fit calls it per
  parent through :mod:`.parents`). The rounding that follows (:mod:`.integral`) makes the sums
  exact in integers.

Floats are fine here: this is post-processing of published noisy values. Imports numpy, scipy
(the blocks' connected parts) and :mod:`.transport`.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from dprelease.postprocess import transport
from dprelease.postprocess.transport import FitWarning, fit_blocks

SUM_TOLERANCE = 1e-6  # in persons: a bound on the fit's sums' distance from their targets (tests)


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
    ``blocks``: each value's block (a set of rows and columns no other block touches), if known;
    else the connected parts of the rows and columns the values join.

    Each block is the matrix of its rows × its columns (a pair with no value: no variable),
    projected exactly on its own (:func:`.transport.fit_blocks`). A block that reached the
    iteration cap is reported by a :class:`.transport.FitWarning`."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    if blocks is None:
        graph = scipy.sparse.coo_matrix((np.ones(x.size), (rows, row_targets.size + cols)),
                                        shape=(row_targets.size + col_targets.size,) * 2)
        blocks = scipy.sparse.csgraph.connected_components(graph, directed=False)[1][rows]
    block, local_row, n_rows = _local(blocks, rows)
    _, local_col, n_cols = _local(blocks, cols)
    out = np.empty_like(x)
    unconverged = 0
    for chunk in _by_size(n_rows * n_cols):
        in_chunk = np.isin(block, chunk)
        b = np.searchsorted(chunk, block[in_chunk])
        lr, lc = local_row[in_chunk], local_col[in_chunk]
        v = np.full((chunk.size, int(n_rows[chunk].max()), int(n_cols[chunk].max())), -np.inf)
        v[b, lr, lc] = x[in_chunk]
        r = np.zeros(v.shape[:2])
        r[b, lr] = row_targets[rows[in_chunk]]
        c = np.zeros((v.shape[0], v.shape[2]))
        c[b, lc] = col_targets[cols[in_chunk]]
        fit = fit_blocks(v, r, c)
        out[in_chunk] = fit.x[b, lr, lc]
        unconverged += fit.unconverged
    if unconverged:
        warnings.warn(FitWarning(f"{unconverged} blocks reached the cap of {transport.MAX_ITERATIONS} iterations"), stacklevel=2)
    return out


def _local(blocks: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per value: its block (0, 1, …), its ``index``'s rank within the block; per block, how
    many distinct ``index`` values it has."""
    _, block = np.unique(blocks, return_inverse=True)
    pairs, pair_of = np.unique(np.stack([block, index]), axis=1, return_inverse=True)
    first = np.searchsorted(pairs[0], pairs[0], side="left")
    return block, (np.arange(pairs.shape[1]) - first)[pair_of.ravel()], np.bincount(pairs[0])


def _by_size(cells: np.ndarray, most: int = 1 << 20) -> list[np.ndarray]:
    """The blocks, smallest first, in groups of about ``most`` padded cells."""
    order = np.argsort(cells, kind="stable")
    groups, first = [], 0
    while first < order.size:
        last = first + 1
        while last < order.size and cells[order[last]] * (last - first + 1) <= most:
            last += 1
        groups.append(np.sort(order[first:last]))
        first = last
    return groups
