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

# IPF runs a fixed number of sweeps (no convergence test, so results do not hang on a float
# threshold); each limit bounds the work of one fit and how closely it meets its margins.
PATTERN_SWEEPS = 60  # a place's detail fitted to its tables' marginals (its bottom-up pattern)
CHILD_MARGINAL_SWEEPS = 100  # per table, its children's marginals fitted to their totals and the parent's
CHILD_DETAIL_SWEEPS = 50  # the children's details fitted to those marginals and to the parent's cells

# IPF only rescales: a cell that starts at 0 stays 0. These small masses (in persons) are added
# to a start so that every cell its margins allow can take a share. Each bounds the mass a cell
# that had none starts with: small enough to leave the start's pattern where the margins say
# nothing, large enough for the sweeps to fill a cell the margins need.
PATTERN_SEED = 1e-6  # every detail cell of a parent's start (the sum of its children's patterns)
CHILD_MARGINAL_SEED = 1e-6  # every clipped marginal cell of a child, before its fit to the totals
CHILD_DETAIL_SEED = 1e-3  # every clipped detail cell of a child, before its fit to the marginals


def ipf(start: np.ndarray, sweeps: int, *, rows: np.ndarray | None = None,
        marginals: list | tuple = (), columns: np.ndarray | None = None) -> np.ndarray:  # type: ignore[type-arg]
    """``start`` (non-negative, a row per place or child) scaled by iterative proportional
    fitting towards its margins: each sweep rescales, in this order, to the row sums ``rows``,
    to each ``(a, target)`` of ``marginals`` (per row, the marginal ``a @ row``), and to the
    column sums ``columns``. A cell whose margin is 0 becomes 0. It runs exactly ``sweeps``
    sweeps and ends on the last margin given; the others are met approximately.
    """
    fitted = np.array(start, dtype=float)
    for _ in range(sweeps):
        if rows is not None:
            fitted *= _ratio(rows, fitted.sum(axis=1))[:, None]
        for a, target in marginals:
            fitted *= np.asarray((a.T @ _ratio(target, np.asarray((a @ fitted.T).T)).T).T)
        if columns is not None:
            fitted *= _ratio(columns, fitted.sum(axis=0))[None, :]
    return fitted


def _ratio(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """``target / current``, 0 where ``current`` is 0 (IPF then empties the cells behind it)."""
    return np.divide(target, current, out=np.zeros_like(current), where=current > 0)


def patterns(levels: list[Level], combined: list[np.ndarray],
             marginals: list) -> list[np.ndarray]:  # type: ignore[type-arg]
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


def _max_entropy_detail(fitted: np.ndarray, marginals: list,  # type: ignore[type-arg]
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
        detail = start.astype(float) + PATTERN_SEED
    return ipf(detail, PATTERN_SWEEPS, marginals=list(zip(marginals, targets)))


def fit_children(values: np.ndarray, totals: np.ndarray, marginals: list,  # type: ignore[type-arg]
                 child_totals: np.ndarray | None = None) -> np.ndarray:
    """Non-negative children whose detail columns sum exactly to ``totals`` (the parent's
    detail) and whose marginals stay near those of ``values`` (which may be negative).

    First each child's total is projected onto {τ ≥ 0, Στ = parent total} and, per table, the
    children's clipped marginals are fitted (IPF) to those totals and to the parent's
    marginal; the targets of all tables then agree on every child's total, which a plain
    clamp breaks (clipping the small cells of a 45-cell table adds persons the 6-cell table
    does not have). ``child_totals`` (invariants) replace the projected totals. Then IPF on
    the detail to those targets, ending on the parent's cells.
    """
    if child_totals is None:
        child_totals = project_columns(values.sum(axis=1).reshape(-1, 1), np.array([float(totals.sum())])).ravel()
    child_totals = np.asarray(child_totals, dtype=float)
    targets = []
    for a in marginals:
        parent_marginal = np.asarray(a @ totals.astype(float)).ravel()
        start = np.maximum(np.asarray((a @ values.T).T), 0) + CHILD_MARGINAL_SEED
        start[:, parent_marginal <= 0] = 0
        targets.append(ipf(start, CHILD_MARGINAL_SWEEPS, rows=child_totals, columns=parent_marginal))
    fitted = np.maximum(values, 0) + CHILD_DETAIL_SEED
    fitted[:, totals <= 0] = 0
    return ipf(fitted, CHILD_DETAIL_SWEEPS, marginals=list(zip(marginals, targets)), columns=totals)


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
