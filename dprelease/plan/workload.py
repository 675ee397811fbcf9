"""The auto tables' workload and the error of the published estimates for a split of their
budget (:mod:`.split` chooses the split): the model, the error in closed form per subspace of
the ANOVA basis, and the matrix mechanism's SVD lower bound.

**The model.** A measurement i = (table t, level l) with share xᵢ (ρ, or ε) adds noise of
per-cell variance vᵢ = kᵢ/xᵢᵈ to every cell of the table's histogram at level l: under zCDP the
discrete Gaussian's σ² = Δ₂²/(2ρ) (d = 1, kᵢ = Δ₂²g²/2 in published units; σ² bounds its
variance), under pure ε-DP the discrete Laplace's 2Δ²/ε² (d = 2, kᵢ = 2Δ²; the discrete one's is
smaller by 1/6 + O(ε²)). The objective is Σᵢ ωᵢ · (expected squared error summed over the
published cells of measurement i), ωᵢ = the table's weight × its level's weight (default 1).

**The published estimates' error, in closed form per subspace.** For tables post-processed
together (a consistency group, or one geographic table over its tree) the published cells are
the GLS estimate, whose covariance is (AᵀΣ⁻¹A)⁻¹ on the row space of the measurements A. Over
the group's full domain (finest places × the group's dimensions D, sizes n_a) the table over
scope S has SᵀS = ⊗_{a∈S} I ⊗ ⊗_{a∉S} J_{n_a}: these commute, and the ANOVA basis (per U ⊆ D:
centred along U, constant elsewhere; dim U = Π_{a∈U}(n_a − 1)) diagonalises them all, with
eigenvalue λ_{S,U} = [U ⊆ S]·Π_{a∈D∖S} n_a. With T_l the 0/1 matrix summing finest places into
level l's places, both AᵀΣ⁻¹A and the weighted workload's WᵀW are, on U, a geography matrix
⊗ I_{dim U}:

    AᵀΣ⁻¹A|_U = Σ_l a_{U,l} T_lᵀT_l,   a_{U,l} = Σ_t λ_{S_t,U} / v_{t,l}
    WᵀW|_U   = Σ_l w_{U,l} T_lᵀT_l,   w_{U,l} = Σ_t ω_{t,l} λ_{S_t,U}

so error = tr(WᵀW (AᵀΣ⁻¹A)⁺) = Σ_U dim U · Σ_l w_{U,l} Σ_{v at level l} Var(x̂_v), Var(x̂_v) the
GLS variance of place v's total when every place at level l is measured with precision
a_{U,l}: the tree's two passes give all of them in O(places) (Hay, Rastogi, Miklau and Suciu
2010: upward uᵥ = 1/(aᵥ + 1/Σ_c u_c); downward, the information from outside v's subtree
dᵥ = 1/(1/d_parent + a_parent) + Σ_siblings u_s, final 1/(1/uᵥ + 1/dᵥ)). A table without
consistency publishes its measurements: Σ_l ω cells v_{t,l}. ``tests/test_split.py`` checks
this against the dense tr(W (AᵀΣ⁻¹A)⁺ Wᵀ) on a small uneven tree.

**The SVD bound** (:func:`svd_bound`): for the workload W of every published cell of a group's
tables at every level (rows weighted by √ω) over the domain of n cells, every matrix-mechanism
strategy under ρ-zCDP with Gaussian noise has total squared error at least
Δ₂²·(Σ σᵢ(W))²/(2ρ·n) (Li and Miklau 2012, "An adaptive mechanism for accurate query answering
under differential privacy", the SVD bound, with column norm Δ₂ and σ² = Δ₂²/(2ρ)). σ(W) come from
the same subspaces: on U, √eig(Σ_l w_{U,l} T_lᵀT_l); the finest level's T is I, so vectors summing
to zero inside each parent of the finest places have eigenvalue w_{U,L}, and the rest is a small
dense problem over the parents.

**Cost.** One evaluation of the error (:class:`Objective`, a batch of splits at once) is one pass
of the tree per subspace U and split: O(splits·|U|·places); its exact gradient
(:func:`tree_adjoint`) three. The bound is a dense eigenproblem
over the parents of the finest places.

Pure: spec and plan only; numpy; never the data readers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprelease.accounting import Neighbouring
from dprelease.errors import InternalError
from dprelease.plan.sensitivities import sum_l1, sum_l2_squared
from dprelease.spec import RollupColumn, Spec, SumMeasure, Table


BOUND_MAX_PARENTS = 3000  # the SVD bound's dense eigenproblem: at most this many parents of the finest places
Floats = npt.NDArray[np.float64]


Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Part:
    """One auto measurement: table ``table`` (index into the spec's tables) at level ``level``."""

    table: int
    level: int
    key: str  # "table" or "table/level"
    k: float  # its noise variance is k / x**d per cell, in published units
    weight: float  # ω: the table's weight × the level's
    cells: int  # the cells it measures (places × the table's cells)


@dataclass(frozen=True)
class Group:
    """Tables post-processed together (or one table alone), over one geography."""

    units: tuple[int, ...]  # places per level, coarsest first
    parents: tuple[Ints | None, ...]  # per level, each place's parent index at the previous level (int64)
    sizes: tuple[int, ...]  # the group's dimensions' sizes
    scopes: tuple[tuple[int, ...], ...]  # per member, its dimensions (indices into sizes)
    members: tuple[tuple[int, ...], ...]  # per member, the indices of its parts, one per level
    consistent: bool


def auto_tables(spec: Spec) -> list[int]:
    return [i for i, t in enumerate(spec.tables) if t.auto is not None]


def problem(spec: Spec) -> tuple[list[Part], list[Group], Fraction, int]:
    if spec.definition == "approx" or spec.invariants:
        raise InternalError("auto is refused at validate under approx and with invariants")
    d = 1 if spec.definition == "zcdp" else 2
    relation = spec.relation
    parts: list[Part] = []
    index: dict[tuple[int, int], int] = {}
    for i in auto_tables(spec):
        t = spec.tables[i]
        weights = t.auto.weights  # type: ignore[union-attr]
        for j, (level, dims, _) in enumerate(t.measured()):
            index[(i, j)] = len(parts)
            parts.append(Part(i, j, t.name if level is None else f"{t.name}/{level}",
                              _k(t, relation, spec.dims_cells(dims), d), float(weights[j]), spec.dims_cells(dims)))
    explicit = sum((t.budget.amount for t in spec.tables if t.auto is None), Fraction(0))
    budget = spec.budget.amount - explicit
    if budget <= 0:
        raise InternalError("auto with nothing left is refused at validate")
    return parts, _groups(spec, index), budget, d


def _k(t: Table, relation: Neighbouring, cells: int, d: int) -> float:
    """k of the table's noise variance k/x^d, in published units (module docstring)."""
    if isinstance(t.measure, SumMeasure):
        m = t.measure
        if d == 1:
            return sum_l2_squared(m.low, m.high, m.granularity, relation, cells) * m.granularity ** 2 / 2
        return 2.0 * sum_l1(m.low, m.high, relation, cells) ** 2
    return relation.count_l2_squared / 2 if d == 1 else 2.0 * relation.count_l1 ** 2


def tree(spec: Spec, geographic: bool) -> tuple[tuple[int, ...], tuple[Ints | None, ...]]:
    if not geographic:
        return (1,), (None,)
    units: list[int] = [1]
    parents: list[Ints | None] = [None]
    for i, name in enumerate(spec.geography):
        units.append(spec.column(name).size)
        if i == 0:
            parents.append(np.zeros(units[-1], dtype=np.int64))
        else:
            up = spec.column(spec.geography[i - 1])
            assert isinstance(up, RollupColumn) and up.source == name
            parents.append(np.asarray(up.parent_of, dtype=np.int64))
    return tuple(units), tuple(parents)


def _groups(spec: Spec, index: dict[tuple[int, int], int]) -> list[Group]:
    by: dict[str, list[int]] = {}
    for i in auto_tables(spec):
        t = spec.tables[i]
        key = f"group:{t.consistency}" if t.consistency else f"table:{t.name}"
        by.setdefault(key, []).append(i)
    out = []
    for members in by.values():
        first = spec.tables[members[0]]
        dims = list(dict.fromkeys(c for i in members for c in spec.tables[i].group_by))
        units, parents = tree(spec, bool(first.levels))
        out.append(Group(units, parents, tuple(spec.column(c).size for c in dims),
                          tuple(tuple(dims.index(c) for c in spec.tables[i].group_by) for i in members),
                          tuple(tuple(index[(i, j)] for j in range(len(spec.tables[i].measured()))) for i in members),
                          first.post_process == "consistent"))
    return out


def _upward(units: Sequence[int], parents: Sequence[Ints | None], a: Floats) -> tuple[list[Floats], list[Floats]]:
    """The two passes' first, finest level up: per level, ``u`` (the variance of each place's
    bottom-up estimate) and ``s`` (its children's summed), for each row of ``a`` at once."""
    depth, rows = len(units), a.shape[0]
    u: list[Floats] = [np.empty(0)] * depth
    s: list[Floats] = [np.empty(0)] * depth
    u[-1] = np.repeat(1.0 / a[:, -1:], units[-1], axis=1)
    for lv in range(depth - 2, -1, -1):
        parent = parents[lv + 1]
        assert parent is not None
        s[lv] = np.zeros((rows, units[lv]))
        np.add.at(s[lv].T, parent, u[lv + 1].T)  # children into their parents (a view), in a fixed order
        u[lv] = s[lv] / (1.0 + a[:, lv:lv + 1] * s[lv])
    return u, s


def tree_variances(units: Sequence[int], parents: Sequence[Ints | None], a: Floats) -> list[Floats]:
    """Per level (coarsest first), the GLS variance of every place's total, (rows × places), when
    each place at level l is measured with precision ``a[:, l]`` (> 0 at the finest level), for
    each row of ``a`` at once: the two passes."""
    depth, rows = len(units), a.shape[0]
    u, s = _upward(units, parents, a)
    final: list[Floats] = [u[0]]
    outside = np.full((rows, units[0]), np.inf)  # information on a place's total from outside its subtree
    for lv in range(1, depth):
        parent = parents[lv]
        assert parent is not None
        with np.errstate(divide="ignore"):
            q = 1.0 / (1.0 / outside + a[:, lv - 1:lv])  # the parent's, without its children's subtrees
        outside = q[:, parent] + s[lv - 1][:, parent] - u[lv]
        final.append(1.0 / (1.0 / u[lv] + 1.0 / outside))  # outside = ∞ (nothing above): 1/∞ = 0
    return final


def subsets(scopes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    seen: dict[tuple[int, ...], None] = {}
    for scope in scopes:
        for r in range(len(scope) + 1):
            for u in itertools.combinations(sorted(scope), r):
                seen[u] = None
    return list(seen)


def eigen(g: Group, u: tuple[int, ...], scope: tuple[int, ...]) -> float:
    """λ_{S,U}: the eigenvalue of SᵀS on the subspace U (0 unless U ⊆ S)."""
    if not set(u) <= set(scope):
        return 0.0
    return float(math.prod(n for a, n in enumerate(g.sizes) if a not in scope))


class Objective:
    """x (one share per part) ↦ the weighted expected squared error of the published estimates;
    :meth:`batch` evaluates many x at once (one tree pass for all of them and every subspace)."""

    def __init__(self, parts: Sequence[Part], groups: Sequence[Group], d: int):
        self.d = d
        self.k = np.array([p.k for p in parts])
        self.separate: list[tuple[Ints, Floats]] = []  # (parts, ω × cells) of tables without consistency
        self.consistent: list[tuple[Group, Ints, Floats, Floats]] = []  # (group, parts M×L, λ U×M, dim·w U×L)
        for g in groups:
            if not g.consistent:
                for scope, member in zip(g.scopes, g.members):
                    cells = math.prod(g.sizes[a] for a in scope)
                    self.separate.append((np.array(member, dtype=np.int64),
                                          np.array([parts[i].weight * g.units[lv] * cells for lv, i in enumerate(member)])))
                continue
            spaces = subsets(g.scopes)
            lam = np.array([[eigen(g, u, scope) for scope in g.scopes] for u in spaces])
            dims = [math.prod(g.sizes[a] - 1 for a in u) for u in spaces]
            weighted = np.array([[dims[j] * math.fsum(lam[j, m] * parts[member[lv]].weight
                                                      for m, member in enumerate(g.members))
                                  for lv in range(len(g.units))] for j in range(len(spaces))])
            self.consistent.append((g, np.array(g.members, dtype=np.int64), lam, weighted))

    def batch(self, xs: Floats) -> Floats:
        """f at every row of ``xs`` (rows × parts)."""
        v = self.k / xs ** self.d
        total = np.zeros(xs.shape[0])
        for member, coefficient in self.separate:
            total = total + (v[:, member] * coefficient).sum(axis=1)
        for g, members, lam, weighted in self.consistent:
            precision = 1.0 / v[:, members]  # rows × M × L
            a = (lam[None, :, :, None] * precision[:, None, :, :]).sum(axis=2)  # rows × U × L
            rows, spaces, depth = a.shape
            final = tree_variances(g.units, g.parents, a.reshape(rows * spaces, depth))
            sums = np.stack([f.sum(axis=1).reshape(rows, spaces) for f in final], axis=2)  # rows × U × L
            total = total + (sums * weighted[None]).sum(axis=(1, 2))
        return total

    def __call__(self, x: Floats) -> float:
        return float(self.batch(x[None, :])[0])

    def per_cell(self, x: Floats, parts: Sequence[Part]) -> Floats:
        """Per part, the mean squared error of one of its published cells (the GLS estimate's
        variance averaged over the part's cells, unweighted): what a reader of that table at that
        level can expect, where a part's own noise (its margin) says little once the estimates
        draw on the other measurements."""
        v = self.k / x ** self.d
        out = v.copy()  # without consistency, the measurement is the estimate
        for g, members, lam, _ in self.consistent:
            precision = 1.0 / v[members]  # M × L
            a = (lam[:, :, None] * precision[None, :, :]).sum(axis=1)  # U × L
            spaces = subsets(g.scopes)
            dims = np.array([math.prod(g.sizes[b] - 1 for b in u) for u in spaces], dtype=np.float64)
            final = tree_variances(g.units, g.parents, a)
            sums = np.stack([f.sum(axis=1) for f in final], axis=1)  # U × L: Σ over the level's places
            total = ((dims[:, None, None] * lam[:, :, None]) * sums[:, None, :]).sum(axis=0)  # M × L
            for m, member in enumerate(g.members):
                for lv, i in enumerate(member):
                    out[i] = total[m, lv] / parts[i].cells
        return out

    def gradient(self, x: Floats) -> Floats:
        """−∂f/∂xᵢ, exactly: the tree's two passes differentiated in reverse (:func:`tree_adjoint`),
        then the chain rule through a_{U,l} = Σ_m λ_{U,m} xᵈ/k."""
        d = self.d
        out: Floats = np.zeros(len(x))
        for member, coefficient in self.separate:  # f = Σ coefficient·k/xᵈ
            np.add.at(out, member, d * coefficient * self.k[member] / x[member] ** (d + 1))
        for g, members, lam, weighted in self.consistent:
            precision = x[members] ** d / self.k[members]  # M × L
            a = (lam[:, :, None] * precision[None, :, :]).sum(axis=1)  # U × L
            abar = tree_adjoint(g.units, g.parents, a, weighted)  # ∂f/∂a, U × L
            dprecision = d * x[members] ** (d - 1) / self.k[members]  # ∂(xᵈ/k)/∂x, M × L
            by_part = (abar[:, None, :] * lam[:, :, None]).sum(axis=0) * dprecision  # M × L
            np.add.at(out, members.ravel(), -by_part.ravel())
        return out


def tree_adjoint(units: Sequence[int], parents: Sequence[Ints | None], a: Floats, c: Floats) -> Floats:
    """∂F/∂a for F = Σ_l c[:, l]·Σ_v final_l,v (each row of ``a`` and ``c`` one problem; final as
    :func:`tree_variances`), by reverse-mode differentiation of the two passes: one pass each
    way more. ``tests/test_split.py`` compares it with central differences."""
    depth, rows = len(units), a.shape[0]
    u, s = _upward(units, parents, a)
    outside: list[Floats] = [np.full((rows, units[0]), np.inf)]
    q: list[Floats] = [np.empty(0)] * depth
    final: list[Floats] = [u[0]]
    for lv in range(1, depth):
        parent = parents[lv]
        assert parent is not None
        with np.errstate(divide="ignore"):
            q[lv - 1] = 1.0 / (1.0 / outside[lv - 1] + a[:, lv - 1:lv])
        outside.append(q[lv - 1][:, parent] + s[lv - 1][:, parent] - u[lv])
        final.append(1.0 / (1.0 / u[lv] + 1.0 / outside[lv]))
    abar = np.zeros((rows, depth))
    ubar = [np.zeros((rows, n)) for n in units]
    sbar = [np.zeros((rows, n)) for n in units]
    obar = [np.zeros((rows, n)) for n in units]
    ubar[0] += c[:, :1]  # final_0 = u_0
    for lv in range(depth - 1, 0, -1):  # the downward pass, in reverse
        parent = parents[lv]
        assert parent is not None
        square = final[lv] ** 2
        ubar[lv] += c[:, lv:lv + 1] * square / u[lv] ** 2
        with np.errstate(invalid="ignore"):
            obar[lv] += np.where(np.isfinite(outside[lv]), c[:, lv:lv + 1] * square / outside[lv] ** 2, 0.0)
        qbar = np.zeros((rows, units[lv - 1]))
        np.add.at(qbar.T, parent, obar[lv].T)
        sbar[lv - 1] += qbar
        ubar[lv] -= obar[lv]
        qq = q[lv - 1] ** 2
        with np.errstate(invalid="ignore"):
            obar[lv - 1] += np.where(np.isfinite(outside[lv - 1]), qbar * qq / outside[lv - 1] ** 2, 0.0)
        abar[:, lv - 1] -= (qbar * qq).sum(axis=1)
    for lv in range(depth - 1):  # the upward pass, in reverse
        parent = parents[lv + 1]
        assert parent is not None
        grow = 1.0 + a[:, lv:lv + 1] * s[lv]
        sbar[lv] += ubar[lv] / grow ** 2
        abar[:, lv] -= (ubar[lv] * s[lv] ** 2 / grow ** 2).sum(axis=1)
        ubar[lv + 1] += sbar[lv][:, parent]
    abar[:, -1] -= (ubar[-1] / a[:, -1:] ** 2).sum(axis=1)  # u_L = 1/a_L
    return abar


def svd_bound(spec: Spec) -> float | None:
    """The SVD lower bound (module docstring) on the weighted error of the auto tables'
    published cells under zCDP at the budget they share, over every matrix-mechanism strategy;
    None unless the release is zcdp, its auto tables form one group and the finest places have at
    most ``BOUND_MAX_PARENTS`` parents (tables post-processed
    apart share a domain too, and a bound over a union of groups is not a sum of theirs)."""
    if spec.definition != "zcdp" or not auto_tables(spec):
        return None
    parts, groups, budget, _ = problem(spec)
    if len(groups) != 1 or len({p.k for p in parts}) != 1:
        return None
    g = groups[0]
    if len(g.units) > 1 and g.units[-2] > BOUND_MAX_PARENTS:
        return None  # a dense eigenproblem over that many parents costs more than a plan should
    total = 0.0
    for u in subsets(g.scopes):
        dim = math.prod(g.sizes[a] - 1 for a in u)
        lam = [eigen(g, u, scope) for scope in g.scopes]
        w = [math.fsum(lam[m] * parts[member[lv]].weight for m, member in enumerate(g.members))
             for lv in range(len(g.units))]
        total += dim * math.fsum(np.sqrt(tree_eigenvalues(g.units, g.parents, w)).tolist())
    n = g.units[-1] * math.prod(g.sizes)
    return parts[0].k * total ** 2 / (float(budget) * n)


def tree_eigenvalues(units: Sequence[int], parents: Sequence[Ints | None], w: Sequence[float]) -> Floats:
    """The eigenvalues of Σ_l w_l T_lᵀT_l over the finest places (T_l sums them into level l's):
    w_L on the vectors summing to zero inside every parent of the finest places, and a dense
    problem over those parents (orthonormal basis 1_{leaves of i}/√nᵢ) for the rest."""
    if len(units) == 1:
        return np.full(units[0], w[0])
    depth = len(units)
    up = depth - 2  # the finest places' parents
    leaf_parent = parents[-1]
    assert leaf_parent is not None
    sizes = np.bincount(leaf_parent, minlength=units[up]).astype(np.float64)
    dense: Floats = np.diag(np.full(units[up], w[-1]))
    ancestor: Ints = np.arange(units[up], dtype=np.int64)
    root = np.sqrt(sizes)
    for lv in range(up, -1, -1):  # the parents' level itself, then every coarser one
        same = ancestor[:, None] == ancestor[None, :]
        dense = dense + w[lv] * same * np.outer(root, root)
        if lv > 0:
            parent = parents[lv]
            assert parent is not None
            ancestor = parent[ancestor]
    inner = np.linalg.eigvalsh(dense)
    return np.concatenate([np.full(units[-1] - units[up], w[-1]), np.maximum(inner, 0.0)])
