"""A proposed split of a release's budget across its tables that minimises the weighted sum of
expected squared errors, before any data is read. It proposes; it never writes a spec, and
nothing is spent.

**The closed form.** Per measurement i the formula covers:

* Pure ε-DP, and the discrete Laplace tables of an (ε, δ) release: noise of scale Δᵢ/εᵢ (the
  discrete Laplace, or the truncated geometric's before clamping) has per-cell variance at most
  2Δᵢ²/εᵢ² (the continuous Laplace's; the discrete one's, 2p/(1 − p)² with p = exp(−εᵢ/Δᵢ), is
  2Δᵢ²/εᵢ² − 1/6 + O(εᵢ²/Δᵢ²): the same minimiser up to that vanishing term). Minimise
  Σᵢ wᵢcᵢ·2Δᵢ²/εᵢ² subject to Σᵢ εᵢ = E. The objective is convex on εᵢ > 0, so its stationary
  point is the minimum: ∂/∂εᵢ = −4wᵢcᵢΔᵢ²/εᵢ³ = −λ for every i, hence

      εᵢ = E · (wᵢcᵢΔᵢ²)^(1/3) / Σⱼ (wⱼcⱼΔⱼ²)^(1/3).

* zCDP (budgets ρ): the discrete Gaussian has σᵢ² = Δ₂ᵢ²/(2ρᵢ), which bounds its variance; a
  pure mechanism runs at ε with ε²/2 = ρᵢ, variance ≤ 2Δᵢ²/ε² = Δᵢ²/ρᵢ. Both are kᵢ/ρᵢ, with
  kᵢ = Δ₂ᵢ²/2 or Δᵢ². Minimising Σᵢ wᵢcᵢkᵢ/ρᵢ subject to Σᵢ ρᵢ = R (convex again) gives
  wᵢcᵢkᵢ/ρᵢ² = λ, hence

      ρᵢ = R · (wᵢcᵢkᵢ)^(1/2) / Σⱼ (wⱼcⱼkⱼ)^(1/2).

Where wᵢ is the table's weight (default 1); cᵢ the number of cells the measurement adds noise
to (the declared cross product less its structural zeros, which get none); a geographic table
is one measurement per level, each with its own ε (the spec's ``epsilon: {root: …, STATE: …}``),
its own cᵢ and the table's weight. Δᵢ (Δ₂ᵢ²) is the L1 sensitivity (squared L2) in the table's
published units, under the release's neighbouring relation: a count's 1 (K with a contribution
bound, 2 under change one record), a sum's in its value units. Errors are in each table's own
units, so a sum's squared dollars outweigh squared persons unless the weights say otherwise.
E (R) is what the release's budget leaves after the kept tables and the targets. The errors are
the noisy measurements', before post-processing (clamping and consistency only shrink them).

**Kept** at the spec's budget, and said to be: a mode or quantile (a category has no squared
error), a mean (it divides by a noisy count: its error depends on the cell's count, which only
the data knows), and under (ε, δ) a discrete Gaussian table (its ρ(ε, δ) has no closed form and
its δ share follows its ε). **Targets**: a table that must meet a margin gets, at every level,
the smallest budget whose margin at the confidence is within it (the ε of ``plan --target-moe``,
:func:`~dprelease.mechanisms.discrete_laplace.epsilon_for_margin`; under zCDP the smallest ρ,
both rounded up to 3 significant digits and checked); the others share what remains.

**Rounding**: each share is rounded *down* to 3 significant digits, so the proposal never sums
above the release's budget; the sum is checked exactly.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from dprelease.accounting import ZCDP, ApproxDP, Budget, PureDP, amount_text, compose, exact_and_decimal, within
from dprelease.accounting.exact import round_significant
from dprelease.errors import InternalError, OverBudgetError, UserError
from dprelease.mechanisms.discrete_laplace import epsilon_for_margin
from dprelease.plan.measurements import DiscreteGaussian, DiscreteLaplace, Mean, PermuteAndFlip, TablePlan
from dprelease.plan.planner import Plan
from dprelease.plan.tradeoff import noise_at, table_curve

DIGITS = 3  # significant digits of a proposed budget
Role = Literal["formula", "target", "kept"]


@dataclass(frozen=True, slots=True)
class Share:
    """One measurement's proposed budget (of the spec's kind) and how it was chosen."""

    key: str  # ``table`` or ``table/level``
    name: str
    level: str | None
    role: Role
    spec_budget: Budget
    budget: Budget  # proposed: the spec's when kept
    why: str  # kept: the reason; target: the margin it meets ("±10")
    weight: Fraction
    cells: int  # measured with noise
    coefficient: Fraction | None  # wᵢcᵢΔᵢ² (wᵢcᵢkᵢ under zCDP); None when kept
    moe_spec: int | None  # the margin at the confidence, at the spec's budget and at the proposed one
    moe: int | None


@dataclass(frozen=True, slots=True)
class Allocation:
    """A proposed split (:func:`allocate`): every measurement's :class:`Share`, and the weighted
    sum of expected squared errors Σ wᵢcᵢ·Varᵢ (each measurement's exact per-cell noise variance
    in its units, :meth:`DiscreteLaplace.variance`) of the split measurements under the proposal,
    under the spec's split and under an equal split of the same budget."""

    release_budget: Budget
    exponent: Fraction  # 1/3 (ε) or 1/2 (ρ)
    confidence: Fraction
    shares: tuple[Share, ...]
    error: float
    spec_error: float
    equal_error: float

    @property
    def total(self) -> Budget:
        return compose((s.budget for s in self.shares), self.release_budget.kind)

    @property
    def unspent(self) -> Fraction:
        """What the rounding (or a release of targets only) leaves of the release's ε (ρ)."""
        return self.release_budget.amount - self.total.amount


def kept_because(t: TablePlan, kind: str) -> str | None:
    """Why the formula does not cover measurement ``t`` (None: it does)."""
    match t.noise:
        case Mean():
            return "a mean: it divides by a noisy count, so its error depends on the cell's count (data)"
        case PermuteAndFlip():
            return "a mode or quantile: its output is a category, with no squared error to weigh"
        case DiscreteGaussian() if kind == "approx":
            return "the discrete Gaussian under (ε, δ): no closed form (ρ(ε, δ)), and its δ share follows its ε"
    if t.measured_cells == 0:
        return "no cell is measured (all structural zeros)"
    return None


def allocate(plan: Plan, weights: Mapping[str, Fraction] | None = None, targets: Mapping[str, int] | None = None,
             confidence: Fraction | None = None) -> Allocation:
    """The split of ``plan``'s release budget that minimises Σ wᵢcᵢ·Varᵢ (module docstring),
    with every table of ``targets`` (name → margin, value units) meeting its margin at
    ``confidence`` (default: the plan's). Weights are per table (default 1), positive.

    Raises UserError for a weight or target naming no table, or a table the formula keeps;
    OverBudgetError when the kept tables and the targets leave nothing to share."""
    weights, targets = dict(weights or {}), dict(targets or {})
    at = plan.confidence if confidence is None else confidence
    kind = plan.release_budget.kind
    _check_names(plan, weights, "--weights")
    _check_names(plan, targets, "--target-moe")
    if any(w <= 0 for w in weights.values()):
        raise UserError("--weights: every weight must be positive")
    reasons = {t.key: kept_because(t, kind) for t in plan.tables}
    for named, option in ((weights, "--weights"), (targets, "--target-moe")):
        for t in plan.tables:
            if t.name in named and reasons[t.key]:
                raise UserError(f"{option}: {t.name} keeps its spec {plan.symbol}: {reasons[t.key]}")
    kept = [t for t in plan.tables if reasons[t.key]]
    split = [t for t in plan.tables if not reasons[t.key]]
    if not split:
        raise UserError("nothing to allocate: every table keeps its spec budget ("
                        + "; ".join(f"{t.key}: {reasons[t.key]}" for t in kept) + ")")
    left = plan.release_budget.amount - sum((t.budget.amount for t in kept), Fraction(0))
    needs = {t.key: _budget_for_margin(t, kind, targets[t.name], at) for t in split if t.name in targets}
    free = [t for t in split if t.name not in targets]
    _refuse_overrun(plan, kept, needs, left, free)
    exponent = Fraction(1, 2) if kind == "zcdp" else Fraction(1, 3)
    coefficients = {t.key: weights.get(t.name, Fraction(1)) * t.measured_cells * _variance_constant(t, kind)
                    for t in split}
    shared = closed_form({t.key: coefficients[t.key] for t in free},
                         left - sum((b.amount for b in needs.values()), Fraction(0)), exponent) if free else {}
    shares = []
    for t in plan.tables:
        w = weights.get(t.name, Fraction(1))
        if reasons[t.key]:
            shares.append(_share(t, "kept", t.budget, reasons[t.key] or "", w, None, at))
        elif t.key in needs:
            shares.append(_share(t, "target", needs[t.key], f"±{targets[t.name]}", w, coefficients[t.key], at))
        else:
            proposed = _typed(kind, round_significant(shared[t.key], DIGITS, up=False))
            shares.append(_share(t, "formula", proposed, "", w, coefficients[t.key], at))
    equal = _typed(kind, left / len(split))
    result = Allocation(plan.release_budget, exponent, at, tuple(shares),
                        error=_error(split, {s.key: s.budget for s in shares}, weights),
                        spec_error=_error(split, {t.key: t.budget for t in split}, weights),
                        equal_error=_error(split, {t.key: equal for t in split}, weights))
    if not within(result.total, plan.release_budget):  # the rounding is down: a bug if this fires
        raise InternalError(f"the proposed split sums to {amount_text(result.total)}, over the release budget "
                            f"{amount_text(plan.release_budget)}")
    return result


def closed_form(coefficients: Mapping[str, Fraction], budget: Fraction, exponent: Fraction) -> dict[str, Fraction]:
    """budget · aᵢ^p / Σⱼ aⱼ^p per key (aᵢ = ``coefficients``, p = ``exponent``), unrounded, as
    exact Fractions of 60-digit decimals (the roots are irrational; callers round down)."""
    if budget <= 0 or any(a <= 0 for a in coefficients.values()):
        raise InternalError("the closed form needs a positive budget and positive coefficients")
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        p = Decimal(exponent.numerator) / Decimal(exponent.denominator)
        roots = {k: ((Decimal(a.numerator) / Decimal(a.denominator)).ln() * p).exp() for k, a in coefficients.items()}
        total = sum(roots.values(), Decimal(0))
        whole = Decimal(budget.numerator) / Decimal(budget.denominator)
        return {k: Fraction(whole * r / total) for k, r in roots.items()}


def _check_names(plan: Plan, named: Mapping[str, object], option: str) -> None:
    names = list(dict.fromkeys(t.name for t in plan.tables))
    unknown = [n for n in named if n not in names]
    if unknown:
        raise UserError(f"{option}: no table {', '.join(map(repr, unknown))} in release {plan.release}; its tables: "
                        + ", ".join(names))


def _variance_constant(t: TablePlan, kind: str) -> Fraction:
    """Δᵢ² (the noise's variance is ≈ 2Δᵢ²/εᵢ², or Δᵢ²/ρᵢ for a pure mechanism under zCDP), or
    under zCDP for the discrete Gaussian kᵢ = Δ₂ᵢ²/2 (variance ≤ Δ₂ᵢ²/(2ρᵢ)); in published units."""
    match t.noise:
        case DiscreteLaplace(sensitivity=sensitivity):
            return Fraction(sensitivity) ** 2
        case DiscreteGaussian() if kind == "zcdp":
            return Fraction(t.noise.shown_sensitivity, 2)
    raise InternalError(f"{t.key}: the {t.mechanism} is not covered by the closed form")


def _typed(kind: str, amount: Fraction) -> Budget:
    """A split measurement's budget of the release's kind (under approx a discrete Laplace's: δ 0)."""
    return ZCDP(amount) if kind == "zcdp" else ApproxDP(amount, Fraction(0)) if kind == "approx" else PureDP(amount)


def _one_noise(t: TablePlan) -> DiscreteLaplace | DiscreteGaussian:
    if not isinstance(t.noise, (DiscreteLaplace, DiscreteGaussian)):
        raise InternalError(f"{t.key}: the {t.mechanism} is not split by the closed form")
    return t.noise


def _budget_for_margin(t: TablePlan, kind: str, target: int, confidence: Fraction) -> Budget:
    """The smallest budget (3 significant digits, rounded up) at which ``t``'s noise has a margin
    within ``target`` at ``confidence``: the ε of ``plan --target-moe`` for a pure mechanism on an
    ε budget; under zCDP the smallest such ρ, by bisection on the planned noise (its margin only
    shrinks as ρ grows). Checked on the noise the planner would build."""
    noise = _one_noise(t)
    if kind != "zcdp":
        units = max(target // noise.granularity, 0)  # a margin in value units, on the granularity's grid
        found = _typed(kind, epsilon_for_margin(units, confidence, Fraction(noise.sensitivity, noise.granularity)))
    else:
        found = ZCDP(round_significant(_smallest_rho(t, noise, target, confidence), DIGITS, up=True))
    if not _meets(noise, found, target, confidence):
        raise InternalError(f"{t.key}: the budget found for ±{target} does not meet it")
    return found


def _meets(noise: DiscreteLaplace | DiscreteGaussian, budget: Budget, target: int, confidence: Fraction) -> bool:
    try:
        return noise_at(noise, budget).margin(confidence) <= target
    except ValueError:  # no noise the sampler takes at this budget
        return False


def _smallest_rho(t: TablePlan, noise: DiscreteLaplace | DiscreteGaussian, target: int,
                  confidence: Fraction) -> Fraction:
    lo, hi = Fraction(0), t.budget.amount
    for _ in range(200):
        if _meets(noise, ZCDP(hi), target, confidence):
            break
        lo, hi = hi, hi * 2
    else:
        raise UserError(f"--target-moe: {t.key} cannot reach a margin of ±{target} at any ρ the exact sampler takes")
    for _ in range(60):
        mid = round_significant((lo + hi) / 2, 30, up=True)
        lo, hi = (lo, mid) if _meets(noise, ZCDP(mid), target, confidence) else (mid, hi)
    return hi


def _refuse_overrun(plan: Plan, kept: list[TablePlan], needs: Mapping[str, Budget], left: Fraction,
                    free: list[TablePlan]) -> None:
    """OverBudgetError (exit 3) when the kept tables and the targets leave nothing for the rest,
    with the figures exactly: requested, available and the difference."""
    both, symbol = exact_and_decimal, plan.symbol
    release = both(plan.release_budget.amount)
    kept_total = sum((t.budget.amount for t in kept), Fraction(0))
    if left <= 0:
        raise OverBudgetError(f"the kept tables ({', '.join(t.key for t in kept)}) spend {symbol} = {both(kept_total)} "
                              f"of the release budget {symbol} = {release}: nothing is left to split")
    wanted = sum((b.amount for b in needs.values()), Fraction(0))
    if wanted > left or (wanted == left and free):
        over = wanted - left
        each = ", ".join(f"{k}: {both(b.amount)}" for k, b in needs.items())
        raise OverBudgetError(
            f"the targets alone need {symbol} = {both(wanted)} ({each}), but the release budget {symbol} = {release} "
            f"leaves {both(left)}" + (f" after the kept tables ({both(kept_total)})" if kept else "")
            + (f": over by {both(over)}" if over else f", nothing for {', '.join(t.key for t in free)}")
            + "; relax a target, or raise the release budget")


def _share(t: TablePlan, role: Role, budget: Budget, why: str, weight: Fraction, coefficient: Fraction | None,
           confidence: Fraction) -> Share:
    if role == "kept":
        moe_spec = moe = _spec_margin(t, confidence)
    else:
        noise = _one_noise(t)
        moe_spec = noise.margin(confidence)
        try:
            moe = noise_at(noise, budget).margin(confidence)
        except ValueError:
            raise UserError(f"{t.key}: the proposed {amount_text(budget)} is too small for the exact sampler; "
                            "give it a weight or a target") from None
    return Share(t.key, t.name, t.level, role, t.budget, budget, why, weight, t.measured_cells, coefficient,
                 moe_spec, moe)


def _spec_margin(t: TablePlan, confidence: Fraction) -> int | None:
    """A kept measurement's margin at ``confidence`` in its own units, as ``plan --tradeoff`` shows it
    at its spec's budget (:func:`~dprelease.plan.tradeoff.table_curve`: a mean's at a cell of
    ``MEAN_AT`` rows, a mode's count gap, a quantile's rank error)."""
    chosen = table_curve(t, confidence, (Fraction(1),)).chosen
    return None if chosen is None else chosen.moe


def _error(split: list[TablePlan], budgets: Mapping[str, Budget], weights: Mapping[str, Fraction]) -> float:
    """Σ wᵢcᵢ·Varᵢ over the split measurements at ``budgets`` (float: for comparison and display)."""
    total = 0.0
    for t in split:
        noise = noise_at(_one_noise(t), budgets[t.key])
        total += float(weights.get(t.name, Fraction(1))) * t.measured_cells * noise.variance()
    return total
