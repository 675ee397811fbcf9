"""The baseline consistent post-processing of issue 21: independent TopDown + inverse variance.

Each table alone, over a geographic hierarchy (root, then each level's places with their
parent at the level above):

1. Bottom-up (Hay, Rastogi, Miklau and Suciu 2010): a leaf's estimate is its noisy cells; a
   parent's is its noisy cells combined, cell by cell, with the sum of its children's estimates
   by inverse variance, z = (y/v + s/v_s)/(1/v + 1/v_s), of variance 1/(1/v + 1/v_s), where v
   is the parent's noise variance and v_s the sum of its children's estimate variances.
2. The root's cells: max(0, z) rounded to the nearest integer.
3. Top-down: for each parent and cell, its children's estimates projected onto
   {x ≥ 0, Σ x = parent's published cell} (weighted by the children's estimate variances: the
   Euclidean projection when they are equal, and Hay et al.'s top-down step, the residual
   spread in proportion to the variances, wherever no child is clipped at 0), then rounded by
   largest remainder, so the children's integers sum exactly to the parent's.

Benchmark code: a post-processing of noisy values only (it never sees the confidential data),
written from the issue's description to measure the project's method against.
"""

from __future__ import annotations

import numpy as np


def inverse_variance(y: np.ndarray, v: float | np.ndarray, s: np.ndarray,
                     v_s: float | np.ndarray) -> tuple[np.ndarray, float | np.ndarray]:
    """The inverse-variance combination of two independent unbiased estimates of the same cells
    (``y`` of variance ``v``, ``s`` of variance ``v_s``; arrays broadcast), and its variance."""
    w, w_s = 1.0 / v, 1.0 / v_s
    return (y * w + s * w_s) / (w + w_s), 1.0 / (w + w_s)


def project_simplex(z: np.ndarray, total: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per column c of ``z`` (children × cells): argmin Σ_i (x_i − z_ic)²/w_i over
    {x ≥ 0, Σ_i x_i = total_c}; ``weights`` w (per child; all 1 by default). The solution is
    x_i = max(0, z_ic + λ_c w_i), λ_c found exactly from the sorted breakpoints −z_ic/w_i."""
    z = np.asarray(z, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    k = z.shape[0]
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    if np.any(total < 0):
        raise ValueError("the total of a projection onto the simplex must be non-negative")
    b = -z / w[:, None]  # child i is positive for λ > b_i
    order = np.argsort(b, axis=0, kind="stable")
    zs, ws, bs = np.take_along_axis(z, order, 0), w[order], np.take_along_axis(b, order, 0)
    # with the first j children (in breakpoint order) positive: λ_j = (total − Σz)/Σw
    lam = (total[None, :] - np.cumsum(zs, axis=0)) / np.cumsum(ws, axis=0)
    # the active set: the most children j whose own breakpoint lies below λ_j (the first always
    # does when total > 0); robust to ties, where neighbouring j give the same x
    positive = lam > bs
    j = k - 1 - np.argmax(positive[::-1], axis=0)
    chosen = lam[j, np.arange(z.shape[1])]
    x = np.maximum(0.0, z + chosen[None, :] * w[:, None])
    x[:, total == 0] = 0.0
    return x


def largest_remainder(x: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Per column, non-negative integers summing exactly to the integer ``total``: the floors of
    ``x`` (≥ 0, its columns summing to ``total`` up to float error), plus one unit to each of the
    children with the largest remainders (ties: the earlier child)."""
    x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    floors = np.floor(x)
    left = np.asarray(total, dtype=np.int64) - floors.sum(0).astype(np.int64)
    if np.any(left < 0) or np.any(left > x.shape[0]):
        raise ValueError("the columns do not sum to their totals")
    rank = np.argsort(np.argsort(-(x - floors), axis=0, kind="stable"), axis=0, kind="stable")
    return (floors + (rank < left[None, :])).astype(np.int64)


def topdown_iv(noisy: list[np.ndarray], variances: list[float],
               parents: list[np.ndarray | None]) -> list[np.ndarray]:
    """The baseline's published cells of one table at every level, root first.

    ``noisy[l]``: the level's noisy cells, places × cells (the root: one place); ``variances[l]``:
    the noise variance of each of its cells; ``parents[l]``: each place's parent at level l − 1
    (None at the root). Returns non-negative integer arrays of the same shapes, each place's
    cells summing, cell by cell, over its children to its own."""
    est = [np.asarray(y, dtype=np.float64) for y in noisy]
    var = [np.full(y.shape[0], float(v)) for y, v in zip(noisy, variances)]
    for lv in range(len(est) - 1, 0, -1):  # bottom-up: each parent learns from its children
        p, up = parents[lv], est[lv - 1]
        assert p is not None
        sums = np.zeros_like(up)
        np.add.at(sums, p, est[lv])
        sum_var = np.bincount(p, weights=var[lv], minlength=up.shape[0])
        has = sum_var > 0  # a place without children keeps its own measurement
        combined, combined_var = inverse_variance(up[has], var[lv - 1][has, None], sums[has], sum_var[has, None])
        est[lv - 1][has], var[lv - 1][has] = combined, combined_var[:, 0]
    out = [np.maximum(np.rint(est[0]), 0).astype(np.int64)]
    for lv in range(1, len(est)):  # top-down: children add up to their published parent
        p = parents[lv]
        assert p is not None
        published = np.zeros(est[lv].shape, dtype=np.int64)
        for i in range(out[-1].shape[0]):
            children = np.flatnonzero(p == i)
            if children.size:
                x = project_simplex(est[lv][children], out[-1][i], var[lv][children])
                published[children] = largest_remainder(x, out[-1][i])
        out.append(published)
    return out
