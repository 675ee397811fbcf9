"""The discrete Laplace sampler draws exactly the right distribution from the OS CSPRNG.

Every test here uses the real CSPRNG path (no seed). Thresholds are set so that a correct
sampler fails by chance about once in a million runs per assertion (α = 1e-6 for the
chi-square tests; 6 standard errors ≈ 2e-9 two-sided for the privacy-loss estimates).
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dprelease.mechanisms import discrete_laplace
from dprelease.mechanisms.sampling import _uniform_below_64, uniform_below
from tests.stats import chi_square_pvalue, discrete_laplace_pmf, empirical_epsilon

ALPHA = 1e-6
N = 1_000_000
SCALES = [Fraction(1, 2), Fraction(1), Fraction(7, 3), Fraction(10), Fraction(1000)]


@pytest.fixture(scope="module")
def samples():
    return {scale: discrete_laplace(scale, N) for scale in SCALES}


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_goodness_of_fit_against_the_exact_pmf(samples, scale):
    x = samples[scale]
    assert x.dtype == np.int64 and x.size == N
    p = chi_square_pvalue(x, lambda k: discrete_laplace_pmf(k, float(scale)))
    assert p > ALPHA, f"scale {scale}: p = {p:.3g}"


@pytest.mark.parametrize("factor", [Fraction(7, 10), Fraction(13, 10)], ids=str)
@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_the_same_test_rejects_a_scale_off_by_30_percent(samples, scale, factor):
    wrong = float(scale * factor)
    p = chi_square_pvalue(samples[scale], lambda k: discrete_laplace_pmf(k, wrong))
    assert p < ALPHA, f"scale {scale} vs {wrong}: p = {p:.3g} (the test has no power)"


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_symmetry(samples, scale):
    x = samples[scale]
    positives, negatives = int(np.sum(x > 0)), int(np.sum(x < 0))
    assert stats.binomtest(positives, positives + negatives, 0.5).pvalue > ALPHA
    # per magnitude: count(k) | count(k) + count(-k) ~ Binomial(., 1/2) under symmetry
    top = int(np.quantile(np.abs(x), 0.99))
    pos = np.bincount(x[(x > 0) & (x <= top)], minlength=top + 1)[1:]
    neg = np.bincount(-x[(x < 0) & (x >= -top)], minlength=top + 1)[1:]
    used = (pos + neg) > 0
    chi2 = float(np.sum((pos[used] - neg[used]) ** 2 / (pos[used] + neg[used])))
    assert stats.chi2.sf(chi2, df=int(used.sum())) > ALPHA


@pytest.mark.parametrize("epsilon", [Fraction(1, 10), Fraction(1), Fraction(2)], ids=str)
def test_empirical_privacy_loss_on_neighbouring_counts(epsilon):
    """Counts x and x+1; the event {y ≥ x+1} has privacy loss exactly ε (the tight event)."""
    x = 1000
    y0 = x + discrete_laplace(1 / epsilon, N)
    y1 = (x + 1) + discrete_laplace(1 / epsilon, N)
    estimate, se = empirical_epsilon(y0 >= x + 1, y1 >= x + 1)
    assert abs(estimate - float(epsilon)) <= 6 * se, (estimate, se)
    assert estimate <= float(epsilon) + 6 * se


def test_privacy_loss_audit_catches_a_halved_scale():
    epsilon = Fraction(1)
    broken = 1 / epsilon / 2  # the mistake: scale Δ/(2ε)
    y0 = 1000 + discrete_laplace(broken, N)
    y1 = 1001 + discrete_laplace(broken, N)
    estimate, se = empirical_epsilon(y0 >= 1001, y1 >= 1001)
    assert estimate > float(epsilon) + 6 * se


@pytest.mark.parametrize("m", [1, 2, 3, 7, 10, 1000, 2**31 + 11])
def test_uniform_integers_are_uniform(m):
    draws = uniform_below(np.full(600_000, m, dtype=np.uint64), _Entropy())
    assert draws.max() < m
    if m == 1:
        assert not draws.any()
        return
    bins = min(m, 100)
    counts = np.bincount((draws % bins).astype(np.int64) if m % bins == 0 else
                         (draws * bins // m).astype(np.int64), minlength=bins)
    expected = _bin_expectation(m, bins, draws.size)
    assert stats.chisquare(counts, expected).pvalue > ALPHA


def _bin_expectation(m: int, bins: int, n: int) -> np.ndarray:
    edges = [-(-(b * m) // bins) for b in range(bins + 1)]  # values v with v*bins//m == b
    return n * np.diff(edges) / m


def test_rejection_removes_the_modulo_bias_32_bit_path():
    # m = 3·2^30: without rejection, multiples of 3 would have probability 1/2, not 1/3
    draws = uniform_below(np.full(600_000, 3 * 2**30, dtype=np.uint64), _Entropy())
    share = float(np.mean(draws % np.uint64(3) == 0))
    assert abs(share - 1 / 3) < 6 * math.sqrt(2 / 9 / draws.size)


def test_rejection_removes_the_modulo_bias_64_bit_path():
    # m = 3·2^62: without rejection, values below 2^62 would have probability 1/2, not 1/3
    m = np.full(600_000, 3 * 2**62, dtype=np.uint64)
    draws = _uniform_below_64(m, _Entropy())
    share = float(np.mean(draws < np.uint64(2**62)))
    assert abs(share - 1 / 3) < 6 * math.sqrt(2 / 9 / draws.size)
    assert uniform_below(np.array([2**40 + 1], dtype=np.uint64), _Entropy())[0] <= 2**40


def test_noise_comes_from_os_urandom(monkeypatch):
    def refuse(n):
        raise RuntimeError("os.urandom was called")

    monkeypatch.setattr(os, "urandom", refuse)
    with pytest.raises(RuntimeError, match="os.urandom was called"):
        discrete_laplace(Fraction(1), 10)


def test_two_calls_differ_and_the_test_seam_is_deterministic():
    assert not np.array_equal(discrete_laplace(Fraction(10), 1000), discrete_laplace(Fraction(10), 1000))
    a = discrete_laplace(Fraction(7, 3), 1000, rng=_Counter())
    b = discrete_laplace(Fraction(7, 3), 1000, rng=_Counter())
    assert np.array_equal(a, b)


@pytest.mark.parametrize("bad", [1.0, 0.5, True, "1"])
def test_float_or_text_scales_are_refused(bad):
    with pytest.raises(TypeError):
        discrete_laplace(bad, 10)


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 100_003])
def test_exact_sizes(size):
    assert discrete_laplace(Fraction(3, 2), size).shape == (size,)


def test_scales_with_too_many_digits_are_refused():
    with pytest.raises(ValueError, match="too many digits"):
        discrete_laplace(Fraction(2**41, 3), 10)


class _Entropy:
    """The real CSPRNG, through the same interface the seam uses."""

    def __init__(self):
        from dprelease.mechanisms import OsEntropy

        self._src = OsEntropy()

    def words(self, n):
        return self._src.words(n)


class _Counter:
    """A deterministic word source for the seam test (test-only; never for noise)."""

    def __init__(self):
        self.state = np.uint64(0x9E3779B97F4A7C15)

    def words(self, n):
        out = np.empty(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            x = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + self.state
            x ^= x >> np.uint64(31)
            x *= np.uint64(0xBF58476D1CE4E5B9)
            x ^= x >> np.uint64(29)
        out[:] = x
        self.state = out[-1] if n else self.state
        return out


# The building blocks of the fast paths (one bound for every lane; rounds 2..20 of Bernoulli(e^−1)
# read off the factorial-base digits of one uniform word), each against its exact law.

def test_uniform_integers_below_one_bound_reject_the_modulo_bias():
    from dprelease.mechanisms.sampling import _uniform_below_const

    draws = _uniform_below_const(3 * 2**30, 600_000, _Entropy())  # as the 32-bit path above
    assert int(draws.max()) < 3 * 2**30
    share = float(np.mean(draws % np.uint64(3) == 0))
    assert abs(share - 1 / 3) < 6 * math.sqrt(2 / 9 / draws.size)
    small = _uniform_below_const(7, 700_000, _Entropy()).astype(np.int64)
    assert stats.chisquare(np.bincount(small, minlength=7)).pvalue > ALPHA


@pytest.mark.parametrize("num, den", [(1, 3), (2, 3), (3, 3), (5, 7)])
def test_bernoulli_exp_neg_with_one_denominator_has_rate_exp_minus_gamma(num, den):
    from dprelease.mechanisms.sampling import bernoulli_exp_neg

    n = 1_000_000
    hits = bernoulli_exp_neg(np.full(n, num, np.uint64), np.full(n, den, np.uint64), _Entropy())
    p = math.exp(-num / den)
    assert abs(hits.mean() - p) < 6 * math.sqrt(p * (1 - p) / n), (num, den, hits.mean(), p)


def _geometric_pmf(k: np.ndarray) -> np.ndarray:
    """P(V = k) = e^−k (1 − e^−1) for k ≥ 0."""
    k = np.asarray(k, dtype=float)
    return np.where(k >= 0, np.exp(-np.clip(k, 0, None)) * (1 - math.exp(-1)), 0.0)


def test_geometric_exp_minus_one_fits_its_law_and_a_wrong_rate_is_rejected():
    from dprelease.mechanisms.sampling import geometric_exp_neg_one

    v = geometric_exp_neg_one(1_000_000, _Entropy()).astype(np.int64)
    assert chi_square_pvalue(v, _geometric_pmf) > ALPHA
    def rate(r: float):  # P(V = k) = e^−rk (1 − e^−r)
        return lambda k: np.where(np.asarray(k) >= 0, np.exp(-r * np.clip(k, 0, None)) * (1 - math.exp(-r)), 0.0)

    assert chi_square_pvalue(v, rate(1.1)) < ALPHA and chi_square_pvalue(v, rate(0.9)) < ALPHA  # power


def test_the_rounds_after_the_digits_continue_with_the_same_law():
    """Lanes that succeeded in rounds 1..k−1 of CKS Algorithm 1 (γ = 1) stop at round j ≥ k with
    probability (k−1)!·(1/(j−1)! − 1/j!); the result is 1 iff j is odd. Checked from round 3."""
    from dprelease.mechanisms.sampling import bernoulli_exp_neg_tail

    n = 1_000_000
    hits = bernoulli_exp_neg_tail(np.ones(n, np.uint64), 1, 3, _Entropy())
    p = sum(math.factorial(2) * (1 / math.factorial(j - 1) - 1 / math.factorial(j)) for j in range(3, 40, 2))
    assert abs(hits.mean() - p) < 6 * math.sqrt(p * (1 - p) / n), (hits.mean(), p)
