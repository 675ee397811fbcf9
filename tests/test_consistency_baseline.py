"""The benchmark's baseline (benchmarks/consistency_baseline.py): independent TopDown + inverse
variance, on small hierarchies with answers worked out by hand. Benchmark code: no data read."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from consistency_baseline import (  # noqa: E402
    inverse_variance,
    largest_remainder,
    project_simplex,
    topdown_iv,
)


def test_inverse_variance_weights_each_estimate_by_its_precision():
    # y = 10 (variance 1), s = 20 (variance 4): (10/1 + 20/4) / (1 + 1/4) = 15/1.25 = 12, variance 1/1.25 = 0.8
    z, v = inverse_variance(np.array([10.0]), 1.0, np.array([20.0]), 4.0)
    assert z[0] == pytest.approx(12.0)
    assert v == pytest.approx(0.8)


def test_projection_onto_the_simplex_euclidean():
    # (3, 1, -2) onto {x >= 0, sum = 2}: λ = -1, (3 - 1, max(0, 1 - 1), max(0, -2 - 1)) = (2, 0, 0)
    x = project_simplex(np.array([[3.0], [1.0], [-2.0]]), np.array([2.0]))
    assert x[:, 0] == pytest.approx([2.0, 0.0, 0.0])
    # (1, 2, 3) onto sum 9: no clipping, the residual 3 shared equally: (2, 3, 4)
    x = project_simplex(np.array([[1.0], [2.0], [3.0]]), np.array([9.0]))
    assert x[:, 0] == pytest.approx([2.0, 3.0, 4.0])
    # (5, 5, -1) onto sum 6: (2, 2, 0) leaves sum 4 wrong; the answer is (3, 3, 0): λ = -2, third clipped
    x = project_simplex(np.array([[5.0], [5.0], [-1.0]]), np.array([6.0]))
    assert x[:, 0] == pytest.approx([3.0, 3.0, 0.0])


def test_projection_weighted_by_variances_spreads_the_residual_in_proportion():
    # (1, 1) onto sum 5 with variances (1, 3): residual 3 split 1:3 -> (1.75, 3.25) (Hay et al.'s top-down step)
    x = project_simplex(np.array([[1.0], [1.0]]), np.array([5.0]), np.array([1.0, 3.0]))
    assert x[:, 0] == pytest.approx([1.75, 3.25])
    # clipping: (4, 0) onto sum 1 with variances (1, 3): λ = -3 -> (1, max(0, -9)) = (1, 0)
    x = project_simplex(np.array([[4.0], [0.0]]), np.array([1.0]), np.array([1.0, 3.0]))
    assert x[:, 0] == pytest.approx([1.0, 0.0])


def test_projection_is_non_negative_and_sums_to_each_columns_total():
    gen = np.random.default_rng(7)  # test data only
    z = gen.normal(0, 5, size=(6, 40))
    total = gen.integers(0, 30, size=40).astype(float)
    w = gen.uniform(0.5, 3, size=6)
    x = project_simplex(z, total, w)
    assert (x >= 0).all()
    assert x.sum(0) == pytest.approx(total)
    # optimality (KKT): every positive x_i sits at z_i + λ w_i with one λ per column
    lam = (x - z) / w[:, None]
    for c in range(40):
        pos = x[:, c] > 1e-9
        if pos.any() and total[c] > 0:
            assert np.ptp(lam[pos, c]) == pytest.approx(0, abs=1e-9)
            assert (z[~pos, c] + lam[pos, c][0] * w[~pos] <= 1e-9).all()


def test_largest_remainder_gives_the_units_to_the_largest_remainders():
    # (1.6, 1.3, 0.1) to 3: floors (1, 1, 0), one unit left -> the largest remainder .6
    got = largest_remainder(np.array([[1.6], [1.3], [0.1]]), np.array([3]))
    assert got[:, 0].tolist() == [2, 1, 0]
    # (0.5, 0.5) to 1: a tie -> the earlier child
    assert largest_remainder(np.array([[0.5], [0.5]]), np.array([1]))[:, 0].tolist() == [1, 0]


def test_largest_remainder_sums_exactly_to_the_parent():
    gen = np.random.default_rng(3)  # test data only
    x = gen.uniform(0, 10, size=(7, 50))
    x *= np.round(x.sum(0)) / x.sum(0)
    got = largest_remainder(x, np.round(x.sum(0)).astype(np.int64))
    assert (got.sum(0) == np.round(x.sum(0))).all()
    assert (np.abs(got - x) < 1).all()


def test_topdown_iv_by_hand_on_two_levels():
    # a root with two children, one cell; variances: root 8, leaves 2 each
    # bottom-up: children sum 10 + 4 = 14 (variance 4), root 20 (variance 8) -> (20/8 + 14/4)/(1/8 + 1/4) = 16
    # root published 16; children's residual 16 - 14 = 2 split equally (equal variances): (11, 5)
    out = topdown_iv([np.array([[20.0]]), np.array([[10.0], [4.0]])], [8.0, 2.0], [None, np.array([0, 0])])
    assert out[0].tolist() == [[16]]
    assert out[1].tolist() == [[11], [5]]


def test_topdown_iv_children_sum_to_parent_at_every_level_and_nothing_is_negative():
    gen = np.random.default_rng(11)  # test data only
    states = np.zeros(5, dtype=np.int64)  # 5 states under the root
    pumas = np.array([0, 0, 1, 2, 2, 2, 3, 4])  # 8 PUMAs under the 5 states (three of them only children)
    cells = 6
    noisy = [gen.normal(50, 20, (1, cells)), gen.normal(10, 8, (5, cells)), gen.normal(1, 4, (8, cells))]
    out = topdown_iv(noisy, [100.0, 20.0, 5.0], [None, states, pumas])
    assert [o.shape for o in out] == [(1, cells), (5, cells), (8, cells)]
    assert all(o.dtype == np.int64 and (o >= 0).all() for o in out)
    for lv, parent in ((1, states), (2, pumas)):
        sums = np.zeros_like(out[lv - 1])
        np.add.at(sums, parent, out[lv])
        assert (sums == out[lv - 1]).all()


def test_topdown_iv_only_child_is_its_parent():
    out = topdown_iv([np.array([[7.0, 3.0]]), np.array([[9.0, -2.0]])], [4.0, 1.0], [None, np.array([0])])
    assert out[1].tolist() == out[0].tolist()


def test_projection_with_tied_breakpoints_still_sums_to_the_total():
    # found in a benchmark run: three equal estimates and one lower, equal variances; the active
    # sets of 3 and 4 children give the same λ, which floats put on either side of the tie
    x = project_simplex(np.array([[1.0], [-1.0], [1.0], [1.0]]), np.array([6.0]), np.full(4, 22.05630288539704))
    assert x[:, 0] == pytest.approx([2.0, 0.0, 2.0, 2.0])
