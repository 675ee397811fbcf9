"""The exponential mechanism, sampled exactly as permute-and-flip (McKenna and Sheldon 2020).

Privacy contract: candidates are public (a declared domain); a utility u(D, r) with
sensitivity Δu under the caller's neighbouring relation (|u(D, r) − u(D', r)| ≤ Δu for every
candidate r and neighbours D, D'). Permute-and-flip visits the candidates in a uniformly
random order and stops at the first r accepted with probability exp(−ε·(u* − u(r))/(2Δu)),
u* the best utility: ε-DP, and never worse in expected utility than the exponential
mechanism. When the utility is *monotone* (for every neighbour pair, all utilities move in
the same direction: counts under add/remove one row), the factor 2 can be dropped:
exp(−ε·(u* − u(r))/Δu) is ε-DP (McSherry and Talwar 2007; McKenna and Sheldon 2020, §4).
Counts under change one record are *not* monotone (one count falls, another rises).

Utilities are integers and ε rational, so every acceptance exponent is rational and each
flip is an exact Bernoulli(exp(−x)) (CKS 2020, Algorithm 1). The random order is drawn with
exact uniform integers (Fisher–Yates). Randomness from the OS CSPRNG only.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dprelease.mechanisms.sampling import Entropy, OsEntropy, bernoulli_exp_neg_any, uniform_below


def permute_and_flip(utilities: np.ndarray, epsilon: Fraction, sensitivity: int, monotone: bool, *,
                     rng: Entropy | None = None) -> np.ndarray:
    """Per row of ``utilities`` (rows × candidates, integers), the index of the chosen candidate.

    The exponent is ε·(u* − u)/(2Δu), or ε·(u* − u)/Δu when ``monotone`` (see the module
    docstring for when that is allowed). Rows are independent; each is ε-DP on its own.
    """
    u = np.atleast_2d(np.asarray(utilities, dtype=np.int64))
    epsilon = Fraction(epsilon)
    if epsilon <= 0 or sensitivity <= 0:
        raise ValueError("need ε > 0 and a positive sensitivity")
    rng = OsEntropy() if rng is None else rng
    rows, k = u.shape
    gap = (u.max(axis=1, keepdims=True) - u).astype(np.uint64)  # u* − u ≥ 0
    den = epsilon.denominator * sensitivity * (1 if monotone else 2)
    order = _random_permutations(rows, k, rng)
    chosen = np.full(rows, -1, dtype=np.int64)
    pending = np.arange(rows)
    exact_in_uint64 = int(gap.max(initial=0)) * epsilon.numerator < 1 << 62  # else Python integers
    for step in range(k):  # the best candidate is accepted with probability 1: at most k steps
        candidate = order[pending, step]
        if exact_in_uint64:
            num = gap[pending, candidate] * np.uint64(epsilon.numerator)
            accept = bernoulli_exp_neg_any(num, np.full(pending.size, den, dtype=np.uint64), rng)
        else:
            accept = _accept_big(gap[pending, candidate], epsilon.numerator, den, rng)
        chosen[pending[accept]] = candidate[accept]
        pending = pending[~accept]
        if not pending.size:
            break
    return chosen


def _accept_big(gap: np.ndarray, numerator: int, den: int, rng: Entropy) -> np.ndarray:
    """Bernoulli(exp(−gap·numerator/den)) per lane when the product overflows 64 bits: the whole
    and fractional parts in Python integers, then the same exact trials (CKS Algorithm 1)."""
    parts = [divmod(int(g) * numerator, den) for g in gap]
    whole = np.array([min(w, (1 << 62)) for w, _ in parts], dtype=np.uint64)  # 2^62 successes of e^−1: never
    rest = np.array([r for _, r in parts], dtype=np.uint64)
    return bernoulli_exp_neg_any(rest, np.full(gap.size, den, np.uint64), rng, whole=whole)


def _random_permutations(rows: int, k: int, rng: Entropy) -> np.ndarray:
    """``rows`` independent uniform permutations of range(k) (Fisher–Yates, exact uniforms)."""
    out = np.tile(np.arange(k, dtype=np.int64), (rows, 1))
    index = np.arange(rows)
    for i in range(k - 1, 0, -1):
        j = uniform_below(np.full(rows, i + 1, dtype=np.uint64), rng).astype(np.int64)
        out[index, i], out[index, j] = out[index, j], out[index, i].copy()
    return out
