"""YAML spec → :class:`~dprelease.spec.model.Spec`, reporting every problem with its position.

The driver, in three passes over one document: the JSON Schema shipped in this package (the
contract, :mod:`.schema_check`), then the semantic checks a schema cannot express, section by
section in spec order (:mod:`.sections`, :mod:`.geography`: declared columns, domains, bins,
budgets, cell limits), then the defaults that are decided rather than checked
(:mod:`.defaults`) and construction of the typed spec. The data file is never opened; domain
files (public metadata) are.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from dprelease.errors import InternalError, Problem, SpecError
from dprelease.spec import defaults
from dprelease.spec.geography import invariants, parse_geography
from dprelease.spec.model import Spec, machine_max_cells
from dprelease.spec.schema_check import schema, schema_problems
from dprelease.spec.sections.columns import (
    declared_columns,
    declared_rules,
    derived_columns,
)
from dprelease.spec.sections.dataset import (
    check_safe_names,
    dataset,
    engine,
    ledger,
    na_values,
    output_dir,
    release,
)
from dprelease.spec.sections.privacy import (
    check_budget_units,
    confidence,
    margin_columns,
    definition,
    delta_beside,
    guarantee,
    person_id,
    release_budget,
    typed,
)
from dprelease.spec.sections.reader import Reader
from dprelease.spec.sections.tables import TableInputs, auto_budgets, tables
from dprelease.spec.yamlsource import YamlProblem, load_document

__all__ = ["load_spec", "schema"]


def load_spec(path: str | Path, run_date: datetime | None = None) -> Spec:
    """Load and validate a release spec; raise :class:`SpecError` listing every problem.

    A release name with ``{run_date:FORMAT}`` is resolved with ``run_date`` (a scheduled run's
    start, UTC), or now (UTC) when none is given."""
    path = Path(path)
    try:
        doc = load_document(path)
    except YamlProblem as exc:
        raise SpecError([exc.problem]) from None
    noted = {p.field for p in doc.problems}  # a node the walk already refused is not re-reported
    problems = list(doc.problems) + [p for p in schema_problems(doc) if p.field not in noted]
    r = Reader(doc, skip={p.field for p in problems})
    spec = _build(r, run_date or datetime.now(timezone.utc))
    problems += r.problems
    if problems:
        raise SpecError(_dedupe(problems))
    if spec is None:
        raise InternalError(f"{path}: the spec was refused without a reason; please report it, with the spec")
    return spec


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.line, p.column, p.field, p.message) not in seen:
            seen.add((p.line, p.column, p.field, p.message))
            out.append(p)
    return out


def _build(r: Reader, run_date: datetime) -> Spec | None:
    """Every section checked in order (each given what the earlier ones produced), then the
    defaults, then the spec; None when a problem has been reported."""
    if not isinstance(r.doc.data, dict):
        r.fail((), "a spec is a mapping with release, dataset, privacy, budget, columns and tables")
        return None
    d = definition(r)
    check_budget_units(r, d)
    data = dataset(r, d, run_date)
    budget = release_budget(r, d)
    budget_delta = delta_beside(r, d, ("budget",), "release")
    accuracy = confidence(r)
    max_cells = r.get(("limits", "max_cells"), int, None) or machine_max_cells()  # what this machine can hold
    declared, broken = declared_columns(r, na_values(r))
    derived, broken = derived_columns(r, {c.name: c for c in declared}, broken)
    levels, rollups = parse_geography(r, {c.name: c for c in declared + derived})
    columns = declared + derived + rollups
    by_name = {c.name: c for c in columns}
    central, local = tables(r, TableInputs(d, by_name, broken, levels, max_cells, person_id(r),
                                           r.get(("release",), str)))
    totals = invariants(r, levels)
    rules = declared_rules(r, by_name, broken)
    ledger_path = ledger(r)
    outputs = output_dir(r)
    release_name, release_template = release(r, run_date)
    engine_ = engine(r)
    check_safe_names(r)
    if r.problems or data is None or budget is None or release_name is None:
        return None
    promise = guarantee(r, d, columns, bool(local))
    if promise is None:
        return None
    typed_budget = typed(d, budget, budget_delta)
    if typed_budget is None:  # an unknown definition (reported)
        return None
    central = auto_budgets(r, central, budget, d, totals)
    if r.problems:
        return None
    if d.name == "approx":
        if budget_delta is None:
            return None
        central = defaults.split_delta(r, central, budget_delta)  # type: ignore[assignment]
        if central is None:
            return None
    return Spec(source=r.doc.file, release=release_name, dataset=data, definition=d.name,  # type: ignore[arg-type]
                guarantee_delta=promise.delta if d.name == "zcdp" else None,
                unit=defaults.privacy_unit(promise.unit_id), unit_id=promise.unit_id,  # type: ignore[arg-type]
                max_rows=promise.max_rows,
                budget=typed_budget,
                columns=tuple(columns), tables=tuple(central),
                ledger=ledger_path, geography=levels, confidence=accuracy, margin_columns=margin_columns(r), max_cells=max_cells,
                description=r.get(("description",), str), invariants=totals,
                local_tables=tuple(local), release_template=release_template,
                run_date=run_date if release_template else None, engine=engine_, rules=tuple(rules),
                approval_required=r.get(("approval",), str, "optional") == "required", output_dir=outputs)
