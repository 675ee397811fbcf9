"""Sums and weighted counts: measure {sum, bounds, granularity}. Values clamped and discretised
before integer noise drawn in units of the granularity; sensitivity max(|L|, |U|) under
add/remove, U − L under change one record."""

from __future__ import annotations

import csv
import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dprelease.accounting import Neighbouring
from dprelease.plan.sensitivities import sum_l1
from dprelease.data import encode, histogram
from dprelease.lifecycle.measure import measure_counts
from dprelease.mechanisms import discrete_laplace
from dprelease.plan import plan_release
from dprelease.spec import load_spec
from tests.conftest import ROOT
from tests.stats import chi_square_pvalue, discrete_laplace_pmf, empirical_epsilon
from tests.test_run import run

DATA = ROOT / "data" / "nist_acs" / "national2019.csv"
SPEC = """\
release: acs-income-2019
dataset:
  name: nist-acs-sums
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{epsilon: 4}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
{invariants}
tables:
  - name: income_by_sex
    group_by: [SEX]
    measure: {{sum: PINCP, bounds: [{low}, 200000], granularity: 100, missing: zero}}
    epsilon: 0.5
    post_process: none
  - name: weighted_persons_by_sex
    group_by: [SEX]
    measure: {{sum: PWGTP, bounds: [0, 1000], granularity: 1}}
    epsilon: 0.5
"""


def write(tmp_path, low=0, invariants=""):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(data=DATA, low=low, invariants=invariants))
    return path


def test_sensitivity_follows_the_relation(tmp_path):
    spec = load_spec(write(tmp_path, low=-50000))
    plan = plan_release(spec, None)
    income, weights = plan.tables
    assert (income.sensitivity, income.granularity, income.scale) == (200000, 100, 400000)  # max(|L|, |U|)
    assert weights.sensitivity == 1000
    assert income.moe95 % 100 == 0  # margins in published units, multiples of the granularity
    bounded = load_spec(write(tmp_path, low=-50000, invariants="invariants: {totals: [root]}"))
    income, weights = plan_release(bounded, None).tables
    # change one record: a row may move from one cell to another, taking up to max(|L|, |U|)
    # out of one and putting up to that into the other
    assert (income.sensitivity, weights.sensitivity) == (400000, 2000)
    single = write(tmp_path, low=-50000, invariants="invariants: {totals: [root]}")
    single.write_text(single.read_text().replace("group_by: [SEX]\n    measure: {sum: PINCP", "group_by: []\n    measure: {sum: PINCP"))
    income, _ = plan_release(load_spec(single), None).tables
    assert income.cells == 1 and income.sensitivity == 250000  # one unfiltered cell: U − L


def test_sums_are_the_clamped_discretised_values(tmp_path):
    spec = load_spec(write(tmp_path))
    data = encode(spec)
    raw = pd.read_csv(DATA, na_values=["N"], usecols=["SEX", "PINCP", "PWGTP"])
    units = np.rint(raw.PINCP.fillna(0).clip(0, 200000) / 100)
    want = units.groupby(raw.SEX).sum().to_numpy().astype(np.int64)
    assert np.array_equal(histogram(spec, spec.tables[0], data), want)
    assert np.array_equal(histogram(spec, spec.tables[1], data),
                          raw.PWGTP.clip(0, 1000).groupby(raw.SEX).sum().to_numpy())


@pytest.mark.slow
def test_noise_is_drawn_in_units_of_the_granularity(tmp_path):
    """(published − exact)/g follows the discrete Laplace of scale (Δ/g)/ε: a fit, with the
    control that noise of scale Δ/ε drawn in units (g forgotten: 100× too wide) fails it; and the
    tight privacy loss of one row of value U is ε, with an off-by-g sensitivity caught."""
    path = write(tmp_path)
    path.write_text(path.read_text().replace("bounds: [0, 200000], granularity: 100", "bounds: [0, 2000], granularity: 100"))
    income = plan_release(load_spec(path), None).tables[0]
    assert (income.sensitivity, income.scale, income.granularity) == (2000, 4000, 100)  # 40 units of 100
    exact = np.array([1234, 0])  # the histogram of a sum is in units of the granularity
    draws = np.stack([measure_counts(exact, income) for _ in range(10_000)])  # published in value units
    assert (draws % 100 == 0).all()
    noise = (draws // 100 - exact).ravel()
    units = float(income.scale / income.granularity)
    assert chi_square_pvalue(noise, lambda k: discrete_laplace_pmf(k, units)) > 1e-6
    forgot_g = discrete_laplace(income.scale, noise.size)
    assert chi_square_pvalue(forgot_g, lambda k: discrete_laplace_pmf(k, units)) < 1e-6
    n, step = 1_000_000, 2000 // 100  # one row of value U moves the sum by U/g units
    scale = income.scale / income.granularity
    estimate, se = empirical_epsilon(discrete_laplace(scale, n) >= step, step + discrete_laplace(scale, n) >= step)
    assert abs(estimate - float(income.budget.epsilon)) < 6 * se, (estimate, se)
    broken = Fraction(1) / income.budget.epsilon  # the mistake: sensitivity of one unit
    loss, se = empirical_epsilon(discrete_laplace(broken, n) >= step, step + discrete_laplace(broken, n) >= step)
    assert loss > float(income.budget.epsilon) + 6 * se


def test_missing_or_non_numeric_values_are_refused(tmp_path, cli, monkeypatch):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(data=DATA, low=0, invariants="").replace(", missing: zero", ""))
    result = cli("run", path, "--output-dir", tmp_path / "out")
    assert result.code == 2 and "missing: zero" in result.stderr and "Traceback" not in result.stderr, result
    (tmp_path / "bad.csv").write_text("SEX,PINCP,PWGTP\n1,100,3\n2,lots,4\n")
    path.write_text(SPEC.format(data=tmp_path / "bad.csv", low=0, invariants=""))
    result = cli("run", path, "--output-dir", tmp_path / "out")  # checked row by row before the reservation
    assert result.code == 2 and "must hold numbers" in result.stderr and "Nothing was reserved" in result.stderr, result
    assert not (tmp_path / "out" / "_internal" / "acs-income-2019").exists(), result  # nothing reserved: no run record
    # data streamed (too large to be checked row by row first): the count refuses it after the reservation
    monkeypatch.setattr("dprelease.lifecycle.refusals.WHOLE_CHECK_BYTES", 0)
    result = cli("run", path, "--output-dir", tmp_path / "out")
    assert result.code == 2 and "must hold numbers" in result.stderr, result
    assert not (tmp_path / "out" / "acs-income-2019").exists(), result
    records = list((tmp_path / "out" / "_internal").rglob("run.json"))
    assert records and all("lots" not in r.read_text() for r in records), (result, records)  # the terminal only


def test_a_release_of_sums_end_to_end(tmp_path, release_env, cli):
    path = write(tmp_path)
    out = tmp_path / "out"
    proc = run(path, "--output-dir", out, "--ledger", tmp_path / "ledger.sqlite", env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = out / "acs-income-2019"
    rows = list(csv.DictReader((release / "tables" / "income_by_sex.csv").open()))
    assert list(rows[0]) == ["SEX", "sum"] and all(int(r["sum"]) % 100 == 0 for r in rows)
    manifest = json.loads((release / "manifest.json").read_text())
    income = next(t for t in manifest["tables"] if t["name"] == "income_by_sex")
    assert income["measure"] == {"sum": "PINCP", "bounds": [0, 200000], "granularity": 100, "missing": "zero"}
    assert "publishes sums of `PINCP`" in (release / "budget_report.md").read_text()
    again = cli("postprocess", release)
    assert again.code == 0, again
    for name in ("income_by_sex", "weighted_persons_by_sex"):
        assert (release / "postprocessed" / "1-as-specified" / "tables" / f"{name}.csv").read_bytes() == \
            (release / "tables" / f"{name}.csv").read_bytes()


def test_evaluate_simulates_sums_at_their_scale(tmp_path):
    """Mean absolute error of 'none'-processed cells ≈ the noise scale (400,000 for income): a
    simulation in the wrong units would be off by the granularity (100×)."""
    from dprelease.evaluate.accuracy import evaluate

    rows = evaluate(load_spec(write(tmp_path)), trials=100)
    income = next(r for r in rows if r.table == "income_by_sex" and r.method == "clamp")
    assert 0.5 * 400_000 < income.cell_mae < 2 * 400_000, income


def test_change_one_record_audit_of_a_grouped_sum():
    """Under change one record a row of value U can move from cell a to cell b: (a, b) → (a − U,
    b + U). The joint tight event has loss ε at the planner's sensitivity 2·max(|L|, |U|); at
    U − L (right only for a single cell, and what a naive reading of the rule gives) it is 2ε."""
    from dprelease.spec import SumMeasure

    measure, epsilon, n = SumMeasure("X", 0, 2000, 100, False), Fraction(1, 2), 400_000
    step = 2000 // 100  # the row's value, in units

    def loss(sensitivity):
        scale = Fraction(sensitivity, 100) / epsilon
        a0, b0 = 500 + discrete_laplace(scale, n), 300 + discrete_laplace(scale, n)
        a1, b1 = 500 - step + discrete_laplace(scale, n), 300 + step + discrete_laplace(scale, n)
        return empirical_epsilon((a0 <= 500 - step) & (b0 >= 300 + step), (a1 <= 500 - step) & (b1 >= 300 + step))

    estimate, se = loss(sum_l1(measure.low, measure.high, Neighbouring(change=True, why="invariants"), cells=2))
    assert abs(estimate - float(epsilon)) < 6 * se, (estimate, se)
    naive, se = loss(measure.high - measure.low)
    assert naive > float(epsilon) + 6 * se, (naive, se)


def test_a_method_override_leaves_sums_alone(tmp_path):
    """`postprocess --method consistent` (and evaluate's consistent arm) is for counts: a sum
    keeps its own post-processing instead of being forced to add up to row counts."""
    from dprelease.postprocess import Invariants, postprocess_release

    spec = load_spec(write(tmp_path, invariants="invariants: {totals: [root]}"))
    noisy = {("income_by_sex", None): np.array([-500, 900]), ("weighted_persons_by_sex", None): np.array([-7, 5])}
    variances = {k: 1.0 for k in noisy}
    for method in ("consistent", "clamp", None):
        out = postprocess_release(spec, noisy, variances, method=method, invariants=Invariants.from_totals({"root": np.array([27253])}))
        assert out[("income_by_sex", None)].tolist() == [-500, 900]  # post_process: none, as specified
        assert out[("weighted_persons_by_sex", None)].tolist() == [0, 5]  # the default for L ≥ 0: clamp


def test_single_cell_change_one_covers_drops_and_missing_values():
    """A changed record may be dropped (out of domain) or missing (counted 0): for [1000, 2000]
    one cell moves by up to 2000, not U − L = 1000 (found by review: a drop moved it 1227)."""

    assert sum_l1(1000, 2000, Neighbouring(change=True, why="invariants"), cells=1) == 2000
    assert sum_l1(-500, 2000, Neighbouring(change=True, why="invariants"), cells=1) == 2500


def test_missing_counts_zero_and_sums_are_exact(tmp_path):
    from types import SimpleNamespace

    from dprelease.data.histogram import _sums
    from dprelease.spec import SumMeasure

    data = SimpleNamespace(values={"X": np.array([np.nan, np.nan, np.nan, 150.0])})
    got = _sums(SumMeasure("X", 100, 200, 1, True), data, np.zeros(4, dtype=np.int64), None, 1)
    assert got.tolist() == [150]  # missing values count 0, not the lower bound
    big = np.r_[np.full(9100, 1e12), 1.0, np.full(9100, -1e12)]  # float64 cancellation would lose the 1
    data = SimpleNamespace(values={"X": big})
    got = _sums(SumMeasure("X", -10**12, 10**12, 1, False), data, np.zeros(big.size, dtype=np.int64), None, 1)
    assert got.tolist() == [1]


def test_target_margin_uses_each_measurements_sensitivity(tmp_path):
    """Found by review: --target-moe used the count sensitivity for sums (ε 0.006 for ±1000)."""
    from dprelease.mechanisms import margin_of_error
    from dprelease.plan import epsilon_for_target

    spec = load_spec(write(tmp_path))
    plan = plan_release(spec, None)
    for (key, eps), t in zip(epsilon_for_target(plan, spec.confidence, 2_000_000), plan.tables):
        assert t.granularity * margin_of_error(Fraction(t.sensitivity, t.granularity) / eps, spec.confidence) <= 2_000_000
        slightly_less = eps * Fraction(99, 100)
        assert t.granularity * margin_of_error(Fraction(t.sensitivity, t.granularity) / slightly_less,
                                               spec.confidence) > 2_000_000 * Fraction(99, 100) - t.granularity
