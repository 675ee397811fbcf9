"""The budget report as one semantic, self-contained HTML page a reviewer opens in a browser.

Made from the manifest (and the ledger's record of the dataset, when reachable), never from the
markdown text: headings (``<h1>``, ``<h2>``), real tables with a ``<caption>`` and ``<th
scope>``, the figures inline as PNG data URIs with a text alternative each
(:mod:`dprelease.report.figures`), a small inline style sheet; no script, nothing fetched. Every
string is escaped. Every margin is at the spec's confidence and every heading that shows one says
it; the budget and noise columns are those of the release's privacy definition
(:func:`dprelease.report.markdown.spend_table`); the warnings are the release's
(:func:`dprelease.report.published.warnings`); the burn-down lists committed releases, and the
reservations not committed have their own table. Nothing here touches data.

Layout: title and record · Warnings · Invariants (when any) · Guarantee · Spend per table ·
Structural zeros · Lifetime budget · Local collections · Figures (allocation, burn-down,
margins, trade-off with its table) · Burn-down of committed releases · Reservations not
committed · Reading the tables.
"""

from __future__ import annotations

import html
import re
from fractions import Fraction
from typing import Any

from dprelease.accounting import ApproxDP, decimal_text, fraction_text, percent_text
from dprelease.ledger import DatasetState
from dprelease.publish.manifest_reader import read_budget, release_budgets
from dprelease.plan.tradeoff import FACTORS, Curve
from dprelease.report.markdown import (
    _amount,
    _delta,
    _split_section,
    _guarantee,
    _invariants_warning,
    _lifetime_row,
    _record_lines,
    _structural_section,
    margin_figures,
    provenance_lines,
    reading_lines,
    spend_table,
)
from dprelease.report.figures import figures
from dprelease.report.published import burn_down, other_runs, tradeoff_curves, warnings

esc = html.escape
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:64em;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}"
    "h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;margin:.6em 0;font-size:90%}caption{text-align:left;font-weight:600;"
    "padding:.3em 0}th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}thead th{background:#f0f0f0}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}tbody th{text-align:left;font-weight:normal}"
    "figure{margin:1em 0}img{max-width:100%;border:1px solid #ddd}figcaption{font-weight:600;margin:.4em 0}"
    ".warn{background:#fff4e0;border-left:4px solid #e0a000;padding:.2em 1em}.meta{color:#444}"
    "code{background:#f4f4f4;padding:0 .2em}"
)


def inline(text: str) -> str:
    """Escaped text with the report's inline markup (`code`, **strong**) as HTML."""
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)


def table(caption: str, headers: list[str], rows: list[list[str]], numeric: list[bool] | None = None,
          ident: str = "") -> str:
    """A table with its caption, column headers (``scope='col'``) and each row's first cell a row
    header (``scope='row'``); cells are text, escaped here; ``numeric`` right-aligns a column."""
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + f"<th scope='row'>{inline(row[0])}</th>"
        + "".join(f"<td class='n'>{esc(c)}</td>" if right else f"<td>{inline(c)}</td>"
                  for c, right in zip(row[1:], numeric[1:])) + "</tr>"
        for row in rows)
    attrs = f" id='{esc(ident)}'" if ident else ""
    return f"<table{attrs}><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(title: str, *body: str, ident: str = "", cls: str = "") -> str:
    attrs = (f" id='{esc(ident)}'" if ident else "") + (f" class='{esc(cls)}'" if cls else "")
    return f"<section{attrs}><h2>{esc(title)}</h2>{''.join(body)}</section>"


def bullets(lines: list[str]) -> str:
    """Markdown bullets (``- …``) of the report's notes as a list."""
    items = [line[2:] for line in lines if line.startswith("- ")]
    return "<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>" if items else ""


def page(manifest: dict[str, Any], state: DatasetState | None) -> str:
    """The whole page (see the module's docstring for its layout)."""
    budgets = release_budgets(manifest)
    confidence = percent_text(Fraction(manifest["confidence"]))
    warned = warnings(manifest, state)
    release = esc(manifest["release"])
    parts = [
        "<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>Budget report — {release}</title><style>{STYLE}</style></head><body>",
        f"<header><h1>Budget report — {release}</h1>",
        f"<p class='meta'>Dataset <code>{esc(manifest['dataset'])}</code> · run <code>{esc(manifest['run_id'])}</code>"
        f" · {esc(manifest['created_at'])} · dprelease {esc(manifest['software']['version'])} · spec fingerprint "
        f"<code>{esc(manifest['spec_fingerprint'])}</code> · margins of error at {confidence} (the spec's "
        f"confidence) · burn-down from {'the ledger' if state is not None else 'the manifest (no ledger reachable)'}"
        "</p>",
        *[f"<p>{inline(line.rstrip())}</p>" for line in _record_lines(manifest) if line],
        "</header><main>",
        section("Warnings", ("<ul>" + "".join(f"<li>{inline(w)}</li>" for w in warned) + "</ul>") if warned
                else "<p>None.</p>", ident="warnings", cls="warn" if warned else ""),
        _invariants(manifest),
        section("Guarantee", f"<p>{inline(_guarantee(manifest, budgets))}</p>", _implied(manifest), ident="guarantee"),
    ]
    headers, aligned, rows = spend_table(manifest)
    parts.append(section(
        "Spend per table",
        table(f"Budget, noise and expected margin of error (±MoE {confidence}) of each measurement",
              headers, rows, aligned, ident="spend") if rows else "<p>No central tables.</p>",
        bullets(_structural_section(manifest)), ident="spend-per-table"))
    chosen = _split_section(manifest)  # epsilon: auto
    if chosen:
        parts.append(section(chosen[1].removeprefix("## "), f"<p>{inline(chosen[3])}</p>", bullets(chosen[5:]),
                             ident="auto-split"))
    parts.append(_margins(manifest))
    parts.append(_lifetime(manifest, budgets, state))
    parts.append(_local(manifest))
    parts.append(_figures(manifest, state, confidence))
    parts.append(_history(manifest, state))
    parts.append(section("Reading the tables", bullets(reading_lines(manifest)), ident="reading"))
    parts.append("</main></body></html>")
    return "\n".join(p for p in parts if p)


def _invariants(manifest: dict[str, Any]) -> str:
    """The invariants' explanation, before the guarantee: they are published outside DP."""
    lines = _invariants_warning(manifest)
    if not lines:
        return ""
    return section(lines[0].removeprefix("## "), *[f"<p>{inline(line.removeprefix('> '))}</p>"
                                                   for line in lines[1:] if line], ident="invariants", cls="warn")


def _implied(manifest: dict[str, Any]) -> str:
    if "implied_approximate_dp" not in manifest:
        return ""
    implied = read_budget(manifest["implied_approximate_dp"])
    return (f"<p><strong>Implied (ε, δ)-DP of this release:</strong> ε = {esc(_amount(implied))} at δ = "
            f"{esc(_delta(implied))} (Canonne, Kamath and Steinke 2020, Corollary 13; ε rounded up).</p>")


def _lifetime(manifest: dict[str, Any], budgets: Any, state: DatasetState | None) -> str:
    """The lifetime figures of the release, and the cap's recorded decisions when the ledger has
    more than the first."""
    row = _lifetime_row(budgets)
    rows = [[budgets.cap.symbol, *(_amount(b) for b in row)]]
    if all(isinstance(b, ApproxDP) for b in row):
        rows.append(["δ", *(_delta(b) for b in row)])
    caps = list(state.caps) if state is not None else []
    decisions = table(
        "The lifetime cap's recorded decisions", ["set at", "by", "cap", "reason"],
        [[c.set_at[:19], c.set_by, f"{c.budget.symbol} = {fraction_text(c.budget.amount)}"
          + (f", δ = {fraction_text(c.budget.delta)}" if isinstance(c.budget, ApproxDP) else ""), c.reason]
         for c in caps], ident="caps") if len(caps) > 1 else ""
    return section(f"Lifetime budget of {manifest['dataset']} ({budgets.cap.symbol})", table(
        f"The dataset's lifetime budget before and after this release ({budgets.cap.symbol})",
        ["", "cap", "spent before", "this release", "spent after", "remaining"], rows, [False] + [True] * 5,
        ident="lifetime"), decisions, ident="lifetime-budget")


def _local(manifest: dict[str, Any]) -> str:
    if "local_tables" not in manifest:
        return ""
    spent = manifest["local_epsilon_per_respondent"]
    rows = [[t["name"], t["column"], f"{t['protocol']} (k = {t['categories']})",
             f"{t['epsilon_local']} (≤ {t['epsilon_local_bound']})", f"{t['keep_probability']:.6f}",
             t["collection"] + (" (memoised)" if t["memoised"] else ""),
             "already recorded" if t["already_recorded"] else t["charged_per_respondent"]]
            for t in manifest["local_tables"]]
    return section(
        "Local collections (answers randomized by the respondents)",
        "<p>Each respondent randomized their own answer before it was collected (local differential privacy); "
        "the estimates are post-processing and spend none of the budgets above.</p>",
        table("Local tables and each respondent's ε", ["table", "column", "protocol", "ε per respondent",
                                                        "truth kept with", "collection", "charged now"],
              rows, [False, False, False, True, True, False, True], ident="local"),
        *[f"<p>{inline(line)}</p>" for line in provenance_lines(manifest)],
        f"<p>Each respondent's ε over the recorded local collections: {esc(str(spent['before']))} → "
        f"{esc(str(spent['after']))}.</p>", ident="local-collections")



def _figures(manifest: dict[str, Any], state: DatasetState | None, confidence: str) -> str:
    symbol = release_budgets(manifest).total.symbol
    out = []
    for f in figures(manifest, state):
        out.append(f"<figure><figcaption>{esc(f.title)}</figcaption><img id='fig-{f.key}' class='figure' "
                   f"alt='{esc(f.alt)}' src='data:image/png;base64,{f.png}'></figure>")
        if f.key == "tradeoff":
            approx = isinstance(release_budgets(manifest).total, ApproxDP)
            out.append(f"<p>Each table's expected margin of error per cell at {confidence} (from its noise "
                       "distribution alone, not the data) had its budget been the published one × 1/8 … 8: the same "
                       "mechanism and sensitivity" + (", each at its own δ" if approx else "")
                       + ". The published budget is in bold; each margin is in its table's own unit.</p>"
                       + tradeoff_html(tradeoff_curves(manifest, Fraction(manifest["confidence"])), symbol, confidence))
    return section("Figures", *out, ident="figures")


def tradeoff_html(curves: list[Curve], symbol: str, confidence: str) -> str:
    """The curves as a table: one row per measurement, one column per factor, the published
    budget's in bold; a note for the measurements without a curve."""
    head = "".join(f"<th scope='col'>× {esc(fraction_text(f))}</th>" for f in FACTORS)
    rows, notes = [], []
    for c in curves:
        if not c.points:
            notes.append(f"<li><code>{esc(c.key)}</code> ({esc(c.mechanism)}): {esc(c.note or '')}</li>")
            continue
        texts = [(p, f"{esc(symbol)} {esc(decimal_text(p.budget.amount))}<br>±{'—' if p.moe is None else p.moe}")
                 for p in c.points]
        cells = "".join(f"<td class='n'><b>{text}</b></td>" if p.factor == 1 else f"<td class='n'>{text}</td>"
                        for p, text in texts)
        rows.append(f"<tr><th scope='row'><code>{esc(c.key)}</code></th>{cells}</tr>")
        if c.note:
            notes.append(f"<li><code>{esc(c.key)}</code>: {esc(c.note)}</li>")
    caption = f"±MoE {confidence} per cell of each table at its {symbol} × 1/8 … 8 (published {symbol} in bold)"
    found = (f"<table id='tradeoff' class='tradeoff'><caption>{esc(caption)}</caption><thead><tr>"
             f"<th scope='col'>table</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>" if rows else "")
    return found + (f"<ul>{''.join(notes)}</ul>" if notes else "")


def _history(manifest: dict[str, Any], state: DatasetState | None) -> str:
    """The burn-down of committed releases, and the reservations not committed in a table of their own."""
    symbol = release_budgets(manifest).cap.symbol
    points = burn_down(manifest, state)
    committed = table(f"Committed releases of {manifest['dataset']} and the {symbol} spent after each",
                      ["release", "committed run created", f"spent after ({symbol})"],
                      [[p.release, p.created_at[:19], fraction_text(p.spent_after)] for p in points],
                      [False, False, True], ident="burn-down")
    others = other_runs(state)
    if state is None:
        rest = "<p>The ledger is not reachable: reservations not committed are not known here.</p>"
    elif not others:
        rest = "<p>None: every reservation of this dataset was committed.</p>"
    else:
        rest = table(f"Reservations of {manifest['dataset']} that were not committed",
                     ["run", "release", "state", f"charge ({symbol})", "counts as spent", "since"],
                     [[r.run_id, r.release, r.state, fraction_text(r.charge),
                       "yes (until settled)" if r.counts_as_spent and r.state != "failed" else
                       "yes (noise was drawn)" if r.counts_as_spent else "no (voided)", r.created_at[:19]]
                      for r in others], [False, False, False, True, False, False], ident="not-committed")
    return (section("Burn-down of committed releases", committed, ident="burn-down-history")
            + section("Reservations not committed (voided, unfinished or failed)", rest, ident="reservations"))


def _margins(manifest: dict[str, Any]) -> str:
    """Each measurement's margin of error at the spec's confidence, in its measure's own units, in
    words (as the markdown's section: :func:`dprelease.report.markdown.margin_figures`)."""
    figures = margin_figures(manifest)
    if not figures:
        return ""
    confidence = percent_text(Fraction(manifest["confidence"]))
    return section(f"Margins of error at {confidence}, in each measure's own units",
                   "<ul>" + "".join(f"<li><code>{esc(name)}</code> ({esc(margin.kind)}): {esc(margin.text(unit))}.</li>"
                                    for name, margin, unit in figures) + "</ul>", ident="margins")
