"""Exact privacy accounting: budgets are ``fractions.Fraction`` from end to end.

* :mod:`~dprelease.accounting.exact`: parsing the budget text the user wrote, showing fractions;
* :mod:`~dprelease.accounting.budgets`: the budget types (pure ε, zCDP ρ, (ε, δ)) that add and
  compare only within one kind;
* :mod:`~dprelease.accounting.relations`: the privacy unit, the neighbouring relation and a
  dataset's ledger terms;
* :mod:`~dprelease.accounting.conversions`: conversions between guarantees, rounded safely.
"""

from dprelease.accounting.budgets import (
    KINDS,
    ZCDP,
    ApproxDP,
    Budget,
    Kind,
    PureDP,
    add,
    amount_text,
    budget_from_record,
    budget_of,
    compose,
    delta_of,
    subtract,
    symbol_key,
    unit_key,
    within,
    zero,
)
from dprelease.accounting.conversions import (
    approx_to_zcdp,
    ln_upper_bound,
    pure_to_zcdp,
    zcdp_epsilon,
    zcdp_to_pure,
)
from dprelease.accounting.exact import (
    NotANumber,
    compose_sequential,
    decimal_text,
    exact_and_decimal,
    fraction_text,
    parse_budget,
    parse_exact,
    percent_text,
)
from dprelease.accounting.relations import Neighbouring, PrivacyUnit, Terms

__all__ = [
    "KINDS", "ApproxDP", "Budget", "Kind", "NotANumber", "Neighbouring", "PrivacyUnit", "PureDP", "Terms", "ZCDP",
    "add", "amount_text", "approx_to_zcdp", "budget_from_record", "budget_of",
    "delta_of", "compose", "compose_sequential", "decimal_text", "exact_and_decimal",
    "fraction_text", "ln_upper_bound", "parse_budget", "parse_exact", "percent_text", "pure_to_zcdp", "subtract", "symbol_key", "unit_key",
    "within", "zero", "zcdp_epsilon", "zcdp_to_pure",
]
