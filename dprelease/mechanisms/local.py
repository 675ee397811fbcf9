"""Local differential privacy: k-ary randomized response, and estimating what was randomized.

Privacy contract (per respondent, no trusted curator): each respondent reports their true
category with probability p = e^ε/(e^ε + k − 1) and each other category with probability
q = 1/(e^ε + k − 1), so any two true answers give output distributions within a factor e^ε:
ε-local DP for that one answer (Warner 1965; k-RR as in Kairouz, Oh and Viswanath 2016). The
classic coin-flip protocol (truth with probability 3/4) is the k = 2 case with ε = ln 3.
Repeated collections of the same answer compose (ε each) unless the first randomized answer
is reused (memoisation, as RAPPOR does).

Exact sampling: propose a category uniformly; keep it with probability 1 if it is the true
one, and with probability exp(−ε) otherwise (an exact Bernoulli(exp(−ε)) for rational ε);
else propose again. Accepted proposals have exactly the k-RR probabilities.

Estimators of the true distribution π from the n reported counts (N respondents):
``matrix_inversion`` (unbiased: π̂ = (n/N − q)/(p − q), with standard errors
√(λ̂(1 − λ̂)/N)/(p − q), then projected onto the probability simplex) and
``iterative_bayesian_update`` (the EM / maximum-likelihood estimate on the simplex, Agrawal
and Aggarwal 2001), whose standard errors come from the observed Fisher information
restricted to the simplex. Both are post-processing: they cost nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.mechanisms.sampling import Entropy, OsEntropy, bernoulli_exp_neg_any, uniform_below


def keep_probability(epsilon: float, k: int) -> float:
    """p = e^ε/(e^ε + k − 1) = 1/(1 + (k − 1)e^(−ε)), the probability of reporting the true
    category (the second form never overflows)."""
    return 1 / (1 + (k - 1) * math.exp(-epsilon))


def randomize(values: np.ndarray, k: int, epsilon: Fraction, *, rng: Entropy | None = None) -> np.ndarray:
    """k-RR: each code in [0, k) reported truly with probability e^ε/(e^ε + k − 1), else as one
    of the other k − 1 codes uniformly; exactly, from the OS CSPRNG (``rng``: test-only seam)."""
    values = np.asarray(values, dtype=np.int64)
    if k < 2 or values.size and (values.min() < 0 or values.max() >= k):
        raise ValueError("need k ≥ 2 and codes in [0, k)")
    epsilon = Fraction(epsilon)
    if epsilon <= 0:
        raise ValueError("ε must be positive")
    rng = OsEntropy() if rng is None else rng
    out = np.empty(values.size, dtype=np.int64)
    pending = np.arange(values.size)
    while pending.size:
        proposal = uniform_below(np.full(pending.size, k, dtype=np.uint64), rng).astype(np.int64)
        other = proposal != values[pending]
        keep = np.ones(pending.size, dtype=bool)
        if other.any():
            n = int(other.sum())
            keep[other] = bernoulli_exp_neg_any(np.full(n, epsilon.numerator, dtype=np.uint64),
                                                np.full(n, epsilon.denominator, dtype=np.uint64), rng)
        out[pending[keep]] = proposal[keep]
        pending = pending[~keep]
    return out


def coin_flip(values: np.ndarray, *, rng: Entropy | None = None) -> np.ndarray:
    """Warner's coin-flip protocol for a yes/no answer (codes 0 and 1): flip a fair coin; heads,
    report the truth; tails, flip again and report its face. The truth is reported with
    probability exactly 3/4: k-RR with k = 2 and ε = ln 3. Two fair bits per respondent from the
    OS CSPRNG (``rng``: test-only seam)."""
    values = np.asarray(values, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() > 1):
        raise ValueError("the coin-flip protocol randomizes codes 0 and 1")
    rng = OsEntropy() if rng is None else rng
    bits = uniform_below(np.full(2 * values.size, 2, dtype=np.uint64), rng).astype(np.int64)
    first, second = bits[:values.size], bits[values.size:]
    return np.where(first == 1, values, second)


@dataclass(frozen=True)
class Estimate:
    proportions: np.ndarray  # on the probability simplex
    standard_errors: np.ndarray
    method: str


def _channel(k: int, epsilon: float | None, keep: float | None = None) -> tuple[float, float]:
    p = keep_probability(epsilon, k) if keep is None else keep  # type: ignore[arg-type]
    return p, (1 - p) / (k - 1)


def estimate_local(counts: np.ndarray, keep: float) -> tuple[Estimate, Estimate]:
    """(IBU, matrix inversion) of the true distribution from the reported ``counts`` of a k-RR
    channel that keeps the truth with probability ``keep``. Post-processing of the reports."""
    counts = np.asarray(counts)
    if counts.sum() == 0:  # no answers: nothing to estimate
        nothing = np.full(counts.size, np.nan)
        return Estimate(nothing, nothing, "iterative Bayesian update"), Estimate(nothing, nothing, "matrix inversion")
    return (iterative_bayesian_update(counts, None, keep=keep),  # type: ignore[arg-type]
            matrix_inversion(counts, None, keep=keep))  # type: ignore[arg-type]


def matrix_inversion(counts: np.ndarray, epsilon: float, *, keep: float | None = None) -> Estimate:
    """Unbiased inversion of the k-RR channel, then Euclidean projection onto the simplex.
    The channel is given by ``epsilon`` or directly by its ``keep`` probability."""
    counts = np.asarray(counts, dtype=float)
    k, n = counts.size, counts.sum()
    p, q = _channel(k, epsilon, keep)
    observed = counts / n
    raw = (observed - q) / (p - q)
    se = np.sqrt(observed * (1 - observed) / n) / (p - q)
    return Estimate(_simplex(raw), se, "matrix inversion")


def iterative_bayesian_update(counts: np.ndarray, epsilon: float, iterations: int = 200_000,
                              tolerance: float = 1e-12, *, keep: float | None = None) -> Estimate:
    """EM for the true distribution under the known k-RR channel (the MLE on the simplex). EM
    converges slowly where the MLE has zero shares, hence the generous iteration cap; a test
    checks that it reaches the likelihood of the projected matrix-inversion estimate or more."""
    counts = np.asarray(counts, dtype=float)
    k, n = counts.size, counts.sum()
    p, q = _channel(k, epsilon, keep)
    channel = np.full((k, k), q) + np.eye(k) * (p - q)  # channel[i, j] = P(report i | true j)
    observed = counts / n
    pi = np.full(k, 1 / k)
    for _ in range(iterations):
        joint = channel * pi[None, :]
        total = joint.sum(axis=1, keepdims=True)  # 0 only where q underflowed and π is 0: no answers there
        posterior = np.divide(joint, total, out=np.zeros_like(joint), where=total > 0)
        updated = (observed[:, None] * posterior).sum(axis=0)
        if np.abs(updated - pi).max() < tolerance:
            pi = updated
            break
        pi = updated
    return Estimate(pi, _fisher_standard_errors(channel, pi, n), "iterative Bayesian update")


def _fisher_standard_errors(channel: np.ndarray, pi: np.ndarray, n: float) -> np.ndarray:
    """√diag of the inverse Fisher information of the multinomial of reports, on the simplex
    (π ↦ λ = Cπ; I = N·Cᵀ diag(1/λ) C, inverted on the subspace Σδ = 0)."""
    k = pi.size
    lam = channel @ pi
    project = np.eye(k) - 1 / k
    try:
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            info = n * channel.T @ (channel / lam[:, None])
            covariance = project @ np.linalg.pinv(project @ info @ project) @ project
        return np.sqrt(np.clip(np.diag(covariance), 0, None))
    except (np.linalg.LinAlgError, FloatingPointError):
        # a nearly noiseless channel with empty categories: the information is unbounded there;
        # fall back to the multinomial standard errors of matrix inversion at λ
        p, q = channel[0, 0], channel[1, 0]
        se: np.ndarray = np.sqrt(lam * (1 - lam) / n) / (p - q)
        return se


def _simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {x ≥ 0, Σx = 1}."""
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1
    rho = np.nonzero(u - cumulative / np.arange(1, v.size + 1) > 0)[0][-1]
    projected: np.ndarray = np.maximum(v - cumulative[rho] / (rho + 1), 0)
    return projected
