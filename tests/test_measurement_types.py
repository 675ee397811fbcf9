"""The plan's measurement types (dprelease.plan.measurements): each computes its noise parameters
once, refuses parameters the exact sampler cannot take when it is built (at plan time, never
after a reservation), and owns its margin and its draw."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import ZCDP, ApproxDP, PureDP, compose
from dprelease.errors import InternalError
from dprelease.lifecycle.measure import measure_mean
from dprelease.mechanisms import margin_of_error
from dprelease.mechanisms.gaussian import gaussian_margin
from dprelease.plan.measurements import (
    DiscreteGaussian,
    DiscreteLaplace,
    Mean,
    MeanPart,
    PermuteAndFlip,
    TablePlan,
    TruncatedGeometric,
    noise_variances,
)
from dprelease.plan.randomizers import CoinFlip, KRandomizedResponse
from tests.test_sampler import _Counter  # the samplers' deterministic test seam (never for noise)

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


# ---------------------------------------------------------------- a mean: its sum and its count


def part(noise, budget, charge=None):
    return MeanPart(noise, budget, budget if charge is None else charge, noise.margin(CONF), noise.margin(CONF))


HALF = PureDP(Fraction(1, 2))


def income_mean(sum_budget=HALF, count_budget=HALF):
    """A mean of values in [0, 200000] on a grid of 1000, centred (Δ = 100000), ε split 1/2 + 1/2."""
    return Mean(part(DiscreteLaplace(100_000, sum_budget.amount, granularity=1000), sum_budget),
                part(DiscreteLaplace(1, count_budget.amount), count_budget))


@pytest.mark.parametrize("mean", [
    income_mean(),
    Mean(part(DiscreteGaussian(100, Fraction(50), granularity=10), ZCDP(Fraction(1, 4))),
         part(DiscreteGaussian(1, Fraction(2)), ZCDP(Fraction(1, 4)))),
])
def test_a_mean_draws_its_sum_then_its_count_from_its_parts_samplers(mean):
    """Through the test seam: the mean's draw is exactly its sum part's draw on the sums followed
    by its count part's on the counts (the same words, in that order), stacked (sum, count)."""
    units = np.stack([np.arange(-50, 50), np.arange(100, 200)]).astype(np.int64)
    drawn = mean.draw(units, rng=_Counter())
    words = _Counter()
    want = np.stack([mean.sum.noise.draw(units[0].copy(), rng=words),
                     mean.count.noise.draw(units[1].copy(), rng=words)])
    assert drawn.shape == (2, 100) and np.array_equal(drawn, want)
    g = mean.sum.noise.granularity
    assert np.all(drawn[0] % g == 0) and not np.array_equal(drawn[0], units[0] * g)  # in value units, with noise
    assert not np.array_equal(drawn[1], units[1])
    assert not np.array_equal(mean.draw(units, rng=_Counter()), mean.draw(units))  # the OS CSPRNG otherwise
    with pytest.raises(ValueError, match="stacked"):
        mean.draw(units[0])


@pytest.mark.parametrize("sum_budget,count_budget,charges", [
    (PureDP(Fraction(3, 4)), PureDP(Fraction(1, 4)), None),
    (PureDP(Fraction(1, 2)), PureDP(Fraction(1, 2)), (ZCDP(Fraction(1, 8)), ZCDP(Fraction(1, 8)))),  # on a ρ ledger
    (ApproxDP(Fraction(1, 2), Fraction(0)), ApproxDP(Fraction(1, 4), Fraction(0)), None),
])
def test_a_means_budget_and_charge_are_its_parts_composed(sum_budget, count_budget, charges):
    sum_charge, count_charge = charges or (sum_budget, count_budget)
    mean = Mean(part(DiscreteLaplace(100_000, sum_budget.amount, granularity=1000), sum_budget, sum_charge),
                part(DiscreteLaplace(1, count_budget.amount), count_budget, count_charge))
    assert mean.budget == compose([sum_budget, count_budget], sum_budget.kind)
    assert mean.charge == compose([sum_charge, count_charge], sum_charge.kind)
    assert mean.parts == (mean.sum, mean.count)
    assert mean.variances() == (mean.sum.noise.variance(), mean.count.noise.variance())
    if sum_budget.amount == count_budget.amount == Fraction(1, 2):  # value units: ≈ 2b², the sum's b = 200000
        assert mean.variances()[0] == pytest.approx(2 * 200_000 ** 2, rel=1e-3)
        assert mean.variances()[1] == DiscreteLaplace(1, Fraction(1, 2)).variance()


@pytest.mark.parametrize("build", [
    lambda: income_mean(PureDP(Fraction(1, 2)), ZCDP(Fraction(1, 8))),  # budgets of two kinds
    lambda: Mean(part(DiscreteLaplace(1, Fraction(1, 2)), PureDP(Fraction(1, 2))),  # charges of two kinds
                 part(DiscreteLaplace(1, Fraction(1, 2)), PureDP(Fraction(1, 2)), ZCDP(Fraction(1, 8)))),
])
def test_a_mean_refuses_parts_of_different_kinds(build):
    with pytest.raises(TypeError, match="convert one explicitly"):
        build()


def test_a_means_count_counts_rows():
    with pytest.raises(ValueError, match="granularity 1"):
        Mean(part(DiscreteLaplace(1000, Fraction(1, 2), granularity=1000), PureDP(Fraction(1, 2))),
             part(DiscreteLaplace(1000, Fraction(1, 2), granularity=1000), PureDP(Fraction(1, 2))))


def test_a_means_plan_is_the_mean_not_its_sum():
    """A mean's TablePlan holds the Mean: its budget and charge are the mean's (a plan with
    others is a bug), it has no one sensitivity, scale or variance; its row (mechanism,
    sensitivity, scale: manifest format 1) names the sum part's noise, and its parts are listed."""
    mean = income_mean()
    plan = TablePlan("m", mean.budget, mean, 4, mean.sum.moe, mean.sum.moe95, charge=mean.charge)
    assert plan.parts == (mean.sum, mean.count) and plan.budget == PureDP(1)
    assert (plan.mechanism, plan.shown_sensitivity, plan.shown_scale) == ("discrete_laplace", 100_000, 200_000)
    for what in ("sensitivity", "scale", "granularity"):
        with pytest.raises(InternalError, match="is a mean"):
            getattr(plan, what)
    assert noise_variances([plan]) == {}
    with pytest.raises(InternalError, match="other than its parts"):
        TablePlan("m", PureDP(Fraction(1, 2)), mean, 4, 0, 0, charge=mean.charge)
    with pytest.raises(InternalError, match="other than its parts"):
        TablePlan("m", mean.budget, mean, 4, 0, 0, charge=PureDP(Fraction(1, 2)))


def test_measure_mean_draws_the_measured_cells_through_the_mean():
    """Structural cells get no noise (exact zeros in both parts); the measured cells are the
    Mean's draw on them, through the same seam."""
    mean = income_mean()
    plan = TablePlan("m", mean.budget, mean, 6, 0, 0, charge=mean.charge, structural=(1, 4))
    units = np.array([[3, 0, -2, 7, 0, 1], [5, 0, 4, 9, 0, 2]], dtype=np.int64)
    drawn = measure_mean(units, plan, rng=_Counter())
    keep = [0, 2, 3, 5]
    assert np.array_equal(drawn[:, [1, 4]], np.zeros((2, 2))) and drawn.dtype == np.int64
    assert np.array_equal(drawn[:, keep], mean.draw(units[:, keep], rng=_Counter()))
    with pytest.raises(InternalError, match="planned with the discrete_laplace"):
        measure_mean(units, TablePlan("c", PureDP(1), DiscreteLaplace(1, Fraction(1)), 6, 0, 0, charge=PureDP(1)))
