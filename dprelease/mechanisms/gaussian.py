"""The discrete Gaussian, sampled exactly (Canonne, Kamath and Steinke 2020, Algorithm 3).

Privacy contract: added to an integer query whose L2 sensitivity is Δ under the caller's
neighbouring relation, the discrete Gaussian with variance parameter σ² satisfies
ρ-zero-concentrated DP with ρ = Δ²/(2σ²) (CKS 2020, Theorem 4), hence (ε, δ)-DP for every
δ > 0 with ε from :func:`dprelease.accounting.zcdp_epsilon`. For a histogram under add/remove
one row, Δ₂ = 1 (one cell moves by 1); under change one record, Δ₂ = √2.

Algorithm 3, for rational σ² = a/b: t = ⌊σ⌋ + 1; repeat { Y ← discrete Laplace of scale t;
accept with probability exp(−(|Y| − σ²/t)²/(2σ²)) } — the acceptance exponent is the
rational γ = (|Y|·b·t − a)² / (2·a·b·t²), and Bernoulli(exp(−γ)) for γ > 1 is ⌊γ⌋
Bernoulli(exp(−1)) trials and one Bernoulli(exp(−(γ − ⌊γ⌋))), all exact (CKS Algorithm 1).
Integer arithmetic only; randomness from :class:`~dprelease.mechanisms.sampling.OsEntropy`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dprelease.mechanisms.sampling import Entropy, OsEntropy, bernoulli_exp_neg, bernoulli_exp_neg_any, collect, discrete_laplace

_MAX_DEN = 1 << 56  # 2·a·b·t²·k (k < 256 in Algorithm 1) must fit uint64 lanes


def zcdp_rho(sigma2: Fraction | int, l2_sensitivity_squared: int) -> Fraction:
    """ρ of the discrete Gaussian with variance parameter σ² on a query of squared L2
    sensitivity Δ₂²: ρ = Δ₂²/(2σ²) (CKS 2020, Theorem 4). Exact."""
    return Fraction(l2_sensitivity_squared) / (2 * Fraction(sigma2))


def sigma2_for(rho: Fraction, l2_sensitivity_squared: int) -> Fraction:
    """σ² = Δ₂²/(2ρ), rounded *up* (more noise, less ρ) to a fraction the exact sampler takes."""
    exact = Fraction(l2_sensitivity_squared) / (2 * Fraction(rho))
    for denominator in (10**6, 10**4, 10**2, 1):
        candidate = exact if denominator == 10**6 and exact.denominator <= denominator else \
            Fraction(math.ceil(exact * denominator), denominator)
        try:
            gaussian_parts(candidate)
            return candidate
        except ValueError:
            continue
    raise ValueError(f"ρ = {rho} asks for a noise variance the exact sampler cannot take")


def gaussian_parts(sigma2: Fraction | int) -> tuple[int, int, int]:
    """(a, b, t) for σ² = a/b and t = ⌊σ⌋ + 1; ValueError when the sampler cannot take σ²."""
    if isinstance(sigma2, bool) or not isinstance(sigma2, (Fraction, int)):
        raise TypeError(f"σ² must be exact (a Fraction or an int), not {type(sigma2).__name__}")
    sigma2 = Fraction(sigma2)
    if sigma2 <= 0:
        raise ValueError("σ² must be positive")
    a, b = sigma2.numerator, sigma2.denominator
    t = math.isqrt(a // b) + 1  # ⌊σ⌋ = ⌊√⌊σ²⌋⌋
    if 2 * a * b * t * t >= _MAX_DEN:
        raise ValueError(f"σ² = {sigma2} has too many digits for the exact sampler (2·a·b·t² ≥ 2^56): "
                         "round it up to a fraction with a smaller denominator")
    return a, b, t


def discrete_gaussian(sigma2: Fraction | int, size: int, *, rng: Entropy | None = None) -> np.ndarray:
    """``size`` i.i.d. draws (int64) with P(X = k) ∝ exp(−k²/(2σ²)), exactly.

    ``rng`` is the test-only seam (an object with ``words(n) -> uint64 array``); release code
    never passes it, so the noise comes from the OS CSPRNG.
    """
    a, b, t = gaussian_parts(sigma2)
    rng = OsEntropy() if rng is None else rng

    def candidates(n: int) -> np.ndarray:
        y = discrete_laplace(t, n, rng=rng)
        accepted: np.ndarray = y[_accept(y, a, b, t, rng)]
        return accepted

    return collect(size, 1.6, candidates)  # acceptance is about 0.6–0.8


def _accept(y: np.ndarray, a: int, b: int, t: int, rng: Entropy) -> np.ndarray:
    """Lane i is Bernoulli(exp(−(|y_i|·b·t − a)²/(2·a·b·t²))), exactly."""
    d = 2 * a * b * t * t
    magnitude = np.abs(y)
    small = magnitude < (1 << 31) // (b * t)  # |y|·b·t < 2^31: the square fits uint64
    num = np.zeros(y.size, dtype=np.uint64)
    m = magnitude[small].astype(np.uint64) * np.uint64(b * t)
    diff = np.where(m >= a, m - np.uint64(a), np.uint64(a) - m)  # |·| of a difference: its square is the same
    num[small] = diff * diff
    result = np.zeros(y.size, dtype=bool)
    result[small] = bernoulli_exp_neg_any(num[small], np.full(int(small.sum()), d, dtype=np.uint64), rng)
    for i in np.flatnonzero(~small):  # rare, far in the tail: γ ≥ 2^62/d ≥ 64; exact in Python integers
        whole, rest = divmod((int(magnitude[i]) * b * t - a) ** 2, d)
        accept = bool(bernoulli_exp_neg(np.array([rest], np.uint64), np.array([d], np.uint64), rng)[0])
        while accept and whole:  # stops at the first failure (probability 1 − e^−1 each)
            accept = bool(bernoulli_exp_neg(np.ones(1, np.uint64), np.ones(1, np.uint64), rng)[0])
            whole -= 1
        result[i] = accept
    return result


def gaussian_margin(sigma2: Fraction, confidence: Fraction) -> int:
    """The smallest k with P(|Z| > k) ≤ 1 − confidence for the discrete Gaussian of parameter σ²
    (its exact pmf, summed in float64 over ±(40σ + 10), beyond which the mass is below e^−800).

    Never understated: the tail is compared with (1 − confidence)·(1 − 10⁻⁹), a margin far
    above float64's accumulated relative error (≈ 10⁻¹³ here), so rounding can only make the
    printed margin larger, never smaller, than the exact one.
    """
    s2 = float(sigma2)
    top = int(40 * math.sqrt(s2)) + 10
    k = np.arange(0, top + 1, dtype=np.float64)
    weights = np.exp(-k * k / (2 * s2))
    total = weights[0] + 2 * weights[1:].sum()
    tail = 2 * np.cumsum(weights[::-1])[::-1] / total  # tail[j] = P(|Z| ≥ j) for j ≥ 1
    beyond = np.r_[tail[1:], 0.0]  # P(|Z| > j)
    allowed = float(1 - confidence) * (1 - 1e-9)
    return int(np.argmax(beyond <= allowed))
