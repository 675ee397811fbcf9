"""Sensitivity formulas: how far one privacy unit moves a histogram of sums or a mode's or
quantile's utility, as functions of the measure and the neighbouring relation
(:class:`dprelease.accounting.Neighbouring`). A count's sensitivities are the relation's own
(``Neighbouring.count_l1`` and ``count_l2_squared``). The measurement types of
:mod:`dprelease.plan.measurements` are built from these figures.
"""

from __future__ import annotations

from fractions import Fraction

from dprelease.accounting import Neighbouring


def sum_l1(low: int, high: int, relation: Neighbouring, cells: int) -> int:
    """L1 sensitivity of a histogram of sums of values clamped to [low, high], in value units.

    With M = max(|low|, |high|): add/remove one row moves one cell by at most M. Change one
    record: a row that changes cell (or enters or leaves the table's ``where``) takes up to M
    out of one cell and puts up to M into another, so 2M for a table of more than one cell; for
    a single cell, max(high − low, M), since the changed row may also be dropped
    (``on_out_of_domain: drop``) or missing (counted 0). Times the contribution bound K."""
    m = max(abs(low), abs(high))
    per_row = m if not relation.change else 2 * m if cells > 1 else max(high - low, m)
    return per_row * relation.unit.max_rows


def sum_l2_squared(low: int, high: int, granularity: int, relation: Neighbouring, cells: int) -> int:
    """Δ₂² of a histogram of sums, in units of the granularity (for the discrete Gaussian): m²
    under add/remove (m = max(|low|, |high|)/g, one cell moves); under change one record the
    larger of 2m² (−m in one cell, +m in another) and ((high − low)/g)² (the record stays in
    its cell and its value moves from low to high: 4m² when low = −high); a single cell's
    max((high − low)/g, m)². Times K² (a person's K rows, all in one cell at worst)."""
    m = max(abs(low), abs(high)) // granularity
    span = (high - low) // granularity
    per_row = m * m if not relation.change else max(2 * m * m, span * span) if cells > 1 else max(span, m) ** 2
    return per_row * relation.unit.max_rows ** 2


def utility_sensitivity(q: Fraction | None, relation: Neighbouring) -> int:
    """Δu of a mode's or quantile's utility (see :class:`dprelease.spec.ModeMeasure`): K for a
    mode (one row moves one count by 1, a person's K rows K); K·max(a, b − a) for a q = a/b
    quantile, doubled under change one record."""
    k = relation.unit.max_rows
    if q is None:
        return k
    a, b = q.numerator, q.denominator
    return k * (2 if relation.change else 1) * max(a, b - a)
