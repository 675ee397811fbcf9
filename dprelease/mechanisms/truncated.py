"""The truncated geometric mechanism (Ghosh, Roughgarden and Sundararajan 2009).

Privacy contract: for a count with a declared public upper bound n, under add/remove one row
(L1 sensitivity Δ = 1; under change one record Δ = 2), the true count is first clamped to
[0, n] (a stable transformation: neighbours stay within Δ), two-sided geometric noise
(discrete Laplace of scale Δ/ε) is added, and the result is clamped to [0, n]. Clamping the
output is post-processing, so the result is ε-DP; it is the range-restricted geometric
mechanism that GRS prove universally optimal for a single counting query (every
minimax Bayesian consumer can derive its optimal mechanism from it). Outputs lie in [0, n].
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dprelease.mechanisms.sampling import discrete_laplace


def truncated_geometric(counts: np.ndarray, upper: int, scale: Fraction | int, *, rng=None) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Counts clamped to [0, upper], discrete Laplace noise of ``scale`` (= Δ/ε) added, and the
    result clamped to [0, upper] (int64). ``rng`` is the test-only seam."""
    if upper < 0:
        raise ValueError("the upper bound must be non-negative")
    clamped = np.clip(np.asarray(counts, dtype=np.int64), 0, upper)
    return np.clip(clamped + discrete_laplace(scale, clamped.size, rng=rng), 0, upper)
