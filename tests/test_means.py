"""Means: a noisy sum of centred values over a noisy count of exactly the same rows, the
table's budget split between them; the published rule for a noisy count below 1; the pair's
privacy loss measured on neighbouring datasets (tight event) with a broken variant caught."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import ZCDP, PureDP
from dprelease.data import encode, histogram
from dprelease.lifecycle.measure import measure_mean
from dprelease.plan import plan_release
from dprelease.postprocess import mean_values
from dprelease.spec import MeanMeasure, load_spec
from tests.conftest import ROOT, assert_edit_refused
from tests.stats import chi_square_pvalue, discrete_laplace_pmf, empirical_epsilon
from tests.test_run import run
from tests.ledgers import make_ledger

SPEC = """\
release: acs-means-2019
dataset:
  name: nist-acs-means
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{epsilon: 4}}
privacy: {{definition: {definition}, unit: row}}
budget: {{epsilon: 2}}
columns:
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
tables:
  - name: mean_income_by_sex_age
    group_by: [SEX, AGE_GROUP]
    measure: {{mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip{share}}}
    epsilon: 1
  - name: persons_by_sex
    group_by: [SEX]
    epsilon: 1
"""


def write(tmp_path, data=None, definition="pure", share=""):
    path = tmp_path / "means.yaml"
    path.write_text(SPEC.format(data=data or ROOT / "data" / "nist_acs" / "national2019.csv", definition=definition,
                                share=share))
    return path


def test_the_budget_is_split_and_the_sum_is_centred(tmp_path):
    plan = plan_release(load_spec(write(tmp_path, share=", sum_share: 0.75")), None)
    mean = plan.tables[0]
    total, count = mean.noise.sum, mean.noise.count
    assert (total.budget, count.budget) == (PureDP(Fraction(3, 4)), PureDP(Fraction(1, 4))) and mean.budget == PureDP(1)
    assert total.noise.sensitivity == 100_000  # centred on 100000: half of max(|L|, |U|)
    assert total.noise.granularity == 1000
    assert total.noise.scale == Fraction(100_000) / Fraction(3, 4) and count.noise.scale == 4
    assert count.noise.sensitivity == 1
    assert mean.charge == PureDP(1) and plan.total == PureDP(2)


def test_both_parts_are_over_exactly_the_same_rows(tmp_path):
    """Synthetic rows with missing values, values outside the bounds and off the grid: the two
    exact histograms equal a row-by-row computation (skip leaves a row out of both; zero keeps
    it, as 0 clamped to the bounds)."""
    rows = [("1", "30", "150000"), ("1", "40", ""), ("2", "70", "250000"), ("2", "10", "-5000"),
            ("1", "30", "1499"), ("2", "50", "")]
    data_path = tmp_path / "rows.csv"
    with data_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["SEX", "AGEP", "PINCP"])
        writer.writerows(rows)
    for missing in ("skip", "zero"):
        path = write(tmp_path, data=data_path)
        path.write_text(path.read_text().replace("missing: skip", f"missing: {missing}").replace(
            "bounds: [0, 200000]", "bounds: [1000, 200000]"))
        spec = load_spec(path)
        table = spec.tables[0]
        got = histogram(spec, table, encode(spec), table.group_by)
        centre = table.measure.centre
        assert centre == 100_000
        want = np.zeros((2, 6), dtype=np.int64)
        for sex, age, value in rows:
            cell = (int(sex) - 1) * 3 + (0 if int(age) < 18 else 1 if int(age) < 65 else 2)
            if value == "" and missing == "skip":
                continue
            x = min(max(float(value or 0), 1000), 200_000)
            want[0, cell] += round(x / 1000) - centre // 1000
            want[1, cell] += 1
        assert np.array_equal(got, want), (missing, got, want)


def test_a_noisy_count_below_one_publishes_no_mean():
    m = MeanMeasure("X", 0, 100, 10)
    noisy = np.array([[200, 200, -30, 5000], [4, 0, -2, 1]])  # centred sums (value units), counts
    means, counts = mean_values(noisy, m)
    assert means[0] == 50 + 200 / 4 and np.isnan(means[1]) and np.isnan(means[2])
    assert means[3] == 100  # 50 + 5000 clamped to the bounds
    assert list(counts) == [4, 0, 0, 1]


def _single_cell_plan(tmp_path, cells):
    path = write(tmp_path)
    path.write_text(path.read_text().replace("group_by: [SEX, AGE_GROUP]", "group_by: []"))
    mean = plan_release(load_spec(path), None).tables[0]
    return dataclasses.replace(mean, cells=cells)


def test_each_part_draws_its_planned_noise(tmp_path):
    """Many draws: the sum's noise fits the discrete Laplace of its share (scale in granularity
    units), the count's fits its own; a variant that spends the whole ε on each part is caught."""
    plan = _single_cell_plan(tmp_path, 100_000)
    exact = np.stack([np.full(100_000, 37), np.full(100_000, 500)]).astype(np.int64)
    noisy = measure_mean(exact, plan)
    sum_noise = noisy[0] // 1000 - 37
    count_noise = noisy[1] - 500
    s_units = float(plan.noise.sum.noise.scale / 1000)  # 200 units: Δ = 100 units at ε = 1/2
    assert chi_square_pvalue(sum_noise, lambda k: discrete_laplace_pmf(k, s_units)) > 1e-6
    assert chi_square_pvalue(count_noise, lambda k: discrete_laplace_pmf(k, 2.0)) > 1e-6
    assert chi_square_pvalue(sum_noise, lambda k: discrete_laplace_pmf(k, s_units / 2)) < 1e-6
    assert chi_square_pvalue(count_noise, lambda k: discrete_laplace_pmf(k, 1.0)) < 1e-6


def test_the_mean_is_accurate_where_counts_are_large(tmp_path):
    """centre + sum/count over many draws: centred on the true mean, with the spread the two
    noise scales predict (delta method), so the split and the centring reach the output."""
    plan = _single_cell_plan(tmp_path, 100_000)
    n, true_mean = 2000, 64_000
    exact = np.stack([np.full(100_000, n * (true_mean - 100_000) // 1000), np.full(100_000, n)]).astype(np.int64)
    means = mean_values(measure_mean(exact, plan), MeanMeasure("PINCP", 0, 200_000, 1000))[0]
    var_sum = 2 * (float(plan.noise.sum.noise.scale) ** 2)  # discrete Laplace variance ≈ 2b² (b in value units)
    var_count = 2 * float(plan.noise.count.noise.scale) ** 2
    predicted = math.sqrt(var_sum / n**2 + ((true_mean - 100_000) / n) ** 2 * var_count)
    assert abs(means.mean() - true_mean) < 5 * predicted / math.sqrt(means.size) + 1
    assert means.std() == pytest.approx(predicted, rel=0.05)


def _neighbours(tmp_path, values=(20_000, 80_000, 150_000), top=200_000, edit=lambda text: text,
                definition="pure"):
    """Two datasets of one cell that differ by one row with the ``top`` value: exact parts of
    each, computed by the release's own histogram step (the spec, one cell, through ``edit``)."""
    rows = [("1", "30", str(v)) for v in values]
    out = []
    for extra in ([], [("1", "30", str(top))]):
        data_path = tmp_path / f"rows{len(extra)}.csv"
        with data_path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["SEX", "AGEP", "PINCP"])
            writer.writerows(rows + extra)
        path = write(tmp_path, data=data_path, definition=definition)
        path.write_text(edit(path.read_text().replace("group_by: [SEX, AGE_GROUP]", "group_by: []")))
        spec = load_spec(path)
        out.append(histogram(spec, spec.tables[0], encode(spec), ()))
    return out


def test_the_pair_is_epsilon_dp_on_neighbours(tmp_path):
    """Tight event {noisy sum ≥ the neighbour's sum and noisy count ≥ its count}: its probability
    ratio is exactly e^(ε_sum + ε_count) = e^ε for correctly planned noise, so the measured ε̂ is
    within noise of ε = 1. The broken variant — the sum not centred (raw values with the centred
    sensitivity) — is caught: ε̂ well above ε."""
    draws = 400_000
    plan = _single_cell_plan(tmp_path, draws)
    small, large = _neighbours(tmp_path)
    assert abs(int(large[0, 0] - small[0, 0])) * 1000 <= plan.noise.sum.noise.sensitivity
    assert large[1, 0] - small[1, 0] == 1

    eps_hat, se = empirical_epsilon(*_tight_event(small, large, plan, draws))
    assert abs(eps_hat - 1) < 4 * se + 0.02, (eps_hat, se)

    raw_small, raw_large = small.copy(), large.copy()  # broken: raw values (shift 200 units, Δ planned 100)
    raw_small[0] += 100 * small[1]
    raw_large[0] += 100 * large[1]
    eps_broken, se_b = empirical_epsilon(*_tight_event(raw_small, raw_large, plan, draws))
    assert eps_broken > 1 + 6 * se_b, (eps_broken, se_b)


def _tight_event(small, large, plan, draws):
    """The event at the larger neighbour's exact values, drawn ``draws`` times on each input."""
    def event(parts):
        noisy = measure_mean(np.repeat(parts, draws, axis=1), plan)
        return (noisy[0] >= large[0, 0] * 1000) & (noisy[1] >= large[1, 0])
    return event(small), event(large)


def test_a_mean_release_end_to_end(tmp_path, release_env, cli):
    path = write(tmp_path)
    planned = cli("plan", path, "--ledger", tmp_path / "ledger.sqlite")
    assert planned.code == 0 and "mean: sum" in planned.stdout and "mean: count" in planned.stdout, planned
    proc = run(path, "--output-dir", tmp_path / "out", "--ledger", tmp_path / "ledger.sqlite", env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = tmp_path / "out" / "acs-means-2019"
    with (release / "tables" / "mean_income_by_sex_age.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r.keys() for r in rows][0] == {"SEX", "AGE_GROUP", "mean", "count"}
    assert len(rows) == 6
    for r in rows:
        assert r["mean"] == "" or 0 <= float(r["mean"]) <= 200_000
    adults = [r for r in rows if r["AGE_GROUP"] == "18-64"]
    assert all(int(r["count"]) > 3000 and 20_000 < float(r["mean"]) < 100_000 for r in adults), adults
    manifest = json.loads((release / "manifest.json").read_text())
    entry = manifest["tables"][0]
    assert entry["measure"]["centre"] == 100_000 and entry["measure"]["sum_share"] == "1/2"
    assert [p["part"] for p in entry["parts"]] == ["sum", "count"]
    assert sum(Fraction(p["budget"]["epsilon"]) for p in entry["parts"]) == Fraction(entry["budget"]["epsilon"])
    report = (release / "budget_report.md").read_text()
    assert "mean: sum" in report and "below 1" in report and "unweighted" in report
    assert all(r["mean"] == "" or float(r["mean"]) == round(float(r["mean"])) for r in rows)  # g = 1000: whole
    again = cli("postprocess", release)
    assert again.code == 0, again
    assert (release / "postprocessed" / "1-as-specified" / "tables" / "mean_income_by_sex_age.csv").read_bytes() == \
        (release / "tables" / "mean_income_by_sex_age.csv").read_bytes()


@pytest.mark.parametrize("old,new,field,words", [
    ("missing: skip}", "missing: skip, sum_share: 1}", "measure.sum_share", "strictly between 0 and 1"),
    ("    epsilon: 1\n  - name: persons", "    epsilon: 1\n    post_process: clamp\n  - name: persons",
     "tables[0].post_process", "mean"),
    ("    epsilon: 1\n  - name: persons", "    epsilon: 1\n    mechanism: truncated_geometric\n    upper: 10\n"
     "  - name: persons", "tables[0].mechanism", "means"),
    ("bounds: [0, 200000]", "bounds: [0, 200500]", "measure.bounds", "multiples of the granularity"),
])
def test_bad_means_are_refused(tmp_path, cli, old, new, field, words):
    assert_edit_refused(cli, write(tmp_path), old, new, field, words)


def test_missing_values_need_a_rule(tmp_path, release_env):
    path = write(tmp_path)
    path.write_text(path.read_text().replace(", missing: skip", ""))
    proc = run(path, "--output-dir", tmp_path / "out", "--ledger", tmp_path / "l.sqlite", env=release_env)
    assert proc.returncode == 2 and "missing: skip" in proc.stderr, proc.stderr


def test_evaluate_leaves_means_out_and_says_so(tmp_path, cli):
    result = cli("evaluate", write(tmp_path), "--trials", "2", "--ledger", make_ledger(tmp_path / "none.sqlite"))
    assert result.code == 0, result
    assert "| persons_by_sex |" in result.stdout
    assert "Not evaluated" in result.stdout and "mean_income_by_sex_age" in result.stdout


def test_means_under_zcdp_and_approx(tmp_path):
    """Both parts get the discrete Gaussian: under zcdp each part's σ² = Δ₂²/(2ρ_part) in
    granularity units (the centred sum's Δ₂ = 100 units), under approx each part has its share of
    the table's δ (in proportion to ε); the sum part's draws fit its planned Gaussian and not the
    Gaussian of the whole budget."""
    from dprelease.lifecycle.measure import measure_mean
    from tests.stats import discrete_gaussian_pmf

    path = write(tmp_path, definition="zcdp")
    path.write_text(path.read_text().replace("{epsilon: 4}", "{rho: 4}").replace("budget: {epsilon: 2}",
                    "budget: {rho: 2}").replace("epsilon: 1", "rho: 1").replace(
                    "unit: row}", "unit: row, delta: 1e-6}"))
    mean = plan_release(load_spec(path), None).tables[0]
    total, count = mean.noise.sum, mean.noise.count
    assert total.mechanism == count.mechanism == "discrete_gaussian"
    assert total.noise.sensitivity == 100 ** 2 and count.noise.sensitivity == 1
    assert total.noise.scale >= Fraction(100 ** 2) / (2 * Fraction(1, 2)) and total.charge <= ZCDP(Fraction(1, 2))
    assert mean.charge == total.charge + count.charge <= ZCDP(1)
    draws = measure_mean(np.zeros((2, 50_000), np.int64), dataclasses.replace(mean, cells=50_000))
    units = draws[0] // 1000
    assert chi_square_pvalue(units, lambda k: discrete_gaussian_pmf(k, float(total.noise.scale))) > 1e-6
    assert chi_square_pvalue(units, lambda k: discrete_gaussian_pmf(k, float(total.noise.scale) / 2)) < 1e-6

    approx = write(tmp_path, definition="approx")
    approx.write_text(approx.read_text().replace("{epsilon: 4}", "{epsilon: 4, delta: 1e-5}").replace(
        "budget: {epsilon: 2}", "budget: {epsilon: 2, delta: 1e-6}"))
    plan = plan_release(load_spec(approx), None)
    total, count = plan.tables[0].noise.sum, plan.tables[0].noise.count
    assert (total.delta, count.delta) == (Fraction(1, 4 * 10**6), Fraction(1, 4 * 10**6))  # half of the table's 1/2
    assert plan.tables[0].delta == Fraction(1, 2 * 10**6) and plan.charge.delta == Fraction(1, 10**6)


def test_evaluate_shows_progress_per_trial_on_a_terminal_only(tmp_path, cli, monkeypatch):
    """evaluate calls back after each trial; the CLI draws a rich bar on stderr only when stderr is
    a terminal (the captured, non-terminal stderr of the CLI run above gets no bar)."""
    import io

    from dprelease.cli.simulate_cmds import _trial_progress
    from dprelease.evaluate.accuracy import evaluate
    from dprelease.spec import load_spec

    done: list[int] = []
    evaluate(load_spec(write(tmp_path)), 3, on_trial=done.append)
    assert done == [1, 2, 3]

    result = cli("evaluate", write(tmp_path), "--trials", "2", "--ledger", make_ledger(tmp_path / "none.sqlite"))
    assert result.code == 0, result
    assert "━" not in result.stderr and "\x1b" not in result.stderr, result.stderr

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("TERM", "xterm")
    with _trial_progress("acs: simulated releases", 4) as on_trial:
        assert on_trial is not None
        for k in range(1, 5):
            on_trial(k)
    assert "acs: simulated releases" in terminal.getvalue(), terminal.getvalue()

    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    with _trial_progress("acs: simulated releases", 4) as on_trial:
        assert on_trial is None
    assert pipe.getvalue() == ""
