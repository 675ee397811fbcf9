"""Census-style consistent post-processing (TopDown-like), a pure function of noisy measurements.

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
here only as post-processing of published noisy values; nothing reads the confidential data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.linalg
import scipy.sparse.csgraph
import scipy.sparse

from dprelease.arrays import rank_within
from dprelease.spec import ROOT, RollupColumn, Spec, Table


@dataclass(frozen=True)
class Level:
    name: str | None  # None: a group without geography (root only)
    units: int
    parent: np.ndarray | None  # per unit, its parent unit at the previous level (None at the root)


def discrete_laplace_variance(scale: Fraction) -> float:
    p = math.exp(-1 / float(scale))
    return 2 * p / (1 - p) ** 2


def noise_variance(mechanism: str, scale: Fraction) -> float:
    """The variance of a measurement's noise: the discrete Laplace's, or for the discrete
    Gaussian (``scale`` is then σ²) σ², which bounds the discrete Gaussian's from above."""
    return float(scale) if mechanism == "discrete_gaussian" else discrete_laplace_variance(scale)


def marginal_matrix(sizes: list[int], subset: list[int]) -> scipy.sparse.csr_matrix:
    """0/1 matrix mapping a detail histogram (row-major over ``sizes``) to the marginal on ``subset``."""
    d = math.prod(sizes)
    if not sizes:  # a group of tables with no dimension but geography: one cell per place
        return scipy.sparse.csr_matrix(np.ones((1, 1)))
    coords = np.unravel_index(np.arange(d), sizes)
    marginal_sizes = [sizes[i] for i in subset]
    rows = np.ravel_multi_index([coords[i] for i in subset], marginal_sizes) if subset else np.zeros(d, int)
    m = math.prod(marginal_sizes) if subset else 1
    return scipy.sparse.csr_matrix((np.ones(d), (rows, np.arange(d))), shape=(m, d))


def group_levels(spec: Spec, table: Table) -> list[Level]:
    if not table.levels:
        return [Level(None, 1, None)]
    levels = [Level(ROOT, 1, None)]
    for i, name in enumerate(spec.geography):
        units = spec.column(name).size
        if i == 0:
            parent = np.zeros(units, dtype=np.int64)
        else:
            up = spec.column(spec.geography[i - 1])
            assert isinstance(up, RollupColumn) and up.source == name
            parent = np.asarray(up.parent_of, dtype=np.int64)
        levels.append(Level(name, units, parent))
    return levels


def consistent_group(spec: Spec, tables: list[Table], noisy: dict[tuple[str, str | None], np.ndarray],
                     scales: dict[tuple[str, str | None], Fraction],
                     invariants: dict[str, np.ndarray] | None = None,
                     structural: dict[tuple[str, str | None], np.ndarray | None] | None = None
                     ) -> dict[tuple[str, str | None], np.ndarray]:
    """Published (non-negative, integer, consistent) values for every measurement of the group.

    ``structural``: per measurement, its structural cells (:mod:`dprelease.plan.structural`; the
    same cells of the non-geographic dimensions in every place and level). They are known zeros:
    every detail cell that falls in a structural cell of any table of the group is removed from
    the estimate, so structural cells are published as exact zeros and the rest stays
    consistent (their noisy values, which are zeros not drawn, are never read).

    ``invariants``: exact place totals per level (the root's as ``ROOT``), published outside
    DP; the caller passes them only for a group whose tables count every row (no ``where``).
    Each place's total then equals its invariant exactly.
    """
    invariants = invariants or {}
    mechanisms = {t.name: t.mechanism for t in spec.tables}
    variances = {key: noise_variance(mechanisms[key[0]], scale) for key, scale in scales.items()}
    dims = list(dict.fromkeys(c for t in tables for c in t.group_by))
    sizes = [spec.column(c).size for c in dims]
    marginals = {t.name: marginal_matrix(sizes, [dims.index(c) for c in t.group_by]) for t in tables}
    levels = group_levels(spec, tables[0])
    keep = _unstructural_detail(tables, marginals, structural or {}, levels[0].name)
    if keep is not None:  # structural cells are known zeros: the detail cells behind them are no variables
        if not keep.any():
            return {(t.name, level.name): np.zeros(level.units * marginals[t.name].shape[0], dtype=np.int64)
                    for level in levels for t in tables}
        marginals = {name: a[:, keep] for name, a in marginals.items()}
    d = math.prod(sizes) if keep is None else int(keep.sum())
    own = [_wls(tables, level, noisy, variances, marginals, d) for level in levels]
    variance = [1 / sum(1 / variances[(t.name, level.name)] for t in tables) for level in levels]
    combined, weights = _bottom_up(levels, own, variance)
    ms = [marginals[t.name] for t in tables]
    patterns = _patterns(levels, combined, ms)
    cells = _marginal_cells(ms)
    details: list[np.ndarray] = []
    for i, level in enumerate(levels):
        fixed = invariants.get(level.name or ROOT)
        if i == 0:
            total = int(fixed[0]) if fixed is not None else max(round(float(combined[0].sum())), 0)
            start = patterns[0].reshape(-1, 1)
            detail = _round_place(_project_columns(start, np.array([total])).ravel(), total, cells).reshape(1, -1)
        else:
            detail = _top_down(weights[i], details[-1], level.parent, patterns[i], ms, cells, fixed)
        details.append(detail)
    out: dict[tuple[str, str | None], np.ndarray] = {}
    for level, detail in zip(levels, details):
        for t in tables:
            out[(t.name, level.name)] = np.asarray(marginals[t.name] @ detail.T).T.astype(np.int64).reshape(-1)
    return out


def _unstructural_detail(tables: list[Table], marginals: dict, structural: dict,  # type: ignore[type-arg]
                         first_level: str | None) -> np.ndarray | None:
    """Detail cells outside every table's structural cells (None: no table has any)."""
    keep = None
    for t in tables:
        mask = structural.get((t.name, first_level))  # the root (or only) level: the group_by cells alone
        if mask is None or not mask.any():
            continue
        hit = np.asarray(marginals[t.name].T @ mask.astype(np.float64)).ravel() > 0
        keep = ~hit if keep is None else keep & ~hit
    return keep


def _patterns(levels: list[Level], combined: list[np.ndarray], marginals: list) -> list[np.ndarray]:  # type: ignore[type-arg]
    """Non-negative details per place with each place's fitted marginals, built bottom-up so
    that where the marginals say nothing a parent looks like the sum of its children."""
    patterns: list[np.ndarray] = [np.empty(0)] * len(levels)
    patterns[-1] = _max_entropy_detail(combined[-1], marginals)
    for i in range(len(levels) - 2, -1, -1):
        parent = levels[i + 1].parent
        assert parent is not None
        start = np.zeros_like(combined[i])
        np.add.at(start, parent, patterns[i + 1])
        patterns[i] = _max_entropy_detail(combined[i], marginals, start=start)
    return patterns


def _bottom_up(levels: list[Level], own: list[np.ndarray], variance: list[float]
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each place's estimate combined with the sum of its children's (inverse-variance weights),
    from the finest level up (Hay, Rastogi, Miklau and Suciu 2010). Returns the combined details
    and their variances per place."""
    combined = list(own)
    var = [np.full(level.units, v) for level, v in zip(levels, variance)]
    for i in range(len(levels) - 2, -1, -1):
        parent = levels[i + 1].parent
        assert parent is not None
        sums = np.zeros_like(own[i])
        np.add.at(sums, parent, combined[i + 1])
        sum_var = np.bincount(parent, weights=var[i + 1], minlength=levels[i].units)
        precision = 1 / variance[i] + 1 / sum_var
        combined[i] = (own[i] / variance[i] + sums / sum_var[:, None]) / precision[:, None]
        var[i] = 1 / precision
    return combined, var


def _wls(tables, level, noisy, variances, marginals, d) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Per unit, the unconstrained weighted least-squares detail (minimum norm where not identified)."""
    q = np.zeros((d, d))
    b = np.zeros((level.units, d))
    for t in tables:
        key = (t.name, level.name)
        w = 1 / variances[key]
        a = marginals[t.name]
        q += w * (a.T @ a).toarray()
        y = noisy[key].reshape(level.units, -1).astype(float)
        b += w * np.asarray((a.T @ y.T).T)
    return b @ scipy.linalg.pinvh(q)  # minimum-norm detail: unbiased fitted marginals


def _max_entropy_detail(fitted: np.ndarray, marginals: list, iterations: int = 60,  # type: ignore[type-arg]
                        start: np.ndarray | None = None) -> np.ndarray:
    """Per row, a non-negative detail with (approximately) the marginals of ``fitted``, by IPF
    from ``start`` (default uniform): the detail closest to ``start`` in relative entropy."""
    totals = np.maximum(fitted.sum(axis=1), 0)
    targets = []
    for a in marginals:
        m = np.maximum(np.asarray((a @ fitted.T).T), 0)
        scale = np.divide(totals, m.sum(axis=1), out=np.zeros_like(totals), where=m.sum(axis=1) > 0)
        targets.append(m * scale[:, None])  # the clipped marginals, on one common total
    if start is None:
        detail = np.repeat((totals / fitted.shape[1])[:, None], fitted.shape[1], axis=1)
    else:  # keep the start's pattern where the marginals say nothing; a little mass everywhere
        detail = start.astype(float) + 1e-6
    for _ in range(iterations):
        for a, target in zip(marginals, targets):
            current = np.asarray((a @ detail.T).T)
            ratio = np.divide(target, current, out=np.zeros_like(target), where=current > 0)
            detail *= np.asarray((a.T @ ratio.T).T)
    return detail


def _top_down(variance: np.ndarray, parents_detail: np.ndarray, parent: np.ndarray,
              pattern: np.ndarray, marginals: list, cells: list[np.ndarray],  # type: ignore[type-arg]
              fixed: np.ndarray | None = None) -> np.ndarray:
    """Children that add up, cell by cell, to their parents' (integer, non-negative) details.

    Each child starts from its bottom-up ``pattern`` (a non-negative detail with its combined
    marginals); the parent's residual, cell by cell, is spread over its children in proportion
    to their variances (the GLS solution on a tree). Then, per parent, a non-negative fit that
    keeps every parent cell and each child's marginals (``_fit_children``), and a controlled
    rounding that keeps every parent cell exactly and each child's marginals within a unit or
    so (``_round_children``). ``fixed``: the children's exact totals (invariants), kept exactly.
    (Sharing the residual in proportion to the children's values
    instead, or refitting the children after the split, measured worse on the NIST data; so
    did a plain projection per detail cell followed by a rounding that watched only each
    child's total: the sex-by-age table at PUMA level lost to clamping.)
    """
    n_parents = parents_detail.shape[0]
    sum_var = np.bincount(parent, weights=variance, minlength=n_parents)
    sums = np.zeros_like(parents_detail, dtype=float)
    np.add.at(sums, parent, pattern)
    detail = pattern + ((parents_detail - sums)[parent]) * (variance / sum_var[parent])[:, None]
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
        out[children] = _round_children(_fit_children(detail[children], target, marginals, rows), target, cells, rows)
    return out


def _marginal_cells(marginals: list) -> list[np.ndarray]:  # type: ignore[type-arg]
    """Per table, the marginal cell of every detail cell."""
    return [np.asarray(a.argmax(axis=0)).ravel() for a in marginals]


def _fit_children(values: np.ndarray, totals: np.ndarray, marginals: list,  # type: ignore[type-arg]
                  child_totals: np.ndarray | None = None, iterations: int = 50) -> np.ndarray:
    """Non-negative children whose detail columns sum exactly to ``totals`` (the parent's
    detail) and whose marginals stay near those of ``values`` (which may be negative).

    First each child's total is projected onto {τ ≥ 0, Στ = parent total} and, per table, the
    children's clipped marginals are fitted (IPF) to those totals and to the parent's
    marginal; the targets of all tables then agree on every child's total, which a plain
    clamp breaks (clipping the small cells of a 45-cell table adds persons the 6-cell table
    does not have). ``child_totals`` (invariants) replace the projected totals. Then IPF on
    the detail to those targets, ending on the parent's cells.
    """
    k, d = values.shape
    if child_totals is None:
        child_totals = _project_columns(values.sum(axis=1).reshape(-1, 1), np.array([float(totals.sum())])).ravel()
    child_totals = np.asarray(child_totals, dtype=float)
    targets = []
    for a in marginals:
        parent_marginal = np.asarray(a @ totals.astype(float)).ravel()
        start = np.maximum(np.asarray((a @ values.T).T), 0) + 1e-6
        start[:, parent_marginal <= 0] = 0
        targets.append(_ipf_2d(start, child_totals, parent_marginal))
    fitted = np.maximum(values, 0) + 1e-3
    fitted[:, totals <= 0] = 0
    for _ in range(iterations):
        for a, target in zip(marginals, targets):
            current = np.asarray((a @ fitted.T).T)
            ratio = np.divide(target, current, out=np.zeros_like(target), where=current > 0)
            fitted *= np.asarray((a.T @ ratio.T).T)
        sums = fitted.sum(axis=0)
        fitted *= np.divide(totals, sums, out=np.zeros(d), where=sums > 0)[None, :]
    return fitted


def _ipf_2d(start: np.ndarray, rows: np.ndarray, columns: np.ndarray, iterations: int = 100) -> np.ndarray:
    """``start`` (non-negative) scaled to the given row and column sums (equal grand totals)."""
    table = start.copy()
    for _ in range(iterations):
        r = table.sum(axis=1)
        table *= np.divide(rows, r, out=np.zeros_like(rows), where=r > 0)[:, None]
        c = table.sum(axis=0)
        table *= np.divide(columns, c, out=np.zeros_like(columns), where=c > 0)[None, :]
    return table


def _round_children(values: np.ndarray, totals: np.ndarray, cells: list[np.ndarray],
                    row_totals: np.ndarray | None = None) -> np.ndarray:
    """Integers whose columns sum exactly to ``totals`` and whose rows' marginals stay near
    those of ``values`` (non-negative, columns summing to ``totals``); with ``row_totals``
    (invariants), every row sums exactly to its total too.

    Controlled rounding: floors, then each column's remaining units go to the rows whose
    marginal cells (over every table of the group) are furthest below their fitted values;
    only cells with a fractional part round up, so each stays within 1 of its value. Rounding
    cells independently would let every marginal drift by the sum of its cells' errors. With
    row totals, a row that has its total takes no more units, and what the greedy pass could
    not place is placed by a maximum flow (rows → cells → columns), first through cells with
    a fractional part, then, if it must, through any cell.
    """
    floors = _floors(values, totals)
    need = None
    if row_totals is not None and int(np.sum(row_totals)) != int(np.round(totals).sum()):
        raise ValueError("the rows' totals do not add up to the columns' (inconsistent invariants)")
    if row_totals is not None:
        need = np.asarray(row_totals, dtype=np.int64) - floors.sum(axis=1)
        for c in np.flatnonzero(need < 0):  # float slack put a row above its total
            while need[c] < 0:
                floors[c, np.argmax(floors[c])] -= 1
                need[c] += 1
    fractions = values - floors
    remaining = np.asarray(np.round(totals), dtype=np.int64) - floors.sum(axis=0)
    deficits = [np.zeros((values.shape[0], c.max() + 1)) for c in cells]
    for deficit, c in zip(deficits, cells):
        np.add.at(deficit.T, c, fractions.T)
    for j in np.argsort(-remaining, kind="stable"):
        units = int(remaining[j])
        if units <= 0:
            break
        score = sum(deficit[:, c[j]] for deficit, c in zip(deficits, cells))
        blocked = fractions[:, j] <= 1e-9
        if need is not None:
            blocked = blocked | (need <= 0)
        order = np.lexsort((-fractions[:, j], -score, blocked))[:units]
        if need is not None:
            order = order[~blocked[order]]
            need[order] -= 1
        floors[order, j] += 1
        remaining[j] -= order.size
        for deficit, c in zip(deficits, cells):
            deficit[order, c[j]] -= 1
    if need is not None and remaining.any():
        open_cells = (fractions > 1e-9) & (floors == np.floor(values + 1e-9))
        for capacity in (open_cells.astype(np.int64), np.full(values.shape, int(remaining.sum()))):
            flow = _bipartite_flow(need, remaining, capacity)
            floors += flow
            need -= flow.sum(axis=1)
            remaining -= flow.sum(axis=0)
            if not remaining.any():
                break
    return floors


def _bipartite_flow(supply: np.ndarray, demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """An integral flow matrix (rows × columns) within ``capacity``, with row sums ≤ ``supply``
    and column sums ≤ ``demand``, as large as possible (maximum flow: source → rows → columns
    → sink; integral because every capacity is)."""
    m0, m1 = capacity.shape
    source, sink = 0, 1 + m0 + m1
    r, c = np.nonzero(capacity)
    graph = scipy.sparse.csr_matrix(
        (np.r_[np.maximum(supply, 0), capacity[r, c], np.maximum(demand, 0)].astype(np.int32),
         (np.r_[np.zeros(m0, int), 1 + r, 1 + m0 + np.arange(m1)],
          np.r_[1 + np.arange(m0), 1 + m0 + c, np.full(m1, sink)])), shape=(sink + 1, sink + 1))
    flow = scipy.sparse.csgraph.maximum_flow(graph, source, sink).flow
    out = np.zeros((m0, m1), dtype=np.int64)
    out[r, c] = np.asarray(flow[1 + r, 1 + m0 + c]).ravel()
    return out


def _floors(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Per column, floors that do not exceed the (integer) column total."""
    totals = np.asarray(np.round(totals), dtype=np.int64)
    floors = np.maximum(np.floor(values + 1e-9).astype(np.int64), 0)  # slack against 2.9999999 → 2
    remaining = totals - floors.sum(axis=0)
    while (remaining < 0).any():  # float slack overshot: take back from the largest cells
        cols = np.flatnonzero(remaining < 0)
        rows = np.argmax(floors[:, cols], axis=0)
        floors[rows, cols] -= 1
        remaining[cols] += 1
    return floors


def _round_place(values: np.ndarray, total: int, cells: list[np.ndarray]) -> np.ndarray:
    """Integers summing exactly to ``total`` whose marginals stay near those of ``values``
    (one place's non-negative detail summing to ``total``); every cell within 1 of its value.

    Floors, then the remaining units are apportioned (largest remainders) to the marginal
    cells of the group's first two tables, and a maximum flow (source → first table's
    marginal cells → cells with a fractional part → second table's marginal cells → sink)
    decides which cells take a unit, so both marginals land on their apportioned values when
    that is possible (it is a bipartite problem: flows are integral). Units the flow cannot
    place, and the choice among cells of one pair of marginal cells, go by largest fraction.
    A third table's marginals are not steered: they move by the sum of their cells' errors.
    """
    floors = np.maximum(np.floor(values + 1e-9).astype(np.int64), 0)  # slack against 2.9999999 → 2
    while floors.sum() > total:  # float slack overshot: take back from the largest cell
        floors[np.argmax(floors)] -= 1
    units = int(total - floors.sum())
    fractions = np.clip(values - floors, 0, 1)
    eligible = fractions > 1e-9
    if units == 0:
        return floors
    first, second = (cells + [np.zeros(values.size, dtype=np.int64)])[:2]
    m0, m1 = int(first.max()) + 1, int(second.max()) + 1
    row = np.bincount(first, weights=fractions, minlength=m0)
    column = np.bincount(second, weights=fractions, minlength=m1)
    pair = first * m1 + second
    capacity = np.bincount(pair[eligible], minlength=m0 * m1).reshape(m0, m1)
    through = _bipartite_flow(_apportion(row, units), _apportion(column, units), capacity).ravel()
    order = np.lexsort((-fractions, pair, ~eligible))  # per pair, largest fractions first
    take = order[eligible[order] & (rank_within(pair[order]) < through[pair[order]])]
    floors[take] += 1
    left = units - take.size
    if left > 0:
        eligible[take] = False
        rest = np.lexsort((-fractions, ~eligible))[:left]
        floors[rest] += 1
    return floors


def _apportion(weights: np.ndarray, units: int) -> np.ndarray:
    """Non-negative integers summing to ``units``, proportional to ``weights`` (largest remainders)."""
    weights = np.maximum(weights, 0)
    if weights.sum() <= 0:
        weights = np.ones_like(weights)
    quota = weights * (units / weights.sum())
    out = np.floor(quota).astype(np.int64)
    out[np.argsort(-(quota - out), kind="stable")[:units - out.sum()]] += 1
    return out


def _project_columns(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Each column j projected (Euclidean) onto the simplex {v ≥ 0, Σv = totals[j]}."""
    k = values.shape[0]
    ordered = -np.sort(-values, axis=0)
    excess = np.cumsum(ordered, axis=0) - totals[None, :]
    index = np.arange(1, k + 1)[:, None]
    active = ordered - excess / index > 0
    rho = k - 1 - np.argmax(active[::-1], axis=0)  # last row still active
    theta = excess[rho, np.arange(values.shape[1])] / (rho + 1)
    projected = np.maximum(values - theta[None, :], 0)
    projected[:, totals <= 0] = 0
    return projected
