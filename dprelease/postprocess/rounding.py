"""Rounding: integer tables that keep a consistency group's parent cells and invariants exact.

One job: from non-negative (fractional) details of :mod:`.fitting`, integers such that every
parent's detail cell is exactly the sum of its children's (:func:`round_children`), the root's
detail sums exactly to its total (:func:`round_place`), and each place's total is exactly its
invariant where the caller passes one. Cells stay within a unit of their values where they
can, and each table's marginals move by little more (controlled rounding, steered by a
maximum flow).

May import numpy, scipy and :mod:`dprelease.arrays`; never the data readers
(:mod:`dprelease.data`): it sees fitted estimates and declared invariants only.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from dprelease.arrays import rank_within

# Float slack (in persons) of the fitted values: a value within this of an integer above it is
# floored to that integer (2.9999999 → 3, not 2), and a fractional part no larger than it is no
# fraction (the cell takes no unit). It bounds the float error the fits may leave in a cell.
FLOAT_SLACK = 1e-9


def marginal_cells(marginals: list) -> list[np.ndarray]:  # type: ignore[type-arg]
    """Per table, the marginal cell of every detail cell."""
    return [np.asarray(a.argmax(axis=0)).ravel() for a in marginals]


def round_children(values: np.ndarray, totals: np.ndarray, cells: list[np.ndarray],
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
        blocked = fractions[:, j] <= FLOAT_SLACK
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
        open_cells = (fractions > FLOAT_SLACK) & (floors == np.floor(values + FLOAT_SLACK))
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
    floors = np.maximum(np.floor(values + FLOAT_SLACK).astype(np.int64), 0)
    remaining = totals - floors.sum(axis=0)
    while (remaining < 0).any():  # float slack overshot: take back from the largest cells
        cols = np.flatnonzero(remaining < 0)
        rows = np.argmax(floors[:, cols], axis=0)
        floors[rows, cols] -= 1
        remaining[cols] += 1
    return floors


def round_place(values: np.ndarray, total: int, cells: list[np.ndarray]) -> np.ndarray:
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
    floors = np.maximum(np.floor(values + FLOAT_SLACK).astype(np.int64), 0)
    while floors.sum() > total:  # float slack overshot: take back from the largest cell
        floors[np.argmax(floors)] -= 1
    units = int(total - floors.sum())
    fractions = np.clip(values - floors, 0, 1)
    eligible = fractions > FLOAT_SLACK
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
