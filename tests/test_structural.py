"""Structural zeros: cells a table's own definition (its where, and the spec's declared rules)
makes impossible are not measured, get no noise, and are published as exact zeros marked
structural; the planner lists them; a run refuses data that breaks a declared rule before
anything is reserved."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pyarrow.parquet as pq
import pytest

from dprelease.evaluate.accuracy import plan_variances
from dprelease.accounting import PureDP
from dprelease.data.histogram import where_mask
from dprelease.data.load import Encoded
from dprelease.data.rules import check_rules
from dprelease.errors import DataError
from dprelease.mechanisms.discrete_laplace import margin_of_error
from dprelease.plan.planner import measurement_plans
from dprelease.plan.structural import satisfies
from dprelease.postprocess import postprocess_release
from dprelease.spec import Condition, load_spec
from tests.conftest import ROOT, write_spec, unpinned
from tests.test_run import ledger_state, run

DEMO = ROOT / "configs" / "acs_demo.yaml"
DATA = ROOT / "data" / "nist_acs" / "national2019.csv"
PUMAS = load_spec(DEMO).column("PUMA").categories


def plans_of(spec):  # type: ignore[no-untyped-def]
    return {p.key: p for p in measurement_plans(spec)}


def small_spec(tmp_path, tables: str, rules: str = "", data: str = "A,AGE,M,S\n1,3,,1\n2,40,x,2\n") -> object:
    (tmp_path / "data.csv").write_text(data)
    body = f"""\
release: small
dataset: {{name: small, path: data.csv, lifetime_budget: {{epsilon: 10}}}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 10}}
columns:
  A: {{domain: [1, 2, 3]}}
  S: {{domain: [1, 2], labels: [Male, Female]}}
  AGE: {{range: [0, 99]}}
  M: {{domain: [x, y], missing: none}}
derived:
  BAND: {{from: AGE, bins: [0, 10, 18, 65, 100], labels: ["0-9", "10-17", "18-64", "65+"]}}
{rules}
tables:
{tables}
"""
    return load_spec(write_spec(tmp_path, body))


# ---------------------------------------------------------------- the planner (no data)


def test_the_demo_plan_lists_exactly_the_20_pumas_by_0_17_and_keeps_epsilon_and_moe():
    spec = load_spec(DEMO)
    plans = plans_of(spec)
    adults = plans["adults_by_puma_age_group"]
    assert sorted(adults.structural_labels) == sorted((p, "0-17") for p in PUMAS) and len(PUMAS) == 20
    assert adults.cells == 60 and adults.measured_cells == 40 and adults.structural_summary == ("AGE_GROUP = 0-17",)
    # the measured cells' ε, sensitivity, scale and margin are those of the table without structural handling,
    # computed independently: discrete Laplace of scale 1/ε, ε = 1/4
    assert adults.budget == PureDP(Fraction(1, 4)) and adults.sensitivity == 1 and adults.scale == 4
    assert adults.moe == margin_of_error(Fraction(4), Fraction(95, 100)) == 12
    assert sum(p.budget.epsilon for p in plans.values()) == 1  # the release costs what it cost before
    marital = plans["marital_status_by_sex"]  # where AGE_GROUP 18+ and the rule: MSP is not "not applicable"
    assert marital.structural_labels == (("Not applicable (under 15)", "Male"), ("Not applicable (under 15)", "Female"))
    assert marital.moe == margin_of_error(Fraction(10, 3), Fraction(95, 100))
    assert not plans["puma_by_sex"].structural and not plans["race_by_hispanic_origin"].structural


def test_without_the_rule_the_marital_table_has_no_structural_cells(tmp_path):
    text = unpinned(DEMO.read_text())
    start, end = text.index("rules:"), text.index("tables:")
    spec = load_spec(write_spec(tmp_path, text[:start].replace("domains/puma.txt", str(ROOT / "configs/domains/puma.txt"))
                                + text[end:]))
    plans = plans_of(spec)
    assert not plans["marital_status_by_sex"].structural
    assert len(plans["adults_by_puma_age_group"].structural) == 20  # the where alone decides this one


def test_a_categorical_where_makes_the_other_category_structural(tmp_path):
    spec = small_spec(tmp_path, "  - {name: men, group_by: [A, S], where: {S: {eq: 1}}, epsilon: 1}")
    men = plans_of(spec)["men"]
    assert men.structural_labels == (("1", "Female"), ("2", "Female"), ("3", "Female"))


def test_a_bin_only_partly_excluded_is_not_structural(tmp_path):
    spec = small_spec(tmp_path, "  - {name: t, group_by: [BAND], where: {AGE: {ge: 12}}, epsilon: 1}\n"
                                "  - {name: u, group_by: [BAND], where: {AGE: {ge: 18, lt: 65}}, epsilon: 1}")
    plans = plans_of(spec)
    assert plans["t"].structural_labels == (("0-9",),)  # 10-17 holds 12..17: not structural
    assert plans["u"].structural_labels == (("0-9",), ("10-17",), ("65+",))


def test_a_where_on_a_column_makes_its_missing_category_structural_and_other_columns_nothing(tmp_path):
    spec = small_spec(tmp_path, "  - {name: m, group_by: [M, S], where: {M: {ne: y}}, epsilon: 1}\n"
                                "  - {name: n, group_by: [A], where: {M: {eq: x}, AGE: {ge: 50}}, epsilon: 1}")
    plans = plans_of(spec)
    assert plans["m"].structural_labels == (("y", "Male"), ("y", "Female"), ("none", "Male"), ("none", "Female"))
    assert not plans["n"].structural  # conditions on columns not grouped make nothing structural


def test_rules_both_ways_and_the_contrapositive(tmp_path):
    rules = ("rules:\n  - name: m-missing-under-10\n    if: {AGE: {lt: 10}}\n    then: {M: {missing: true}}\n"
             "    both_ways: true\n")
    spec = small_spec(tmp_path, "  - {name: adults, group_by: [M], where: {BAND: {in: [18-64, 65+]}}, epsilon: 1}\n"
                                "  - {name: married, group_by: [BAND], where: {M: {eq: x}}, epsilon: 1}\n"
                                "  - {name: everyone, group_by: [BAND, M], epsilon: 1}", rules)
    plans = plans_of(spec)
    assert plans["adults"].structural_labels == (("none",),)  # AGE ≥ 18 ⇒ M present (the converse's contrapositive)
    assert plans["married"].structural_labels == (("0-9",),)  # M present ⇒ AGE ≥ 10 (the rule's contrapositive)
    assert plans["everyone"].structural_labels == (("0-9", "x"), ("0-9", "y"), ("10-17", "none"), ("18-64", "none"),
                                                   ("65+", "none"))


def test_a_where_no_row_can_satisfy_makes_every_cell_structural(tmp_path):
    spec = small_spec(tmp_path, "  - {name: none, group_by: [S], where: {AGE: {lt: 10}, BAND: {eq: 65+}}, epsilon: 1}")
    assert plans_of(spec)["none"].structural == (0, 1)


def test_a_cell_empty_in_the_data_is_not_structural(tmp_path):
    """A = 3 and AGE 65+ never occur in the data: still measured (structural cells never depend on it)."""
    spec = small_spec(tmp_path, "  - {name: t, group_by: [A, BAND], epsilon: 1}")
    assert not plans_of(spec)["t"].structural
    other = small_spec(tmp_path, "  - {name: t, group_by: [A, BAND], epsilon: 1}", data="A,AGE,M,S\n3,70,x,1\n")
    assert plans_of(other) == plans_of(spec)


def test_the_planner_and_the_data_layer_agree_on_what_a_condition_means(tmp_path):
    spec = small_spec(tmp_path, "  - {name: t, group_by: [A], epsilon: 1}")
    for column, conditions in {
        "AGE": [Condition("AGE", op, (v,)) for op in ("eq", "ne", "ge", "gt", "le", "lt") for v in (0, 17, 99)],
        "M": [Condition("M", "eq", ("x",)), Condition("M", "ne", ("x",)), Condition("M", "in", ("x", "y")),
              Condition("M", "not_in", ("y",)), Condition("M", "missing", ()), Condition("M", "present", ())],
        "BAND": [Condition("BAND", "in", ("0-9", "65+")), Condition("BAND", "not_in", ("18-64",))],
    }.items():
        size = spec.column(column).size
        data = Encoded({column: np.arange(size)}, rows_read=size, rows_dropped=0)
        for condition in conditions:
            assert np.array_equal(where_mask(spec, (condition,), data), satisfies(spec.column(column), condition)), \
                condition


def test_a_mode_and_a_mean_leave_structural_cells_unmeasured(tmp_path):
    spec = small_spec(tmp_path, "  - {name: mode, group_by: [S], where: {S: {eq: 2}}, measure: {mode: A}, epsilon: 1}\n"
                                "  - {name: mean, group_by: [S], where: {S: {eq: 2}}, epsilon: 1,\n"
                                "     measure: {mean: INCOME, bounds: [0, 100], granularity: 1}}")
    from dprelease.lifecycle.measure import measure_mean, measure_mode

    plans = plans_of(spec)
    modes = [measure_mode(np.array([0, 0, 0, 5, 1, 0], dtype=np.int64), plans["mode"], 3) for _ in range(50)]
    assert all(m[0] == -1 and m[1] in (0, 1, 2) for m in modes)
    means = [measure_mean(np.array([[0, 300], [0, 10]], dtype=np.int64), plans["mean"]) for _ in range(50)]
    assert all(m[0, 0] == 0 and m[1, 0] == 0 for m in means)
    published = postprocess_release(spec, {("mode", None): modes[0], ("mean", None): means[0]},
                                    {})  # modes and means: no noise variances (nothing consistent here)
    assert published[("mode", None)][0] == -1
    assert np.isnan(published[("mean", None)][0, 0]) and published[("mean", None)][1, 0] == 0


# ---------------------------------------------------------------- noise and post-processing


def test_structural_cells_are_never_noised(monkeypatch):
    """Over many draws with the real CSPRNG, every structural cell is exactly 0, and noise is drawn
    for the measured cells only."""
    import dprelease.lifecycle.measure as measure
    import dprelease.plan.measurements as noise  # the plan's DiscreteLaplace draws with this sampler

    spec = load_spec(DEMO)
    plan = plans_of(spec)["adults_by_puma_age_group"]
    counts = np.zeros(plan.cells, dtype=np.int64)
    measured = plan.structural_mask() == False  # noqa: E712
    counts[measured] = 100
    drawn = []
    real = noise.discrete_laplace
    monkeypatch.setattr(noise, "discrete_laplace", lambda scale, n, rng=None: drawn.append(n) or real(scale, n, rng=rng))
    noisy = np.stack([measure.measure_counts(counts, plan) for _ in range(2000)])
    assert set(drawn) == {40}
    assert not noisy[:, ~measured].any()  # exactly 0 in every draw
    # the measured cells got noise of the planned scale: mean ≈ 100, variance ≈ 2p/(1-p)² with p = e^(-1/4)
    # (sd of the variance estimate over 80,000 draws ≈ 0.4, so 3 is over 7 standard deviations: ~1e-12)
    p = np.exp(-1 / 4)
    assert abs(noisy[:, measured].var() - 2 * p / (1 - p) ** 2) < 3 and abs(noisy[:, measured].mean() - 100) < 0.2


def test_a_structural_cell_holding_rows_is_a_bug_caught_before_any_noise(monkeypatch):
    import dprelease.lifecycle.measure as measure
    import dprelease.plan.measurements as noise

    plan = plans_of(load_spec(DEMO))["adults_by_puma_age_group"]
    monkeypatch.setattr(noise, "discrete_laplace", lambda *a, **k: pytest.fail("noise drawn"))
    with pytest.raises(AssertionError, match="bug"):
        measure.measure_counts(np.ones(plan.cells, dtype=np.int64), plan)


def test_consistent_post_processing_keeps_structural_cells_at_zero(tmp_path):
    """A census-style group (geography: STATE, PUMA) whose tables have structural cells."""
    text = unpinned((ROOT / "configs" / "acs_census.yaml").read_text()).replace("domains/puma.txt",
                                                                     str(ROOT / "configs" / "domains" / "puma.txt"))
    text = text.replace("../data/nist_acs/national2019.csv", str(DATA))
    text = text.replace("    consistency: persons\n", "    consistency: persons\n    where: {AGEP: {ge: 18}, HISP: {ne: 0}}\n")
    spec = load_spec(write_spec(tmp_path, text))
    from dprelease.data import encode
    from dprelease.evaluate.accuracy import exact_measurements
    from dprelease.lifecycle.measure import measure_counts
    from tests.test_consistent import check_consistency

    plans = plans_of(spec)
    assert {k: len(p.structural) for k, p in plans.items()} == {
        "persons_by_sex_age_group/root": 2, "persons_by_sex_age_group/STATE": 2 * 16,
        "persons_by_sex_age_group/PUMA": 2 * 20, "persons_by_race_hispanic/root": 9,
        "persons_by_race_hispanic/STATE": 9 * 16, "persons_by_race_hispanic/PUMA": 9 * 20}
    exact, scales = exact_measurements(spec, encode(spec))
    by_key = {(p.name, p.level): p for p in plans.values()}
    for _ in range(3):
        noisy = {k: measure_counts(v, by_key[k]) for k, v in exact.items()}
        published = postprocess_release(spec, noisy, plan_variances(spec))
        check_consistency(spec, published)
        for key, plan in by_key.items():
            assert not published[key][plan.structural_mask()].any(), key
        clamped = postprocess_release(spec, noisy, plan_variances(spec), method="clamp")
        assert all(not clamped[k][p.structural_mask()].any() for k, p in by_key.items())


# ---------------------------------------------------------------- declared rules against the data


def test_check_rules_counts_the_rows_that_break_a_rule_and_never_quotes_them(tmp_path):
    rules = "rules:\n  - {name: m-missing-under-10, if: {AGE: {lt: 10}}, then: {M: {missing: true}}, both_ways: true}\n"
    ok = small_spec(tmp_path, "  - {name: t, group_by: [A], epsilon: 1}", rules,
                    data="A,AGE,M,S\n1,3,,1\n2,40,x,2\n")
    check_rules(ok)
    bad = small_spec(tmp_path, "  - {name: t, group_by: [A], epsilon: 1}", rules,
                     data="A,AGE,M,S\n1,3,,1\n2,47,,2\n3,5,y,1\n1,61,,2\n")
    with pytest.raises(DataError) as error:
        check_rules(bad)
    message = str(error.value)
    assert "m-missing-under-10" in message and "3 rows" in message and "spec.yaml" in message
    quoted = message.replace(str(tmp_path), "")  # (the test's own folder may hold any digits: pytest-161)
    assert "47" not in quoted and "61" not in quoted


def test_a_spec_without_rules_reads_nothing_more(tmp_path, monkeypatch):
    import dprelease.data.rules as rules

    monkeypatch.setattr(rules, "source", lambda spec: pytest.fail("the data was read"))
    check_rules(small_spec(tmp_path, "  - {name: t, group_by: [A], epsilon: 1}"))


def test_the_msp_rule_holds_in_the_shipped_data():
    check_rules(load_spec(DEMO))  # AGEP < 15 ⇔ MSP missing, in every one of the 27,253 rows


def test_a_run_whose_data_breaks_a_rule_is_refused_and_spends_nothing(tmp_path, release_env):
    text = unpinned(DEMO.read_text()).replace("if: {AGEP: {lt: 15}}", "if: {AGEP: {lt: 16}}")
    text = text.replace("domains/puma.txt", str(ROOT / "configs" / "domains" / "puma.txt"))
    text = text.replace("../data/nist_acs/national2019.csv", str(DATA))
    spec = write_spec(tmp_path, text)
    ledger = tmp_path / "ledger.sqlite"
    proc = run(spec, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert proc.returncode == 2, proc.stderr
    assert "msp-not-applicable-under-15" in proc.stderr and "Nothing was reserved" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "acs-demo-2019").exists()
    assert not (tmp_path / "out" / "_internal" / "acs-demo-2019" / "run.json").exists()
    state = ledger_state("nist-acs-national-2019", f"sqlite:///{ledger}") if ledger.exists() else None
    assert state is None or (state.spent == PureDP(0) and not state.runs)


# ---------------------------------------------------------------- the demo, end to end


@pytest.fixture(scope="module")
def demo_releases(tmp_path_factory, release_env_module):
    """Three runs of the demo (three release names, one ledger)."""
    base = tmp_path_factory.mktemp("structural")
    out, ledger = base / "out", base / "ledger.sqlite"
    releases = []
    for i in range(3):
        text = (unpinned(DEMO.read_text()).replace("release: acs-demo-2019", f"release: structural-{i}")
                .replace("domains/puma.txt", str(ROOT / "configs" / "domains" / "puma.txt"))
                .replace("../data/nist_acs/national2019.csv", str(DATA)))
        spec = write_spec(base, text, f"spec-{i}.yaml")
        proc = run(spec, "--output-dir", out, "--ledger", ledger, env=release_env_module)
        assert proc.returncode == 0, proc.stderr
        releases.append(out / f"structural-{i}")
    return releases


def test_the_demo_publishes_exact_zeros_marked_structural_in_every_run(demo_releases):
    seen = set()
    for release in demo_releases:
        rows = list(csv.DictReader((release / "tables" / "adults_by_puma_age_group.csv").open()))
        assert list(rows[0]) == ["PUMA", "AGE_GROUP", "count", "structural"] and len(rows) == 60
        for r in rows:
            assert (r["AGE_GROUP"] == "0-17") == (r["structural"] == "true")
            if r["AGE_GROUP"] == "0-17":
                assert r["count"] == "0"
        seen.add(tuple(r["count"] for r in rows if r["structural"] == "false"))
        raw = pq.read_table(release / "measurements" / "adults_by_puma_age_group.parquet").to_pylist()
        assert all((r["noisy_count"] == 0) for r in raw if r["structural"])
        assert [r["structural"] for r in raw] == [r["AGE_GROUP"] == "0-17" for r in raw]
        manifest = json.loads((release / "manifest.json").read_text())
        entry = next(t for t in manifest["tables"] if t["name"] == "adults_by_puma_age_group")
        assert entry["cells"] == 60 and entry["measured_cells"] == 40 and entry["structural_cells"] == 20
        assert sorted(map(tuple, entry["structural"]["cells"])) == sorted((p, "0-17") for p in PUMAS)
        assert entry["budget"] == {"epsilon": "1/4"} and entry["moe95"] == 12 and entry["scale"] == "4"
        marital = list(csv.DictReader((release / "tables" / "marital_status_by_sex.csv").open()))
        assert [(r["MSP"], r["count"]) for r in marital if r["structural"] == "true"] == [
            ("Not applicable (under 15)", "0")] * 2
        assert "structural" not in next(csv.DictReader((release / "tables" / "puma_by_sex.csv").open()))
        assert "## Structural zeros" in (release / "budget_report.md").read_text()
    assert len(seen) == 3  # the measured cells are noisy: three different draws


def test_dprelease_postprocess_agrees_on_structural_cells(demo_releases):
    release = demo_releases[0]
    for method in ("consistent", "none"):
        proc = subprocess.run([sys.executable, "-m", "dprelease", "postprocess", str(release), "--method", method],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    for version in sorted((release / "postprocessed").iterdir()):
        for name in ("adults_by_puma_age_group", "marital_status_by_sex"):
            again = list(csv.DictReader((version / "tables" / f"{name}.csv").open()))
            first = list(csv.DictReader((release / "tables" / f"{name}.csv").open()))
            assert [r["structural"] for r in again] == [r["structural"] for r in first]
            assert all(r["count"] == "0" for r in again if r["structural"] == "true")


def test_an_altered_structural_list_is_refused(demo_releases, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(demo_releases[1], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = next(t for t in manifest["tables"] if t["name"] == "adults_by_puma_age_group")
    entry["structural"]["cells"] = entry["structural"]["cells"][1:]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "dprelease", "postprocess", str(copy)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "structural cells" in proc.stderr, proc.stderr


def test_a_release_from_before_structural_zeros_is_post_processed_as_published(demo_releases, tmp_path):
    """Its manifest lists no structural cells: every cell was measured, and stays so."""
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(demo_releases[2], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for entry in manifest["tables"]:
        for key in ("structural_cells", "measured_cells", "structural"):
            entry.pop(key, None)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "dprelease", "postprocess", str(copy), "--method", "none"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [version] = (copy / "postprocessed").iterdir()
    assert list(next(csv.DictReader((version / "tables" / "adults_by_puma_age_group.csv").open()))) == [
        "PUMA", "AGE_GROUP", "count"]


def test_structural_zeros_omit_leaves_the_cells_out(tmp_path):
    from dprelease.publish.layout import write_table

    text = unpinned(DEMO.read_text()).replace('where: {AGEP: {ge: 18}}', 'where: {AGEP: {ge: 18}}\n    structural_zeros: omit')
    text = text.replace("domains/puma.txt", str(ROOT / "configs" / "domains" / "puma.txt"))
    spec = load_spec(write_spec(tmp_path, text))
    table = next(t for t in spec.tables if t.name == "adults_by_puma_age_group")
    plan = plans_of(spec)["adults_by_puma_age_group"]
    values = np.where(plan.structural_mask(), 0, 7)
    path = write_table(spec, table, table.group_by, None, values, tmp_path, plan.structural_mask())
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 40 and list(rows[0]) == ["PUMA", "AGE_GROUP", "count"]
    assert {r["AGE_GROUP"] for r in rows} == {"18-64", "65+"}


def test_planning_and_post_processing_never_import_the_data_readers_or_the_cli():
    proc = subprocess.run([sys.executable, "-c", "import sys, dprelease.plan, dprelease.plan.structural, "
                           "dprelease.postprocess; bad = sorted(m for m in sys.modules if m.startswith(('dprelease.data', "
                           "'dprelease.cli', 'prefect'))); assert not bad, bad"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
