"""Invariants at the post-processing boundary: the exact totals a release publishes by decision.

One job: carry a release's declared invariants into post-processing under their own type, so
that what post-processing sees of the confidential data is explicit, and check them against
the spec (:func:`check_invariants`).

May import numpy and :mod:`dprelease.spec`; never the data readers (:mod:`dprelease.data`):
the caller counts the totals (:func:`dprelease.data.place_totals`) or reads them from a release.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dprelease.spec import ROOT, RollupColumn, Spec


@dataclass(frozen=True, slots=True, eq=False)
class Invariants:
    """A release's invariants: per declared level (coarsest first, the root's as ``ROOT``), the
    exact number of rows in each place.

    These are exact, unprotected values of the confidential data (NOT differentially private)
    that the release publishes by decision (the spec's ``invariants:`` block). Post-processing
    may use them, and nothing else of the data: all else it reads is noisy measurements.
    """

    levels: tuple[str, ...]
    totals: tuple[np.ndarray, ...]  # per level, one total per place (read-only copies)

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.totals):
            raise ValueError(f"{len(self.levels)} invariant levels but {len(self.totals)} arrays of totals")
        object.__setattr__(self, "totals", tuple(_read_only(t) for t in self.totals))

    @classmethod
    def from_totals(cls, totals: Mapping[str, np.ndarray]) -> Invariants:
        """From a mapping level → exact totals per place, in the mapping's order."""
        return cls(tuple(totals), tuple(totals.values()))

    def get(self, level: str) -> np.ndarray | None:
        """The exact totals per place at ``level`` (None: not an invariant level)."""
        return self.totals[self.levels.index(level)] if level in self.levels else None

    def as_dict(self) -> dict[str, np.ndarray]:
        return dict(zip(self.levels, self.totals))


def _read_only(totals: np.ndarray) -> np.ndarray:
    copy = np.array(totals)
    copy.setflags(write=False)
    return copy


def declared_invariants(spec: Spec, invariants: Invariants | None) -> Invariants | None:
    """``invariants`` checked against ``spec`` (:func:`check_invariants`); None for a release
    without any (None or empty). Only the :class:`Invariants` type crosses this boundary: the
    caller states that these exact totals are the published invariants."""
    if invariants is None:
        return None
    if not isinstance(invariants, Invariants):
        raise TypeError(f"invariants cross into post-processing as Invariants, not {type(invariants).__name__}")
    totals = invariants.as_dict()
    if not totals:
        return None
    check_invariants(spec, totals)
    return invariants


def check_invariants(spec: Spec, invariants: Mapping[str, np.ndarray]) -> None:
    """ValueError unless ``invariants`` are the spec's levels, non-negative integers, one per
    place, each level summing, place by place, to the next coarser one."""
    if list(invariants) != list(spec.invariant_levels):
        raise ValueError(f"invariants for {list(invariants)}, the spec declares {list(spec.invariant_levels)}")
    for level, totals in invariants.items():
        size = 1 if level == ROOT else spec.column(level).size
        if totals.shape != (size,) or totals.dtype.kind not in "iu" or (totals < 0).any():
            raise ValueError(f"the {level} invariants are not {size} non-negative integer totals")
    for coarse, fine in itertools.pairwise(list(invariants)):
        if coarse == ROOT:
            summed = np.array([invariants[fine].sum()])
        else:
            up = spec.column(coarse)
            assert isinstance(up, RollupColumn) and up.source == fine
            summed = np.bincount(np.asarray(up.parent_of), weights=invariants[fine], minlength=up.size)
        if not np.array_equal(summed.astype(np.int64), invariants[coarse]):
            raise ValueError(f"the {fine} invariants do not add up to the {coarse} invariants")
