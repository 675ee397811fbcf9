"""Post-processing: pure functions of the noisy measurements (free: no budget, no data).

``clamp`` (max(0, x) per cell), ``none``, and ``consistent`` (census-style: non-negative
integer tables that agree across geographic levels and across the tables of a group).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dprelease.postprocess.consistent import consistent_group
from dprelease.spec import Spec, Table

Key = tuple[str, str | None]  # (table, level); level None for a plain table


def clamp_or_none(noisy: np.ndarray, method: str) -> np.ndarray:
    """``clamp``: max(0, x) per cell (non-negative, biased upwards near zero); ``none``: as is."""
    match method:
        case "clamp":
            return np.maximum(noisy, 0)
        case "none":
            return noisy.copy()
    raise ValueError(f"unknown post-processing {method!r}")


def groups(spec: Spec) -> list[list[Table]]:
    """Tables post-processed together: each consistency group, and each other consistent table alone."""
    out: dict[str, list[Table]] = {}
    for t in spec.tables:
        if t.post_process == "consistent":
            out.setdefault(t.consistency or f"\0{t.name}", []).append(t)
    return list(out.values())


def postprocess_release(spec: Spec, noisy: dict[Key, np.ndarray], scales: dict[Key, Fraction],
                        method: str | None = None,
                        invariants: dict[str, np.ndarray] | None = None) -> dict[Key, np.ndarray]:
    """The published values of every measurement. ``method`` overrides the spec's choices.

    ``invariants`` (exact place totals per level, published outside DP) bind consistent
    post-processing of every group whose tables count all rows (no ``where``): each place's
    total is then its invariant. Clamped tables are not adjusted (clamping is per cell).
    """
    published: dict[Key, np.ndarray] = {}
    for t in spec.tables:
        chosen = method or t.post_process
        if chosen != "consistent":
            for level, _, _ in t.measured():
                published[(t.name, level)] = clamp_or_none(noisy[(t.name, level)], chosen)
    consistent = [g for g in groups(spec) if method in (None, "consistent")]
    if method == "consistent":  # every table, grouped as the spec says or alone
        consistent = [[t] for t in spec.tables if t.post_process != "consistent"] + groups(spec)
    for group in consistent:
        binding = invariants if invariants and not any(t.where for t in group) else None
        published.update(consistent_group(spec, group, noisy, scales, binding))
    return published
