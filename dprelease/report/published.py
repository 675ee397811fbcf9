"""``dprelease report RELEASE_DIR``: a reviewable budget report of a published release.

Reads only what the release published (``manifest.json``, ``budget_report.md``) and, when one
is reachable, the ledger's record of the dataset (for the burn-down of committed releases and
the reservations not committed). Formats: ``html`` (:mod:`dprelease.report.html`: one
semantic, self-contained page, its figures PNGs inlined as data URIs, no script), ``md`` and
``json``. Here: the JSON report, the burn-down, the warnings
(:func:`dprelease.plan.review.review_warnings` of the manifest's facts) and the trade-off
recomputed from the manifest at the spec's confidence. Nothing here touches data.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dprelease.accounting import ApproxDP, fraction_text, unit_key
from dprelease.ledger import DatasetState
from dprelease.ledger.records import LIVE_STATES
from dprelease.publish.manifest_reader import ReleaseBudgets, entry_budget, release_budgets
from dprelease.plan.margins import published_choice
from dprelease.plan.measurements import DiscreteGaussian, DiscreteLaplace, TruncatedGeometric
from dprelease.plan.review import LARGE_TABLE_EPSILON, LOW_REMAINING, review_warnings  # noqa: F401 (re-exported)
from dprelease.plan.tradeoff import MODE_NOTE, Curve, curve, mean_curve, noise_at
from dprelease.report.markdown import manifest_facts

CONFIDENCE_95 = Fraction(95, 100)  # the manifest's moe95, which a curve must also reproduce
NOT_REPRODUCIBLE = ("its margins cannot be recomputed from the manifest's figures (written by another version, or "
                    "altered): no trade-off shown")


@dataclass(frozen=True)
class BurnDownPoint:
    release: str
    state: str
    spent_after: Fraction
    created_at: str


def burn_down(manifest: dict[str, Any], state: DatasetState | None) -> list[BurnDownPoint]:
    """The dataset's committed spends after each committed release, in order: from the ledger when
    it is reachable, else this release alone (from its manifest). Runs not committed (voided,
    unfinished or failed reservations) are not steps of it: :func:`other_runs` lists them."""
    if state is None:
        budgets = release_budgets(manifest)
        return [BurnDownPoint("(before)", "committed", budgets.spent_before.amount, ""),
                BurnDownPoint(manifest["release"], "committed", budgets.spent_after.amount, manifest["created_at"])]
    spent, out = Fraction(0), [BurnDownPoint("(start)", "", Fraction(0), "")]
    for run in state.runs:
        if run.state == "committed":
            spent += run.charge.amount  # the figure a chart plots, in the terms' unit
            out.append(BurnDownPoint(run.release, run.state, spent, run.created_at))
    return out


@dataclass(frozen=True)
class OtherRun:
    """A reservation of the dataset that was not committed: voided (counts for nothing), or
    reserved, drawing or failed (still counted as spent until an operator settles it)."""

    run_id: str
    release: str
    state: str
    charge: Fraction  # in the ledger terms' unit
    created_at: str
    counts_as_spent: bool


def other_runs(state: DatasetState | None) -> list[OtherRun]:
    """The dataset's runs that are not committed, in order (none without a ledger)."""
    return [OtherRun(r.run_id, r.release, r.state, r.charge.amount, r.created_at, r.state in LIVE_STATES)
            for r in (state.runs if state is not None else ()) if r.state != "committed"]


def warnings(manifest: dict[str, Any], state: DatasetState | None) -> list[str]:
    """The release's warnings: those its manifest states beyond the plan's review
    (``context_warnings``: what `plan` showed of its context at publication, a large δ, tables
    re-measured), then the review's
    (:func:`dprelease.plan.review.review_warnings`, from its manifest) with the dataset's
    unfinished reservations when the ledger is reachable."""
    return [*manifest.get("context_warnings", ()), *review_warnings(manifest_facts(manifest), state)]


def _lifetime_json(budgets: ReleaseBudgets) -> dict[str, Any]:
    """The lifetime figures as the JSON report has always stated them (in the ledger terms' unit,
    and δ under (ε, δ) terms)."""
    cap, before, charge, after = budgets.cap, budgets.spent_before, budgets.ledger_charge, budgets.spent_after
    return {"budget": fraction_text(cap.amount), "spent_before": fraction_text(before.amount),
            "spent_after": fraction_text(after.amount), "remaining": fraction_text(budgets.remaining.amount),
            **({"delta": {"budget": fraction_text(cap.delta), "spent_before": fraction_text(before.delta),
                          "spent_after": fraction_text(after.delta)}}
               if isinstance(cap, ApproxDP) and isinstance(before, ApproxDP) and isinstance(after, ApproxDP)
               and isinstance(charge, ApproxDP) else {})}


def report_json(manifest: dict[str, Any], state: DatasetState | None) -> dict[str, Any]:
    budgets = release_budgets(manifest)
    return {
        **({"exact_publications": manifest["exact_publications"]} if "exact_publications" in manifest else {}),
        "release": manifest["release"], "dataset": manifest["dataset"], "run_id": manifest["run_id"],
        "budget_unit": unit_key(budgets.total), "total": fraction_text(budgets.total.amount),
        "release_budget": fraction_text(budgets.release.amount),
        "confidence": manifest["confidence"],  # of every "moe" and "margin" (the spec's); "moe95" is at 95%
        # "moe": a count's or sum's cell noise margin, in persons or the summed unit (a mean, a mode and a
        # quantile have none: a number of their parts or ranks would read as their own); "margin": every
        # measure's, in its own units
        "tables": [{"name": t["name"], "level": t.get("level"),
                    unit_key(entry_budget(t)): fraction_text(entry_budget(t).amount),  # "rho" under zcdp
                    "mechanism": t["mechanism"],
                    **({"moe95": t.get("moe95"), "moe": t.get("moe")} if _cell_margin(t) else {}),
                    **({"margin": t["margin"]} if "margin" in t else {}),  # in the measure's own units
                    "structural_cells": t.get("structural_cells", 0)}
                   for t in manifest["tables"]],
        "ledger_unit": unit_key(budgets.cap),  # of "lifetime", "burn_down" and "not_committed"
        "lifetime": _lifetime_json(budgets),
        "burn_down": [{"release": p.release, "state": p.state, "spent_after": fraction_text(p.spent_after),
                       "created_at": p.created_at} for p in burn_down(manifest, state)],
        "burn_down_source": "ledger" if state is not None else "manifest (this release only)",
        "not_committed": [{"run_id": r.run_id, "release": r.release, "state": r.state,
                           "charge": fraction_text(r.charge), "counts_as_spent": r.counts_as_spent,
                           "created_at": r.created_at} for r in other_runs(state)],
        "warnings": warnings(manifest, state),
        **{k: manifest[k] for k in ("ledger", "approval", "evaluated_in_the_open", "auto_split") if k in manifest},
        **({"partition": manifest["partition"]} if "partition" in manifest else {}),
    }


def _cell_margin(entry: dict[str, Any]) -> bool:
    """Whether a manifest's table is a count or a sum: the ones whose cells' ``moe`` is in their
    own unit (persons, the summed column's)."""
    measure = entry.get("measure", "count")
    return measure == "count" or (isinstance(measure, dict) and "sum" in measure)


# ---------------------------------------------------------------- the trade-off, from the manifest


def tradeoff_curves(manifest: dict[str, Any], confidence: Fraction | None = None) -> list[Curve]:
    """Per published measurement, its expected margin of error at ``confidence`` (default 95%; the
    spec's is ``Fraction(manifest["confidence"])``) had its ε (ρ; under (ε, δ) its ε at its δ) been
    the published one × :data:`~dprelease.plan.tradeoff.FACTORS`: from the manifest's mechanism,
    sensitivity, scale and granularity alone (the report works from a published release, not its
    spec), with the noise the planner would build at each budget
    (:func:`~dprelease.plan.tradeoff.noise_at`), in each measure's own units
    (:mod:`dprelease.plan.margins`: a mean's at n = 1,000 rows, a mode's count gap, a quantile's
    rank error). A curve is shown only where the manifest's own figures come back at the
    published budget (its noise, and for a count or sum its ``moe``/``moe95``)."""
    at = CONFIDENCE_95 if confidence is None else confidence
    return [_published_curve(manifest, t, at) for t in manifest["tables"]]


def _published_curve(manifest: dict[str, Any], t: dict[str, Any], confidence: Fraction) -> Curve:
    budget = entry_budget(t)
    name, level, mechanism = t["name"], t.get("level"), t.get("mechanism", "")
    if mechanism == "permute_and_flip":  # a mode's count gap, a quantile's rank error (plan.margins)
        try:
            choice = published_choice(t, budget)
            return curve(name, level, choice, budget, confidence)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return Curve(name, level, mechanism, budget, confidence, (), MODE_NOTE)
    measure = t.get("measure")
    g = int(measure.get("granularity", 1)) if isinstance(measure, dict) else 1
    try:
        if t.get("parts"):  # a mean: its margin at a cell of MEAN_AT rows (plan.margins), from both parts
            part, counted = t["parts"][0], t["parts"][1]
            noise, at = _published_noise(part, g), entry_budget(part)
            count = _published_noise(counted, 1)
            found = mean_curve(name, level, noise, at, budget, confidence,
                               count=(count, entry_budget(counted)), half_width=t["margin"]["half_width"])
            same = noise_at(count, entry_budget(counted)) == count and noise_at(noise, at) == noise
            return found if same else Curve(name, level, mechanism, budget, confidence, (), NOT_REPRODUCIBLE)
        else:
            noise, at = _published_noise(t, g), budget
            found = curve(name, level, noise, at, confidence)
            stated = _stated_moe(manifest, t, confidence)
        same = noise_at(noise, at) == noise and found.chosen is not None and stated in (None, found.chosen.moe)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        same = False
    return found if same else Curve(name, level, mechanism, budget, confidence, (), NOT_REPRODUCIBLE)


def _stated_moe(manifest: dict[str, Any], entry: dict[str, Any], confidence: Fraction) -> int | None:
    """The margin the manifest states for ``entry`` at ``confidence``: its ``moe`` at the release's
    confidence, its ``moe95`` at 95%; at any other, None (nothing stated to check against)."""
    if confidence == CONFIDENCE_95:
        return int(entry["moe95"])
    if confidence == Fraction(manifest["confidence"]):
        return int(entry["moe"])
    return None


def _published_noise(entry: dict[str, Any], granularity: int) -> DiscreteLaplace | DiscreteGaussian:
    """The noise a manifest entry (a table, or a mean's part) states: its ``sensitivity`` and
    ``scale`` are in value units (Δ and Δ/ε; for the discrete Gaussian Δ₂²·g² and σ²·g²)."""
    sensitivity, scale, mechanism = int(entry["sensitivity"]), Fraction(entry["scale"]), entry["mechanism"]
    if mechanism == "discrete_gaussian":
        if sensitivity % granularity ** 2:
            raise ValueError("a Gaussian's Δ₂² not on its granularity's grid")
        return DiscreteGaussian(sensitivity // granularity ** 2, scale / granularity ** 2, granularity)
    if mechanism == "truncated_geometric":
        return TruncatedGeometric(sensitivity, sensitivity / scale, granularity, upper=int(entry["upper"]))
    if mechanism == "discrete_laplace":
        return DiscreteLaplace(sensitivity, sensitivity / scale, granularity)
    raise ValueError(f"no margin of error for the {mechanism}")


TRADEOFF_MARK = "#e69f00"  # the published budget's point on each curve of the trade-off figure
