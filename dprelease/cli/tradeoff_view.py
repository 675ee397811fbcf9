"""How ``plan --tradeoff`` and ``plan --allocate`` look, as text and JSON. The figures come from
:mod:`dprelease.plan.tradeoff` and :mod:`dprelease.plan.allocation`; nothing is decided here."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dprelease.accounting import Budget, decimal_text, fraction_text, percent_text, symbol_key
from dprelease.publish.manifest import budget_record
from dprelease.plan import Plan
from dprelease.plan.allocation import Allocation, Share
from dprelease.plan.tradeoff import FACTORS, Curve

# ---------------------------------------------------------------- the trade-off


def _figure(x: Fraction) -> str:
    """An ε or ρ for reading: its exact decimal when it has one (within 12 places), else ≈ 6 places."""
    text = decimal_text(x, 12)
    return text if not text.startswith("≈") else decimal_text(x, 6)


def _unit_words(plan: Plan) -> str:
    if plan.symbol == "ρ":
        return "ρ"
    return "ε (at each table's own δ)" if plan.release_budget.kind == "approx" else "ε"


def tradeoff_lines(plan: Plan, curves: tuple[Curve, ...]) -> list[str]:
    """Per measurement, the budgets of its grid and the margin at each, the spec's in [brackets]."""
    confidence = percent_text(curves[0].confidence) if curves else percent_text(plan.confidence)
    symbol = plan.symbol
    lines = [f"Privacy–accuracy trade-off (from the spec alone, no data read): the ± margin of error per cell at "
             f"{confidence} if a table's {_unit_words(plan)} were its spec's × "
             + ", ".join(fraction_text(f) for f in FACTORS) + "; [brackets] mark the spec's choice."]
    for c in curves:
        lines.append(f"  {c.key} ({c.mechanism})" + (f": {c.note}" if not c.points else ""))
        if not c.points:
            continue
        budgets = [_figure(p.budget.amount) for p in c.points]
        moes = ["—" if p.moe is None else str(p.moe) for p in c.points]
        marked = [(f"[{b}]", f"[{m}]") if p.factor == 1 else (b, m) for p, b, m in zip(c.points, budgets, moes)]
        widths = [max(len(b), len(m)) for b, m in marked]
        lines.append(f"    {symbol:<5}  " + "  ".join(b.rjust(w) for (b, _), w in zip(marked, widths)))
        lines.append(f"    {'± MoE':<5}  " + "  ".join(m.rjust(w) for (_, m), w in zip(marked, widths)))
        if c.note:
            lines.append(f"    ({c.note})")
    if any(p.moe is None for c in curves for p in c.points):
        lines.append("  —: no noise of the table's mechanism exists at that budget (the exact sampler cannot take "
                     "its scale, or (ε, δ) leaves no room for Gaussian noise)")
    return lines


def tradeoff_json(curves: tuple[Curve, ...], confidence: Fraction) -> dict[str, Any]:
    return {"confidence": fraction_text(confidence), "factors": [fraction_text(f) for f in FACTORS],
            "tables": [{"name": c.name, "level": c.level,
                        "mechanism": c.mechanism, "budget": budget_record(c.budget),
                        "moe": None if c.chosen is None else c.chosen.moe, "note": c.note,
                        "points": [{"factor": fraction_text(p.factor), "budget": budget_record(p.budget),
                                    "moe": p.moe} for p in c.points]}
                       for c in curves]}


# ---------------------------------------------------------------- the allocation, as a spec fragment


def _yaml_amount(x: Fraction) -> str:
    """A budget as the spec reads it, exactly: a terminating decimal, else a fraction."""
    text = decimal_text(x, 15)
    return fraction_text(x) if text.startswith("≈") else text


def _by_table(allocation: Allocation) -> list[list[Share]]:
    groups: dict[str, list[Share]] = {}
    for s in allocation.shares:
        groups.setdefault(s.name, []).append(s)
    return list(groups.values())


def _budget_yaml(shares: list[Share], spec: bool = False) -> str:
    def one(s: Share) -> str:
        return _yaml_amount((s.spec_budget if spec else s.budget).amount)

    if shares[0].level is None:
        return one(shares[0])
    return "{" + ", ".join(f"{s.level}: {one(s)}" for s in shares) + "}"


def _margins(shares: list[Share]) -> str:
    def one(s: Share) -> str:
        return "—" if s.moe is None else f"{s.moe_spec} → {s.moe}" if s.moe != s.moe_spec else str(s.moe)

    if shares[0].level is None:
        return one(shares[0])
    return ", ".join(f"{s.level} {one(s)}" for s in shares)


def allocation_yaml(plan: Plan, allocation: Allocation) -> str:
    """The proposal as a spec fragment (``tables:`` entries with their budgets), everything else
    as YAML comments: the whole text is valid YAML."""
    a, symbol = allocation, plan.symbol
    key = symbol_key(symbol)
    conf = percent_text(a.confidence)
    release = _yaml_amount(plan.release_budget.amount)
    formula = ("εᵢ ∝ (wᵢ·cᵢ·Δᵢ²)^(1/3)" if symbol == "ε" else
               "ρᵢ ∝ (wᵢ·cᵢ·kᵢ)^(1/2), kᵢ = Δ₂ᵢ²/2 (discrete Gaussian) or Δᵢ² (a pure mechanism at ε²/2 = ρ)")
    lines = [
        f"# Proposed {symbol} split of release {plan.release}'s budget {symbol} = {release}: a proposal only, nothing "
        "is written or spent.",
        f"# It minimises Σ wᵢ·cᵢ·Varᵢ, the weighted sum of the expected squared errors of the noisy cells (before "
        f"post-processing): {formula},",
        "# cᵢ the cells measured (per level of a geographic table), Δᵢ the sensitivity, wᵢ the weight (default 1); "
        "each share rounded DOWN to 3 significant digits.",
    ]
    if any(s.role == "target" for s in a.shares):
        lines.append(f"# Tables with a target get the smallest {symbol} that meets it at {conf} (rounded up); the "
                     "others share what remains.")
    spent = a.total.amount
    lines.append(f"# Total {symbol} = {_yaml_amount(spent)} of {release}"
                 + (f" ({_yaml_amount(a.unspent)} left unallocated: "
                    + ("by the rounding" if any(s.role == "formula" for s in a.shares) else "every table it could go to "
                       "has a target") + ")" if a.unspent else "") + ".")
    lines.append(f"# Weighted squared error of the split tables: {a.error:,.1f} proposed, "
                 + _versus("the spec's split", a.error, a.spec_error) + " and "
                 + _versus(f"an equal split of the same {symbol}", a.error, a.equal_error) + ".")
    if plan.split is not None:
        lines.append(f"# The spec's split is the planner's ({key}: auto), chosen for the error of the published, "
                     "post-processed estimates, by which this proposal's formula (unrounded) has "
                     f"{plan.split.separate_error / plan.split.error:.4f}× its error (`dprelease plan` shows both); keep {key}: auto unless the tables are published unprocessed.")
    lines.append("tables:")
    for shares in _by_table(a):
        s = shares[0]
        if s.role == "kept":
            note = f"kept: {s.why}"
        else:
            was = _budget_yaml(shares, spec=True)
            how = f"target {s.why}" if s.role == "target" else f"weight {fraction_text(s.weight)}"
            cells = ", ".join(f"{x.cells:,}" for x in shares)
            note = f"was {was}; {how}; cells {cells}; ± MoE {conf} {_margins(shares)}"
        lines.append(f"  - name: {s.name}")
        lines.append(f"    {key}: {_budget_yaml(shares)}  # {note}")
    if plan.local:
        lines.append(f"# local tables ({', '.join(p.name for p in plan.local)}) spend no central budget: not part of "
                     "the split.")
    return "\n".join(lines)


def _versus(what: str, proposed: float, other: float) -> str:
    """``19.3% below the spec's split (5,053.9)`` (for display: the errors are floats)."""
    if other <= 0 or proposed == other:
        return f"{'equal to ' if proposed == other else ''}{what} ({other:,.1f})"
    change = (proposed - other) / other * 100
    return f"{abs(change):.1f}% {'below' if change < 0 else 'above'} {what} ({other:,.1f})"


def allocation_json(plan: Plan, allocation: Allocation) -> dict[str, Any]:
    a = allocation

    def record(b: Budget) -> dict[str, str]:
        return budget_record(b)

    return {"release": plan.release, "budget": record(plan.release_budget), "total": record(a.total),
            "unallocated": fraction_text(a.unspent), "exponent": fraction_text(a.exponent),
            "confidence": fraction_text(a.confidence),
            "weighted_squared_error": {"proposed": a.error, "spec": a.spec_error, "equal": a.equal_error},
            "tables": [{"name": s.name, "level": s.level, "role": s.role, "why": s.why or None,
                        "weight": fraction_text(s.weight), "cells": s.cells,
                        "coefficient": None if s.coefficient is None else fraction_text(s.coefficient),
                        "spec_budget": record(s.spec_budget), "budget": record(s.budget),
                        "moe_spec": s.moe_spec, "moe": s.moe} for s in a.shares],
            "local_tables_not_split": [p.name for p in plan.local]}
