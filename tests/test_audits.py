"""Every mechanism's privacy audit (tests/audits.py): the calibrated mechanism holds its bound
and every deliberately broken variant is caught; the table is docs/reliability.md's."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dprelease.accounting import zcdp_epsilon
from dprelease.mechanisms.gaussian import sigma2_for
from tests import audits


@pytest.mark.parametrize("name, epsilon, audit, variants", audits.PURE, ids=[p[0] for p in audits.PURE])
def test_pure_mechanism_audit(name, epsilon, audit, variants):
    for variant in variants:
        estimate, se = audit(variant)
        row = audits.Row(name, variant, epsilon, estimate, se)
        assert row.passes, row
        if row.correct:  # tight: the loss is attained, not just bounded
            assert abs(estimate - epsilon) <= audits.SIGMAS * se, row


@pytest.mark.parametrize("name, rho", audits.GAUSSIAN, ids=[g[0] for g in audits.GAUSSIAN])
def test_gaussian_hockey_stick_audit(name, rho):
    planned = float(sigma2_for(rho, 1))
    probe = audits.probe_epsilon(planned)
    # the calibrated mechanism's exact δ at the probe never exceeds the ρ-zCDP guarantee there
    assert audits.exact_delta(planned, 1, probe) <= 0.02 + 1e-9
    assert float(zcdp_epsilon(rho, Fraction(1, 50))) >= probe
    if "approximate" in name:  # the (ε, δ) the release promises: exact δ at ε = 1 within the δ of 1e-6
        assert audits.exact_delta(planned, 1, 1.0) <= 1e-6
    for variant in audits.VARIANTS:
        bound, estimate, se = audits.gaussian_check(rho, variant)
        row = audits.Row(name, variant, bound, estimate, se, kind="δ")
        assert row.passes, row
        if row.correct:
            assert abs(estimate - bound) <= audits.SIGMAS * se, row


AUDITED = """\
release: audited
dataset: {name: a, path: data.csv, lifetime_budget: {epsilon: 10}}
privacy: {definition: pure, unit: row}
budget: {epsilon: 3}
columns:
  G: {domain: [a, b]}
  K: {domain: [x, y]}
tables:
  - {name: count, group_by: [G], epsilon: 0.5}
  - {name: total, group_by: [G], measure: {sum: PINCP, bounds: [0, 200000], granularity: 1000}, epsilon: 0.5}
  - {name: average, group_by: [G], measure: {mean: PINCP, bounds: [0, 200000], granularity: 1000}, epsilon: 1}
  - {name: mode, group_by: [G], measure: {mode: K}, epsilon: 0.5}
  - {name: capped, group_by: [G], epsilon: 0.5, mechanism: truncated_geometric, upper: 5}
"""


def test_the_audited_scales_are_the_planners(tmp_path):
    """The audits draw with the scales the planner gives the same tables: a planner bug (a
    wrong Δ or ε split) would change these and fail here."""
    from dprelease.plan import plan_release
    from dprelease.spec import load_spec

    (tmp_path / "data.csv").write_text("G,K,PINCP\na,x,1\n")
    (tmp_path / "spec.yaml").write_text(AUDITED)
    plans = {p.name: p for p in plan_release(load_spec(tmp_path / "spec.yaml"), None).tables}
    assert plans["count"].scale == 2 and plans["count"].sensitivity == 1  # laplace_counts: scale 2, Δ 1
    total = plans["total"]
    assert total.scale / total.granularity == 400 and total.sensitivity / total.granularity == 200  # laplace_sum
    sum_part, count_part = plans["average"].noise.sum.noise, plans["average"].noise.count.noise
    assert sum_part.scale / sum_part.granularity == 200 and count_part.scale == 2  # mean_pair
    assert sum_part.sensitivity / sum_part.granularity == 100  # centred on 100000: the row moves it 100 units
    assert plans["mode"].scale == 2 and plans["mode"].mechanism_epsilon == Fraction(1, 2)  # mode: Δu/ε, monotone
    assert plans["capped"].scale == 2 and plans["capped"].upper == 5  # truncated: scale 2 on [0, 5]
    assert sigma2_for(Fraction(1, 8), 1) == 4  # the zCDP audit's σ²
