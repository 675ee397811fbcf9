"""The manifest: what a release states about itself, published beside its tables.

What was released, under which guarantee and neighbouring relation, with which mechanism,
sensitivity, scale, budget and margin of error per measurement, the spec's fingerprint, the
dataset's lifetime budget before and after, where that budget lives and who approved the plan.
Nothing data-dependent but the noisy outputs' parameters: no data fingerprint, row count or
timing (those are in the internal run record).

Every budget is written as a typed record naming its unit (:func:`budget_record`), in manifest
format :data:`~dprelease.publish.manifest_reader.MANIFEST_FORMAT`; every reader reads them back
through :mod:`dprelease.publish.manifest_reader`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dprelease import __version__
from dprelease.accounting import (
    ApproxDP,
    Budget,
    PureDP,
    ZCDP,
    amount_text,
    fraction_text,
    zcdp_epsilon,
)
from dprelease.errors import InternalError
from dprelease.ledger import Approval, Birth, Evaluation
from dprelease.plan import Plan, TablePlan
from dprelease.plan.margins import margin_of, unit_words
from dprelease.plan.measurements import PermuteAndFlip
from dprelease.plan.review import plan_facts, review_warnings
from dprelease.publish.manifest_reader import MANIFEST_FORMAT
from dprelease.publish.layout import column_meanings, invariant_path, table_file, table_path
from dprelease.spec import MeanMeasure, ModeMeasure, Spec, SumMeasure, Table



@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a manifest states about the run beyond its plan: where its budget lives, who approved
    the plan, and whether the data was evaluated in the open. Nothing data-dependent."""

    ledger_id: str
    ledger_location: str
    ledger_chosen_by: str
    approval: Approval | None = None
    evaluations: tuple[Evaluation, ...] = ()
    ledger_birth: Birth | None = None  # how the ledger was born (None: before births were recorded)
    warnings: tuple[str, ...] = ()  # what `plan` warns of beyond the plan's own review: a large δ, tables re-measured

    def manifest_part(self) -> dict[str, Any]:
        born = self.ledger_birth
        return {
            "ledger": {"id": self.ledger_id, "location": self.ledger_location, "chosen_by": self.ledger_chosen_by,
                       "born": None if born is None else born.record()},
            "approval": None if self.approval is None else {
                "approved_by": self.approval.approved_by, "approved_at": self.approval.approved_at,
                "plan_fingerprint": self.approval.spec_fingerprint},
            "evaluated_in_the_open": [{"evaluated_at": e.evaluated_at, "evaluated_by": e.evaluated_by,
                                       "trials": e.trials, "under_dataset": e.dataset} for e in self.evaluations],
        }


def manifest(spec: Spec, plan: Plan, run_id: str, created_at: str, facts: RunFacts | None = None) -> dict[str, Any]:
    """What was released, how, and what it cost; nothing data-dependent but the noisy outputs."""
    by_name = {t.name: t for t in spec.tables}
    return {
        "format": MANIFEST_FORMAT,
        "release": plan.release,
        "dataset": plan.dataset,
        **({"exact_publications": {  # first: what is published outside differential privacy
            "protected_by_differential_privacy": False,
            "totals": [f"persons per place at {level}: exact" for level in spec.invariant_levels]}}
           if spec.invariants else {}),
        "run_id": run_id,
        "created_at": created_at,
        "software": {"name": "dprelease", "version": __version__},
        "spec_fingerprint": plan.fingerprint,
        **({"auto_split": plan.split.record()} if plan.split else {}),  # epsilon: auto: the planner's split
        **(facts.manifest_part() if facts is not None else {}),
        "context_warnings": list(facts.warnings if facts is not None else ()),  # beyond the plan's review
        "warnings": [*(facts.warnings if facts is not None else ()), *review_warnings(replace(
            plan_facts(plan, spec.dataset.partition_note), evaluations=tuple(
                (e.evaluated_at, e.evaluated_by) for e in (facts.evaluations if facts is not None else ()))))],
        **({"release_template": spec.release_template, "run_date": spec.run_date.isoformat()}  # type: ignore[union-attr]
           if spec.release_template else {}),
        "spec": "spec.json",
        **({"partition": {"column": spec.dataset.partition_column, "value": spec.dataset.partition_value,
                          "disjoint_units": spec.dataset.disjoint_units, "ledger_dataset": spec.dataset.name,
                          "assumption": spec.dataset.partition_note}} if spec.dataset.partition_column else {}),
        "privacy": {"definition": spec.definition, "unit": spec.unit, "neighbouring": plan.neighbouring,
                    "ledger_terms": plan.terms.text,
                    **({"contribution_bound": {"id": spec.unit_id, "max_rows": spec.max_rows}}
                       if spec.unit == "person" else {})},
        # the budgets as typed records: each names its own unit (epsilon, rho, or epsilon and delta)
        "budget": {"kind": plan.total.kind, "total": budget_record(plan.total),
                   "release": budget_record(plan.release_budget), "ledger_charge": budget_record(plan.charge),
                   "lifetime": {"cap": budget_record(plan.lifetime_budget),
                                "spent_before": budget_record(plan.lifetime_spent),
                                "spent_after": budget_record(plan.lifetime_spent_after),
                                "remaining": budget_record(plan.lifetime_remaining_after)}},
        **({"implied_approximate_dp": budget_record(ApproxDP(zcdp_epsilon(plan.charge.rho, plan.guarantee_delta),
                                                             plan.guarantee_delta))}
           if isinstance(plan.charge, ZCDP) and plan.guarantee_delta is not None else {}),
        "confidence": fraction_text(plan.confidence),
        "geography": list(spec.geography),
        **({"invariants": {
            "protected_by_differential_privacy": False,
            "declared": list(spec.invariants),
            "totals": [{"level": level, "file": invariant_path(level)} for level in spec.invariant_levels],
            "note": "published exactly: the number of persons per place at these levels is NOT protected by "
                    "differential privacy, and every table's ε holds only between datasets with the same totals",
        }} if spec.invariants else {}),
        **({"local_tables": [
            {"name": p.name, "column": p.column, "protocol": p.protocol, "categories": p.categories,
             "epsilon_local": p.epsilon_shown, "epsilon_local_bound": fraction_text(p.collection.epsilon),
             "keep_probability": p.keep_probability, "collection": p.collection.collection,
             "memoised": p.collection.memoised, "charged_per_respondent": amount_text(p.charge),
             "already_recorded": p.already_recorded, "file": f"tables/{p.name}.csv",
             "provenance": None if p.provenance is None else {
                 "how": p.provenance.how, "statement": p.provenance.statement, "memo_of": p.provenance.memo_of,
                 "registered_by": p.provenance.registered_by, "registered_at": p.provenance.registered_at},
             **({"memo_not_honoured": "memoised: true, but the registered answers were not produced from the memo "
                                      "of that collection: charged as a fresh collection"}
                if p.memo_not_honoured else {}),
             "estimators": {"share": "iterative Bayesian update (maximum likelihood on the simplex)",
                            "share_mi": "matrix inversion, projected onto the simplex"}}
            for p in plan.local],
            "local_epsilon_per_respondent": {"before": amount_text(plan.local_spent),
                                             "after": amount_text(plan.local_spent_after)}}
           if plan.local else {}),
        "tables": [
            {"name": t.name, "level": t.level, "budget": budget_record(t.budget),
             "ledger_charge": budget_record(t.ledger_charge), "mechanism": t.mechanism,
             "sensitivity": t.shown_sensitivity, "scale": fraction_text(t.shown_scale), "cells": t.cells,
             "measured_cells": t.measured_cells, "structural_cells": len(t.structural),
             **({"structural": structural_record(by_name[t.name], t)} if t.structural else {}),
             # a count's or sum's cell margin in its own unit; a mean, a mode and a quantile have
             # none such (a mean's parts carry theirs): each has its margin record below only
             **({"moe": t.moe, "moe95": t.moe95} if _cell_margin(by_name[t.name]) else {}),
             "post_process": by_name[t.name].post_process,
             "margin": margin_of(t, plan.confidence).record(unit_words(by_name[t.name].measure)),
             "columns": column_meanings(spec, by_name[t.name], _dims(by_name[t.name], t.level), t.structural_mask(),
                                        margin_of(t, plan.confidence) if spec.margin_columns else None),
             **({"upper": t.upper} if t.upper is not None else {}),
             **({"parts": [{"part": part, "budget": budget_record(p.budget), "mechanism": p.mechanism,
                            "ledger_charge": budget_record(p.charge),
                            "sensitivity": p.shown_sensitivity, "scale": fraction_text(p.shown_scale), "moe": p.moe,
                            "moe95": p.moe95,
                            **({"mechanism_epsilon": fraction_text(p.pure_epsilon)}
                               if p.pure_epsilon is not None else {})}
                           for part, p in zip(("sum", "count"), t.parts)]} if t.parts else {}),
             **({"mechanism_epsilon": fraction_text(t.pure_epsilon)} if t.pure_epsilon is not None else {}),
             **({"monotone": t.noise.monotone} if isinstance(t.noise, PermuteAndFlip) else {}),
             **({"measure": {"sum": m.column, "bounds": [m.low, m.high], "granularity": m.granularity,
                             "missing": "zero" if m.missing_as_zero else "error"}}
                if isinstance(m := by_name[t.name].measure, SumMeasure)
                else {"measure": {"mean": m.column, "bounds": [m.low, m.high], "granularity": m.granularity,
                                  "missing": m.missing, "centre": m.centre, "sum_share": fraction_text(m.sum_share),
                                  "rule": "mean = centre + noisy sum / noisy count, clamped to the bounds; empty "
                                          "where the noisy count is below 1"}}
                if isinstance(m, MeanMeasure)
                else {"measure": {m.kind: m.column, **({"q": fraction_text(m.q)} if m.q is not None else {})}}
                if isinstance(m, ModeMeasure) else {"measure": "count"}),
             "consistency": by_name[t.name].consistency,
             "group_by": list(by_name[t.name].group_by),
             "where": [[c.column, c.op, list(c.operand)] for c in by_name[t.name].where],
             "file": table_file(by_name[t.name], t.level, t.cells),
             "measurements": table_path(by_name[t.name], t.level, "measurements", "parquet")}
            for t in plan.tables
        ],
    }


def structural_record(table: Table, plan: TablePlan) -> dict[str, Any]:
    """The manifest's account of a measurement's structural cells: every one, as its categories."""
    return {"published": "omitted" if table.structural_zeros == "omit" else "exact 0, marked structural",
            "why": "no row can be in these cells: the table's where and the spec's rules exclude them (a function "
                   "of the spec alone); they are not measured, get no noise and have no margin of error",
            "summary": list(plan.structural_summary),
            "cells": [list(c) for c in plan.structural_labels]}


def budget_record(budget: Budget) -> dict[str, str]:
    """A budget as the manifest states it, under its own unit's name: ``{"epsilon": "1/4"}``,
    ``{"rho": "3/10"}`` or ``{"epsilon": "1/2", "delta": "1/1000000"}``."""
    match budget:
        case ZCDP(rho=rho):
            return {"rho": fraction_text(rho)}
        case ApproxDP(epsilon=epsilon, delta=delta):
            return {"epsilon": fraction_text(epsilon), "delta": fraction_text(delta)}
        case PureDP(epsilon=epsilon):
            return {"epsilon": fraction_text(epsilon)}
    raise InternalError(f"not a budget: {budget!r}")


def _cell_margin(table: Table) -> bool:
    """Whether ``table`` publishes counts or sums: the measures whose cells' ``moe`` is a margin
    in their own unit (persons, the summed column's)."""
    return table.measure is None or isinstance(table.measure, SumMeasure)


def _dims(table: Table, level: str | None) -> tuple[str, ...]:
    """The dimensions of ``table``'s measurement at ``level`` (its file's category columns)."""
    return next(dims for at, dims, _ in table.measured() if at == level)
