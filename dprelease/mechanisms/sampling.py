"""Exact integer samplers fed only by the operating system's CSPRNG.

Randomness: 64-bit words from a ChaCha20 keystream whose key and nonce come from
``os.urandom`` (re-keyed every 2^30 bytes). No numpy generator, no seed, no floats: every
step below is integer arithmetic on numpy ``uint64`` lanes.

The discrete Laplace sampler follows Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), arXiv:2004.00010:

* Algorithm 1, Bernoulli(exp(−γ)) for rational γ = n/d ∈ [0, 1]: draw Bernoulli(γ/k) for
  k = 1, 2, … until the first failure at k = K; return 1 iff K is odd.
* Bernoulli(p) for rational p = a/b: an exact uniform integer in [0, b) is below a.
* Exact uniform integers in [0, m): rejection of the top ``2^64 mod m`` words, then ``% m``.
* Algorithm 2, discrete Laplace with rational scale t/s: U uniform in [0, t) kept with
  probability exp(−U/t); V geometric (count of Bernoulli(exp(−1)) successes before the first
  failure); X = U + t·V; Y = ⌊X/s⌋; a fair sign bit B; reject (B = 1, Y = 0) so zero is not
  counted twice; return (1 − 2B)·Y.

Every loop is vectorised: all lanes take one step together and the lanes that are finished
drop out, so the work per sample is a constant expected number of numpy operations.
"""

from __future__ import annotations

import os
from fractions import Fraction

from typing import Callable, Protocol

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

_REKEY_BYTES = 1 << 30
_MAX_PART = 1 << 40  # numerator/denominator bound of a scale, so t·K never overflows uint64
_CHUNK = 1 << 20
_DIGITS = 11  # Bernoulli(exp(−1)): rounds 2..11 from one uniform in [0, 11!), 11! < 2^32
_FACT = [1]
for _j in range(1, _DIGITS + 1):
    _FACT.append(_FACT[-1] * _j)  # j!
_TWO32 = 1 << 32
_MASK32 = np.uint64(_TWO32 - 1)  # lanes per vectorised batch: bounds memory, keeps numpy efficient


class Entropy(Protocol):
    """A source of uniform 64-bit words: :class:`OsEntropy` in release code; a test may pass
    another through the samplers' one explicit, test-only ``rng`` seam."""

    def words(self, n: int) -> np.ndarray: ...


class OsEntropy:
    """64-bit random words from a ChaCha20 keystream keyed from ``os.urandom``."""

    def __init__(self) -> None:
        self._rekey()

    def _rekey(self) -> None:
        cipher = Cipher(algorithms.ChaCha20(os.urandom(32), os.urandom(16)), mode=None)
        self._stream = cipher.encryptor()
        self._left = _REKEY_BYTES

    def words(self, n: int) -> np.ndarray:
        nbytes = 8 * n
        if nbytes > self._left:
            self._rekey()
        self._left -= nbytes
        return np.frombuffer(self._stream.update(bytes(nbytes)), dtype=np.uint64)


def uniform_below(m: np.ndarray, rng: Entropy) -> np.ndarray:
    """Exact uniform integers, lane i in [0, m[i]); every m[i] ≥ 1."""
    m = np.asarray(m, dtype=np.uint64)
    if m.size and int(m.max()) < _TWO32:
        return _uniform_below_32(m, rng)
    return _uniform_below_64(m, rng)


def _uniform_below_32(m: np.ndarray, rng: Entropy) -> np.ndarray:
    """Lemire's multiply-shift with exact rejection, for m < 2^32.

    With x uniform in [0, 2^32), x·m = q·2^32 + low; q is uniform on [0, m) once the
    lanes with low < (2^32 mod m) are rejected. Only lanes with low < m need that check.
    """
    out = np.empty_like(m)
    lanes = np.arange(m.size)
    mm = m
    while lanes.size:
        x = words32(lanes.size, rng)
        prod = x * mm
        low = prod & _MASK32
        check = np.flatnonzero(low < mm)
        if check.size:
            threshold = (np.uint64(_TWO32) - mm[check]) % mm[check]  # 2^32 mod m
            bad = check[low[check] < threshold]
        else:
            bad = check
        q = prod >> np.uint64(32)
        if not bad.size:
            out[lanes] = q
            break
        ok = np.ones(lanes.size, dtype=bool)
        ok[bad] = False
        out[lanes[ok]] = q[ok]
        lanes, mm = lanes[~ok], mm[~ok]
    return out


def _uniform_below_64(m: np.ndarray, rng: Entropy) -> np.ndarray:
    """Rejection of the top ``2^64 mod m`` words, then ``% m``; for any m ≥ 1."""
    zero = np.zeros_like(m)
    rem = (zero - m) % m  # 2^64 mod m: the words above 2^64 − rem would bias ``% m``
    out = np.empty_like(m)
    pending = np.arange(m.size)
    while pending.size:
        r = rng.words(pending.size)
        rr = rem[pending]
        ok = (rr == 0) | (r < (zero[: pending.size] - rr))
        out[pending[ok]] = r[ok] % m[pending[ok]]
        pending = pending[~ok]
    return out


def words32(n: int, rng: Entropy) -> np.ndarray:
    """``n`` uniform 32-bit integers (as uint64) from half as many 64-bit words."""
    return rng.words((n + 1) // 2).view(np.uint32)[:n].astype(np.uint64)


def _uniform_below_const(m: int, n: int, rng: Entropy) -> np.ndarray:
    """``n`` exact uniform integers in [0, m) for one m < 2^32: Lemire's multiply-shift, the
    lanes with low < 2^32 mod m rejected and drawn again (as :func:`_uniform_below_32`)."""
    threshold = np.uint64((_TWO32 - m) % m)  # 2^32 mod m
    prod = words32(n, rng) * np.uint64(m)  # 32-bit words widened to uint64 first (numpy 1.x keeps uint32 × scalar in 32 bits)
    out = prod >> np.uint64(32)
    if threshold:
        bad = np.flatnonzero((prod & _MASK32) < threshold)
        if bad.size:
            out[bad] = _uniform_below_const(m, bad.size, rng)
    return out


def bernoulli_exp_neg(num: np.ndarray, den: np.ndarray, rng: Entropy) -> np.ndarray:
    """Lane i is Bernoulli(exp(−num[i]/den[i])), exactly; requires 0 ≤ num ≤ den (CKS Alg. 1)."""
    num = np.asarray(num, dtype=np.uint64)
    den = np.asarray(den, dtype=np.uint64)
    if num.size and den.size and int(den[0]) < _TWO32 // 64 and (den == den[0]).all():
        return _bernoulli_exp_neg_const(num, int(den[0]), rng)
    result = np.empty(num.size, dtype=bool)
    active = np.arange(num.size)
    k = np.ones(num.size, dtype=np.uint64)
    while active.size:
        success = uniform_below(den[active] * k, rng) < num[active]  # Bernoulli(γ/k)
        stopped = active[~success]
        result[stopped] = (k[~success] & np.uint64(1)) == 1  # K odd → 1
        active, k = active[success], k[success] + np.uint64(1)
    return result


def _bernoulli_exp_neg_const(num: np.ndarray, d: int, rng: Entropy) -> np.ndarray:
    """:func:`bernoulli_exp_neg` when every lane has the same denominator d: in round k every
    lane still running draws Bernoulli(num/(d·k)) against the one bound d·k (while it is below
    2^32; after that, the general path)."""
    result = np.empty(num.size, dtype=bool)
    active = np.arange(num.size)
    k = 1
    while active.size:
        if d * k >= _TWO32:  # vanishingly rare: a fraction γ^k/k! of the lanes get here
            result[active] = bernoulli_exp_neg_tail(num, d, k, rng)
            break
        success = _uniform_below_const(d * k, num.size, rng) < num  # Bernoulli(γ/k)
        result[active[~success]] = k % 2 == 1  # stopped at K = k: 1 iff K is odd
        active, num = active[success], num[success]
        k += 1
    return result


def bernoulli_exp_minus_one(n: int, rng: Entropy) -> np.ndarray:
    """``n`` Bernoulli(exp(−1)) draws, exactly: CKS Algorithm 1 with γ = 1, whose round 1 always
    succeeds, with rounds 2 to 11 read off one uniform W in [0, 11!) (11! < 2^32: one 32-bit
    word, Lemire). The factorial-base digits d_j = ⌊W/(j−1)!⌋ mod j of W are independent and
    uniform in [0, j); round j succeeds iff d_j = 0, and given that rounds 2..j−1 succeeded
    (j−1)! divides W, so round j succeeds iff j! divides W. A lane that succeeds through round
    11 (probability 1/11!) goes on with fresh draws from round 12. Returns K odd, K the first
    failing round."""
    w = _uniform_below_const(_FACT[_DIGITS], n, rng).astype(np.uint32)
    k = np.full(n, 2, dtype=np.int8)  # the first failing round, so far
    pending = np.flatnonzero((w & np.uint32(1)) == 0)  # round 2 succeeded
    for j in range(3, _DIGITS + 1):
        k[pending] = j
        pending = pending[w[pending] % np.uint32(_FACT[j]) == 0]  # round j succeeded
        if not pending.size:
            break
    result: np.ndarray = (k & 1) == 1
    if pending.size:  # every round through _DIGITS succeeded
        result[pending] = bernoulli_exp_neg_tail(np.ones(pending.size, dtype=np.uint64), 1, _DIGITS + 1, rng)
    return result


def bernoulli_exp_neg_tail(num: np.ndarray, d: int, k: int, rng: Entropy) -> np.ndarray:
    """Lanes of CKS Algorithm 1 that succeeded k − 1 times: continue from round k."""
    result = np.empty(num.size, dtype=bool)
    active = np.arange(num.size)
    kk = np.full(num.size, k, dtype=np.uint64)
    den = np.full(num.size, d, dtype=np.uint64)
    while active.size:
        success = uniform_below(den[active] * kk, rng) < num[active]
        stopped = active[~success]
        result[stopped] = (kk[~success] & np.uint64(1)) == 1
        active, kk = active[success], kk[success] + np.uint64(1)
    return result


def bernoulli_exp_neg_any(num: np.ndarray, den: np.ndarray, rng: Entropy, whole: np.ndarray | None = None) -> np.ndarray:
    """Lane i is Bernoulli(exp(−num[i]/den[i])) for any num ≥ 0, exactly: ⌊γ⌋ Bernoulli(exp(−1))
    trials (stopping at the first failure) and one Bernoulli(exp(−(γ − ⌊γ⌋))) (CKS Algorithm 1).
    With ``whole`` given, γ = whole + num/den (num < den): for exponents beyond 64 bits."""
    num = np.asarray(num, dtype=np.uint64)
    den = np.asarray(den, dtype=np.uint64)
    if whole is None:
        whole, rest = num // den, num % den
    else:
        whole, rest = np.array(whole, dtype=np.uint64), num
    result = bernoulli_exp_neg(rest, den, rng)
    pending = np.flatnonzero(result & (whole > 0))
    while pending.size:
        ones = np.ones(pending.size, dtype=np.uint64)
        success = bernoulli_exp_neg(ones, ones, rng)
        result[pending[~success]] = False
        whole[pending] -= np.uint64(1)
        pending = pending[success & (whole[pending] > 0)]
    return result


def geometric_exp_neg_one(n: int, rng: Entropy) -> np.ndarray:
    """V with P(V ≥ v) = exp(−v): Bernoulli(exp(−1)) successes before the first failure."""
    v = np.zeros(n, dtype=np.uint64)
    active = np.arange(n)
    while active.size:
        active = active[bernoulli_exp_minus_one(active.size, rng)]
        v[active] += np.uint64(1)
    return v


def check_scale(scale: Fraction | int) -> None:
    """Raise ValueError/TypeError if the exact sampler cannot take ``scale`` (before any draw)."""
    _rational(scale)


def _rational(scale: Fraction | int) -> tuple[int, int]:
    if isinstance(scale, bool) or not isinstance(scale, (Fraction, int)):
        raise TypeError(f"scale must be exact (a Fraction or an int), not {type(scale).__name__}")
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError("scale must be positive")
    if scale.numerator >= _MAX_PART or scale.denominator >= _MAX_PART:
        raise ValueError(f"scale {scale} has too many digits for the exact sampler (parts < 2^40)")
    return scale.numerator, scale.denominator


def discrete_laplace(scale: Fraction | int, size: int, *, rng: Entropy | None = None) -> np.ndarray:
    """``size`` i.i.d. draws of discrete Laplace noise with the given exact ``scale`` (int64).

    P(X = k) ∝ exp(−|k|/scale). Privacy contract: added to an integer query whose L1
    sensitivity is Δ under the caller's neighbouring relation, scale = Δ/ε gives ε-DP
    (pure). The caller guarantees Δ; this function guarantees the distribution exactly.

    ``rng`` is a test-only seam (an object with ``words(n) -> uint64 array``); release code
    never passes it, so the noise comes from :class:`OsEntropy`.
    """
    t, s = _rational(scale)
    rng = OsEntropy() if rng is None else rng
    # about 60% of candidates are accepted when scale ≥ 1
    return collect(size, 1.8, lambda want: _laplace_candidates(t, s, want, rng))


def collect(size: int, oversample: float, draw: Callable[[int], np.ndarray]) -> np.ndarray:
    """``size`` accepted samples from rounds of ``draw(n)`` (which returns the accepted ones of
    n candidates), each round sized by the expected acceptance, at most ``_CHUNK`` lanes."""
    if size < 0:
        raise ValueError("size must be non-negative")
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        draws = draw(min(_CHUNK, max(64, int((size - filled) * oversample))))
        take = min(draws.size, size - filled)
        out[filled:filled + take] = draws[:take]
        filled += take
    return out


def _laplace_candidates(t: int, s: int, n: int, rng: Entropy) -> np.ndarray:
    """One round of CKS Algorithm 2 on ``n`` lanes; returns the accepted samples."""
    tt = np.full(n, t, dtype=np.uint64)
    u = _uniform_below_const(t, n, rng) if t < _TWO32 else uniform_below(tt, rng)
    keep = bernoulli_exp_neg(u, tt, rng)
    u = u[keep]
    x = u + np.uint64(t) * geometric_exp_neg_one(u.size, rng)
    y = (x // np.uint64(s)).astype(np.int64)
    negative = (rng.words(u.size) & np.uint64(1)) == 1
    accept = ~(negative & (y == 0))
    signed: np.ndarray = np.where(negative, -y, y)
    kept: np.ndarray = signed[accept]
    return kept
