"""The ``tables:`` section: each central table's grouping, filter, budget, measure,
post-processing and noise mechanism, and the consistency groups they form (local tables are
checked by :mod:`.local`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from dprelease.spec import defaults
from dprelease.spec.junction import fitting_scopes
from dprelease.spec.model import (
    BYTES_PER_CELL,
    MACHINE_SHARE,
    ROOT,
    AutoSplit,
    Column,
    Condition,
    LocalTable,
    MeanMeasure,
    ModeMeasure,
    SumMeasure,
    Table,
)
from dprelease.spec.sections.columns import parse_condition, unknown_column
from dprelease.spec.sections.local import local_table
from dprelease.spec.sections.measures import measure
from dprelease.spec.sections.privacy import Definition, typed
from dprelease.spec.sections.reader import Reader
from dprelease.spec.yamlsource import Path_

MAX_DETAIL_CELLS = 20_000  # per place, for a hidden table of a group whose tables form no junction tree

Measure = SumMeasure | ModeMeasure | MeanMeasure | None


@dataclass(frozen=True, slots=True)
class TableInputs:
    """What the earlier sections produced that the tables are checked against."""

    definition: Definition
    columns: dict[str, Column]  # declared, derived and geographic rollups, by name
    broken: frozenset[str]  # columns whose declaration has problems (reported there, not again)
    levels: tuple[str, ...]  # the geography's levels, coarse to fine (the root implicit)
    max_cells: int
    person_id: object  # privacy.unit.id as written
    release: str | None  # the release name as written: a local table's default collection


def tables(r: Reader, x: TableInputs) -> tuple[list[Table], list[LocalTable]]:
    """The central tables and the local ones, in spec order; an invalid table is left out (reported)."""
    out: list[Table] = []
    local: list[LocalTable] = []
    names: dict[str, int] = {}
    for i, body in enumerate(r.get(("tables",), list, [])):
        if not isinstance(body, dict):
            continue
        at: Path_ = ("tables", i)
        name, _ = r.unique_name(at, names)  # a repeated name is reported; the table is still checked
        if body.get("kind") == "local":
            answers = local_table(r, at, body, x.columns, x.release)
            if answers is not None:
                local.append(answers)
            continue
        table = _table(r, at, name, x)
        if table is not None:
            out.append(table)
    _groups(r, out, x.columns)
    return out, local


def _table(r: Reader, at: Path_, name: str | None, x: TableInputs) -> Table | None:
    group_by = _group_by(r, at, x)
    geographic = group_by is not None and group_by[:1] == ["geography"]
    if geographic:
        group_by = group_by[1:]  # type: ignore[index]
    where = _where(r, at, x)
    levels = ((ROOT,) + x.levels) if geographic else ()
    auto = _auto(r, x.definition, at, geographic, levels)
    if r.get(at + (x.definition.cost,), str) != "auto":  # written (checked even beside a misplaced weight:)
        epsilons, epsilon = _budget(r, x.definition, at, geographic, levels)
    else:  # a provisional 1 per measurement, replaced by auto_budgets once every table is read
        epsilons, epsilon = ([Fraction(1)] * len(levels) if geographic else None), Fraction(len(levels) or 1)
    if auto is False:  # reported: the table is checked on, as one with an invalid budget
        epsilons, epsilon = None, None
    if group_by is not None and name is not None and not _fits(r, at, name, group_by, geographic, x):
        return None
    if name is None or group_by is None or where is None or epsilon is None:
        return None
    consistency = r.get(at + ("consistency",), str)
    chosen = measure(r, at, x.columns, x.person_id)
    if chosen is False:
        return None
    post = _post_process(r, at, chosen, consistency, geographic)  # type: ignore[arg-type]
    if post is None:
        return None
    noise = _noise(r, x.definition, at, chosen, post)  # type: ignore[arg-type]
    if noise is None:
        return None
    mechanism, delta, upper = noise
    if auto is not None and not _auto_fits(r, x.definition, at, chosen, mechanism):  # type: ignore[arg-type]
        return None
    no_delta = Fraction(0) if x.definition.name == "approx" else None  # a table's own δ comes below, or by split
    budget = typed(x.definition, epsilon, no_delta)
    if budget is None:
        return None
    table = Table(name, tuple(group_by), tuple(where), budget, post,  # type: ignore[arg-type]
                  r.get(at + ("description",), str), levels,
                  tuple(b for e in epsilons or () if (b := typed(x.definition, e, no_delta)) is not None), consistency,
                  mechanism, upper, chosen,  # type: ignore[arg-type]
                  r.get(at + ("structural_zeros",), str, "publish"), auto)  # type: ignore[arg-type]
    return table if delta is None else table.with_delta(delta)


def _auto(r: Reader, d: Definition, at: Path_, geographic: bool,
          levels: tuple[str, ...]) -> AutoSplit | None | bool:
    """The table's ``epsilon: auto`` with its weights (None: its budget is written; False: a
    problem, reported). ``weight:`` is for auto tables only: a positive number, or for a
    geographic table one per level (exactly the root and every level)."""
    auto = r.get(at + (d.cost,), str) == "auto"
    if not auto:
        if r.written(at + ("weight",)):
            r.fail(at + ("weight",), f"weight: is the table's weight in the error the planner minimises for "
                   f"{d.cost}: auto; this table's {d.symbol} is written, so remove weight: (or write {d.cost}: auto)",
                   at_key=True)
            return False
        return None
    if d.name == "approx":
        r.fail(at + (d.cost,), f"{d.cost}: auto is for pure and zcdp releases: under approx a discrete Gaussian's "
               "ρ(ε, δ) has no closed form and its δ share follows its ε; write the table's ε (plan --allocate "
               "proposes a split), or use privacy.definition: zcdp")
        return False
    count = len(levels) or 1
    if not r.written(at + ("weight",)):
        return AutoSplit((Fraction(1),) * count)
    body = r.get(at + ("weight",), dict)
    if body is None:
        w = r.fraction(at + ("weight",), "weight")
        if w is None:
            return False
        if w <= 0:
            r.fail(at + ("weight",), f"a weight must be positive, not {r.text(at + ('weight',))}")
            return False
        return AutoSplit((w,) * count)
    if not geographic:
        r.fail(at + ("weight",), "weights per level are for a geographic table (group_by: [geography, ...]); "
               "write one number, e.g. weight: 2")
        return False
    if set(body) != set(levels):
        missing = [lv for lv in levels if lv not in body]
        extra = [k for k in body if k not in levels]
        r.fail(at + ("weight",), "weights per level must name exactly " + ", ".join(levels)
               + (f"; missing {', '.join(missing)}" if missing else "")
               + (f"; not a level: {', '.join(extra)}" if extra else ""))
        return False
    out = []
    for lv in levels:
        w = r.fraction(at + ("weight", lv), f"weight at {lv}")
        if w is None:
            return False
        if w <= 0:
            r.fail(at + ("weight", lv), f"a weight must be positive, not {r.text(at + ('weight', lv))}")
            return False
        out.append(w)
    return AutoSplit(tuple(out))


def _auto_fits(r: Reader, d: Definition, at: Path_, chosen: Measure, mechanism: str) -> bool:
    """Whether the planner can split this table's budget (reported if not): counts and sums with
    the release's default mechanism, whose error is a variance k/ρ (k/ε² under pure)."""
    why = None
    if isinstance(chosen, MeanMeasure):
        why = "a mean divides by a noisy count, so its error depends on the cell's count (data)"
    elif isinstance(chosen, ModeMeasure):
        why = f"a {chosen.kind} is a category, with no squared error to weigh"
    elif mechanism != defaults.mechanism(d.name, chosen):
        why = f"the planner weighs the default mechanism's variance, not the {mechanism}'s"
    if why:
        r.fail(at + (d.cost,), f"{d.cost}: auto: {why}; write this table's {d.symbol}")
        return False
    return True


def auto_budgets(r: Reader, tables: list[Table], budget: Fraction, d: Definition,
                 invariants: tuple[str, ...]) -> list[Table]:
    """The auto tables with their provisional budgets: an equal split, over every auto
    measurement, of what the release's budget leaves after the explicit tables (the planner
    replaces it: :mod:`dprelease.plan.split`). Reported: auto with invariants, a consistency group
    mixing auto and explicit tables, nothing left for the auto tables."""
    auto = [t for t in tables if t.auto is not None]
    if not auto:
        return tables
    at = {body.get("name"): i for i, body in enumerate(r.get(("tables",), list, [])) if isinstance(body, dict)}
    first: Path_ = ("tables", at.get(auto[0].name, 0), d.cost)
    if invariants:
        r.fail(first, f"{d.cost}: auto is not available with invariants (exact totals change the "
               "estimates' errors, which the planner does not model yet); write the tables' budgets")
        return tables
    for group in dict.fromkeys(t.consistency for t in auto if t.consistency):
        written = [t.name for t in tables if t.consistency == group and t.auto is None]
        if written:
            r.fail(("tables", at.get(written[0], 0), d.cost), f"consistency group {group!r} mixes {d.cost}: auto "
                   f"({', '.join(t.name for t in auto if t.consistency == group)}) with written budgets "
                   f"({', '.join(written)}): the planner splits a group's budget jointly; write {d.cost}: auto for "
                   "every table of the group, or a budget for each")
            return tables
    units = {_error_unit(t) for t in auto}
    unweighted = [t for t in auto if not r.written(("tables", at.get(t.name, 0), "weight"))]
    if len(units) > 1 and unweighted:
        r.fail(("tables", at.get(unweighted[0].name, 0), d.cost),
               f"{d.cost}: auto would add squared errors of different units ({', '.join(sorted(units))}): a sum's "
               "squared units outweigh squared persons, and the split would follow the units, not what matters more. "
               "Give every auto table a weight: (what one squared unit of its error is worth against the others'), "
               f"split the tables into releases of one unit, or write their {d.cost}")
        return tables
    explicit = sum((t.budget.amount for t in tables if t.auto is None), Fraction(0))
    left = budget - explicit
    if left <= 0:
        r.fail(first, f"the tables with a written {d.symbol} spend {explicit} of the release's budget "
               f"{budget}: nothing is left for the {d.cost}: auto tables; lower the written budgets or raise budget:")
        return tables
    count = sum(len(t.levels) or 1 for t in auto)
    each = typed(d, left / count, Fraction(0) if d.name == "approx" else None)
    assert each is not None
    out = []
    for t in tables:
        if t.auto is None:
            out.append(t)
        elif t.levels:
            out.append(replace(t, budget=typed(d, each.amount * len(t.levels)), level_budgets=(each,) * len(t.levels)))
        else:
            out.append(replace(t, budget=each))
    return out


def _budget(r: Reader, d: Definition, at: Path_, geographic: bool,
            levels: tuple[str, ...]) -> tuple[list[Fraction] | None, Fraction | None]:
    """(ε per level of a geographic table, the table's ε), None where missing or invalid (reported)."""
    written_geographic = "geography" in r.get(at + ("group_by",), list, [])
    epsilons = _level_budgets(r, d, at, levels) if geographic else None
    epsilon = sum(epsilons, Fraction(0)) if epsilons else (
        None if geographic or written_geographic else r.fraction(at + (d.cost,), d.symbol))
    if epsilon is None and not geographic and not written_geographic and not r.written(at + (d.cost,)) \
            and not r.written(at + (d.other,)):
        r.fail(at, f"missing required key {d.cost!r} (the table's {d.symbol})")
    return epsilons, epsilon


def _level_budgets(r: Reader, d: Definition, at: Path_, levels: tuple[str, ...]) -> list[Fraction] | None:
    """ε per level of a geographic table: a mapping with exactly the root and every level."""
    key, symbol = d.cost, d.symbol
    body = r.get(at + (key,), dict)
    if body is None:
        if r.written(at + (key,)):
            r.fail(at + (key,), f"a geographic table takes {symbol} per level: {key}: {{"
                   + ", ".join(f"{lv}: ..." for lv in levels) + "}")
        elif not r.written(at + (d.other,)):
            r.fail(at, f"missing required key {key!r} (the table's {symbol} per level)")
        return None
    if set(body) != set(levels):
        missing = [lv for lv in levels if lv not in body]
        extra = [k for k in body if k not in levels]
        r.fail(at + (key,), f"{symbol} per level must name exactly " + ", ".join(levels)
               + (f"; missing {', '.join(missing)}" if missing else "")
               + (f"; not a level: {', '.join(extra)}" if extra else ""))
        return None
    if r.reported(at + (key,)):  # a value the schema pass refused, in one problem for the mapping: not again per level
        return None
    out = [r.fraction(at + (key, lv), f"{symbol} at {lv}") for lv in levels]
    return None if None in out else out  # type: ignore[return-value]


def _fits(r: Reader, at: Path_, name: str, group_by: list[str], geographic: bool, x: TableInputs) -> bool:
    """Whether the table's cells (per level, at the finest) are within limits.max_cells (reported if not)."""
    cells = x.columns[x.levels[-1]].size if geographic else 1
    for c in group_by:
        cells *= x.columns[c].size
    if cells > x.max_cells:
        held = "" if r.written(("limits", "max_cells")) else (
            f" (what this machine can hold: {MACHINE_SHARE:.0%} of its memory at {BYTES_PER_CELL} bytes a published "
            "cell)")
        r.fail(at + ("group_by",), f"table {name!r} has {cells:,} cells, over the limit of "
               f"{x.max_cells:,}{held}; group by fewer or coarser columns, or raise limits.max_cells (e.g. for a "
               "cluster's driver with more memory)")
        return False
    return True


def _post_process(r: Reader, at: Path_, chosen: Measure, consistency: str | None, geographic: bool) -> str | None:
    """The table's post-processing (as written, else the default), or None if it does not suit
    the measure (reported)."""
    processed = r.get(at + ("post_process",), str, "none") != "none" or consistency  # asked for
    if isinstance(chosen, ModeMeasure) and processed:
        r.fail(at + ("post_process",) if consistency is None else at + ("consistency",),
               f"a {chosen.kind} is a category, published as chosen: post_process: none, no "
               "consistency group")
        return None
    if isinstance(chosen, MeanMeasure) and processed:
        r.fail(at + ("post_process",) if consistency is None else at + ("consistency",),
               "a mean is published as noisy sum / noisy count, clamped to its bounds (empty where "
               "the noisy count is below 1): post_process: none, no consistency group")
        return None
    post = r.get(at + ("post_process",), str, defaults.post_process(chosen, consistency, geographic))
    if post == "consistent" and not (consistency or geographic):
        r.fail(at + ("post_process",), "consistent post-processing needs a geography (group_by: "
               "[geography, ...]) or a consistency group (consistency: NAME)")
        return None
    if consistency and post != "consistent":
        r.fail(at + ("post_process",), f"tables of consistency group {consistency!r} are post-processed "
               "together: use post_process: consistent, or leave the group")
        return None
    if isinstance(chosen, SumMeasure) and (post == "consistent" or (post == "clamp" and chosen.low < 0)):
        r.fail(at + ("post_process",), "a sum is post-processed with none, or clamp when its lower "
               "bound is ≥ 0 (clamp sets negative sums to 0); consistent post-processing is for counts")
        return None
    return post


def _noise(r: Reader, d: Definition, at: Path_, chosen: Measure,
           post: str) -> tuple[str, Fraction | None, int | None] | None:
    """(mechanism, the table's own δ, the truncated geometric's upper bound), or None if they do
    not suit the definition, the measure or the post-processing (reported)."""
    mechanism = r.get(at + ("mechanism",), str, defaults.mechanism(d.name, chosen))
    if mechanism == "discrete_gaussian" and d.name == "pure":
        r.fail(at + ("mechanism",), "the discrete Gaussian is not pure ε-DP: use privacy.definition: zcdp "
               "or approx, or mechanism: discrete_laplace")
        return None
    if mechanism == "discrete_gaussian" and isinstance(chosen, ModeMeasure):
        r.fail(at + ("mechanism",), f"a {chosen.kind} is chosen by the exponential mechanism; remove "
               "mechanism:")
        return None
    table_delta = None
    if r.written(at + ("delta",)):
        if d.name != "approx":
            r.fail(at + ("delta",), "a table's δ is for privacy.definition: approx", at_key=True)
            return None
        if mechanism != "discrete_gaussian":
            r.fail(at + ("delta",), f"{mechanism if chosen is None or isinstance(chosen, SumMeasure) else 'the exponential mechanism'} "
                   "is pure ε-DP (δ = 0); a δ is for discrete_gaussian tables", at_key=True)
            return None
        table_delta = r.fraction(at + ("delta",), "δ")
        if table_delta is None:
            return None
        if not table_delta < 1:
            r.fail(at + ("delta",), "δ must lie strictly between 0 and 1")
            return None
    upper = r.get(at + ("upper",), int)
    if mechanism == "truncated_geometric" and upper is None:
        r.fail(at + ("mechanism",), "truncated_geometric needs the counts' public upper bound: add "
               "upper: N (outputs lie in [0, N])")
        return None
    if mechanism != "truncated_geometric" and upper is not None:
        r.fail(at + ("upper",), "upper: is the bound of the truncated geometric mechanism; add "
               "mechanism: truncated_geometric, or remove upper:")
        return None
    if mechanism == "truncated_geometric" and chosen is not None:
        r.fail(at + ("mechanism",), "the truncated geometric mechanism is for counts, not sums, means "
               "or modes")
        return None
    if mechanism == "truncated_geometric" and post == "consistent":
        r.fail(at + ("mechanism",), "truncated geometric outputs are already clamped to [0, upper], so "
               "consistent post-processing (which needs unbiased noise) cannot use them: use "
               "post_process: none, or the default mechanism")
        return None
    return mechanism, table_delta, upper


def _groups(r: Reader, tables: list[Table], columns: dict[str, Column]) -> None:
    """Members of a consistency group share where, privacy unit and geography."""
    by_group: dict[str, list[tuple[int, Table]]] = {}
    for i, t in enumerate(r.get(("tables",), list, [])):
        name = t.get("name") if isinstance(t, dict) else None
        table = next((x for x in tables if x.name == name), None)
        if table is not None and table.consistency:
            by_group.setdefault(table.consistency, []).append((i, table))
    for group, members in by_group.items():
        first_i, first = members[0]
        for i, t in members[1:]:
            if set(t.where) != set(first.where):
                r.fail(("tables", i, "where"), f"tables of consistency group {group!r} must share one where; "
                       f"tables[{first_i}] ({first.name}) has a different one")
            if bool(t.levels) != bool(first.levels):
                r.fail(("tables", i, "group_by"), f"tables of consistency group {group!r} must all group by "
                       "geography, or none")
        dims = list(dict.fromkeys(c for _, t in members for c in t.group_by))
        sizes = tuple(columns[c].size for c in dims)
        scopes = [tuple(dims.index(c) for c in t.group_by) for _, t in members]
        every, _ = fitting_scopes(scopes, sizes)  # tables beyond the group's own: hidden cliques to estimate
        for clique in every[len(scopes):]:
            cells = math.prod(sizes[d] for d in clique)
            if cells > MAX_DETAIL_CELLS:
                r.fail(("tables", members[0][0], "consistency"), f"group {group!r}'s tables "
                       f"({'; '.join(' × '.join(t.group_by) for _, t in members)}) do not form a junction tree "
                       f"(each table meeting the tables before it inside one of them): their consistency needs a "
                       f"hidden table over {' × '.join(dims[d] for d in clique)}, {cells:,} cells per place, over "
                       f"the limit of {MAX_DETAIL_CELLS:,}; split the group, or drop a table that closes the cycle")


def _group_by(r: Reader, at: Path_, x: TableInputs) -> list[str] | None:
    """The table's group_by as written (geography first if there), or None if invalid (reported)."""
    items = r.get(at + ("group_by",), list)
    if items is None:
        return None
    ok = True
    for j, c in enumerate(items):
        if not isinstance(c, str):
            return None
        if c == "geography":
            if not x.levels and "geography" in r.doc.data:
                ok = False  # the geography block is broken, and reported where it is
            elif j != 0 or not x.levels:
                r.fail(at + ("group_by", j), "geography goes first in group_by, and needs a geography: block"
                       if x.levels else "group_by names geography, but the spec declares no "
                       "geography: block")
                ok = False
            continue
        if c not in x.columns:
            if c not in x.broken:  # a broken declaration is reported once, where it is
                r.fail(at + ("group_by", j), unknown_column(c, x.columns))
            ok = False
        elif c in items[:j]:
            r.fail(at + ("group_by", j), f"column {c!r} is listed twice")
            ok = False
    return items if ok else None


def _where(r: Reader, at: Path_, x: TableInputs) -> list[Condition] | None:
    """The table's row filter, or None if invalid (reported)."""
    body = r.get(at + ("where",), dict, {})
    out: list[Condition] = []
    ok = True
    for name, comparison in body.items():
        if not isinstance(comparison, dict):
            ok = False
            continue
        if name not in x.columns:
            if name not in x.broken:
                r.fail(at + ("where", name), unknown_column(name, x.columns), at_key=True)
            ok = False
            continue
        for op in comparison:
            condition = parse_condition(r, at + ("where", name, op), x.columns[name], op)
            if condition is None:
                ok = False
            else:
                out.append(condition)
    return out if ok else None


def _error_unit(table: Table) -> str:
    """The unit of a table's error, as the planner sums it: persons (rows, under the unit's
    contribution bound) for counts, the summed column's units for a sum."""
    return f"{table.measure.column}'s units" if isinstance(table.measure, SumMeasure) else "persons"
