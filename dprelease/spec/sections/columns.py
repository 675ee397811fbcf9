"""The ``columns:``, ``derived:`` and ``rules:`` sections: the declared columns and their
domains, the columns binned from them, the public rules every row obeys, and the conditions
(``where:``, ``if:``, ``then:``) that name their values."""

from __future__ import annotations

import difflib
from itertools import pairwise
from typing import Any

from dprelease.spec.model import (
    BinnedColumn,
    CategoricalColumn,
    Column,
    Condition,
    RangeColumn,
    RollupColumn,
    Rule,
)
from dprelease.spec.sections.reader import INT, Reader
from dprelease.spec.yamlsource import Path_

_MAX_DOMAIN_FILE_BYTES = 256 * 1024 * 1024


def declared_columns(r: Reader, na_values: tuple[str, ...]) -> tuple[list[Column], frozenset[str]]:
    """The columns declared under ``columns:``, and the names of those whose declaration has problems."""
    out: list[Column] = []
    broken: set[str] = set()
    for name, body in r.get(("columns",), dict, {}).items():
        column = _column(r, name, body, na_values) if isinstance(body, dict) else None
        if column is None:
            broken.add(name)
        else:
            out.append(column)
    return out, frozenset(broken)


def _column(r: Reader, name: str, body: dict[str, Any], na_values: tuple[str, ...]) -> Column | None:
    at: Path_ = ("columns", name)
    kinds = [k for k in ("domain", "domain_file", "range") if k in body]
    if len(kinds) != 1:
        r.fail(at, "declare exactly one of domain: [...], domain_file: PATH or range: [LOW, HIGH]"
               + (f" (found {', '.join(kinds)})" if kinds else ""), at_key=True)
        return None
    missing = r.get(at + ("missing",), str)
    on_ood = r.get(at + ("on_out_of_domain",), str, "error")
    if kinds[0] == "range":
        return _range_column(r, at, name, body, missing, on_ood)
    values = r.texts(at + ("domain",)) if kinds[0] == "domain" else _domain_file(r, at + ("domain_file",))
    if values is None:
        return None
    labels = r.texts(at + ("labels",)) if "labels" in body else None
    if not r.distinct(at + (kinds[0],), values, "domain value"):
        return None
    if labels is not None:
        if len(labels) != len(values):
            r.fail(at + ("labels",), f"{len(labels)} labels for {len(values)} domain values; "
                   "give one label per value")
            return None
        if not r.distinct(at + ("labels",), labels, "label"):
            return None
    if missing is not None and missing in (labels or values):
        r.fail(at + ("missing",), f"the missing category's label {missing!r} is also a value; "
               "choose a distinct label")
        return None
    clash = [v for v in values if v in na_values]
    if clash:
        r.fail(at + (kinds[0],), f"{clash[0]!r} is both a domain value of {name} and listed in "
               "dataset.na_values (so it would read as missing); remove it from one of them")
        return None
    return CategoricalColumn(name, tuple(values), tuple(labels) if labels else None, missing,
                             on_ood, r.get(at + ("domain_file",), str))


def _range_column(r: Reader, at: Path_, name: str, body: dict[str, Any], missing: str | None,
                  on_ood: str) -> Column | None:
    if "labels" in body:
        r.fail(at + ("labels",), "range columns take no labels; bin them with derived: instead")
    bounds = r.int_list(at + ("range",))
    if bounds is None or len(bounds) != 2:
        return None
    if bounds[0] > bounds[1]:
        r.fail(at + ("range",), f"range [{bounds[0]}, {bounds[1]}] is empty; write [LOW, HIGH]")
        return None
    column = RangeColumn(name, bounds[0], bounds[1], missing, on_ood)  # type: ignore[arg-type]
    if missing is not None and missing in column.categories[:-1]:
        r.fail(at + ("missing",), f"the missing category's label {missing!r} is also a value of the "
               "range; choose a distinct label")
        return None
    return column


def _domain_file(r: Reader, path: Path_) -> list[str] | None:
    """A domain file's values, one per line (relative to the spec file); None if unreadable (reported)."""
    written = r.get(path, str)
    if written is None:
        return None
    if "\0" in written:
        r.fail(path, "contains a NUL byte")
        return None
    file = r.base / written
    try:
        if file.exists() and not file.is_file():  # a directory, a device (/dev/zero) or a FIFO: never read
            r.fail(path, f"domain file {written!r} is not a regular file")
            return None
        if file.stat().st_size > _MAX_DOMAIN_FILE_BYTES:
            r.fail(path, f"{written} is larger than 256 MiB")
            return None
        lines = file.read_text("utf-8-sig").splitlines()
    except FileNotFoundError:
        r.fail(path, f"domain file {written!r} not found (looked in {r.base.resolve()}); paths are "
               "relative to the spec file")
        return None
    except (OSError, UnicodeDecodeError) as exc:
        r.fail(path, f"cannot read domain file {written!r}: {exc}")
        return None
    values = [s.strip() for s in lines if s.strip() and not s.lstrip().startswith("#")]
    if not values:
        r.fail(path, f"domain file {written!r} lists no values (one value per line)")
        return None
    seen: set[str] = set()
    for v in values:
        if v in seen:
            r.fail(path, f"domain file {written!r} lists {v!r} twice; each value must appear once")
            return None
        seen.add(v)
    return values


def derived_columns(r: Reader, declared: dict[str, Column],
                    broken: frozenset[str]) -> tuple[list[Column], frozenset[str]]:
    """The columns binned from declared range columns, and ``broken`` plus the derived columns
    that have problems."""
    out: list[Column] = []
    failed = set(broken)
    for name, body in r.get(("derived",), dict, {}).items():
        at: Path_ = ("derived", name)
        failed.add(name)  # until it proves good
        if not isinstance(body, dict):
            continue
        if name in declared:
            r.fail(at, f"{name!r} is already a declared column; choose another name", at_key=True)
            continue
        source_name = r.get(at + ("from",), str)
        source = declared.get(source_name) if source_name else None
        if source_name is not None and source is None:
            if source_name not in failed:
                r.fail(at + ("from",), f"column {source_name!r} is not declared under columns:")
            continue
        if source is not None and not isinstance(source, RangeColumn):
            r.fail(at + ("from",), f"bins need a range column; {source_name!r} declares a domain")
            continue
        edges = r.int_list(at + ("bins",))
        if edges is None or source is None:
            continue
        column = _bins(r, at, name, source, edges)
        if column is not None:
            out.append(column)
            failed.discard(name)
    return out, frozenset(failed)


def _bins(r: Reader, at: Path_, name: str, source: RangeColumn, edges: list[int]) -> Column | None:
    if len(edges) < 2:
        r.fail(at + ("bins",), f"bins need at least two edges (one bin), e.g. [{source.low}, {source.high + 1}]")
        return None
    if any(b <= a for a, b in pairwise(edges)):
        r.fail(at + ("bins",), f"bins {edges} must increase strictly")
        return None
    if edges[0] > source.low or edges[-1] < source.high + 1:
        r.fail(at + ("bins",), f"bins [{edges[0]}, {edges[-1]}) leave part of {source.name}'s range "
               f"[{source.low}, {source.high}] uncovered; bins are half-open, so start at "
               f"{source.low} or below and end at {source.high + 1} or above")
        return None
    if "labels" in r.get(at, dict, {}):
        labels = r.texts(at + ("labels",))
        if labels is None:
            return None
        if len(labels) != len(edges) - 1:
            r.fail(at + ("labels",), f"{len(labels)} labels for {len(edges) - 1} bins; give one "
                   "label per bin")
            return None
        if not r.distinct(at + ("labels",), labels, "label"):
            return None
    else:
        labels = [f"{a}-{b - 1}" for a, b in pairwise(edges)]
    if source.missing is not None and source.missing in labels:
        r.fail(at + ("labels",), f"label {source.missing!r} is also the missing category inherited from "
               f"{source.name}; choose a distinct label")
        return None
    return BinnedColumn(name, source.name, tuple(edges), tuple(labels), source.missing)


def unknown_column(name: str, columns: dict[str, Column]) -> str:
    """The message for a column that is not declared, with the closest declared name if any."""
    hint = difflib.get_close_matches(name, list(columns), n=1)
    fix = f"did you mean {hint[0]!r}?" if hint else "declare it under columns: or derived:"
    return f"column {name!r} is not declared; {fix}"


def declared_rules(r: Reader, columns: dict[str, Column], broken: frozenset[str]) -> list[Rule]:
    """Declared public facts about every row: ``if`` conditions ⇒ ``then`` conditions."""
    out: list[Rule] = []
    names: dict[str, int] = {}
    for i, body in enumerate(r.get(("rules",), list, [])):
        if not isinstance(body, dict):
            continue
        at: Path_ = ("rules", i)
        name, repeated = r.unique_name(at, names)
        if repeated:
            name = None
        premises = _rule_conditions(r, at + ("if",), columns, broken)
        conclusions = _rule_conditions(r, at + ("then",), columns, broken)
        if name is None or premises is None or conclusions is None:
            continue
        if set(premises) == set(conclusions):
            r.fail(at + ("then",), "then repeats if: the rule says nothing; state what the if conditions "
                   "imply about another column")
            continue
        out.append(Rule(name, tuple(premises), tuple(conclusions), r.get(at + ("both_ways",), bool, False),
                        r.get(at + ("description",), str)))
    return out


def _rule_conditions(r: Reader, at: Path_, columns: dict[str, Column],
                     broken: frozenset[str]) -> list[Condition] | None:
    """A rule's side: like a where, plus ``missing: true|false`` on a column with a missing category."""
    body = r.get(at, dict)
    if body is None:
        return None  # the schema reported it
    out: list[Condition] = []
    ok = True
    for name, comparison in body.items():
        if not isinstance(comparison, dict):
            ok = False
            continue
        if name not in columns:
            if name not in broken:
                r.fail(at + (name,), unknown_column(name, columns), at_key=True)
            ok = False
            continue
        column = columns[name]
        if isinstance(column, RollupColumn):
            r.fail(at + (name,), f"{name} is a coarser geographic level; a rule names declared or derived "
                   f"columns: state it on {column.source} instead", at_key=True)
            ok = False
            continue
        for op, value in comparison.items():
            if op == "missing":
                if not isinstance(value, bool):
                    ok = False  # the schema reported it
                elif column.missing is None:
                    r.fail(at + (name, op), f"{name} declares no missing: category, so its values are never "
                           "missing; remove this condition, or declare missing: LABEL on the column")
                    ok = False
                else:
                    out.append(Condition(name, "missing" if value else "present", ()))
                continue
            condition = parse_condition(r, at + (name, op), column, op)
            if condition is None:
                ok = False
            else:
                out.append(condition)
    return out if ok else None


def parse_condition(r: Reader, path: Path_, column: Column, op: str) -> Condition | None:
    """One comparison of a declared column with declared values; None if invalid (reported)."""
    if op not in ("eq", "ne", "in", "not_in", "ge", "gt", "le", "lt"):
        return None  # the schema reported it
    if op in ("ge", "gt", "le", "lt") and not isinstance(column, RangeColumn):
        r.fail(path, f"{op} compares numbers; {column.name!r} is not a range column, use in: [...]")
        return None
    texts = r.texts(path) if op in ("in", "not_in") else [r.text(path) or ""]
    if texts is None:
        return None
    operands: list[str | int] = []
    for k, text in enumerate(texts):
        where = path + (k,) if op in ("in", "not_in") else path
        value = _operand(r, where, column, text)
        if value is None:
            return None
        operands.append(value)
    return Condition(column.name, op, tuple(operands))  # type: ignore[arg-type]


def _operand(r: Reader, path: Path_, column: Column, text: str) -> str | int | None:
    match column:
        case RangeColumn(low=low, high=high):
            if not INT.fullmatch(text.strip()) or not low <= int(text) <= high:
                r.fail(path, f"{text!r} is not a value of {column.name} (whole numbers {low} to {high})")
                return None
            return int(text)
        case CategoricalColumn(values=values) | BinnedColumn(labels=values):
            if text not in values:
                shown = ", ".join(values[:12]) + (" ..." if len(values) > 12 else "")
                r.fail(path, f"{text!r} is not a declared value of {column.name} ({shown})")
                return None
            return text
    raise AssertionError(column)  # pragma: no cover
