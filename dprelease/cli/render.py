"""How plans and ledgers look in the terminal and in JSON. No decisions are made here."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from dprelease.accounting import (
    ApproxDP,
    Neighbouring,
    Terms,
    ZCDP,
    add,
    amount_text,
    delta_of,
    exact_and_decimal,
    fraction_text,
    percent_text,
    subtract,
    symbol_key,
    unit_key,
    zero,
)
from dprelease.ledger.records import LIVE_STATES

if TYPE_CHECKING:  # the plan, its margins and the manifest (pyarrow) are imported where a plan is shown
    from dprelease.ledger import DatasetState, LedgerLocation
    from dprelease.plan import Plan, TablePlan
    from dprelease.plan.measurements import MeanPart



pct = percent_text
both = exact_and_decimal


TERMS_SHOWN = {"pure": "pure DP, add/remove one row", "pure-bounded": "pure DP, change one record: totals public (invariants, or counts of local answers)",
               "zcdp": "zCDP (ρ), add/remove one row", "zcdp-bounded": "zCDP (ρ), change one record: totals public (invariants, or counts of local answers)",
               "approx": "(ε, δ)-DP, add/remove one row",
               "approx-bounded": "(ε, δ)-DP, change one record: totals public (invariants, or counts of local answers)"}


def _terms_shown(terms: Terms) -> str:
    base = terms.kind + ("-bounded" if terms.change else "")
    return TERMS_SHOWN[base] + (f"; one person = one {terms.unit_id}" if terms.unit_id else "")


# ---------------------------------------------------------------- plan


def _text(x: Fraction | None) -> str | None:
    return None if x is None else fraction_text(x)


def plan_json(plan: Plan, location: LedgerLocation, ledger_exists: bool, ledger_id: str | None = None,
              units: dict[str, str] | None = None) -> dict[str, Any]:
    from dprelease.publish.manifest import budget_record
    from dprelease.plan.margins import margin_of

    return {
        "exact_publications": exact_publications(plan.invariants),  # NOT differentially private
        "release": plan.release,
        "dataset": plan.dataset,
        "fits": plan.fits,
        "fits_release_budget": plan.fits_release,
        "fits_lifetime_budget": plan.fits_lifetime,
        "already_released": plan.existing_run is not None,
        # typed: each record names its unit (epsilon, rho, or epsilon and delta)
        "budget": {"kind": plan.total.kind, "total": budget_record(plan.total),
                   "release": budget_record(plan.release_budget), "ledger_charge": budget_record(plan.charge),
                   "lifetime": {"cap": budget_record(plan.lifetime_budget), "spent": budget_record(plan.lifetime_spent),
                                "spent_after": budget_record(plan.lifetime_spent_after)}},
        # untyped figures: a key named by its unit ("total_rho" under zcdp), or a unit stated beside them
        f"total_{unit_key(plan.total)}": amount_text(plan.total),
        "release_budget": amount_text(plan.release_budget),
        "budget_unit": symbol_key(plan.symbol),
        "ledger_unit": symbol_key(plan.ledger_symbol),
        "ledger_charge": amount_text(plan.charge),  # in ledger_unit
        "confidence": fraction_text(plan.confidence),
        "delta": _text(plan.guarantee_delta if plan.guarantee_delta is not None else delta_of(plan.release_budget)),
        "total_delta": _text(delta_of(plan.charge)),
        "lifetime_delta": None if not isinstance(plan.lifetime_budget, ApproxDP) else {
            "budget": fraction_text(plan.lifetime_budget.delta),
            "spent": _text(delta_of(plan.lifetime_spent)),
            "spent_after": _text(delta_of(plan.lifetime_spent_after)),
        },
        "lifetime": {
            "budget": amount_text(plan.lifetime_budget),
            "spent": amount_text(plan.lifetime_spent),
            "remaining": amount_text(plan.lifetime_remaining),
            "spent_after": amount_text(plan.lifetime_spent_after),
            "remaining_after": amount_text(plan.lifetime_remaining_after),
            "new_dataset": plan.lifetime_is_new,
            # "cap" typed; the figure beside it under its unit's name ("rho" under zCDP terms)
            "changes": [{unit_key(c.budget): amount_text(c.budget), "cap": budget_record(c.budget), "reason": c.reason,
                         "by": c.set_by, "at": c.set_at} for c in plan.lifetime_caps],
        },
        "fingerprint": plan.fingerprint,
        "auto_split": plan.split.record() if plan.split else None,  # epsilon: auto: the planner's split
        "neighbouring": plan.neighbouring,
        "invariants": {"levels": list(plan.invariants), "protected_by_differential_privacy": False}
        if plan.invariants else None,
        "ledger": _where(location, ledger_exists, ledger_id),
        "evaluated_in_the_open": [{"evaluated_at": e.evaluated_at, "evaluated_by": e.evaluated_by, "trials": e.trials}
                                  for e in plan.evaluations],
        "local_tables": [{"name": p.name, "column": p.column, "protocol": p.protocol, "categories": p.categories,
                          "epsilon_local": p.epsilon_shown, "epsilon_local_bound": fraction_text(p.collection.epsilon),
                          "collection": p.collection.collection, "memoised": p.collection.memoised,
                          "charged_per_respondent": amount_text(p.charge), "already_recorded": p.already_recorded}
                         for p in plan.local],
        "tables": [
            {"name": t.name, "level": t.level, unit_key(t.budget): amount_text(t.budget), "mechanism": t.mechanism,
             "sensitivity": t.shown_sensitivity, "scale": fraction_text(t.shown_scale), "cells": t.cells,
             "measured_cells": t.measured_cells, "structural_cells": len(t.structural),
             "structural": {"summary": list(t.structural_summary), "cells": [list(c) for c in t.structural_labels]}
             if t.structural else None,
             # a count's or sum's cell margin; a mean, a mode and a quantile: their margin record only
             **({"moe95": t.moe95, "moe": t.moe} if margin_of(t, plan.confidence).kind == "cell" else {}),
             "delta": None if t.delta is None else fraction_text(t.delta),
             "margin": margin_of(t, plan.confidence).record((units or {}).get(t.name, "")),
             "mechanism_epsilon": fraction_text(t.mechanism_epsilon) if t.pure_epsilon is not None else None,
             **({"parts": [{"part": label, unit_key(p.budget): amount_text(p.budget), "sensitivity": p.shown_sensitivity,
                            "scale": fraction_text(p.shown_scale), "moe": p.moe, "moe95": p.moe95}
                           for label, p in zip(("sum", "count"), t.parts)]} if t.parts else {})}
            for t in plan.tables
        ],
    }


def print_margins(console: Console, plan: Plan, units: dict[str, str]) -> None:
    """The margins not counted in a cell's noise — a mean's (by its cells' count), a mode's count
    gap, a quantile's rank error — in words, at the plan's confidence (:mod:`dprelease.plan.margins`)."""
    from dprelease.plan.margins import margin_of

    shown = [(t, margin_of(t, plan.confidence)) for t in plan.tables]
    shown = [(t, m) for t, m in shown if m.kind != "cell"]
    if shown:
        console.print(f"Margins in each measure's own units at {pct(plan.confidence)}:", markup=False, highlight=False)
    for t, m in shown:
        console.print(f"  {t.key} ({m.kind}): {m.text(units.get(t.name, ''))}", markup=False, highlight=False)


def exact_publications(levels: tuple[str, ...]) -> list[str]:
    """Each exact (not differentially private) publication, in words a reviewer cannot miss."""
    return [("the number of persons in the whole dataset (root): its exact count" if level == "root" else
             f"the number of persons in each {level}: their exact counts") for level in levels]


def print_plan(console: Console, plan: Plan, spec_path: str, partition_note: str | None = None,
               ledger_where: str | None = None, units: dict[str, str] | None = None) -> None:
    from dprelease.plan import TablePlan
    from dprelease.plan.margins import margin_of
    from dprelease.plan.measurements import Mean

    if plan.invariants:  # first: what this release publishes outside differential privacy
        console.print("EXACT PUBLICATIONS — NOT protected by differential privacy (the confidential counts "
                      "themselves, no noise):", markup=False, highlight=False)
        for line in exact_publications(plan.invariants):
            console.print(f"  * {line}", markup=False, highlight=False)
        console.print("  Every table below is planned under change one record (bounded DP): every sensitivity is 2. "
                      "A run needs this exact plan approved (`dprelease plan SPEC --approve --by NAME`).",
                      markup=False, highlight=False)
    conf = pct(plan.confidence)
    table = Table(title=f"Plan for release {plan.release} ({spec_path})", title_justify="left")
    gaussian = {t.mechanism == "discrete_gaussian" for t in plan.tables}
    sensitivity, scale = (("Δ₂²", "σ²") if gaussian == {True} else ("sensitivity", "noise scale") if gaussian == {False}
                          else ("Δ₁ (Δ₂² Gaussian)", "scale (σ² Gaussian)"))
    columns = [("table", "left"), (plan.symbol, "right")] + ([("δ", "right")] if plan.approx else []) + [
        ("mechanism", "left"), (sensitivity, "right"), (scale, "right"),
        ("cells", "right"), (f"± MoE {conf}", "right")]
    for header, justify in columns:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    if plan.relation != Neighbouring() and not plan.invariants:  # not the default relation
        console.print(f"Note: neighbouring datasets: {plan.neighbouring}; the sensitivities below follow from it.",
                      markup=False, highlight=False)

    means = [(f"{t.key} · mean: {label}", p, t) for t in plan.tables if isinstance(t.noise, Mean)
             for label, p in zip(("sum", "count"), t.noise.parts)]  # a row per part, after the other tables
    rows: list[tuple[str, TablePlan | MeanPart, TablePlan]] = [
        (t.key, t, t) for t in plan.tables if not isinstance(t.noise, Mean)]
    for key, m, t in rows + means:  # m: what is measured (a table, or a mean's part); t: its cells
        mechanism = m.mechanism if m.pure_epsilon is None else f"{m.mechanism} at ε = {fraction_text(m.pure_epsilon)}"
        table.add_row(key, amount_text(m.budget, decimal=True), *([fraction_text(m.delta or 0)] if plan.approx else []), mechanism,
                      str(m.shown_sensitivity), both(m.shown_scale),
                      f"{t.measured_cells:,} + {len(t.structural):,} structural" if t.structural else f"{t.cells:,}",
                      margin_of(m, plan.confidence).short() if isinstance(m, TablePlan) else str(m.moe))
    if plan.tables:
        console.print(table)
    else:
        console.print(f"Plan for release {plan.release} ({spec_path}): no central tables", markup=False,
                      highlight=False)
    if means:
        console.print("Means: each is a noisy sum of value − centre (the bounds' midpoint) over a noisy count of the "
                      "same rows, the table's budget split as shown; mean = centre + sum/count, clamped to the "
                      "bounds, empty where the noisy count is below 1.", markup=False, highlight=False)
    console.print(f"MoE: per cell, P(|noise| > MoE) ≤ {pct(1 - plan.confidence)}, from the exact "
                  "noise distribution (before clamping).", markup=False, highlight=False)
    print_margins(console, plan, units or {})
    print_structural(console, plan)
    for line in plan.split.lines() if plan.split else ():  # epsilon: auto
        console.print(line, markup=False, highlight=False)
    over = subtract(plan.total, plan.release_budget)  # a line for its ε (ρ), and under approx one for its δ
    mark = "fits" if over.amount <= 0 else f"OVER by {amount_text(over, decimal=True)}"
    console.print(f"Release budget:  total {plan.symbol} = {amount_text(plan.total, decimal=True)} of "
                  f"{amount_text(plan.release_budget, decimal=True)} — {mark}", markup=False, highlight=False)
    if isinstance(plan.total, ApproxDP) and isinstance(plan.release_budget, ApproxDP) and isinstance(over, ApproxDP):
        console.print(f"Release δ:       total δ = {fraction_text(plan.total.delta)} of "
                      f"{fraction_text(plan.release_budget.delta)} — "
                      f"{'fits' if over.delta <= 0 else f'OVER by {fraction_text(over.delta)}'} (δ composes by addition)",
                      markup=False, highlight=False)
    new = " (new to the ledger; cap from the spec)" if plan.lifetime_is_new else ""
    after, life = plan.lifetime_spent_after, plan.lifetime_budget
    over = subtract(after, life)  # this line's is the ε (ρ): δ has its own line below
    mark = "fits" if over.amount <= 0 else f"OVER by {amount_text(over, decimal=True)}"
    if plan.ledger_symbol != plan.symbol:
        console.print("This pure ε-DP release is charged to a zCDP ledger as ρ = Σ ε²/2 = "
                      f"{amount_text(plan.charge, decimal=True)} "
                      "(ε-DP implies ε²/2-zCDP).", markup=False, highlight=False)
    if plan.guarantee_delta is not None and isinstance(plan.charge, ZCDP):
        from dprelease.accounting import zcdp_epsilon

        console.print(f"Implied (ε, δ)-DP of this release: ε = {both(zcdp_epsilon(plan.charge.rho, plan.guarantee_delta))} "
                      f"at δ = {fraction_text(plan.guarantee_delta)}.", markup=False, highlight=False)
    console.print(f"Lifetime budget ({plan.ledger_symbol}) of dataset {plan.dataset}{new}: cap "
                  f"{amount_text(life, decimal=True)}, spent {amount_text(plan.lifetime_spent, decimal=True)} → "
                  f"{amount_text(after, decimal=True)} after this release, remaining "
                  f"{amount_text(plan.lifetime_remaining, decimal=True)} → "
                  f"{amount_text(plan.lifetime_remaining_after, decimal=True)} — {mark}",
                  markup=False, highlight=False)
    if isinstance(life, ApproxDP) and isinstance(after, ApproxDP) and isinstance(plan.lifetime_spent, ApproxDP):
        console.print(f"Lifetime δ of dataset {plan.dataset}: cap {fraction_text(life.delta)}, spent "
                      f"{fraction_text(plan.lifetime_spent.delta)} → {fraction_text(after.delta)} after this release — "
                      f"{'fits' if after.delta <= life.delta else 'OVER'}", markup=False, highlight=False)
    if len(plan.lifetime_caps) > 1:
        for c in plan.lifetime_caps[1:]:
            console.print(f"  the cap was changed to {amount_text(c.budget)} on {c.set_at[:19]} by {c.set_by}: "
                          f"{c.reason}", markup=False, highlight=False)
    if plan.data_versions > 1:
        console.print(f"Note: earlier releases of {plan.dataset} read {plan.data_versions} different versions "
                      "of the data file; they are the same people and spend from one budget.",
                      markup=False, highlight=False)
    if plan.existing_run is not None:
        r = plan.existing_run
        console.print(f"Release {plan.release} is already {r.state} in the ledger (run {r.run_id}, "
                      f"{r.created_at}): a run would be refused.", markup=False, highlight=False)
    if plan.local:
        local = Table(title="Local tables (answers randomized by the respondents; no central budget)",
                      title_justify="left")
        for header in ("table", "column", "protocol", "ε per respondent", "collection", "charged now"):
            local.add_column(header)
        for p in plan.local:
            charged = "already recorded (if the answers are the same)" if p.already_recorded else (
                f"{amount_text(p.charge, decimal=True)} (memoised)" if p.collection.memoised
                else amount_text(p.charge, decimal=True))
            local.add_row(p.name, p.column, f"{p.protocol} (k = {p.categories})",
                          p.epsilon_shown if p.epsilon_shown == fraction_text(p.collection.epsilon)
                          else f"{p.epsilon_shown} (≤ {both(p.collection.epsilon)})", p.collection.collection, charged)
        console.print(local)
        console.print("A local table reads only answers registered in the ledger (`dprelease randomize`, or "
                      "`dprelease ledger register-answers`); a memoised collection costs nothing new only when its "
                      "answers' registration says they came from that memo. The run checks both.",
                      markup=False, highlight=False)
        console.print(f"Each respondent's ε over local collections of {plan.dataset}: "
                      f"{amount_text(plan.local_spent, decimal=True)} → "
                      f"{amount_text(plan.local_spent_after, decimal=True)} (collections of the same people compose)",
                      markup=False, highlight=False)
    if partition_note:
        console.print(f"Period: {partition_note}.", markup=False, highlight=False)
    for e in plan.evaluations:
        console.print(f"NOTE: data of dataset {plan.dataset} was evaluated in the open (NOT private: errors against "
                      f"the exact data) on {e.evaluated_at[:19]} UTC by {e.evaluated_by} ({e.trials} trials); a release "
                      "of it says so in its manifest and report.", markup=False, highlight=False)
    if ledger_where:
        console.print(f"Budget lives in: {ledger_where}", markup=False, highlight=False)
    console.print(f"Plan fingerprint: {plan.fingerprint}", markup=False, highlight=False)


def print_structural(console: Console, plan: Plan, limit: int = 40) -> None:
    """Each measurement's structural cells: impossible by the table's own definition (its where
    and the spec's rules), so not measured and published as exact zeros (no noise, no MoE)."""
    tables = [t for t in plan.tables if t.structural]
    if not tables:
        return
    console.print("Structural zeros (impossible by the table's where and the spec's rules; not measured, published "
                  "as exact 0, no noise and no MoE):", markup=False, highlight=False)
    for t in tables:
        console.print(f"  {t.key}: {len(t.structural):,} of {t.cells:,} cells — {'; '.join(t.structural_summary)}",
                      markup=False, highlight=False)
        shown = [" × ".join(c) for c in t.structural_labels[:limit]]
        more = f", … (+{len(t.structural) - limit:,}; all in --json)" if len(t.structural) > limit else ""
        console.print(f"    {', '.join(shown)}{more}", markup=False, highlight=False)


# ---------------------------------------------------------------- ledger


def _print_records(console: Console, policies: Any, evaluations: Any) -> None:
    for p in policies:
        console.print(f"  policy: {p.policy} {p.value}, set {p.set_at[:19]} by {p.set_by}: {p.reason}",
                      markup=False, highlight=False)
    for e in evaluations:
        console.print(f"  evaluated in the open (NOT private) {e.evaluated_at[:19]} by {e.evaluated_by} "
                      f"({e.trials} trials)", markup=False, highlight=False)


def _where(location: LedgerLocation, exists: bool, ledger_id: str | None) -> dict[str, Any]:
    return {"url": location.shown, "source": location.source, "chosen_by": location.how_chosen, "exists": exists,
            "id": ledger_id}


def _records(policies: Any, evaluations: Any) -> dict[str, Any]:
    return {"evaluated_in_the_open": [{"evaluated_at": e.evaluated_at, "evaluated_by": e.evaluated_by,
                                       "trials": e.trials} for e in evaluations],
            "policies": [{"policy": p.policy, "value": p.value, "reason": p.reason, "by": p.set_by, "at": p.set_at}
                         for p in policies]}


def ledger_json(states: list[DatasetState], location: LedgerLocation, exists: bool,
                ledger_id: str | None = None, undeclared: dict[str, Any] | None = None,
                answer_sets: tuple[Any, ...] = (), birth: Any = None) -> dict[str, Any]:
    """The ledger's contents for review, with how the ledger was born (None: before births were
    recorded). Data fingerprints are never shown (even keyed)."""
    from dprelease.publish.manifest import budget_record

    return {
        "ledger": {**_where(location, exists, ledger_id), "born": None if birth is None else birth.record()},
        "answer_sets": [{"dataset": a.dataset, "collection": a.collection, "question": a.question,
                         "protocol": a.protocol, "epsilon": fraction_text(a.epsilon), "memo_of": a.memo_of,
                         "how": a.how, "statement": a.statement, "registered_by": a.registered_by,
                         "registered_at": a.registered_at} for a in answer_sets],
        "without_releases": [{"name": n, **_records(p, e)} for n, (p, e) in (undeclared or {}).items()],
        "datasets": [
            {
                "name": s.name,
                "definition": s.terms.text,
                "terms": {"guarantee": s.terms.kind, "change_one_record": s.terms.change, "unit_id": s.terms.unit_id},
                "ledger_unit": unit_key(s.budget),  # of "budget", "spent" and "remaining", as plan --json names it
                "budget": amount_text(s.budget),
                "spent": amount_text(s.spent),
                "remaining": amount_text(s.remaining),
                # typed (each names its unit); the figures above are in the terms' unit ("terms")
                "lifetime": {"cap": budget_record(s.budget), "spent": budget_record(s.spent)},
                "delta_budget": _text(delta_of(s.budget)),
                "delta_spent": _text(delta_of(s.spent)),
                "data_versions": s.data_versions,
                "local_epsilon_per_respondent": amount_text(s.local_epsilon),
                "local_collections": [{"collection": r.collection, "question": r.question, "protocol": r.protocol,
                                       "epsilon": fraction_text(r.epsilon), "charged": amount_text(r.charged),
                                       "memoised": r.memoised, "run_id": r.run_id, "recorded_at": r.recorded_at,
                                       "recorded_by": r.recorded_by} for r in s.local],
                **_records(s.policies, s.evaluations),
                # "cap" typed; the figure beside it under its unit's name ("rho" under zCDP terms)
                "budget_changes": [{unit_key(c.budget): amount_text(c.budget), "cap": budget_record(c.budget),
                                    "reason": c.reason, "by": c.set_by, "at": c.set_at} for c in s.caps],
                "releases": [
                    {"release": r.release, unit_key(r.charge): amount_text(r.charge),
                     "charge": budget_record(r.charge),
                     "delta": _text(delta_of(r.charge)), "state": r.state,
                     "unfinished": r.unfinished, "state_at": r.state_at, "reason": r.reason,
                     "output_dir": r.output_dir,
                     "created_at": r.created_at, "created_by": r.created_by, "run_id": r.run_id,
                     "spec_fingerprint": r.spec_fingerprint,
                     "approval": None if r.approved_by is None else {"approved_by": r.approved_by,
                                                                     "approved_at": r.approved_at,
                                                                     "plan_fingerprint": r.spec_fingerprint},
                     "tables": [{"name": n, unit_key(b): amount_text(b), "charge": budget_record(b)}
                                for n, b in r.charges]}
                    for r in s.runs
                ],
            }
            for s in states
        ],
    }


def print_ledger(console: Console, states: list[DatasetState], undeclared: dict[str, Any] | None = None,
                 answer_sets: tuple[Any, ...] = ()) -> None:
    for name, (policies, evaluations) in (undeclared or {}).items():
        console.print(f"\nDataset {name} (no release yet)", markup=False, highlight=False)
        _print_records(console, policies, evaluations)
    if answer_sets:
        console.print("\nRegistered answers (what kind: local tables may read):", markup=False, highlight=False)
        for a in answer_sets:
            console.print(f"  {a.dataset}: {a.collection}/{a.question} ({a.protocol}"
                          + (f", from the memo of {a.memo_of}" if a.memo_of else "") + f") — {a.how}"
                          + (f": {a.statement}" if a.statement else "")
                          + f" (by {a.registered_by}, {a.registered_at[:19]} UTC)", markup=False, highlight=False)
    if not states:
        console.print("No datasets with releases in this ledger yet.")
        return
    for s in states:
        symbol = s.terms.symbol
        console.print(f"\nDataset {s.name} ({_terms_shown(s.terms)}): cap {symbol} = "
                      f"{amount_text(s.budget, decimal=True)}, spent {amount_text(s.spent, decimal=True)}, remaining "
                      f"{amount_text(s.remaining, decimal=True)}", markup=False, highlight=False)
        if isinstance(s.budget, ApproxDP) and isinstance(s.spent, ApproxDP) and isinstance(s.remaining, ApproxDP):
            console.print(f"  cap δ = {fraction_text(s.budget.delta)}, spent {fraction_text(s.spent.delta)}, "
                          f"remaining {fraction_text(s.remaining.delta)}", markup=False, highlight=False)
        if s.caps:
            for c in s.caps:
                cap = amount_text(c.budget) + ("" if not isinstance(c.budget, ApproxDP)
                                               else f", δ {fraction_text(c.budget.delta)}")
                console.print(f"  cap set to {cap} on {c.set_at[:19]} by {c.set_by}: "
                              f"{c.reason}", markup=False, highlight=False)
        if s.local:
            console.print("  local collections: each respondent's ε ≤ "
                          f"{amount_text(s.local_epsilon, decimal=True)} over "
                          + "; ".join(f"{r.collection}/{r.question} ({r.protocol}, ε ≤ {fraction_text(r.epsilon)}, "
                                      f"charged {amount_text(r.charged)}{', memoised' if r.memoised else ''})"
                                      for r in s.local), markup=False, highlight=False)
        _print_records(console, s.policies, s.evaluations)
        if s.data_versions > 1:
            console.print(f"  releases read {s.data_versions} versions of the data file: the same people, one "
                          "budget", markup=False, highlight=False)
        if not s.runs:
            continue
        table = Table(show_edge=False)
        approx = s.terms.kind == "approx"
        for header in ("release", symbol, *(("δ",) if approx else ()), f"spent after ({symbol})", "remaining",
                       "state", "created (UTC)", "by", "run"):
            table.add_column(header)
        spent = zero(s.terms.kind)
        for r in s.runs:  # the burn-down: what counts as spent after each release, in order
            state = f"{r.state} (unfinished{', noise drawn' if r.state == 'drawing' else ''})" if r.unfinished else r.state
            if r.state in LIVE_STATES:
                spent = add(spent, r.charge)  # one kind, by construction
            if r.reason and r.state != "reserved":
                state += f" — {r.reason}"
            table.add_row(r.release, amount_text(r.charge, decimal=True),
                          *((_text(delta_of(r.charge)),) if approx else ()), amount_text(spent, decimal=True),
                          amount_text(subtract(s.budget, spent), decimal=True),
                          state, r.created_at[:19], r.created_by, r.run_id[:12])
        console.print(table)
        unfinished = [r for r in s.runs if r.unfinished]
        if unfinished:
            console.print(f"  {len(unfinished)} unfinished reservation(s) still count as spent: "
                          + ", ".join(f"run {r.run_id} ({r.release}, since {r.created_at[:19]})" for r in unfinished)
                          + "; if a run crashed, settle it with `dprelease ledger resolve RUN_ID --void|--commit|--fail "
                          "--reason TEXT`",
                          markup=False, highlight=False)
