"""Estimation: the generalised least-squares estimate of a consistency group's published cells
from every measurement that informs them, in time and memory linear in the published cells.

The model. The group's tables are marginals over subsets ``S`` of the group's dimensions ``D``
(sizes ``n_i``) of one unseen detail per place, ``x_p``; a parent's detail is the sum of its
children's. Each table ``t`` measured at a level gives, per place, ``y = M_S x_p + z`` with
``z`` independent noise of variance ``v`` in every cell (the plan's exact variance for the
table and level). The estimate wanted is the GLS (best linear unbiased) estimate of every
published cell ``M_S x_p``: unique although ``x_p`` is not identified.

How, without the cross product of ``D``. With ``Q_i = I - J/n_i`` (centring along dimension
``i``), ``I = Q_i + J/n_i`` splits every marginal into orthogonal parts, one per ``U ⊆ S``:

    M_S x = Σ_{U ⊆ S} expand_{S∖U}(r_U) / n_{S∖U},   r_U = (⊗_{i∈U} Q_i) M_U x,

the *residual* ``r_U`` of the ``U``-marginal (``r_∅`` is the total; McKenna, Mullins, Sheldon
and Miklau 2022, "AIM"/"ReM", use the same basis). Projecting a measurement the same way gives,
for every ``U ⊆ S``, an unbiased measurement of ``r_U`` — its noisy ``U``-marginal, centred —
whose noise has covariance ``v · n_{S∖U} · (⊗ Q_i)``, uncorrelated across ``U``. So the GLS
problem falls apart into one small problem per ``U``: the measurements of ``r_U`` at a place
(one per table containing ``U``) are combined by inverse variance, and those of all places are
combined over the hierarchy — ``r_U(parent) = Σ r_U(children)`` — by the tree's two passes
(bottom-up inverse-variance combination with the children's sum, then top-down distribution of
each parent's residual in proportion to the children's variances; Hay, Rastogi, Miklau and Suciu
2010), which is exact GLS on a tree. The published cells are then rebuilt from the ``r_U``.
Work per place: Σ_t 2^|S_t| arrays no larger than the tables themselves. Memory
(:func:`estimate_levels`, streamed from the root): per residual its combined value at every level
but the last, and one level's final values; the last level (a census's blocks) is rebuilt from
its measurements a residual at a time, so it costs its estimates and one residual, not every
residual of every level (about 2.1 floats per published cell for issue 28's three tables).

Everything here is a linear function of noisy measurements and, where declared, the invariants
(exact place totals, variance 0); no non-negativity, no rounding (:mod:`.nonnegative`,
:mod:`.integral`). Known zeros (structural cells): :func:`estimate_with_zeros`. Floats are fine: this is post-processing of published noisy values.
May import numpy and scipy; never the data readers (:mod:`dprelease.data`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from dprelease.errors import InternalError

Subset = tuple[int, ...]  # dimensions of the group, in increasing order
Levels = Generator[tuple[int, dict[Subset, np.ndarray]], None, None]  # per level: {dims: places × cells}


@dataclass(frozen=True)
class Tree:
    """The geography of a group: per level (coarsest first), its number of places and each place's
    parent at the previous level (None at the first level)."""

    units: tuple[int, ...]
    parents: tuple[np.ndarray | None, ...]

    def summing(self, level: int) -> scipy.sparse.csr_matrix:
        """The (places at ``level`` × places at ``level + 1``) 0/1 matrix that sums children."""
        parent = self.parents[level + 1]
        assert parent is not None
        n = parent.shape[0]
        return scipy.sparse.csr_matrix((np.ones(n), (parent, np.arange(n))), shape=(self.units[level], n))


@dataclass(frozen=True)
class Measurement:
    """One table at one level: ``values`` (places × the table's cells, in the order of ``dims``)
    and its noise variance per cell (0: exact, e.g. an invariant)."""

    dims: Subset  # the table's dimensions in its own order (indices into the group's)
    level: int
    values: np.ndarray
    variance: float


def subsets(dims: Subset) -> list[Subset]:
    """Every subset of ``dims``, each in increasing order."""
    ordered = tuple(sorted(dims))
    return [u for k in range(len(ordered) + 1) for u in itertools.combinations(ordered, k)]


def residual(values: np.ndarray, dims: Subset, u: Subset, sizes: tuple[int, ...]) -> np.ndarray:
    """``(⊗_{i∈U} Q_i) M_U`` of a table's cells (places first): the U-marginal, centred along U.
    Returns (places, *sizes of U in increasing order), float64, a new array (the marginal
    summed in float64 from the values as they are, then centred in place: one array of the
    U-marginal's size, never a float copy of the whole table besides it)."""
    places = values.shape[0]
    cube = values.reshape((places, *(sizes[i] for i in dims)))
    drop = tuple(1 + k for k, i in enumerate(dims) if i not in u)
    marginal = cube.sum(axis=drop, dtype=np.float64) if drop else cube.astype(np.float64)
    kept = [i for i in dims if i in u]
    marginal = np.moveaxis(marginal, [1 + kept.index(i) for i in u], list(range(1, 1 + len(u)))) if u else marginal
    for axis in range(1, 1 + len(u)):
        marginal -= marginal.mean(axis=axis, keepdims=True)
    return marginal


def expand(part: np.ndarray, u: Subset, dims: Subset, sizes: tuple[int, ...]) -> np.ndarray:
    """``expand_{S∖U}(r_U) / n_{S∖U}`` as a table over ``dims`` (in the table's order), places first."""
    places = part.shape[0]
    shape = [1] * len(dims)
    for k, i in enumerate(dims):
        if i in u:
            shape[k] = sizes[i]
    # r_U's axes are U in increasing order; put them where the table has them
    order = sorted(range(len(u)), key=lambda j: dims.index(u[j]))
    moved = np.transpose(part, (0, *(1 + j for j in order))) if u else part
    spread = math.prod(sizes[i] for i in dims if i not in u)
    spread_part = moved.reshape((places, *shape))
    if spread != 1:  # (x / 1 is x: no copy of a table's own residual)
        spread_part = spread_part / spread
    return np.broadcast_to(spread_part, (places, *(sizes[i] for i in dims)))


def estimate(tree: Tree, sizes: tuple[int, ...], measurements: list[Measurement],
             wanted: list[tuple[Subset, int]] | None = None) -> dict[tuple[Subset, int], np.ndarray]:
    """The GLS estimate of each (dims, level) in ``wanted`` (default: every measured table at its
    measured levels), {(dims, level): places × cells in the order of dims}; ``((), level)`` is
    the places' totals. A table may be wanted at a level where it was not measured: the
    estimate is then that of the same cells from the other levels and tables.

    Assumes: each measurement's noise is independent across cells, places, levels and tables,
    with mean 0 and the stated variance (the plan's); a variance of 0 marks an exact value
    (an invariant), consistent with the others' exact values (checked by the caller).
    Guarantees: the estimates are the best linear unbiased ones; they are consistent: each
    parent's cells are the sums of its children's, and two tables agree on every marginal they
    share, at every level (up to floating-point rounding). Every level at once: see
    :func:`estimate_levels` for one level at a time."""
    wanted = [(m.dims, m.level) for m in measurements] if wanted is None else wanted
    return _collect(estimate_levels(tree, sizes, measurements, wanted))


def _collect(levels: Iterator[tuple[int, dict[Subset, np.ndarray]]]) -> dict[tuple[Subset, int], np.ndarray]:
    return {(dims, level): cells for level, found in levels for dims, cells in found.items()}


def estimate_levels(tree: Tree, sizes: tuple[int, ...], measurements: list[Measurement],
                    wanted: list[tuple[Subset, int]]) -> Levels:
    """:func:`estimate`, streamed: per level from the root down, (level, {dims: places × cells})
    of the wanted tables there, the same values. What is held: the measurements (the caller's),
    per residual its combined value at every level but the last and its final value at the level
    before the one being yielded; at the last level (a census's blocks: nearly all the cells)
    each residual is recomputed from that level's measurements, added into the tables that
    need it and dropped, so that level costs its estimates and one residual besides the
    measurements. A consumer that drops each level's estimates once used holds one level's."""
    parts: set[Subset] = set()
    for dims, _ in wanted:
        parts.update(subsets(dims))
    summing = [tree.summing(level) for level in range(len(tree.units) - 1)]
    up = {u: _bottom_up(tree, sizes, measurements, u, summing) for u in sorted(parts, key=len)}
    last = len(tree.units) - 1
    previous: dict[Subset, np.ndarray] = {}
    for level in range(len(tree.units)):
        here = list(dict.fromkeys(dims for dims, lv in wanted if lv == level))
        uses = {u: sum(u in subsets(dims) for dims in here) for u in up}
        finals: dict[Subset, np.ndarray] = {}

        def final(u: Subset) -> np.ndarray:
            if u not in finals:
                combined = up[u][0][level] if level < last else _own_at(tree, sizes, measurements, u, level)[0]
                finals[u] = combined if level == 0 else _distribute(tree, level, combined, up[u][1][level],
                                                                    previous[u], summing[level - 1])
            return finals[u]

        if level < last:  # every residual's final value here: the next level distributes from it
            for u in up:
                final(u)
        found: dict[Subset, np.ndarray] = {}
        for dims in here:
            cells = None
            for u in sorted(subsets(dims), key=lambda u: -len(u)):  # the table's own residual first
                if cells is None and u == dims and level == last and uses[u] == 1:
                    cells = final(u)  # its last use: the sum is made in it (no array of the table besides)
                    del finals[u]
                else:
                    if cells is None:
                        cells = np.zeros((tree.units[level], *(sizes[i] for i in dims)))
                    cells += expand(final(u), u, dims, sizes)
                    if level == last and uses[u] == 1:
                        finals.pop(u, None)  # at the last level a residual lives while the tables that need it are built
                uses[u] -= 1
            found[dims] = cells.reshape(tree.units[level], -1)
        previous = finals
        for u in up:
            up[u][0][level] = None  # each level's combined value is used once, by its finals
        yield level, found
        del found


ZERO_TOLERANCE = 1e-9  # relative residual of the known-zero system (conjugate gradients) to stop at


def estimate_with_zeros(tree: Tree, sizes: tuple[int, ...], measurements: list[Measurement],
                        zeros: dict[int, np.ndarray], wanted: list[tuple[Subset, int]] | None = None
                        ) -> dict[tuple[Subset, int], np.ndarray]:
    """:func:`estimate_levels_with_zeros`, every level at once."""
    wanted = [(m.dims, m.level) for m in measurements] if wanted is None else wanted
    return _collect(estimate_levels_with_zeros(tree, sizes, measurements, zeros, wanted))


def estimate_levels_with_zeros(tree: Tree, sizes: tuple[int, ...], measurements: list[Measurement],
                               zeros: dict[int, np.ndarray], wanted: list[tuple[Subset, int]]) -> Levels:
    """:func:`estimate_levels` when some cells are known to be zero: ``zeros[i]``, the cells of
    ``measurements[i]`` (the same in every place) that are structural — exact zeros, no noise
    drawn. The estimate is the GLS one under the constraint that those cells' estimates are 0.

    How: by the constrained problem's optimality conditions, it is the unconstrained GLS estimate
    from the same measurements with the known-zero cells' values replaced by pseudo-values z
    chosen so that their estimates come out 0 (z times the cells' weights are the constraints'
    multipliers). The estimate at those cells is affine in z, H·z + g, with H·W⁻¹ symmetric and
    positive semi-definite (W the cells' weights): conjugate gradients (MINRES where they break
    down on a singular direction) solve (H·W⁻¹)·u = −g,
    z = W⁻¹·u, each step one :func:`estimate` (linear in the published cells), then the levels
    streamed from the measurements with those pseudo-values."""
    import scipy.sparse.linalg

    hit = [(i, np.asarray(mask, dtype=bool)) for i, mask in sorted(zeros.items()) if np.asarray(mask).any()]
    if not hit:
        return estimate_levels(tree, sizes, measurements, wanted)
    keys = [(measurements[i].dims, measurements[i].level) for i, _ in hit]
    counts = [measurements[i].values.shape[0] * int(mask.sum()) for i, mask in hit]
    weights = np.concatenate([np.full(n, 1 / measurements[i].variance) for (i, _), n in zip(hit, counts)])

    def replaced(z: np.ndarray) -> list[Measurement]:
        out, at = list(measurements), 0
        for (i, mask), n in zip(hit, counts):
            m = out[i]
            values = np.array(m.values, dtype=np.float64)
            values[:, mask] = z[at:at + n].reshape(values.shape[0], -1)
            out[i] = Measurement(m.dims, m.level, values, m.variance)
            at += n
        return out

    def at_zeros(z: np.ndarray) -> np.ndarray:
        found = estimate(tree, sizes, replaced(z), keys)
        return np.concatenate([found[key][:, mask].ravel() for key, (_, mask) in zip(keys, hit)])

    g = at_zeros(np.zeros(weights.size))
    if np.abs(g).max() <= ZERO_TOLERANCE * max(1.0, float(np.abs(weights).max())):  # already zero there
        return estimate_levels(tree, sizes, replaced(np.zeros(weights.size)), wanted)
    operator = scipy.sparse.linalg.LinearOperator((weights.size, weights.size), dtype=np.float64,
                                                  matvec=lambda u: at_zeros(np.ravel(u) / weights) - g)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        u, _ = scipy.sparse.linalg.cg(operator, -g, rtol=ZERO_TOLERANCE, atol=0.0, maxiter=10 * weights.size + 100)
        if not np.isfinite(u).all():  # a breakdown on a singular direction: MINRES takes those
            u, _ = scipy.sparse.linalg.minres(operator, -g, rtol=ZERO_TOLERANCE, maxiter=10 * weights.size + 100)
    if not np.isfinite(u).all():
        raise InternalError("the estimate under known zeros did not converge")
    return estimate_levels(tree, sizes, replaced(u / weights), wanted)


def _own_at(tree: Tree, sizes: tuple[int, ...], measurements: list[Measurement], u: Subset, level: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """At ``level``, each place's inverse-variance combination of its tables' measurements of
    ``r_U``, and its variance (inf where no table measures ``U`` there; 0 where one is exact)."""
    places = tree.units[level]
    total: np.ndarray | None = None
    precision = 0.0
    exact = None
    for m in measurements:
        if m.level != level or not set(u) <= set(m.dims):
            continue
        spread = math.prod(sizes[i] for i in m.dims if i not in u)
        part = residual(m.values, m.dims, u, sizes)
        if m.variance == 0:
            exact = part
        else:
            part /= m.variance * spread
            if total is None:
                total = part  # (0 + part: the same value)
            else:
                total += part
            precision += 1 / (m.variance * spread)
    if exact is not None:
        return exact, np.zeros(places)
    if total is None:
        return np.zeros((places, *(sizes[i] for i in u))), np.full(places, np.inf)
    total /= precision
    return total, np.full(places, 1 / precision)


def _bottom_up(tree: Tree, sizes: tuple[int, ...], measurements: list[Measurement], u: Subset,
               summing: list[scipy.sparse.csr_matrix]) -> tuple[list[np.ndarray | None], list[np.ndarray]]:
    """The tree's first pass for one residual: per level, each place's own measurement combined by
    inverse variance with the sum of its children's combined values, and its variance. The last
    level's combined value is its own measurement: not kept (:func:`estimate_levels` recomputes
    it), so the pass holds the levels above it only."""
    depth = len(tree.units)
    combined: list[np.ndarray | None] = [None] * depth
    below, below_var = _own_at(tree, sizes, measurements, u, depth - 1)
    var = [np.empty(0)] * (depth - 1) + [below_var]
    for level in range(depth - 2, -1, -1):
        own, own_var = _own_at(tree, sizes, measurements, u, level)
        sums = (summing[level] @ below.reshape(tree.units[level + 1], -1)).reshape(own.shape)
        sum_var = summing[level] @ var[level + 1]
        combined[level], var[level] = _combine(own, own_var, sums, sum_var)
        below = combined[level]
    return combined, var


STEP_PLACES = 1 << 16  # places at a time when distributing a level's gaps (bounds the temporaries)


def _distribute(tree: Tree, level: int, combined: np.ndarray, v: np.ndarray, parent_final: np.ndarray,
                summing: scipy.sparse.csr_matrix) -> np.ndarray:
    """The tree's second pass at ``level`` for one residual, in place on ``combined`` (or on its
    contiguous copy, where its axes were moved), a slice of places at a time: each
    parent's final value minus its children's combined sum, spread over the children in
    proportion to their combined variances (equally over the unmeasured ones, if any)."""
    parent = tree.parents[level]
    assert parent is not None
    flat = combined.reshape(tree.units[level], -1)
    gap = parent_final.reshape(tree.units[level - 1], -1) - summing @ flat
    unknown = np.isinf(v)
    n_unknown = summing @ unknown.astype(np.float64)
    finite_v = np.where(unknown, 0.0, v)
    sum_v = summing @ finite_v
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n_unknown[parent] > 0, unknown / np.maximum(n_unknown[parent], 1),
                         np.where(sum_v[parent] > 0, finite_v / sum_v[parent], 0.0))
    for start in range(0, flat.shape[0], STEP_PLACES):
        end = start + STEP_PLACES
        flat[start:end] += gap[parent[start:end]] * share[start:end, None]
    return flat.reshape(combined.shape)  # (flat is a copy where combined's axes were moved)


def _combine(a: np.ndarray, va: np.ndarray, b: np.ndarray, vb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance combination of two unbiased estimates per place (variance 0: exact, inf: none)."""
    with np.errstate(divide="ignore"):
        wa, wb = 1 / va, 1 / vb  # inf where exact, 0 where unmeasured
    exact_a, exact_b = va == 0, (vb == 0) & (va != 0)
    total = wa + wb
    finite = ~(exact_a | exact_b) & (total > 0)
    safe = np.where(finite, total, 1.0)
    share_a = np.where(exact_a, 1.0, np.where(finite, np.where(np.isinf(wa), 0.0, wa) / safe, 0.0))
    share_b = np.where(exact_b, 1.0, np.where(finite, np.where(np.isinf(wb), 0.0, wb) / safe, 0.0))
    extra = (1,) * (a.ndim - 1)
    value = a * share_a.reshape(-1, *extra) + b * share_b.reshape(-1, *extra)
    combined = np.where(exact_a | exact_b, 0.0, np.where(finite, 1 / safe, np.inf))
    return value, combined
