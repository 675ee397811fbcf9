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
    for variant in audits.VARIANTS:
        bound, estimate, se = audits.gaussian_check(rho, variant)
        row = audits.Row(name, variant, bound, estimate, se, kind="δ")
        assert row.passes, row
        if row.correct:
            assert abs(estimate - bound) <= audits.SIGMAS * se, row
