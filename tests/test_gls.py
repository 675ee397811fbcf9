"""Consistent post-processing from the tables' own cells (issue 21): the estimate is the exact
generalised least-squares one (checked against the dense normal equations), the non-negative fit
is the nearest point with the sums (checked against a general solver), the rounding keeps the
sums exactly, any group — a junction tree or not — comes out non-negative, integral and
consistent, and nothing of the size of the group's cross product is built."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dprelease.postprocess import gls
from dprelease.postprocess.integral import round_two_way
from dprelease.postprocess.nonnegative import SUM_TOLERANCE
from dprelease.postprocess.transport import fit_blocks
from dprelease.postprocess.topdown import consistent_tables, forced_zeros
from dprelease.spec.junction import cliques, fitting_scopes, junction_order
from tests.projection import exact_projection

SIZES = (2, 3, 2, 4)
UNITS = (1, 3, 7)
PARENTS = (None, np.zeros(3, dtype=np.int64), np.array([0, 0, 1, 1, 1, 2, 2]))


def _sum_to(level: int, details: np.ndarray) -> np.ndarray:
    """Leaf details (leaves × d) summed to the places of ``level``."""
    for lv in range(len(UNITS) - 1, level, -1):
        up = np.zeros((UNITS[lv - 1], details.shape[1]))
        np.add.at(up, PARENTS[lv], details)
        details = up
    return details


def _marginal(details: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    cube = details.reshape((details.shape[0], *SIZES))
    summed = cube.sum(axis=tuple(1 + i for i in range(len(SIZES)) if i not in dims))
    kept = [i for i in range(len(SIZES)) if i in dims]
    return np.transpose(summed, (0, *(1 + kept.index(i) for i in dims))).reshape(details.shape[0], -1)


def _measurements(rng, tables, skip=(), exact_levels=()):  # type: ignore[no-untyped-def]
    leaves = rng.integers(0, 20, size=(UNITS[-1], math.prod(SIZES))).astype(float)  # test data, not noise
    out = []
    for t, dims in enumerate(tables):
        for level in range(len(UNITS)):
            if (t, level) in skip:
                continue
            v = float(rng.uniform(0.5, 5))
            truth = _marginal(_sum_to(level, leaves), dims)
            out.append(gls.Measurement(dims, level, truth + rng.normal(0, math.sqrt(v), truth.shape), v))
    for level in exact_levels:
        out.append(gls.Measurement((), level, _sum_to(level, leaves).sum(axis=1, keepdims=True), 0.0))
    return out


def _dense_gls(measurements, zeros=None):  # type: ignore[no-untyped-def]
    """The GLS fit of every measured table, from the normal equations over the leaves' details
    (exact measurements, and ``zeros``: known-zero cells per measurement index, as very heavy ones)."""
    d = math.prod(SIZES)
    blocks, ys, ws = [], [], []
    for i, m in enumerate(measurements):
        design = np.kron(_places_matrix(m.level), _marginal(np.eye(d), m.dims).T)
        blocks.append(design)
        weight = np.full(m.values.shape, 1e10 if m.variance == 0 else 1 / m.variance)
        values = np.array(m.values, dtype=float)
        if zeros and i in zeros:
            weight[:, zeros[i]], values[:, zeros[i]] = 1e10, 0.0
        ys.append(values.ravel())
        ws.append(weight.ravel())
    x, y, w = np.vstack(blocks), np.concatenate(ys), np.sqrt(np.concatenate(ws))
    theta = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)[0]
    return {(m.dims, m.level): (np.kron(_places_matrix(m.level), _marginal(np.eye(d), m.dims).T) @ theta)
            .reshape(UNITS[m.level], -1) for m in measurements}


def _places_matrix(level: int) -> np.ndarray:
    """(places at ``level``) × leaves: 1 where the leaf lies in the place."""
    return _sum_to(level, np.eye(UNITS[-1]))


TREE = gls.Tree(UNITS, PARENTS)
TABLES = [(0, 1), (2, 1), (3,), (1, 0, 3)]  # overlapping, one in another order than the group's


@pytest.mark.parametrize("case", ["every level", "a table missing at a level", "invariants"])
def test_the_estimate_is_the_dense_generalised_least_squares_one(case):
    rng = np.random.default_rng(1)  # test data and test noise (not a release's)
    skip = [(2, 1)] if case == "a table missing at a level" else []
    exact = [0, 1] if case == "invariants" else []
    measurements = _measurements(rng, TABLES, skip, exact)
    ours = gls.estimate(TREE, SIZES, measurements)
    dense = _dense_gls(measurements)
    worst = max(np.abs(ours[key] - dense[key]).max() for key in dense)
    assert worst < (1e-4 if exact else 1e-8), worst
    for level in range(len(UNITS)):  # consistent: every table's total the same, children add up
        totals = [ours[(dims, level)].sum(axis=1) for dims in TABLES if (dims, level) in ours]
        assert all(np.allclose(t, totals[0]) for t in totals)
    every = gls.estimate(TREE, SIZES, measurements, [(dims, level) for dims in TABLES for level in range(3)])
    for dims in TABLES:  # wanted where not measured too: still the sum of its children
        assert np.allclose(_sum_children(every[(dims, 2)]), every[(dims, 1)])


def test_known_zeros_are_held_at_zero_by_the_constrained_generalised_least_squares():
    """Structural cells are exact zeros (no noise drawn): the estimate is the GLS one under the
    constraint that they are zero, not one that reads them as noisy zeros; the other cells move
    only as that constraint implies (checked against the dense constrained normal equations)."""
    rng = np.random.default_rng(4)  # test data and test noise
    measurements = _measurements(rng, TABLES)
    structural = np.zeros(6, dtype=bool)
    structural[[4, 5]] = True  # table (0, 1): cells (1, 1) and (1, 2)
    zeros = {i: structural for i, m in enumerate(measurements) if m.dims == (0, 1)}
    for i in zeros:
        measurements[i].values[:, structural] = 0
    ours = gls.estimate_with_zeros(TREE, SIZES, measurements, zeros)
    dense = _dense_gls(measurements, zeros)
    assert max(np.abs(ours[key] - dense[key]).max() for key in dense) < 1e-4
    assert all(np.abs(ours[((0, 1), level)][:, structural]).max() < 1e-6 for level in range(3))
    plain = gls.estimate(TREE, SIZES, measurements)  # reading them as noisy zeros is another estimate
    assert np.abs(plain[((0, 1), 2)][:, structural]).max() > 0.1


def _sum_children(values: np.ndarray) -> np.ndarray:
    out = np.zeros((UNITS[1], values.shape[1]))
    np.add.at(out, PARENTS[2], values)
    return out


def test_the_non_negative_fit_is_the_nearest_point_with_both_sums():
    rng = np.random.default_rng(3)  # test data
    for _ in range(5):
        r, c = 5, 4
        target = rng.normal(1.5, 3, size=(r, c))
        row_sums = rng.integers(0, 9, size=r).astype(float)
        col_sums = np.zeros(c)
        col_sums[:] = np.bincount(rng.integers(0, c, size=int(row_sums.sum())), minlength=c)
        rows, cols = np.repeat(np.arange(r), c), np.tile(np.arange(c), r)
        ours = fit_blocks(target[None], row_sums[None], col_sums[None]).x[0].ravel()  # one block: every cell
        assert ours.min() >= 0 and np.allclose(np.bincount(rows, ours), row_sums, rtol=0, atol=SUM_TOLERANCE)
        assert np.allclose(np.bincount(cols, ours, minlength=c), col_sums)
        # the reference: the exact nearest point, certified in Fractions (no optimiser's convergence)
        exact = exact_projection(target, row_sums, col_sums, ours.reshape(r, c) > 0).ravel()
        assert ((ours - target.ravel()) ** 2).sum() <= ((exact - target.ravel()) ** 2).sum() + 1e-3
        assert np.abs(ours - exact).max() < 1e-6


def test_rounding_with_sums_a_fit_left_inexact_still_meets_them():
    values = np.array([0.4, 0.4, 0.4, 1.7, 0.3, 0.3])  # rows of 3: sums 1.2 and 2.3, asked 1 and 3
    rows, cols = np.array([0, 0, 0, 1, 1, 1]), np.array([0, 1, 2, 0, 1, 2])
    out = round_two_way(values, rows, np.array([1.0, 3.0]), cols, np.array([2.0, 1.0, 1.0]))
    assert out.min() >= 0 and np.bincount(rows, out).tolist() == [1, 3] and np.bincount(cols, out).tolist() == [2, 1, 1]


def test_a_junction_tree_needs_no_hidden_table_and_a_cycle_gets_one():
    sizes = (2, 3, 4, 5, 6)
    tree_like = [(0, 1), (1, 2), (3, 4), (1, 3)]  # sex×age, age×marital, race×hisp, age×race
    every, order = fitting_scopes(tree_like, sizes)
    assert every == tree_like and junction_order(tree_like, sizes) is not None
    _running_intersection(every, order)
    cycle = [(0, 1), (1, 2), (2, 0)]
    assert junction_order(cycle, sizes) is None
    every, order = fitting_scopes(cycle, sizes)
    assert every[3:] == [(0, 1, 2)] and cliques(cycle, sizes) == [(0, 1, 2)]
    _running_intersection(every, order)


def _running_intersection(scopes, order):  # type: ignore[no-untyped-def]
    for k, (t, host) in enumerate(order):
        before = set().union(*(set(scopes[s]) for s, _ in order[:k])) if k else set()
        shared = set(scopes[t]) & before
        assert host is None and k == 0 or shared <= set(scopes[host]), (t, host, shared)


def test_zeros_forced_through_a_shared_dimension():
    sizes = (2, 3)
    masks = [np.array([False, False, False, False, False, True]).reshape(-1), np.zeros(3, dtype=bool)]
    # table 0 over (0, 1): its cells (1, 2) structural; table 1 over (1,): no cell forced (row 0 can hold it)
    assert forced_zeros([(0, 1), (1,)], sizes, masks)[1].tolist() == [False, False, False]
    masks[0] = np.array([False, False, True, False, False, True])  # column 2 structural for every row
    assert forced_zeros([(0, 1), (1,)], sizes, masks)[1].tolist() == [False, False, True]


@pytest.mark.parametrize("tables", [TABLES, [(0, 1), (1, 2), (2, 0)], [(0,), (3,)]], ids=["tree", "cycle", "apart"])
def test_any_group_comes_out_non_negative_integral_and_consistent(tables):
    rng = np.random.default_rng(5)  # test data and test noise (not a release's)
    measurements = _measurements(rng, [tuple(t) for t in tables])
    scopes, order = fitting_scopes([tuple(t) for t in tables], SIZES)
    zeros = forced_zeros(scopes, SIZES, [np.zeros(math.prod(SIZES[d] for d in s), dtype=bool) for s in scopes])
    out = consistent_tables(TREE, SIZES, scopes, measurements, zeros, order, {})
    for k, dims in enumerate(scopes):
        for level in range(len(UNITS)):
            assert out[k][level].dtype == np.int64 and out[k][level].min() >= 0
            if level:
                parents = np.zeros((UNITS[level - 1], out[k][level].shape[1]), dtype=np.int64)
                np.add.at(parents, PARENTS[level], out[k][level])
                assert np.array_equal(parents, out[k][level - 1])
    for a, b in itertools.combinations(range(len(scopes)), 2):
        shared = tuple(sorted(set(scopes[a]) & set(scopes[b])))
        for level in range(len(UNITS)):
            assert np.array_equal(_project(out[a][level], scopes[a], shared), _project(out[b][level], scopes[b], shared))


def _project(values: np.ndarray, dims: tuple[int, ...], onto: tuple[int, ...]) -> np.ndarray:
    cube = values.reshape((values.shape[0], *(SIZES[d] for d in dims)))
    summed = cube.sum(axis=tuple(1 + k for k, d in enumerate(dims) if d not in onto))
    kept = [d for d in dims if d in onto]
    return np.transpose(summed, (0, *(1 + kept.index(d) for d in onto))).reshape(values.shape[0], -1)


def test_a_group_of_many_dimensions_never_builds_their_cross_product():
    """Ten dimensions of 10 categories (10^10 detail cells per place) in a chain of tables: the
    estimate and the fit use memory of the order of the tables' own cells."""
    import tracemalloc

    sizes = (10,) * 10
    tables = [(i, i + 1) for i in range(9)]
    units, parents = (1, 4), (None, np.zeros(4, dtype=np.int64))
    rng = np.random.default_rng(9)  # test noise
    measurements = [gls.Measurement(t, level, rng.normal(50, 5, size=(units[level], 100)), 4.0)
                    for t in tables for level in range(2)]
    scopes, order = fitting_scopes(tables, sizes)
    zeros = forced_zeros(scopes, sizes, [np.zeros(100, dtype=bool) for _ in scopes])
    tracemalloc.start()
    out = consistent_tables(gls.Tree(units, parents), sizes, scopes, measurements, zeros, order, {})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert scopes == tables and peak < 50 * 2**20, peak  # a detail would be 80 GB a place
    assert all(o[1].sum() == o[0].sum() for o in out)
