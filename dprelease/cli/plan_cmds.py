"""``dprelease validate`` and ``dprelease plan``: read a spec (and the ledger), never the data,
and never import Prefect. The bodies, typer-free (run by typer through
:mod:`dprelease.cli.signatures`, which declares their arguments and help, or by
:mod:`dprelease.cli.fast`); the ledger (SQLAlchemy) is imported where one is opened."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

from dprelease.accounting import NotANumber, amount_text, compose, fraction_text, parse_budget, subtract, symbol_key, unit_key
from dprelease.cli.common import handled, out, say, spec_ledger, spec_location, usage_error
from dprelease.errors import DataError, ExitCode, SpecError


@handled
def validate(specs: list[Path]) -> None:
    """``dprelease validate SPEC...`` (:func:`dprelease.cli.signatures.validate`)."""
    from dprelease.lifecycle.notices import large_delta_warnings
    from dprelease.spec import load_spec

    failed = 0
    for path in specs:
        try:
            spec = load_spec(path)
            header_problems(spec)
        except (SpecError, DataError) as exc:
            failed += 1
            print(exc, file=sys.stderr)
            continue
        total = compose((t.budget for t in spec.tables), spec.definition)  # of the spec's kind (ρ under zcdp)
        over = subtract(total, spec.budget)
        local = f" and {len(spec.local_tables)} local" if spec.local_tables else ""
        out.print(f"ok {path}: release {spec.release}, {len(spec.tables)} tables{local}, "
                  + (_auto_spend(spec) if any(t.auto is not None for t in spec.tables) else
                     f"total {spec.symbol} = {amount_text(total)} of {amount_text(spec.budget)}"), markup=False)
        if spec.invariants:
            say(f"note: {path}: invariants — the number of persons per place at {', '.join(spec.invariant_levels)} "
                "is published EXACTLY, not protected by differential privacy; every sensitivity is "
                f"{spec.sensitivity} (change one record)")
        if spec.unit == "person":
            say(f"note: {path}: at most {spec.max_rows} rows per {spec.unit_id} are kept; every sensitivity is "
                f"{spec.sensitivity}")
        for warning in large_delta_warnings(spec):
            say(f"warning: {path}: {warning}")
        if over.amount > 0:  # the ε (ρ); an approx spec's δ is checked when it is read
            say(f"warning: {path}: the tables' ε sum to {amount_text(total)}, over the release budget of "
                f"{amount_text(spec.budget)} by {amount_text(over)}; "
                "`dprelease plan` and `run` will refuse it")
    if failed:
        say(f"{failed} of {len(specs)} spec(s) invalid")
        raise SystemExit(ExitCode.INVALID)


def _auto_spend(spec: Any) -> str:
    """What a spec with ``epsilon: auto`` (``rho: auto``) tables spends, before its split is
    chosen: the written tables' budgets, and at most the release budget in all (the tables' budgets
    in the spec are a provisional split, never spent: :class:`dprelease.spec.model.AutoSplit`)."""
    symbol, key = spec.symbol, symbol_key(spec.symbol)
    auto = [t.name for t in spec.tables if t.auto is not None]
    written = [t for t in spec.tables if t.auto is None]
    left = subtract(spec.budget, compose((t.budget for t in written), spec.definition))
    leaves = (f"what the written tables leave of the release budget ({symbol} = {amount_text(left)} of "
              f"{amount_text(spec.budget)})" if written else f"the release budget ({symbol} = {amount_text(spec.budget)})")
    return (f"{', '.join(auto)}: {key}: auto — `dprelease plan` splits {leaves} between them and their levels, each "
            f"share rounded down, so the release spends at most {symbol} = {amount_text(spec.budget)} (the split is "
            "shown by plan and covered by its approval)")


def header_problems(spec: Any) -> None:
    """Every column the spec reads (grouped, filtered, measured, the unit's id) against the data
    files' headers (their column names only: no row is read): a missing column is a
    :class:`DataError` (exit 2) naming the closest column the file has. Data not there (a spec
    written before its data arrives) or a header that cannot be read is said, not refused here
    (`check` and `run` refuse it)."""
    from dprelease.data.check import check_data

    try:
        found = check_data(spec, full=False)
    except DataError as exc:  # no data there yet (a spec written before its data arrives): said, not refused
        say(f"note: {spec.source}: the data's header was not checked: {exc}")
        return
    problems = [f.line() for f in found.problems if f.kind in ("absent", "duplicate")]
    if problems:
        raise DataError(f"{spec.source}: the data's header lacks what the spec reads:\n  " + "\n  ".join(problems))
    if found.files:
        say(f"note: {spec.source}: the data's header was not checked ({found.files[0]})")


@handled
def plan(spec_path: Path, ledger: str | None = None, as_json: bool = False, target_moe: str | None = None,
         confidence: str | None = None, approve: bool = False, by: str | None = None, tradeoff: bool = False,
         allocate: bool = False, weights: str | None = None) -> None:
    """``dprelease plan SPEC`` (:func:`dprelease.cli.signatures.plan`)."""
    if approve and (confidence is not None or target_moe is not None or allocate):
        raise usage_error("approve the plan as the spec states it, without --confidence, --target-moe or "
                                 "--allocate", param_hint="--approve")
    if by is not None and not approve:
        raise usage_error("--by names who approves: use it with --approve", param_hint="--by")
    targets = _targets(target_moe, allocate)
    if weights is not None and not allocate:
        raise usage_error("weights are for --allocate", param_hint="--weights")
    if tradeoff and (allocate or target_moe is not None):
        raise usage_error("show the trade-off alone, without --allocate or --target-moe", param_hint="--tradeoff")
    import dataclasses

    from dprelease.ledger.reader import open_for_reading
    from dprelease.lifecycle.notices import context_warnings, ledger_line
    from dprelease.plan import plan_release
    from dprelease.plan.review import plan_facts, review_warnings
    from dprelease.spec import load_spec

    spec = load_spec(spec_path)
    header_problems(spec)  # a column the data lacks: no plan to approve
    if confidence is not None:
        spec = dataclasses.replace(spec, confidence=_confidence(confidence))
    location = spec_location(spec, ledger)
    exists, ledger_id, state, evaluations = False, None, None, ()
    found = open_for_reading(location)  # sqlite3 where it can (no SQLAlchemy import); approving opens it to write
    if location.may_create and found is None:  # a run given this --ledger creates it: no refusal
        say(ledger_line(location, False))
    else:
        with spec_ledger(spec, location, found=found) as opened:  # where a run would spend, refused as a run would
            exists, ledger_id = True, opened.id
            state = opened.state(spec.dataset.name)
            evaluations = tuple(opened.evaluations_of(spec.dataset.name))
    the_plan = dataclasses.replace(plan_release(spec, state), evaluations=evaluations)
    warnings = context_warnings(spec, state) + review_warnings(plan_facts(the_plan, spec.dataset.partition_note), state)
    for warning in warnings:
        say(f"warning: {spec_path}: {warning}")
    if allocate:
        _print_allocation(the_plan, _weights(weights), targets if isinstance(targets, dict) else {}, as_json)
        return
    if isinstance(targets, int):
        _print_target(spec, the_plan, targets, as_json)
        return
    from dprelease.cli.render import plan_json, print_plan
    from dprelease.plan.margins import table_units

    if as_json:
        shown = plan_json(the_plan, location, exists, ledger_id, table_units(spec))
        shown["warnings"] = warnings
        if tradeoff:
            from dprelease.cli.tradeoff_view import tradeoff_json
            from dprelease.plan.tradeoff import plan_curves

            shown["tradeoff"] = tradeoff_json(plan_curves(the_plan), the_plan.confidence)
        print(json.dumps(shown, indent=2))
    else:
        print_plan(out, the_plan, str(spec_path), spec.dataset.partition_note,
                   ledger_line(location, exists, ledger_id=ledger_id), table_units(spec))
        if tradeoff:
            from dprelease.cli.tradeoff_view import tradeoff_lines
            from dprelease.plan.tradeoff import plan_curves

            for line in tradeoff_lines(the_plan, plan_curves(the_plan)):
                out.print(line, markup=False)
    if the_plan.existing_run is not None:
        raise SystemExit(ExitCode.ALREADY_RELEASED)
    if not the_plan.fits:
        if not as_json:
            from dprelease.lifecycle import budget_overruns

            say("plan exceeds the " + " and the ".join(budget_overruns(spec, the_plan)))
        raise SystemExit(ExitCode.OVER_BUDGET)
    if approve:
        with spec_ledger(spec, location, quiet=True) as approver:
            granted = approver.approve(dataset=spec.dataset.base_name or spec.dataset.name, release=spec.release,
                                       spec_fingerprint=the_plan.fingerprint, by=by,
                                       spec_path=str(spec.source.resolve()))
        say(f"approved plan {granted.spec_fingerprint} of release {spec.release} by {granted.approved_by} "
            f"({granted.approved_at[:19]} UTC)" + (f", with its EXACT publications (NOT differentially private): "
                                                  f"persons per place at {', '.join(spec.invariant_levels)}"
                                                  if spec.invariants else ""))


def _confidence(text: str) -> Fraction:
    try:
        value = parse_budget(text, text, what="confidence")
    except NotANumber as exc:
        raise usage_error(str(exc), param_hint="--confidence") from None
    if not 0 < value < 1:
        raise usage_error("must lie strictly between 0 and 1, e.g. 0.90", param_hint="--confidence")
    return value


def _pairs(text: str, option: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` as [("a", "1"), ("b", "2")]; a name twice, or an item without "=", is refused."""
    pairs = []
    for item in text.split(","):
        name, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not name or not value:
            raise usage_error(f"{item.strip()!r} is not TABLE=VALUE (e.g. puma_by_sex=2)", param_hint=option)
        pairs.append((name, value))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise usage_error(f"a table named twice: {text!r}", param_hint=option)
    return pairs


def _whole(text: str, option: str) -> int:
    if not text.isdigit():
        raise usage_error(f"{text!r} is not a margin of error (a whole number ≥ 0)", param_hint=option)
    return int(text)


def _targets(text: str | None, allocate: bool) -> int | dict[str, int] | None:
    """--target-moe: N (every table's ε for ±N) or, with --allocate, TABLE=N,... ."""
    if text is None:
        return None
    if "=" not in text:
        if allocate:
            raise usage_error("with --allocate, name the tables that must meet a margin: TABLE=N,...",
                                     param_hint="--target-moe")
        return _whole(text.strip(), "--target-moe")
    if not allocate:
        raise usage_error("targets per table (TABLE=N) are for --allocate; without it, --target-moe N gives "
                                 "every table's ε for ±N", param_hint="--target-moe")
    return {name: _whole(value, "--target-moe") for name, value in _pairs(text, "--target-moe")}


def _weights(text: str | None) -> dict[str, Fraction]:
    if text is None:
        return {}
    out_ = {}
    for name, value in _pairs(text, "--weights"):
        try:
            out_[name] = parse_budget(value, value, what="a weight")
        except NotANumber as exc:
            raise usage_error(f"{name}: {exc}", param_hint="--weights") from None
    return out_


def _print_allocation(the_plan, weights: dict[str, Fraction], targets: dict[str, int],  # type: ignore[no-untyped-def]
                      as_json: bool) -> None:
    from dprelease.cli.tradeoff_view import allocation_json, allocation_yaml
    from dprelease.plan.allocation import allocate

    proposal = allocate(the_plan, weights, targets)
    if as_json:
        print(json.dumps(allocation_json(the_plan, proposal), indent=2))
    else:
        print(allocation_yaml(the_plan, proposal))


def _print_target(spec, the_plan, target: int, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    """--target-moe N: per count or sum, the ε for ±N; a mean, mode or quantile gets none, with its
    margin now in its own units (:func:`dprelease.plan.margins.untargeted_note`)."""
    from dprelease.cli.render import both, pct
    from dprelease.plan import epsilon_for_target
    from dprelease.plan.margins import margin_of, table_units, untargeted_note

    needs = epsilon_for_target(the_plan, spec.confidence, target)
    kept = sum((t.budget.amount for (_, e), t in zip(needs, the_plan.tables) if e is None), Fraction(0))
    total = sum((e for _, e in needs if e is not None), kept)  # the release's: tables without a target keep theirs
    units = table_units(spec)
    if as_json:
        key = unit_key(spec.budget)  # "rho" under zCDP (a release of means and modes only: counts are refused)
        print(json.dumps({"target_moe": target, "confidence": fraction_text(spec.confidence),
                          f"total_{key}": fraction_text(total), f"kept_{key}": fraction_text(kept),
                          "tables": [{"name": n, key: None if e is None else fraction_text(e),
                                      f"current_{key}": amount_text(t.budget), "current_moe": t.moe,
                                      "margin": margin_of(t, spec.confidence).record(units.get(t.name, "")),
                                      **({"note": untargeted_note(t, spec.confidence, units.get(t.name, ""))}
                                         if e is None else {})}
                                     for (n, e), t in zip(needs, the_plan.tables)]}, indent=2))
        return
    out.print(f"ε per table for a margin of error of ±{target} at {pct(spec.confidence)} "
              "(rounded up to 3 significant digits, so the target is met):", markup=False)
    for (name, need), t in zip(needs, the_plan.tables):
        if need is None:
            out.print(f"  {name}: {untargeted_note(t, spec.confidence, units.get(t.name, ''))}", markup=False)
        else:
            out.print(f"  {name}: ε = {both(need)} (now {amount_text(t.budget, decimal=True)}, ±{t.moe})", markup=False)
    out.print(f"  total: ε = {both(total)} (release budget {amount_text(spec.budget, decimal=True)})"
              + (f" — the tables above without an ε keep theirs, ε = {both(kept)} of it"
                 if any(e is None for _, e in needs) else ""), markup=False)
