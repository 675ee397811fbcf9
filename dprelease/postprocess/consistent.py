"""Census-style consistent post-processing (TopDown-like) of noisy measurements and invariants.

One job: run the three steps below for one consistency group, level by level; each step is
its own module (:mod:`.estimation`, :mod:`.fitting`, :mod:`.rounding`). It may import those,
:mod:`.invariants` and :mod:`dprelease.spec`; never the data readers (:mod:`dprelease.data`).

For a consistency group (tables that are marginals of one detailed histogram: the cross
product of the union of their dimensions), at every geographic level:

(a) Weighted least squares. Per place, the detail x minimising Σ_t w_t‖A_t x − y_t‖², with
    A_t the marginalisation onto table t and w_t = 1/Var(noise of t at that level). The
    fitted marginals A_t x are unique even where the detail is not (tables that share few
    dimensions leave most of it unidentified); the combining below works on the unbiased
    minimum-norm details, and before step (b) each place's detail is replaced by the one that
    iterative proportional fitting reaches from a uniform start with the same (clipped)
    marginals (the maximum-entropy detail), which is non-negative, so (b) barely moves it.
    Each place's estimate is first combined, bottom-up, with the sum of its children's
    (inverse-variance weights), so a parent learns from its children's measurements; then,
    top-down from the root, within each parent the children are constrained to sum, cell by
    cell, to the parent's estimate, the residual spread in proportion to their variances
    (the generalised least-squares solution on a tree, Hay et al. 2010).
(b) Non-negativity that keeps each parent's cells: per parent, the children's totals are
    projected onto {τ ≥ 0, Στ = parent total}, each table's children marginals are fitted
    to those totals and to the parent's marginal (so all tables agree on every child's
    total), and the children's details are fitted (IPF) to those marginals while summing,
    cell by cell, to the parent's detail. (A plain projection per detail cell moved the
    children's marginals: on the NIST data it cost the 6-cell table a tenth of its accuracy.)
(c) Controlled rounding: per parent and detail cell, floors plus the remaining units to the
    children whose marginal cells (in every table) are furthest below their fitted values,
    so the children sum exactly to the (integer) parent cell and each child's marginals move
    by little more than a unit. The root's detail is rounded the same way to its total.

Every published table is then a marginal of one non-negative integer detail per place: PUMA
cells sum to their STATE cell, and tables agree on every marginal they share. Floats appear
here only as post-processing of published noisy values. What it sees of the confidential data
is the declared invariants (exact totals published outside DP, :class:`.invariants.Invariants`)
when the caller passes them, and nothing else.
"""

from __future__ import annotations

import math

import numpy as np

from dprelease.postprocess.estimation import (
    group_levels,
    least_squares,
    marginal_matrix,
    spread_to_children,
    unstructural_detail,
)
from dprelease.postprocess.fitting import fit_children, patterns, project_columns
from dprelease.postprocess import gls
from dprelease.postprocess.invariants import Invariants
from dprelease.postprocess.topdown import consistent_tables, forced_zeros, junction_order
from dprelease.postprocess.rounding import marginal_cells, round_children, round_place
from dprelease.spec import ROOT, Spec, Table


def consistent_group(spec: Spec, tables: list[Table], noisy: dict[tuple[str, str | None], np.ndarray],
                     variances: dict[tuple[str, str | None], float],
                     invariants: Invariants | None = None,
                     structural: dict[tuple[str, str | None], np.ndarray | None] | None = None
                     ) -> dict[tuple[str, str | None], np.ndarray]:
    """Published (non-negative, integer, consistent) values for every measurement of the group.

    ``structural``: per measurement, its structural cells (:mod:`dprelease.plan.structural`; the
    same cells of the non-geographic dimensions in every place and level). They are known zeros:
    every detail cell that falls in a structural cell of any table of the group is removed from
    the estimate, so structural cells are published as exact zeros and the rest stays
    consistent (their noisy values, which are zeros not drawn, are never read).

    ``invariants``: exact place totals per level (the root's as ``ROOT``), published outside
    DP and checked against the spec by the caller, who passes them only for a group whose
    tables count every row (no ``where``). Each place's total then equals its invariant exactly.
    They are the only values of the confidential data this sees; all else is noisy.
    """
    dims = list(dict.fromkeys(c for t in tables for c in t.group_by))
    sizes = [spec.column(c).size for c in dims]
    levels = group_levels(spec, tables[0])
    scopes = [tuple(dims.index(c) for c in t.group_by) for t in tables]
    order = junction_order(scopes, tuple(sizes))
    if order is not None:
        return _from_marginals(tables, levels, scopes, tuple(sizes), order, noisy, variances, invariants,
                               structural or {})
    marginals = {t.name: marginal_matrix(sizes, [dims.index(c) for c in t.group_by]) for t in tables}
    keep = unstructural_detail(tables, marginals, structural or {}, levels[0].name)
    if keep is not None:  # structural cells are known zeros: the detail cells behind them are no variables
        if not keep.any():
            return {(t.name, level.name): np.zeros(level.units * marginals[t.name].shape[0], dtype=np.int64)
                    for level in levels for t in tables}
        marginals = {name: a[:, keep] for name, a in marginals.items()}
    d = math.prod(sizes) if keep is None else int(keep.sum())
    combined, weights = least_squares(tables, levels, noisy, variances, marginals, d)
    ms = [marginals[t.name] for t in tables]
    starts = patterns(levels, combined, ms)
    cells = marginal_cells(ms)
    details: list[np.ndarray] = []
    for i, level in enumerate(levels):
        fixed = None if invariants is None else invariants.get(level.name or ROOT)
        if i == 0:
            total = int(fixed[0]) if fixed is not None else max(round(float(combined[0].sum())), 0)
            start = starts[0].reshape(-1, 1)
            detail = round_place(project_columns(start, np.array([total])).ravel(), total, cells).reshape(1, -1)
        else:
            detail = _top_down(weights[i], details[-1], level.parent, starts[i], ms, cells, fixed)
        details.append(detail)
    out: dict[tuple[str, str | None], np.ndarray] = {}
    for level, detail in zip(levels, details):
        for t in tables:
            out[(t.name, level.name)] = np.asarray(marginals[t.name] @ detail.T).T.astype(np.int64).reshape(-1)
    return out


def _from_marginals(tables: list[Table], levels: list, scopes: list[tuple[int, ...]],  # type: ignore[type-arg]
                    sizes: tuple[int, ...], order: list[tuple[int, int | None]],
                    noisy: dict[tuple[str, str | None], np.ndarray], variances: dict[tuple[str, str | None], float],
                    invariants: Invariants | None, structural: dict[tuple[str, str | None], np.ndarray | None]
                    ) -> dict[tuple[str, str | None], np.ndarray]:
    """A group whose tables form a junction tree: :mod:`.topdown`, from the tables' own cells."""
    index = {level.name: i for i, level in enumerate(levels)}
    tree = gls.Tree(tuple(level.units for level in levels), tuple(level.parent for level in levels))
    measurements = []
    for t, scope in zip(tables, scopes):
        for name, _, _ in t.measured():
            i = index[name]
            measurements.append(gls.Measurement(scope, i, noisy[(t.name, name)].reshape(tree.units[i], -1),
                                                variances[(t.name, name)]))
    fixed: dict[int, np.ndarray] = {}
    for name, i in index.items():
        exact = None if invariants is None else invariants.get(name or ROOT)
        if exact is not None:
            fixed[i] = np.asarray(exact, dtype=np.int64).reshape(-1)
            measurements.append(gls.Measurement((), i, fixed[i].reshape(-1, 1).astype(np.float64), 0.0))
    masks = []
    for t, scope in zip(tables, scopes):
        cells = math.prod(sizes[d] for d in scope)
        mask = structural.get((t.name, levels[0].name))
        masks.append(np.zeros(cells, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(-1)[:cells])
    published = consistent_tables(tree, sizes, scopes, measurements, forced_zeros(scopes, sizes, masks), order, fixed)
    return {(t.name, name): published[k][index[name]].reshape(-1)
            for k, t in enumerate(tables) for name, _, _ in t.measured()}


def _top_down(variance: np.ndarray, parents_detail: np.ndarray, parent: np.ndarray,
              pattern: np.ndarray, marginals: list, cells: list[np.ndarray],  # type: ignore[type-arg]
              fixed: np.ndarray | None = None) -> np.ndarray:
    """Children that add up, cell by cell, to their parents' (integer, non-negative) details.

    Each child starts from its bottom-up ``pattern`` (a non-negative detail with its combined
    marginals); the parent's residual, cell by cell, is spread over its children in proportion
    to their variances (the GLS solution on a tree). Then, per parent, a non-negative fit that
    keeps every parent cell and each child's marginals (:func:`.fitting.fit_children`), and a
    controlled rounding that keeps every parent cell exactly and each child's marginals within a
    unit or so (:func:`.rounding.round_children`). ``fixed``: the children's exact totals (invariants), kept exactly.
    (Sharing the residual in proportion to the children's values
    instead, or refitting the children after the split, measured worse on the NIST data; so
    did a plain projection per detail cell followed by a rounding that watched only each
    child's total: the sex-by-age table at PUMA level lost to clamping.)
    """
    n_parents = parents_detail.shape[0]
    detail = spread_to_children(variance, parents_detail, parent, pattern)
    out = np.empty(pattern.shape, dtype=np.int64)
    order = np.argsort(parent, kind="stable")
    bounds = np.searchsorted(parent[order], np.arange(n_parents + 1))
    for p in range(n_parents):
        children = order[bounds[p]:bounds[p + 1]]
        if children.size == 1:  # an only child is its parent
            out[children] = parents_detail[p]
            continue
        target = parents_detail[p]
        rows = None if fixed is None else fixed[children]
        out[children] = round_children(fit_children(detail[children], target, marginals, rows), target, cells, rows)
    return out

