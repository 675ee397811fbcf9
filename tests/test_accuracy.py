"""Margins of error from the exact discrete Laplace pmf, checked by brute force."""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from dprelease.mechanisms.discrete_laplace import epsilon_for_margin, margin_of_error

SCALES = [Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(7, 3), Fraction(4), Fraction(10),
          Fraction(40, 3), Fraction(1000)]
CONFIDENCES = [Fraction(90, 100), Fraction(95, 100), Fraction(99, 100), Fraction(999, 1000)]


def brute_force_moe(scale: Fraction, confidence: Fraction) -> int:
    """Sum the pmf P(X=k) = (1-p)/(1+p) p^|k| outwards until the mass inside [-k, k] ≥ c."""
    with localcontext() as ctx:
        ctx.prec = 80
        p = (-Decimal(scale.denominator) / Decimal(scale.numerator)).exp()
        term = (1 - p) / (1 + p)
        inside = term
        target = Decimal(confidence.numerator) / Decimal(confidence.denominator)
        k = 0
        while inside < target:
            k += 1
            term *= p
            inside += 2 * term
        return k


@pytest.mark.parametrize("scale", SCALES, ids=str)
@pytest.mark.parametrize("confidence", CONFIDENCES, ids=str)
def test_margin_equals_brute_force_from_the_pmf(scale, confidence):
    assert margin_of_error(scale, confidence) == brute_force_moe(scale, confidence)


def test_margin_grows_with_scale_and_confidence():
    c = Fraction(95, 100)
    moes = [margin_of_error(s, c) for s in SCALES]
    assert moes == sorted(moes)
    assert margin_of_error(Fraction(10), Fraction(90, 100)) < margin_of_error(Fraction(10), c)


def test_known_values():
    # P(|X| > k) = 2 p^(k+1)/(1+p); at scale 1, p = e^-1: k=2 gives 0.0729, k=3 gives 0.0268
    assert margin_of_error(Fraction(1), Fraction(95, 100)) == 3
    assert margin_of_error(Fraction(1, 10), Fraction(95, 100)) == 0


@pytest.mark.parametrize("target", [0, 1, 3, 10, 57, 400])
@pytest.mark.parametrize("confidence", [Fraction(90, 100), Fraction(95, 100)], ids=str)
def test_epsilon_for_margin_is_the_smallest_three_digit_epsilon_that_meets_it(target, confidence):
    eps = epsilon_for_margin(target, confidence)
    assert margin_of_error(1 / eps, confidence) <= target
    # one unit less in the third significant digit misses the target
    unit = Fraction(10) ** (len(str(int(eps))) - 3) if eps >= 1 else _unit(eps)
    assert margin_of_error(1 / (eps - unit), confidence) > target


def _unit(x: Fraction) -> Fraction:
    n = 0
    while x * 10 ** (n + 1) < 1:
        n += 1
    return Fraction(1, 10 ** (n + 3))
