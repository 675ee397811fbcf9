"""``dprelease check SPEC``: the data checked against the spec, every column and every row,
with nothing spent and nothing written (:func:`dprelease.data.check.check_data`). Never imports
Prefect."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from dprelease.cli.common import handled, ledger_if_any, say, show, spec_location
from dprelease.cli.options import LedgerOpt
from dprelease.errors import DataError, ExitCode


@handled
def check(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Release spec file.")],
    ledger: LedgerOpt = None,
    run_date: Annotated[Optional[str], typer.Option(
        "--run-date", metavar="DATE", help="The date that {run_date:...} templates in the spec resolve with (as for "
        "`run`; default: now).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (per column: problems and row counts, without the example values).")] = False,
) -> None:
    """Check the data against the spec before a run: per column, the problems a run would refuse
    (column not in the data, values that do not parse, values outside the declared domain or
    range, missing values the column has no category for, rows without a person id) and how many
    rows have each; then the spec's declared rules. Reads every row; spends nothing, publishes
    nothing, writes nothing.

    Exit 0 no problems; 2 problems (a run would refuse this data), or an invalid spec.
    """
    from dprelease.data.check import check_data, data_bytes
    from dprelease.data.rules import broken_rules
    from dprelease.lifecycle.progress import scan_progress
    from dprelease.spec import load_spec

    spec = load_spec(spec_path, run_date=_date(run_date))
    with ledger_if_any(spec_location(spec, ledger)) as opened:  # read only: where a run would spend from
        state = opened.state(spec.dataset.name) if opened is not None else None
    if state is not None:
        from dprelease.accounting import amount_text

        say(f"dataset {spec.dataset.name}: {amount_text(state.remaining)} of {amount_text(state.budget)} remaining "
            "(a check reserves nothing)")
    with scan_progress(data_bytes(spec), f"checking {spec.dataset.resolved_path.name}") as read:
        found = check_data(spec, read=read)
    try:
        rules: list[str] | None = broken_rules(spec)
    except DataError:  # a column the rules read has a problem: reported above
        rules = None
    if as_json:
        show(json.dumps(_as_json(spec_path, found, rules), indent=2, ensure_ascii=False))
    else:
        lines = _lines(found, rules, bool(spec.rules))
        unread = [c.name for c in spec.columns if c.name not in found.columns and c.name in _declared(spec)]
        if unread:  # said before the verdict: it covers the columns read
            lines.insert(-1, "not read (no table, rule or where uses them, so a run does not read them either): "
                         + ", ".join(unread))
        for line in lines:
            show(line)
    if not found.ok or rules:
        raise typer.Exit(ExitCode.INVALID)


def _date(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a date, e.g. 2027-03-01", param_hint="--run-date") from None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def _lines(found, rules: list[str] | None, has_rules: bool) -> list[str]:  # type: ignore[no-untyped-def]
    """What the check found, for the terminal: the data, each column's problems (or "no
    problems"), the rules, and a verdict."""
    read = f"{found.rows_read:,} rows read" if found.rows_read is not None else "no row read"
    period = f", {found.rows:,} in the release period" if found.rows is not None and found.rows != found.rows_read \
        else ""
    out = [f"data: {found.data} ({read}{period})"] + [f"  {line}" for line in found.lines()
                                                     if not line.startswith("column ")]
    for name in found.columns:
        findings = found.of(name)
        if not findings:
            out.append(f"column {name}: no problems")
        for f in findings:
            out.append(f.line() + ("" if f.problem else " (not a problem)"))
    if has_rules:
        out += (["rules: not checked (fix the problems above first)"] if rules is None
                else [f"rules: {line}" for line in rules] or ["rules: no row breaks a declared rule"])
    bad = len({f.column for f in found.problems})
    if found.ok and not rules:
        out.append("no problems: a run would accept this data (nothing was spent)")
    else:
        what = [f"{bad} column{'s' if bad != 1 else ''}" if bad else "", "the files" if found.files else "",
                "no rows" if found.empty else "", "the rules" if rules else ""]
        out.append(f"problems in {', '.join(w for w in what if w)}: a run would refuse this data before reserving "
                   "anything (nothing was spent)")
    return out


def _as_json(spec_path: Path, found, rules: list[str] | None) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Counts and kinds only: no value of the data (the terminal output quotes one example)."""
    return {"spec": str(spec_path), "data": found.data, "ok": found.ok and not rules, "rows_read": found.rows_read,
            "rows": found.rows, "files": found.files, "empty": found.empty,
            "columns": {name: [{"problem": f.kind, "what": f.what, "rows": f.rows, "refused": f.problem, "fix": f.fix}
                               for f in found.of(name)] for name in found.columns},
            "rules": rules}


def _declared(spec) -> set[str]:  # type: ignore[no-untyped-def]
    """The columns the spec declares as columns of the data (not derived ones, not geography roll-ups)."""
    from dprelease.spec.domains import CategoricalColumn, RangeColumn

    return {c.name for c in spec.columns if isinstance(c, (CategoricalColumn, RangeColumn))}
