"""Non-negativity: the nearest non-negative values with the sums that keep a group consistent.

One job: given real targets (the GLS estimate, :mod:`.gls`) and exact sums fixed earlier (a
parent's cells, a child's separator cells), the Euclidean-nearest non-negative values with those
sums, where each block has one sum (:mod:`.topdown`: the root's tables, the places' totals):
per segment the projection onto the simplex {x ≥ 0, Σ x = s} (Duchi et al. 2008), vectorised
(:func:`project_segments`). The other shape, a matrix per block whose rows and columns both
have sums (a parent's children × a table's cells inside one separator cell), is
:func:`.transport.fit_blocks`, which the top-down fit calls per parent through :mod:`.parents`.
The rounding that follows (:mod:`.integral`) makes the sums exact in integers.

Floats are fine here: this is post-processing of published noisy values. Imports numpy only.
"""

from __future__ import annotations

import numpy as np

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
