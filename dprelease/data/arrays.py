"""Small array helpers shared by the data and post-processing steps."""

from __future__ import annotations

import numpy as np


def group_starts(ordered: np.ndarray) -> np.ndarray:
    """Positions where a new run of equal values begins in ``ordered`` (sorted by group)."""
    if not ordered.size:
        return np.zeros(0, dtype=np.int64)
    return np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]


def rank_within(groups: np.ndarray) -> np.ndarray:
    """Per position, how many earlier positions hold the same group."""
    index = np.argsort(groups, kind="stable")
    starts = group_starts(groups[index])
    ranks = np.arange(groups.size) - np.repeat(starts, np.diff(np.r_[starts, groups.size]).astype(np.int64))
    out = np.empty_like(ranks)
    out[index] = ranks
    return out
