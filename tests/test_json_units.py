"""Every JSON output names the unit of each budget figure it states: ``plan --json``, ``ledger
--json`` and ``report --format json`` write a ρ under ``rho`` (``total_rho``), never under
``epsilon``, as the manifest's typed records do; an ε under ``epsilon``. The figures stay exact
text. Plans and manifests only: no data is read, nothing drawn."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from dprelease.ledger import Ledger, resolve_location
from dprelease.plan import plan_release
from dprelease.publish.manifest import manifest
from dprelease.spec import load_spec
from tests.conftest import ROOT
from tests.ledgers import init_at

SPEC = """\
release: units-{definition}
dataset:
  name: ds-units
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{{unit}: 4}}
privacy: {{definition: {definition}, unit: row{delta}}}
budget: {{{unit}: 1}}
columns:
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
tables:
  - {{name: by_sex, group_by: [SEX], {unit}: 1/4}}
  - {{name: mean_income, group_by: [SEX], measure: {{mean: PINCP, bounds: [0, 200000], granularity: 1000, missing: skip}}, {unit}: 1/4}}
  - {{name: mode_race, group_by: [SEX], measure: {{mode: RAC1P}}, {unit}: 1/4}}
"""
UNIT = {"pure": "epsilon", "zcdp": "rho"}
# keys named ε that hold an ε under any accounting: a pure mechanism's own ε inside a zCDP
# release (permute-and-flip), and the local tables' ε per respondent (local DP is ε-DP)
TRULY_EPSILON = {"mechanism_epsilon", "epsilon_local", "epsilon_local_bound", "local_epsilon_per_respondent"}


def spec_at(tmp_path, definition):
    path = tmp_path / f"{definition}.yaml"
    path.write_text(SPEC.format(definition=definition, unit=UNIT[definition], delta=", delta: 1e-6" * (definition == "zcdp"),
                                data=ROOT / "data" / "nist_acs" / "ma2019.csv"))
    return path


def budget_keys(value, found=None):
    """Every key of a JSON document that names a budget's unit: ``epsilon``, ``rho`` or one that
    contains either (``total_rho``)."""
    found = set() if found is None else found
    if isinstance(value, dict):
        found |= {k for k in value if "epsilon" in k or "rho" in k}
        for v in value.values():
            budget_keys(v, found)
    elif isinstance(value, list):
        for v in value:
            budget_keys(v, found)
    return found


def reserved(tmp_path, path):
    """A ledger in which ``path``'s release is reserved, and its URL."""
    spec = load_spec(path)
    plan = plan_release(spec, None)
    url = str(tmp_path / "ledger.sqlite")
    ledger = init_at(resolve_location(url))
    try:
        ledger.reserve(dataset=spec.dataset.name, release=spec.release, charges=plan.ledger_charges(),
                       spec_fingerprint=plan.fingerprint, lifetime_from_spec=spec.dataset.lifetime,
                       terms=plan.terms)
    finally:
        ledger.close()
    return url


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_plan_json_names_each_figure_by_its_unit(tmp_path, cli, definition):
    unit, other = UNIT[definition], UNIT["zcdp" if definition == "pure" else "pure"]
    path = spec_at(tmp_path, definition)
    url = str(tmp_path / "ledger.sqlite")
    init_at(resolve_location(url)).close()
    assert cli("ledger", "set-budget", "ds-units", f"--{unit}", "4", "--create", "--reason", "x",
               "--ledger", url).code == 0
    shown = cli("plan", path, "--json", "--ledger", url)
    assert shown.code == 0, shown
    plan = json.loads(shown.stdout)
    assert [(t["name"], t[unit]) for t in plan["tables"][:2]] == [("by_sex", "1/4"), ("mean_income", "1/4")]
    assert Fraction(plan[f"total_{unit}"]) == sum(Fraction(t[unit]) for t in plan["tables"])
    assert f"total_{other}" not in plan and plan["budget_unit"] == unit
    [mean] = [t for t in plan["tables"] if t.get("parts")]
    assert sum(Fraction(p[unit]) for p in mean["parts"]) == Fraction(1, 4)
    assert [(c[unit], c["cap"]) for c in plan["lifetime"]["changes"]] == [("4", {unit: "4"})]
    assert not {k for k in budget_keys(plan) if other in k} - TRULY_EPSILON, budget_keys(plan)


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_ledger_json_names_each_figure_by_its_unit(tmp_path, cli, definition):
    unit, other = UNIT[definition], UNIT["zcdp" if definition == "pure" else "pure"]
    url = reserved(tmp_path, spec_at(tmp_path, definition))
    shown = cli("ledger", "--ledger", url, "--json")
    assert shown.code == 0, shown
    [dataset] = json.loads(shown.stdout)["datasets"]
    [release] = dataset["releases"]
    assert release["charge"] == {unit: release[unit]}
    assert Fraction(release[unit]) == sum(Fraction(t[unit]) for t in release["tables"])
    assert [(t["name"], t[unit], t["charge"]) for t in release["tables"]][:2] == [
        ("by_sex", "1/4", {unit: "1/4"}), ("mean_income", "1/4", {unit: "1/4"})]
    assert [(c[unit], c["cap"]) for c in dataset["budget_changes"]] == [("4", {unit: "4"})]
    assert dataset["ledger_unit"] == unit and dataset["budget"] == "4"
    assert not {k for k in budget_keys(dataset) if other in k} - TRULY_EPSILON, budget_keys(dataset)


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_the_json_report_names_each_figure_by_its_unit(tmp_path, cli, definition):
    unit, other = UNIT[definition], UNIT["zcdp" if definition == "pure" else "pure"]
    spec = load_spec(spec_at(tmp_path, definition))
    release = tmp_path / "release"
    release.mkdir()
    (release / "manifest.json").write_text(json.dumps(manifest(spec, plan_release(spec, None), "run-1",
                                                               "2026-11-27T00:00:00+00:00")))
    shown = cli("report", release, "--format", "json")
    assert shown.code == 0, shown
    report = json.loads(shown.stdout)
    assert report["budget_unit"] == report["ledger_unit"] == unit
    assert [(t["name"], t[unit]) for t in report["tables"][:2]] == [("by_sex", "1/4"), ("mean_income", "1/4")]
    assert Fraction(report["total"]) == sum(Fraction(t[unit]) for t in report["tables"])
    assert not {k for k in budget_keys(report) if other in k} - TRULY_EPSILON, budget_keys(report)


def test_the_json_report_states_the_ledgers_unit_of_a_pure_release_on_zcdp_terms(tmp_path, cli):
    """A pure release charged to a zCDP ledger: its tables in ε, its lifetime figures in ρ."""
    url = reserved(tmp_path, spec_at(tmp_path, "zcdp"))
    later = tmp_path / "later"
    later.mkdir()
    spec = load_spec(spec_at(later, "pure"))
    with Ledger.open(resolve_location(url)) as ledger:
        typed = manifest(spec, plan_release(spec, ledger.state("ds-units")), "run-2", "2026-11-27T00:00:00+00:00")
    (later / "manifest.json").write_text(json.dumps(typed))
    shown = cli("report", later, "--format", "json")
    assert shown.code == 0, shown
    report = json.loads(shown.stdout)
    assert (report["budget_unit"], report["ledger_unit"]) == ("epsilon", "rho")
    assert report["tables"][0]["epsilon"] == "1/4" and typed["budget"]["lifetime"]["cap"] == {"rho": "4"}
    assert report["lifetime"]["budget"] == "4"


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_a_measurement_files_metadata_names_its_budgets_unit(tmp_path, definition):
    """``measurements/*.parquet`` states the measurement's budget under its unit's name too."""
    import numpy as np
    import pyarrow.parquet as pq

    from dprelease.publish.layout import write_measurement

    unit, other = UNIT[definition], UNIT["zcdp" if definition == "pure" else "pure"]
    spec = load_spec(spec_at(tmp_path, definition))
    table, planned = spec.tables[0], plan_release(spec, None).tables[0]
    [(_, dims, _)] = list(table.measured())
    written = write_measurement(spec, table, dims, planned, np.zeros(planned.cells, dtype=np.int64), tmp_path)
    stated = json.loads(pq.read_schema(written).metadata[b"dprelease"])
    assert stated[unit] == "1/4" and other not in stated, stated


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_plan_target_moe_json_names_each_figure_by_its_unit(tmp_path, cli, definition):
    """``plan --target-moe N --json``: counts are refused under zCDP, a release of means and
    modes is not: its figures (the current ones, the total kept) are a ρ under ``rho``."""
    unit, other = UNIT[definition], UNIT["zcdp" if definition == "pure" else "pure"]
    path = spec_at(tmp_path, definition)
    if definition == "zcdp":  # no count table: only means and modes
        path.write_text(path.read_text().replace("  - {name: by_sex, group_by: [SEX], rho: 1/4}\n", ""))
    url = str(tmp_path / "ledger.sqlite")
    init_at(resolve_location(url)).close()
    assert cli("ledger", "set-budget", "ds-units", f"--{unit}", "4", "--create", "--reason", "x",
               "--ledger", url).code == 0
    shown = cli("plan", path, "--target-moe", "10", "--json", "--ledger", url)
    assert shown.code == 0, shown
    plan = json.loads(shown.stdout)
    assert f"total_{unit}" in plan and f"kept_{unit}" in plan
    assert all(t[f"current_{unit}"] == "1/4" for t in plan["tables"])
    assert not {k for k in budget_keys(plan) if other in k} - TRULY_EPSILON, budget_keys(plan)
