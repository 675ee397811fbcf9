"""``dprelease report RELEASE_DIR``: a reviewable budget report of a published release.

Reads only what the release published (``manifest.json``, ``budget_report.md``) and, when one
is reachable, the ledger's record of the dataset (for the burn-down across releases and the
unfinished reservations). Formats: ``html`` (one self-contained file: the plots are PNGs
inlined as data URIs, so it opens offline), ``md`` and ``json``. Nothing here touches data.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dprelease.accounting import ZCDP, ApproxDP, Budget, decimal_text, fraction_text
from dprelease.errors import UserError
from dprelease.ledger import DatasetState
from dprelease.ledger.records import LIVE_STATES
from dprelease.manifest import ReleaseBudgets, part_budget, release_budgets, table_budget
from dprelease.plan.margins import published_choice
from dprelease.plan.measurements import DiscreteGaussian, DiscreteLaplace, TruncatedGeometric
from dprelease.plan.tradeoff import FACTORS, MODE_NOTE, Curve, curve, mean_curve, noise_at

LARGE_TABLE_EPSILON = Fraction(1)  # a single table above this is flagged for review
LOW_REMAINING = Fraction(1, 10)  # flag when less than this share of the lifetime cap remains
CONFIDENCE_95 = Fraction(95, 100)  # the report's margins: the manifest's moe95
NOT_REPRODUCIBLE = ("its margins cannot be recomputed from the manifest's figures (written by another version, or "
                    "altered): no trade-off shown")


@dataclass(frozen=True)
class BurnDownPoint:
    release: str
    state: str
    spent_after: Fraction
    created_at: str


def read_release_json(path: Path) -> dict[str, Any]:
    """A JSON file of a published release (``manifest.json``, ``spec.json``), or a clear error."""
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} not found: is {path.parent} a published release directory?") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None


def read_manifest(release_dir: Path) -> dict[str, Any]:
    return read_release_json(release_dir / "manifest.json")


def burn_down(manifest: dict[str, Any], state: DatasetState | None) -> list[BurnDownPoint]:
    """What counted as spent after each release of the dataset, in order: from the ledger when it
    is reachable, else this release alone (from its manifest)."""
    if state is None:
        budgets = release_budgets(manifest)
        return [BurnDownPoint("(before)", "committed", budgets.spent_before.amount, ""),
                BurnDownPoint(manifest["release"], "committed", budgets.spent_after.amount, manifest["created_at"])]
    spent, out = Fraction(0), [BurnDownPoint("(start)", "", Fraction(0), "")]
    for run in state.runs:
        if run.state in LIVE_STATES:
            spent += run.charge.amount  # the figure a chart plots, in the terms' unit
        out.append(BurnDownPoint(run.release, run.state, spent, run.created_at))
    return out


def warnings(manifest: dict[str, Any], state: DatasetState | None) -> list[str]:
    out = []
    for t in manifest["tables"]:
        budget = table_budget(manifest, t)
        if budget.symbol == "ε" and budget.amount > LARGE_TABLE_EPSILON:  # a ρ is not compared with an ε threshold
            name = t["name"] if t.get("level") is None else f"{t['name']} @ {t['level']}"
            out.append(f"table {name} spends {budget.symbol} = {fraction_text(budget.amount)} (over "
                       f"{fraction_text(LARGE_TABLE_EPSILON)}): check it is intended")
    if "invariants" in manifest:
        levels = ", ".join(e["level"] for e in manifest["invariants"]["totals"])
        out.append(f"invariants: the number of persons per place at {levels} is published EXACTLY, not protected by "
                   "differential privacy")
    budgets = release_budgets(manifest)
    remaining, cap = budgets.remaining.amount, budgets.cap.amount
    if cap > 0 and remaining < cap * LOW_REMAINING:
        out.append(f"the dataset's lifetime budget is nearly spent: {fraction_text(remaining)} of "
                   f"{fraction_text(cap)} remained after this release")
    if state is not None:
        for run in state.runs:
            if run.unfinished:
                out.append(f"unfinished reservation: run {run.run_id} ({run.release}, since {run.created_at[:19]}) "
                           "still counts as spent; settle it with `dprelease ledger resolve`")
    if "partition" in manifest:
        out.append(f"period: {manifest['partition']['assumption']}")
    for e in manifest.get("evaluated_in_the_open", []):
        out.append(f"this data was evaluated in the open (NOT private) on {e['evaluated_at'][:19]} UTC by "
                   f"{e['evaluated_by']}: its errors against the exact data were seen outside differential privacy")
    if "local_epsilon_per_respondent" in manifest:
        out.append(f"local collections: each respondent's ε is now "
                   f"{decimal_text(Fraction(manifest['local_epsilon_per_respondent']['after']))} (not capped)")
    return out


def _unit(budget: Budget) -> str:
    """The name of a budget's one figure, as the JSON report's ``budget_unit`` states it."""
    return "rho" if isinstance(budget, ZCDP) else "epsilon"


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
        "budget_unit": _unit(budgets.total), "total": fraction_text(budgets.total.amount),
        "release_budget": fraction_text(budgets.release.amount),
        "tables": [{"name": t["name"], "level": t.get("level"),
                    "epsilon": fraction_text(table_budget(manifest, t).amount),  # in budget_unit, as ever
                    "mechanism": t["mechanism"], "moe95": t.get("moe95"),
                    "structural_cells": t.get("structural_cells", 0)}
                   for t in manifest["tables"]],
        "lifetime": _lifetime_json(budgets),
        "burn_down": [{"release": p.release, "state": p.state, "spent_after": fraction_text(p.spent_after),
                       "created_at": p.created_at} for p in burn_down(manifest, state)],
        "burn_down_source": "ledger" if state is not None else "manifest (this release only)",
        "warnings": warnings(manifest, state),
        **{k: manifest[k] for k in ("ledger", "approval", "evaluated_in_the_open") if k in manifest},
        **({"partition": manifest["partition"]} if "partition" in manifest else {}),
    }


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
    budget = table_budget(manifest, t)
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
            noise, at = _published_noise(part, g), part_budget(budget, part)
            if "margin" not in t:  # a manifest written before margin records: its sum part's margins
                found = mean_curve(name, level, noise, at, budget, confidence)
                stated = _stated_moe(manifest, part, confidence)
            else:
                count = _published_noise(counted, 1)
                found = mean_curve(name, level, noise, at, budget, confidence,
                                   count=(count, part_budget(budget, counted)), half_width=t["margin"]["half_width"])
                same = noise_at(count, part_budget(budget, counted)) == count and noise_at(noise, at) == noise
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
        return int(entry.get("moe95", entry["moe"]))
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


def tradeoff_html(curves: list[Curve], symbol: str) -> str:
    """The curves as a table: one row per measurement, one column per factor, the published
    budget's in bold; a note for the measurements without a curve."""
    esc = html.escape
    head = "".join(f"<th>× {fraction_text(f)}</th>" for f in FACTORS)
    rows, notes = [], []
    for c in curves:
        if not c.points:
            notes.append(f"<li><code>{esc(c.key)}</code> ({esc(c.mechanism)}): {esc(c.note or '')}</li>")
            continue
        texts = [(p, f"{esc(symbol)} {esc(decimal_text(p.budget.amount))}<br>±{'—' if p.moe is None else p.moe}")
                 for p in c.points]
        cells = "".join(f"<td><b>{text}</b></td>" if p.factor == 1 else f"<td>{text}</td>" for p, text in texts)
        rows.append(f"<tr><td><code>{esc(c.key)}</code></td>{cells}</tr>")
        if c.note:
            notes.append(f"<li><code>{esc(c.key)}</code>: {esc(c.note)}</li>")
    table = (f"<table class='tradeoff'><tr><th>table</th>{head}</tr>{''.join(rows)}</table>" if rows else "")
    return table + (f"<ul>{''.join(notes)}</ul>" if notes else "")


# ---------------------------------------------------------------- figures


def _png(fig) -> str:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def figures(manifest: dict[str, Any], state: DatasetState | None) -> dict[str, tuple[str, str]]:
    """{id: (title, base64 PNG)}: the ε allocation per table, the lifetime burn-down, the 95% MoE and
    the trade-off (:func:`tradeoff_curves`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = release_budgets(manifest)
    symbol = budgets.total.symbol
    names = [t["name"] if t.get("level") is None else f"{t['name']} @ {t['level']}" for t in manifest["tables"]]
    out: dict[str, tuple[str, str]] = {}

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2))
    ax.barh(names, [float(table_budget(manifest, t).amount) for t in manifest["tables"]], color="#3b6ea5")  # display
    ax.invert_yaxis()
    ax.set_xlabel(f"{symbol} per table (release total {decimal_text(budgets.total.amount)} of "
                  f"{decimal_text(budgets.release.amount)})")
    out["allocation"] = (f"{symbol} allocation per table", _png(fig))

    points = burn_down(manifest, state)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = list(range(len(points)))
    ax.step(xs, [float(p.spent_after) for p in points], where="post", color="#a53b3b", marker="o",
            label="spent (reserved, committed or failed)")
    ax.axhline(float(budgets.cap.amount), color="black", linestyle="--", label="lifetime cap")  # display
    ax.set_ylim(bottom=0)
    ax.set_xticks(xs, [p.release for p in points], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(budgets.cap.symbol)
    ax.legend(fontsize=8)
    out["burndown"] = (f"lifetime budget burn-down of {manifest['dataset']}", _png(fig))

    moes = [(n, t.get("moe95")) for n, t in zip(names, manifest["tables"]) if t.get("moe95")]
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(moes), 1) + 1.2))
    if moes:
        ax.barh([n for n, _ in moes], [m for _, m in moes], color="#5a9e5a")
        ax.invert_yaxis()
        ax.set_xlabel("expected 95% margin of error per cell (persons, or value units for sums)")
    else:
        ax.text(0.5, 0.5, "no table with a margin of error", ha="center", va="center")
        ax.set_axis_off()
    out["moe"] = ("expected 95% margin of error per table", _png(fig))
    out["tradeoff"] = (f"privacy–accuracy trade-off: the 95% margin of error over {symbol}", _tradeoff_png(
        tradeoff_curves(manifest), symbol))
    return out


TRADEOFF_MARK = "#e69f00"  # the published budget's point on each curve


def _tradeoff_png(curves: list[Curve], symbol: str) -> str:
    """One line per measurement: its margin over the grid (log-scaled budget, symlog margin, since
    a margin can be 0), the published budget a star."""
    import matplotlib.pyplot as plt

    shown = [c for c in curves if any(p.moe is not None for p in c.points)]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if not shown:
        ax.text(0.5, 0.5, "no table with a margin of error", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    for i, c in enumerate(shown):
        xs = [float(p.budget.amount) for p in c.points if p.moe is not None]  # display only
        ys = [p.moe for p in c.points if p.moe is not None]
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color=plt.get_cmap("tab10")(i % 10), label=c.key)
        if c.chosen is not None and c.chosen.moe is not None:
            ax.plot([float(c.chosen.budget.amount)], [c.chosen.moe], marker="*", markersize=15, linestyle="none",
                    markerfacecolor=TRADEOFF_MARK, markeredgecolor="black", zorder=3)
    ax.plot([], [], marker="*", markersize=12, linestyle="none", markerfacecolor=TRADEOFF_MARK,
            markeredgecolor="black", label=f"published {symbol}")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")  # 0.25, not 2⁻²
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(0, 1.4 * max(p.moe for c in shown for p in c.points if p.moe is not None) + 1)
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    ax.set_xlabel(f"{symbol} of the table (the published one × 1/8 … 8)")
    ax.set_ylabel("± margin of error per cell, 95%")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return _png(fig)


def report_html(manifest: dict[str, Any], state: DatasetState | None, markdown: str) -> str:
    """One self-contained page: warnings, the four figures (inlined PNGs; the trade-off's with its
    table) and the budget report."""
    figs = figures(manifest, state)
    warn = warnings(manifest, state)
    esc = html.escape
    parts = [
        "<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>Budget report — {esc(manifest['release'])}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}"
        "img{max-width:100%;border:1px solid #ddd;margin:.5em 0}table.tradeoff{border-collapse:collapse;font-size:85%}"
        "table.tradeoff td,table.tradeoff th{border:1px solid #ddd;padding:.2em .4em;text-align:right}"
        "table.tradeoff td:first-child{text-align:left}.warn{background:#fff4e0;border-left:4px solid "
        "#e0a000;padding:.5em 1em}pre{white-space:pre-wrap;background:#f6f6f6;padding:1em;font-size:85%}</style>",
        "</head><body>",
        f"<h1>Budget report — {esc(manifest['release'])}</h1>",
        f"<p>Dataset <code>{esc(manifest['dataset'])}</code> · run <code>{esc(manifest['run_id'])}</code> · "
        f"{esc(manifest['created_at'])} · burn-down from "
        f"{'the ledger' if state is not None else 'the manifest (no ledger reachable)'}</p>",
        f"<p id='figures-status' data-expected='{len(figs)}'>figures: not loaded</p>",
    ]
    if warn:
        parts.append("<div class='warn'><h2>Warnings</h2><ul>" + "".join(f"<li>{esc(w)}</li>" for w in warn)
                     + "</ul></div>")
    for key, (title, png) in figs.items():
        anchor = " id='tradeoff'" if key == "tradeoff" else ""
        parts.append(f"<h2{anchor}>{esc(title)}</h2><img id='fig-{key}' class='figure' alt='{esc(title)}' "
                     f"src='data:image/png;base64,{png}'>")
        if key == "tradeoff":
            parts.append("<p>Each table's expected margin of error per cell (from its noise distribution alone, "
                         "not the data) had its budget been the published one × 1/8 … 8: the same mechanism and "
                         "sensitivity, under (ε, δ) at its own δ. The published budget is in bold.</p>"
                         + tradeoff_html(tradeoff_curves(manifest), release_budgets(manifest).total.symbol))
    parts.append(f"<h2>Budget report</h2><pre>{esc(markdown)}</pre>")
    parts.append("<script>window.addEventListener('load',function(){var imgs=document.querySelectorAll('img.figure');"
                 "var ok=0,bad=0;imgs.forEach(function(i){if(i.complete&&i.naturalWidth>0){ok++}else{bad++}});"
                 "document.getElementById('figures-status').textContent='figures: '+ok+' loaded, '+bad+' failed';"
                 "});</script>")
    parts.append("</body></html>")
    return "\n".join(parts)
