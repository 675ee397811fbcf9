"""`dprelease plan`: exact totals, verdicts and exit codes, accuracy, never the data."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from dprelease.accounting import PureDP
from dprelease.ledger import resolve_location
from dprelease.mechanisms.discrete_laplace import margin_of_error
from tests.conftest import SPECS, write_spec, shipped_project
from tests.ledgers import init_at, remove_ledger

THREE = (SPECS / "good" / "three_tables.yaml").read_text()


def plan_json(cli, *args):
    result = cli("plan", *args, "--json")
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


def test_tenth_fifth_seven_tenths_fit_a_budget_of_one_exactly(tmp_path, cli):
    result, plan = plan_json(cli, write_spec(tmp_path, THREE))
    assert result.code == 0, result
    assert plan["fits"] is True
    assert plan["total_epsilon"] == "1" and plan["release_budget"] == "1"
    assert plan["budget"]["total"] == plan["budget"]["release"] == {"epsilon": "1"} and plan["budget"]["kind"] == "pure"


def test_seven_thousand_and_one_ten_thousandths_is_over_by_exactly_that(tmp_path, cli):
    result, plan = plan_json(cli, write_spec(tmp_path, THREE.replace("7/10", "0.7001")))
    assert result.code == 3, result
    assert plan["fits"] is False and plan["fits_release_budget"] is False
    assert plan["total_epsilon"] == "10001/10000"
    text = cli("plan", write_spec(tmp_path, THREE.replace("7/10", "0.7001")))
    assert text.code == 3
    assert "OVER by 1/10000" in text.stdout
    assert "exceeds the release budget" in text.stderr


def test_plan_succeeds_when_the_data_path_does_not_exist(tmp_path, cli_process):
    spec = write_spec(tmp_path, THREE)
    assert "does/not/exist.csv" in spec.read_text()
    assert not (tmp_path / "does").exists()
    result = cli_process("plan", spec)
    assert result.code == 0, result
    assert "Traceback" not in result.output


def test_plan_json_has_the_documented_fields(tmp_path, cli):
    result, plan = plan_json(cli, shipped_project(tmp_path) / "acs_demo.yaml")  # its own pinned ledger
    assert result.code == 0, result
    for key in ("fits", "total_epsilon", "release_budget", "lifetime", "fingerprint", "tables"):
        assert key in plan
    assert set(plan["lifetime"]) >= {"budget", "spent", "remaining"}
    assert plan["lifetime"] == {**plan["lifetime"], "budget": "4", "spent": "0", "remaining": "4"}
    assert plan["fingerprint"].startswith("sha256:") and len(plan["fingerprint"]) == 71
    for table in plan["tables"]:
        assert set(table) >= {"name", "epsilon", "mechanism", "sensitivity", "scale", "cells", "moe95"}
        assert isinstance(table["moe95"], int)
        eps = Fraction(table["epsilon"])
        assert Fraction(table["scale"]) == 1 / eps
        assert table["moe95"] == margin_of_error(1 / eps, Fraction(95, 100))
    assert [t["cells"] for t in plan["tables"]] == [20 * 2, 20 * 3, 9 * 5, 7 * 2]


def test_printed_margins_match_the_pmf(tmp_path, cli):
    from tests.test_accuracy import brute_force_moe

    result = cli("plan", shipped_project(tmp_path) / "acs_demo.yaml")
    assert result.code == 0
    rows = {line.split("│")[1].strip(): line.split("│")[-2].strip()
            for line in result.stdout.splitlines() if line.count("│") > 3}
    assert rows["puma_by_sex"] == str(brute_force_moe(Fraction(4), Fraction(95, 100)))
    assert rows["marital_status_by_sex"] == str(brute_force_moe(Fraction(10, 3), Fraction(95, 100)))


def test_confidence_setting_changes_the_margins(tmp_path, cli):
    _, at95 = plan_json(cli, write_spec(tmp_path, THREE))
    _, at90 = plan_json(cli, write_spec(tmp_path, THREE), "--confidence", "0.90")
    assert at90["confidence"] == "9/10"
    assert all(t90["moe"] < t95["moe"] for t90, t95 in zip(at90["tables"], at95["tables"]))
    assert all(t90["moe95"] == t95["moe95"] for t90, t95 in zip(at90["tables"], at95["tables"]))
    spec = write_spec(tmp_path, THREE.replace("budget: {epsilon: 1}", "budget: {epsilon: 1}\naccuracy: {confidence: 0.9}"))
    _, from_spec = plan_json(cli, spec)
    assert [t["moe"] for t in from_spec["tables"]] == [t["moe"] for t in at90["tables"]]


def test_bad_confidence_option_is_a_usage_error(tmp_path, cli):
    result = cli("plan", write_spec(tmp_path, THREE), "--confidence", "1.2")
    assert result.code == 2


def test_target_moe_gives_the_epsilon_that_meets_it(tmp_path, cli):
    result = cli("plan", write_spec(tmp_path, THREE), "--target-moe", "10", "--json")
    assert result.code == 0, result
    out = json.loads(result.stdout)
    for t in out["tables"]:
        assert margin_of_error(1 / Fraction(t["epsilon"]), Fraction(95, 100)) <= 10
    assert out["tables"][0]["epsilon"] == "57/200"  # 0.285
    text = cli("plan", write_spec(tmp_path, THREE), "--target-moe", "10")
    assert "ε = 57/200 (0.285)" in text.stdout


def test_lifetime_budget_is_checked_against_the_ledger(tmp_path, cli):
    spec = write_spec(tmp_path, THREE)
    ledger = init_at(resolve_location())
    ledger.reserve(dataset="three-tables-data", release="earlier", charges=[("x", PureDP(Fraction(19, 2)))],
                   spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(Fraction(10)))
    ledger.close()
    result, plan = plan_json(cli, spec)
    assert result.code == 3
    assert plan["fits_release_budget"] is True and plan["fits_lifetime_budget"] is False
    assert plan["lifetime"]["spent"] == "19/2" and plan["lifetime"]["remaining"] == "1/2"
    text = cli("plan", spec)
    assert "OVER by 1/2" in text.stdout and "exceeds the lifetime budget" in text.stderr


def test_plan_of_an_existing_release_exits_4(tmp_path, cli):
    spec = write_spec(tmp_path, THREE)
    ledger = init_at(resolve_location())
    ledger.reserve(dataset="three-tables-data", release="three-tables", charges=[("a", PureDP(Fraction(1, 10)))],
                   spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(Fraction(10)))
    ledger.close()
    result = cli("plan", spec)
    assert result.code == 4
    assert "already reserved" in result.stdout


def test_a_spec_asking_another_lifetime_budget_is_refused(tmp_path, cli):
    spec = write_spec(tmp_path, THREE)
    ledger = init_at(resolve_location())
    ledger.set_budget("three-tables-data", PureDP(Fraction(5)), reason="agreed with the board")
    ledger.close()
    result = cli("plan", spec)
    assert result.code == 2
    assert "lifetime budget of ε = 5 in the ledger" in result.stderr
    assert "set-budget" in result.stderr
    assert "Traceback" not in result.output


def test_plan_never_creates_the_ledger(tmp_path, cli, isolated_ledger):
    """Where no ledger is, plan refuses as a run would (issue 27), naming the location and the
    command that creates a ledger there; nothing is created."""
    remove_ledger(isolated_ledger)
    result = cli("plan", write_spec(tmp_path, THREE))
    assert result.code == 2
    assert not isolated_ledger.exists()
    assert f"there is no ledger at sqlite:///{isolated_ledger}" in result.stderr
    assert f"dprelease ledger init sqlite:///{isolated_ledger} --reason TEXT" in result.stderr


def test_fingerprint_changes_with_a_domain_file_and_not_with_notation(tmp_path, cli):
    (tmp_path / "d.txt").write_text("1\n2\n")
    body = THREE.replace("SEX: {domain: [1, 2]}", "SEX: {domain_file: d.txt}")
    _, first = plan_json(cli, write_spec(tmp_path, body))
    _, notation = plan_json(cli, write_spec(tmp_path, body.replace("epsilon: 0.1", 'epsilon: "1/10"')))
    assert first["fingerprint"] == notation["fingerprint"]
    (tmp_path / "d.txt").write_text("1\n2\n3\n")
    _, edited = plan_json(cli, write_spec(tmp_path, body))
    assert edited["fingerprint"] != first["fingerprint"]


@pytest.mark.parametrize("spec", sorted((SPECS / "bad").glob("*.yaml"))[:5], ids=lambda p: p.stem)
def test_plan_of_an_invalid_spec_exits_2(spec, cli):
    assert cli("plan", spec).code == 2


def test_an_approx_plan_shows_its_epsilon_and_its_delta_each_on_its_own_line(tmp_path, cli):
    """Under approx the budget lines are the ε's and δ has its own: an ε over the release budget
    with a δ within it is OVER on the first line and fits on the second; the lifetime lines
    likewise, each from the typed budgets' one subtraction."""
    from tests.test_means import write

    path = write(tmp_path, definition="approx")
    path.write_text(path.read_text().replace("{epsilon: 4}", "{epsilon: 1, delta: 1e-7}").replace(
        "budget: {epsilon: 2}", "budget: {epsilon: 1.75, delta: 1e-6}"))
    text = cli("plan", path, "--ledger", tmp_path / "none.sqlite")
    assert text.code == 3, text
    assert "total ε = 2 of 7/4 (1.75) — OVER by 1/4 (0.25)" in text.stdout
    assert "total δ = 1/1000000 of 1/1000000 — fits (δ composes by addition)" in text.stdout
    assert "remaining 1 → -1 — OVER by 1\n" in text.stdout
    assert "cap 1/10000000, spent 0 → 1/1000000 after this release — OVER" in text.stdout
    validated = cli("validate", path)
    assert "total ε = 2 of 7/4" in validated.stdout
    assert "the tables' ε sum to 2, over the release budget of 7/4 by 1/4" in validated.stderr


def test_plan_warns_when_a_release_repeats_an_earlier_releases_tables(tmp_path, cli):
    """The same tables of the same dataset under a new release name spend again: plan says so
    (stderr, and "warnings" in --json) for each committed or reserved earlier release; a voided
    one, and the release itself, are not repeats."""
    spec = write_spec(tmp_path, THREE)
    ledger = init_at(resolve_location())
    first = ledger.reserve(dataset="three-tables-data", release="three-tables-v1",
                           charges=[("a", PureDP(Fraction(1, 10))), ("c/state", PureDP(Fraction(1, 10))),
                                    ("z", PureDP(Fraction(1, 10)))],
                           spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(Fraction(10)))
    ledger.commit(first.run_id, data_fingerprint="sha256:d")
    voided = ledger.reserve(dataset="three-tables-data", release="three-tables-v0", charges=[("b", PureDP(Fraction(1)))],
                            spec_fingerprint="sha256:x", lifetime_from_spec=PureDP(Fraction(10)))
    ledger.void(voided.run_id, reason="never ran")
    ledger.close()
    result, plan = plan_json(cli, spec)
    assert result.code == 0, result
    assert plan["warnings"] == [
        f"table {t} was already released in release three-tables-v1 (committed): publishing it again spends again "
        "(the same people measured twice); drop it from the spec unless a second measurement is intended"
        for t in ("a", "c")]
    text = cli("plan", spec)
    assert text.code == 0, text
    assert text.stderr.count("was already released") == 2
    assert "table a was already released in release three-tables-v1 (committed)" in text.stderr

    fresh, plan = plan_json(cli, write_spec(tmp_path, THREE.replace("three-tables-data", "other-data"), "other.yaml"))
    assert fresh.code == 0 and plan["warnings"] == [], fresh
