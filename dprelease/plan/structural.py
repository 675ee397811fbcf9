"""Structural zeros: the cells a table's own definition makes impossible. A pure function of the
spec (never of the data), computed here once; the plan carries it (``TablePlan.structural``) and
every later stage reads it from there, or from the manifest.

A cell is *structural* when no row can land in it on any dataset the spec allows:

* the table's ``where`` excludes it: a condition on a grouped column (``SEX: {eq: 1}`` with
  ``group_by: [SEX]``: the other sex), or on the range column a grouped bin is made from
  (``AGEP: {ge: 18}`` with ``AGE_GROUP``'s bin [0, 18): every value of the bin is excluded; a
  bin only partly excluded is not structural). A missing value never satisfies a condition,
  so a ``where`` on a column makes its missing category structural;
* two grouped columns made from one column disagree (``AGEP`` 5 in ``AGE_GROUP`` 65+);
* the ``where`` and the spec's declared ``rules`` together exclude it (``AGE_GROUP`` 18+ ⇒
  ``AGEP`` ≥ 15 ⇒ ``MSP`` is not missing, by the rule "MSP is missing exactly when AGEP < 15"),
  or the rules exclude a combination of grouped columns (``MSP`` married with ``AGE_GROUP``
  0-14, were there such a bin).

The reasoning keeps, per *base* column (a declared column; a bin or a geographic rollup has its
source's base), the set of codes a row of the table may hold. Conditions narrow these sets;
a rule "premises ⇒ conclusions" narrows its conclusions' columns once every premise holds for
every possible value, and (contrapositive) narrows a premise's column to where it fails once a
conclusion holds for no possible value and the other premises hold for all. Sets only shrink,
so this ends. Combinations of grouped columns that rules speak of are examined one by one (the
combination assumed, then the same reasoning; up to ``SPLIT_LIMIT`` per measurement). It is
sound: every possible row keeps its values in the sets, so a cell outside them is empty on
every allowed dataset. It is not complete (a rule is used only once its premises are certain
for a column, or a conclusion impossible); what it cannot decide is simply not structural. Cells merely empty in the data are never
structural: that would publish something about the data.

Places of a geographic level are never marked structural (a ``where`` on the geography would
leave whole places empty; the consistent estimate treats every place alike), only the cells
of its other dimensions.

Privacy: a structural cell is 0 on every dataset the spec allows, including every neighbour of
the dataset released (the rules are checked on the data before anything is spent, like the
declared domains), so it carries no information: publishing it as an exact 0 costs nothing, and
leaving it unmeasured changes neither the sensitivity nor the ε of the measured cells (the
histogram's L1 distance between neighbours is over the measured cells alone).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from dprelease.spec.conditions import holds
from dprelease.spec import ROOT, BinnedColumn, Column, Condition, RangeColumn, RollupColumn, Spec

Key = tuple[str, "str | None"]  # (table, level)
SPLIT_LIMIT = 1024  # combinations of rule-bound grouped columns examined one by one, per measurement
MAX_CODES = 10**7  # a base column with more codes is not reasoned about (nothing of it is structural)


def measurement_masks(spec: Spec) -> dict[Key, np.ndarray | None]:
    """Per (table, level), the structural cells as a boolean mask over the full declared cross
    product of the measurement's dimensions (row-major), or None when no cell is structural."""
    out: dict[Key, np.ndarray | None] = {}
    for table in spec.tables:
        feasible = feasible_values(spec, table.where)
        for level, dims, _ in table.measured():
            out[(table.name, level)] = structural_mask(spec, dims, level, feasible, table.where)
    return out


def structural_mask(spec: Spec, dims: tuple[str, ...], level: str | None, feasible: dict[str, np.ndarray],
                    where: tuple[Condition, ...] = ()) -> np.ndarray | None:
    """The structural cells of one measurement over ``dims`` (see the module docstring)."""
    geographic = level is not None and level != ROOT  # its first dimension is the level: places stay
    own = dims[1:] if geographic else dims
    sizes = [spec.column(d).size for d in own]
    cells = prod(sizes)
    if any(not f.any() for f in feasible.values()):  # no row can satisfy the where: every cell
        mask = np.ones(cells, dtype=bool)
    else:
        masks = [m for m in (_impossible(spec, own, sizes, feasible),
                             _rule_combinations(spec, where, own, sizes, feasible)) if m is not None]
        if not masks:
            return None
        mask = masks[0] if len(masks) == 1 else masks[0] | masks[1]
    if geographic:
        mask = np.tile(mask, spec.column(dims[0]).size)
    return mask


def _impossible(spec: Spec, dims: tuple[str, ...], sizes: list[int],
                feasible: dict[str, np.ndarray]) -> np.ndarray | None:
    names: dict[str, list[int]] = {}
    for i, name in enumerate(dims):
        names.setdefault(base_name(spec, name), []).append(i)
    groups = {base: [(i, base_of(spec, dims[i])[1]) for i in members] for base, members in names.items()
              if (base in feasible or len(members) > 1) and spec.column(base).size <= MAX_CODES}
    possible: np.ndarray | None = None
    for base, members in groups.items():
        f = feasible.get(base)
        values = np.flatnonzero(f) if f is not None else np.arange(members[0][1].size)
        shape = [sizes[i] for i, _ in members]
        sub = np.zeros(shape, dtype=bool)
        sub[tuple(mapping[values] for _, mapping in members)] = True
        if sub.all():
            continue
        full = [1] * len(dims)
        for i, _ in members:
            full[i] = sizes[i]
        sub = sub.reshape(full)  # members are in increasing position: inserting unit axes keeps the order
        possible = sub if possible is None else possible & sub
    if possible is None:
        return None
    return ~np.broadcast_to(possible, sizes).reshape(-1)


def base_name(spec: Spec, name: str) -> str:
    """The declared column ``name`` is made from (itself, unless a bin or a rollup)."""
    column = spec.column(name)
    return base_name(spec, column.source) if isinstance(column, (BinnedColumn, RollupColumn)) else name


def base_of(spec: Spec, name: str) -> tuple[str, np.ndarray]:
    """The declared column ``name`` is made from, and per code of it the code of ``name``."""
    column = spec.column(name)
    match column:
        case BinnedColumn():
            source = spec.column(column.source)
            assert isinstance(source, RangeColumn)
            table = np.searchsorted(np.asarray(column.edges), np.arange(source.low, source.high + 1), side="right") - 1
            if source.missing is not None:
                table = np.append(table, column.size - 1)
            return source.name, table
        case RollupColumn():
            base, inner = base_of(spec, column.source)
            return base, np.asarray(column.parent_of, dtype=np.int64)[inner]
    return name, np.arange(column.size)


def satisfies(column: Column, condition: Condition) -> np.ndarray:
    """Per code of ``column`` (its values, then its missing category), whether a row with that
    code satisfies ``condition``: the data layer's row filter, on every possible code."""
    return holds(column, condition, np.arange(column.size))


def feasible_values(spec: Spec, where: tuple[Condition, ...],
                    start: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Per base column, the codes a row satisfying ``where`` (and every rule) may hold: an
    over-approximation (sound). Base columns not listed may hold any code. ``start``: codes
    already known (a cell's own values)."""
    feasible: dict[str, np.ndarray] = {k: v.copy() for k, v in (start or {}).items()}

    def restrict(base: str, allowed: np.ndarray) -> bool:
        current = feasible.get(base)
        narrowed = allowed.copy() if current is None else current & allowed
        feasible[base] = narrowed
        return current is None and not narrowed.all() or current is not None and not np.array_equal(current, narrowed)

    def values(base: str, size: int) -> np.ndarray:
        return feasible.get(base, np.ones(size, dtype=bool))

    for condition in where:
        if _reasoned(spec, condition):
            restrict(*_on_base(spec, condition))
    implications = _implications(spec)
    changed = bool(implications)
    while changed:
        changed = False
        for premises, conclusions in implications:
            certain = [not (values(b, m.size) & ~m).any() for b, m in premises]
            if all(certain):
                for b, m in conclusions:
                    changed |= restrict(b, m)
            if any(not (values(b, m.size) & m).any() for b, m in conclusions):
                open_ = [p for p, sure in zip(premises, certain) if not sure]
                if len(open_) == 1:
                    b, m = open_[0]
                    changed |= restrict(b, ~m)
    return feasible


def _on_base(spec: Spec, condition: Condition) -> tuple[str, np.ndarray]:
    base, mapping = base_of(spec, condition.column)
    return base, satisfies(spec.column(condition.column), condition)[mapping]


def _implications(spec: Spec) -> list[tuple[tuple[tuple[str, np.ndarray], ...], tuple[tuple[str, np.ndarray], ...]]]:
    return [(tuple(_on_base(spec, c) for c in p), tuple(_on_base(spec, c) for c in q))
            for r in spec.rules for p, q in r.implications() if all(_reasoned(spec, c) for c in p + q)]


def _reasoned(spec: Spec, condition: Condition) -> bool:
    """Whether ``condition``'s column is small enough to reason about (ignoring a condition or a
    rule only marks fewer cells structural: sound)."""
    return spec.column(base_name(spec, condition.column)).size <= MAX_CODES


def _rule_combinations(spec: Spec, where: tuple[Condition, ...], dims: tuple[str, ...], sizes: list[int],
                       feasible: dict[str, np.ndarray]) -> np.ndarray | None:
    """Combinations of the grouped columns the rules speak of that no row can hold, found by
    assuming each combination in turn and reasoning as :func:`feasible_values` does (this finds
    what one column at a time cannot: "AGEP < 15 ⇔ MSP missing" with both MSP and AGE_GROUP
    grouped). Up to :data:`SPLIT_LIMIT` combinations; beyond, nothing more is marked."""
    if not spec.rules:
        return None
    ruled = {base_name(spec, c.column) for r in spec.rules for c in r.if_ + r.then if _reasoned(spec, c)}
    split = [i for i, d in enumerate(dims) if base_name(spec, d) in ruled]
    shape = [sizes[i] for i in split]
    if not split or prod(shape) > SPLIT_LIMIT:
        return None
    maps = [base_of(spec, dims[i]) for i in split]
    impossible = np.zeros(shape, dtype=bool)
    for combination in np.ndindex(*shape):
        start = dict(feasible)
        for (base, mapping), code in zip(maps, combination):
            start[base] = start.get(base, np.ones(mapping.size, dtype=bool)) & (mapping == code)
        impossible[combination] = any(not f.any() for f in feasible_values(spec, where, start).values())
    if not impossible.any():
        return None
    full = [1] * len(dims)
    for i in split:
        full[i] = sizes[i]
    return np.broadcast_to(impossible.reshape(full), sizes).reshape(-1)


def describe(spec: Spec, dims: tuple[str, ...], mask: np.ndarray) -> list[str]:
    """The structural cells in words: per dimension, the categories all of whose cells are
    structural (``AGE_GROUP = 0-17``), then how many other cells are (combinations)."""
    sizes = [spec.column(d).size for d in dims]
    cube = mask.reshape(sizes)
    covered = np.zeros(sizes, dtype=bool)
    parts = []
    for axis, name in enumerate(dims):
        whole = cube.all(axis=tuple(i for i in range(len(dims)) if i != axis))
        if whole.any() and not whole.all():
            categories = spec.column(name).categories
            shown = [categories[i] for i in np.flatnonzero(whole)]
            parts.append(f"{name} = {' | '.join(shown[:8])}" + (f" (+{len(shown) - 8} more)" if len(shown) > 8 else ""))
            index: list[Any] = [slice(None)] * len(dims)
            index[axis] = whole
            covered[tuple(index)] = True
    if cube.all():
        return ["every cell (no row can satisfy the table's where)"]
    rest = int((cube & ~covered).sum())
    if rest:
        parts.append(f"{rest} other cell{'s' if rest != 1 else ''} (combinations)")
    return parts


def cell_labels(spec: Spec, dims: tuple[str, ...], cells: np.ndarray) -> list[list[str]]:
    """The published categories of each cell index (row-major over ``dims``)."""
    sizes = [spec.column(d).size for d in dims]
    coords = np.unravel_index(np.asarray(cells, dtype=np.int64), sizes) if sizes else ()
    categories = [spec.column(d).categories for d in dims]
    return [[categories[j][int(coords[j][k])] for j in range(len(dims))] for k in range(len(cells))]
