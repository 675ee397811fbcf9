"""The truncated geometric mechanism (Ghosh, Roughgarden and Sundararajan 2009).

Privacy contract: for a count with a declared public upper bound n, with L1 sensitivity Δ
(1 under add/remove one row, 2 under change one record, times the contribution bound K of
``privacy.unit.max_rows``), the true count is first clamped to [0, n] (a stable
transformation: neighbours stay within Δ), two-sided geometric noise (discrete Laplace of
scale Δ/ε) is added, and the result is clamped to [0, n]. Clamping the output is
post-processing, so the result is ε-DP. For Δ = 1 it is the range-restricted geometric
mechanism that GRS prove universally optimal for a single counting query (every minimax
Bayesian consumer can derive its optimal mechanism from it); for Δ > 1 it is still ε-DP, but
the optimality result does not apply. Outputs lie in [0, n].
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dprelease.mechanisms.sampling import Entropy, discrete_laplace


def truncated_geometric(counts: np.ndarray, upper: int, scale: Fraction | int, *, rng: Entropy | None = None) -> np.ndarray:
    """Counts clamped to [0, upper], discrete Laplace noise of ``scale`` (= Δ/ε) added, and the
    result clamped to [0, upper] (int64). ``rng`` is the test-only seam."""
    if upper < 0:
        raise ValueError("the upper bound must be non-negative")
    clamped = np.clip(np.asarray(counts, dtype=np.int64), 0, upper)
    noisy: np.ndarray = np.clip(clamped + discrete_laplace(scale, clamped.size, rng=rng), 0, upper)
    return noisy
