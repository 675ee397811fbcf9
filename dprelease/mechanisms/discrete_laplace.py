"""The discrete Laplace (two-sided geometric) distribution: its accuracy, exactly.

With scale ``b = Δ/ε`` and ``p = exp(-1/b)``, the noise ``X`` has
``P(X = k) = (1 - p)/(1 + p) · p^|k|`` for every integer ``k``. Adding it to an integer
query of L1 sensitivity Δ (under the neighbouring relation of the caller) gives ε-DP.

Tails have a closed form: ``P(|X| > k) = 2 p^(k+1) / (1 + p)``. The margin of error at
confidence ``c`` is the smallest ``k ≥ 0`` with ``P(|X| > k) ≤ 1 - c``. Taking logs,
that is the smallest ``k`` with ``(k + 1)/b ≥ ln(2/α) − ln(1 + p)``, α = 1 − c. The
logarithms are evaluated in 60-digit decimal arithmetic and nudged in the direction that
can only *increase* k, so a margin is never understated (at worst, for a true value within
1e-45 of an integer boundary, it is overstated by one).
"""

from __future__ import annotations

import decimal
from decimal import Decimal
from fractions import Fraction

from dprelease.accounting.exact import round_significant

_PREC = 60
_SLACK = Decimal(10) ** -45  # far larger than the evaluation error, far smaller than anything shown


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


def _log_bound(scale: Fraction, alpha: Fraction) -> Decimal:
    """An upper bound on ``ln(2/α) − ln(1 + exp(−1/scale))``."""
    with decimal.localcontext() as ctx:
        ctx.prec = _PREC
        t = _dec(1 / scale)
        p = (-t).exp()
        return (_dec(2 / alpha)).ln() - (1 + p).ln() + 2 * _SLACK


def margin_of_error(scale: Fraction, confidence: Fraction) -> int:
    """The smallest k ≥ 0 with P(|X| > k) ≤ 1 − confidence, for discrete Laplace(scale).

    Exact up to the conservative rounding described in the module docstring.
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie strictly between 0 and 1")
    alpha = 1 - confidence
    with decimal.localcontext() as ctx:
        ctx.prec = _PREC
        ctx.rounding = decimal.ROUND_CEILING
        bound = _log_bound(scale, alpha) * _dec(scale) + _SLACK  # ≥ the true (k + 1)
        k_plus_1 = int(bound.to_integral_value(rounding=decimal.ROUND_CEILING))
    return max(0, k_plus_1 - 1)


def epsilon_for_margin(target: int, confidence: Fraction, sensitivity: Fraction = Fraction(1),
                       digits: int = 3) -> Fraction:
    """The smallest ε, rounded *up* to ``digits`` significant digits, whose margin is ≤ ``target``.

    Rounding up means the returned ε always meets the target (checked exactly below).
    """
    if target < 0:
        raise ValueError("a margin of error is at least 0")
    # (target + 1)/b ≥ L(b) with L increasing in 1/b; bisect on t = 1/b in floats for a start
    lo, hi = Fraction(0), Fraction(1)
    while margin_of_error(1 / hi, confidence) > target:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if margin_of_error(1 / mid, confidence) <= target:
            hi = mid
        else:
            lo = mid
        hi = round_significant(hi, 30, up=True)
    epsilon = round_significant(hi * sensitivity, digits, up=True)
    while margin_of_error(sensitivity / epsilon, confidence) > target:  # pragma: no cover - safety
        epsilon = round_significant(epsilon * Fraction(1001, 1000), digits, up=True)
    return epsilon


def variance(scale: Fraction) -> float:
    """The noise's variance, 2p/(1 − p)² with p = exp(−1/scale) (float: for weights and display,
    never for sampling or accounting)."""
    import math

    p = math.exp(-1 / float(scale))
    return 2 * p / (1 - p) ** 2
