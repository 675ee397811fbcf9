"""What a reviewer must look at before (or after) a release spends: the warnings, computed once.

``plan`` and ``plan --approve`` print them, ``plan --json`` and the manifest list them
(``"warnings"``), and the markdown, HTML and JSON budget reports show them. Each caller first
states the release as :class:`ReviewFacts` — from a plan (:func:`plan_facts`) or from a
published manifest (``report.manifest_facts``) — and :func:`review_warnings` words them, so one
release gets the same warnings wherever it is read. Everything here is a function of the spec,
the plan and the ledger's record; nothing is data-dependent.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dprelease.accounting import Budget, PureDP, decimal_text, fraction_text
from dprelease.ledger import DatasetState
from dprelease.plan.planner import Plan

LARGE_TABLE_EPSILON = Fraction(1)  # a single table above this ε is flagged for review
LOW_REMAINING = Fraction(1, 10)  # flag when less than this share of the lifetime cap remains


@dataclass(frozen=True, slots=True)
class ReviewFacts:
    """A release as the warnings see it: no data, only what its plan or manifest states."""

    tables: tuple[tuple[str, Budget], ...]  # (measurement, as "table" or "table @ level"; its budget)
    cap: Budget  # the dataset's lifetime budget, of the ledger terms' kind
    remaining_after: Budget  # what remains of it once this release is spent
    invariant_levels: tuple[str, ...] = ()  # place totals published exactly (NOT differentially private)
    partition_note: str | None = None  # the period assumption of a partitioned dataset
    evaluations: tuple[tuple[str, str], ...] = ()  # (when, by whom) the data was evaluated in the open
    local_after: Fraction | None = None  # each respondent's local ε after this release, if it has local tables


def measurement_name(name: str, level: str | None) -> str:
    """A measurement as the reports name it: ``table``, or ``table @ level`` for one level of a hierarchy."""
    return name if level is None else f"{name} @ {level}"


def plan_facts(plan: Plan, partition_note: str | None = None) -> ReviewFacts:
    """The facts of a plan (before anything is spent); ``partition_note`` is the spec's
    ``dataset.partition_note``."""
    local: PureDP | None = plan.local_spent_after if plan.local else None
    return ReviewFacts(
        tables=tuple((measurement_name(t.name, t.level), t.budget) for t in plan.tables),
        cap=plan.lifetime_budget, remaining_after=plan.lifetime_remaining_after,
        invariant_levels=plan.invariants, partition_note=partition_note,
        evaluations=tuple((e.evaluated_at, e.evaluated_by) for e in plan.evaluations),
        local_after=None if local is None else local.epsilon)


def review_warnings(facts: ReviewFacts, state: DatasetState | None = None) -> list[str]:
    """The warnings a reviewer must read, in a fixed order: tables over ε = 1, invariants
    published exactly, a lifetime budget nearly spent, unfinished reservations (from ``state``,
    the ledger's record of the dataset, when it is reachable), the period assumption, evaluations
    in the open, local collections' per-respondent ε."""
    out = []
    for name, budget in facts.tables:
        if budget.symbol == "ε" and budget.amount > LARGE_TABLE_EPSILON:  # a ρ is not compared with an ε threshold
            out.append(f"table {name} spends {budget.symbol} = {fraction_text(budget.amount)} (over "
                       f"{fraction_text(LARGE_TABLE_EPSILON)}): check it is intended")
    if facts.invariant_levels:
        out.append(f"invariants: the number of persons per place at {', '.join(facts.invariant_levels)} is "
                   "published EXACTLY, not protected by differential privacy")
    remaining, cap = facts.remaining_after.amount, facts.cap.amount
    if cap > 0 and remaining < cap * LOW_REMAINING:
        out.append(f"the dataset's lifetime budget is nearly spent: {fraction_text(remaining)} of "
                   f"{fraction_text(cap)} remained after this release")
    if state is not None:
        for run in state.runs:
            if run.unfinished:
                out.append(f"unfinished reservation: run {run.run_id} ({run.release}, since {run.created_at[:19]}) "
                           "still counts as spent; settle it with `dprelease ledger resolve`")
    if facts.partition_note:
        out.append(f"period: {facts.partition_note}")
    for at, by in facts.evaluations:
        out.append(f"this data was evaluated in the open (NOT private) on {at[:19]} UTC by {by}: its errors "
                   "against the exact data were seen outside differential privacy")
    if facts.local_after is not None:
        out.append(f"local collections: each respondent's ε is now {decimal_text(facts.local_after)} (not capped)")
    return out
