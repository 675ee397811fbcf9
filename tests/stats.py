"""Statistical test helpers (tested themselves by the negative controls that use them)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def discrete_laplace_pmf(k: np.ndarray, scale: float) -> np.ndarray:
    p = math.exp(-1 / scale)
    return (1 - p) / (1 + p) * p ** np.abs(k)


def chi_square_pvalue(samples: np.ndarray, pmf, min_expected: float = 5.0) -> float:
    """Goodness of fit of integer ``samples`` to ``pmf`` (a function of an int array).

    Bins are the integers whose expected count is ≥ ``min_expected``, taken as one contiguous
    run around the mode; everything below and above is pooled into two tail bins.
    """
    n = samples.size
    lo, hi = int(samples.min()), int(samples.max())
    span = np.arange(min(lo, -10) - 1, max(hi, 10) + 2)
    expected = n * pmf(span)
    keep = np.flatnonzero(expected >= min_expected)
    first, last = span[keep[0]], span[keep[-1]]
    inner = np.arange(first, last + 1)
    observed_inner = np.bincount(samples[(samples >= first) & (samples <= last)] - first,
                                 minlength=inner.size)
    expected_inner = n * pmf(inner)
    observed = np.concatenate([[np.sum(samples < first)], observed_inner, [np.sum(samples > last)]])
    p_inner = pmf(inner).sum()
    # tail probabilities: the pmf is symmetric around 0 for the distributions tested here
    lower = _tail_below(pmf, first)
    upper = max(0.0, 1.0 - p_inner - lower)
    expected = np.concatenate([[n * lower], expected_inner, [n * upper]])
    mask = expected > 0
    # pool a tail into its neighbour if it is too small to test
    observed, expected = _pool_small_tails(observed[mask], expected[mask], min_expected)
    chi2 = float(np.sum((observed - expected) ** 2 / expected))
    return float(stats.chi2.sf(chi2, df=observed.size - 1))


def _tail_below(pmf, first: int) -> float:
    k = np.arange(first - 1, first - 200_000, -1)
    return float(pmf(k).sum())


def _pool_small_tails(observed, expected, min_expected):
    observed, expected = list(observed), list(expected)
    while len(expected) > 2 and expected[0] < min_expected:
        observed[1] += observed.pop(0)
        expected[1] += expected.pop(0)
    while len(expected) > 2 and expected[-1] < min_expected:
        observed[-2] += observed.pop()
        expected[-2] += expected.pop()
    return np.array(observed, dtype=float), np.array(expected, dtype=float)


def empirical_epsilon(exceed_x: np.ndarray, exceed_x1: np.ndarray) -> tuple[float, float]:
    """ε̂ = ln(P̂1/P̂0) of one event on two neighbouring inputs, and its delta-method SE."""
    p0, p1 = exceed_x.mean(), exceed_x1.mean()
    n0, n1 = exceed_x.size, exceed_x1.size
    se = math.sqrt((1 - p0) / (n0 * p0) + (1 - p1) / (n1 * p1))
    return math.log(p1 / p0), se


def discrete_gaussian_pmf(k: np.ndarray, sigma2: float) -> np.ndarray:
    support = np.arange(-int(40 * math.sqrt(sigma2)) - 40, int(40 * math.sqrt(sigma2)) + 41)
    norm = np.exp(-support.astype(float) ** 2 / (2 * sigma2)).sum()
    return np.exp(-np.asarray(k, dtype=float) ** 2 / (2 * sigma2)) / norm


def finite_chi_square_pvalue(samples: np.ndarray, probabilities: np.ndarray) -> float:
    """Goodness of fit of codes in [0, len(probabilities)) to a finite distribution (cells with
    expected count below 5 pooled into one)."""
    observed = np.bincount(samples, minlength=probabilities.size).astype(float)
    expected = samples.size * probabilities
    small = expected < 5
    if small.any():
        observed = np.r_[observed[~small], observed[small].sum()]
        expected = np.r_[expected[~small], expected[small].sum()]
    return float(stats.chisquare(observed, expected).pvalue)


def opendp():
    """OpenDP's prelude, the test-only oracle (in the test extra); skipped outside CI if absent."""
    import os

    import pytest

    try:
        import opendp.prelude as dp
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("OpenDP (test extra) is not installed")
    dp.enable_features("contrib")
    return dp
