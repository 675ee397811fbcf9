"""Modes by the exponential mechanism: measure {mode: COLUMN}, permute-and-flip over the declared
categories with the cell's counts as utilities; the exponent ε·u/Δu only where the utility is
monotone (add/remove one row), ε·u/(2Δu) under change one record."""

from __future__ import annotations

import csv
import json
from fractions import Fraction

import numpy as np

from dprelease.accounting import Neighbouring
from dprelease.plan.sensitivities import utility_sensitivity
from dprelease.lifecycle.measure import measure_mode
from dprelease.plan import plan_release
from dprelease.spec import load_spec
from tests.conftest import ROOT
from tests.stats import empirical_epsilon, finite_chi_square_pvalue
from tests.test_mechanisms import pf_probabilities
from tests.test_run import run

SPEC = """\
release: acs-modes-2019
dataset:
  name: nist-acs-modes
  path: {data}
  na_values: ["N"]
  lifetime_budget: {{epsilon: 4}}
privacy: {{definition: pure, unit: {unit}}}
budget: {{epsilon: 1}}
columns:
  PUMA: {{domain_file: {domains}/puma.txt, geographic: true}}
  RAC1P: {{domain: [1, 2, 3, 4, 5, 6, 7, 8, 9]}}
  SEX: {{domain: [1, 2], labels: [Male, Female]}}
{invariants}
tables:
  - name: most_common_race_by_puma
    group_by: [PUMA]
    measure: {{mode: RAC1P}}
    epsilon: 0.5
  - name: persons_by_sex
    group_by: [SEX]
    epsilon: 0.5
"""


def write(tmp_path, unit="row", invariants=""):
    path = tmp_path / "modes.yaml"
    path.write_text(SPEC.format(data=ROOT / "data" / "nist_acs" / "national2019.csv",
                                domains=ROOT / "configs" / "domains", unit=unit, invariants=invariants))
    return path


def test_the_exponent_follows_monotonicity(tmp_path):
    mode = plan_release(load_spec(write(tmp_path)), None).tables[0]
    assert (mode.mechanism, mode.sensitivity, mode.scale, mode.cells) == ("permute_and_flip", 1, 2, 20)
    bounded = plan_release(load_spec(write(tmp_path, invariants="invariants: {totals: [root]}")), None).tables[0]
    assert bounded.scale == 4  # 2Δu/ε: counts under change one record are not monotone
    persons = plan_release(load_spec(write(tmp_path, unit="{id: SERIALNO, max_rows: 3}")), None).tables[0]
    assert (persons.sensitivity, persons.scale) == (3, 6)


def test_measure_mode_draws_the_permute_and_flip_law(tmp_path):
    """One cell's counts [10, 9, 7, 3, 0, 0, 0, 0, 0] through the release's measure step, 40,000
    times: the exact PF law with exponent ε·u/Δu (monotone), and not the 2Δu one."""
    plan = plan_release(load_spec(write(tmp_path)), None).tables[0]
    one = plan.__class__(**{**{f: getattr(plan, f) for f in plan.__slots__}, "cells": 40_000})
    utilities = np.tile([10, 9, 7, 3, 0, 0, 0, 0, 0], 40_000)
    chosen = measure_mode(utilities, one, 9)
    law = pf_probabilities([10, 9, 7, 3, 0, 0, 0, 0, 0], float(plan.budget.epsilon), 1)
    assert finite_chi_square_pvalue(chosen, law) > 1e-6
    assert finite_chi_square_pvalue(chosen, pf_probabilities([10, 9, 7, 3, 0, 0, 0, 0, 0], 0.5, 2)) < 1e-6


def test_change_one_record_audit_through_the_plan(tmp_path):
    """Neighbours [6, 5, 0, …] and [5, 6, 0, …] (one person changed category): the event {choose
    the first} has loss ≤ ε at the bounded plan's exponent; the add/remove plan's exponent (the
    monotone shortcut, wrong here) is caught above ε."""
    spec_bounded = load_spec(write(tmp_path, invariants="invariants: {totals: [root]}"))
    spec_plain = load_spec(write(tmp_path))
    n = 400_000
    for spec, within in ((spec_bounded, True), (spec_plain, False)):
        plan = plan_release(spec, None).tables[0]
        many = plan.__class__(**{**{f: getattr(plan, f) for f in plan.__slots__}, "cells": n})
        first = np.tile([6, 5, 0, 0, 0, 0, 0, 0, 0], n)
        second = np.tile([5, 6, 0, 0, 0, 0, 0, 0, 0], n)
        estimate, se = empirical_epsilon(measure_mode(second, many, 9) == 0, measure_mode(first, many, 9) == 0)
        if within:
            assert estimate <= float(plan.budget.epsilon) + 6 * se, (estimate, se)
        else:
            assert estimate > float(plan.budget.epsilon) + 6 * se, (estimate, se)


def test_a_release_with_a_mode_end_to_end(tmp_path, release_env, cli):
    out = tmp_path / "out"
    proc = run(write(tmp_path), "--output-dir", out, "--ledger", tmp_path / "ledger.sqlite", env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = out / "acs-modes-2019"
    rows = list(csv.DictReader((release / "tables" / "most_common_race_by_puma.csv").open()))
    assert len(rows) == 20 and list(rows[0]) == ["PUMA", "mode"]
    assert {r["mode"] for r in rows} <= {str(v) for v in range(1, 10)}
    manifest = json.loads((release / "manifest.json").read_text())
    entry = next(t for t in manifest["tables"] if t["name"] == "most_common_race_by_puma")
    assert entry["measure"] == {"mode": "RAC1P"} and entry["mechanism"] == "permute_and_flip"
    assert entry["budget"] == {"epsilon": "1/2"}
    assert "most common category of `RAC1P`" in (release / "budget_report.md").read_text()
    again = cli("postprocess", release)
    assert again.code == 0, again
    assert (release / "postprocessed" / "1-as-specified" / "tables" / "most_common_race_by_puma.csv").read_bytes() \
        == (release / "tables" / "most_common_race_by_puma.csv").read_bytes()


# ---------------------------------------------------------------- quantiles

def quantile_utilities(counts, q: Fraction) -> list[int]:
    """−|b·#{x < o} − a·n| per candidate o, computed here independently of dprelease."""
    below = np.cumsum(counts) - np.asarray(counts)
    return [int(-abs(q.denominator * c - q.numerator * sum(counts))) for c in below]


def test_quantile_sensitivity_and_law(tmp_path):
    spec_path = write(tmp_path)
    spec_path.write_text(spec_path.read_text().replace("measure: {mode: RAC1P}", "measure: {quantile: RAC1P, q: 0.9}"))
    plan = plan_release(load_spec(spec_path), None).tables[0]
    assert (plan.sensitivity, plan.scale) == (9, Fraction(2 * 9) / Fraction(1, 2))  # K·max(a, b − a); never monotone
    counts = [3, 0, 5, 2, 1, 0, 4, 0, 1]
    many = plan.__class__(**{**{f: getattr(plan, f) for f in plan.__slots__}, "cells": 40_000})
    chosen = measure_mode(np.tile(counts, 40_000), many, 9, Fraction(9, 10))
    law = pf_probabilities(quantile_utilities(counts, Fraction(9, 10)), float(plan.budget.epsilon), 2 * plan.sensitivity)
    assert finite_chi_square_pvalue(chosen, law) > 1e-6
    assert finite_chi_square_pvalue(chosen, pf_probabilities(quantile_utilities(counts, Fraction(9, 10)), 0.5, 9)) < 1e-6


def test_quantile_change_one_record_exact_audit():
    """Exact (enumerated) privacy loss of a record that leaves one cell and joins another, q = 0.9:
    the two cells' losses add up. With Δu = 2·max(a, b − a) the worst total over all small count
    vectors stays ≤ ε; with the per-cell bound Δu = b (a change within one cell) it exceeds ε."""
    import itertools


    q, eps = Fraction(9, 10), 1.0

    def worst_cell_loss(du):
        worst = 0.0
        for counts in itertools.product(range(3), repeat=5):
            for j in range(5):
                if counts[j] == 0 or sum(counts) < 2:
                    continue
                fewer = list(counts)
                fewer[j] -= 1
                p = pf_probabilities(quantile_utilities(list(counts), q), eps, 2 * du)
                p2 = pf_probabilities(quantile_utilities(fewer, q), eps, 2 * du)
                worst = max(worst, float(np.max(np.abs(np.log(p / p2)))))
        return worst

    planned = utility_sensitivity(q, Neighbouring(change=True, why="invariants"))
    assert planned == 18
    assert 2 * worst_cell_loss(planned) <= eps + 1e-12
    assert 2 * worst_cell_loss(q.denominator) > eps * (1 + 1e-3)


def _worst_add_loss(utilities_of, categories: int, rows: int, epsilon: float, denominator: float,
                    top: int = 3) -> float:
    """The largest |ln P(o | x)/P(o | x')| over every output o, every count vector x of one cell in
    [0, top)^categories, and every x' = x plus ``rows`` rows of one person spread over the
    categories in every way (add/remove: a person with ``rows`` rows in this cell)."""
    import itertools

    worst = 0.0
    adds = [a for a in itertools.product(range(rows + 1), repeat=categories) if sum(a) == rows]
    for counts in itertools.product(range(top), repeat=categories):
        p = pf_probabilities(utilities_of(list(counts)), epsilon, denominator)
        for add in adds:
            more = [c + d for c, d in zip(counts, add)]
            p2 = pf_probabilities(utilities_of(more), epsilon, denominator)
            worst = max(worst, float(np.max(np.abs(np.log(p / p2)))))
    return worst


def _planned(tmp_path, measure: str, unit: str = "row"):
    spec_path = write(tmp_path, unit=unit)
    spec_path.write_text(spec_path.read_text().replace("measure: {mode: RAC1P}", measure))
    plan = plan_release(load_spec(spec_path), None).tables[0]
    return plan, float(plan.budget.epsilon), float(plan.scale * plan.budget.epsilon)  # exponent ε·u/denominator


def test_mode_add_remove_exact_audit(tmp_path):
    """Add/remove one row: counts are monotone (every utility rises or none), so the plan's
    exponent ε·u/Δu holds exactly ε over every small count vector; a halved denominator (the
    shortcut applied to a doubled ε) is caught."""
    plan, eps, denominator = _planned(tmp_path, "measure: {mode: RAC1P}")
    assert denominator == plan.sensitivity == 1  # monotone: ε·u/Δu
    assert _worst_add_loss(lambda c: c, 4, 1, eps, denominator) <= eps + 1e-12
    assert _worst_add_loss(lambda c: c, 4, 1, eps, denominator / 2) > eps * 1.01


def test_quantile_add_remove_exact_audit(tmp_path):
    """Add/remove one row, q = 0.9: Δu = max(a, b − a) = 9 with the exponent ε·u/(2Δu) holds ε;
    Δu = min(a, b − a) = 1 (the change of a row counted below the candidate) is caught."""
    q = Fraction(9, 10)
    plan, eps, denominator = _planned(tmp_path, "measure: {quantile: RAC1P, q: 0.9}")
    assert denominator == 2 * plan.sensitivity == 18
    assert _worst_add_loss(lambda c: quantile_utilities(c, q), 4, 1, eps, denominator) <= eps + 1e-12
    assert _worst_add_loss(lambda c: quantile_utilities(c, q), 4, 1, eps, 2 * 1) > eps * 1.01


def test_mode_of_a_person_with_several_rows_exact_audit(tmp_path):
    """max_rows = 3: a person's 3 rows may all land in one cell (any categories) or be split
    across cells, whose outputs are independent: the losses of the parts add up. With Δu = 3 the
    worst total over every split stays ≤ ε; with Δu = 1 (the bound forgotten) it exceeds ε."""
    plan, eps, denominator = _planned(tmp_path, "measure: {mode: RAC1P}", unit="{id: SERIALNO, max_rows: 3}")
    assert plan.sensitivity == 3 and denominator == 3

    def worst_split(den: float) -> float:
        per_rows = {r: _worst_add_loss(lambda c: c, 3, r, eps, den) for r in (1, 2, 3)}
        splits = [(3,), (2, 1), (1, 1, 1)]  # rows per cell
        return max(sum(per_rows[r] for r in split) for split in splits)

    assert worst_split(denominator) <= eps + 1e-12
    assert worst_split(1) > eps * 1.01
