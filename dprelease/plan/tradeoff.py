"""The privacy–accuracy trade-off of a release, before any data is read: per measurement, the
margin of error its noise would have over a range of budgets around the one the spec chose.

No data and no budget: a curve is a function of the plan alone (or, in the report, of the
manifest's figures, which are the plan's). Each point is the noise the planner would build at
that budget — the same mechanism, sensitivity and granularity, with its parameters computed as
:mod:`dprelease.plan.planner` computes them (:func:`noise_at`) — and its margin of error from
the exact noise distribution (:meth:`DiscreteLaplace.margin`, :meth:`DiscreteGaussian.margin`),
so the point at the spec's own budget is the plan's margin, exactly.

The grid is the spec's budget times :data:`FACTORS` (exact fractions): ε under pure DP, ρ under
zCDP, and under (ε, δ)-DP the ε at the measurement's own δ (its δ stays what the spec gave it).
A mode's curve is its count gap in rows, a quantile's its rank error in rows
(:func:`~dprelease.plan.margins.choice_margin`, permute-and-flip at each budget's ε). A mean's
curve is its margin in the column's units at a cell of :data:`MEAN_AT` rows
(:func:`~dprelease.plan.margins.mean_margin`, both parts at each budget's share), since its
error also depends on how many rows a cell holds, which only the data knows; without its count
part (a manifest read by an older caller) it is the sum part's margin, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable

from dprelease.accounting import ZCDP, ApproxDP, Budget, PureDP, approx_to_zcdp
from dprelease.errors import InternalError
from dprelease.mechanisms.gaussian import sigma2_for
from dprelease.plan.measurements import (
    DiscreteGaussian,
    DiscreteLaplace,
    Mean,
    OneNoise,
    PermuteAndFlip,
    TablePlan,
    TruncatedGeometric,
)
from dprelease.plan.margins import SHOWN_COUNTS, Margin, choice_margin, mean_margin
from dprelease.plan.planner import Plan, pure_epsilons

FACTORS: tuple[Fraction, ...] = tuple(Fraction(2) ** k for k in range(-3, 4))  # 1/8, 1/4, …, 8
MEAN_AT = SHOWN_COUNTS[1]  # a mean's curve: its margin at a cell of this many rows
MODE_NOTE = "a mode: the count gap in rows to the true mode's count (exponential-mechanism bound)"
QUANTILE_NOTE = "a quantile: the rank error in rows (exponential-mechanism bound)"
MEAN_NOTE = (f"a mean: its margin in the column's units at a cell of n = {MEAN_AT:,} rows (conservative bound "
             "X/(n − B)); it shrinks like 1/n")
SUM_PART_NOTE = ("the margin of its sum part (as its plan row shows); the mean divides that sum by a noisy count, "
                 "so its own error also depends on the cell's count, which only the data knows")


@dataclass(frozen=True, slots=True)
class Point:
    """One budget of a curve and the margin of error the measurement would have there (None:
    no noise of its mechanism exists at that budget — the exact sampler cannot take the scale,
    or (ε, δ) leaves no room for Gaussian noise)."""

    factor: Fraction  # of the spec's budget
    budget: Budget  # of the spec's kind; under approx the spec's δ
    moe: int | None


@dataclass(frozen=True, slots=True)
class Curve:
    """One measurement's margins of error at ``confidence`` over a grid of budgets; the spec's
    own choice is the point of factor 1 (:attr:`chosen`). No points, and a ``note`` saying why,
    where a margin of error means nothing (a mode)."""

    name: str
    level: str | None  # of a geographic table's measurement (None: a plain table)
    mechanism: str
    budget: Budget  # the spec's choice (the published one, in a report)
    confidence: Fraction
    points: tuple[Point, ...]
    note: str | None = None

    @property
    def key(self) -> str:
        """``table`` or ``table/level``, as the plan and the ledger name the measurement."""
        return self.name if self.level is None else f"{self.name}/{self.level}"

    @property
    def chosen(self) -> Point | None:
        """The point at the spec's own budget (None for a curve without points)."""
        return next((p for p in self.points if p.factor == 1), None)


def scaled(budget: Budget, factor: Fraction) -> Budget:
    """``budget`` with its ε (or ρ) times ``factor``; an (ε, δ) budget keeps its δ."""
    match budget:
        case PureDP(epsilon=epsilon):
            return PureDP(epsilon * factor)
        case ZCDP(rho=rho):
            return ZCDP(rho * factor)
        case ApproxDP(epsilon=epsilon, delta=delta):
            return ApproxDP(epsilon * factor, delta)
    raise InternalError(f"not a budget: {budget!r}")


def noise_at(noise: OneNoise, budget: Budget) -> DiscreteLaplace | DiscreteGaussian:
    """The noise the planner builds at ``budget`` for a measurement whose noise is ``noise``: the
    same mechanism, sensitivity and granularity (and a truncated geometric's bound), with its
    parameters computed as the planner computes them — a pure mechanism at the first ε of
    :func:`~dprelease.plan.planner.pure_epsilons` that the sampler takes; the discrete Gaussian
    with σ² = Δ₂²/(2ρ) rounded up (:func:`~dprelease.mechanisms.gaussian.sigma2_for`), ρ being
    the budget's, or under (ε, δ) the largest ρ within them (:func:`~dprelease.accounting.approx_to_zcdp`).

    Raises ValueError where no such noise exists at ``budget`` (see :class:`Point`), and
    InternalError for a mode (no margin to trade off) or a budget of the wrong kind."""
    match noise:
        case TruncatedGeometric(sensitivity=sensitivity, granularity=g, upper=upper):
            return _first_pure(budget, lambda e: TruncatedGeometric(sensitivity, e, g, upper=upper))
        case DiscreteLaplace(sensitivity=sensitivity, granularity=g):
            return _first_pure(budget, lambda e: DiscreteLaplace(sensitivity, e, g))
        case DiscreteGaussian(l2_squared=l2, granularity=g):
            match budget:
                case ZCDP(rho=rho):
                    pass
                case ApproxDP(epsilon=epsilon, delta=delta) if delta > 0:
                    rho = approx_to_zcdp(epsilon, delta)  # ValueError: (ε, δ) leaves no room
                case _:
                    raise InternalError(f"the discrete Gaussian planned at {budget!r}")
            return DiscreteGaussian(l2, sigma2_for(rho, l2), g)
        case PermuteAndFlip():
            raise InternalError("a mode has no margin of error to trade off")
    raise InternalError(f"not a noise type: {noise!r}")


def _first_pure(budget: Budget, make: Callable[[Fraction], DiscreteLaplace]) -> DiscreteLaplace:
    for epsilon in pure_epsilons(budget):
        try:
            return make(epsilon)
        except ValueError:
            continue
    raise ValueError(f"no ε of {budget!r} gives a scale the exact sampler takes")


def curve(name: str, level: str | None, noise: OneNoise, budget: Budget, confidence: Fraction,
          factors: tuple[Fraction, ...] = FACTORS, note: str | None = None) -> Curve:
    """The curve of a measurement with ``noise`` planned at ``budget`` (its spec's): a count's or
    sum's noise margin, a mode's count gap or a quantile's rank error (:data:`MODE_NOTE`)."""
    points = []
    for factor in factors:
        at = scaled(budget, factor)
        try:
            moe: int | None = (choice_margin(choice_at(noise, at), confidence) if isinstance(noise, PermuteAndFlip)
                               else noise_at(noise, at).margin(confidence))
        except ValueError:
            moe = None
        points.append(Point(factor, at, moe))
    if isinstance(noise, PermuteAndFlip) and note is None:
        note = MODE_NOTE if noise.q is None else QUANTILE_NOTE
    return Curve(name, level, noise.kind, budget, confidence, tuple(points), note)


def choice_at(noise: PermuteAndFlip, budget: Budget) -> PermuteAndFlip:
    """Permute-and-flip as the planner builds it at ``budget``: the first ε of
    :func:`~dprelease.plan.planner.pure_epsilons` whose temperature the exact sampler takes
    (ValueError where none)."""
    for epsilon in pure_epsilons(budget):
        try:
            return replace(noise, epsilon=epsilon)
        except ValueError:
            continue
    raise ValueError(f"no ε of {budget!r} gives a temperature the exact sampler takes")


def table_curve(t: TablePlan, confidence: Fraction, factors: tuple[Fraction, ...] = FACTORS) -> Curve:
    """The curve of one planned measurement; a mean's is its sum part's (:data:`MEAN_NOTE`), over
    the mean's budget (the sum part gets its share of each)."""
    if isinstance(t.noise, Mean):
        return mean_curve(t.name, t.level, t.noise.sum.noise, t.noise.sum.budget, t.budget, confidence, factors,
                          count=(t.noise.count.noise, t.noise.count.budget), half_width=t.noise.half_width)
    return curve(t.name, t.level, t.noise, t.budget, confidence, factors)


def mean_curve(name: str, level: str | None, sum_noise: OneNoise, sum_budget: Budget, budget: Budget,
               confidence: Fraction, factors: tuple[Fraction, ...] = FACTORS,
               count: tuple[OneNoise, Budget] | None = None, half_width: int = 0) -> Curve:
    """A mean's curve over its own ``budget``. The planner gives the sum a fixed share of the
    mean's ε (ρ; under approx of ε and δ), so each part's budget at factor f is its own scaled by
    f. With its ``count`` part (noise and budget) and ``half_width``: its margin at a cell of
    :data:`MEAN_AT` rows (:data:`MEAN_NOTE`, rounded up); without: its sum part's margins
    (:data:`SUM_PART_NOTE`)."""
    if count is None:
        inner = curve(name, level, sum_noise, sum_budget, confidence, factors)
        points = tuple(Point(p.factor, scaled(budget, p.factor), p.moe) for p in inner.points)
        return Curve(name, level, Mean.kind, budget, confidence, points, SUM_PART_NOTE)
    found = []
    for factor in factors:
        try:
            at: int | None = _at_count(mean_margin(noise_at(sum_noise, scaled(sum_budget, factor)),
                                                   noise_at(count[0], scaled(count[1], factor)), half_width, confidence))
        except ValueError:
            at = None
        found.append(Point(factor, scaled(budget, factor), at))
    return Curve(name, level, Mean.kind, budget, confidence, tuple(found), MEAN_NOTE)


def _at_count(margin: Margin) -> int | None:
    """A mean's margin at a cell of :data:`MEAN_AT` rows, rounded up (None: no bound there)."""
    at = margin.at_count(MEAN_AT)
    return None if at is None else math.ceil(at)


def plan_curves(plan: Plan, confidence: Fraction | None = None,
                factors: tuple[Fraction, ...] = FACTORS) -> tuple[Curve, ...]:
    """Every measurement's curve, in plan order, at ``confidence`` (default: the plan's)."""
    at = plan.confidence if confidence is None else confidence
    return tuple(table_curve(t, at, factors) for t in plan.tables)
