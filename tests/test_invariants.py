"""Invariants: totals published exactly, the change-one-record relation (sensitivity 2) for the
whole release, consistent tables that hit the invariants, and a report that says so."""

from __future__ import annotations

import csv
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from dprelease.evaluate.accuracy import plan_variances
from dprelease.accounting import PureDP, Terms
from dprelease.data import encode, place_totals
from dprelease.evaluate.accuracy import exact_measurements
from dprelease.mechanisms import discrete_laplace
from dprelease.plan import plan_release
from dprelease.postprocess import Invariants, postprocess_release
from dprelease.spec import canonical, fingerprint, load_spec
from tests.conftest import ROOT, shipped
from tests.stats import empirical_epsilon
from tests.test_consistent import CENSUS, check_consistency, noisy_release
from tests.test_run import run
from tests.ledgers import init_at

INVARIANTS = ROOT / "configs" / "acs_census_invariants.yaml"
N = 400_000


def test_invariants_double_every_sensitivity_and_say_so(cli, tmp_path):
    spec, plain = load_spec(INVARIANTS), load_spec(CENSUS)
    assert spec.invariants == ("STATE",) and spec.invariant_levels == ("root", "STATE")
    for plan, sensitivity in ((plan_release(spec, None), 2), (plan_release(plain, None), 1)):
        assert {t.sensitivity for t in plan.tables} == {sensitivity}
        assert all(t.scale == Fraction(sensitivity) / t.budget.epsilon for t in plan.tables)
    result = cli("plan", shipped(tmp_path, "acs_census_invariants.yaml"), "--json")
    assert result.code == 0, result
    shown = json.loads(result.stdout)
    assert "change one record" in shown["neighbouring"]
    assert shown["invariants"] == {"levels": ["root", "STATE"], "protected_by_differential_privacy": False}
    printed = cli("plan", shipped(tmp_path, "acs_census_invariants.yaml"))
    assert "NOT protected by differential privacy" in printed.stdout.replace("not protected", "NOT protected")
    # a spec without invariants keeps its canonical form (and fingerprint) as before the feature
    assert "invariants" not in canonical(plain) and "invariants" in canonical(spec)
    assert fingerprint(spec) != fingerprint(plain)


def test_change_one_record_audit_the_doubled_scale_holds_and_the_plain_one_fails():
    """Neighbours under change one record: one person moves from cell a to cell b, so
    (x_a, x_b) = (1000, 500) against (999, 501). The tight event {y_a ≤ 999 and y_b ≥ 501}
    has privacy loss 2/scale: ε with the planner's scale 2/ε, and 2ε with scale 1/ε, the
    add/remove scale a planner that ignored the invariants would use (the negative control)."""
    spec = load_spec(INVARIANTS)
    table = plan_release(spec, None).tables[-1]  # any measurement: they all share the relation
    epsilon = float(table.budget.epsilon)

    def loss(scale):
        ya0, yb0 = 1000 + discrete_laplace(scale, N), 500 + discrete_laplace(scale, N)
        ya1, yb1 = 999 + discrete_laplace(scale, N), 501 + discrete_laplace(scale, N)
        return empirical_epsilon((ya0 <= 999) & (yb0 >= 501), (ya1 <= 999) & (yb1 >= 501))

    estimate, se = loss(table.scale)
    assert abs(estimate - epsilon) <= 6 * se, (estimate, se, epsilon)
    broken, se = loss(1 / table.budget.epsilon)
    assert broken > epsilon + 6 * se, (broken, se, epsilon)


@pytest.mark.parametrize("levels", [["STATE"], ["PUMA"], ["root"]], ids=str)
def test_consistent_tables_hit_the_invariants_exactly(tmp_path, levels):
    text = INVARIANTS.read_text().replace("totals: [STATE]", f"totals: [{', '.join(levels)}]")
    path = INVARIANTS.parent / f".test-invariants-{levels[0]}.yaml"  # beside the config: relative paths hold
    path.write_text(text)
    try:
        spec = load_spec(path)
    finally:
        path.unlink()
    data = encode(spec)
    exact, scales = exact_measurements(spec, data)
    assert set(scales.values()) == {2 / budget.epsilon for t in spec.tables for _, _, budget in t.measured()}
    totals = place_totals(spec, data)
    assert list(totals) == list(spec.invariant_levels)
    for _ in range(3):
        published = postprocess_release(spec, noisy_release(exact, scales), plan_variances(spec),
                                        invariants=Invariants.from_totals(totals))
        check_consistency(spec, published)
        for level, want in totals.items():
            for t in spec.tables:
                got = published[(t.name, level)].reshape(want.size, -1).sum(axis=1)
                assert np.array_equal(got, want), (t.name, level)
                assert np.array_equal(got, exact[(t.name, level)].reshape(want.size, -1).sum(axis=1))


def _read_counts(path):
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    return rows, [int(r["count"]) for r in rows]


def test_release_with_invariants_publishes_them_flagged_and_reruns(tmp_path, release_env, cli):
    out = tmp_path / "out"
    refused = run(shipped(tmp_path, "acs_census_invariants.yaml"), "--output-dir", out, env=release_env)  # exact publications need an approved plan
    assert refused.returncode == 5 and "exact publication of the invariants" in refused.stderr, refused.stderr
    approved = cli("plan", shipped(tmp_path, "acs_census_invariants.yaml"), "--approve", "--by", "reviewer")
    assert approved.code == 0, approved
    proc = run(shipped(tmp_path, "acs_census_invariants.yaml"), "--output-dir", out, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = out / "acs-census-2019-invariants"
    # the invariants are the true totals, counted here independently of dprelease
    pumas = [r["PUMA"] for r in csv.DictReader((ROOT / "data" / "nist_acs" / "national2019.csv").open())]
    by_state = Counter(p[:2] for p in pumas)
    rows, counts = _read_counts(release / "invariants" / "STATE.csv")
    assert list(rows[0]) == ["STATE", "count"]
    assert {r["STATE"]: c for r, c in zip(rows, counts)} == dict(by_state)
    assert _read_counts(release / "invariants" / "root.csv")[1] == [len(pumas)]
    for table in ("persons_by_sex_age_group", "persons_by_race_hispanic"):
        rows, cells = _read_counts(release / "tables" / table / "STATE.csv")
        summed = Counter()
        for r, c in zip(rows, cells):
            summed[r["STATE"]] += c
        assert summed == by_state, table
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["invariants"]["protected_by_differential_privacy"] is False
    assert "change one record" in manifest["privacy"]["neighbouring"]
    assert {t["sensitivity"] for t in manifest["tables"]} == {2}
    report = (release / "budget_report.md").read_text()
    head = report.split("## Guarantee")[0]  # prominent: before anything else
    assert "Invariants: NOT protected by differential privacy" in head and "change one record" in head
    # post-processing again from what was published reproduces the tables byte for byte
    again = cli("postprocess", release)
    assert again.code == 0, again
    for table in ("persons_by_sex_age_group", "persons_by_race_hispanic"):
        for level in ("root", "STATE", "PUMA"):
            assert (release / "postprocessed" / "1-as-specified" / "tables" / table / f"{level}.csv").read_bytes() \
                == (release / "tables" / table / f"{level}.csv").read_bytes()
    # an altered invariants file is refused, not silently used: a count, then the header
    state = release / "invariants" / "STATE.csv"
    original = state.read_text()
    first = original.splitlines()[1]
    state.write_text(original.replace(first, first.split(",")[0] + f",{int(first.split(',')[1]) + 100}"))
    tampered = cli("postprocess", release)
    assert tampered.code == 2 and "do not add up" in tampered.stderr, tampered
    state.write_text(original.replace('"STATE"', '"PLACE"'))
    tampered = cli("postprocess", release)
    assert tampered.code == 2 and "altered" in tampered.stderr, tampered


def test_evaluate_binds_the_invariants():
    from dprelease.evaluate.accuracy import evaluate

    rows = {(r.table, r.level, r.method): r for r in evaluate(load_spec(INVARIANTS), trials=2)}
    for table in ("persons_by_sex_age_group", "persons_by_race_hispanic"):
        for level in ("root", "STATE"):
            assert rows[(table, level, "consistent")].total_mae == 0
            assert rows[(table, level, "clamp")].total_mae > 0  # clamped tables are noisy, as published
        assert rows[(table, "PUMA", "consistent")].total_mae > 0  # PUMA totals are not invariant


def test_inconsistent_invariants_are_refused():
    from dprelease.postprocess import check_invariants

    spec = load_spec(INVARIANTS)
    totals = place_totals(spec, encode(spec))
    check_invariants(spec, totals)
    for broken in ({"root": totals["root"] + 1, "STATE": totals["STATE"]},  # states no longer add up
                   {"root": totals["root"], "STATE": totals["STATE"] + np.r_[-totals["STATE"][0] - 1,  # a negative count
                                                                            totals["STATE"][0] + 1,
                                                                            np.zeros(totals["STATE"].size - 2, int)]},
                   {"STATE": totals["STATE"]}):  # a level missing
        with pytest.raises(ValueError):
            check_invariants(spec, broken)


def test_a_dataset_keeps_one_neighbouring_relation_for_its_lifetime(tmp_path, release_env, cli):
    """Once invariants of a dataset are public, every later release of it is planned (and
    charged) under change one record; a dataset with add/remove releases refuses invariants."""
    from dprelease.errors import LedgerError
    from dprelease.ledger import resolve_location

    def ledger_at(path):
        ledger = init_at(resolve_location(str(path)))
        assert ledger is not None
        return ledger

    spec, plain = load_spec(INVARIANTS), load_spec(CENSUS)
    assert spec.dataset.name == plain.dataset.name
    bounded = tmp_path / "bounded.sqlite"
    ledger = ledger_at(bounded)
    first = plan_release(spec, None)
    assert first.terms == Terms("pure", change=True)
    ledger.reserve(dataset=spec.dataset.name, release=spec.release, charges=first.ledger_charges(),
                   spec_fingerprint=first.fingerprint, lifetime_from_spec=spec.dataset.lifetime,
                   terms=first.terms)
    later = plan_release(plain, ledger.state(plain.dataset.name))  # no invariants of its own
    assert later.terms == Terms("pure", change=True) and {t.sensitivity for t in later.tables} == {2}
    assert "change one record" in later.neighbouring
    with pytest.raises(LedgerError):  # the reservation re-checks the terms in its transaction
        ledger.reserve(dataset=plain.dataset.name, release="sneaky", charges=[("t", PureDP(Fraction(1, 10)))],
                       spec_fingerprint="sha256:x", lifetime_from_spec=plain.dataset.lifetime,
                       terms=Terms("pure"))
    ledger.close()
    # end to end: the plain census release on the bounded dataset is published with sensitivity 2
    out = tmp_path / "out"
    proc = run(shipped(tmp_path, "acs_census.yaml"), "--output-dir", out, "--ledger", bounded, env=release_env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "acs-census-2019" / "manifest.json").read_text())
    assert {t["sensitivity"] for t in manifest["tables"]} == {2}
    assert manifest["privacy"]["ledger_terms"] == "pure-bounded"
    # the other way round: add/remove releases first, then invariants are refused (nothing spent)
    plain_ledger = tmp_path / "plain.sqlite"
    proc = run(shipped(tmp_path, "acs_census.yaml"), "--output-dir", tmp_path / "out2", "--ledger", plain_ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    refused = cli("run", shipped(tmp_path, "acs_census_invariants.yaml"), "--ledger", plain_ledger, "--output-dir", tmp_path / "out3")
    assert refused.code != 0 and "add/remove" in refused.stderr and "Traceback" not in refused.stderr, refused
    ledger = ledger_at(plain_ledger)
    assert len(ledger.state(plain.dataset.name).runs) == 1
    ledger.close()


def test_invariants_of_an_attribute_are_refused(tmp_path, cli):
    """The outside review's reproducer: race as a 'geography' level with exact totals would publish
    exact race counts outside differential privacy. Only declared places may be invariant."""
    text = INVARIANTS.read_text().replace("  levels: [STATE, PUMA]", "  levels: [RAC1P]").replace(
        "  STATE: {from: PUMA, prefix: 2}    # the state FIPS code: first 2 characters of the PUMA code\n", "").replace(
        "totals: [STATE]", "totals: [RAC1P]")
    path = tmp_path / "race.yaml"
    path.write_text(text.replace("domains/", str(ROOT / "configs" / "domains") + "/").replace(
        "../data/", str(ROOT / "data") + "/"))
    result = cli("validate", path)
    assert result.code == 2, result
    assert "invariants.totals[0]: 'RAC1P' is published exactly only if it is a place" in result.stderr
    assert "declare columns.RAC1P.geographic: true" in result.stderr
    # the places of the shipped spec are declared: it validates
    assert cli("validate", INVARIANTS).code == 0


def test_the_plan_lists_exact_publications_first(cli, tmp_path):
    result = cli("plan", shipped(tmp_path, "acs_census_invariants.yaml"))
    first = result.stdout.splitlines()[:3]
    assert first[0].startswith("EXACT PUBLICATIONS — NOT protected by differential privacy"), first
    assert first[1:] == ["  * the number of persons in the whole dataset (root): its exact count",
                         "  * the number of persons in each STATE: their exact counts"]
    as_json = cli("plan", shipped(tmp_path, "acs_census_invariants.yaml"), "--json")
    assert next(iter(json.loads(as_json.stdout))) == "exact_publications"
    approve = cli("plan", shipped(tmp_path, "acs_census_invariants.yaml"), "--approve", "--by", "reviewer")
    assert approve.code == 0 and "with its EXACT publications (NOT differentially private)" in approve.stderr
