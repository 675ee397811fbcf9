"""The typed privacy semantics (dprelease.accounting): budgets of one kind add and compare
exactly, budgets of different kinds refuse to; the neighbouring relation gives the count
sensitivities; ledger terms read every string a schema 1–4 ledger holds."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dprelease.accounting import (
    ZCDP,
    ApproxDP,
    Neighbouring,
    PrivacyUnit,
    PureDP,
    Terms,
    add,
    budget_of,
    compose,
    subtract,
    within,
    zero,
)

KINDS_OF = [PureDP(Fraction(1, 4)), ZCDP(Fraction(1, 8)), ApproxDP(Fraction(1, 2), Fraction(1, 10**6))]


@pytest.mark.parametrize("a", KINDS_OF)
@pytest.mark.parametrize("b", KINDS_OF)
def test_budgets_of_different_kinds_neither_add_nor_compare(a, b):
    if type(a) is type(b):
        assert a + b == a.scaled(Fraction(2))
        assert a <= a + b and (a + b) - b == a
        return
    with pytest.raises(TypeError, match="convert one explicitly"):
        a + b
    with pytest.raises(TypeError):
        a <= b  # noqa: B015
    with pytest.raises(TypeError):
        compose([a, b], a.kind)


@pytest.mark.parametrize("a", KINDS_OF)
@pytest.mark.parametrize("b", KINDS_OF)
def test_the_typed_helpers_for_budgets_of_a_kind_known_at_run_time(a, b):
    """add, subtract and within (what a plan's union-typed budgets use, mypy-checked per kind) are
    the operators within one kind, and refuse different kinds at run time as the operators do."""
    if type(a) is type(b):
        assert add(a, b) == a + b == a.scaled(Fraction(2)) and subtract(add(a, b), b) == a
        assert within(a, add(a, b)) and not within(add(a, b), a) and within(a, a)
        return
    for helper in (add, subtract, within):
        with pytest.raises(TypeError, match="convert one explicitly"):
            helper(a, b)


def test_within_an_approx_cap_is_within_both_its_epsilon_and_its_delta():
    cap = ApproxDP(Fraction(1), Fraction(1, 10**6))
    assert within(ApproxDP(Fraction(1), Fraction(1, 10**6)), cap)
    assert not within(ApproxDP(Fraction(1, 2), Fraction(2, 10**6)), cap)  # δ over, ε not
    assert not within(ApproxDP(Fraction(3, 2), Fraction(0)), cap)  # ε over, δ not
    assert subtract(cap, ApproxDP(Fraction(3, 2), Fraction(0))) == ApproxDP(Fraction(-1, 2), Fraction(1, 10**6))


def test_composition_is_the_exact_sum_and_refuses_floats():
    parts = [PureDP(Fraction(1, 10))] * 10
    assert compose(parts, "pure") == PureDP(Fraction(1)) and compose([], "zcdp") == zero("zcdp")
    with pytest.raises(TypeError, match="exact Fraction"):
        PureDP(0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exact Fraction"):
        ApproxDP(Fraction(1), 1e-6)  # type: ignore[arg-type]
    assert PureDP(Fraction(1)) - PureDP(Fraction(3, 2)) == PureDP(Fraction(-1, 2))  # an overrun's remainder


def test_conversions_are_explicit_and_exact():
    assert PureDP(Fraction(1, 2)).as_zcdp() == ZCDP(Fraction(1, 8))
    assert PureDP(Fraction(1, 2)).as_approx() == ApproxDP(Fraction(1, 2), Fraction(0))
    assert budget_of("approx", Fraction(1), Fraction(0)) == ApproxDP(Fraction(1), Fraction(0))
    with pytest.raises(ValueError, match="without its δ"):
        budget_of("approx", Fraction(1), None)  # a missing δ is never taken for 0
    assert budget_of("zcdp", Fraction(3, 4)).amount == Fraction(3, 4) and ZCDP(Fraction(1)).symbol == "ρ"
    # (ε, δ) is within another only in both figures
    assert not ApproxDP(Fraction(1), Fraction(2, 10**6)) <= ApproxDP(Fraction(2), Fraction(1, 10**6))


@pytest.mark.parametrize("text,terms", [
    ("pure", Terms("pure")),
    ("zcdp", Terms("zcdp")),
    ("approx-bounded", Terms("approx", True)),
    ("pure-bounded@SERIALNO", Terms("pure", True, "SERIALNO")),
    ("zcdp@PID", Terms("zcdp", False, "PID")),
])
def test_ledger_terms_read_every_old_string_and_write_it_back(text, terms):
    assert Terms.from_text(text) == terms and terms.text == text


@pytest.mark.parametrize("text", ["", "laplace", "pure-unbounded", "Pure"])
def test_unknown_ledger_terms_are_refused(text):
    with pytest.raises(ValueError):
        Terms.from_text(text)


def test_count_sensitivities_follow_the_relation():
    person = PrivacyUnit("PID", 3)
    assert (Neighbouring().count_l1, Neighbouring().count_l2_squared) == (1, 1)
    assert (Neighbouring(person).count_l1, Neighbouring(person).count_l2_squared) == (3, 9)
    changed = Neighbouring(person, True, "invariants")
    assert (changed.count_l1, changed.count_l2_squared) == (6, 18)
    assert "add or remove one person" in Neighbouring(person).text and changed.text.startswith("change one person")
    with pytest.raises(ValueError):
        Neighbouring(change=True)  # a bounded relation says why
    with pytest.raises(ValueError):
        PrivacyUnit(None, 2)  # a row is one row
