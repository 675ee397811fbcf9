"""``epsilon: auto`` (``rho: auto``): the planner's split of what the release's budget leaves
across its auto tables and their levels, minimising the weighted expected squared error of the
*published estimates* (after the GLS consistency step, :mod:`dprelease.postprocess.gls`), not of
the raw noisy measurements (that is :mod:`.allocation`, ``plan --allocate``).

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

**The split.** The objective is convex in the shares: tr(WᵀW X⁻¹) is convex and
matrix-decreasing in X, and X = Σᵢ xᵢ Bᵢ (zCDP) or Σᵢ xᵢ² Bᵢ (pure) is linear or matrix-convex
in x. It is minimised over {x > 0, Σ x = B} (B: the release budget less the explicit tables')
by the multiplicative algorithm for optimal designs, xᵢ ← xᵢ gᵢ^{1/(d+1)} normalised to B
(gᵢ = −∂f/∂xᵢ, by central differences; Silvey, Titterington and Torsney 1978; for a separable
objective — no consistency — the closed form of :mod:`.allocation`, used as such). Every part
keeps at least B/(``FLOOR``·parts): under pure ε-DP the optimum may starve a level (precision ε²
makes small shares worthless), and a share of 0 has no noise the sampler takes.
Convexity gives a certificate: f(x*) ≥ f(x) − B·maxᵢ gᵢ + Σᵢ gᵢxᵢ, so the iteration stops when
that gap is below ``TOLERANCE`` × f, and the planner refuses (UserError) when it is not reached
within ``MAX_STEPS``: a split never depends on an optimiser's luck. Floats are used in the
search only, in a fixed sequence of numpy operations over fixed shapes (children summed into
parents by ``np.add.at``, in index order), so the same spec gives the same split on the same
software; the committed split is in the fingerprint, so a split that another platform rounds
differently asks for a new approval rather than being spent unseen.

**Cost.** Each step evaluates the objective at the 2P points of its central differences in one
batch: one pass of the tree for all of them and every subspace U, O(P·|U|·places). On
acs_census (2 tables × 3 levels, 20 PUMAs) 154 steps, about 0.03 s.

**The committed split.** Each share is rounded *down* to ``DIGITS`` significant digits as an
exact Fraction; the sum is checked exactly against the budget (what rounding leaves is unspent).
A table's budget is the exact sum of its levels'. The chosen split is written into the spec's
tables (:func:`resolve`), so the fingerprint a reviewer approves covers it: a split that changes
needs a new approval.

**Supported**: count and sum tables with the default mechanism (discrete Gaussian under zCDP,
discrete Laplace under pure). Refused at ``validate`` (with the reason): means, modes, quantiles,
the truncated geometric, (ε, δ) releases, releases with invariants, consistency groups mixing
auto and explicit tables. Structural zeros (which get no noise) are counted as measured: the
objective is then an upper bound of their error.

**The SVD bound** (:func:`svd_bound`): for the workload W of every published cell of a group's
tables at every level (rows weighted by √ω) over the domain of n cells, every matrix-mechanism
strategy under ρ-zCDP with Gaussian noise has total squared error at least
Δ₂²·(Σ σᵢ(W))²/(2ρ·n) (Li and Miklau 2012, "An adaptive mechanism for accurate query answering
under differential privacy", the SVD bound, with column norm Δ₂ and σ² = Δ₂²/(2ρ)). σ(W) come from
the same subspaces: on U, √eig(Σ_l w_{U,l} T_lᵀT_l); the finest level's T is I, so vectors summing
to zero inside each parent of the finest places have eigenvalue w_{U,L}, and the rest is a small
dense problem over the parents.

Pure: spec and plan only; numpy; never the data readers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprelease.accounting import Neighbouring, budget_of, fraction_text
from dprelease.accounting.exact import decimal_text, round_significant
from dprelease.errors import InternalError, UserError
from dprelease.plan.sensitivities import sum_l1, sum_l2_squared
from dprelease.spec import RollupColumn, Spec, SumMeasure, Table

DIGITS = 4  # significant digits of a committed share (rounded down)
TOLERANCE = 1e-7  # relative duality gap the search must reach
MAX_STEPS = 5000
FLOOR = 1000  # every part keeps at least budget/(FLOOR·parts)
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
class _Group:
    """Tables post-processed together (or one table alone), over one geography."""

    units: tuple[int, ...]  # places per level, coarsest first
    parents: tuple[Ints | None, ...]  # per level, each place's parent index at the previous level (int64)
    sizes: tuple[int, ...]  # the group's dimensions' sizes
    scopes: tuple[tuple[int, ...], ...]  # per member, its dimensions (indices into sizes)
    members: tuple[tuple[int, ...], ...]  # per member, the indices of its parts, one per level
    consistent: bool


@dataclass(frozen=True, slots=True)
class Split:
    """The planner's split: per auto part its committed share, and how it was found."""

    symbol: str
    budget: Fraction  # what the auto tables share (the release's less the explicit tables')
    keys: tuple[str, ...]
    shares: tuple[Fraction, ...]  # committed: rounded down, Σ ≤ budget exactly
    weights: tuple[Fraction, ...]
    error: float  # the objective at the committed shares
    equal_error: float  # at an equal split of ``budget`` across the parts
    separate_error: float  # at the measurements' own closed form (``plan --allocate``'s)
    gap: float  # relative certificate of the search's optimum
    steps: int
    method: str
    bound: float | None = None  # the SVD lower bound at ``budget`` (zcdp, one group), for comparison

    @property
    def unspent(self) -> Fraction:
        return self.budget - sum(self.shares, Fraction(0))

    def record(self) -> dict[str, object]:
        """The split as plan --json, the manifest and the report state it (shares exact)."""
        return {
            "method": self.method, "shared": fraction_text(self.budget), "unit": "rho" if self.symbol == "ρ" else "epsilon",
            "shares": [{"measurement": k, "share": fraction_text(s), "weight": fraction_text(w)}
                       for k, s, w in zip(self.keys, self.shares, self.weights)],
            "unspent": fraction_text(self.unspent),
            "objective": "weighted expected squared error of the published (post-processed) estimates",
            "error": self.error, "equal_split_error": self.equal_error, "measurements_closed_form_error": self.separate_error,
            "svd_lower_bound": self.bound, "certified_relative_gap": self.gap, "steps": self.steps,
        }

    def lines(self) -> list[str]:
        """The split in words (plan, report)."""
        return split_lines(self.record())


def split_lines(record: dict[str, object]) -> list[str]:
    """A split's record (:meth:`Split.record`, as plan --json and the manifest hold it) in words."""
    symbol = "ρ" if record["unit"] == "rho" else "ε"
    shares = record["shares"]
    assert isinstance(shares, list)
    error, equal, separate, bound = (record[k] for k in ("error", "equal_split_error",
                                                          "measurements_closed_form_error", "svd_lower_bound"))
    assert isinstance(error, float) and isinstance(equal, float) and isinstance(separate, float)
    out = [f"{symbol} chosen by the planner ({symbol}: auto; {record['method']}): "
           f"{decimal_text(Fraction(str(record['shared'])), 8)} shared so as to minimise the weighted expected "
           "squared error of the published (post-processed) estimates"]
    out += [f"  {s['measurement']}: {symbol} = {decimal_text(Fraction(s['share']), 8)}"
            + ("" if s["weight"] == "1" else f" (weight {s['weight']})") for s in shares]
    out.append(f"  expected error: {error:,.6g}; an equal split: {equal / error:.4f}×; the measurements' own "
               f"closed form (plan --allocate): {separate / error:.4f}×"
               + (f"; {error / bound:.4f}× the SVD lower bound" if isinstance(bound, float) else ""))
    unspent = Fraction(str(record["unspent"]))
    if unspent:
        out.append(f"  unspent by rounding down: {symbol} = {decimal_text(unspent, 8)}")
    return out


def auto_tables(spec: Spec) -> list[int]:
    return [i for i, t in enumerate(spec.tables) if t.auto is not None]


def resolve(spec: Spec) -> Spec:
    """``spec`` with its auto tables' budgets replaced by the planner's split (unchanged when it
    has none, or when they are chosen already: a saved spec's). Raises UserError when no split
    with a certified optimum is found."""
    todo = [i for i in auto_tables(spec) if not spec.tables[i].auto.chosen]  # type: ignore[union-attr]
    if not todo:
        return spec
    return apply(spec, choose(spec))


def apply(spec: Spec, split: Split) -> Spec:
    """The spec with ``split``'s shares in its auto tables, marked chosen."""
    by_key = dict(zip(split.keys, split.shares))
    tables = list(spec.tables)
    for i in auto_tables(spec):
        t = spec.tables[i]
        auto = t.auto
        assert auto is not None
        if t.levels:
            levels = tuple(budget_of(spec.definition, by_key[f"{t.name}/{lv}"]) for lv in t.levels)
            total = sum((b.amount for b in levels), Fraction(0))
            tables[i] = replace(t, budget=budget_of(spec.definition, total), level_budgets=levels,
                                auto=replace(auto, chosen=True))
        else:
            tables[i] = replace(t, budget=budget_of(spec.definition, by_key[t.name]), auto=replace(auto, chosen=True))
    return replace(spec, tables=tuple(tables))


def choose(spec: Spec) -> Split:
    """The split of the budget the explicit tables leave, minimising the weighted error of the
    published estimates (module docstring)."""
    parts, groups, budget, d = _problem(spec)
    keys = tuple(p.key for p in parts)
    weights = tuple(_weights(spec)[p.key] for p in parts)
    objective = _Objective(parts, groups, d)
    separate = _separate(parts, budget, d)
    exact = _closed_form(parts, budget, d) if all(not g.consistent for g in groups) else None
    if exact is not None:  # no consistency: the measurements' error is the published one's, in closed form
        x, steps, gap = np.array([float(v) for v in exact]), 0, 0.0
    else:
        x, steps, gap = _search(objective, separate, budget, d)
    if gap > TOLERANCE:
        raise UserError(f"{spec.source}: {spec.symbol}: auto: the planner's search did not certify an optimum "
                        f"within {MAX_STEPS} steps (relative gap {gap:.1e}); write the tables' budgets explicitly "
                        "(``dprelease plan --allocate`` proposes a split)")
    shares = tuple(round_significant(v if exact is not None else Fraction(float(v)), DIGITS, up=False)
                   for v in (exact if exact is not None else x))
    if sum(shares, Fraction(0)) > budget:
        raise InternalError("the auto split sums over its budget after rounding down")
    committed = np.array([float(s) for s in shares])
    return Split(spec.symbol, budget, keys, shares, weights, objective(committed),
                 objective(np.full(len(parts), float(budget) / len(parts))), objective(separate), gap, steps,
                 "closed form" if all(not g.consistent for g in groups) else "convex search, certified",
                 svd_bound(spec))


def _weights(spec: Spec) -> dict[str, Fraction]:
    out = {}
    for t in spec.tables:
        if t.auto is None:
            continue
        for j, (level, _, _) in enumerate(t.measured()):
            out[t.name if level is None else f"{t.name}/{level}"] = t.auto.weights[j]
    return out


def _problem(spec: Spec) -> tuple[list[Part], list[_Group], Fraction, int]:
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


def _tree(spec: Spec, geographic: bool) -> tuple[tuple[int, ...], tuple[Ints | None, ...]]:
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


def _groups(spec: Spec, index: dict[tuple[int, int], int]) -> list[_Group]:
    by: dict[str, list[int]] = {}
    for i in auto_tables(spec):
        t = spec.tables[i]
        key = f"group:{t.consistency}" if t.consistency else f"table:{t.name}"
        by.setdefault(key, []).append(i)
    out = []
    for members in by.values():
        first = spec.tables[members[0]]
        dims = list(dict.fromkeys(c for i in members for c in spec.tables[i].group_by))
        units, parents = _tree(spec, bool(first.levels))
        out.append(_Group(units, parents, tuple(spec.column(c).size for c in dims),
                          tuple(tuple(dims.index(c) for c in spec.tables[i].group_by) for i in members),
                          tuple(tuple(index[(i, j)] for j in range(len(spec.tables[i].measured()))) for i in members),
                          first.post_process == "consistent"))
    return out


def tree_variances(units: Sequence[int], parents: Sequence[Ints | None], a: Floats) -> list[Floats]:
    """Per level (coarsest first), the GLS variance of every place's total, (rows × places), when
    each place at level l is measured with precision ``a[:, l]`` (> 0 at the finest level), for
    each row of ``a`` at once: the two passes."""
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


def _subsets(scopes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    seen: dict[tuple[int, ...], None] = {}
    for scope in scopes:
        for r in range(len(scope) + 1):
            for u in itertools.combinations(sorted(scope), r):
                seen[u] = None
    return list(seen)


def _eigen(g: _Group, u: tuple[int, ...], scope: tuple[int, ...]) -> float:
    """λ_{S,U}: the eigenvalue of SᵀS on the subspace U (0 unless U ⊆ S)."""
    if not set(u) <= set(scope):
        return 0.0
    return float(math.prod(n for a, n in enumerate(g.sizes) if a not in scope))


class _Objective:
    """x (one share per part) ↦ the weighted expected squared error of the published estimates;
    :meth:`batch` evaluates many x at once (one tree pass for all of them and every subspace)."""

    def __init__(self, parts: Sequence[Part], groups: Sequence[_Group], d: int):
        self.d = d
        self.k = np.array([p.k for p in parts])
        self.separate: list[tuple[Ints, Floats]] = []  # (parts, ω × cells) of tables without consistency
        self.consistent: list[tuple[_Group, Ints, Floats, Floats]] = []  # (group, parts M×L, λ U×M, dim·w U×L)
        for g in groups:
            if not g.consistent:
                for scope, member in zip(g.scopes, g.members):
                    cells = math.prod(g.sizes[a] for a in scope)
                    self.separate.append((np.array(member, dtype=np.int64),
                                          np.array([parts[i].weight * g.units[lv] * cells for lv, i in enumerate(member)])))
                continue
            subsets = _subsets(g.scopes)
            lam = np.array([[_eigen(g, u, scope) for scope in g.scopes] for u in subsets])
            dims = [math.prod(g.sizes[a] - 1 for a in u) for u in subsets]
            weighted = np.array([[dims[j] * math.fsum(lam[j, m] * parts[member[lv]].weight
                                                      for m, member in enumerate(g.members))
                                  for lv in range(len(g.units))] for j in range(len(subsets))])
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
            rows, subsets, depth = a.shape
            final = tree_variances(g.units, g.parents, a.reshape(rows * subsets, depth))
            sums = np.stack([f.sum(axis=1).reshape(rows, subsets) for f in final], axis=2)  # rows × U × L
            total = total + (sums * weighted[None]).sum(axis=(1, 2))
        return total

    def __call__(self, x: Floats) -> float:
        return float(self.batch(x[None, :])[0])

    def gradient(self, x: Floats) -> Floats:
        """−∂f/∂xᵢ by central differences (relative step 10⁻⁵), every one in one batch."""
        h = x * 1e-5
        steps = np.diag(h)
        values = self.batch(np.concatenate([x[None, :] - steps, x[None, :] + steps]))
        n = len(x)
        out: Floats = (values[:n] - values[n:]) / (2 * h)
        return out


def _separate(parts: Sequence[Part], budget: Fraction, d: int) -> Floats:
    """The measurements' own closed form (``plan --allocate``'s): xᵢ = B·(ωᵢcᵢkᵢ)^(1/(d+1)) / Σⱼ …,
    which minimises the raw measurements' error Σ ωᵢcᵢkᵢ/xᵢᵈ (cᵢ the part's cells)."""
    roots = np.array([(p.weight * p.cells * p.k) ** (1.0 / (d + 1)) for p in parts])
    return roots * (float(budget) / math.fsum(roots.tolist()))


def _closed_form(parts: Sequence[Part], budget: Fraction, d: int) -> list[Fraction] | None:
    """Without consistency, xᵢ = B·(ωᵢcᵢkᵢ)^(1/(d+1)) / Σⱼ … exactly (60-digit roots, as
    ``plan --allocate``'s :func:`~dprelease.plan.allocation.closed_form`); None when a share
    falls below the floor (then the search, which keeps it)."""
    from dprelease.plan.allocation import closed_form

    coefficients = {str(i): Fraction(p.weight) * p.cells * Fraction(p.k) for i, p in enumerate(parts)}
    shares = closed_form(coefficients, budget, Fraction(1, d + 1))
    out = [shares[str(i)] for i in range(len(parts))]
    return None if min(out) < budget / (FLOOR * len(parts)) else out


def _search(f: _Objective, start: Floats, budget: Fraction, d: int) -> tuple[Floats, int, float]:
    """The multiplicative algorithm from ``start`` until the convexity gap is below TOLERANCE·f,
    over x = m + y (y ≥ 0, Σ x = B): every part keeps at least m = B/(FLOOR·parts), so a level
    the optimum would starve (under pure ε-DP a precision ε² makes small shares worthless) still
    gets noise the exact sampler takes. The certificate is the convexity bound over that set."""
    b = float(budget)
    m = b / (FLOOR * len(start))
    free = b - m * len(start)
    y = np.maximum(start - m, free * 1e-3 / len(start))
    y = y * (free / math.fsum(y.tolist()))
    gap = math.inf
    for step in range(MAX_STEPS):
        x = m + y
        value, g = f(x), f.gradient(x)
        gap = (free * float(np.max(g)) - math.fsum((g * y).tolist())) / value
        if gap <= TOLERANCE:
            return x, step, max(gap, 0.0)
        moved = y * np.power(np.maximum(g, 1e-300), 1.0 / (d + 1))
        y = moved * (free / math.fsum(moved.tolist()))
    return m + y, MAX_STEPS, gap


def svd_bound(spec: Spec) -> float | None:
    """The SVD lower bound (module docstring) on the weighted error of the auto tables'
    published cells under zCDP at the budget they share, over every matrix-mechanism strategy;
    None unless the release is zcdp and its auto tables form one group (tables post-processed
    apart share a domain too, and a bound over a union of groups is not a sum of theirs)."""
    if spec.definition != "zcdp" or not auto_tables(spec):
        return None
    parts, groups, budget, _ = _problem(spec)
    if len(groups) != 1 or len({p.k for p in parts}) != 1:
        return None
    g = groups[0]
    total = 0.0
    for u in _subsets(g.scopes):
        dim = math.prod(g.sizes[a] - 1 for a in u)
        lam = [_eigen(g, u, scope) for scope in g.scopes]
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
