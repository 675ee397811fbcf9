"""YAML spec → :class:`~dprelease.spec.model.Spec`, reporting every problem with its position.

Three passes over one document: the JSON Schema shipped in this package (the contract),
then the semantic checks a schema cannot express (declared columns, domains, bins, budgets,
cell limits), then construction of the typed spec. The data file is never opened; domain
files (public metadata) are.
"""

from __future__ import annotations

from fractions import Fraction
from datetime import datetime, timezone
from pathlib import Path

from dprelease.errors import Problem, SpecError
from dprelease.spec.model import (
    DEFAULT_MAX_CELLS,
    CategoricalColumn,
    Column,
    Condition,
    ROOT,
    Spec,
    ModeMeasure,
    RollupColumn,
    SumMeasure,
    MeanMeasure,
    LocalTable,
    Table,
)

MAX_DETAIL_CELLS = 20_000  # per place, for a consistency group's joint estimate (dense normal equations)
from dprelease.spec import defaults
from dprelease.spec.geography import invariants, parse_geography
from dprelease.spec.sections.columns import (
    declared_columns,
    declared_rules,
    derived_columns,
    parse_condition,
    unknown_column,
)
from dprelease.spec.sections.dataset import check_safe_names, dataset, engine, ledger, na_values, release
from dprelease.spec.sections.privacy import (
    check_budget_units,
    confidence,
    definition,
    delta_beside,
    guarantee,
    release_budget,
)
from dprelease.spec.schema_check import schema, schema_problems
from dprelease.spec.sections.reader import Reader
from dprelease.spec.yamlsource import Document, Path_, YamlProblem, load_document


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
    checker = _Checker(doc, skip={p.field for p in problems},
                       run_date=run_date or datetime.now(timezone.utc))
    spec = checker.build()
    problems += checker.problems
    if problems:
        raise SpecError(_dedupe(problems))
    assert spec is not None
    return spec


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.line, p.column, p.field, p.message) not in seen:
            seen.add((p.line, p.column, p.field, p.message))
            out.append(p)
    return out


# ---------------------------------------------------------------- pass 2 and 3


class _Checker(Reader):
    """Semantic checks on a document that may also have schema problems.

    Every accessor is defensive: a part with the wrong shape is skipped here (the schema pass
    has already reported it), so one mistake is reported once.
    """

    def __init__(self, doc: Document, skip: set[str], run_date: datetime | None = None):
        super().__init__(doc, skip)
        self.run_date = run_date or datetime.now(timezone.utc)

    # -- the whole spec

    def build(self) -> Spec | None:
        if not isinstance(self.doc.data, dict):
            self.fail((), "a spec is a mapping with release, dataset, privacy, budget, columns and tables")
            return None
        d = definition(self)
        self.definition, self.cost, self.other, self.symbol = d.name, d.cost, d.other, d.symbol
        check_budget_units(self, d)
        data = dataset(self, d, self.run_date)
        budget = release_budget(self, d)
        budget_delta = delta_beside(self, d, ("budget",), "release")
        accuracy = confidence(self)
        max_cells = self.get(("limits", "max_cells"), int, DEFAULT_MAX_CELLS)
        declared, broken = declared_columns(self, na_values(self))
        derived, broken = derived_columns(self, {c.name: c for c in declared}, broken)
        self.broken = broken
        columns = declared + derived
        levels, rollups = parse_geography(self, {c.name: c for c in columns})
        columns += rollups
        tables = self.tables({c.name: c for c in columns}, max_cells, levels)
        invariants_ = invariants(self, levels)
        rules = declared_rules(self, {c.name: c for c in columns}, broken)

        ledger_ = ledger(self)
        release_name, release_template = release(self, self.run_date)
        engine_ = engine(self)
        check_safe_names(self)
        if self.problems or data is None or budget is None or release_name is None:
            return None
        promise = guarantee(self, d, columns, bool(self.local))
        if promise is None:
            return None
        delta = promise.delta
        if d.name == "approx":
            if budget_delta is None:
                return None
            tables = defaults.split_delta(self, tables, budget_delta)
            if tables is None:
                return None
            delta = budget_delta
        return Spec(source=self.doc.file, release=release_name, dataset=data, definition=d.name,  # type: ignore[arg-type]
                    delta=delta,
                    unit=defaults.privacy_unit(promise.unit_id), unit_id=promise.unit_id,  # type: ignore[arg-type]
                    max_rows=promise.max_rows,
                    budget_epsilon=budget, columns=tuple(columns), tables=tuple(tables),
                    ledger=ledger_, geography=levels, confidence=accuracy, max_cells=max_cells,
                    description=self.get(("description",), str), invariants=invariants_,
                    local_tables=tuple(self.local), release_template=release_template,
                    run_date=self.run_date if release_template else None, engine=engine_, rules=tuple(rules),
                    approval_required=self.get(("approval",), str, "optional") == "required")

    def local_table(self, at: Path_, body: dict, columns: dict[str, Column]) -> None:  # type: ignore[type-arg]
        """A ``kind: local`` table: the protocol, its ε, and a declared column of randomized answers."""
        name, column, protocol = body.get("name"), body.get("column"), body.get("protocol")
        if not all(isinstance(v, str) for v in (name, column, protocol)) or protocol not in ("k_rr", "coin_flip"):
            return  # the schema has reported it
        declared = columns.get(column)
        if not isinstance(declared, CategoricalColumn):
            self.fail(at + ("column",), f"{column!r} is not a declared column with a domain: the randomized answers "
                      "are a categorical column under columns:, whose domain is the protocol's")
            return
        if declared.missing is not None:
            self.fail(at + ("column",), f"column {column!r} declares a missing value; every randomized answer is one "
                      "of the domain's values: remove missing: from the column")
            return
        k = len(declared.values)
        epsilon = None
        if protocol == "coin_flip":
            if at + ("epsilon_local",) in self.doc.marks:
                self.fail(at + ("epsilon_local",), "the coin-flip protocol's ε is ln 3 (truth with probability 3/4); "
                          "remove epsilon_local:, or use protocol: k_rr", at_key=True)
                return
            if k != 2:
                self.fail(at + ("protocol",), f"the coin-flip protocol is for yes/no questions; column {column!r} has "
                          f"{k} values: use protocol: k_rr with epsilon_local:")
                return
        else:
            if at + ("epsilon_local",) not in self.doc.marks:
                self.fail(at, "protocol: k_rr needs each respondent's ε: add epsilon_local: (e.g. 1)")
                return
            epsilon = self.fraction(at + ("epsilon_local",), "ε_local")
            if epsilon is None:
                return
            if epsilon.denominator > 10**12 or epsilon.numerator > 10**12:
                self.fail(at + ("epsilon_local",), "epsilon_local needs at most 12 significant digits")
                return
        if declared.on_out_of_domain == "drop":
            self.fail(at + ("column",), f"column {column!r} says on_out_of_domain: drop; the number of answers is "
                      "published, so every answer must be a declared value: remove on_out_of_domain: drop")
            return
        memoised = body.get("memoised", False) is True
        memo_of = body.get("memo_of")
        collection = defaults.collection(body.get("collection"), self.get(("release",), str))
        if memoised and not isinstance(memo_of, str):
            self.fail(at, "a memoised collection repeats the randomized answers of an earlier collection: add "
                      "memo_of: COLLECTION (the collection whose memo the respondents reuse)")
            return
        if memo_of is not None and not memoised:
            self.fail(at + ("memo_of",), "memo_of: is for memoised: true collections", at_key=True)
            return
        if memo_of == collection:
            self.fail(at + ("memo_of",), "a collection cannot repeat itself: memo_of: names an earlier collection")
            return
        self.local.append(LocalTable(name, column, protocol, epsilon, collection,  # type: ignore[arg-type]
                                     memoised, body.get("description"), memo_of))

    def measure(self, at: Path_, columns: dict[str, Column]) -> SumMeasure | ModeMeasure | MeanMeasure | None | bool:
        """The table's measure: None for counts, a SumMeasure or ModeMeasure, or False when it is
        invalid (reported)."""
        body = self.get(at + ("measure",), dict)
        if body is None:
            return None
        if "mode" in body or "quantile" in body:
            kind = "mode" if "mode" in body else "quantile"
            column = body[kind]
            if not isinstance(column, str):
                return False
            q = None
            if kind == "quantile":
                q = self.fraction(at + ("measure", "q"), "q")
                if q is None:
                    return False
                if not 0 < q < 1:
                    self.fail(at + ("measure", "q"), "q must lie strictly between 0 and 1 (0.5 for the median)")
                    return False
                if q.denominator > 10**6:
                    self.fail(at + ("measure", "q"), "q needs at most 6 decimal places")
                    return False
            if column not in columns or isinstance(columns[column], RollupColumn):
                self.fail(at + ("measure", kind), f"{column!r} is not a declared column: a {kind} is chosen among "
                          "the categories of a column declared under columns: (or derived:)")
                return False
            if column in self.get(at + ("group_by",), list, []):
                self.fail(at + ("measure", kind), f"{column!r} is in group_by: each cell would have one category")
                return False
            if kind == "quantile" and columns[column].missing is not None:
                self.fail(at + ("measure", kind), f"{column!r} has a missing category, which has no place in its "
                          "order; a quantile needs a column without one")
                return False
            return ModeMeasure(column, q)
        kind = "mean" if "mean" in body else "sum"
        bounds, g, column = body.get("bounds"), body.get("granularity"), body.get(kind)
        for field, value in (("bounds", bounds), ("granularity", g)):
            items = value if isinstance(value, list) else [value]
            if any(isinstance(v, float) for v in items):  # JSON Schema counts 200.0 as an integer
                self.fail(at + ("measure", field), f"{field} must be whole numbers written without a decimal point "
                          f"(e.g. 200000, not 200000.0)")
                return False
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds)
                and type(g) is int and g >= 1 and isinstance(column, str)):
            return False  # the schema has reported it
        unit = self.get(("privacy", "unit"), dict)
        if unit and unit.get("id") == column:
            self.fail(at + ("measure", kind), f"{column!r} is the person identifier (privacy.unit.id); it is read to "
                      f"bound contributions and is not a value to {'sum' if kind == 'sum' else 'average'}")
            return False
        low, high = bounds
        if low >= high:
            self.fail(at + ("measure", "bounds"), f"bounds [{low}, {high}] must increase: [L, U] with L < U")
            return False
        if low % g or high % g:
            self.fail(at + ("measure", "bounds"), f"bounds [{low}, {high}] must be multiples of the granularity "
                      f"{g}, so that clamped values stay on the grid")
            return False
        if column in columns:
            self.fail(at + ("measure", kind), f"{column!r} is declared under columns: (its values are categories); a "
                      f"{kind} reads a numeric data column that is not declared there (a {kind} of a declared range "
                      "column is not supported yet)")
            return False
        if kind == "sum":
            if body.get("missing") == "skip":
                self.fail(at + ("measure", "missing"), "missing: skip is for means (a skipped row adds 0 to a "
                          "sum): write missing: zero")
                return False
            return SumMeasure(column, low, high, g, body.get("missing") == "zero")
        share = defaults.SUM_SHARE
        if at + ("measure", "sum_share") in self.doc.marks:
            share = self.fraction(at + ("measure", "sum_share"), "sum_share")
            if share is None:
                return False
            if not share < 1:
                self.fail(at + ("measure", "sum_share"), "sum_share is the part of the table's budget spent on the "
                          "sum, strictly between 0 and 1 (the rest goes to the count); e.g. 0.5")
                return False
        return MeanMeasure(column, low, high, g, body.get("missing", "error"), share)

    def tables(self, columns: dict[str, Column], max_cells: int, levels: tuple[str, ...]) -> list[Table]:
        out: list[Table] = []
        names: dict[str, int] = {}
        self.levels = levels
        self.local: list[LocalTable] = []
        for i, body in enumerate(self.get(("tables",), list, [])):
            if not isinstance(body, dict):
                continue
            at: Path_ = ("tables", i)
            name = self.get(at + ("name",), str)
            if name is not None and name in names:
                self.fail(at + ("name",), f"table name {name!r} is already used by tables[{names[name]}]; "
                          "names must be unique")
            elif name is not None:
                names[name] = i
            if body.get("kind") == "local":
                self.local_table(at, body, columns)
                continue
            group_by = self.group_by(at, columns)
            geographic = group_by is not None and group_by[:1] == ["geography"]
            if geographic:
                group_by = group_by[1:]
            where = self.where(at, columns)
            table_levels = ((ROOT,) + levels) if geographic else ()
            written_geographic = "geography" in self.get(at + ("group_by",), list, [])
            epsilons = self.level_budgets(at, table_levels) if geographic else None
            epsilon = sum(epsilons, Fraction(0)) if epsilons else (
                None if geographic or written_geographic else self.fraction(at + (self.cost,), self.symbol))
            if epsilon is None and not geographic and not written_geographic and at + (self.cost,) not in self.doc.marks \
                    and at + (self.other,) not in self.doc.marks:
                self.fail(at, f"missing required key {self.cost!r} (the table's {self.symbol})")
            if group_by is not None and name is not None:
                cells = columns[levels[-1]].size if geographic else 1
                for c in group_by:
                    cells *= columns[c].size
                if cells > max_cells:
                    self.fail(at + ("group_by",), f"table {name!r} has {cells:,} cells, over the limit of "
                              f"{max_cells:,}; group by fewer or coarser columns, or raise limits.max_cells")
                    continue
            if None in (name, group_by, where, epsilon):
                continue
            consistency = self.get(at + ("consistency",), str)
            measure = self.measure(at, columns)
            if measure is False:
                continue
            if isinstance(measure, ModeMeasure):
                if self.get(at + ("post_process",), str, "none") != "none" or consistency:
                    self.fail(at + ("post_process",) if consistency is None else at + ("consistency",),
                              f"a {measure.kind} is a category, published as chosen: post_process: none, no "
                              "consistency group")
                    continue
            elif isinstance(measure, MeanMeasure):
                if self.get(at + ("post_process",), str, "none") != "none" or consistency:
                    self.fail(at + ("post_process",) if consistency is None else at + ("consistency",),
                              "a mean is published as noisy sum / noisy count, clamped to its bounds (empty where "
                              "the noisy count is below 1): post_process: none, no consistency group")
                    continue
            post = self.get(at + ("post_process",), str, defaults.post_process(measure, consistency, geographic))
            if post == "consistent" and not (consistency or geographic):
                self.fail(at + ("post_process",), "consistent post-processing needs a geography (group_by: "
                          "[geography, ...]) or a consistency group (consistency: NAME)")
                continue
            if consistency and post != "consistent":
                self.fail(at + ("post_process",), f"tables of consistency group {consistency!r} are post-processed "
                          "together: use post_process: consistent, or leave the group")
                continue
            if isinstance(measure, SumMeasure) and (post == "consistent" or (post == "clamp" and measure.low < 0)):
                self.fail(at + ("post_process",), "a sum is post-processed with none, or clamp when its lower "
                          "bound is ≥ 0 (clamp sets negative sums to 0); consistent post-processing is for counts")
                continue
            mechanism = self.get(at + ("mechanism",), str, defaults.mechanism(self.definition, measure))
            if mechanism == "discrete_gaussian" and self.definition == "pure":
                self.fail(at + ("mechanism",), "the discrete Gaussian is not pure ε-DP: use privacy.definition: zcdp "
                          "or approx, or mechanism: discrete_laplace")
                continue
            if mechanism == "discrete_gaussian" and isinstance(measure, ModeMeasure):
                self.fail(at + ("mechanism",), f"a {measure.kind} is chosen by the exponential mechanism; remove "
                          "mechanism:")
                continue
            table_delta = None
            if at + ("delta",) in self.doc.marks:
                if self.definition != "approx":
                    self.fail(at + ("delta",), "a table's δ is for privacy.definition: approx", at_key=True)
                    continue
                if mechanism != "discrete_gaussian":
                    self.fail(at + ("delta",), f"{mechanism if measure is None or isinstance(measure, SumMeasure) else 'the exponential mechanism'} "
                              "is pure ε-DP (δ = 0); a δ is for discrete_gaussian tables", at_key=True)
                    continue
                table_delta = self.fraction(at + ("delta",), "δ")
                if table_delta is None:
                    continue
                if not table_delta < 1:
                    self.fail(at + ("delta",), "δ must lie strictly between 0 and 1")
                    continue
            upper = self.get(at + ("upper",), int)
            if mechanism == "truncated_geometric" and upper is None:
                self.fail(at + ("mechanism",), "truncated_geometric needs the counts' public upper bound: add "
                          "upper: N (outputs lie in [0, N])")
                continue
            if mechanism != "truncated_geometric" and upper is not None:
                self.fail(at + ("upper",), "upper: is the bound of the truncated geometric mechanism; add "
                          "mechanism: truncated_geometric, or remove upper:")
                continue
            if mechanism == "truncated_geometric" and measure is not None:
                self.fail(at + ("mechanism",), "the truncated geometric mechanism is for counts, not sums, means "
                          "or modes")
                continue
            if mechanism == "truncated_geometric" and post == "consistent":
                self.fail(at + ("mechanism",), "truncated geometric outputs are already clamped to [0, upper], so "
                          "consistent post-processing (which needs unbiased noise) cannot use them: use "
                          "post_process: none, or the default mechanism")
                continue
            out.append(Table(name, tuple(group_by), tuple(where), epsilon, post,
                             self.get(at + ("description",), str), table_levels,
                             tuple(epsilons or ()), consistency, mechanism, upper, measure, table_delta,
                             self.get(at + ("structural_zeros",), str, "publish")))
        self.groups(out, columns, max_cells)
        return out

    def level_budgets(self, at: Path_, levels: tuple[str, ...]) -> list[Fraction] | None:
        """ε per level of a geographic table: a mapping with exactly the root and every level."""
        key, symbol = self.cost, self.symbol
        body = self.get(at + (key,), dict)
        if body is None:
            if at + (key,) in self.doc.marks:
                self.fail(at + (key,), f"a geographic table takes {symbol} per level: {key}: {{"
                          + ", ".join(f"{lv}: ..." for lv in levels) + "}")
            elif at + (self.other,) not in self.doc.marks:
                self.fail(at, f"missing required key {key!r} (the table's {symbol} per level)")
            return None
        if set(body) != set(levels):
            missing = [lv for lv in levels if lv not in body]
            extra = [k for k in body if k not in levels]
            self.fail(at + (key,), f"{symbol} per level must name exactly " + ", ".join(levels)
                      + (f"; missing {', '.join(missing)}" if missing else "")
                      + (f"; not a level: {', '.join(extra)}" if extra else ""))
            return None
        out = [self.fraction(at + (key, lv), f"{symbol} at {lv}") for lv in levels]
        return None if None in out else out  # type: ignore[return-value]

    def groups(self, tables: list[Table], columns: dict[str, Column], max_cells: int) -> None:
        """Members of a consistency group share where, privacy unit and geography."""
        by_group: dict[str, list[tuple[int, Table]]] = {}
        for i, t in enumerate(self.get(("tables",), list, [])):
            name = t.get("name") if isinstance(t, dict) else None
            table = next((x for x in tables if x.name == name), None)
            if table is not None and table.consistency:
                by_group.setdefault(table.consistency, []).append((i, table))
        for group, members in by_group.items():
            first_i, first = members[0]
            for i, t in members[1:]:
                if set(t.where) != set(first.where):
                    self.fail(("tables", i, "where"), f"tables of consistency group {group!r} must share one where; "
                              f"tables[{first_i}] ({first.name}) has a different one")
                if bool(t.levels) != bool(first.levels):
                    self.fail(("tables", i, "group_by"), f"tables of consistency group {group!r} must all group by "
                              "geography, or none")
            dims = list(dict.fromkeys(c for _, t in members for c in t.group_by))
            detail = 1
            for c in dims:
                detail *= columns[c].size
            if detail > MAX_DETAIL_CELLS:
                self.fail(("tables", members[0][0], "consistency"), f"group {group!r} combines {', '.join(dims)} into "
                          f"{detail:,} detailed cells per place, over the limit of {MAX_DETAIL_CELLS:,}; split the group")

    def group_by(self, at: Path_, columns: dict[str, Column]) -> list[str] | None:
        items = self.get(at + ("group_by",), list)
        if items is None:
            return None
        ok = True
        for j, c in enumerate(items):
            if not isinstance(c, str):
                return None
            if c == "geography":
                if not getattr(self, "levels", ()) and "geography" in self.doc.data:
                    ok = False  # the geography block is broken, and reported where it is
                elif j != 0 or not getattr(self, "levels", ()):
                    self.fail(at + ("group_by", j), "geography goes first in group_by, and needs a geography: block"
                              if getattr(self, "levels", ()) else "group_by names geography, but the spec declares no "
                              "geography: block")
                    ok = False
                continue
            if c not in columns:
                if c not in self.broken:  # a broken declaration is reported once, where it is
                    self.fail(at + ("group_by", j), unknown_column(c, columns))
                ok = False
            elif c in items[:j]:
                self.fail(at + ("group_by", j), f"column {c!r} is listed twice")
                ok = False
        return items if ok else None

    def where(self, at: Path_, columns: dict[str, Column]) -> list[Condition] | None:
        body = self.get(at + ("where",), dict, {})
        out: list[Condition] = []
        ok = True
        for name, comparison in body.items():
            if not isinstance(comparison, dict):
                ok = False
                continue
            if name not in columns:
                if name not in self.broken:
                    self.fail(at + ("where", name), unknown_column(name, columns), at_key=True)
                ok = False
                continue
            for op in comparison:
                condition = parse_condition(self, at + ("where", name, op), columns[name], op)
                if condition is None:
                    ok = False
                else:
                    out.append(condition)
        return out if ok else None
