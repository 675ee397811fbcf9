"""The plan's measurement types (dprelease.plan.measurements): each computes its noise parameters
once, refuses parameters the exact sampler cannot take when it is built (at plan time, never
after a reservation), and owns its margin and its draw."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dprelease.mechanisms import margin_of_error
from dprelease.mechanisms.gaussian import gaussian_margin
from dprelease.plan.measurements import (
    CoinFlip,
    DiscreteGaussian,
    DiscreteLaplace,
    KRandomizedResponse,
    PermuteAndFlip,
    TruncatedGeometric,
)

CONF = Fraction(95, 100)


def test_parameters_are_the_textbook_ones():
    count = DiscreteLaplace(1, Fraction(1, 4))
    assert (count.noise_scale, count.scale, count.margin(CONF)) == (4, 4, margin_of_error(Fraction(4), CONF))
    income = DiscreteLaplace(200_000, Fraction(1, 2), granularity=1000)  # Δ/ε in value units, noise in units of g
    assert income.scale == 400_000 and income.noise_scale == 400
    assert income.margin(CONF) == 1000 * margin_of_error(Fraction(400), CONF)
    gauss = DiscreteGaussian(2, Fraction(4), granularity=10)
    assert (gauss.shown_sensitivity, gauss.shown_scale) == (200, 400) and gauss.margin(CONF) == 10 * gaussian_margin(
        Fraction(4), CONF)
    assert PermuteAndFlip(1, Fraction(1, 2), monotone=True).temperature == 2
    assert PermuteAndFlip(1, Fraction(1, 2), monotone=False).temperature == 4
    assert KRandomizedResponse(10, Fraction(1)).keep_probability == pytest.approx(np.e / (np.e + 9))
    assert CoinFlip().keep_probability == 0.75 and CoinFlip().epsilon_bound > Fraction(10986, 10000)


@pytest.mark.parametrize("build", [
    lambda: DiscreteLaplace(1, Fraction(1, 3**30)),  # a scale with parts above 2^40
    lambda: PermuteAndFlip(1, Fraction(1, 3**30), monotone=True),
    lambda: DiscreteGaussian(1, Fraction(3**40, 7**20)),  # σ² with too many digits
    lambda: TruncatedGeometric(1000, Fraction(1), granularity=1000, upper=10),  # a count's bound on a sum
])
def test_parameters_the_sampler_cannot_take_are_refused_when_built(build):
    with pytest.raises(ValueError):
        build()


def test_the_truncated_geometric_draws_at_its_checked_scale():
    noise = TruncatedGeometric(1, Fraction(1, 2), upper=5)
    drawn = noise.draw(np.full(20_000, 3, dtype=np.int64))
    assert drawn.min() >= 0 and drawn.max() <= 5 and 0 < np.mean(drawn == 3) < 1
