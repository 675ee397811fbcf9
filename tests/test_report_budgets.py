"""Reading a manifest's budgets back as typed budgets: its typed records (``{"epsilon": …}``,
``{"rho": …}``, ``{"epsilon": …, "delta": …}``), or the format-1 keys of a manifest written before
them. Manifests are made from plans (no data is read, nothing drawn)."""

from __future__ import annotations

import copy
import json
from fractions import Fraction

import pytest

from dprelease.accounting import ZCDP, ApproxDP, PureDP
from dprelease.errors import UserError
from dprelease.ledger import Ledger, resolve_location
from dprelease.manifest import budget_record, manifest, read_budget, release_budgets
from dprelease.plan import plan_release
from dprelease.spec import load_spec
from tests.conftest import ROOT

HEAD = """\
release: {release}
dataset:
  name: {dataset}
  path: {data}
  na_values: ["N"]
{lifetime}privacy: {{definition: {definition}, unit: row{delta}}}
budget: {budget}
columns:
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  AGEP: {{range: [0, 99]}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
derived:
  AGE_GROUP: {{from: AGEP, bins: [0, 18, 65, 100], labels: ["0-17", "18-64", "65+"]}}
tables:
"""
TABLES = {  # a Gaussian count, a pure count, a mean (two parts) and a mode, in each definition's unit
    "zcdp": """\
  - {name: by_sex_age, group_by: [SEX, AGE_GROUP], rho: 0.3}
  - {name: by_sex, group_by: [SEX], rho: 0.1, mechanism: discrete_laplace}
  - {name: mean_income, group_by: [SEX], measure: {mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}, rho: 0.1}
  - {name: mode_race, group_by: [SEX], measure: {mode: RAC1P}, rho: 0.05}
""",
    "approx": """\
  - {name: by_sex_age, group_by: [SEX, AGE_GROUP], epsilon: 0.5}
  - {name: by_sex, group_by: [SEX], epsilon: 0.2, mechanism: discrete_laplace}
  - {name: mean_income, group_by: [SEX], measure: {mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}, epsilon: 0.3}
""",
    "pure": """\
  - {name: by_sex_age, group_by: [SEX, AGE_GROUP], epsilon: 0.25}
  - {name: by_sex, group_by: [SEX], epsilon: 1.5}
  - {name: mean_income, group_by: [SEX], measure: {mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}, epsilon: 0.25}
  - {name: mode_race, group_by: [SEX], measure: {mode: RAC1P}, epsilon: 0.2}
""",
}
BUDGET = {"zcdp": ("{rho: 0.55}", "  lifetime_budget: {rho: 2}\n", ", delta: 1e-6"),
          "approx": ("{epsilon: 1, delta: 1e-6}", "  lifetime_budget: {epsilon: 5, delta: 2e-6}\n", ""),
          "pure": ("{epsilon: 2.2}", "  lifetime_budget: {epsilon: 4}\n", "")}


def spec_path(tmp_path, definition, *, release=None, dataset=None, lifetime=True):
    budget, life, delta = BUDGET[definition]
    path = tmp_path / f"{release or definition}.yaml"
    path.write_text(HEAD.format(release=release or f"typed-{definition}", dataset=dataset or f"ds-{definition}",
                                data=ROOT / "data" / "nist_acs" / "ma2019.csv", lifetime=life if lifetime else "",
                                definition=definition, delta=delta, budget=budget) + TABLES[definition])
    return path


def manifest_of(path, state=None):
    spec = load_spec(path)
    return manifest(spec, plan_release(spec, state), "run-1", "2026-11-26T00:00:00+00:00")


def on_ledger(tmp_path, first, second):
    """The manifest of spec ``second`` planned on the dataset after ``first`` was reserved in a
    ledger: a pure release on the zCDP or (ε, δ) terms ``first`` set."""
    spec = load_spec(first)
    plan = plan_release(spec, None)
    ledger = Ledger.open(resolve_location(str(tmp_path / "ledger.sqlite")), create=True)
    try:
        ledger.reserve(dataset=spec.dataset.name, release=spec.release, charges=plan.ledger_charges(),
                       spec_fingerprint=plan.fingerprint, lifetime_from_spec=spec.dataset.lifetime.amount,
                       terms=plan.terms, lifetime_delta_from_spec=getattr(spec.dataset.lifetime, "delta", None))
        return manifest_of(second, ledger.state(spec.dataset.name))
    finally:
        ledger.close()


@pytest.fixture
def manifests(tmp_path):
    """A pure, a zCDP and an (ε, δ) release, and pure releases on zCDP and (ε, δ) ledgers."""
    out = {kind: manifest_of(spec_path(tmp_path, kind)) for kind in ("pure", "zcdp", "approx")}
    for terms in ("zcdp", "approx"):
        later = spec_path(tmp_path, "pure", release=f"pure-on-{terms}", dataset=f"ds-{terms}", lifetime=False)
        (tmp_path / terms).mkdir()
        out[f"pure-on-{terms}"] = on_ledger(tmp_path / terms, spec_path(tmp_path, terms), later)
    return out


def format1(typed: dict) -> dict:
    """The manifest as written before typed records: only the keys of format 1."""
    old = copy.deepcopy(typed)
    del old["budget"]
    for t in old["tables"]:
        del t["budget"], t["ledger_charge"]
    return old


# ---------------------------------------------------------------- the one reader


@pytest.mark.parametrize("budget", [PureDP(Fraction(1, 4)), ZCDP(Fraction(3, 10)),
                                    ApproxDP(Fraction(1, 2), Fraction(1, 10**6)), ApproxDP(Fraction(1), Fraction(0))])
def test_a_typed_record_reads_back_as_the_budget_written(budget):
    assert read_budget(budget_record(budget)) == budget
    assert type(read_budget(json.loads(json.dumps(budget_record(budget))))) is type(budget)


def test_format1_figures_are_read_in_the_kind_the_manifest_states():
    assert read_budget({"epsilon": "3/10"}, "zcdp") == ZCDP(Fraction(3, 10))  # the old key held ρ
    assert read_budget({"epsilon": "1/4", "delta": "0"}, "pure") == PureDP(Fraction(1, 4))
    assert read_budget({"epsilon": "1/4", "delta": "1e-6"}, "approx") == ApproxDP(Fraction(1, 4), Fraction(1, 10**6))
    with pytest.raises(UserError, match="delta"):  # a missing δ is never taken for 0
        read_budget({"epsilon": "1/4"}, "approx")


@pytest.mark.parametrize("record", [{"epsilon": "1", "rho": "1"}, {"rho": "1", "delta": "0"}, {}, {"eps": "1"},
                                    {"epsilon": 0.25}, {"rho": "a quarter"}, "1/4", None])
def test_a_record_that_names_no_unit_is_refused(record):
    with pytest.raises(UserError):
        read_budget(record)


def test_typed_records_of_mixed_kinds_are_refused(manifests):
    m = copy.deepcopy(manifests["zcdp"])
    m["budget"]["lifetime"]["cap"] = {"epsilon": "2"}
    with pytest.raises(UserError, match="mix kinds"):
        release_budgets(m)


def test_the_kinds_of_the_old_keys(manifests):
    budgets = release_budgets(format1(manifests["pure-on-zcdp"]))
    assert isinstance(budgets.total, PureDP) and isinstance(budgets.ledger_charge, ZCDP)
    assert isinstance(budgets.cap, ZCDP) and budgets.remaining == budgets.cap - budgets.spent_after
    approx = release_budgets(format1(manifests["approx"]))
    assert approx.ledger_charge == ApproxDP(Fraction(1), Fraction(1, 10**6)) == approx.total
