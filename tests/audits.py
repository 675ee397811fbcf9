"""Statistical privacy audits of every mechanism: the privacy loss measured on neighbouring
inputs, with each mechanism as calibrated and with deliberately broken variants.

Pure mechanisms: the tight-event estimator ε̂ = ln(P(E | x) / P(E | x′)) over draws of the real
sampler (the OS CSPRNG), for an event E where the loss is attained, so that a correct
mechanism gives ε̂ ≈ ε and a broken one ε̂ > ε. Gaussian noise (zCDP, and approximate DP via
zCDP): the hockey-stick divergence δ̂(ε′) = E_x[max(0, 1 − e^(ε′ − L))], with L the exact
privacy loss of each draw, at an ε′ where the calibrated mechanism's exact δ(ε′) is 0.02
(large enough to measure, and below the ρ-zCDP guarantee); the correct sampler matches it,
a broken variant exceeds it.

A row passes when the calibrated mechanism is within 6 standard errors of its bound (the
loss is attained: too much noise would fail as well as too little) and every broken variant
exceeds the bound by more than 6 standard errors (chance failures ~1e-9 each).

    python -m tests.audits          # the table of docs/reliability.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from dprelease.accounting import approx_to_zcdp
from dprelease.mechanisms import discrete_gaussian, discrete_laplace, permute_and_flip, truncated_geometric
from dprelease.mechanisms.gaussian import sigma2_for
from dprelease.mechanisms.local import coin_flip, randomize

N = 400_000  # draws per input
SIGMAS = 6


def tight(event_x: np.ndarray, event_y: np.ndarray) -> tuple[float, float]:
    """ε̂ = ln(p_x / p_y) and its delta-method standard error; ε̂ = ∞ when the event never
    happened on x′ but did on x (a loss too large to measure with these draws)."""
    p, q = event_x.mean(), event_y.mean()
    if q == 0 and p > 0:
        return math.inf, 0.0
    se = math.sqrt((1 - p) / (p * event_x.size) + (1 - q) / (q * event_y.size))
    return math.log(p / q), se


@dataclass(frozen=True)
class Row:
    mechanism: str
    variant: str
    bound: float  # ε (pure) or the guaranteed δ(ε′) (Gaussian)
    estimate: float
    se: float
    kind: str = "ε"

    @property
    def correct(self) -> bool:
        return self.variant == "as calibrated"

    @property
    def passes(self) -> bool:
        if self.correct:  # tight: the loss (or δ) is attained, not merely bounded; too little noise fails too
            return abs(self.estimate - self.bound) <= SIGMAS * self.se + 1e-3
        return self.estimate > self.bound + SIGMAS * self.se  # caught


# ---------------------------------------------------------------- pure mechanisms

def laplace_counts(variant: str) -> tuple[float, float]:
    """A count under add/remove one row (Δ = 1), ε = 1/2: scale 2. Event {y ≤ x − 1 − … }: x = 0
    against x′ = Δ_true, E = {y ≤ −1}: P(Z ≤ −1) / P(Z ≤ −1 − Δ) = e^(Δ/scale)."""
    scale, true_delta = Fraction(2), 1
    if variant == "halved scale":
        scale /= 2
    if variant == "sensitivity 1 planned, 2 true":  # change one record (invariants) planned as add/remove
        true_delta = 2
    return tight(discrete_laplace(scale, N) <= -1, true_delta + discrete_laplace(scale, N) <= -1)


def laplace_sum(variant: str) -> tuple[float, float]:
    """A sum with bounds [0, 200000] in units of 1000 (Δ = 200 units), ε = 1/2: scale 400 units."""
    delta_units, scale = 200, Fraction(400)
    if variant == "halved scale":
        scale /= 2
    if variant == "sensitivity of one unit":  # the granularity forgotten
        scale = Fraction(2)
    return tight(discrete_laplace(scale, N) <= -1, delta_units + discrete_laplace(scale, N) <= -1)


def truncated(variant: str) -> tuple[float, float]:
    """Counts 0 and 1 clamped to [0, 5], ε = 1/2 (scale 2); event {output = 0}: the loss is
    attained at the boundary (GRS 2009)."""
    scale = Fraction(1) if variant == "halved scale" else Fraction(2)
    other = 2 if variant == "sensitivity 1 planned, 2 true" else 1
    return tight(truncated_geometric(np.zeros(N, np.int64), 5, scale) == 0,
                 truncated_geometric(np.full(N, other, np.int64), 5, scale) == 0)


def mean_pair(variant: str) -> tuple[float, float]:
    """A mean: a centred sum (Δ = 100 units: bounds [0, 200000], granularity 1000, centre
    100000) at ε 1/2 and a count (Δ = 1) at ε 1/2; neighbours add a row at the upper bound.
    Event {noisy sum ≥ 100 and noisy count ≥ 1}: ratio e^(1/2 + 1/2) = e^1."""
    sum_scale, count_scale, shift = Fraction(200), Fraction(2), 100
    if variant == "halved scale":
        sum_scale, count_scale = sum_scale / 2, count_scale / 2
    if variant == "sum not centred":  # raw values: the row moves the sum by 200 units, Δ planned 100
        shift = 200
    def event(rows: int, moved: int) -> np.ndarray:
        return (moved + discrete_laplace(sum_scale, N) >= shift) & (rows + discrete_laplace(count_scale, N) >= 1)
    return tight(event(1, shift), event(0, 0))


def mode(variant: str) -> tuple[float, float]:
    """Permute-and-flip over two categories, a mode under add/remove (monotone, Δu = 1), ε = 1/2:
    counts (0, 0) against (1, 0); event {category 1 chosen}: ratio e^ε exactly."""
    epsilon, rows = Fraction(1, 2), 1
    if variant == "halved scale":
        epsilon *= 2  # the temperature Δu/ε halved
    if variant == "sensitivity 1 planned, 2 true":
        rows = 2
    x = permute_and_flip(np.zeros((N, 2), np.int64), epsilon, 1, monotone=True) == 1
    y = permute_and_flip(np.tile(np.array([[rows, 0]], np.int64), (N, 1)), epsilon, 1, monotone=True) == 1
    return tight(x, y)


def k_rr(variant: str) -> tuple[float, float]:
    """k-RR over 4 categories, ε_local = 1: answers 0 and 1; event {report 0}: ratio e^ε."""
    epsilon = Fraction(1) if variant == "as calibrated" else Fraction(3, 2)  # the broken: the sampler given 1.5 ε
    a = randomize(np.zeros(N, np.int64), 4, epsilon) == 0
    b = randomize(np.ones(N, np.int64), 4, Fraction(1) if variant == "as calibrated" else epsilon) == 0
    return tight(a, b)


def coin(variant: str) -> tuple[float, float]:
    """The coin flip (truth kept with probability 3/4): answers 0 and 1, event {report 0}:
    ratio (3/4)/(1/4) = 3, ε = ln 3. The broken variant (truth kept with probability 4/5) is
    simulated here with numpy: a test-only stand-in, never a release path."""
    if variant == "as calibrated":
        return tight(coin_flip(np.zeros(N, np.int64)) == 0, coin_flip(np.ones(N, np.int64)) == 0)
    rng = np.random.default_rng()
    return tight(rng.random(N) < 0.8, rng.random(N) >= 0.8)


# ---------------------------------------------------------------- Gaussian: hockey-stick δ

def hockey_stick(sigma2: float, shift: int, epsilon: float) -> tuple[float, float]:
    """δ̂(ε′) for x = 0 against x′ = shift under discrete Gaussian noise of variance σ²: the mean
    of max(0, 1 − e^(ε′ − L)) with L(y) = ((y − shift)² − y²)/(2σ²) exact per draw."""
    y = discrete_gaussian(Fraction(sigma2).limit_denominator(10**9), N).astype(np.float64)
    loss = ((y - shift) ** 2 - y ** 2) / (2 * sigma2)
    terms = np.maximum(0.0, 1.0 - np.exp(np.minimum(epsilon - loss, 50.0)))
    return float(terms.mean()), float(terms.std(ddof=1) / math.sqrt(N))


def exact_delta(sigma2: float, shift: int, epsilon: float) -> float:
    """δ(ε) of the discrete Gaussian of variance σ² on x = 0 against x′ = shift, exactly (the
    sum over the integers within 60σ of max(0, P(y) − e^ε P′(y)))."""
    y = np.arange(-int(60 * math.sqrt(sigma2)) - shift, int(60 * math.sqrt(sigma2)) + shift + 1, dtype=np.float64)
    p = np.exp(-y ** 2 / (2 * sigma2))
    p /= p.sum()
    q = np.exp(-(y - shift) ** 2 / (2 * sigma2))
    q /= q.sum()
    return float(np.maximum(0.0, p - math.exp(epsilon) * q).sum())


def probe_epsilon(sigma2: float, target: float = 0.02) -> float:
    """The ε′ at which the calibrated mechanism's exact δ is ``target`` (large enough to measure)."""
    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if exact_delta(sigma2, 1, mid) > target else (lo, mid)
    return hi


def gaussian_check(rho: Fraction, variant: str) -> tuple[float, float, float]:
    """(the calibrated mechanism's exact δ(ε′), δ̂ of the variant, se) at the probe ε′. The
    calibrated δ(ε′) is never above the ρ-zCDP guarantee (checked in tests/test_audits.py)."""
    planned = float(sigma2_for(rho, 1))
    epsilon = probe_epsilon(planned)
    sigma2, shift = planned, 1
    if variant == "halved scale":
        sigma2 /= 2
    if variant == "sensitivity 1 planned, 2 true":
        shift = 2
    estimate, se = hockey_stick(sigma2, shift, epsilon)
    return exact_delta(planned, 1, epsilon), estimate, se


VARIANTS = ("as calibrated", "halved scale", "sensitivity 1 planned, 2 true")
PURE: list[tuple[str, float, Callable[[str], tuple[float, float]], tuple[str, ...]]] = [
    ("discrete Laplace, a count (ε = 1/2)", 0.5, laplace_counts, VARIANTS),
    ("discrete Laplace, a sum in units of its granularity (ε = 1/2)", 0.5, laplace_sum,
     ("as calibrated", "halved scale", "sensitivity of one unit")),
    ("truncated geometric, [0, 5] (ε = 1/2)", 0.5, truncated, VARIANTS),
    ("mean: centred sum + count (ε = 1/2 + 1/2)", 1.0, mean_pair, ("as calibrated", "halved scale", "sum not centred")),
    ("permute-and-flip, a mode (ε = 1/2)", 0.5, mode, VARIANTS),
    ("k-RR, 4 categories (ε_local = 1)", 1.0, k_rr, ("as calibrated", "sampler given ε × 1.5")),
    ("coin flip (ε_local = ln 3)", math.log(3), coin, ("as calibrated", "truth kept 4/5")),
]
GAUSSIAN: list[tuple[str, Fraction]] = [
    ("discrete Gaussian, zCDP (ρ = 1/8)", Fraction(1, 8)),
    ("discrete Gaussian, approximate DP (ε = 1, δ = 1e-6, via zCDP)", approx_to_zcdp(Fraction(1), Fraction(1, 10**6))),
]


def run_audits() -> list[Row]:
    rows = []
    for name, epsilon, audit, variants in PURE:
        for variant in variants:
            estimate, se = audit(variant)
            rows.append(Row(name, variant, epsilon, estimate, se))
    for name, rho in GAUSSIAN:
        for variant in VARIANTS:
            bound, estimate, se = gaussian_check(rho, variant)
            rows.append(Row(name, variant, bound, estimate, se, kind="δ"))
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| mechanism | variant | bound | estimate ± se | verdict |", "|---|---|---:|---:|---|"]
    for r in rows:
        verdict = ("holds" if r.passes else "VIOLATED") if r.correct else ("caught" if r.passes else "MISSED")
        lines.append(f"| {r.mechanism} | {r.variant} | {r.kind} {r.bound:.4g} | {r.estimate:.4f} ± {r.se:.4f} | "
                     f"{verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run_audits()))
