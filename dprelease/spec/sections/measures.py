"""A table's ``measure:``: a mode or quantile of a declared column, or a sum or mean of a numeric
data column within public bounds (a count when there is none): an undeclared column with its
``bounds`` and ``granularity`` written, or a column declared with ``range:``, whose range is the
default ``bounds`` (and 1 the default ``granularity``)."""

from __future__ import annotations

import difflib
from typing import Any

from dprelease.spec import defaults
from dprelease.spec.model import (
    BinnedColumn,
    Column,
    MeanMeasure,
    ModeMeasure,
    RangeColumn,
    RollupColumn,
    SumMeasure,
)
from dprelease.spec.sections.reader import Reader
from dprelease.spec.yamlsource import Path_


def measure(r: Reader, at: Path_, columns: dict[str, Column],
            person_id: object) -> SumMeasure | ModeMeasure | MeanMeasure | None | bool:
    """The table's measure: None for counts, a SumMeasure, ModeMeasure or MeanMeasure, or False
    when it is invalid (reported). ``person_id`` is privacy.unit.id as written."""
    body = r.get(at + ("measure",), dict)
    if body is None:
        return None
    if "mode" in body or "quantile" in body:
        return _category(r, at, body, columns)
    return _numeric(r, at, body, columns, person_id)


def _category(r: Reader, at: Path_, body: dict[str, Any], columns: dict[str, Column]) -> ModeMeasure | bool:
    """A mode, or a quantile q, chosen among the categories of a declared column."""
    kind = "mode" if "mode" in body else "quantile"
    column = body[kind]
    if not isinstance(column, str):
        return False
    q = None
    if kind == "quantile":
        q = r.fraction(at + ("measure", "q"), "q")
        if q is None:
            return False
        if not 0 < q < 1:
            r.fail(at + ("measure", "q"), "q must lie strictly between 0 and 1 (0.5 for the median)")
            return False
        if q.denominator > 10**6:
            r.fail(at + ("measure", "q"), "q needs at most 6 decimal places")
            return False
    if column not in columns or isinstance(columns[column], RollupColumn):
        r.fail(at + ("measure", kind), f"{column!r} is not a declared column: a {kind} is chosen among "
               "the categories of a column declared under columns: (or derived:)")
        return False
    if column in r.get(at + ("group_by",), list, []):
        r.fail(at + ("measure", kind), f"{column!r} is in group_by: each cell would have one category")
        return False
    if kind == "quantile" and columns[column].missing is not None:
        r.fail(at + ("measure", kind), f"{column!r} has a missing category, which has no place in its "
               "order; a quantile needs a column without one")
        return False
    return ModeMeasure(column, q)


def _numeric(r: Reader, at: Path_, body: dict[str, Any], columns: dict[str, Column],
             person_id: object) -> SumMeasure | MeanMeasure | bool:
    """A sum or a mean of a numeric data column, clamped to bounds on a grid of the granularity."""
    kind = "mean" if "mean" in body else "sum"
    bounds, g, column = body.get("bounds"), body.get("granularity"), body.get(kind)
    for field, value in (("bounds", bounds), ("granularity", g)):
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) for v in items):  # JSON Schema counts 200.0 as an integer
            r.fail(at + ("measure", field), f"{field} must be whole numbers written without a decimal point "
                   f"(e.g. 200000, not 200000.0)")
            return False
    if not isinstance(column, str) or (bounds is not None and not (
            isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds))) \
            or (g is not None and not (type(g) is int and g >= 1)):
        return False  # the schema has reported it
    if person_id == column:
        r.fail(at + ("measure", kind), f"{column!r} is the person identifier (privacy.unit.id); it is read to "
               f"bound contributions and is not a value to {'sum' if kind == 'sum' else 'average'}")
        return False
    declared = columns.get(column)
    if declared is not None and not isinstance(declared, RangeColumn):
        r.fail(at + ("measure", kind), f"{column!r} is declared under {_where_declared(declared)} with categories, "
               f"not numbers; a {kind} reads a numeric column: declare it with range: [LOW, HIGH] under columns:, "
               f"or leave it undeclared and write bounds: [L, U] and granularity:")
        return False
    if declared is None:
        for field, value, example in (("bounds", bounds, "[0, 200000]"), ("granularity", g, "100")):
            if value is None:
                close = difflib.get_close_matches(column, [n for n, c in columns.items() if isinstance(c, RangeColumn)],
                                                  n=1)
                hint = f"did you mean {close[0]!r} (declared with a range)? Else " if close else ""
                r.fail(at + ("measure",), f"a {kind} of {column!r}, a column not declared under columns:, needs "
                       f"{field}: (e.g. {field}: {example}); {hint}{'d' if close else 'or d'}eclare {column} with "
                       "range: [LOW, HIGH] under columns:, whose range is then the default bounds")
                return False
    g = 1 if g is None else g
    if bounds is not None:
        low, high = bounds
        if low >= high:
            r.fail(at + ("measure", "bounds"), f"bounds [{low}, {high}] must increase: [L, U] with L < U")
            return False
        if low % g or high % g:
            r.fail(at + ("measure", "bounds"), f"bounds [{low}, {high}] must be multiples of the granularity "
                   f"{g}, so that clamped values stay on the grid")
            return False
    within = _within_range(r, at, kind, declared, bounds, g) if declared is not None else tuple(bounds)
    if within is None:
        return False
    low, high = within
    if kind == "sum":
        if body.get("missing") == "skip":
            r.fail(at + ("measure", "missing"), "missing: skip is for means (a skipped row adds 0 to a "
                   "sum): write missing: zero")
            return False
        return SumMeasure(column, low, high, g, body.get("missing") == "zero")
    share = defaults.SUM_SHARE
    if r.written(at + ("measure", "sum_share")):
        written = r.fraction(at + ("measure", "sum_share"), "sum_share")
        if written is None:
            return False
        if not written < 1:
            r.fail(at + ("measure", "sum_share"), "sum_share is the part of the table's budget spent on the "
                   "sum, strictly between 0 and 1 (the rest goes to the count); e.g. 0.5")
            return False
        share = written
    return MeanMeasure(column, low, high, g, body.get("missing", "error"), share)


def _within_range(r: Reader, at: Path_, kind: str, declared: RangeColumn, bounds: list[int] | None,
                  g: int) -> tuple[int, int] | None:
    """The bounds of a sum or mean of a declared range column: the range, widened to the grid
    of the granularity (its smallest grid interval holding every value), by default; written
    bounds are narrowed to that interval. The declared range says no value leaves it (values
    outside it are an error or dropped, as the column's ``on_out_of_domain`` says, before
    anything is summed), so clamping to the narrower bounds changes no value and only removes
    noise: a bound beyond the range would widen the sensitivity for nothing."""
    grid = (g * (declared.low // g), -g * (-declared.high // g))  # floor and ceiling onto the grid
    if -g * (-declared.low // g) >= g * (declared.high // g):  # fewer than two multiples of g within the range
        r.fail(at + ("measure", kind), f"{declared.name}'s declared range [{declared.low}, {declared.high}] holds "
               f"at most a single value on the grid of granularity {g}; its {kind} would measure nothing but noise: "
               f"choose a granularity finer than the range (e.g. 1), or publish a count")
        return None
    if bounds is None:
        return grid
    low, high = max(bounds[0], grid[0]), min(bounds[1], grid[1])
    if low >= high:
        r.fail(at + ("measure", "bounds"), f"bounds [{bounds[0]}, {bounds[1]}] leave no room within "
               f"{declared.name}'s declared range [{declared.low}, {declared.high}]: every value would be clamped "
               f"to one bound; write bounds within the range, or leave bounds out (the range is the default)")
        return None
    return low, high


def _where_declared(column: Column) -> str:
    return "geography:" if isinstance(column, RollupColumn) else "derived:" if isinstance(column, BinnedColumn) \
        else "columns:"
