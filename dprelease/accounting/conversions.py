"""Conversions between privacy guarantees, exact or rounded in the safe direction.

pure ε-DP → ρ-zCDP (ε²/2), ρ-zCDP → (ε, δ)-DP (rounded up), (ε, δ) → the largest ρ within it
(rounded down), ρ → the largest pure ε within it (rounded down), and rational upper bounds
of logarithms. 60-digit decimal arithmetic; no floats.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

from dprelease.accounting.exact import round_significant

_ZCDP_DIGITS = 60  # working precision of the conversion bound (decimal digits)


def pure_to_zcdp(epsilon: Fraction) -> Fraction:
    """ρ of an ε-DP mechanism viewed as zCDP: ε-DP implies (ε²/2)-zCDP (Bun and Steinke 2016,
    Proposition 1.4). Exact."""
    return epsilon * epsilon / 2


def zcdp_epsilon(rho: Fraction, delta: Fraction, digits: int = 6) -> Fraction:
    """The ε of the (ε, δ)-DP guarantee implied by ρ-zCDP, rounded up to ``digits`` significant
    digits: never understated.

    Canonne, Kamath and Steinke 2020, Proposition 12 / Corollary 13: ρ-zCDP implies (ε, δ)-DP
    for every α > 1 with ε = αρ + (ln(1/δ) + (α − 1)·ln(1 − 1/α) − ln α)/(α − 1) (the same
    bound OpenDP uses). Any α gives a valid ε, so the search only has to choose a good one: a
    golden-section search over α = 1 + e^x. Everything is 60-digit decimal arithmetic (no
    floats); the bound at the chosen α, a decimal and so an exact rational, is widened by far
    more than its rounding error and rounded up.
    """
    if rho <= 0 or not 0 < delta < 1:
        raise ValueError("need ρ > 0 and 0 < δ < 1")
    with decimal.localcontext() as ctx:
        ctx.prec = _ZCDP_DIGITS
        r, log_inv_delta = _dec(rho), -_dec(delta).ln()

        def bound(alpha: decimal.Decimal) -> decimal.Decimal:
            return alpha * r + (log_inv_delta + (alpha - 1) * (1 - 1 / alpha).ln() - alpha.ln()) / (alpha - 1)

        def at(x: decimal.Decimal) -> decimal.Decimal:
            return bound(1 + x.exp())

        alpha = 1 + _golden_section(at, lambda a, b: a <= b).exp()
        eps = bound(alpha) + decimal.Decimal(10) ** (-(_ZCDP_DIGITS - 10))  # far above the rounding error
    return max(_round_up(Fraction(eps), digits), Fraction(0))  # a tiny ρ at a large δ: ε = 0


def _golden_section(f, better) -> decimal.Decimal:  # type: ignore[no-untyped-def]
    """The x in [−30, 30] a golden-section search finds best for ``f`` (``better(a, b)``: f-value
    a is at least as good as b), in the current decimal context. The bracket shrinks by 0.618
    per step: 160 steps are far below any useful width. Callers only need a good x, not the best:
    every x gives a valid bound."""
    low, high = decimal.Decimal(-30), decimal.Decimal(30)
    ratio = (decimal.Decimal(5).sqrt() - 1) / 2
    c, d = high - ratio * (high - low), low + ratio * (high - low)
    fc, fd = f(c), f(d)
    for _ in range(160):
        if better(fc, fd):
            high, d, fd = d, c, fc
            c = high - ratio * (high - low)
            fc = f(c)
        else:
            low, c, fc = c, d, fd
            d = low + ratio * (high - low)
            fd = f(d)
    return c if better(fc, fd) else d


def _dec(value: Fraction) -> decimal.Decimal:
    return decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)


def _round_up(value: Fraction, digits: int) -> Fraction:
    """``value`` rounded up to ``digits`` significant decimal digits (0 and below: as they are)."""
    return value if value <= 0 else round_significant(value, digits, up=True)


def approx_to_zcdp(epsilon: Fraction, delta: Fraction, digits: int = 12) -> Fraction:
    """The largest ρ (rounded *down* to ``digits`` significant digits) whose (ε, δ) guarantee by
    :func:`zcdp_epsilon`'s bound is at most (``epsilon``, ``delta``): what a Gaussian mechanism
    may spend in ρ to be (ε, δ)-DP.

    For every α > 1 the bound αρ + c(α)/(α − 1) ≤ ε (c(α) = ln(1/δ) + (α − 1)·ln(1 − 1/α) − ln α)
    holds exactly when ρ ≤ g(α) = (ε − c(α)/(α − 1))/α; so any α gives a valid ρ and a
    golden-section search picks a good one. 60-digit decimals, then a margin far above their
    rounding error subtracted and the result rounded down: never more ρ than (ε, δ) allows.
    """
    if epsilon <= 0 or not 0 < delta < 1:
        raise ValueError("need ε > 0 and 0 < δ < 1")
    with decimal.localcontext() as ctx:
        ctx.prec = _ZCDP_DIGITS
        e, log_inv_delta = _dec(epsilon), -_dec(delta).ln()

        def allowed(x: decimal.Decimal) -> decimal.Decimal:
            alpha = 1 + x.exp()
            c = log_inv_delta + (alpha - 1) * (1 - 1 / alpha).ln() - alpha.ln()
            return (e - c / (alpha - 1)) / alpha

        rho = allowed(_golden_section(allowed, lambda a, b: a >= b)) - decimal.Decimal(10) ** (-(_ZCDP_DIGITS - 10))
    if rho <= 0:
        raise ValueError(f"ε = {epsilon} at δ = {delta} leaves no room for Gaussian noise")
    return _round_down(Fraction(rho), digits)


def ln_upper_bound(x: int, digits: int = 12) -> Fraction:
    """ln x as a fraction never below it: 60-digit decimals, rounded up to ``digits``
    significant digits (with a margin far above their error)."""
    with decimal.localcontext() as ctx:
        ctx.prec = _ZCDP_DIGITS
        value = decimal.Decimal(x).ln() + decimal.Decimal(10) ** (-(_ZCDP_DIGITS - 10))
    return _round_up(Fraction(value), digits)


def zcdp_to_pure(rho: Fraction, digits: int = 12) -> Fraction:
    """The largest ε (rounded *down* to ``digits`` significant digits) with ε²/2 ≤ ρ: the ε at
    which a pure ε-DP mechanism (Laplace, exponential) spends at most ρ of a zCDP budget
    (Bun and Steinke 2016, Proposition 1.4). Exact integer square roots."""
    if rho <= 0:
        raise ValueError("ρ must be positive")
    two_rho = 2 * rho
    with decimal.localcontext() as ctx:
        ctx.prec = _ZCDP_DIGITS
        exponent = (_dec(two_rho).sqrt()).adjusted() - digits + 1
    unit = Fraction(10) ** exponent
    # the largest integer m with (m·unit)² ≤ 2ρ: m = ⌊√(2ρ/unit²)⌋
    scaled = two_rho / (unit * unit)
    m = math.isqrt(scaled.numerator // scaled.denominator)
    return m * unit


def _round_down(value: Fraction, digits: int) -> Fraction:
    """``value`` (> 0) rounded down to ``digits`` significant decimal digits."""
    with decimal.localcontext() as ctx:
        ctx.prec = _ZCDP_DIGITS
        exponent = _dec(value).adjusted() - digits + 1
    unit = Fraction(10) ** exponent
    return math.floor(value / unit) * unit
