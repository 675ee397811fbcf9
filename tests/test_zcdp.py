"""zCDP releases: ρ budgets, the discrete Gaussian with σ² = Δ₂²/(2ρ), ledgers in ρ (pure
releases charged ε²/2), implied (ε, δ) never understated (OpenDP as a test-only oracle)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import ZCDP, ApproxDP, PureDP
from dprelease.accounting import Terms
from dprelease.accounting import zcdp_epsilon
from dprelease.ledger import Ledger, resolve_location
from dprelease.lifecycle.measure import measure_counts
from dprelease.plan import plan_release
from dprelease.spec import load_spec
from tests.conftest import ROOT, unpinned
from tests.stats import chi_square_pvalue, discrete_gaussian_pmf, opendp
from tests.test_run import run
from tests.ledgers import init_at

SPEC = """\
release: acs-zcdp-2019
dataset:
  name: nist-acs-zcdp
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{rho: 2}}
privacy: {{definition: zcdp, unit: {unit}, delta: 1e-6}}
budget: {{rho: 0.5}}
columns:
  PUMA: {{domain_file: {domains}/puma.txt, geographic: true}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
geography:
  levels: [STATE, PUMA]
  STATE: {{from: PUMA, prefix: 2}}
{invariants}
tables:
  - name: persons_by_sex_age_group
    group_by: [geography, SEX, AGE_GROUP]
    rho: {{root: 0.05, STATE: 0.15, PUMA: 0.2}}
  - name: persons_by_sex
    group_by: [SEX]
    rho: 0.1
"""


def write(tmp_path, unit="row", invariants=""):
    path = tmp_path / "zcdp.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "nist_acs" / "national2019.csv", domains=ROOT / "configs" / "domains",
                                unit=unit, invariants=invariants))
    return path


def test_the_gaussian_is_calibrated_to_each_rho(tmp_path):
    plan = plan_release(load_spec(write(tmp_path)), None)
    assert plan.symbol == plan.ledger_symbol == "ρ" and plan.total == ZCDP(Fraction(1, 2))
    for t in plan.tables:
        assert t.mechanism == "discrete_gaussian" and t.sensitivity == 1
        assert t.scale == 1 / (2 * t.budget.rho) and t.charge == t.budget  # σ² = Δ₂²/(2ρ), exact here
    bounded = plan_release(load_spec(write(tmp_path, invariants="invariants: {totals: [STATE]}")), None)
    assert all(t.sensitivity == 2 and t.scale == 1 / t.budget.rho for t in bounded.tables)  # Δ₂² = 2
    persons = plan_release(load_spec(write(tmp_path, unit="{id: SERIALNO, max_rows: 3}")), None)
    assert all(t.sensitivity == 9 and t.scale == 9 / (2 * t.budget.rho) for t in persons.tables)  # Δ₂² = k²


def test_measurement_draws_the_planned_gaussian(tmp_path):
    """The release's measurement step, many times: the noise fits the discrete Gaussian of the
    planned σ², and not that of σ² for the wrong sensitivity (Δ₂² = 2 where 1 was planned)."""
    table = plan_release(load_spec(write(tmp_path)), None).tables[2]  # PUMA: ρ = 1/5, σ² = 5/2
    draws = np.concatenate([measure_counts(np.full(table.cells, 100), table) for _ in range(2_000)]) - 100
    assert chi_square_pvalue(draws, lambda k: discrete_gaussian_pmf(k, float(table.scale))) > 1e-6
    assert chi_square_pvalue(draws, lambda k: discrete_gaussian_pmf(k, 2 * float(table.scale))) < 1e-6


@pytest.mark.parametrize("text,field", [
    ("    rho: 0.1\n", None),
    ("    epsilon: 0.1\n", "tables[1].epsilon"),  # ε in a zcdp release
])
def test_one_release_cannot_mix_definitions(tmp_path, cli, text, field):
    path = write(tmp_path)
    path.write_text(path.read_text().replace("    rho: 0.1\n", text))
    result = cli("validate", path)
    if field is None:
        assert result.code == 0, result
    else:
        assert result.code == 2 and field in result.stderr and "mix" in result.stderr, result


def test_a_zcdp_release_end_to_end(tmp_path, release_env, cli):
    path = write(tmp_path)
    ledger = tmp_path / "ledger.sqlite"
    proc = run(path, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = tmp_path / "out" / "acs-zcdp-2019"
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["budget"]["release"] == {"rho": "1/2"} and manifest["budget"]["ledger_charge"] == {"rho": "1/2"}
    # the typed records name their unit: ρ is never written under an ε name there
    assert manifest["budget"]["kind"] == "zcdp" and manifest["budget"]["total"] == {"rho": "1/2"}
    assert manifest["budget"]["lifetime"]["spent_after"] == {"rho": "1/2"}
    assert all(set(t["budget"]) == {"rho"} and set(t["ledger_charge"]) == {"rho"} for t in manifest["tables"])
    assert sum(Fraction(t["ledger_charge"]["rho"]) for t in manifest["tables"]) == Fraction(manifest["budget"]["ledger_charge"]["rho"])
    assert {t["mechanism"] for t in manifest["tables"]} == {"discrete_gaussian"}
    implied = Fraction(manifest["implied_approximate_dp"]["epsilon"])
    assert implied == zcdp_epsilon(Fraction(1, 2), Fraction(1, 10**6))
    report = (release / "budget_report.md").read_text()
    assert "zero-concentrated" in report and "Implied (ε, δ)-DP" in report
    opened = Ledger.open(resolve_location(str(ledger)))
    state = opened.state("nist-acs-zcdp")
    opened.close()
    assert state.terms == Terms("zcdp") and state.spent == ZCDP(Fraction(1, 2))  # charged in ρ
    again = cli("postprocess", release)  # consistent weights from σ²: reproduces the tables
    assert again.code == 0, again
    for level in ("root", "STATE", "PUMA"):
        name = f"persons_by_sex_age_group/{level}.csv"
        assert (release / "postprocessed" / "1-as-specified" / "tables" / name).read_bytes() == \
            (release / "tables" / name).read_bytes()


def test_ledgers_keep_their_unit(tmp_path, cli):
    """A pure release on a zCDP ledger is charged Σ ε²/2; a zCDP release on a pure ledger is refused."""
    zcdp = load_spec(write(tmp_path))
    pure_path = tmp_path / "pure.yaml"
    pure_path.write_text(unpinned((ROOT / "configs" / "acs_demo.yaml").read_text())
                         .replace("nist-acs-national-2019", "nist-acs-zcdp")
                         .replace("../data/nist_acs/", str(ROOT / "data" / "nist_acs") + "/")
                         .replace("domains/", str(ROOT / "configs" / "domains") + "/"))
    pure = load_spec(pure_path)
    ledger = init_at(resolve_location(str(tmp_path / "l.sqlite")))
    first = plan_release(zcdp, None)
    ledger.reserve(dataset=zcdp.dataset.name, release=zcdp.release, charges=first.ledger_charges(),
                   spec_fingerprint=first.fingerprint, lifetime_from_spec=zcdp.dataset.lifetime,
                   terms=first.terms)
    on_zcdp = plan_release(pure, ledger.state(pure.dataset.name))
    assert on_zcdp.terms == Terms("zcdp") and on_zcdp.ledger_symbol == "ρ"
    assert on_zcdp.charge == ZCDP(sum(t.budget.epsilon ** 2 / 2 for t in on_zcdp.tables))
    assert on_zcdp.total == PureDP(Fraction(1))  # the release budget is still checked in ε
    ledger.close()
    # the other way round
    pure_ledger = tmp_path / "pure.sqlite"
    (tmp_path / "out").mkdir()
    ledger = init_at(resolve_location(str(pure_ledger)))
    p = plan_release(pure, None)
    ledger.reserve(dataset=pure.dataset.name, release=pure.release, charges=p.ledger_charges(),
                   spec_fingerprint=p.fingerprint, lifetime_from_spec=pure.dataset.lifetime, terms=p.terms)
    ledger.close()
    refused = cli("plan", write(tmp_path), "--ledger", pure_ledger)
    assert refused.code == 2 and "cannot be charged there" in refused.stderr, refused


def test_implied_epsilon_is_never_below_opendp(tmp_path):
    dp = opendp()
    plan = plan_release(load_spec(write(tmp_path)), None)
    for t in plan.tables:
        meas = dp.m.make_gaussian(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=math.sqrt(float(t.scale)))
        assert meas.map(1) == pytest.approx(float(t.charge.rho), rel=1e-12)  # our ρ for this σ² is OpenDP's
    theirs = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(
        dp.m.make_gaussian(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=1.0)), 1e-6).map(1)[0]
    assert float(zcdp_epsilon(Fraction(1, 2), Fraction(1, 10**6))) >= theirs  # ρ = 1/2: σ = 1, Δ = 1


def test_sums_modes_and_pure_mechanisms_under_zcdp(tmp_path):
    """Under zcdp a sum gets the Gaussian with its own Δ₂² (in granularity units); a mode and a
    Laplace or truncated geometric table run at the largest ε with ε²/2 ≤ their ρ, and are
    charged that ρ at most (never more: the ledger's ρ covers them)."""
    path = write(tmp_path)
    path.write_text(path.read_text() + """\
  - name: income_by_sex
    group_by: [SEX]
    measure: {sum: PINCP, bounds: [0, 200000], granularity: 1000, missing: zero}
    rho: 0.02
    post_process: none
  - name: commonest_age_group
    group_by: [SEX]
    measure: {mode: AGE_GROUP}
    rho: 0.02
  - name: persons_by_sex_laplace
    group_by: [SEX]
    mechanism: discrete_laplace
    rho: 0.02
  - name: persons_by_sex_truncated
    group_by: [SEX]
    mechanism: truncated_geometric
    upper: 100000
    post_process: none
    rho: 0.02
""".replace("budget: {rho: 0.5}", ""))
    text = path.read_text().replace("budget: {rho: 0.5}", "budget: {rho: 0.58}")
    path.write_text(text)
    plan = plan_release(load_spec(path), None)
    by = {t.key: t for t in plan.tables}
    income = by["income_by_sex"]
    assert income.mechanism == "discrete_gaussian" and income.sensitivity == 200 ** 2
    assert income.scale >= Fraction(200 ** 2) / (2 * Fraction(2, 100)) and income.charge <= ZCDP(Fraction(2, 100))
    for key in ("commonest_age_group", "persons_by_sex_laplace", "persons_by_sex_truncated"):
        t = by[key]
        assert t.mechanism != "discrete_gaussian" and t.pure_epsilon is not None
        assert t.pure_epsilon ** 2 / 2 <= t.budget.rho == Fraction(2, 100)  # ε = 0.2 exactly: ε²/2 = ρ
        assert t.charge <= t.budget
    assert by["persons_by_sex_laplace"].scale == 1 / by["persons_by_sex_laplace"].pure_epsilon
    assert plan.charge <= plan.total and plan.fits


def test_a_pure_release_runs_on_zcdp_and_approx_ledgers(tmp_path, release_env):
    """A pure spec (lifetime ε = 4) planned on a dataset whose ledger terms are zCDP (cap ρ = 2)
    or (ε, δ) runs as planned: the reservation compares the spec's lifetime figure only with a
    cap of its own kind (it once compared ε = 4 with ρ = 2 and refused what the plan allowed)."""
    pure_path = tmp_path / "pure.yaml"
    pure_path.write_text(unpinned((ROOT / "configs" / "acs_demo.yaml").read_text())
                         .replace("../data/nist_acs/", str(ROOT / "data" / "nist_acs") + "/")
                         .replace("domains/", str(ROOT / "configs" / "domains") + "/"))
    pure = load_spec(pure_path)
    for terms, cap, spent in ((Terms("zcdp"), ZCDP(Fraction(2)), ZCDP(Fraction(0))),
                              (Terms("approx"), ApproxDP(Fraction(5), Fraction(1, 10**5)),
                               ApproxDP(Fraction(0), Fraction(0)))):
        ledger_path = tmp_path / f"{terms.kind}.sqlite"
        with init_at(resolve_location(str(ledger_path))) as ledger:
            ledger.set_budget(pure.dataset.name, cap, reason="test", terms=terms)
            planned = plan_release(pure, ledger.state(pure.dataset.name))
        assert planned.fits and planned.lifetime_spent == spent and planned.terms == terms
        proc = run(pure_path, "--output-dir", tmp_path / f"out-{terms.kind}", "--ledger", ledger_path, env=release_env)
        assert proc.returncode == 0, proc.stderr
        with Ledger.open(resolve_location(str(ledger_path))) as ledger:
            state = ledger.state(pure.dataset.name)
        assert state.spent == planned.charge and state.budget == cap  # Σ ε²/2 in ρ; Σ ε in (ε, δ)
        assert (state.spent.amount == sum(t.budget.epsilon ** 2 / 2 for t in planned.tables)) == (terms.kind == "zcdp")


def test_evaluate_under_zcdp_compares_with_a_real_clamp(tmp_path):
    """Issue 29: under zCDP `evaluate`'s clamp columns equalled its consistent ones: its clamp went
    through `--method clamp`, which overrides discrete Laplace count tables only (a zCDP table,
    discrete Gaussian, kept its consistent post-processing). Evaluate now clamps every count table
    per cell: its clamp rows differ from its consistent ones."""
    from dprelease.evaluate.accuracy import evaluate
    from dprelease.spec import load_spec
    from tests.test_consistent import zcdp_geography_spec

    path = zcdp_geography_spec(tmp_path, "{root: 0.001, STATE: 0.001, PUMA: 0.001}")
    spec = load_spec(path)
    assert spec.tables[0].mechanism == "discrete_gaussian"
    rows = {(r.table, r.level, r.method): r for r in evaluate(spec, 3)}
    for level in ("root", "STATE", "PUMA"):
        clamp, consistent = rows[("persons_by_sex", level, "clamp")], rows[("persons_by_sex", level, "consistent")]
        assert (clamp.cell_mae, clamp.cell_p95, clamp.total_mae) != (consistent.cell_mae, consistent.cell_p95,
                                                                   consistent.total_mae), level
