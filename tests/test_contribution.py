"""Contribution bounds: privacy.unit {id, max_rows}. A person's rows beyond max_rows are dropped
(chosen with the CSPRNG), and every sensitivity is max_rows times larger. The NIST excerpt has
no person id, so these tests use synthetic data."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from dprelease.accounting import Terms
from dprelease.data import histogram, encode
from dprelease.data.load import bound_contributions
from dprelease.mechanisms import discrete_laplace
from dprelease.plan import plan_release
from dprelease.spec import fingerprint, load_spec
from tests.stats import empirical_epsilon
from tests.test_run import run
from tests.ledgers import init_at

SPEC = """\
release: bounded-test
dataset: {{name: bounded-data, path: data.csv, lifetime_budget: {{epsilon: 4}}}}
privacy: {{definition: pure, unit: {unit}}}
budget: {{epsilon: 1}}
columns:
  SEX: {{domain: [1, 2]}}
  AGEP: {{range: [0, 99]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
tables:
  - name: by_sex
    group_by: [SEX]
    epsilon: 0.5
  - name: by_age
    group_by: [AGE_GROUP]
    epsilon: 0.5
"""


@pytest.fixture()
def synthetic(tmp_path):
    """400 persons with 1 to 6 rows each (test data, not noise)."""
    gen = np.random.default_rng(5)
    rows, per_person = [], {}
    for pid in range(400):
        n = int(gen.integers(1, 7))
        per_person[f"P{pid:04d}"] = n
        rows += [f"P{pid:04d},{gen.integers(1, 3)},{gen.integers(0, 100)}" for _ in range(n)]
    (tmp_path / "data.csv").write_text("PID,SEX,AGEP\n" + "\n".join(rows) + "\n")
    (tmp_path / "spec.yaml").write_text(SPEC.format(unit="{id: PID, max_rows: 3}"))
    return tmp_path, per_person


def test_rows_beyond_the_bound_are_dropped_and_the_sensitivity_scales(synthetic):
    path, per_person = synthetic
    spec = load_spec(path / "spec.yaml")
    assert (spec.unit, spec.unit_id, spec.max_rows, spec.sensitivity) == ("person", "PID", 3, 3)
    data = encode(spec)
    expected = sum(min(n, 3) for n in per_person.values())
    assert data.rows == expected and data.rows_over_bound == sum(per_person.values()) - expected
    plan = plan_release(spec, None)
    assert {t.sensitivity for t in plan.tables} == {3} and all(t.scale == 3 / t.budget.epsilon for t in plan.tables)
    assert "add or remove one person" in plan.neighbouring
    # the row unit keeps its fingerprint (and the bound changes it)
    (path / "row.yaml").write_text(SPEC.format(unit="row"))
    row_spec = load_spec(path / "row.yaml")
    assert (row_spec.sensitivity, row_spec.max_rows) == (1, 1) and fingerprint(row_spec) != fingerprint(spec)


def test_which_rows_stay_is_uniform():
    """20,000 persons with 5 rows each at positions 0..4, bound 2: each position is kept with
    probability 2/5, and pairs of positions uniformly (chi-square). Control: a deterministic
    "first k rows" choice fails the same test."""
    from types import SimpleNamespace

    n, rows, k = 20_000, 5, 2
    ids = pa.chunked_array([pa.array([f"p{i}" for i in range(n) for _ in range(rows)])])
    spec = SimpleNamespace(unit_id="PID", max_rows=k, dataset=SimpleNamespace(resolved_path="synthetic"))
    kept = bound_contributions(spec, ids, np.ones(n * rows, dtype=bool)).reshape(n, rows)
    assert (kept.sum(axis=1) == k).all()
    every_pair = list(itertools.combinations(range(rows), k))
    pairs = Counter(tuple(np.flatnonzero(r)) for r in kept)
    assert stats.chisquare([pairs[p] for p in every_pair]).pvalue > 1e-6
    first_k = Counter([(0, 1)] * n)  # the control: keep a person's first k rows
    assert stats.chisquare([first_k[p] for p in every_pair]).pvalue < 1e-6


def test_a_row_without_an_id_is_an_error(synthetic, cli):
    path, _ = synthetic
    data = path / "data.csv"
    data.write_text(data.read_text() + ",1,30\n")
    result = cli("run", path / "spec.yaml", "--output-dir", path / "out")
    assert result.code == 2 and "no PID" in result.stderr and "Traceback" not in result.stderr, result


def test_the_unit_id_cannot_be_a_published_column(tmp_path, cli):
    (tmp_path / "spec.yaml").write_text(SPEC.format(unit="{id: SEX, max_rows: 2}"))
    result = cli("validate", tmp_path / "spec.yaml")
    assert result.code == 2 and "privacy.unit.id" in result.stderr, result


def test_privacy_loss_of_one_person_with_k_rows(tmp_path):
    """Through the release path: one person with 5 rows of one SEX is added to data whose other
    persons have at most 3 rows; the bound keeps 3 of the 5 (bound_contributions, then the
    histogram), so the neighbouring by_sex histograms differ by exactly 3 in one cell, every
    time. With the planner's scale the tight event {y ≥ x + 3} has loss ε; with scale 1/ε (the
    bound ignored) it is 3ε: caught."""
    path = tmp_path
    rows = [f"P{p},{1 + p % 2},{p % 90}" for p in range(200) for _ in range(1 + p % 3)]
    (path / "data.csv").write_text("PID,SEX,AGEP\n" + "\n".join(rows) + "\n")
    (path / "spec.yaml").write_text(SPEC.format(unit="{id: PID, max_rows: 3}"))
    spec = load_spec(path / "spec.yaml")
    table = spec.tables[0]
    without = histogram(spec, table, encode(spec))
    base = (path / "data.csv").read_text()
    (path / "data.csv").write_text(base + "".join("ZZZZ,2,40\n" for _ in range(5)))
    diffs = {tuple(histogram(spec, table, encode(spec)) - without) for _ in range(5)}
    assert diffs == {(0, 3)}, diffs
    plan = plan_release(spec, None).tables[0]
    n, x = 1_000_000, int(without[1])
    epsilon = plan.budget.epsilon
    for scale, expected in ((plan.scale, float(epsilon)), (1 / epsilon, 3 * float(epsilon))):
        estimate, se = empirical_epsilon(x + discrete_laplace(scale, n) >= x + 3,
                                         x + 3 + discrete_laplace(scale, n) >= x + 3)
        assert abs(estimate - expected) < 6 * se, (scale, estimate, expected, se)


def test_a_bounded_release_end_to_end(synthetic, release_env):
    path, _ = synthetic
    proc = run(path / "spec.yaml", "--output-dir", path / "out", "--ledger", path / "ledger.sqlite", env=release_env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((path / "out" / "bounded-test" / "manifest.json").read_text())
    assert manifest["privacy"]["contribution_bound"] == {"id": "PID", "max_rows": 3}
    assert {t["sensitivity"] for t in manifest["tables"]} == {3}
    report = (path / "out" / "bounded-test" / "budget_report.md").read_text()
    assert "contributes at most 3 rows" in report
    published = (path / "out" / "bounded-test").rglob("*")
    assert not any("P0001" in p.read_text(errors="ignore") for p in published if p.is_file())  # ids never published
    record = json.loads((path / "out" / "_internal" / "bounded-test" / "run.json").read_text())
    assert record["rows"]["over_contribution_bound"] > 0


def test_a_dataset_keeps_its_privacy_unit(synthetic):
    """Budgets spent per row and per person do not add up: a dataset's ledger terms carry its unit."""
    from dprelease.errors import LedgerError
    from dprelease.ledger import resolve_location

    path, _ = synthetic
    person = load_spec(path / "spec.yaml")
    (path / "row.yaml").write_text(SPEC.format(unit="row"))
    row = load_spec(path / "row.yaml")
    ledger = init_at(resolve_location(str(path / "l.sqlite")))
    plan = plan_release(person, None)
    assert plan.terms == Terms("pure", unit_id="PID")
    ledger.reserve(dataset=person.dataset.name, release=person.release, charges=plan.ledger_charges(),
                   spec_fingerprint=plan.fingerprint, lifetime_from_spec=person.dataset.lifetime,
                   terms=plan.terms)
    state = ledger.state(row.dataset.name)
    ledger.close()
    with pytest.raises(LedgerError, match="privacy unit"):
        plan_release(row, state)
    assert plan_release(person, state).terms == Terms("pure", unit_id="PID")
