"""The budget report: what a release spent, what remains, how accurate each table should be.

A pure function of the manifest (and of the ledger's recorded cap decisions), so it carries
nothing data-dependent. Example of the layout::

    # Budget report — acs-demo-2019
    Dataset nist-acs-national-2019 · run 3f2a… · 2026-11-22T03:00:00+00:00 · dprelease 0.3.0
    ## Warnings                      (only when there are any: plan/review.py)
    - table puma_by_sex spends ε = 3/2 (over 1): check it is intended
    ## Guarantee
    Pure ε-differential privacy; neighbouring datasets: add or remove one row (…); total ε = 1 …
    ## Spend per table
    | table | ε | share | mechanism | sensitivity Δ₁ | Laplace scale b = Δ₁/ε | cells | ±MoE 95% | post-processing |
    ## Lifetime budget of nist-acs-national-2019
    | cap | spent before | this release | spent after | remaining |
    ## Reading the tables

The spend table's budget and noise columns are those of the release's privacy definition (ρ,
Δ₂² and σ² for discrete Gaussian noise; a δ column under (ε, δ)), its margins at the spec's
confidence; :func:`spend_table` gives it to the HTML page too.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Iterable

from dprelease.accounting import ZCDP, ApproxDP, Budget, amount_text, delta_of, exact_and_decimal, fraction_text, percent_text
from dprelease.ledger import CapChange
from dprelease.publish.manifest_reader import ReleaseBudgets, entry_budget, read_budget, release_budgets
from dprelease.plan.split import split_lines
from dprelease.plan.margins import Margin
from dprelease.plan.review import ReviewFacts, measurement_name, review_warnings


def _both(text: str) -> str:
    return exact_and_decimal(Fraction(text))


def _amount(budget: Budget) -> str:
    """A budget's one figure (ε, or ρ; an (ε, δ) budget's ε) for people: ``3/4 (0.75)``."""
    return exact_and_decimal(budget.amount)


def _delta(budget: Budget) -> str:
    """The δ of an (ε, δ) budget, exact; 0 for the other kinds (a pure budget on (ε, δ) terms costs δ = 0)."""
    return fraction_text(delta_of(budget) or Fraction(0))


_pct = percent_text


def _record_lines(manifest: dict[str, Any]) -> list[str]:
    """Where the budget lives, who approved the plan, and any evaluation of the data in the open."""
    lines = []
    if "ledger" in manifest:
        ledger = manifest["ledger"]
        born = ledger.get("born")
        lines.append(f"**Budget ledger:** `{ledger['id']}` at `{ledger['location']}` (chosen by {ledger['chosen_by']})"
                     + (f"; every lifetime budget it records started when it was created, {born['at'][:19]} UTC, by "
                        f"{born['by']} ({born['how']}): {born['reason']}" if born else "") + ".  ")
    if "approval" in manifest:
        a = manifest["approval"]
        lines.append("**Approval:** none recorded for this plan." if a is None else
                     f"**Approval:** plan `{a['plan_fingerprint']}` approved by {a['approved_by']} on "
                     f"{a['approved_at'][:19]} UTC.")
    for e in manifest.get("evaluated_in_the_open", []):
        lines.append(f"**Warning: this data was evaluated in the open** (`dprelease evaluate`, NOT private: errors "
                     f"against the exact data) on {e['evaluated_at'][:19]} UTC by {e['evaluated_by']} "
                     f"({e['trials']} trials).  ")
    return lines + [""] if lines else []


def budget_report_md(manifest: dict[str, Any], caps: Iterable[CapChange] = ()) -> str:
    """The report's markdown. Every budget figure is read typed (:func:`dprelease.publish.manifest.release_budgets`,
    ``table_budget``, ``part_budget``) and shown with the unit of its type."""
    budgets = release_budgets(manifest)
    life_sym = budgets.cap.symbol
    implied = read_budget(manifest["implied_approximate_dp"]) if "implied_approximate_dp" in manifest else None
    headers, aligned, rows = spend_table(manifest)
    warned = [*manifest.get("context_warnings", ()), *review_warnings(manifest_facts(manifest))]  # as reporting.warnings
    lines = [
        f"# Budget report — {manifest['release']}",
        "",
        *_invariants_warning(manifest),
        f"Dataset `{manifest['dataset']}` · run `{manifest['run_id']}` · {manifest['created_at']} · "
        f"dprelease {manifest['software']['version']}  ",
        f"Spec fingerprint `{manifest['spec_fingerprint']}`",
        "",
        *_record_lines(manifest),
        *(["## Warnings", "", *[f"- {w}" for w in warned], ""] if warned else []),
        *([f"**Period:** {manifest['partition']['assumption']}.", ""] if "partition" in manifest else []),
        "## Guarantee",
        "",
        _guarantee(manifest, budgets),
        *(["", f"**Implied (ε, δ)-DP of this release:** ε = {_amount(implied)} at δ = {_delta(implied)} (Canonne, "
           "Kamath and Steinke 2020, Corollary 13; ε rounded up)."] if implied is not None else []),
        "",
        "## Spend per table",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "".join("---:|" if right else "---|" for right in aligned),
        *["| " + " | ".join(row) + " |" for row in rows],
    ]
    lines += _split_section(manifest)
    lines += _margins_section(manifest)
    lines += _structural_section(manifest)
    lines += [
        "",
        f"## Lifetime budget of {manifest['dataset']} ({life_sym})",
        "",
        "| cap | spent before | this release | spent after | remaining |",
        "|---:|---:|---:|---:|---:|",
        "| " + " | ".join(_amount(b) for b in _lifetime_row(budgets)) + " |",
        *(["| δ " + " | ".join(_delta(b) for b in _lifetime_row(budgets)) + " |"]
          if all(isinstance(b, ApproxDP) for b in _lifetime_row(budgets)) else []),
        "",
    ]
    if "local_tables" in manifest:
        spent = manifest["local_epsilon_per_respondent"]
        lines += [
            "## Local collections (answers randomized by the respondents)",
            "",
            "Each respondent randomized their own answer before it was collected (local differential privacy); "
            "the estimates are post-processing and spend none of the budgets above. Collections of the same "
            "people compose: the ledger records each collection's per-respondent ε as a rational upper bound.",
            "",
            "| table | column | protocol | ε per respondent | truth kept with | collection | charged now |",
            "|---|---|---|---:|---:|---|---:|",
            *[f"| {t['name']} | {t['column']} | {t['protocol']} (k = {t['categories']}) | {t['epsilon_local']} "
              f"(≤ {t['epsilon_local_bound']}) | {t['keep_probability']:.6f} | {t['collection']}"
              f"{' (memoised)' if t['memoised'] else ''} | "
              f"{'already recorded' if t['already_recorded'] else t['charged_per_respondent']} |"
              for t in manifest["local_tables"]],
            "",
            *provenance_lines(manifest),
            "",
            f"Each respondent's ε over the recorded local collections: {spent['before']} → {spent['after']}.",
            "",
            "`share` is the iterative Bayesian update estimate (maximum likelihood on the simplex), `share_mi` the "
            "matrix-inversion estimate projected onto the simplex; each with its standard error (`se`, `se_mi`).",
            "",
        ]
    caps = list(caps)
    if len(caps) > 1:
        lines += ["The lifetime cap was changed by recorded decision:", ""]
        lines += [f"- {c.set_at[:19]} by {c.set_by}: {c.budget.symbol} = {amount_text(c.budget)}"
                  + (f", δ = {fraction_text(c.budget.delta)}" if isinstance(c.budget, ApproxDP) else "")
                  + f" — {c.reason}" for c in caps]
        lines.append("")
    lines += ["## Reading the tables", "", *reading_lines(manifest), ""]
    return "\n".join(lines)


def provenance_lines(manifest: dict[str, Any]) -> list[str]:
    """Where each local table's answers came from (those registered with a provenance)."""
    return [f"Answers of {t['name']}: {t['provenance']['how']}"
            + (f" — {t['provenance']['statement']}" if t["provenance"].get("statement") else "")
            + f" (registered by {t['provenance']['registered_by']}, {t['provenance']['registered_at'][:19]} UTC)."
            + (f" **{t['memo_not_honoured']}.**" if t.get("memo_not_honoured") else "")
            for t in manifest["local_tables"] if t.get("provenance")]


def reading_lines(manifest: dict[str, Any]) -> list[str]:
    """The notes on how to read the tables, one markdown bullet (``- …``) each."""
    return [
        *([f"- ±MoE: for each cell, the noise exceeds the margin of error with probability at most "
           f"{_pct(1 - Fraction(manifest['confidence']))}, computed from the exact noise distribution (discrete "
           "Laplace or discrete Gaussian) (before post-processing)."] if manifest["tables"] else []),
        *(["- `clamp` sets negative noisy counts to 0: every published count is a non-negative integer, but "
           "cells whose true count is near 0 are biased upwards, and sums of cells are not unbiased."]
          if any(t["post_process"] == "clamp" for t in manifest["tables"]) else []),
        *(["- `truncated_geometric` tables (Ghosh, Roughgarden and Sundararajan 2009): each count is clamped "
            "to its declared [0, upper] before noise and the noisy count clamped again, so outputs lie in "
            "[0, upper]; counts above the bound are published as at most the bound. The ±MoE bounds the error "
            "of counts within the bound."]
          if any(t["mechanism"] == "truncated_geometric" for t in manifest["tables"]) else []),
        *[f"- `{t['name']}` publishes sums of `{t['measure']['sum']}` per cell: each value clamped to "
          f"[{t['measure']['bounds'][0]}, {t['measure']['bounds'][1]}] and rounded to a multiple of "
          f"{t['measure']['granularity']} before noise (sensitivity {t['sensitivity']}); missing values "
          f"{'count 0' if t['measure']['missing'] == 'zero' else 'are refused'}. A sum of a weight column is a "
          "weighted count; every other table counts rows, unweighted."
          for t in {t['name']: t for t in manifest["tables"]
                    if isinstance(t.get("measure"), dict) and "sum" in t["measure"]}.values()],
        *[f"- `{t['name']}` publishes per cell the mean of `{t['measure']['mean']}` and the noisy count it is over: "
          f"each value clamped to [{t['measure']['bounds'][0]}, {t['measure']['bounds'][1]}], rounded to a multiple of "
          f"{t['measure']['granularity']} and centred on {t['measure']['centre']}; mean = {t['measure']['centre']} + "
          f"noisy sum / noisy count over the same rows, the sum getting {_pct(Fraction(t['measure']['sum_share']))} of "
          "the table's budget and the count the rest (rows above). The mean is clamped to the bounds and left empty "
          "where the noisy count is below 1; the published `count` is the noisy count with negative values shown as "
          "0 (the raw one is in `measurements/`). It is a ratio of noisy totals: biased when counts are small (the noise "
          "of the count enters the denominator); its error shrinks like 1/count. Missing values "
          + {"error": "are refused.", "zero": "count as 0.", "skip": "leave the row out of both."}[t["measure"]["missing"]]
          for t in {t['name']: t for t in manifest["tables"]
                    if isinstance(t.get("measure"), dict) and "mean" in t["measure"]}.values()],
        *[f"- `{t['name']}` publishes, per cell, the most common category of `{t['measure']['mode']}`, chosen by the "
          "exponential mechanism (permute-and-flip, McKenna and Sheldon 2020) with the cell's category counts as "
          f"utilities (sensitivity {t['sensitivity']}; exponent ε·u/({'' if _monotone(manifest, t) else '2'}Δu)). "
          "Its margin is a count gap (above): the chosen category is the true mode with high probability when the "
          "mode leads the runner-up by several times Δu/ε."
          for t in {t['name']: t for t in manifest["tables"]
                    if isinstance(t.get("measure"), dict) and "mode" in t["measure"]}.values()],
        *[f"- `{t['name']}` publishes, per cell, the category of `{t['measure']['quantile']}` closest to its "
          f"{t['measure']['q']}-quantile (declared order), chosen by the exponential mechanism (permute-and-flip) "
          f"with utility −|b·#below − a·n| for q = a/b (sensitivity {t['sensitivity']}; exponent ε·u/(2Δu): not "
          "monotone). Its margin is a rank error in rows (above)."
          for t in {t['name']: t for t in manifest["tables"]
                    if isinstance(t.get("measure"), dict) and "quantile" in t["measure"]}.values()],
        *(["- The raw noisy counts are kept in `measurements/`, so post-processing can be redone at no cost."]
          if manifest["tables"] else []),
        *([] if not manifest["tables"] else [
        ("- Counts are unweighted row counts. Each person (one value of "
         f"`{manifest['privacy']['contribution_bound']['id']}`) contributes at most "
         f"{manifest['privacy']['contribution_bound']['max_rows']} rows, chosen at random; rows beyond were dropped, "
         "and every sensitivity is that many times larger."
         if "contribution_bound" in manifest["privacy"] else "- Counts are unweighted person counts (one per row).")]),
    ]


def spend_table(manifest: dict[str, Any]) -> tuple[list[str], list[bool], list[list[str]]]:
    """The spend-per-table table (headers, which columns are right-aligned, rows of text), one row
    per measurement (a mean's two parts on rows of their own), with the columns of the release's
    privacy definition: its budget's unit (ε, or ρ; ε and δ under (ε, δ)) and the sensitivity
    and noise scale of its noise (:func:`noise_labels`); the margins at the spec's confidence."""
    budgets = release_budgets(manifest)
    approx = isinstance(budgets.ledger_charge, ApproxDP)  # charged (ε, δ): a δ column
    sensitivity, scale = noise_labels(manifest)
    headers = ["table", budgets.total.symbol, *(["δ"] if approx else []), "share", "mechanism", sensitivity, scale,
               "cells", f"±MoE {_pct(Fraction(manifest['confidence']))}", "post-processing"]
    aligned = [False, True, *([True] if approx else []), True, False, True, True, True, True, False]
    rows = []
    for entry in manifest["tables"]:
        base = measurement_name(entry["name"], entry.get("level"))
        budget = entry_budget(entry)
        parts = ([(f"{base} · mean: {p['part']}", {**entry, **p}, entry_budget(p)) for p in entry["parts"]]
                 if "parts" in entry else [(base, entry, budget)])
        for name, t, spent in parts:
            mechanism = t["mechanism"] + (f" at ε = {t['mechanism_epsilon']}" if "mechanism_epsilon" in t else "")
            rows.append([name, _amount(spent), *([_delta(spent)] if approx else []),
                         _pct(spent.amount / budgets.total.amount), mechanism, str(t["sensitivity"]),
                         _both(t["scale"]), _cells(t), _moe_cell(t), t["post_process"]])
    return headers, aligned, rows


def noise_labels(manifest: dict[str, Any]) -> tuple[str, str]:
    """The headers of the sensitivity and noise-scale columns, in the terms of the release's noise:
    Δ₁ and the Laplace scale b = Δ₁/ε for the discrete Laplace family (and the exponential
    mechanism's Δu and scale), Δ₂² and the variance σ² for the discrete Gaussian; both, each
    named, when a release has both."""
    kinds = {p["mechanism"] for t in manifest["tables"] for p in t.get("parts") or [t]}
    gaussian = "discrete_gaussian" in kinds
    if gaussian and len(kinds) == 1:
        return "sensitivity Δ₂²", "noise variance σ²"
    if not gaussian:
        return "sensitivity Δ₁", "Laplace scale b = Δ₁/ε"
    return "sensitivity (Δ₁ Laplace, Δ₂² Gaussian)", "noise scale (b Laplace, σ² Gaussian)"


def manifest_facts(manifest: dict[str, Any]) -> ReviewFacts:
    """What the warnings (:func:`dprelease.plan.review.review_warnings`) need of a published
    release: its manifest's typed budgets and declarations, the same facts its plan gave."""
    budgets = release_budgets(manifest)
    local = manifest.get("local_epsilon_per_respondent")
    return ReviewFacts(
        tables=tuple((measurement_name(t["name"], t.get("level")), entry_budget(t))
                     for t in manifest["tables"]),
        cap=budgets.cap, remaining_after=budgets.remaining,
        invariant_levels=tuple(e["level"] for e in manifest["invariants"]["totals"]) if "invariants" in manifest
        else (),
        partition_note=manifest["partition"]["assumption"] if "partition" in manifest else None,
        evaluations=tuple((e["evaluated_at"], e["evaluated_by"]) for e in manifest.get("evaluated_in_the_open", [])),
        local_after=None if local is None else Fraction(local["after"]))


def _moe_cell(t: dict[str, Any]) -> str:
    """The ±MoE column: a count's or sum's (or a mean part's) noise margin, a mean's sum part's with
    the mean's own (at n = 1,000 rows) beside it; a mode's count gap or a quantile's rank error
    (:meth:`dprelease.plan.margins.Margin.short`), from the manifest's record."""
    if "margin" in t and t["margin"]["kind"] in ("mode", "quantile"):
        return Margin.from_record(t["margin"]).short()
    if "margin" in t and t.get("part") == "sum":  # the noisy sum's, in the sum's units; the mean's own beside it
        return f"{t['moe']} (the sum; the mean: {Margin.from_record(t['margin']).short()})"
    return str(t["moe"])


def margin_figures(manifest: dict[str, Any]) -> list[tuple[str, Margin, str]]:
    """Per measurement whose manifest entry states its ``margin`` (at the release's confidence, in
    its measure's own units: :mod:`dprelease.plan.margins`): its row name (``table`` or ``table @
    level``), the :class:`~dprelease.plan.margins.Margin` and its unit words — for the reports'
    figures (a count's or sum's ``value``, a mean's ``at_count(n)``, a mode's gap, a quantile's
    rank error)."""
    return [(t["name"] if t.get("level") is None else f"{t['name']} @ {t['level']}",
             Margin.from_record(t["margin"]), t["margin"].get("unit", "")) for t in manifest["tables"] if "margin" in t]


def _margins_section(manifest: dict[str, Any]) -> list[str]:
    """Each measurement's margin of error in its own units at the release's confidence, as the plan
    made it (:mod:`dprelease.plan.margins`; the manifest's ``margin`` records). Manifests written
    before them have none: the section is left out."""
    figures = margin_figures(manifest)
    if not figures:
        return []
    confidence = _pct(Fraction(manifest["confidence"]))
    return ["", f"## Margins of error at {confidence}, in each measure's own units", "",
            *[f"- `{name}` ({margin.kind}): {margin.text(unit)}." for name, margin, unit in figures]]


def _lifetime_row(budgets: ReleaseBudgets) -> tuple[Budget, ...]:
    """The lifetime table's row, in the ledger terms' kind: cap, spent before, this release, spent
    after, remaining."""
    return budgets.cap, budgets.spent_before, budgets.ledger_charge, budgets.spent_after, budgets.remaining


def _monotone(manifest: dict[str, Any], t: dict[str, Any]) -> bool:
    """An exponential mechanism's exponent ε·u/Δu (monotone utility) rather than ε·u/(2Δu): as the
    plan recorded it in the manifest (manifests before it did: from the scale)."""
    if "monotone" in t:
        return bool(t["monotone"])
    epsilon = Fraction(t["mechanism_epsilon"]) if "mechanism_epsilon" in t else entry_budget(t).amount
    return Fraction(t["scale"]) == Fraction(t["sensitivity"]) / epsilon


def _guarantee(manifest: dict[str, Any], budgets: ReleaseBudgets) -> str:
    n, neighbouring = len(manifest["tables"]), manifest["privacy"]["neighbouring"]
    total, release, charge = budgets.total, budgets.release, budgets.ledger_charge
    if n == 0:
        return ("This release has no central tables and spends none of the central budgets: its tables are "
                "estimated from answers the respondents randomized themselves (local differential privacy, below).")
    if isinstance(charge, ApproxDP):  # its δ is the release's: a pure release there costs δ = 0
        return (f"Approximate (ε, δ)-differential privacy; neighbouring datasets: {neighbouring}. The {n} "
                f"measurements compose sequentially (ε and δ add): the release as a whole is "
                f"(ε = {_amount(total)}, δ = {_delta(charge)})-DP (release budget "
                f"ε = {_amount(release)}, δ = {_delta(release)}). Each discrete "
                "Gaussian table is calibrated through zCDP: the largest ρ whose (ε, δ) bound (Canonne, Kamath and "
                "Steinke 2020, Proposition 12) is within the table's (ε, δ), rounded down, then σ² = Δ₂²/(2ρ) "
                f"rounded up; pure ε-DP tables have δ = 0. {_per_measure(manifest, 'budget')}Post-processing is free.")
    if not isinstance(total, ZCDP):
        return (f"Pure ε-differential privacy; neighbouring datasets: {neighbouring}. The {n} measurements compose "
                f"sequentially: the release as a whole is {total}-DP "
                f"(release budget {_amount(release)}). {_per_measure(manifest, 'ε')}Post-processing is free.")
    pure = [t for t in manifest["tables"] if "mechanism_epsilon" in t]
    return (f"ρ-zero-concentrated differential privacy; neighbouring datasets: {neighbouring}. The {n} "
            f"measurements compose sequentially: the release as a whole is {charge}-zCDP "
            f"(asked {_amount(total)}; each σ² is rounded up, so the cost is never more; release "
            f"budget {_amount(release)}). "
            + (f"{len(pure)} pure ε-DP measurement(s) run at the largest ε with ε²/2 ≤ their ρ (ε-DP implies "
               "ε²/2-zCDP). " if pure else "")
            + _per_measure(manifest, "ρ") + "Post-processing is free.")


def _per_measure(manifest: dict[str, Any], unit: str) -> str:
    """What one table of each measure kind in the release is, and why it costs its budget once."""
    kinds = []
    for t in manifest["tables"]:
        measure = t.get("measure", "count")
        kind = measure if isinstance(measure, str) else next(iter(k for k in ("sum", "mean", "mode", "quantile")
                                                                  if k in measure), "count")
        if kind not in kinds:
            kinds.append(kind)
    said = {"count": f"A count table is one histogram over its full declared domain: a person is in one cell, so its "
                     f"cells together cost the table's {unit} once.",
            "sum": f"A sum table is one histogram of values clamped to its bounds over its full declared domain: its "
                   f"cells together cost the table's {unit} once.",
            "mean": f"A mean table is two histograms of the same cells, a noisy sum of clamped values and a noisy "
                    f"count, which share the table's {unit} (its sum_share); each mean is their quotient "
                    "(post-processing).",
            "mode": f"A mode table is one choice per cell among the column's declared categories (permute-and-flip "
                    f"on their counts): the cells hold disjoint rows, so together they cost the table's {unit} once.",
            "quantile": f"A quantile table is one choice per cell among the column's declared categories "
                        f"(permute-and-flip on their ranks): the cells hold disjoint rows, so together they cost the "
                        f"table's {unit} once."}
    return "".join(said[k] + " " for k in kinds)


def _split_section(manifest: dict[str, Any]) -> list[str]:
    """epsilon: auto: the planner's split, as the plan showed it (the manifest's record)."""
    if "auto_split" not in manifest:
        return []
    first, *rest = split_lines(manifest["auto_split"])
    return ["", "## Budget split chosen by the planner", "", first + ":", "", *[f"- {line.strip()}" for line in rest]]


def _invariants_warning(manifest: dict[str, Any]) -> list[str]:
    """The invariants, first thing in the report: they are published outside DP."""
    invariants = manifest.get("invariants")
    if not invariants:
        return []
    levels = [t["level"] for t in invariants["totals"]]
    files = ", ".join(f"`{t['file']}`" for t in invariants["totals"])
    return [
        "## ⚠ Invariants: NOT protected by differential privacy",
        "",
        f"> This release publishes **exact** totals (the number of persons per place) at: "
        f"**{', '.join(levels)}** ({files}; declared: {', '.join(invariants['declared'])}). They are the "
        "confidential counts themselves, with no noise. Every table's ε holds only between datasets with the "
        "same totals: the neighbouring relation is **change one record** (bounded DP), under which each "
        "histogram's sensitivity is 2, not 1, so every table's noise scale is 2/ε. Consistent tables that "
        "count every row (no `where`) add up exactly to these totals.",
        "",
    ]


def _cells(t: dict[str, Any]) -> str:
    """Cells of a measurement: measured + structural (exact zeros, not measured) when it has any."""
    n = t.get("structural_cells", 0)
    return f"{t['measured_cells']:,} + {n:,} structural" if n else f"{t['cells']:,}"


def _structural_section(manifest: dict[str, Any]) -> list[str]:
    tables = [t for t in manifest["tables"] if t.get("structural_cells")]
    if not tables:
        return []
    lines = ["", "## Structural zeros", "",
             "Cells no row can be in, by the table's own definition (its `where` and the spec's declared rules, "
             "which the data was checked against before anything was spent): a function of the spec alone. They "
             "are not measured, get no noise and are published as exact zeros (marked `structural`), or left out "
             "where the spec says so; the ε, noise scale and ±MoE above are those of the measured cells.", ""]
    for t in tables:
        name = t["name"] if t.get("level") is None else f"{t['name']} @ {t['level']}"
        lines.append(f"- `{name}`: {t['structural_cells']:,} of {t['cells']:,} cells ("
                     f"{'; '.join(t['structural']['summary'])}), {t['structural']['published']}")
    return lines
