"""The reports read a manifest's budgets from its typed records (``{"epsilon": …}``, ``{"rho": …}``,
``{"epsilon": …, "delta": …}``) through one reader, :mod:`dprelease.publish.manifest_reader`, and
show each figure with the unit of its type; the manifest states typed records only (format 2), and
a manifest of format 1 (written before them) is refused, naming the version that wrote it.
Manifests are made from plans (no data is read, nothing drawn)."""

from __future__ import annotations

import copy
import json
from fractions import Fraction

import pytest

from dprelease.report import published as reporting
from dprelease.report.html import page as html_page
from dprelease.accounting import ZCDP, ApproxDP, PureDP
from dprelease.errors import UserError
from dprelease.ledger import resolve_location
from dprelease.publish.manifest import budget_record, manifest
from dprelease.publish.manifest_reader import (
    MANIFEST_FORMAT,
    NotARelease,
    entry_budget,
    read_budget,
    read_manifest,
    release_budgets,
)
from dprelease.plan import plan_release
from dprelease.report.markdown import budget_report_md
from dprelease.spec import load_spec
from tests.conftest import ROOT
from tests.ledgers import init_at

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
    ledger = init_at(resolve_location(str(tmp_path / "ledger.sqlite")))
    try:
        ledger.reserve(dataset=spec.dataset.name, release=spec.release, charges=plan.ledger_charges(),
                       spec_fingerprint=plan.fingerprint, lifetime_from_spec=spec.dataset.lifetime,
                       terms=plan.terms)
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


FORMAT1_KEYS = ("total_epsilon", "release_budget", "budget_unit", "ledger_unit", "ledger_charge", "lifetime",
                "total_delta", "release_delta_budget")


def format1(typed: dict) -> dict:
    """The manifest as dprelease wrote it before typed records: format 1, its untyped figures only."""
    old = copy.deepcopy(typed)
    old["format"] = 1
    del old["budget"]
    old.update({"total_epsilon": "1", "release_budget": "1", "ledger_charge": "1",
                "lifetime": {"budget": "4", "spent_before": "0", "spent_after": "1", "remaining": "3"}})
    for t in old["tables"]:
        del t["budget"], t["ledger_charge"]
        t["epsilon"] = "1/4"
    return old


def outputs(m: dict) -> tuple:
    """Everything the reports show of a manifest, but the HTML's figures: the markdown, the JSON
    report and the warnings (the HTML is checked on the zCDP release below)."""
    return budget_report_md(m), json.dumps(reporting.report_json(m, None), ensure_ascii=False), \
        reporting.warnings(m, None), reporting.burn_down(m, None)


# ---------------------------------------------------------------- the one reader


@pytest.mark.parametrize("budget", [PureDP(Fraction(1, 4)), ZCDP(Fraction(3, 10)),
                                    ApproxDP(Fraction(1, 2), Fraction(1, 10**6)), ApproxDP(Fraction(1), Fraction(0))])
def test_a_typed_record_reads_back_as_the_budget_written(budget):
    assert read_budget(budget_record(budget)) == budget
    assert type(read_budget(json.loads(json.dumps(budget_record(budget))))) is type(budget)


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


# ---------------------------------------------------------------- reports read the typed records


def test_a_zcdp_report_shows_rho_from_the_typed_records(manifests):
    """The format-1 keys are given other figures and units (as if an ε-DP release): the reports
    do not change, so they read none of them; changing a typed record changes what they show."""
    typed = manifests["zcdp"]
    md = budget_report_md(typed)
    assert "| table | ρ | share |" in md and "## Lifetime budget of ds-zcdp (ρ)" in md
    assert "| by_sex_age | 3/10 (0.3) | ≈54.55% | discrete_gaussian |" in md
    assert "| mean_income · mean: sum | 1/20 (0.05) | ≈9.09% |" in md  # a part: its own typed record
    assert "the release as a whole is ρ = " in md and "(asked 11/20 (0.55);" in md

    decoy = copy.deepcopy(typed)
    decoy.update({"total_epsilon": "7", "release_budget": "8", "ledger_charge": "9", "budget_unit": "epsilon",
                  "ledger_unit": "epsilon", "lifetime": {"budget": "40", "spent_before": "30", "spent_after": "39",
                                                         "remaining": "1"}})
    for t in decoy["tables"]:
        t["epsilon"] = "3"
    assert outputs(decoy) == outputs(typed)
    html = html_page(typed, None)
    assert html_page(decoy, None) == html

    changed = copy.deepcopy(typed)
    changed["tables"][0]["budget"] = {"rho": "1/7"}
    changed["budget"]["lifetime"]["cap"] = {"rho": "3"}
    md2 = budget_report_md(changed)
    assert "| by_sex_age | 1/7 (≈0.1429) |" in md2 and "\n| 3 | 0 |" in md2
    assert reporting.report_json(changed, None)["tables"][0]["rho"] == "1/7"
    assert reporting.report_json(changed, None)["lifetime"]["budget"] == "3"


def test_the_unit_shown_is_the_type_of_the_record(manifests):
    """Typed records of an ε-DP release in a manifest whose format-1 keys say ρ: ε is shown."""
    m = copy.deepcopy(manifests["pure"])
    m.update({"budget_unit": "rho", "ledger_unit": "rho"})
    md = budget_report_md(m)
    assert md == budget_report_md(manifests["pure"])
    assert "| table | ε | share |" in md and "(ε)\n" in md and "Pure ε-differential privacy" in md
    as_rho = copy.deepcopy(manifests["pure"])  # and the same figures typed as ρ are shown as ρ
    for name in ("total", "release", "ledger_charge"):
        as_rho["budget"][name] = {"rho": as_rho["budget"][name]["epsilon"]}
    for name, record in as_rho["budget"]["lifetime"].items():
        as_rho["budget"]["lifetime"][name] = {"rho": record["epsilon"]}
    for t in as_rho["tables"]:
        t["budget"] = {"rho": t["budget"]["epsilon"]}
    shown = budget_report_md(as_rho)
    assert "| table | ρ | share |" in shown and "(ρ)\n" in shown and "ρ-zero-concentrated" in shown
    assert reporting.report_json(as_rho, None)["budget_unit"] == "rho"
    assert not any("spends" in w for w in reporting.warnings(as_rho, None))  # ρ = 3/2 is not an ε over 1
    assert any("spends ε = 3/2" in w for w in reporting.warnings(manifests["pure"], None))


def test_an_approx_report_reads_epsilon_and_delta_typed(manifests):
    typed = manifests["approx"]
    md = budget_report_md(typed)
    assert "| table | ε | δ | share |" in md and "(ε = 1, δ = 1/1000000)-DP" in md
    assert "| δ 1/500000 | 0 | 1/1000000 | 1/1000000 | 1/1000000 |" in md
    changed = copy.deepcopy(typed)
    changed["budget"]["ledger_charge"] = {"epsilon": "1", "delta": "1/2000000"}
    changed["budget"]["lifetime"]["spent_after"] = {"epsilon": "1", "delta": "1/2000000"}
    changed["lifetime"] = {"delta": {"spent_after": "999"}}  # a decoy under format 1's key
    assert "| δ 1/500000 | 0 | 1/2000000 | 1/2000000 | 3/2000000 |" in budget_report_md(changed)
    assert reporting.report_json(changed, None)["lifetime"]["delta"]["spent_after"] == "1/2000000"


# ---------------------------------------------------------------- one format: typed records only


@pytest.mark.parametrize("kind", ["pure", "zcdp", "approx", "pure-on-zcdp", "pure-on-approx"])
def test_the_manifest_states_typed_records_only(manifests, kind):
    """Format 2: no figure without its unit. Every table and every mean's part has its budget and
    its ledger charge as typed records; the lifetime budget's remainder is cap − spent after."""
    m = manifests[kind]
    assert m["format"] == MANIFEST_FORMAT == 2
    assert not set(FORMAT1_KEYS) & set(m), set(FORMAT1_KEYS) & set(m)
    entries = [*m["tables"], *(p for t in m["tables"] for p in t.get("parts", ()))]
    assert any("part" in e for e in entries)  # a mean's parts are among them
    for e in entries:
        assert "epsilon" not in e and "delta" not in e, e
        assert entry_budget(e) == read_budget(e["budget"]) and read_budget(e["ledger_charge"])
    budgets = release_budgets(m)
    assert read_budget(m["budget"]["lifetime"]["remaining"]) == budgets.remaining == budgets.cap - budgets.spent_after


def test_the_kinds_of_the_records(manifests):
    """A pure release on a zCDP ledger: its own budgets ε, its ledger's ρ; on an (ε, δ) ledger the
    charge carries its δ."""
    budgets = release_budgets(manifests["pure-on-zcdp"])
    assert isinstance(budgets.total, PureDP) and isinstance(budgets.ledger_charge, ZCDP)
    assert isinstance(budgets.cap, ZCDP) and budgets.remaining == budgets.cap - budgets.spent_after
    approx = release_budgets(manifests["approx"])
    assert approx.ledger_charge == ApproxDP(Fraction(1), Fraction(1, 10**6)) == approx.total


@pytest.mark.parametrize("kind", ["pure", "zcdp", "approx"])
def test_a_format_1_manifest_is_refused_naming_the_version_that_wrote_it(manifests, kind, tmp_path, cli):
    """Nothing outside dprelease reads format 1, and it named every figure ε whatever its unit:
    one reader, of format 2; format 1 is refused by every reader, saying which version reads it,
    and nothing is written."""
    old = format1(manifests[kind])
    old["software"] = {"name": "dprelease", "version": "0.1.0"}  # the last version that wrote format 1
    import dprelease

    assert dprelease.__version__ != "0.1.0"  # so the refusal names a version that reads it
    release = tmp_path / "old-release"
    release.mkdir()
    (release / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(NotARelease, match=r"manifest format 1; dprelease .* reads format 2: read it with the "
                                          r"version that wrote it \(dprelease 0\.1\.0\)"):
        read_manifest(release)
    from dprelease.publish.reading import read_release

    with pytest.raises(NotARelease, match="manifest format 1"):
        read_release(release)
    page = tmp_path / "report.html"
    refused = cli("report", release, "--output", page)
    assert refused.code == 2 and "manifest format 1" in refused.output and "Traceback" not in refused.output
    assert not page.exists() and sorted(p.name for p in release.iterdir()) == ["manifest.json"]


def test_cap_changes_are_shown_in_their_terms_unit(manifests):
    """A zCDP ledger's cap changes are ρ, an (ε, δ) ledger's carry their δ: never labelled ε alone."""
    from dprelease.accounting import ZCDP, ApproxDP
    from dprelease.ledger import CapChange

    rho = [CapChange(ZCDP(Fraction(1)), "initial", "a", "2026-01-01T00:00:00"),
           CapChange(ZCDP(Fraction(3, 2)), "board", "b", "2026-02-01T00:00:00")]
    md = budget_report_md(manifests["zcdp"], rho)
    assert "- 2026-01-01T00:00:00 by a: ρ = 1 — initial" in md and "by b: ρ = 3/2 — board" in md
    assert "ε = 3/2" not in md
    approx = [CapChange(ApproxDP(Fraction(2), Fraction(1, 10**6)), "initial", "a", "2026-01-01T00:00:00"),
              CapChange(ApproxDP(Fraction(3), Fraction(1, 10**6)), "board", "b", "2026-02-01T00:00:00")]
    md = budget_report_md(manifests["approx"], approx)
    assert "by b: ε = 3, δ = 1/1000000 — board" in md
