"""Margins of error in each measure's own units (dprelease/plan/margins.py): each one's coverage
by simulation with the release's own samplers, and every place that shows them agreeing.

Coverage tests draw through the samplers' test-only seam (``rng=``) from a fixed, seeded word
source (numpy's PCG64: a fixed generator, so each test is reproducible; release code never
passes ``rng``). A margin at confidence c must hold for at least c of the draws: the observed
share may fall below c by simulation error only, and the tolerance is 4 binomial standard errors
of the number of independent draws, sqrt(c(1 − c)/N) (a correct margin fails it with probability
about 3·10⁻⁵). Counts' and sums' margins are exact (the smallest that holds): their tests also
show that one less fails. The mean's, mode's and quantile's are conservative bounds: their
tests check they hold (in their worst cases, where the bound is nearly tight for modes).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import PureDP
from dprelease.evaluate.coverage import margin_coverage
from dprelease.data import count_exact
from dprelease.publish.manifest import manifest
from dprelease.plan import epsilon_for_target, plan_release
from dprelease.plan.margins import (
    Margin,
    abs_pmf,
    choice_gap,
    joint_quantile,
    margin_of,
    mean_margin,
    table_units,
)
from dprelease.plan.measurements import DiscreteGaussian, DiscreteLaplace, Mean, MeanPart, PermuteAndFlip
from dprelease.plan.tradeoff import MEAN_AT, plan_curves
from dprelease.postprocess import mean_values
from dprelease.report.markdown import budget_report_md, margin_figures
from dprelease.spec import MeanMeasure, load_spec
from tests.conftest import ROOT

C90, C95 = Fraction(90, 100), Fraction(95, 100)
N = 20_000  # independent draws per coverage check


class _Seeded:
    """A fixed word source for the samplers' test seam (seeded PCG64; never for release noise)."""

    def __init__(self, seed: int):
        self._bits = np.random.Generator(np.random.PCG64(seed)).bit_generator

    def words(self, n):
        return self._bits.random_raw(n).astype(np.uint64)


def tolerance(confidence: Fraction, draws: int) -> float:
    """4 binomial standard errors of a share of ``draws`` independent draws at ``confidence``."""
    c = float(confidence)
    return 4 * math.sqrt(c * (1 - c) / draws)


def covered(errors: np.ndarray, margin: float) -> float:
    return float(np.mean(errors <= margin))


# ---------------------------------------------------------------- counts and sums: exact margins


@pytest.mark.parametrize("confidence", [C90, C95])
@pytest.mark.parametrize("noise", [
    DiscreteLaplace(1, Fraction(1, 4)),  # a count, ε = 1/4
    DiscreteLaplace(100_000, Fraction(1, 8), granularity=1000),  # a sum of values in [0, 100000] on a grid of 1000
    DiscreteGaussian(1, Fraction(8)),  # a zCDP count
])
def test_a_cells_margin_covers_at_its_confidence_and_one_less_does_not(noise, confidence):
    margin = margin_of_noise(noise, confidence)
    assert margin.kind == "cell" and margin.value == noise.margin(confidence)
    errors = np.abs(noise.draw(np.zeros(N, dtype=np.int64), rng=_Seeded(1)))  # value units
    tol = tolerance(confidence, N)
    assert covered(errors, margin.value) >= float(confidence) - tol
    assert covered(errors, margin.value - noise.granularity) < float(confidence) + tol  # the smallest that holds


def margin_of_noise(noise, confidence):
    from dprelease.plan import TablePlan

    return margin_of(TablePlan("t", PureDP(Fraction(1, 4)), noise, 1, 0, 0), confidence)


# ---------------------------------------------------------------- means: a conservative bound


def _part(noise):
    return MeanPart(noise, PureDP(Fraction(1, 8)), PureDP(Fraction(1, 8)), 0, 0)


INCOME = MeanMeasure("PINCP", 0, 200_000, 1000, "skip")  # centred on 100000: h = 100000
INCOME_MEAN = Mean(_part(DiscreteLaplace(100_000, Fraction(1, 8), granularity=1000)),
                   _part(DiscreteLaplace(1, Fraction(1, 8))), half_width=100_000)


@pytest.mark.parametrize("confidence", [C90, C95])
@pytest.mark.parametrize("n,true_mean", [(1_000, 100_000), (1_000, 200_000), (300, 30_000), (5_000, 0)])
def test_a_means_bound_covers_at_its_confidence(confidence, n, true_mean):
    """The published mean (centre + noisy sum / noisy count, clamped; empty below a count of 1)
    is within the bound at the cell's n for at least ``confidence`` of the draws, for means at
    the centre, at a bound (d = ±h: the worst case) and between."""
    margin = mean_margin(INCOME_MEAN.sum.noise, INCOME_MEAN.count.noise, INCOME_MEAN.half_width, confidence)
    bound = margin.at_count(n)
    assert bound is not None and 0 < bound < 200_000
    centred_units = n * (true_mean - INCOME.centre) // INCOME.granularity
    units = np.stack([np.full(N, centred_units), np.full(N, n)]).astype(np.int64)
    published = mean_values(INCOME_MEAN.draw(units, rng=_Seeded(n + true_mean)), INCOME)[0]
    errors = np.where(np.isnan(published), np.inf, np.abs(published - true_mean))
    share = covered(errors, bound)
    assert share >= float(confidence) - tolerance(confidence, N), (share, bound)
    print(f"mean n={n} true={true_mean} at {float(confidence):.0%}: ±{bound:,.0f}, simulated coverage {share:.2%}")


@pytest.mark.parametrize("confidence", [C90, C95])
def test_the_mean_bound_holds_for_the_unclamped_ratio_in_its_worst_case(confidence):
    """The bound's proof does not use the clamping to [L, U], which hides half the errors of a mean
    at a bound: the raw ratio centre + noisy sum / noisy count of a mean at d = h (the worst case)
    is within it for at least ``confidence`` of the draws (the test that fails if the bound left
    out the count's noise, h·|Z_N|)."""
    n = 1_000
    bound = mean_margin(INCOME_MEAN.sum.noise, INCOME_MEAN.count.noise, 100_000, confidence).at_count(n)
    units = np.stack([np.full(N, n * 100), np.full(N, n)]).astype(np.int64)  # mean = 200000: d = h
    noisy = INCOME_MEAN.draw(units, rng=_Seeded(7))
    errors = np.abs(INCOME.centre + noisy[0] / noisy[1] - 200_000)
    share = covered(errors, bound)
    assert share >= float(confidence) - tolerance(confidence, N), (share, bound)
    print(f"mean (unclamped, d = h) n={n} at {float(confidence):.0%}: ±{bound:,.0f}, simulated coverage {share:.2%}")


def test_the_joint_quantile_is_the_smallest_by_brute_force():
    """X = the smallest x with P(|Z_S| + h·|Z_N| > x) ≤ α, against a direct convolution."""
    sum_noise, count_noise, h = DiscreteLaplace(30, Fraction(1, 2), granularity=10), DiscreteLaplace(1, Fraction(1)), 7
    alpha = Fraction(1, 20)
    x = joint_quantile(sum_noise, count_noise, h, alpha)
    ps, pn = abs_pmf(sum_noise), abs_pmf(count_noise)
    values = (10 * np.arange(ps.size))[:, None] + h * np.arange(pn.size)[None, :]
    mass = ps[:, None] * pn[None, :]

    def tail(v):
        return mass[values > v].sum()

    assert tail(x) <= float(alpha) < tail(x - 1)


# ---------------------------------------------------------------- modes and quantiles: the exponential mechanism's bound


def test_choice_gap_is_the_smallest_whole_t_of_the_bound():
    for du, epsilon, monotone, k, c in [(1, Fraction(1, 4), True, 9, C90), (2, Fraction(1, 3), False, 100, C95),
                                        (1, Fraction(2), True, 2, C90)]:
        noise = PermuteAndFlip(du, epsilon, monotone, candidates=k)
        t, temperature = choice_gap(noise, c), float(noise.temperature)
        assert (k - 1) * math.exp(-(t + 1) / temperature) <= 1 - float(c)
        assert t == 0 or (k - 1) * math.exp(-t / temperature) > 1 - float(c)
    assert choice_gap(PermuteAndFlip(1, Fraction(1), True), C90) is None  # candidates not stated
    assert choice_gap(PermuteAndFlip(1, Fraction(1), True, candidates=1), C90) == 0


@pytest.mark.parametrize("confidence", [C90, C95])
def test_a_modes_gap_covers_in_its_worst_case(confidence):
    """Worst case of the union bound: every other category's count exactly t + 1 below the mode's,
    so the gap exceeds t whenever another is chosen. The share choosing the mode is ≥ c (the bound
    is nearly tight here: a temperature off by 2 would fail)."""
    noise = PermuteAndFlip(1, Fraction(1, 4), monotone=True, candidates=9)
    t = margin_of_noise(noise, confidence).value
    utilities = np.tile(np.r_[1_000, np.full(8, 1_000 - (t + 1))], (N, 1))
    gaps = 1_000 - utilities[np.arange(N), noise.draw(utilities, rng=_Seeded(3))]
    share = covered(gaps, t)
    assert share >= float(confidence) - tolerance(confidence, N)
    print(f"mode gap ≤ {t} at {float(confidence):.0%} (worst case): simulated coverage {share:.2%}")


@pytest.mark.parametrize("confidence", [C90, C95])
def test_a_quantiles_rank_error_covers(confidence):
    """A median over 40 ordered categories of 5 rows each (every category near the median is
    nearly as good: the hard case), at ε = 1/10: the chosen category's rank error beyond the best
    one's, |#below − n/2| − min, is within the stated rank margin for at least c of the draws."""
    q, k = Fraction(1, 2), 40
    noise = PermuteAndFlip(1, Fraction(1, 10), monotone=False, candidates=k, q=q)
    rank = margin_of_noise(noise, confidence).value
    counts = np.full(k, 5)
    below = np.cumsum(counts) - counts
    utilities = -np.abs(q.denominator * below - q.numerator * counts.sum())
    chosen = noise.draw(np.tile(utilities, (N, 1)), rng=_Seeded(4))
    errors = (utilities.max() - utilities[chosen]) / q.denominator  # rows
    share = covered(errors, rank)
    assert share >= float(confidence) - tolerance(confidence, N)
    assert np.quantile(errors, float(confidence)) > 0  # not a trivial case: the mechanism errs
    print(f"median rank ±{rank} at {float(confidence):.0%}: simulated coverage {share:.2%}")


@pytest.mark.parametrize("confidence", [C90, C95])
def test_a_quantiles_rank_error_covers_in_the_bounds_worst_case(confidence):
    """The union bound's worst case for a q = 1/4 quantile (b = 4): every other candidate's utility
    exactly one past the stated gap (t = rank·b, so a rank error above the margin whenever another
    is chosen). Nearly tight: a rank margin from the wrong temperature or b would fail."""
    q = Fraction(1, 4)
    noise = PermuteAndFlip(3, Fraction(1, 2), monotone=False, candidates=12, q=q)  # Δu = max(a, b − a) = 3
    rank = margin_of_noise(noise, confidence).value
    gap = choice_gap(noise, confidence)
    assert rank == math.ceil(Fraction(gap, q.denominator))
    utilities = np.tile(np.r_[0, np.full(11, -(gap + 1))], (N, 1))
    errors = -utilities[np.arange(N), noise.draw(utilities, rng=_Seeded(5))] / q.denominator  # rows
    share = covered(errors, rank)
    assert share >= float(confidence) - tolerance(confidence, N)
    print(f"quantile rank ±{rank} at {float(confidence):.0%} (worst case): simulated coverage {share:.2%}")


# ---------------------------------------------------------------- one spec: everything agrees


SPEC = """\
release: margins-090
dataset:
  name: margins-090-data
  path: {data}
  format: csv
  na_values: ["N"]
  lifetime_budget: {{epsilon: 4}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
accuracy: {{confidence: 0.90}}
columns:
  PUMA: {{domain_file: {domains}/puma.txt}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
  PINCP: {{range: [-20000, 2000000], missing: "N/A (under 15)"}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
tables:
  - {{name: puma_by_sex, group_by: [PUMA, SEX], epsilon: 0.25}}
  - name: income_mean_by_puma_sex
    group_by: [PUMA, SEX]
    measure: {{mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}}
    epsilon: 0.25
  - {{name: median_age_by_sex, group_by: [SEX], measure: {{quantile: AGEP, q: 0.5}}, epsilon: 0.25}}
  - {{name: race_mode_by_puma, group_by: [PUMA], measure: {{mode: RAC1P}}, epsilon: 0.25}}
"""


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "margins.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "nist_acs" / "national2019.csv", domains=ROOT / "configs" / "domains"))
    return load_spec(path)


def test_every_measure_has_a_margin_in_its_own_units(spec):
    plan = plan_release(spec, None)
    margins = {t.name: margin_of(t, spec.confidence) for t in plan.tables}
    assert [m.kind for m in margins.values()] == ["cell", "mean", "quantile", "mode"]
    assert margins["puma_by_sex"].value == plan.tables[0].moe
    mean = margins["income_mean_by_puma_sex"]
    at = [mean.at_count(n) for n in (100, 1_000, 10_000)]
    assert at[0] > at[1] > at[2] > 0 and at[1] < 10_000  # dollars, not the sum's ±1,842,000
    assert margins["median_age_by_sex"].value > 0 and margins["race_mode_by_puma"].value > 0
    assert table_units(spec)["income_mean_by_puma_sex"] == "PINCP units"


def test_plan_manifest_report_tradeoff_and_target_agree(spec, cli):
    plan = plan_release(spec, None)
    published = manifest(spec, plan, "run-1", "2026-11-26T00:00:00+00:00")
    shown = json.loads(cli("plan", str(spec.source), "--json").stdout)
    report = budget_report_md(published)
    curves = {c.name: c for c in plan_curves(plan)}
    assert "## Margins of error at 90%, in each measure's own units" in report
    for t, entry, row in zip(plan.tables, published["tables"], shown["tables"]):
        margin = margin_of(t, spec.confidence)
        assert entry["margin"] == row["margin"] == margin.record(table_units(spec)[t.name]), t.key
        assert Margin.from_record(entry["margin"]) == margin
        assert entry["margin"]["text"] in report
        chosen = curves[t.name].chosen.moe
        assert chosen == (math.ceil(margin.at_count(MEAN_AT)) if margin.kind == "mean" else margin.value), t.key
    assert [(name, m, unit) for name, m, unit in margin_figures(published)] == [
        (t.key, margin_of(t, spec.confidence), table_units(spec)[t.name]) for t in plan.tables]  # the HTML's figures
    assert "rank ±" in report and "gap ≤ " in report
    mean_margin_shown = margin_of(plan.tables[1], spec.confidence).short()  # the mean's, beside its sum part's
    assert f"| {plan.tables[1].parts[0].moe} (the sum; the mean: {mean_margin_shown}) |" in report
    needs = dict(epsilon_for_target(plan, spec.confidence, 10))
    assert needs["income_mean_by_puma_sex"] is None and needs["race_mode_by_puma"] is None
    assert needs["puma_by_sex"] is not None
    target = cli("plan", str(spec.source), "--target-moe", "10")
    assert target.code == 0 and "income_mean_by_puma_sex: no ε for a ±N cell margin" in target.stdout
    as_json = json.loads(cli("plan", str(spec.source), "--target-moe", "10", "--json").stdout)
    kept = sum(t.budget.amount for t in plan.tables if needs[t.name] is None)  # the total counts what they keep
    assert Fraction(as_json["kept_epsilon"]) == kept > 0
    assert Fraction(as_json["total_epsilon"]) == kept + sum(e for e in needs.values() if e is not None)


def test_every_margin_covers_on_the_shipped_data(spec):
    """dprelease.evaluate.coverage (what `dprelease evaluate` prints) on the shipped data: every
    measurement's stated margin holds for at least 90% of its (cell, trial) pairs."""
    rows = margin_coverage(spec, 50, count_exact(spec), rng=_Seeded(11))
    assert {r.margin.kind for r in rows} == {"cell", "mean", "quantile", "mode"}
    for r in rows:
        assert r.pairs > 0 and r.share >= 0.9 - tolerance(C90, r.pairs), (r.table, r.share)
        print(f"{r.table}: {r.margin.short()} ({r.unit}), simulated coverage {r.share:.2%} of {r.pairs:,}")


def test_evaluate_prints_every_tables_margin_and_coverage(spec, cli):
    """`dprelease evaluate` (test data, NOT PRIVATE) now covers means, modes and quantiles too."""
    result = cli("evaluate", str(spec.source), "--trials", "3")
    assert result.code == 0, result
    section = result.stdout[result.stdout.index("## Margins of error at 90%: stated and simulated"):]
    for name, kind in [("puma_by_sex", "cell"), ("income_mean_by_puma_sex", "mean"),
                       ("median_age_by_sex", "quantile"), ("race_mode_by_puma", "mode")]:
        assert f"| `{name}` | — | {kind} |" in section, name
    assert "PINCP units" in section and "NOT PRIVATE" in section
