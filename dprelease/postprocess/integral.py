"""Rounding: integers with exact sums, each value its non-negative real fit rounded down or up.

One job: turn the non-negative fit (:mod:`.nonnegative`) into integers that keep the sums that
make a group consistent, moving each value by less than one (where the fit's sums are exact).

* One sum per segment (:func:`round_segments`): floors, then the missing units to the largest
  remainders (the L1-nearest integers with that sum).
* Row and column sums (:func:`round_two_way`): choose, for each value with a fractional part,
  floor or ceiling so that every row and column sum is met (Cox 1987's controlled rounding of
  two-way tables): a maximum flow through the bipartite graph rows → values → columns, which
  exists whenever the fit's sums are exact (the fractions themselves are a fractional flow) and
  is whole; values nearer their ceiling are offered first (``THRESHOLDS``). Where the fit's sums
  are off (Dykstra stopped early), a linear programme finds the integers with the exact sums
  nearest to the fit in Σ|·| (its constraint matrix is a network's, so its vertices are whole).

Imports numpy and scipy; sees published noisy values only.
"""

from __future__ import annotations

import numpy as np

from dprelease.errors import InternalError

FRACTION_TOLERANCE = 1e-9  # a fractional part below this (or above 1 − this) is a whole number
INTEGRAL_TOLERANCE = 1e-6  # a vertex's coordinates are whole to within this
THRESHOLDS = (0.5, 0.25, 0.0)  # rounding up: values with at least this fraction first, then lower


def round_segments(values: np.ndarray, segment: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per segment, integers summing exactly to ``targets[segment]`` (whole, ≥ 0): floors of the
    non-negative ``values``, then one unit each to the largest remainders (ties: first value);
    where the floors already exceed the target (a fit whose sum was not exact), units come off
    the largest values."""
    x = np.maximum(values, 0.0)
    low = np.floor(x + FRACTION_TOLERANCE)
    frac = np.where(x - low > FRACTION_TOLERANCE, x - low, 0.0)
    n_seg = targets.size
    missing = targets.astype(np.int64) - np.bincount(segment, weights=low, minlength=n_seg).round().astype(np.int64)
    order = np.lexsort((np.arange(x.size), -frac, segment))  # per segment, largest remainder first
    s = segment[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]) if s.size else np.array([], dtype=np.int64)
    rank = np.arange(s.size) - np.repeat(starts, np.diff(np.r_[starts, s.size]))
    out = low.astype(np.int64)
    up = rank < missing[s]
    out[order[up]] += 1
    for seg in np.flatnonzero(missing < 0):  # only where the fit's sum was off: units off the largest values
        members = np.flatnonzero(segment == seg)
        for i in members[np.argsort(-out[members], kind="stable")]:
            take = min(int(out[i]), int(-missing[seg]))
            out[i] -= take
            missing[seg] += take
            if missing[seg] == 0:
                break
    return out


def round_two_way(values: np.ndarray, rows: np.ndarray, row_targets: np.ndarray, cols: np.ndarray,
                  col_targets: np.ndarray) -> np.ndarray:
    """Non-negative integers with every row and column sum exactly its (whole) target, the
    nearest in Σ|integer − value| to the non-negative ``values``: floor or ceiling of each value
    when the values' sums are exact (see the module's docstring)."""
    x = np.maximum(values, 0.0)
    low = np.floor(x + FRACTION_TOLERANCE)
    frac = x - low
    free = np.flatnonzero(frac > FRACTION_TOLERANCE)
    base = low.astype(np.int64)
    need_rows = row_targets.astype(np.int64) - np.bincount(rows, weights=low, minlength=row_targets.size).round().astype(np.int64)
    need_cols = col_targets.astype(np.int64) - np.bincount(cols, weights=low, minlength=col_targets.size).round().astype(np.int64)
    if not need_rows.any() and not need_cols.any():
        return base
    up = _choose(free, frac, rows, cols, need_rows, need_cols)
    if up is not None:
        base[free] += up
        return base
    return _nearest(x, rows, row_targets, cols, col_targets)


def _choose(free: np.ndarray, frac: np.ndarray, rows: np.ndarray, cols: np.ndarray, need_rows: np.ndarray,
            need_cols: np.ndarray) -> np.ndarray | None:
    """0/1 per free value (1: round up) giving every row and column its missing units; None when
    no such choice exists. A maximum flow through rows → values → columns (scipy's Dinic, whole
    numbers) over the values whose fraction is at least a threshold, lowered through
    ``THRESHOLDS`` until the flow carries every missing unit: values nearer their ceiling go up
    first (each value moves by under one either way)."""
    if (need_rows < 0).any() or (need_cols < 0).any() or free.size == 0:
        return None
    total = int(need_rows.sum())
    if total != int(need_cols.sum()):
        return None
    n_rows, n_cols = need_rows.size, need_cols.size
    import scipy.sparse  # (imported at start by gls anyway)
    import scipy.sparse.csgraph  # here: a run that never rounds two ways does not import it (CLI latency)

    source, sink = n_rows + n_cols, n_rows + n_cols + 1
    for threshold in THRESHOLDS:
        use = free[frac[free] >= threshold] if threshold > 0 else free
        graph = scipy.sparse.csr_matrix(
            (np.r_[need_rows, np.ones(use.size, dtype=np.int64), need_cols].astype(np.int32),
             (np.r_[np.full(n_rows, source), rows[use], n_rows + np.arange(n_cols)],
              np.r_[np.arange(n_rows), n_rows + cols[use], np.full(n_cols, sink)])),
            shape=(n_rows + n_cols + 2, n_rows + n_cols + 2))
        result = scipy.sparse.csgraph.maximum_flow(graph, source, sink, method="dinic")
        if result.flow_value == total:
            flow = result.flow.tocsr()
            up = np.asarray(flow[rows[use], n_rows + cols[use]]).ravel() > 0
            chosen = np.zeros(free.size, dtype=np.int64)
            chosen[np.searchsorted(free, use[up])] = 1
            return chosen
    return None


def _nearest(x: np.ndarray, rows: np.ndarray, row_targets: np.ndarray, cols: np.ndarray,
             col_targets: np.ndarray) -> np.ndarray:
    """Non-negative integers with the exact sums, nearest to ``x`` in Σ|·| when floors and
    ceilings alone cannot meet them: per value, a unit up at cost 1 − 2·frac, further units up at
    1, units down at 1 (a convex piecewise-linear cost: the flow problem's vertices stay whole)."""
    import scipy.optimize  # here: seldom needed, and 0.3 s to import (every run's start)
    import scipy.sparse

    low = np.floor(x + FRACTION_TOLERANCE)
    frac = np.clip(x - low, 0, 1)
    n = x.size
    eye = np.arange(n)
    r = scipy.sparse.csr_matrix((np.ones(n), (rows, eye)), shape=(row_targets.size, n))
    c = scipy.sparse.csr_matrix((np.ones(n), (cols, eye)), shape=(col_targets.size, n))
    a = scipy.sparse.vstack([scipy.sparse.hstack([r, r, -r]), scipy.sparse.hstack([c, c, -c])]).tocsr()
    b = np.r_[row_targets - r @ low, col_targets - c @ low]
    cost = np.r_[1 - 2 * frac, np.ones(n), np.ones(n)]
    bounds = [(0, 1)] * n + [(0, None)] * n + [(0, float(v)) for v in low]
    result = scipy.optimize.linprog(cost, A_eq=a, b_eq=b, bounds=bounds, method="highs-ds")
    if result.status != 0:
        raise InternalError(f"controlled rounding found no integers with the required sums ({result.message})")
    step = np.round(result.x)
    return (low + step[:n] + step[n:2 * n] - step[2 * n:]).astype(np.int64)
