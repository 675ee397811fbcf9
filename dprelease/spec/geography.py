"""The ``geography:`` and ``invariants:`` sections: nested levels whose domains follow from the
finest level's, and the levels whose place totals are published exactly.

```yaml
geography:
  levels: [STATE, PUMA]              # coarse to fine; the root (whole dataset) is implicit
  STATE: {from: PUMA, prefix: 2}     # or {from: PUMA, mapping_file: puma_to_state.csv}
```

A coarser level's domain is derived from the next finer level's *declared* domain: the
distinct prefixes (or mapped parents) in the order they first appear. Never from the data.
"""

from __future__ import annotations

import csv
from typing import Any

from dprelease.spec.model import ROOT, CategoricalColumn, Column, RollupColumn
from dprelease.spec.sections.reader import Reader


def parse_geography(r: Reader, declared: dict[str, Column]) -> tuple[tuple[str, ...], list[Column]]:
    """The levels (coarse to fine) and the rollup columns of the coarser ones."""
    body = r.get(("geography",), dict)
    if body is None:
        return (), []
    levels = r.get(("geography", "levels"), list)
    if levels is None or not all(isinstance(x, str) for x in levels):
        return (), []
    if len(set(levels)) != len(levels):
        r.fail(("geography", "levels"), "a level is listed twice")
        return (), []
    finest = levels[-1]
    if finest not in declared:
        r.fail(("geography", "levels"), f"the finest level {finest!r} must be a declared column")
        return (), []
    if not isinstance(declared[finest], CategoricalColumn) or declared[finest].missing is not None:
        r.fail(("geography", "levels"), f"the finest level {finest!r} must be a column with a domain and "
               "no missing category (every person has a place)")
        return (), []
    for key in body:
        if key != "levels" and key not in levels:
            r.fail(("geography", key), f"{key!r} is not one of the levels {levels}", at_key=True)
    rollups: dict[str, Column] = {finest: declared[finest]}
    for coarse, fine in reversed(list(zip(levels, levels[1:]))):
        column = _rollup(r, coarse, rollups[fine], declared)
        if column is None:
            return (), []
        rollups[coarse] = column
    return tuple(levels), [rollups[name] for name in levels[:-1]]


def _rollup(r: Reader, name: str, fine: Column, declared: dict[str, Column]) -> Column | None:
    at = ("geography", name)
    body: dict[str, Any] | None = r.get(at, dict)
    if body is None:
        r.fail(("geography", "levels"), f"level {name!r} needs a definition: {name}: {{from: {fine.name}, "
               "prefix: N} or {from: ..., mapping_file: FILE}")
        return None
    if name in declared:
        r.fail(at, f"{name!r} is also a declared column; a level's domain is derived, not declared",
               at_key=True)
        return None
    if body.get("from") != fine.name:
        r.fail(at + ("from",), f"level {name} must be derived from the next finer level, {fine.name}")
        return None
    children = fine.categories if not isinstance(fine, CategoricalColumn) else fine.values
    if ("prefix" in body) == ("mapping_file" in body):
        r.fail(at, "give exactly one of prefix: N or mapping_file: FILE", at_key=True)
        return None
    if "prefix" in body:
        width = r.get(at + ("prefix",), int)
        if width is None:
            return None
        parents_of = [c[:width] for c in children]
    else:
        parents_of = _mapping(r, at + ("mapping_file",), children)
        if parents_of is None:
            return None
    values = tuple(dict.fromkeys(parents_of))  # order of first appearance in the declared domain
    index = {v: i for i, v in enumerate(values)}
    return RollupColumn(name, fine.name, values, tuple(index[p] for p in parents_of),
                        mapping_file=r.get(at + ("mapping_file",), str))


def _mapping(r: Reader, path: tuple, children: tuple[str, ...]) -> list[str] | None:
    written = r.get(path, str)
    if written is None:
        return None
    file = r.base / written
    try:
        rows = list(csv.reader(file.read_text("utf-8-sig").splitlines()))
    except (OSError, UnicodeDecodeError) as exc:
        r.fail(path, f"cannot read mapping file {written!r}: {exc}")
        return None
    parent: dict[str, str] = {}
    for row in rows:
        if not row or row[0].startswith("#"):
            continue
        if len(row) != 2:
            r.fail(path, f"mapping file {written!r}: each line is child,parent; found {','.join(row)!r}")
            return None
        child, up = row[0].strip(), row[1].strip()
        if child in parent and parent[child] != up:
            r.fail(path, f"mapping file {written!r} gives {child!r} two parents")
            return None
        parent[child] = up
    unmapped = [c for c in children if c not in parent]
    if unmapped:
        r.fail(path, f"mapping file {written!r} gives no parent for {unmapped[0]!r} "
               f"({len(unmapped)} value(s) unmapped)")
        return None
    return [parent[c] for c in children]


def invariants(r: Reader, levels: tuple[str, ...]) -> tuple[str, ...]:
    """Levels whose place totals are published exactly, coarse to fine (the root first)."""
    totals = r.get(("invariants", "totals"), list)
    if totals is None:
        return ()
    known = (ROOT,) + levels
    for i, name in enumerate(totals):
        if isinstance(name, str) and name not in known:
            hint = (f"use {ROOT} or one of the geography levels {', '.join(levels)}" if levels else
                    f"without a geography: block only {ROOT} (the number of persons in the dataset) exists")
            r.fail(("invariants", "totals", i), f"{name!r} is not a geographic level: {hint}")
        elif isinstance(name, str) and name != ROOT:
            base = _place_column(r, name)
            if r.get(("columns", base, "geographic"), bool) is not True:
                r.fail(("invariants", "totals", i),
                       f"{name!r} is published exactly only if it is a place: its column {base!r} is not "
                       f"declared geographic. Invariants of a person's attribute (e.g. race) would publish "
                       f"its exact counts outside differential privacy; if {base} is a place, declare "
                       f"columns.{base}.geographic: true, else drop it from invariants.totals")
    return tuple(name for name in known if name in totals)


def _place_column(r: Reader, level: str) -> str:
    """The declared column a geography level is made from (itself, or its rollups' source)."""
    seen = set()
    while level not in seen:
        seen.add(level)
        source = r.get(("geography", level, "from"), str)
        if source is None:
            return level
        level = source
    return level
