"""Approximate (ε, δ)-DP releases: (ε, δ) budgets, the discrete Gaussian calibrated through zCDP
and checked against its exact hockey-stick divergence, pure mechanisms at δ = 0, ledgers that
charge δ, and the Gaussian's L2 sensitivities checked by enumerating neighbours."""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import ApproxDP, PureDP, delta_of
from dprelease.accounting import Terms
from dprelease.accounting import Neighbouring
from dprelease.plan.sensitivities import sum_l1, sum_l2_squared
from dprelease.accounting import approx_to_zcdp, zcdp_epsilon, zcdp_to_pure
from dprelease.ledger import Ledger, resolve_location
from dprelease.ledger.schema import SCHEMA_VERSION
from dprelease.plan import plan_release
from dprelease.spec import load_spec
from dprelease.spec.model import SumMeasure
from tests.conftest import ROOT, assert_edit_refused, unpinned
from tests.stats import opendp
from tests.test_run import run
from tests.ledgers import init_at

SPEC = """\
release: acs-approx-2019
dataset:
  name: nist-acs-approx
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{epsilon: {lifetime}, delta: 2e-6}}
privacy: {{definition: approx, unit: {unit}}}
budget: {{epsilon: 1, delta: 1e-6}}
columns:
  PUMA: {{domain_file: {domains}/puma.txt, geographic: true}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
geography:
  levels: [STATE, PUMA]
  STATE: {{from: PUMA, prefix: 2}}
tables:
  - name: persons_by_sex_age_group
    group_by: [geography, SEX, AGE_GROUP]
    epsilon: {{root: 0.1, STATE: 0.2, PUMA: 0.3}}
  - name: income_by_sex
    group_by: [SEX]
    measure: {{sum: PINCP, bounds: [0, 200000], granularity: 1000, missing: zero}}
    epsilon: 0.2
    post_process: none
  - name: persons_by_sex
    group_by: [SEX]
    epsilon: 0.2
    mechanism: discrete_laplace
"""


def write(tmp_path, unit="row", lifetime="2", name="approx.yaml"):
    path = tmp_path / name
    text = SPEC.format(data=ROOT / "data" / "nist_acs" / "national2019.csv", domains=ROOT / "configs" / "domains",
                       unit=unit, lifetime=lifetime)
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the exact privacy curve


def pmf(sigma2: float, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """The discrete Gaussian N_Z(0, σ²) on a support wide enough that the rest is < 1e-300."""
    half = int(40 * math.sqrt(sigma2)) + reach + 40
    support = np.arange(-half, half + 1)
    weights = np.exp(-support.astype(float) ** 2 / (2 * sigma2))
    return support, weights / weights.sum()


def exact_delta(sigma2: float, shift: int, epsilon: float, dims: int = 1) -> float:
    """The hockey-stick divergence sup over events of P(M(x) ∈ S) − e^ε P(M(x') ∈ S) for the
    discrete Gaussian of σ² when ``dims`` cells each move by ``shift``. With P centred at 0 and
    Q at shift, the privacy loss ln P(z)/Q(z) = Σ ((z_i − shift)² − z_i²)/(2σ²) =
    (dims·shift² − 2·shift·s)/(2σ²) depends on s = Σ z_i alone, whose law is a convolution;
    δ(ε) = E_P[max(0, 1 − e^(ε − loss))]. (The other direction is the same by symmetry.)"""
    support, p = pmf(sigma2, shift)
    dist, offset = p, support[0]
    for _ in range(dims - 1):
        dist, offset = np.convolve(dist, p), offset + support[0]
    s = np.arange(dist.size) + offset
    loss = (dims * shift ** 2 - 2 * shift * s) / (2 * sigma2)
    with np.errstate(over="ignore"):  # e^(ε − loss) = inf where the loss is very negative: contributes 0
        return float(np.sum(dist * np.maximum(0.0, -np.expm1(epsilon - loss))))


def gaussian_tables(plan):
    return [t for t in plan.tables if t.mechanism == "discrete_gaussian"]


def test_every_gaussian_meets_its_epsilon_delta_exactly(tmp_path):
    """For each planned Gaussian — counts (Δ = 1), a sum (Δ = 200 granularity units) and counts
    of persons with up to 3 rows (Δ = 3) — the exact δ at the table's ε is within its δ; and a
    broken variant (σ² halved, or σ² planned for Δ = 1 used where Δ = 3) is caught."""
    for unit in ("row", "{id: SERIALNO, max_rows: 3}"):
        plan = plan_release(load_spec(write(tmp_path, unit=unit)), None)
        tables = gaussian_tables(plan)
        assert len(tables) == 4
        for t in tables:
            shift = math.isqrt(t.sensitivity)
            assert shift * shift == t.sensitivity  # add/remove: one cell moves, 1-D
            eps, delta, sigma2 = float(t.budget.epsilon), float(t.delta), float(t.scale)
            achieved = exact_delta(sigma2, shift, eps)
            assert achieved <= delta, (t.key, achieved, delta)
            assert achieved > delta / 100, (t.key, achieved, delta)  # calibrated, not wildly over-noised
            assert exact_delta(sigma2 / 2, shift, eps) > delta  # negative control: halved σ²
            if shift > 1:
                assert exact_delta(sigma2 / t.sensitivity, shift, eps) > delta  # σ² for Δ = 1 where Δ = 3


def test_change_one_record_moves_two_cells(tmp_path):
    """Bounded DP (invariants): Δ₂² = 2, two cells each move by one; the exact 2-D divergence is
    within δ, and σ² planned as if Δ₂² were 1 is caught."""
    path = write(tmp_path)
    path.write_text(path.read_text().replace("tables:\n", "invariants: {totals: [STATE]}\ntables:\n", 1))
    plan = plan_release(load_spec(path), None)
    counts = [t for t in gaussian_tables(plan) if t.name == "persons_by_sex_age_group"]
    for t in counts:
        assert t.sensitivity == 2
        assert exact_delta(float(t.scale), 1, float(t.budget.epsilon), dims=2) <= float(t.delta)
        assert exact_delta(float(t.scale) / 2, 1, float(t.budget.epsilon), dims=2) > float(t.delta)


def test_the_delta_budget_is_split_by_epsilon(tmp_path):
    plan = plan_release(load_spec(write(tmp_path)), None)
    assert plan.approx and plan.release_budget.delta == Fraction(1, 10**6)
    by_key = {t.key: t for t in plan.tables}
    assert by_key["persons_by_sex"].delta == 0 and by_key["persons_by_sex"].mechanism == "discrete_laplace"
    gaussian_eps = Fraction(8, 10)  # 0.1 + 0.2 + 0.3 + 0.2
    for t in gaussian_tables(plan):
        assert t.delta == Fraction(1, 10**6) * t.budget.epsilon / gaussian_eps
        assert t.charge == t.budget  # the ledger is charged (ε, δ)
    assert plan.charge == plan.total == ApproxDP(Fraction(1), Fraction(1, 10**6)) and plan.fits


def test_approx_to_zcdp_agrees_with_opendp():
    """Our ρ for (ε, δ) is within what OpenDP's zCDP → (ε, δ) conversion allows, and not more
    than 0.1% below its largest such ρ; our σ² for that ρ gives OpenDP's ρ back."""
    dp = opendp()
    for eps, delta in ((Fraction(1), Fraction(1, 10**6)), (Fraction(1, 10), Fraction(1, 10**9)),
                       (Fraction(3), Fraction(1, 10**5))):
        rho = approx_to_zcdp(eps, delta)

        def their_epsilon(r: float) -> float:
            scale = math.sqrt(1 / (2 * r))
            meas = dp.c.make_zCDP_to_approxDP(dp.m.make_gaussian(dp.atom_domain(T=float, nan=False),
                                                                dp.absolute_distance(T=float), scale=scale))
            return dp.c.make_fix_delta(meas, float(delta)).map(1.0)[0]

        assert their_epsilon(float(rho)) <= float(eps) * (1 + 1e-9), (eps, delta)
        assert their_epsilon(float(rho) * 1.001) > float(eps), (eps, delta)  # not needlessly conservative
        assert float(zcdp_epsilon(rho, delta)) <= float(eps) * (1 + 1e-5)  # our own bound is consistent


def test_zcdp_to_pure_is_the_largest_safe_epsilon():
    for rho in (Fraction(1, 2), Fraction(1, 50), Fraction(7, 3)):
        eps = zcdp_to_pure(rho)
        assert eps * eps / 2 <= rho
        assert (eps + Fraction(1, 10**10)) ** 2 / 2 > rho


# ---------------------------------------------------------------- sensitivities by enumeration


@pytest.mark.parametrize("bounds,granularity", [((0, 6), 2), ((-4, 4), 2), ((-2, 6), 1), ((3, 9), 3)])
@pytest.mark.parametrize("cells", [1, 3])
def test_sum_sensitivities_match_every_neighbour(bounds, granularity, cells):
    """Enumerate every row (cell, value in [low, high]) and every neighbour under both relations:
    the largest L1 and squared L2 change of the histogram in granularity units equal what the
    planner uses (not just bound it: an over-estimate wastes budget, an under-estimate leaks)."""
    low, high = bounds
    m = SumMeasure(column="X", low=low, high=high, granularity=granularity)
    values = [v // granularity for v in range(low, high + 1, granularity)]
    rows = [(c, v) for c in range(cells) for v in values] + [None]  # None: dropped or outside where

    def vector(row):
        out = [0] * cells
        if row is not None:
            out[row[0]] += row[1]
        return out

    add_remove = [vector(r) for r in rows]
    change = [[a - b for a, b in zip(vector(r), vector(s))] for r, s in itertools.product(rows, rows)]
    for bounded, diffs in ((False, add_remove), (True, change)):
        l1 = max(sum(abs(x) for x in d) for d in diffs)
        l2 = max(sum(x * x for x in d) for d in diffs)
        relation = Neighbouring(change=bounded, why="invariants" if bounded else None)
        assert sum_l1(m.low, m.high, relation, cells) == l1 * granularity, (bounded, cells)
        assert sum_l2_squared(m.low, m.high, m.granularity, relation, cells) == l2, (bounded, cells)


# ---------------------------------------------------------------- spec errors


@pytest.mark.parametrize("old,new,field,words", [
    ("budget: {epsilon: 1, delta: 1e-6}", "budget: {epsilon: 1}", "budget", "add delta"),
    ("{epsilon: 2, delta: 2e-6}", "{epsilon: 2}", "dataset.lifetime_budget", "add delta"),
    ("budget: {epsilon: 1, delta: 1e-6}", "budget: {epsilon: 1, delta: 1}", "budget.delta", "between 0 and 1"),
    ("budget: {epsilon: 1, delta: 1e-6}", "budget: {epsilon: 1, delta: -1e-6}", "budget.delta", ""),
    ("    epsilon: 0.2\n    mechanism: discrete_laplace\n",
     "    epsilon: 0.2\n    mechanism: discrete_laplace\n    delta: 1e-7\n", "tables[2].delta", "δ = 0"),
    ("    post_process: none\n", "    post_process: none\n    delta: 2e-6\n", "budget.delta", "over the release"),
    ("    post_process: none\n", "    post_process: none\n    delta: 1e-6\n", "budget.delta", "leaving none"),
    ("privacy: {definition: approx, unit: row}", "privacy: {definition: approx, unit: row, delta: 1e-6}",
     "privacy.delta", "budget: {epsilon: E, delta: D}"),
    ("    epsilon: 0.2\n    mechanism: discrete_laplace\n", "    rho: 0.2\n", "tables[2].rho", "mix"),
])
def test_bad_approx_specs_are_refused_with_the_field(tmp_path, cli, old, new, field, words):
    assert_edit_refused(cli, write(tmp_path), old, new, field, words)


@pytest.mark.parametrize("old,new,field,words", [
    ("privacy: {definition: approx, unit: row}", "privacy: {definition: pure, unit: row}", "budget.delta",
     "privacy.definition: approx"),
    ("    mechanism: discrete_laplace\n", "    mechanism: discrete_gaussian\n", "tables[2].mechanism",
     "not pure ε-DP"),
])
def test_gaussian_and_delta_need_an_approx_or_zcdp_release(tmp_path, cli, old, new, field, words):
    path = write(tmp_path)
    text = path.read_text().replace("privacy: {definition: approx, unit: row}", "privacy: {definition: pure, unit: row}")
    text = text.replace("budget: {epsilon: 1, delta: 1e-6}", "budget: {epsilon: 1}" if "mechanism" in old
                        else "budget: {epsilon: 1, delta: 1e-6}")
    text = text.replace("{epsilon: 2, delta: 2e-6}", "{epsilon: 2}")
    text = text.replace("    post_process: none\n", "    post_process: none\n    mechanism: discrete_laplace\n")
    text = text.replace("    epsilon: {root: 0.1", "    mechanism: discrete_laplace\n    epsilon: {root: 0.1")
    if "mechanism" in old:
        text = text.replace("    epsilon: 0.2\n    mechanism: discrete_laplace\n",
                            "    epsilon: 0.2\n    mechanism: discrete_gaussian\n")
    path.write_text(text)
    result = cli("validate", path)
    assert result.code == 2 and field in result.stderr and words in result.stderr, result.stderr


# ---------------------------------------------------------------- end to end, and the ledger's δ


def test_an_approx_release_end_to_end(tmp_path, release_env, cli):
    """Published with the manifest's (ε, δ); the ledger charged ε and δ; a second release that
    fits the lifetime ε but not the lifetime δ is refused before the data is read (exit 3)."""
    path = write(tmp_path, lifetime="5")
    ledger = tmp_path / "ledger.sqlite"
    proc = run(path, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = tmp_path / "out" / "acs-approx-2019"
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["privacy"]["definition"] == "approx"
    life = manifest["budget"]["lifetime"]  # the δ of the lifetime budget: cap, before and after
    assert [life[k]["delta"] for k in ("cap", "spent_before", "spent_after")] == ["1/500000", "0", "1/1000000"]
    assert manifest["budget"]["total"] == manifest["budget"]["ledger_charge"] == {"epsilon": "1", "delta": "1/1000000"}
    assert manifest["budget"]["lifetime"]["cap"] == {"epsilon": "5", "delta": "1/500000"}
    mechanisms = {t["name"]: t["mechanism"] for t in manifest["tables"]}
    assert mechanisms == {"persons_by_sex_age_group": "discrete_gaussian", "income_by_sex": "discrete_gaussian",
                          "persons_by_sex": "discrete_laplace"}
    report = (release / "budget_report.md").read_text()
    assert "Approximate (ε, δ)-differential privacy" in report and "δ = 1/1000000" in report
    opened = Ledger.open(resolve_location(str(ledger)))
    state = opened.state("nist-acs-approx")
    opened.close()
    assert state.terms == Terms("approx") and state.spent == ApproxDP(1, Fraction(1, 10**6))
    shown = cli("ledger", "--ledger", ledger)
    assert shown.code == 0 and "cap δ = 1/500000" in shown.stdout, shown

    # the lifetime ε (5) has room for a second and third release; the lifetime δ (2e-6) for one more only
    second = write(tmp_path, lifetime="5", name="second.yaml")
    second.write_text(second.read_text().replace("acs-approx-2019", "acs-approx-2019-b"))
    assert run(second, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env).returncode == 0
    third = write(tmp_path, lifetime="5", name="third.yaml")
    third.write_text(third.read_text().replace("acs-approx-2019", "acs-approx-2019-c"))
    planned = cli("plan", third, "--ledger", ledger)
    assert planned.code == 3 and "Lifetime δ" in planned.stdout and "OVER" in planned.stdout, planned
    epsilon_line = next(line for line in planned.stdout.splitlines() if line.startswith("Lifetime budget"))
    assert epsilon_line.endswith("fits"), epsilon_line  # only δ is over, and the refusal says so
    assert "plan exceeds the lifetime δ budget of nist-acs-approx" in planned.stderr, planned.stderr
    refused = run(third, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert refused.returncode == 3 and "lifetime δ budget" in refused.stderr, refused.stderr
    assert not (tmp_path / "out" / "acs-approx-2019-c").exists()
    opened = Ledger.open(resolve_location(str(ledger)))
    state = opened.state("nist-acs-approx")
    opened.close()
    assert state.spent == ApproxDP(2, Fraction(2, 10**6))  # nothing spent by the refusal

    # an operator may raise the δ cap, by recorded decision
    raised = cli("ledger", "set-budget", "nist-acs-approx", "--epsilon", "5", "--delta", "3e-6",
                 "--reason", "board decision 2026-11", "--ledger", ledger)
    assert raised.code == 0 and "lifetime δ of nist-acs-approx: cap 3/1000000" in raised.stdout, raised


def test_pure_releases_on_an_approx_ledger_cost_no_delta(tmp_path):
    approx = load_spec(write(tmp_path))
    ledger = init_at(resolve_location(str(tmp_path / "l.sqlite")))
    first = plan_release(approx, None)
    ledger.reserve(dataset=approx.dataset.name, release=approx.release,
                   charges=first.ledger_charges(), spec_fingerprint=first.fingerprint,
                   lifetime_from_spec=approx.dataset.lifetime, terms=first.terms)
    pure_path = tmp_path / "pure.yaml"
    pure_path.write_text(unpinned((ROOT / "configs" / "acs_demo.yaml").read_text())
                         .replace("nist-acs-national-2019", "nist-acs-approx")
                         .replace("../data/nist_acs/", str(ROOT / "data" / "nist_acs") + "/")
                         .replace("domains/", str(ROOT / "configs" / "domains") + "/"))
    pure = plan_release(load_spec(pure_path), ledger.state("nist-acs-approx"))
    assert pure.terms == Terms("approx") and pure.approx and pure.charge.delta == 0
    assert all(t.delta == 0 for t in pure.tables) and pure.charge == pure.total.as_approx()
    ledger.close()


def test_the_ledger_refuses_a_delta_overspend_in_its_transaction(tmp_path):
    """The reservation itself (not only the plan) checks δ: a racing run cannot slip past."""
    from dprelease.errors import OverBudgetError

    ledger = init_at(resolve_location(str(tmp_path / "l.sqlite")))
    ledger.set_budget("d", ApproxDP(10, Fraction(1, 10**6)), reason="test", terms=Terms("approx"))
    ledger.reserve(dataset="d", release="a", charges=[("t", ApproxDP(1, Fraction(6, 10**7)))], spec_fingerprint="x",
                   lifetime_from_spec=None, terms=Terms("approx"))
    with pytest.raises(OverBudgetError, match="δ"):
        ledger.reserve(dataset="d", release="b", charges=[("t", ApproxDP(1, Fraction(6, 10**7)))],
                       spec_fingerprint="x", lifetime_from_spec=None, terms=Terms("approx"))
    state = ledger.state("d")
    assert state.spent == ApproxDP(1, Fraction(6, 10**7)) and [r.release for r in state.runs] == ["a"]
    ledger.close()


def test_a_version_1_ledger_is_migrated_in_place(tmp_path):
    """A ledger written before δ existed (schema 1) opens, gains the δ columns, keeps its spends."""
    path = tmp_path / "old.sqlite"
    ledger = init_at(resolve_location(str(path)))
    ledger.set_budget("d", PureDP(3), reason="test")
    ledger.reserve(dataset="d", release="a", charges=[("t", PureDP(Fraction(1, 2)))], spec_fingerprint="x",
                   lifetime_from_spec=None)
    ledger.close()
    con = sqlite3.connect(path)  # make it look like version 1: no δ columns
    con.execute("ALTER TABLE budget_caps DROP COLUMN delta")
    con.execute("ALTER TABLE charges DROP COLUMN delta")
    con.execute("UPDATE dprelease_meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    assert SCHEMA_VERSION == 6
    con.close()
    reopened = Ledger.open(resolve_location(str(path)))
    state = reopened.state("d")
    assert state.spent == PureDP(Fraction(1, 2)) and state.budget == PureDP(3) and delta_of(state.budget) is None
    reopened.reserve(dataset="d", release="b", charges=[("t", PureDP(Fraction(1, 2)))], spec_fingerprint="x",
                     lifetime_from_spec=None)
    assert reopened.state("d").spent == PureDP(1)
    reopened.close()
    con = sqlite3.connect(path)
    assert "delta" in [r[1] for r in con.execute("PRAGMA table_info(charges)")]
    con.close()


def test_a_large_delta_is_warned_about(tmp_path, cli):
    path = write(tmp_path)
    assert "is large" not in cli("validate", path).stderr
    path.write_text(path.read_text().replace("budget: {epsilon: 1, delta: 1e-6}", "budget: {epsilon: 1, delta: 0.01}")
                    .replace("delta: 2e-6}", "delta: 0.5}"))
    for command in ("validate", "plan"):
        result = cli(command, path, *(("--ledger", tmp_path / "l.sqlite") if command == "plan" else ()))
        assert result.code == 0 and "the release's δ = 0.01 is large" in result.stderr, result
        assert "the lifetime δ = 0.5 is large" in result.stderr
