"""Margins of error in each measure's own units, at a stated confidence: the one place they are made.

Every figure a reviewer sees — ``plan`` (text and ``--json``), ``plan --target-moe`` and
``--tradeoff``, the manifest, the markdown and HTML reports, ``read_release`` and ``evaluate`` —
comes from :func:`margin_of` (or, from a manifest, :func:`Margin.from_record`), at the spec's
``confidence`` c (α = 1 − c). A function of the plan alone: no data is read; a mean's margin at a
published cell's noisy count is post-processing of published figures.

* **Counts and sums** (``kind`` ``"cell"``): the smallest m with P(|noise| > m) ≤ α
  for one cell's noise, from its exact distribution (discrete Laplace, closed form; discrete
  Gaussian, its pmf), in persons or in the summed column's units (granularity × the noise's
  margin in grid units). Exact (rounded only upwards).
* **Means** (``"mean"``): the published mean is c₀ + (S + Z_S)/(n + Z_N), with S = n·d the cell's
  sum of value − c₀ (c₀ the bounds' midpoint, |d| ≤ h = max(|L − c₀|, |U − c₀|)) and n its row
  count. Its error is exactly (Z_S − d·Z_N)/(n + Z_N), so |error| ≤ (|Z_S| + h·|Z_N|)/(n − |Z_N|).
  With X the (1 − 9α/10)-quantile of |Z_S| + h·|Z_N| (computed from the parts' exact noise
  distributions, :func:`joint_quantile`) and B the count's noise margin at 1 − α/10, both hold
  with probability ≥ c, so |error| ≤ X/(n − B) for n > B — a *conservative bound*, not an
  approximation: it holds for every mean inside the bounds (the worst case d = ±h, and the
  triangle inequality), and clamping the published mean to [L, U] can only shrink the error (it
  is also never more than 2h ≥ U − L). It depends on n, which the plan does not know: it is
  shown for a few counts (:data:`SHOWN_COUNTS`) and, per published cell, at the cell's
  published noisy count (a plug-in for n). "The mean" is that of the values as clamped to the
  bounds and rounded to the granularity.
* **Modes and quantiles** (``"mode"`` / ``"quantile"``, permute-and-flip over k candidates at
  temperature T): permute-and-flip flips, for each candidate r it visits, a coin that is heads
  with probability exp(−gap_r/T) (gap_r = u* − u(r) ≥ 0) and returns the first heads; so
  P(output = r) ≤ exp(−gap_r/T), and summing over the at most k − 1 candidates with gap > t,
  P(gap > t) ≤ (k − 1)·exp(−(t + 1)/T) for integer utilities (:func:`choice_gap`: the smallest
  such t ≤ α; the standard exponential-mechanism bound k·exp(−εt/(2Δu)), slightly sharpened).
  A mode's utility is a category's count: with probability ≥ c the published category's count
  is within t rows of the true mode's. A q = a/b quantile's utility is −|b·#below − a·n|: with
  probability ≥ c the published category's rank (#rows below it) is within t/b rows of q·n
  beyond the best category's own distance — a rank error in rows, or for n rows a quantile
  level within ±t/(b·n) of q. Conservative (a union bound).

Each :class:`Margin` states itself in words (:meth:`Margin.text`) and as a manifest record
(:meth:`Margin.record`); readers of a manifest rebuild it with :meth:`Margin.from_record`.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dprelease.accounting import Budget
from dprelease.errors import UserError
from dprelease.mechanisms.discrete_laplace import epsilon_for_margin
from dprelease.plan.measurements import DiscreteGaussian, DiscreteLaplace, Mean, PermuteAndFlip, TablePlan
from dprelease.spec import MeanMeasure, ModeMeasure, Spec, SumMeasure

if TYPE_CHECKING:
    from dprelease.plan.planner import Plan

SHOWN_COUNTS = (100, 1_000, 10_000)  # the cell counts n at which a mean's margin is shown

_PREC = 60
_SLACK = Decimal(10) ** -45  # as in mechanisms.discrete_laplace: only ever makes a margin larger


def choice_gap(noise: PermuteAndFlip, confidence: Fraction) -> int | None:
    """The smallest integer t ≥ 0 with (k − 1)·exp(−(t + 1)/T) ≤ 1 − ``confidence``: with
    probability ≥ ``confidence`` the utility of permute-and-flip's choice is within t of the best
    (module docstring), in utility units. None when the candidates are not stated (k = 0).
    Evaluated in 60-digit decimals, rounded up (never understated)."""
    k = noise.candidates
    if k == 0:
        return None
    if k == 1:
        return 0
    alpha = 1 - confidence
    temperature = noise.temperature
    with decimal.localcontext() as ctx:
        ctx.prec = _PREC
        ctx.rounding = decimal.ROUND_CEILING
        log = (Decimal(k - 1) * alpha.denominator / alpha.numerator).ln() + _SLACK
        bound = log * Decimal(temperature.numerator) / Decimal(temperature.denominator) + _SLACK  # ≥ t + 1
        t_plus_1 = int(bound.to_integral_value(rounding=decimal.ROUND_CEILING))
    return max(0, t_plus_1 - 1)


def choice_margin(noise: PermuteAndFlip, confidence: Fraction) -> int | None:
    """A mode's count gap in rows (its utility gap, :func:`choice_gap`) or a q = a/b quantile's
    rank error in rows (the utility gap over b, rounded up), at ``confidence``."""
    gap = choice_gap(noise, confidence)
    if gap is None or noise.q is None:
        return gap
    return math.ceil(Fraction(gap, noise.q.denominator))


COUNT_SHARE = Fraction(1, 10)  # of α, for the count's margin B in a mean's denominator


def mean_margin(sum_noise: DiscreteLaplace | DiscreteGaussian, count_noise: DiscreteLaplace | DiscreteGaussian,
                half_width: int, confidence: Fraction) -> Margin:
    """A mean's margin at ``confidence`` (module docstring) from its parts' noise: X the
    (1 − 9α/10)-quantile of |Z_S| + h·|Z_N| in value units, B the count's noise margin at 1 − α/10."""
    alpha = 1 - confidence
    numerator = joint_quantile(sum_noise, count_noise, half_width, alpha * (1 - COUNT_SHARE))
    return Margin("mean", confidence, None, numerator, count_noise.margin(1 - alpha * COUNT_SHARE), half_width,
                  2 * half_width)


def joint_quantile(sum_noise: DiscreteLaplace | DiscreteGaussian, count_noise: DiscreteLaplace | DiscreteGaussian,
                   half_width: int, alpha: Fraction) -> int:
    """The smallest whole x (value units) with P(|Z_S| + h·|Z_N| > x) ≤ ``alpha``: Z_S the sum
    part's noise (multiples of its granularity g), Z_N the count part's, independent, each from
    its exact pmf (:func:`abs_pmf`). P(W > x) = Σ_j P(|Z_N| = j)·P(|Z_S| > (x − h·j)/g), summed in
    float64; the pmfs' cut-off tails (below 10⁻²⁰ each) are added to it and the target lowered by
    10⁻⁹ of itself, so rounding can only make x larger."""
    g = sum_noise.granularity
    tail_s = _tail(abs_pmf(sum_noise))  # tail_s[k] = P(|Z_S| > k), k in units of g
    p_n = abs_pmf(count_noise)
    target = float(alpha) * (1 - 1e-9)

    def tail(x: int) -> float:
        k = (x - half_width * np.arange(p_n.size)) // g  # |Z_S| > k (grid units) makes W > x
        inside = np.where(k < 0, 1.0, tail_s[np.clip(k, 0, tail_s.size - 1)])
        return float(np.dot(p_n, inside)) + 2e-20

    lo, hi = -1, max(g, half_width, 1)
    while tail(hi) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if tail(mid) <= target else (mid, hi)
    return hi


def abs_pmf(noise: DiscreteLaplace | DiscreteGaussian) -> np.ndarray:
    """P(|Z| = j) for j = 0, 1, … (in units of the granularity) of one cell's noise, cut where
    what is left is below 10⁻²⁰ (float64, for margins only: never for sampling)."""
    if isinstance(noise, DiscreteGaussian):
        s2 = float(noise.sigma2)
        j = np.arange(0, int(10 * math.sqrt(s2)) + 12, dtype=np.float64)
        weights = np.exp(-j * j / (2 * s2))
        weights[1:] *= 2
        return np.asarray(weights / weights.sum())
    scale = float(noise.noise_scale)
    p = math.exp(-1 / scale)
    j = np.arange(0, int(46.1 * scale) + 2, dtype=np.float64)  # p^J < 10⁻²⁰
    pmf = (1 - p) / (1 + p) * np.power(p, j)
    pmf[1:] *= 2
    return np.asarray(pmf)


def _tail(pmf: np.ndarray) -> np.ndarray:
    """tail[k] = P(|Z| > k) from the pmf of |Z|, summed from the far end; plus the cut-off 10⁻²⁰."""
    return np.asarray(np.r_[np.cumsum(pmf[::-1])[::-1][1:], 0.0] + 1e-20)


def mean_bound_at(numerator: int, count_margin: int, width: int, n: float) -> float | None:
    """The conservative bound X/(n − B) on a mean's error over n rows, never more than ``width``
    = 2h (the clamped mean and the true one are both within the bounds); None when n ≤ B (the
    noisy count may be near 0: no useful bound)."""
    if n <= count_margin:
        return None
    return min(float(width), numerator / (n - count_margin))


@dataclass(frozen=True, slots=True)
class Margin:
    """One measurement's margin of error at ``confidence``, in its measure's own units.

    ``value``: counts and sums, the ± per cell (persons, or the summed column's units); a mode,
    the count gap in rows; a quantile, the rank error in rows (t/b, rounded up); a mean, None
    (see :meth:`at_count`). A mean's ``numerator`` X (value units) and ``count_margin`` B are those
    of the bound X/(n − B), ``half_width`` h its bounds' (module docstring) and ``width`` = 2h ≥
    U − L, a cap no clamped mean's error exceeds."""

    kind: str  # cell (a count or a sum), mean, mode, quantile
    confidence: Fraction
    value: int | None
    numerator: int = 0
    count_margin: int = 0
    half_width: int = 0
    width: int = 0
    candidates: int = 0

    def at_count(self, n: float) -> float | None:
        """A mean's margin (value units) for a cell of ``n`` rows; None if it has no useful
        bound there (n ≤ B) or this is not a mean."""
        if self.kind != "mean":
            return None
        return mean_bound_at(self.numerator, self.count_margin, self.width, n)

    def short(self) -> str:
        """The figure for a table column: ``17`` (a cell's), ``gap ≤ 9``, ``rank ±12``, ``±2,990 at n=1,000``."""
        match self.kind:
            case "mean":
                n = SHOWN_COUNTS[1]
                at = self.at_count(n)
                return "—" if at is None else f"±{at:,.0f} at n={n:,}"
            case "mode":
                return "—" if self.value is None else f"gap ≤ {self.value:,}"
            case "quantile":
                return "—" if self.value is None else f"rank ±{self.value:,}"
        return "—" if self.value is None else str(self.value)  # a cell's: under a "± MoE" heading

    def text(self, unit: str = "") -> str:
        """The margin in words, for reports and ``plan``: what is bounded, in which unit, and
        how (``unit``: the column's unit words, e.g. "persons" or "PINCP")."""
        c = f"{float(self.confidence):.0%}"
        match self.kind:
            case "mean":
                at = "; ".join(f"n = {n:,}: ±{m:,.0f}" if m is not None else f"n = {n:,}: —"
                               for n in SHOWN_COUNTS for m in [self.at_count(n)])
                return (f"± in {unit or 'value units'} at {c}, by the cell's number of rows n: {at} "
                        f"(conservative bound X/(n − B): X = {self.numerator:,}, the "
                        f"{float(1 - (1 - self.confidence) * (1 - COUNT_SHARE)):.1%} quantile of |sum noise| + "
                        f"{self.half_width:,}·|count noise|, B = {self.count_margin:,} the count's noise margin at "
                        f"{float(1 - (1 - self.confidence) * COUNT_SHARE):.1%}; — where n ≤ B)")
            case "mode":
                return ("—" if self.value is None else
                        f"with probability ≥ {c} the published category's count is within {self.value:,} rows of the "
                        f"true mode's (exponential-mechanism bound over {self.candidates} categories; conservative)")
            case "quantile":
                return ("—" if self.value is None else
                        f"with probability ≥ {c} the published category's rank (rows below it) is within "
                        f"{self.value:,} rows of q·n, beyond the best category's own distance; for n rows, a quantile "
                        f"level within ±{self.value:,}/n of q (exponential-mechanism bound over {self.candidates} "
                        "categories; conservative)")
        return f"±{self.value:,} {unit or 'value units'} per cell at {c} (from the exact noise distribution)"

    def record(self, unit: str = "") -> dict[str, Any]:
        """The manifest's ``margin`` record (also ``plan --json``'s), its ``text`` in ``unit``."""
        out: dict[str, Any] = {"kind": self.kind, "confidence": f"{self.confidence.numerator}/{self.confidence.denominator}",
                               "value": self.value}
        if self.kind == "mean":
            out.update(numerator=self.numerator, count_margin=self.count_margin, half_width=self.half_width,
                       width=self.width, at_count={str(n): self.at_count(n) for n in SHOWN_COUNTS})
        if self.kind in ("mode", "quantile"):
            out["candidates"] = self.candidates
        out["unit"] = unit or "value units"
        out["text"] = self.text(unit)
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Margin:
        return cls(record["kind"], Fraction(record["confidence"]), record["value"],
                   record.get("numerator", 0), record.get("count_margin", 0), record.get("half_width", 0),
                   record.get("width", 0), record.get("candidates", 0))


def unit_words(measure: SumMeasure | MeanMeasure | ModeMeasure | None) -> str:
    """What a measure's margin is counted in: persons (rows) for counts, modes and quantiles, the
    summed column's own units for sums and means."""
    if isinstance(measure, (SumMeasure, MeanMeasure)):
        return f"{measure.column} units"
    return "persons"


def table_units(spec: Spec) -> dict[str, str]:
    """Per table of ``spec``, the words its margin is counted in (:func:`unit_words`)."""
    return {t.name: unit_words(t.measure) for t in spec.tables}


def margin_of(t: TablePlan, confidence: Fraction) -> Margin:
    """The margin of measurement ``t`` at ``confidence``, in its measure's units (module docstring)."""
    noise = t.noise
    if isinstance(noise, Mean):
        return mean_margin(noise.sum.noise, noise.count.noise, noise.half_width, confidence)
    if isinstance(noise, PermuteAndFlip):
        return Margin("mode" if noise.q is None else "quantile", confidence, choice_margin(noise, confidence),
                      candidates=noise.candidates)
    return Margin("cell", confidence, noise.margin(confidence))


def epsilon_for_target(plan: Plan, confidence: Fraction, target_moe: int) -> list[tuple[str, Fraction | None]]:
    """Per measurement of ``plan``, the ε (rounded up) whose margin at ``confidence`` is ≤
    ``target_moe`` (in the measurement's own units: persons, or a sum's column's units), with
    that measurement's own sensitivity and granularity (sums, bounded relations, contribution
    bounds). None for a measurement whose margin is not a cell's noise margin (a mean's depends on
    its cells' counts, a mode's and a quantile's are a gap and a rank error: :func:`margin_of`
    states each). Raises UserError for a count or sum measured with the discrete Gaussian, or in a
    zcdp release (budgets in ρ)."""
    out: list[tuple[str, Fraction | None]] = []
    for t in plan.tables:
        if isinstance(t.noise, (Mean, PermuteAndFlip)):
            out.append((t.key, None))
            continue
        if not isinstance(t.noise, DiscreteLaplace) or t.pure_epsilon is not None:  # a truncated geometric is one
            raise UserError(f"--target-moe gives the ε of discrete Laplace counts and sums; {t.key} uses the "
                            f"{t.mechanism}{' in a zcdp release' if t.pure_epsilon is not None else ''}: set its "
                            "budget from `plan --tradeoff` instead")
        units = max(target_moe // t.granularity, 0)  # a margin in value units, on the granularity's grid
        out.append((t.key, epsilon_for_margin(units, confidence, Fraction(t.sensitivity, t.granularity))))
    return out


def untargeted_note(t: TablePlan, confidence: Fraction, unit: str = "") -> str:
    """Why ``plan --target-moe`` gives no ε for ``t`` (a mean, a mode, a quantile), with its margin now."""
    return f"no ε for a ±N cell margin: its margin is not a cell's noise; now {margin_of(t, confidence).text(unit)}"


def published_choice(entry: dict[str, Any], budget: Budget) -> PermuteAndFlip:
    """The permute-and-flip a manifest's mode or quantile entry states (its ``sensitivity`` Δu,
    ``scale`` the temperature, ``monotone``, ``mechanism_epsilon`` in a zcdp release, its
    ``margin`` record's ``candidates`` and its measure's ``q``), for readers of a published release
    (the reports' trade-off). ValueError (or KeyError) where its figures do not come back:
    the temperature is not Δu/ε (or 2Δu/ε) at the stated ε."""
    du, monotone = int(entry["sensitivity"]), bool(entry["monotone"])
    epsilon = Fraction(entry["mechanism_epsilon"]) if "mechanism_epsilon" in entry else budget.amount
    q = entry["measure"].get("q")
    made = PermuteAndFlip(du, epsilon, monotone, candidates=int(entry["margin"]["candidates"]),
                          q=None if q is None else Fraction(q))
    if made.temperature != Fraction(entry["scale"]):
        raise ValueError("a mode whose temperature is not its sensitivity over its ε")
    return made
