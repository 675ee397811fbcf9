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
   parent, its children's cells sum to the parent's cell. Below the root each (parent,
   separator cell) is a block of its own, fitted exactly and on its own, in worker processes
   when the level is large (:mod:`.parents`, :mod:`.transport`).
3. :mod:`.integral` — the same sums kept exactly in integers, each cell moved by under one.

So every published table is non-negative and integral, each parent's cells are the sums of its
children's, and two tables agree on every marginal they share, at every level. Structural cells
(known zeros) are no variables: they, and the cells they force to zero in the other tables
(:func:`forced_zeros`), are published as exact zeros. Memory and time grow with the published
cells: nothing of size ∏ of the group's domains is ever built. Streamed (:func:`consistent_levels`):
step 1 comes a level at a time (:func:`.gls.estimate_levels`), steps 2 and 3 follow it, and each
table level is handed on once final, so about two levels are held at a time, not the group.

Sees the noisy measurements and the declared invariants only; never the data readers.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Iterator

import numpy as np

from dprelease.postprocess import gls
from dprelease.postprocess.integral import round_segments
from dprelease.postprocess.nonnegative import project_segments
from dprelease.postprocess.parents import FitStats, Workers, fit_level
from dprelease.postprocess import transport
from dprelease.postprocess.transport import FitWarning
from dprelease.spec.junction import Scope

__all__ = ["FitWarning", "consistent_levels", "consistent_tables", "forced_zeros", "separator"]



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
                      known: dict[int, np.ndarray] | None = None, timings: dict[str, float] | None = None,
                      workers: Workers | int | None = None) -> list[list[np.ndarray]]:
    """Per table (as in ``scopes``), per level, its published integer cells (places × cells):
    :func:`consistent_levels`, every level at once."""
    out: list[list[np.ndarray]] = [[np.empty(0)] * len(tree.units) for _ in scopes]
    for t, level, values in consistent_levels(tree, sizes, scopes, measurements, zeros, order, fixed_totals, known,
                                              timings, workers):
        out[t][level] = values
    return out


def consistent_levels(tree: gls.Tree, sizes: tuple[int, ...], scopes: list[Scope],
                      measurements: list[gls.Measurement], zeros: list[np.ndarray],
                      order: list[tuple[int, int | None]], fixed_totals: dict[int, np.ndarray],
                      known: dict[int, np.ndarray] | None = None, timings: dict[str, float] | None = None,
                      workers: Workers | int | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """(table as in ``scopes``, level, its published integer cells: places × cells), each as soon
    as it is final, level by level from the root (in junction order within a level).

    ``zeros``: per table, the cells that are known zeros (:func:`forced_zeros`); ``known``: per
    measurement (its index), its known-zero cells, which the estimate holds at zero
    (:func:`.gls.estimate_levels_with_zeros`: their published values are zeros, not noisy values).
    ``fixed_totals``: per level index, the places' exact totals (invariants), kept exactly.
    Assumes the measurements' noise as :func:`.gls.estimate` states; ``order`` from :func:`junction_order`.
    Guarantees: non-negative integers; each parent's cells the sums of its children's; tables
    agree on every shared marginal; the known zeros are zeros; the invariants hold exactly.
    A block whose fit reached its iteration cap is reported as a :class:`FitWarning` (once the
    last level is done).

    Streaming: the estimate comes a level at a time (:func:`.gls.estimate_levels`), and a level's
    estimates and integers are dropped once the next level is fitted, so besides the
    measurements this holds about two levels (a census's last level is nearly all its cells:
    its estimates, its integers, one residual; a consumer that writes each yielded table out
    and drops it holds no more). ``timings`` (if given) gains the seconds of the estimate
    (``postprocess_estimate``) and of the fit (``postprocess_fit``: non-negative and integers;
    the consumer's time between levels is in neither); ``workers``: where the fit of large
    levels runs (:class:`.parents.Workers`; an int: that many local processes, default one per
    CPU; 1: all in this process)."""
    timings = {} if timings is None else timings
    depth = len(tree.units)
    wanted = [(scopes[t], level) for level in range(depth) for t in range(len(scopes))]
    wanted += [((), level) for level in range(depth)]
    start = time.perf_counter()
    levels = gls.estimate_levels_with_zeros(tree, sizes, measurements, known or {}, wanted)
    _add(timings, "postprocess_estimate", start)
    pool = workers if isinstance(workers, Workers) else Workers(workers)
    stats = FitStats()
    try:
        above: list[np.ndarray] = []  # the previous level's integers, per table
        totals: np.ndarray | None = None
        for level in range(depth):
            start = time.perf_counter()
            found_level, estimates = next(levels)
            _add(timings, "postprocess_estimate", start)
            assert found_level == level
            start = time.perf_counter()
            totals = _level_totals(tree, level, estimates.pop(()), fixed_totals, totals)
            here: list[np.ndarray] = [np.empty(0)] * len(scopes)
            for k, (t, host) in enumerate(order):
                estimate = estimates[scopes[t]]
                if all(scopes[later] != scopes[t] for later, _ in order[k + 1:]):
                    del estimates[scopes[t]]  # its last use: dropped once fitted
                here[t], fitted = _fit_table(tree, sizes, scopes, order, k, level, estimate, zeros[t], totals, here,
                                             above, pool)
                del estimate
                stats = stats + fitted
                _add(timings, "postprocess_fit", start)
                yield t, level, here[t]
                start = time.perf_counter()
            above = here
            del estimates
    finally:
        if not isinstance(workers, Workers):
            pool.close()
        levels.close()
    if stats.unconverged:
        warnings.warn(FitWarning(f"the top-down fit reached its cap of {transport.MAX_ITERATIONS} Newton iterations in "
                                 f"{stats.unconverged} of {stats.blocks} blocks: their integers keep every sum "
                                 "exactly but are not from the exact nearest non-negative point"), stacklevel=2)


def _add(timings: dict[str, float], key: str, start: float) -> None:
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - start


def _level_totals(tree: gls.Tree, level: int, estimate: np.ndarray, fixed_totals: dict[int, np.ndarray],
                  above: np.ndarray | None) -> np.ndarray:
    """The places' integer totals at ``level``: the invariants where declared, else the
    estimate's, non-negative and summing to the parents' (the root's: its rounded estimate)."""
    parent = tree.parents[level]
    total_estimate = estimate.ravel()
    if level in fixed_totals:
        return fixed_totals[level].astype(np.int64)
    if parent is None or above is None:
        return round_segments(np.maximum(total_estimate, 0), np.zeros(tree.units[level], dtype=np.int64),
                              np.array([max(round(float(total_estimate.sum())), 0)]))
    seg = parent.astype(np.int64)
    return round_segments(project_segments(total_estimate, seg, above.astype(np.float64)), seg, above)


def _fit_table(tree: gls.Tree, sizes: tuple[int, ...], scopes: list[Scope], order: list[tuple[int, int | None]],
               k: int, level: int, estimate: np.ndarray, zeros: np.ndarray, total: np.ndarray,
               here: list[np.ndarray], above: list[np.ndarray], workers: Workers) -> tuple[np.ndarray, FitStats]:
    """The ``k``-th table of ``order`` at ``level``: its cells inside each separator cell sum to
    the separator's values (from the tables fitted before it at this level; the places' totals
    for the first), and below the root its children's cells to its parent's."""
    t, host = order[k]
    sep = separator(order, scopes, k)
    to_sep = cell_map(scopes[t], sep, sizes)
    n_sep = math.prod(sizes[i] for i in sep)
    if host is None and not sep:
        sep_values = total.reshape(-1, 1)
    else:
        source = next(s for s, _ in order[:k] if set(sep) <= set(scopes[s]))
        sep_values = _marginal(here[source], cell_map(scopes[source], sep, sizes), n_sep)
    parent = tree.parents[level]
    if parent is None:
        return _fit_root(estimate, zeros, to_sep, sep_values), FitStats()
    return fit_level(estimate, zeros, to_sep, sep_values, parent, above[t], workers)


def _marginal(values: np.ndarray, to: np.ndarray, n: int) -> np.ndarray:
    """Per place, the sums of ``values``' cells by their cell ``to`` (places × n), a slice of
    places at a time (no permuted copy of a whole level)."""
    order = np.argsort(to, kind="stable")  # every one of the n cells has cells (a marginal's map is onto)
    starts = np.searchsorted(to[order], np.arange(n))
    out = np.empty((values.shape[0], n), dtype=values.dtype)
    for start in range(0, values.shape[0], gls.STEP_PLACES):
        end = start + gls.STEP_PLACES
        out[start:end] = np.add.reduceat(values[start:end][:, order], starts, axis=1)
    return out


def _fit_root(estimate: np.ndarray, zeros: np.ndarray, to_sep: np.ndarray, sep_values: np.ndarray) -> np.ndarray:
    """One table at a level without parents: non-negative integers, zero on ``zeros``, whose
    cells inside each separator cell sum to ``sep_values`` per place (one simplex each)."""
    places, cells = estimate.shape
    free = np.flatnonzero(~zeros)
    out = np.zeros((places, cells), dtype=np.int64)
    if free.size == 0:
        return out
    n_sep = sep_values.shape[1]
    values = estimate[:, free].ravel()
    rows = np.repeat(np.arange(places), free.size) * n_sep + np.tile(to_sep[free], places)
    fitted = project_segments(values, rows, sep_values.astype(np.float64).ravel())
    out[:, free] = round_segments(fitted, rows, sep_values.ravel()).reshape(places, free.size)
    return out
