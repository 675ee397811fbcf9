"""The data checked against the spec's declared rules, before anything is reserved.

A rule (``rules:`` in the spec) is a public fact about every row, e.g. "MSP is not applicable
exactly when AGEP < 15". The planner trusts the rules to declare cells structural (zero on every
allowed dataset, so never measured); this check makes that trust safe: a dataset that breaks a
rule is outside the spec's declared universe, like a value outside a declared domain, and is
refused (exit 2) before any budget is reserved. The refusal names the spec, the rule and how many
rows break it, never a row's values; it reaches the operator's terminal only.

It reads only the rules' columns (and the partition column), streamed batch by batch with the
release's own reader and encoder, so it works for files, directories and any size. A spec with
no rules reads nothing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dprelease.data.histogram import where_mask
from dprelease.data.load import columns_to_read, encode_batch, source
from dprelease.errors import DataError
from dprelease.spec import Condition, Spec, Table


def check_rules(spec: Spec) -> None:
    """Raise :class:`DataError` if any row of the release's data breaks a declared rule (see
    :func:`broken_rules`)."""
    problems = broken_rules(spec)
    if problems:
        raise DataError(f"{spec.source}: the data ({spec.dataset.resolved_path}) breaks the spec's declared rules: "
                        + "; ".join(problems) + ". Structural zeros rely on them: fix the data, or correct or remove "
                        "the rule. Nothing was reserved or spent.")


def broken_rules(spec: Spec) -> list[str]:
    """Each declared rule that rows of the release's data break, with how many rows (never their
    values): a row breaks a rule if it satisfies every ``if`` condition but not every ``then``
    condition (or, for a rule that holds both ways, the reverse too). Rows of other partitions
    are not the release's and are not checked; rows dropped as out of domain
    (``on_out_of_domain: drop``) are not counted and not checked. A value the encoder refuses
    raises its :class:`DataError` (:func:`dprelease.data.check.check_data` finds those first)."""
    if not spec.rules:
        return []
    reading = _rule_reader(spec)
    src = source(reading)
    names, text = columns_to_read(reading)
    broken = [0] * len(spec.rules)
    for piece in src.files():
        for first_row, batch in src.batches(piece, names, text):
            data = encode_batch(reading, batch, where=piece.path, first_row=first_row)
            for i, rule in enumerate(spec.rules):
                for premises, conclusions in rule.implications():
                    broken[i] += _breaking(reading, premises, conclusions, data)
    return [f"rule {rule.name!r} ({_shown(rule.if_)} ⇒ {_shown(rule.then)}"
            f"{', both ways' if rule.both_ways else ''}) is broken by {n:,} row{'s' if n != 1 else ''}"
            for rule, n in zip(spec.rules, broken) if n]


def with_rule_columns(spec: Spec) -> Spec:
    """The spec with one more (never measured) table over the rules' columns, so that the
    columns a run reads include every column its rules check."""
    if not spec.rules:
        return spec
    return replace(spec, tables=spec.tables + (_probe(spec),))


def _probe(spec: Spec) -> Table:
    columns = tuple(dict.fromkeys(c.column for rule in spec.rules for c in rule.if_ + rule.then))
    return Table(name="rules", group_by=columns, where=(), budget=spec.budget)


def _rule_reader(spec: Spec) -> Spec:
    """The spec reduced to what reading the rules' columns needs: one table over them, no
    measures, no invariants, no local tables, no contribution bound (every row is checked)."""
    return replace(spec, tables=(_probe(spec),), local_tables=(), invariants=(), unit="row", unit_id=None,
                   max_rows=1)


def _breaking(spec: Spec, premises: tuple[Condition, ...], conclusions: tuple[Condition, ...], data) -> int:  # type: ignore[no-untyped-def]
    hold = where_mask(spec, premises, data)
    follows = where_mask(spec, conclusions, data)
    assert hold is not None and follows is not None
    return int(np.count_nonzero(hold & ~follows))


def _shown(conditions: tuple[Condition, ...]) -> str:
    out = []
    for c in conditions:
        if c.op in ("missing", "present"):
            out.append(f"{c.column} {'is' if c.op == 'missing' else 'is not'} missing")
        else:
            operand = list(c.operand) if c.op in ("in", "not_in") else c.operand[0]
            out.append(f"{c.column} {c.op} {operand}")
    return " and ".join(out)
