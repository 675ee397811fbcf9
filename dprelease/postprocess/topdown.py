"""Consistent tables from a group's marginals, top-down, without the cross product of its dimensions.

One job: run the three steps for one consistency group whose tables form a junction tree
(:func:`junction_order`: each table meets the tables before it inside one of them, as
``sex × age``, ``sex × marital status`` and ``race × Hispanic origin`` do):

1. :func:`.gls.estimate` — the GLS estimate of every table at every level from every
   measurement (all levels, all tables, the invariants): consistent, real, maybe negative.
2. :mod:`.nonnegative` — from the root down, per level, in junction order: each table's cells
   are fitted, non-negative, to the sums already fixed — per child, its cells inside each cell
   of the table's *separator* (its dimensions shared with the tables before it) sum to that
   separator cell as the earlier table fixed it (the child's total for the first table); per
   parent, its children's cells sum to the parent's cell.
3. :mod:`.integral` — the same sums kept exactly in integers, each cell moved by under one.

So every published table is non-negative and integral, each parent's cells are the sums of its
children's, and two tables agree on every marginal they share, at every level. Structural cells
(known zeros) are no variables: they, and the cells they force to zero in the other tables
(:func:`forced_zeros`), are published as exact zeros. Memory and time grow with the published
cells: nothing of size ∏ of the group's domains is ever built.

Sees the noisy measurements and the declared invariants only; never the data readers.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dprelease.postprocess import gls
from dprelease.postprocess.integral import round_segments, round_two_way
from dprelease.postprocess.nonnegative import project_segments, project_two_way
from dprelease.spec.junction import Scope



def separator(order: list[tuple[int, int | None]], scopes: list[Scope], k: int) -> Scope:
    """The k-th table's dimensions shared with the tables before it, in increasing order."""
    t = order[k][0]
    before = set().union(*(set(scopes[s]) for s, _ in order[:k])) if k else set()
    return tuple(sorted(set(scopes[t]) & before))


def cell_map(scope: Scope, sub: Scope, sizes: tuple[int, ...]) -> np.ndarray:
    """For each cell of a table over ``scope`` (row-major, the table's order), its cell in the
    marginal over ``sub`` (increasing order)."""
    shape = tuple(sizes[i] for i in scope)
    coords = np.unravel_index(np.arange(math.prod(shape)), shape)
    if not sub:
        return np.zeros(math.prod(shape), dtype=np.int64)
    return np.ravel_multi_index([coords[scope.index(i)] for i in sub], tuple(sizes[i] for i in sub))


def forced_zeros(scopes: list[Scope], sizes: tuple[int, ...], masks: list[np.ndarray]) -> list[np.ndarray]:
    """Each table's cells that must be zero: its structural cells, and every cell whose share of
    the dimensions it has in common with another table falls where all that table's cells are
    structural (no detail cell behind it can hold anyone), to a fixed point."""
    masks = [m.copy() for m in masks]
    changed = True
    while changed:
        changed = False
        for a, b in itertools.combinations(range(len(scopes)), 2):
            common = tuple(sorted(set(scopes[a]) & set(scopes[b])))
            n_common = math.prod(sizes[i] for i in common)
            to_a, to_b = cell_map(scopes[a], common, sizes), cell_map(scopes[b], common, sizes)
            possible = (np.bincount(to_a, weights=~masks[a], minlength=n_common) > 0) & \
                       (np.bincount(to_b, weights=~masks[b], minlength=n_common) > 0)
            for t, to in ((a, to_a), (b, to_b)):
                forced = masks[t] | ~possible[to]
                if (forced != masks[t]).any():
                    masks[t], changed = forced, True
    return masks


def consistent_tables(tree: gls.Tree, sizes: tuple[int, ...], scopes: list[Scope],
                      measurements: list[gls.Measurement], zeros: list[np.ndarray],
                      order: list[tuple[int, int | None]], fixed_totals: dict[int, np.ndarray],
                      known: dict[int, np.ndarray] | None = None) -> list[list[np.ndarray]]:
    """Per table (as in ``scopes``), per level, its published integer cells (places × cells).

    ``zeros``: per table, the cells that are known zeros (:func:`forced_zeros`); ``known``: per
    measurement (its index), its known-zero cells, which the estimate holds at zero
    (:func:`.gls.estimate_with_zeros`: their published values are zeros, not noisy values).
    ``fixed_totals``: per level index, the places' exact totals (invariants), kept exactly.
    Assumes the measurements' noise as :func:`.gls.estimate` states; ``order`` from :func:`junction_order`.
    Guarantees: non-negative integers; each parent's cells the sums of its children's; tables
    agree on every shared marginal; the known zeros are zeros; the invariants hold exactly."""
    wanted = [(scopes[t], level) for t in range(len(scopes)) for level in range(len(tree.units))]
    estimates = gls.estimate_with_zeros(tree, sizes, measurements, known or {},
                                        wanted + [((), level) for level in range(len(tree.units))])
    out: list[list[np.ndarray]] = [[np.empty(0)] * len(tree.units) for _ in scopes]
    totals: list[np.ndarray] = []
    for level, places in enumerate(tree.units):
        parent = tree.parents[level]
        total_estimate = estimates[((), level)].ravel()
        if level in fixed_totals:
            total = fixed_totals[level].astype(np.int64)
        elif parent is None:
            total = round_segments(np.maximum(total_estimate, 0), np.zeros(places, dtype=np.int64),
                                   np.array([max(round(float(total_estimate.sum())), 0)]))
        else:
            seg = parent.astype(np.int64)
            total = round_segments(project_segments(total_estimate, seg, totals[-1].astype(np.float64)), seg, totals[-1])
        totals.append(total)
        for k, (t, host) in enumerate(order):
            sep = separator(order, scopes, k)
            to_sep = cell_map(scopes[t], sep, sizes)
            n_sep = math.prod(sizes[i] for i in sep)
            if host is None and not sep:
                sep_values = total.reshape(-1, 1)
            else:
                source = next(s for s, _ in order[:k] if set(sep) <= set(scopes[s]))
                sep_values = _marginal(out[source][level], cell_map(scopes[source], sep, sizes), n_sep)
            out[t][level] = _fit_level(estimates[(scopes[t], level)], zeros[t], to_sep, sep_values, parent,
                                       None if parent is None else out[t][level - 1])
    return out


def _marginal(values: np.ndarray, to: np.ndarray, n: int) -> np.ndarray:
    """Per place, the sums of ``values``' cells by their cell ``to`` (places × n)."""
    places = values.shape[0]
    out = np.zeros((places, n), dtype=values.dtype)
    np.add.at(out, (slice(None), to), values)
    return out


def _fit_level(estimate: np.ndarray, zeros: np.ndarray, to_sep: np.ndarray, sep_values: np.ndarray,
               parent: np.ndarray | None, parent_values: np.ndarray | None) -> np.ndarray:
    """One table at one level: non-negative integers, zero on ``zeros``, whose cells inside each
    separator cell sum to ``sep_values`` per place and (below the root) whose children sum to
    ``parent_values`` per parent."""
    places, cells = estimate.shape
    free = np.flatnonzero(~zeros)
    out = np.zeros((places, cells), dtype=np.int64)
    if free.size == 0:
        return out
    n_sep = sep_values.shape[1]
    values = estimate[:, free].ravel()
    place = np.repeat(np.arange(places), free.size)
    rows = place * n_sep + np.tile(to_sep[free], places)
    row_targets = sep_values.astype(np.float64).ravel()
    if parent is None:
        fitted = project_segments(values, rows, row_targets)
        out[:, free] = round_segments(fitted, rows, sep_values.ravel()).reshape(places, free.size)
        return out
    assert parent_values is not None
    cols = parent[place] * free.size + np.tile(np.arange(free.size), places)
    col_targets = parent_values[:, free].astype(np.float64).ravel()
    blocks = parent[place] * n_sep + np.tile(to_sep[free], places)  # a parent's cells inside one separator cell
    fitted = project_two_way(values, rows, row_targets, cols, col_targets, blocks)
    out[:, free] = round_two_way(fitted, rows, row_targets, cols, col_targets).reshape(places, free.size)
    return out
