"""Fitting: non-negative details that keep a consistency group's estimated marginals and totals.

One job: from the (possibly negative) least-squares estimate of :mod:`.estimation`, details
with no negative cell that keep what the group must keep: each place's fitted marginals (the
maximum-entropy detail, :func:`patterns`), and, per parent, the parent's every detail cell
and its children's totals, on which all tables of the group agree (:func:`fit_children`).
No rounding here (:mod:`.rounding`).

May import numpy and :mod:`.estimation` (the group's levels); never the data readers
(:mod:`dprelease.data`): it sees estimates of noisy measurements and declared invariants only.
"""

from __future__ import annotations

import numpy as np

from dprelease.postprocess.estimation import Level


def patterns(levels: list[Level], combined: list[np.ndarray], marginals: list) -> list[np.ndarray]:  # type: ignore[type-arg]
    """Non-negative details per place with each place's fitted marginals, built bottom-up so
    that where the marginals say nothing a parent looks like the sum of its children."""
    out: list[np.ndarray] = [np.empty(0)] * len(levels)
    out[-1] = _max_entropy_detail(combined[-1], marginals)
    for i in range(len(levels) - 2, -1, -1):
        parent = levels[i + 1].parent
        assert parent is not None
        start = np.zeros_like(combined[i])
        np.add.at(start, parent, out[i + 1])
        out[i] = _max_entropy_detail(combined[i], marginals, start=start)
    return out


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


def fit_children(values: np.ndarray, totals: np.ndarray, marginals: list,  # type: ignore[type-arg]
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
        child_totals = project_columns(values.sum(axis=1).reshape(-1, 1), np.array([float(totals.sum())])).ravel()
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


def project_columns(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
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
