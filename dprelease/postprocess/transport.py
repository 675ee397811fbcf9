"""The nearest non-negative matrix with given row and column sums, block by block, exactly.

One job: for each of many independent blocks (a parent's children × a table's cells inside one
separator cell, :mod:`.topdown`), the Euclidean projection of its real values ``V`` (k × m) onto
the transportation polytope {X ≥ 0, X·1 = r, Xᵀ·1 = c} (Σ r = Σ c).

The model. The problem is a strictly convex quadratic programme; its dual (Lagrange multipliers
α for the rows, β for the columns) is unconstrained:

    maximise ψ(α, β) = −½ Σ_ij max(0, V_ij + α_i + β_j)² + αᵀr + βᵀc,
    and then X_ij = max(0, V_ij + α_i + β_j).

ψ is concave and piecewise quadratic; its gradient is the sums' gaps (r − X·1, c − Xᵀ·1), so
X is the answer exactly when the gaps are zero: non-negativity and complementary slackness hold
by construction (the KKT conditions; :func:`kkt_violation` checks them).

The algorithm: a semismooth Newton method on the dual (as for quadratically regularised optimal
transport: Lorenz, Manns and Meyer 2021), with a Levenberg–Marquardt term μ‖gap‖ and an Armijo
line search, started from the affine projection (the answer wherever it has no negative value:
no iteration). The generalised Hessian is the active set's bipartite matrix
[[diag(row degrees), S], [Sᵀ, diag(column degrees)]] (S the 0/1 active cells); the Newton
system is solved through its Schur complement on the smaller side (min(k, m) unknowns per
block), batched over blocks of one padded shape (``np.linalg.solve`` on a stack). Each block
stops on its own when its largest gap is under ``GAP_TOLERANCE`` × its largest sum; its
convergence depends on nothing outside the block. A block still over the tolerance after
``MAX_ITERATIONS`` is counted and returned as not converged: the caller must report it (the
rounding in :mod:`.integral` still meets the exact sums).

Cost per iteration and block: k·m for the gaps and the line search, k·m·min(k, m) for the
Schur complement, min(k, m)³ for the solve; typically under 20 iterations (a block with no
negative value in its affine projection: none).

Floats are fine here: this is post-processing of published noisy values. Imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GAP_TOLERANCE = 1e-10  # a block is solved when every sum's gap is under this × max(1, its largest sum)
MAX_ITERATIONS = 200  # Newton steps per block; reaching it is reported, never passed silently
ARMIJO = 1e-4  # the line search's sufficient ascent
DAMPING = 1e-3  # Levenberg–Marquardt: μ = DAMPING × the block's largest gap
MAX_HALVINGS = 60


class FitWarning(UserWarning):
    """Some blocks reached ``MAX_ITERATIONS`` before their sums' gaps were under the tolerance:
    their values (and the integers rounded from them, which keep every sum exactly) are not
    from the exact nearest non-negative point. A release carries it into its run record
    (``postprocess_warnings``): never passed silently."""


@dataclass(frozen=True)
class Fit:
    """The fitted blocks and how they got there: ``x`` (blocks × k × m, zeros on padding), the
    duals ``alpha`` (blocks × k) and ``beta`` (blocks × m) that certify it (:func:`kkt_violation`),
    ``iterations`` (the most any block took), ``unconverged`` (blocks over the tolerance when
    ``MAX_ITERATIONS`` was reached: 0 unless the caller must report it)."""

    x: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    iterations: int
    unconverged: int


def fit_blocks(v: np.ndarray, r: np.ndarray, c: np.ndarray, max_iterations: int | None = None) -> Fit:
    """Per block b, the projection of ``v[b]`` (k × m; ``-inf`` marks padding, a cell that is no
    variable) onto {X ≥ 0, X·1 = r[b], Xᵀ·1 = c[b]}. Assumes r, c ≥ 0 with equal totals per
    block, zero on padded rows and columns, and a feasible point (every row and column with a
    positive sum has a cell that is a variable). Guarantees: x ≥ 0, zero on padding, and per
    converged block the KKT conditions to ``GAP_TOLERANCE``. ``max_iterations``: default
    ``MAX_ITERATIONS``."""
    max_iterations = MAX_ITERATIONS if max_iterations is None else max_iterations
    if v.shape[1] > v.shape[2]:  # the Schur complement on the smaller side: rows
        fit = fit_blocks(np.swapaxes(v, 1, 2), c, r, max_iterations)
        return Fit(np.swapaxes(fit.x, 1, 2), fit.beta, fit.alpha, fit.iterations, fit.unconverged)
    v = np.asarray(v, dtype=np.float64)
    r, c = np.asarray(r, dtype=np.float64), np.asarray(c, dtype=np.float64)
    alpha, beta = _affine_duals(v, r, c)
    scale = np.maximum(1.0, np.maximum(r.max(axis=1, initial=0), c.max(axis=1, initial=0)))
    todo = np.arange(v.shape[0])
    iterations = 0
    while todo.size:
        z = v[todo] + alpha[todo, :, None] + beta[todo, None, :]
        x = np.maximum(z, 0.0)
        gr, gc = r[todo] - x.sum(axis=2), c[todo] - x.sum(axis=1)
        gap = np.maximum(np.abs(gr).max(axis=1, initial=0), np.abs(gc).max(axis=1, initial=0))
        open_ = gap > GAP_TOLERANCE * scale[todo]
        todo, z, gr, gc, gap = todo[open_], z[open_], gr[open_], gc[open_], gap[open_]
        if not todo.size or iterations == max_iterations:
            break
        iterations += 1
        da, db = _newton_direction(z > 0, gr, gc, DAMPING * gap)
        step = _line_search(v[todo], r[todo], c[todo], alpha[todo], beta[todo], z, da, db, gr, gc)
        alpha[todo] += step[:, None] * da
        beta[todo] += step[:, None] * db
    x = np.maximum(v + alpha[:, :, None] + beta[:, None, :], 0.0)
    return Fit(x, alpha, beta, iterations, int(todo.size))


def _affine_duals(v: np.ndarray, r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The duals of the affine projection onto the sums alone (every cell active), over each
    block's real rows and columns: α_i = row gap / m − block gap / 2km, β_j likewise."""
    real = np.isfinite(v)
    k = real.any(axis=2).sum(axis=1).astype(np.float64)
    m = real.any(axis=1).sum(axis=1).astype(np.float64)
    w = np.where(real, v, 0.0)
    row_gap = np.where(real.any(axis=2), r - w.sum(axis=2), 0.0)
    col_gap = np.where(real.any(axis=1), c - w.sum(axis=1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = np.where(k * m > 0, row_gap.sum(axis=1) / (2 * k * m), 0.0)
        alpha = np.where(m[:, None] > 0, row_gap / m[:, None], 0.0) - half[:, None]
        beta = np.where(k[:, None] > 0, col_gap / k[:, None], 0.0) - half[:, None]
    return alpha, beta


def _newton_direction(active: np.ndarray, gr: np.ndarray, gc: np.ndarray, mu: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Solve [[Dr + μ, S], [Sᵀ, Dc + μ]]·(da, db) = (gr, gc) (a degree of 0 counted as 1: the
    matrix stays positive definite, the direction one of ascent) through the Schur complement
    on the rows: (Dr + μ − S (Dc + μ)⁻¹ Sᵀ)·da = gr − S (Dc + μ)⁻¹ gc."""
    s = active.astype(np.float64)
    dr = s.sum(axis=2)
    dc = s.sum(axis=1)
    dr = np.where(dr > 0, dr, 1.0) + mu[:, None]
    dc = np.where(dc > 0, dc, 1.0) + mu[:, None]
    w = s / dc[:, None, :]
    s_t = np.ascontiguousarray(np.swapaxes(s, 1, 2))  # a contiguous transpose: the batched product runs faster
    schur = -np.matmul(w, s_t)
    idx = np.arange(s.shape[1])
    schur[:, idx, idx] += dr
    rhs = gr - np.matmul(w, gc[:, :, None])[:, :, 0]
    da = np.linalg.solve(schur, rhs[:, :, None])[:, :, 0]
    db = (gc - np.matmul(s_t, da[:, :, None])[:, :, 0]) / dc
    return da, db


def _dual(v: np.ndarray, r: np.ndarray, c: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """ψ(α, β) per block."""
    x = np.maximum(v + alpha[:, :, None] + beta[:, None, :], 0.0)
    return -0.5 * (x * x).sum(axis=(1, 2)) + (alpha * r).sum(axis=1) + (beta * c).sum(axis=1)


def _line_search(v: np.ndarray, r: np.ndarray, c: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                 z: np.ndarray, da: np.ndarray, db: np.ndarray, gr: np.ndarray, gc: np.ndarray) -> np.ndarray:
    """Per block, the first step 1, ½, ¼, … with Armijo's sufficient ascent of ψ — or, near the
    answer where ψ's rounding hides the ascent, a smaller largest gap."""
    x = np.maximum(z, 0.0)
    base = -0.5 * (x * x).sum(axis=(1, 2)) + (alpha * r).sum(axis=1) + (beta * c).sum(axis=1)
    slope = (gr * da).sum(axis=1) + (gc * db).sum(axis=1)
    gap = np.maximum(np.abs(gr).max(axis=1, initial=0), np.abs(gc).max(axis=1, initial=0))
    step = np.ones(v.shape[0])
    left = np.arange(v.shape[0])
    for _ in range(MAX_HALVINGS):
        t = step[left]
        a, b = alpha[left] + t[:, None] * da[left], beta[left] + t[:, None] * db[left]
        xn = np.maximum(v[left] + a[:, :, None] + b[:, None, :], 0.0)
        value = -0.5 * (xn * xn).sum(axis=(1, 2)) + (a * r[left]).sum(axis=1) + (b * c[left]).sum(axis=1)
        new_gap = np.maximum(np.abs(r[left] - xn.sum(axis=2)).max(axis=1, initial=0),
                             np.abs(c[left] - xn.sum(axis=1)).max(axis=1, initial=0))
        ok = (value >= base[left] + ARMIJO * t * slope[left]) | (new_gap <= (1 - ARMIJO * t) * gap[left])
        left = left[~ok]
        if not left.size:
            break
        step[left] /= 2
    return step


def kkt_violation(v: np.ndarray, x: np.ndarray, r: np.ndarray, c: np.ndarray, alpha: np.ndarray,
                  beta: np.ndarray) -> float:
    """How far ``x`` (k × m, no padding) is from certified optimal for the projection of ``v``
    onto {X ≥ 0, X·1 = r, Xᵀ·1 = c} with the duals (α, β): the largest of the sums' gaps,
    −min(x), and |x − max(0, v + α + β)| (stationarity, with complementary slackness). All three
    zero is sufficient for optimality (the problem is convex), whoever found the duals."""
    z = v + alpha[:, None] + beta[None, :]
    return float(max(np.abs(x.sum(axis=1) - r).max(initial=0), np.abs(x.sum(axis=0) - c).max(initial=0),
                     -x.min(initial=0), np.abs(x - np.maximum(z, 0.0)).max(initial=0)))
