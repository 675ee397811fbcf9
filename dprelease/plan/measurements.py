"""One type per noise mechanism: its parameters computed once, its margin of error, its draw.

The planner builds one of these per measurement (:class:`TablePlan`, the plan of one
measurement, holds it as ``noise``); everything downstream reads it instead of recomputing: the sampler's
parameters (checked against the exact sampler here, when the plan is made, so a run never
fails on them after reserving), the margin of error, the noise variance consistency weights
by, and what the manifest shows. Only :mod:`dprelease.lifecycle.measure` calls ``draw``. A mean is a
:class:`Mean`: its sum and its count, each a measurement of its own (:class:`MeanPart`).

Units: a sum's values are multiples of its ``granularity`` g, and noise is drawn in those units
(a count's g is 1). ``scale`` and ``sensitivity`` keep the meaning each mechanism's manifest
entry has always had (``shown_*`` are in value units); ``noise_scale`` is what the sampler
gets.

The sensitivity formulas are in :mod:`dprelease.plan.sensitivities`; the local tables'
randomizers in :mod:`dprelease.plan.randomizers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from dprelease.mechanisms.sampling import Entropy

from dprelease.accounting import ApproxDP, Budget, add, delta_of
from dprelease.errors import InternalError
from dprelease.mechanisms import (
    check_scale,
    discrete_gaussian,
    discrete_laplace,
    margin_of_error,
    permute_and_flip,
    truncated_geometric,
)
from dprelease.mechanisms.discrete_laplace import variance as laplace_variance
from dprelease.mechanisms.gaussian import gaussian_margin, gaussian_parts

# ---------------------------------------------------------------- mechanisms


@dataclass(frozen=True, slots=True)
class DiscreteLaplace:
    """Discrete Laplace (two-sided geometric) noise of scale Δ/ε on every cell: ε-DP for a
    histogram of L1 sensitivity Δ (``sensitivity``, value units) under the release's relation.
    Raises ValueError when the exact sampler cannot take the scale."""

    sensitivity: int  # L1, in value units
    epsilon: Fraction  # the ε it runs at
    granularity: int = 1
    kind: ClassVar[str] = "discrete_laplace"

    def __post_init__(self) -> None:
        check_scale(self.noise_scale)

    @property
    def noise_scale(self) -> Fraction:
        """The sampler's scale, in units of the granularity: (Δ/g)/ε."""
        return Fraction(self.sensitivity, self.granularity) / self.epsilon

    @property
    def scale(self) -> Fraction:
        """Δ/ε in value units."""
        return Fraction(self.sensitivity) / self.epsilon

    @property
    def shown_scale(self) -> Fraction:
        return self.scale

    @property
    def shown_sensitivity(self) -> int:
        return self.sensitivity

    def margin(self, confidence: Fraction) -> int:
        """The ± margin of one cell's noise at ``confidence``, in value units (exact)."""
        return self.granularity * margin_of_error(self.noise_scale, confidence)

    def variance(self) -> float:
        """One cell's noise variance, in value units squared (for inverse-variance weights)."""
        return self.granularity ** 2 * laplace_variance(self.noise_scale)

    def draw(self, units: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        """``units`` (int64, in units of the granularity) plus noise, in value units."""
        noisy: np.ndarray = (units + discrete_laplace(self.noise_scale, units.size, rng=rng)) * self.granularity
        return noisy


@dataclass(frozen=True, slots=True)
class TruncatedGeometric(DiscreteLaplace):
    """The truncated geometric (Ghosh, Roughgarden and Sundararajan 2009) on counts with a
    public bound: each count clamped to [0, ``upper``], discrete Laplace noise of scale Δ/ε, the
    result clamped again. ε-DP (clamping before is a stable transformation, after is
    post-processing); its error is never larger than the noise, so the discrete Laplace margin
    bounds it."""

    upper: int = 0
    kind: ClassVar[str] = "truncated_geometric"

    def __post_init__(self) -> None:
        if self.granularity != 1:  # its bound is a count's: the spec refuses it for sums
            raise ValueError("the truncated geometric is for counts (granularity 1)")
        check_scale(self.noise_scale)

    def draw(self, units: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        return truncated_geometric(units, self.upper, self.noise_scale, rng=rng)


@dataclass(frozen=True, slots=True)
class DiscreteGaussian:
    """The discrete Gaussian of variance parameter σ² on every cell (Canonne, Kamath and
    Steinke 2020): Δ₂²/(2σ²)-zCDP for a histogram of squared L2 sensitivity Δ₂²
    (``l2_squared``), both in units of the granularity."""

    l2_squared: int
    sigma2: Fraction
    granularity: int = 1
    kind: ClassVar[str] = "discrete_gaussian"

    def __post_init__(self) -> None:
        gaussian_parts(self.sigma2)  # the exact sampler takes σ² (ValueError otherwise)

    @property
    def noise_scale(self) -> Fraction:
        return self.sigma2

    @property
    def scale(self) -> Fraction:
        """σ², in units of the granularity."""
        return self.sigma2

    @property
    def sensitivity(self) -> int:
        """Δ₂², in units of the granularity."""
        return self.l2_squared

    @property
    def shown_scale(self) -> Fraction:
        """σ² in value units: σ²·g²."""
        return self.sigma2 * self.granularity ** 2

    @property
    def shown_sensitivity(self) -> int:
        """Δ₂² in value units: Δ₂²·g²."""
        return self.l2_squared * self.granularity ** 2

    def margin(self, confidence: Fraction) -> int:
        return self.granularity * gaussian_margin(self.sigma2, confidence)

    def variance(self) -> float:
        """σ²·g², which bounds the discrete Gaussian's variance from above."""
        return float(self.shown_scale)

    def draw(self, units: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        noisy: np.ndarray = (units + discrete_gaussian(self.sigma2, units.size, rng=rng)) * self.granularity
        return noisy


@dataclass(frozen=True, slots=True)
class PermuteAndFlip:
    """The exponential mechanism by permute-and-flip (McKenna and Sheldon 2020) over a cell's
    candidates: a candidate u below the best is accepted with probability
    exp(−(u* − u)/temperature), temperature Δu/ε when the utility is ``monotone`` (every
    utility moves the same way between neighbours: a mode's counts under add/remove) and 2Δu/ε
    otherwise. ε-DP per cell; a person's rows spread over cells add up to ε. It outputs a
    category, not a count: no noise margin (:meth:`margin` is 0); its accuracy is the utility
    gap of :func:`dprelease.plan.margins.choice_gap` over its ``candidates`` (the size of the
    declared domain it chooses from; 0: not stated), a mode's (``q`` None) or a quantile's."""

    utility_sensitivity: int
    epsilon: Fraction  # the ε it runs at
    monotone: bool
    candidates: int = 0  # how many categories it chooses from (the declared domain's size)
    q: Fraction | None = None  # a quantile's q = a/b (its utility is in units of 1/b row); None for a mode
    kind: ClassVar[str] = "permute_and_flip"
    granularity: ClassVar[int] = 1

    def __post_init__(self) -> None:
        check_scale(self.temperature)

    @property
    def temperature(self) -> Fraction:
        return Fraction(self.utility_sensitivity * (1 if self.monotone else 2)) / self.epsilon

    @property
    def noise_scale(self) -> Fraction:
        return self.temperature

    @property
    def scale(self) -> Fraction:
        return self.temperature

    @property
    def sensitivity(self) -> int:
        return self.utility_sensitivity

    shown_scale = scale
    shown_sensitivity = sensitivity

    def margin(self, confidence: Fraction) -> int:
        return 0

    def draw(self, utilities: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        """Per row of ``utilities`` (cells × candidates), the index of the chosen candidate."""
        return permute_and_flip(utilities, self.epsilon, self.utility_sensitivity, monotone=self.monotone, rng=rng)


# ---------------------------------------------------------------- a mean: two measurements of the same rows


@dataclass(frozen=True, slots=True)
class MeanPart:
    """One of a mean's two measurements (its sum or its count): the noise drawn on it, the share
    of the mean's budget it spends (of the spec's kind), what the ledger is charged for it (of
    the terms' kind) and its margins, in value units, at the plan's confidence and at 95%."""

    noise: DiscreteLaplace | DiscreteGaussian
    budget: Budget
    charge: Budget
    moe: int
    moe95: int
    pure_epsilon: Fraction | None = None  # a pure mechanism in a zcdp release: the ε it runs at

    @property
    def mechanism(self) -> str:
        return self.noise.kind

    @property
    def delta(self) -> Fraction | None:
        """On an (ε, δ) ledger, the δ this part is charged (0 for a pure mechanism)."""
        return delta_of(self.charge)

    @property
    def shown_sensitivity(self) -> int:
        return self.noise.shown_sensitivity

    @property
    def shown_scale(self) -> Fraction:
        return self.noise.shown_scale


@dataclass(frozen=True, slots=True)
class Mean:
    """A mean per cell, measured as two histograms over exactly the same rows: the sum of the
    values and their count, each with noise of its own (discrete Laplace or discrete Gaussian,
    the table's mechanism) at its share of the table's budget (``sum_share`` to the sum).

    Assumes (the planner and the data layer, from the spec, never from the data): every value is
    clamped to the declared bounds [L, U], put on the granularity's grid and centred on the
    bounds' midpoint c before summing (:meth:`dprelease.spec.MeanMeasure.centred_sum`); a row is
    in both parts or in neither. Sensitivities, under the release's neighbouring relation: the
    sum part's are those of a sum of values in [L − c, U − c] (:func:`~dprelease.plan.sensitivities.sum_l1`,
    :func:`~dprelease.plan.sensitivities.sum_l2_squared`: max(|L − c|, |U − c|) per row under add/remove, times the
    contribution bound K), the count part's a count histogram's (:attr:`Neighbouring.count_l1`,
    :attr:`Neighbouring.count_l2_squared`: K and K² under add/remove). Each part's noise was
    planned for its sensitivity at that part's budget.

    Guarantees: the sum part is DP at :attr:`sum`'s budget and the count part at :attr:`count`'s
    (as each mechanism states), so the pair is DP at their sequential composition,
    :attr:`budget` (ε, ρ, or ε and δ add up); the ledger is charged :attr:`charge`, the parts'
    charges composed. A mean computed from the pair (c + sum/count, clamped, empty where the
    noisy count is below 1) is post-processing. Parts whose budgets (or charges) are of
    different kinds are refused (TypeError): they do not compose. ``half_width`` is
    max(|L − c|, |U − c|) in value units (what a cell's mean can differ from c; 0: not stated),
    which bounds its margin of error (:func:`dprelease.plan.margins.mean_bound`)."""

    sum: MeanPart
    count: MeanPart
    half_width: int = 0  # max(|L − c|, |U − c|), value units
    kind: ClassVar[str] = "mean"

    def __post_init__(self) -> None:
        add(self.sum.budget, self.count.budget)  # TypeError for parts of different kinds
        add(self.sum.charge, self.count.charge)
        if self.count.noise.granularity != 1:
            raise ValueError("a mean's count part counts rows (granularity 1)")

    @property
    def parts(self) -> tuple[MeanPart, MeanPart]:
        """(sum, count): the order of the stacked histograms :meth:`draw` takes."""
        return self.sum, self.count

    @property
    def budget(self) -> Budget:
        """The parts' budgets composed (sequential composition: the same rows are measured twice)."""
        return add(self.sum.budget, self.count.budget)

    @property
    def charge(self) -> Budget:
        """What the ledger is charged: the parts' charges composed, of the ledger terms' kind."""
        return add(self.sum.charge, self.count.charge)

    def variances(self) -> tuple[float, float]:
        """One cell's noise variance of each part, (sum, count), in value units squared."""
        return self.sum.noise.variance(), self.count.noise.variance()

    def draw(self, units: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        """``units`` stacked as (centred sums in units of the granularity, row counts), int64 of
        shape (2, cells); returns both noisy, stacked the same way, the sum in value units: the
        sum part's noise drawn first, then the count part's."""
        if units.ndim != 2 or units.shape[0] != 2:
            raise ValueError(f"a mean draws on (sum, count) histograms stacked as (2, cells), not {units.shape}")
        return np.stack([self.sum.noise.draw(np.ascontiguousarray(units[0]), rng=rng),
                         self.count.noise.draw(np.ascontiguousarray(units[1]), rng=rng)])


Noise = DiscreteLaplace | TruncatedGeometric | DiscreteGaussian | PermuteAndFlip | Mean
OneNoise = DiscreteLaplace | DiscreteGaussian | PermuteAndFlip  # the noise of one histogram (not a mean)


# ---------------------------------------------------------------- one measurement's plan


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One measurement: a table (at one level of its geography), its budget, and its noise
    mechanism with every parameter (:mod:`dprelease.plan.measurements`); a mean's noise is a
    :class:`Mean`, which holds its two parts."""

    name: str
    budget: Budget  # the table's budget at this level, of the spec's kind (ε, ρ, or (ε, δ)); a mean's: its parts'
    noise: Noise  # the mechanism and its parameters, computed once
    cells: int
    moe: int  # at the plan's confidence, in value units: the margin its row shows (see shown_noise)
    moe95: int
    level: str | None = None  # the geographic level of this measurement (None: a plain table)
    charge: Budget | None = None  # what the ledger is charged, of its terms' kind (ρ on a zCDP ledger)
    pure_epsilon: Fraction | None = None  # a pure mechanism in a zcdp release: the ε it runs at
    structural: tuple[int, ...] = ()  # structural cells (indices into the full cross product): not measured, exact 0
    structural_summary: tuple[str, ...] = ()  # the structural cells in words ("AGE_GROUP = 0-17")
    structural_labels: tuple[tuple[str, ...], ...] = ()  # each structural cell as its published categories

    def __post_init__(self) -> None:
        if isinstance(self.noise, Mean) and (self.budget != self.noise.budget or self.charge != self.noise.charge):
            raise InternalError(f"{self.key}: a mean planned with a budget or charge other than its parts'")

    @property
    def parts(self) -> tuple[MeanPart, ...]:
        """A mean's (sum, count) parts (:class:`Mean`); () for every other measurement."""
        return self.noise.parts if isinstance(self.noise, Mean) else ()

    @property
    def shown_noise(self) -> OneNoise:
        """The noise this measurement's one-row summary names (its mechanism, sensitivity and
        scale in the manifest's and the plan's table row, the measurements file's metadata; its
        ``moe``): its own. A mean's row names its sum part's (its mechanism and scale; its ``moe`` only in the plan);
        its parts, listed with it, name each their own."""
        return self.noise.sum.noise if isinstance(self.noise, Mean) else self.noise

    def _one_noise(self) -> OneNoise:
        """The noise of a measurement of one histogram; a mean has two (its parts'): a bug to ask."""
        if isinstance(self.noise, Mean):
            raise InternalError(f"{self.key} is a mean: its sum and count parts each have their own noise")
        return self.noise

    @property
    def mechanism(self) -> str:
        """The mechanism its row names (:attr:`shown_noise`)."""
        return self.shown_noise.kind

    @property
    def ledger_charge(self) -> Budget:
        """What the ledger is charged; every plan sets it, so a missing one is a bug, never 0."""
        if self.charge is None:
            raise InternalError(f"{self.key} was planned without its charge")
        return self.charge

    @property
    def delta(self) -> Fraction | None:
        """On an (ε, δ) ledger, the δ this measurement is charged (0 for a pure mechanism)."""
        return self.charge.delta if isinstance(self.charge, ApproxDP) else None

    @property
    def sensitivity(self) -> int:
        """L1 (Δ₂² for the discrete Gaussian, in units of the granularity; Δu for permute-and-flip)."""
        return self._one_noise().sensitivity

    @property
    def scale(self) -> Fraction:
        """Δ/ε in value units (σ² in units of the granularity; the temperature for permute-and-flip)."""
        return self._one_noise().scale

    @property
    def granularity(self) -> int:
        return self._one_noise().granularity

    @property
    def upper(self) -> int | None:
        """The truncated geometric's public bound (None for the other mechanisms)."""
        return self.noise.upper if isinstance(self.noise, TruncatedGeometric) else None

    @property
    def measured_cells(self) -> int:
        """Cells that get noise: all ``cells`` but the structural ones."""
        return self.cells - len(self.structural)

    def structural_mask(self) -> Any:
        """The structural cells as a boolean numpy mask over all ``cells`` (None: none)."""
        if not self.structural:
            return None
        import numpy as np

        mask = np.zeros(self.cells, dtype=bool)
        mask[np.asarray(self.structural, dtype=np.int64)] = True
        return mask

    @property
    def mechanism_epsilon(self) -> Fraction:
        """The ε a pure ε-DP mechanism runs at (its ε; in a zcdp release the largest ε whose
        ε²/2 fits the table's ρ)."""
        if not isinstance(self.noise, (DiscreteLaplace, PermuteAndFlip)):
            raise InternalError(f"{self.key}: the {self.mechanism} is not a pure ε-DP mechanism")
        return self.noise.epsilon

    @property
    def shown_sensitivity(self) -> int:
        """The sensitivity in value units, as its row shows it (:attr:`shown_noise`)."""
        return self.shown_noise.shown_sensitivity

    @property
    def shown_scale(self) -> Fraction:
        """The noise scale in value units, as its row shows it (:attr:`shown_noise`)."""
        return self.shown_noise.shown_scale

    @property
    def key(self) -> str:
        """The ledger's name for this measurement: ``table`` or ``table/level``."""
        return self.name if self.level is None else f"{self.name}/{self.level}"


def noise_variances(tables: Iterable[TablePlan]) -> dict[tuple[str, str | None], float]:
    """Per measurement of counts or sums, its noise's variance in value units (what consistent
    post-processing weights by); modes and means (:meth:`Mean.variances`, per part) have none."""
    return {(t.name, t.level): t.noise.variance() for t in tables
            if isinstance(t.noise, (DiscreteLaplace, DiscreteGaussian))}
